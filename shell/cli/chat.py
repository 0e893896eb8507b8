"""`cordstream chat`: a real model's answer, streamed through `run_turn` into Discord.

By default the answer goes into the embedded Discord emulator (no Discord token needed) and
the channel is printed as a user sees it, as `cordstream demo` does. With `--channel-id` and
a bot token (`--discord-token` or `DISCORD_TOKEN`) it goes into that real channel instead;
only Discord's REST API is used, so no gateway intents are needed, but the bot must be able
to post there.

The model is any of the three adapters (`--provider openai|anthropic|gemini`), built on the
official SDK, with `--base-url` for a compatible or local endpoint (Ollama, vLLM, LM Studio,
OpenRouter, or a test server). The key comes from `--api-key`, else the provider's usual
environment variable (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `GEMINI_API_KEY`/
`GOOGLE_API_KEY`); a local endpoint that needs none gets a placeholder.

Two demo tools are offered to the model (`roll_dice`, `current_time`) unless `--no-tools`, so
a tool-capable model shows the whole tool loop: segment, tool round, answer.

The answer is delivered live by default (`--delivery live`: one message edited as the answer
grows, a new one when it is full); `--delivery messages` sends a new message per piece, cut
as `--humanizer` says. In the emulator, each new message and each edit is printed the moment
the channel accepts it, as the demo's log does (`console.Log`; with `--delivery messages`, a
line per message), so a slow model does not look hung. The exit status
(`outcome`) is 0 when the turn completed, 1 when it ended any other way (an `error` turn says
in one line on stderr what the model server answered), and 2 when the model server or Discord
could not be reached, Discord refused the token or the channel, or the provider's SDK is not
installed: one line on stderr that names the address or the extra, never a traceback. That
line comes before the report (the channel as a user sees it, and the turn), which follows
only when some of the answer reached the channel: an error embed alone says nothing more.
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import discord
import discord.http

from cordstream.domain import ProviderError
from cordstream.domain.config import Delivery
from cordstream.shell.cli.console import (
    Failure,
    Printer,
    could_not_connect,
    delivery_options,
    http_url,
    local_channel,
    log_options,
    positive_seconds,
    positive_tokens,
    render,
    why,
)
from cordstream.shell.cli.dice import roll_dice
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext
from cordstream.shell.orchestrator import StreamOrchestrator
from cordstream.shell.providers.base import ToolProvider
from cordstream.shell.stops import StopRegistry
from cordstream.shell.turn import Tool, TurnResult, run_turn

if TYPE_CHECKING:  # the test kit runs only in the local emulator (console.local_channel)
    from cordstream.shell.testing.emulator import SentMessage

ProviderKind = Literal["openai", "anthropic", "gemini"]

KEY_VARIABLES: Mapping[ProviderKind, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
# What a local endpoint gets when no key is set: the SDKs refuse to start without one.
PLACEHOLDER_KEY = "not-needed"
# The SDK each provider needs, and the extra that installs it.
SDK_MODULES: Mapping[ProviderKind, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google.genai",
}


@dataclass(frozen=True)
class ChatOptions:
    prompt: str
    provider: ProviderKind = "openai"
    model: str = ""
    base_url: str | None = None
    api_key: str | None = None
    system: str | None = None
    max_tokens: int = 1024
    tools: bool = True
    discord_token: str | None = None
    channel_id: int | None = None
    timeout: float = 120.0
    humanizer: int = 1  # messages delivery only (SPEC L11)
    delivery: Delivery = "live"


# --- the demo tools ---------------------------------------------------------------------


async def current_time(arguments: Mapping[str, object]) -> object:
    """The current UTC time, ISO 8601."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


DEMO_TOOLS: Mapping[str, Tool] = {"roll_dice": roll_dice, "current_time": current_time}

_SCHEMAS: Mapping[str, tuple[str, dict[str, object]]] = {
    "roll_dice": (
        "Roll dice. Use it whenever the user asks for a random roll.",
        {
            "type": "object",
            "properties": {
                "sides": {"type": "integer", "description": "faces per die", "minimum": 2},
                "count": {"type": "integer", "description": "how many dice", "minimum": 1},
            },
        },
    ),
    "current_time": (
        "The current date and time in UTC.",
        {"type": "object", "properties": {}},
    ),
}


