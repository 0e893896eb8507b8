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
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import discord

from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext
from cordstream.shell.demo import render
from cordstream.shell.emulator import DiscordEmulator, SentMessage, discord_client
from cordstream.shell.orchestrator import StreamOrchestrator
from cordstream.shell.providers.base import ToolProvider
from cordstream.shell.stops import StopRegistry
from cordstream.shell.turn import Tool, TurnResult, run_turn

ProviderKind = Literal["openai", "anthropic", "gemini"]
Printer = Callable[[str], None]

KEY_VARIABLES: Mapping[ProviderKind, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
# What a local endpoint gets when no key is set: the SDKs refuse to start without one.
PLACEHOLDER_KEY = "not-needed"


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
    humanizer: int = 1


# --- the demo tools ---------------------------------------------------------------------


async def roll_dice(arguments: Mapping[str, object]) -> object:
    """Roll `count` dice with `sides` sides each."""
    sides, count = arguments.get("sides", 6), arguments.get("count", 1)
    if not isinstance(sides, int) or not isinstance(count, int) or sides < 2 or count < 1:
        raise ValueError("sides must be an integer ≥ 2 and count an integer ≥ 1")
    rolls = [random.randint(1, sides) for _ in range(min(count, 100))]  # a game, not a secret
    return {"rolls": rolls, "total": sum(rolls)}


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


def build_provider(options: ChatOptions, environ: Mapping[str, str]) -> ToolProvider[Any]:
    """The adapter for `options.provider`, on a fresh SDK client (ImportError names the extra)."""
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
        return OpenAIChatProvider(
            client,
            model=options.model,
            messages=messages,
            tools=tools,
        )
    if options.provider == "anthropic":
        import anthropic  # noqa: PLC0415 - optional extra

        from cordstream.shell.providers.anthropic import AnthropicProvider  # noqa: PLC0415

        anthropic_client = anthropic.AsyncAnthropic(api_key=key, base_url=options.base_url)
        return AnthropicProvider(
            anthropic_client,
            model=options.model,
            messages=[{"role": "user", "content": options.prompt}],
            max_tokens=options.max_tokens,
            system=options.system,
            tools=tools,
        )
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
    return GeminiProvider(
        gemini_client,
        model=options.model,
        contents=options.prompt,
        config=types.GenerateContentConfig.model_validate(config),
    )


# --- running -----------------------------------------------------------------------------


async def run_chat(
    options: ChatOptions, out: Printer = print, environ: Mapping[str, str] | None = None
) -> TurnResult:
    """Stream one answer from the model into Discord; print the channel and the turn."""
    environ = os.environ if environ is None else environ
    provider = build_provider(options, environ)
    config = StreamConfig(inactivity_timeout=options.timeout, humanizer_degree=options.humanizer)
    tools = DEMO_TOOLS if options.tools else {}
    orchestrator = StreamOrchestrator(StopRegistry())
    async with _destination(options, out) as (context, transcript):
        turn = await run_turn(orchestrator, provider, context, tools=tools, config=config)
        if transcript is not None:
            out(render(turn.final, transcript()))
    out(describe_turn(turn))
    return turn


@asynccontextmanager
async def _destination(
    options: ChatOptions, out: Printer
) -> AsyncIterator[tuple[StreamContext, Callable[[], list[SentMessage]] | None]]:
    """The emulator's channel with a user question to reply to, or the real channel."""
    target = f"cordstream chat: {options.provider} {options.model}"
    if options.channel_id is None:
        async with DiscordEmulator() as api, discord_client(api) as client:
            channel = await client.fetch_channel(api.channel_id)
            assert isinstance(channel, discord.TextChannel)
            question = api.post_user_message(options.prompt)
            out(f"{target} → local Discord emulator")
            yield (
                StreamContext(channel, reply_to=channel.get_partial_message(question)),
                (api.messages),
            )
        return
    if not options.discord_token:
        raise ValueError("a real channel needs a Discord token (--discord-token)")
    real = discord.Client(intents=discord.Intents.none())
    try:
        await real.login(options.discord_token)
        found = await real.fetch_channel(options.channel_id)
        if not isinstance(found, discord.abc.Messageable):
            raise ValueError(f"channel {options.channel_id} cannot receive messages")
        out(f"{target} → channel {found.id}")
        yield StreamContext(found), None
    finally:
        await real.close()


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
    chat.add_argument("prompt", help="what the user asks")
    chat.add_argument("--provider", choices=("openai", "anthropic", "gemini"), default="openai")
    chat.add_argument(
        "--model", default=os.environ.get("CORDSTREAM_MODEL"), help="model name ($CORDSTREAM_MODEL)"
    )
    chat.add_argument("--base-url", help="API endpoint, e.g. http://127.0.0.1:11434/v1 (Ollama)")
    chat.add_argument("--api-key", help="overrides the provider's environment variable")
    chat.add_argument("--system", help="a system prompt")
    chat.add_argument("--max-tokens", type=int, default=1024, help="answer cap (1024)")
    chat.add_argument("--no-tools", action="store_true", help="do not offer the demo tools")
    chat.add_argument(
        "--discord-token", default=os.environ.get("DISCORD_TOKEN"), help="($DISCORD_TOKEN)"
    )
    chat.add_argument(
        "--channel-id", type=int, help="stream into this real channel instead of the emulator"
    )
    chat.add_argument("--timeout", type=float, default=120.0, help="inactivity timeout (120 s)")
    chat.add_argument("--humanizer", type=int, default=1, choices=(0, 1, 2, 3))


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