def tool_specs(kind: ProviderKind) -> list[Any]:
    """The demo tools' declarations in `kind`'s own format."""
    if kind == "openai":
        return [
            {
                "type": "function",
                "function": {"name": name, "description": text, "parameters": schema},
            }
            for name, (text, schema) in _SCHEMAS.items()
        ]
    if kind == "anthropic":
        return [
            {"name": name, "description": text, "input_schema": schema}
            for name, (text, schema) in _SCHEMAS.items()
        ]
    declarations = [
        {"name": name, "description": text, "parameters_json_schema": schema}
        for name, (text, schema) in _SCHEMAS.items()
    ]
    return [{"function_declarations": declarations}]


# --- providers ---------------------------------------------------------------------------


def api_key(kind: ProviderKind, given: str | None, environ: Mapping[str, str]) -> str:
    """`given`, else the provider's environment variable, else a placeholder for local use."""
    if given:
        return given
    for variable in KEY_VARIABLES[kind]:
        if environ.get(variable):
            return environ[variable]
    return PLACEHOLDER_KEY


@dataclass(frozen=True)
class Model:
    """The adapter, the address its SDK client sends requests to, and how to close that client
    (the adapters never close the caller's client)."""

    provider: ToolProvider[Any]
    url: str
    close: Callable[[], Awaitable[None]]


def build_model(options: ChatOptions, environ: Mapping[str, str]) -> Model:
    """The adapter for `options.provider`, on a fresh SDK client. An SDK that is not installed
    is a `Failure` naming the extra that installs it."""
    try:
        return _build_model(options, environ)
    except ImportError as missing:
        kind = options.provider
        sdk = SDK_MODULES[kind]
        absent = isinstance(missing, ModuleNotFoundError) and f"{sdk}.".startswith(
            f"{missing.name}."
        )
        problem = "is not installed" if absent else f"cannot be imported ({missing})"
        raise Failure(
            f"--provider {kind} needs the {sdk} SDK, which {problem}: "
            f"pip install 'cordstream[{kind}]'"
        ) from missing
    except Exception as refused:  # the SDK refused its options (an address it cannot use …)
        given = f" with --base-url {options.base_url!r}" if options.base_url else ""
        raise Failure(
            f"cannot create the {options.provider} client{given}: "
            f"{type(refused).__name__}: {refused}"
        ) from refused


def _url(value: object) -> str:
    return str(value).rstrip("/")


def _build_model(options: ChatOptions, environ: Mapping[str, str]) -> Model:
    key = api_key(options.provider, options.api_key, environ)
    tools = tool_specs(options.provider) if options.tools else None
    if options.provider == "openai":
        import openai  # noqa: PLC0415 - optional extra

        from cordstream.shell.providers.openai import OpenAIChatProvider  # noqa: PLC0415

        messages: list[dict[str, str]] = []
        if options.system:
            messages.append({"role": "system", "content": options.system})
        messages.append({"role": "user", "content": options.prompt})
        client = openai.AsyncOpenAI(api_key=key, base_url=options.base_url)
        provider = OpenAIChatProvider(client, model=options.model, messages=messages, tools=tools)
        return Model(provider, _url(client.base_url), client.close)
    if options.provider == "anthropic":
        import anthropic  # noqa: PLC0415 - optional extra

        from cordstream.shell.providers.anthropic import AnthropicProvider  # noqa: PLC0415

        anthropic_client = anthropic.AsyncAnthropic(api_key=key, base_url=options.base_url)
        anthropic_provider = AnthropicProvider(
            anthropic_client,
            model=options.model,
            messages=[{"role": "user", "content": options.prompt}],
            max_tokens=options.max_tokens,
            system=options.system,
            tools=tools,
        )
        return Model(anthropic_provider, _url(anthropic_client.base_url), anthropic_client.close)
    from google import genai  # noqa: PLC0415 - optional extra
    from google.genai import types  # noqa: PLC0415

    from cordstream.shell.providers.gemini import GeminiProvider  # noqa: PLC0415

    http = types.HttpOptions(base_url=options.base_url) if options.base_url else None
    gemini_client = genai.Client(api_key=key, http_options=http)
    config: dict[str, object] = {"max_output_tokens": options.max_tokens}
    if options.system:
        config["system_instruction"] = options.system
    if tools:
        config["tools"] = tools
    gemini_provider = GeminiProvider(
        gemini_client,
        model=options.model,
        contents=options.prompt,
        config=types.GenerateContentConfig.model_validate(config),
    )
    # The SDK's own resolved address (a private attribute, read defensively).
    resolved = getattr(getattr(gemini_client, "_api_client", None), "_http_options", None)
    url = getattr(resolved, "base_url", None) or options.base_url or "the Gemini API"
    return Model(gemini_provider, _url(url), gemini_client.aio.aclose)


# --- running -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatRun:
    """What `run` did: the turn, the model server's address (for `outcome`), and the report
    to print after it: the channel as a user sees it (the emulator) and the turn."""

    turn: TurnResult
    model_url: str
    report: str


async def run(
    options: ChatOptions, out: Printer = print, environ: Mapping[str, str] | None = None
) -> ChatRun:
    """Stream one answer from the model into Discord, printing each new message (and, live,
    each edit) as the channel accepts it (the emulator); the report (the channel and the
    turn) is returned, for the command to print after its one-line verdict (`outcome`).

    A problem outside the turn (an SDK not installed, Discord unreachable or refusing the
    token or the channel, the emulator unable to listen) is a `Failure`; whatever the model
    does is in the turn. The SDK client is closed on every exit, cancellation included.
    """
    environ = os.environ if environ is None else environ
    config = config_for(options)
    model = build_model(options, environ)
    shown: list[str] = []
    try:
        tools = DEMO_TOOLS if options.tools else {}
        orchestrator = StreamOrchestrator(StopRegistry())
        async with _destination(options, out) as (context, transcript):
            turn = await run_turn(orchestrator, model.provider, context, tools=tools, config=config)
            if transcript is not None:
                shown.append(render(turn.final, transcript()))
    finally:
        await model.close()
    return ChatRun(turn, model.url, "\n".join([*shown, describe_turn(turn)]))


def config_for(options: ChatOptions) -> StreamConfig:
    """The `StreamConfig` the chat streams with. A bad option is a `ValueError`."""
    return StreamConfig(
        inactivity_timeout=options.timeout,
        humanizer_degree=options.humanizer,
        delivery=options.delivery,
    )


async def run_chat(
    options: ChatOptions, out: Printer = print, environ: Mapping[str, str] | None = None
) -> TurnResult:
    """`run`, for the turn alone, with the report printed (`out`) at the end."""
    ran = await run(options, out, environ)
    out(ran.report)
    return ran.turn


def outcome(chat: ChatRun) -> tuple[int, str | None]:
    """The exit status, and the one line for stderr: 0 when the turn completed; 2 when the
    model server could not be reached (`cannot reach the model server at URL: connection
    refused`); otherwise 1, with a line saying what the model server answered when the turn
    ended in an error."""
    turn = chat.turn
    if turn.status == "completed":
        return 0, None
    if turn.status != "error":
        return 1, None
    error = turn.error if turn.error is not None else turn.final.data
    if isinstance(error, ProviderError):
        original = error.original
        if isinstance(original, BaseException) and could_not_connect(original):
            return 2, f"cannot reach the model server at {chat.model_url}: {why(original)}"
        status = getattr(original, "status_code", None)
        answered = f"answered HTTP {status}" if isinstance(status, int) else "failed"
        return 1, f"the model server at {chat.model_url} {answered}: {error.message}"
    if isinstance(error, BaseException):
        return 1, f"the turn ended in an error: {type(error).__name__}: {error}"
    return 1, "the turn ended in an error"


@asynccontextmanager
async def _destination(
    options: ChatOptions, out: Printer
) -> AsyncIterator[tuple[StreamContext, Callable[[], list[SentMessage]] | None]]:
    """The emulator's channel with a user question to reply to, or the real channel."""
    target = f"cordstream chat: {options.provider} {options.model}"
    if options.channel_id is None:
        edits = options.delivery == "live"
        async with local_channel(options.prompt, out, edits) as local:
            out(f"{target} → local Discord emulator, {options.delivery} delivery")
            yield (
                StreamContext(local.channel, reply_to=local.question),
                local.api.messages,
            )
        return
    if not options.discord_token:
        raise Failure("a real channel needs a Discord token (--discord-token or DISCORD_TOKEN)")
    base = discord.http.Route.BASE
    real = discord.Client(intents=discord.Intents.none())
    try:
        try:
            await real.login(options.discord_token)
        except discord.LoginFailure as refused:
            raise Failure(f"Discord at {base} refused the bot token: {refused}") from refused
        except discord.HTTPException as refused:
            raise Failure(f"Discord at {base} refused the login: {refused}") from refused
        except (aiohttp.ClientError, OSError) as error:
            raise _unreachable(base, error) from error
        try:
            found = await real.fetch_channel(options.channel_id)
        except discord.HTTPException as refused:
            raise Failure(
                f"Discord at {base} refused channel {options.channel_id}: {refused}"
            ) from refused
        except (aiohttp.ClientError, OSError) as error:
            raise _unreachable(base, error) from error
        if not isinstance(found, discord.abc.Messageable):
            raise Failure(f"channel {options.channel_id} cannot receive messages")
        out(f"{target} → channel {found.id}, {options.delivery} delivery")
        yield StreamContext(found), None
    finally:
        await real.close()


def _unreachable(base: str, error: BaseException) -> Failure:
    if could_not_connect(error):
        return Failure(f"cannot reach Discord at {base}: {why(error)}")
    return Failure(f"Discord at {base} failed: {why(error)}")


def describe_turn(turn: TurnResult) -> str:
    """The turn in a few lines: status, segments, tools, usage."""
    segments = " → ".join(segment.status for segment in turn.segments)
    lines = [
        "",
        "══════ TurnResult ══════",
        f"status:          {turn.status}",
        f"segments:        {segments}",
        f"messages_sent:   {turn.messages_sent}",
        f"usage:           {turn.usage}{' (estimated)' if turn.usage_estimated else ''}",
    ]
    for run in turn.tool_runs:
        arguments = dict(run.call.arguments)
        lines.append(f"tool:            {run.call.name}({arguments}) → {run.outcome.output:.200}")
    return "\n".join(lines)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = commands.add_parser(
        "chat",
        help="stream a real model's answer into Discord (the local emulator by default)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    chat.set_defaults(command_parser=chat)  # its errors say `cordstream chat: error: …`
    chat.add_argument("prompt", help="what the user asks")
    chat.add_argument(
        "--provider",
        choices=("openai", "anthropic", "gemini"),
        default="openai",
        help="which SDK and API speaks to the model (openai, also for compatible servers "
        "such as Ollama, vLLM or LM Studio); anthropic and gemini need their extra",
    )
    chat.add_argument(
        "--model", default=os.environ.get("CORDSTREAM_MODEL"), help="model name ($CORDSTREAM_MODEL)"
    )
    chat.add_argument(
        "--base-url", type=http_url, help="API endpoint, e.g. http://127.0.0.1:11434/v1 (Ollama)"
    )
    chat.add_argument("--api-key", help="overrides the provider's environment variable")
    chat.add_argument("--system", help="a system prompt")
    chat.add_argument("--max-tokens", type=positive_tokens, default=1024, help="answer cap (1024)")
    chat.add_argument("--no-tools", action="store_true", help="do not offer the demo tools")
    chat.add_argument(
        "--discord-token",
        default=os.environ.get("DISCORD_TOKEN"),
        help="the bot token for --channel-id ($DISCORD_TOKEN)",
    )
    chat.add_argument(
        "--channel-id", type=int, help="stream into this real channel instead of the emulator"
    )
    chat.add_argument(
        "--timeout", type=positive_seconds, default=120.0, help="inactivity timeout (120 s)"
    )
    delivery_options(chat)
    log_options(chat)


def options_from(args: argparse.Namespace) -> ChatOptions:
    return ChatOptions(
        prompt=args.prompt,
        provider=args.provider,
        model=args.model or "",
        base_url=args.base_url,
        api_key=args.api_key,
        system=args.system,
        max_tokens=args.max_tokens,
        tools=not args.no_tools,
        discord_token=args.discord_token,
        channel_id=args.channel_id,
        timeout=args.timeout,
        humanizer=args.humanizer,
        delivery=args.delivery,
    )


def check(options: ChatOptions) -> str | None:
    """What is wrong with `options` for a command line, or None."""
    if not options.model:
        return "--model (or CORDSTREAM_MODEL) is required"
    if options.channel_id is not None and not options.discord_token:
        return "--channel-id needs --discord-token (or DISCORD_TOKEN)"
    if options.max_tokens < 1:
        return "--max-tokens must be positive"
    return None
