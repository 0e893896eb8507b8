"""`cordstream demo`: a built-in answer streamed through the real shell into a local Discord.

No token, no key, no network beyond 127.0.0.1: the demo starts the project's Discord REST
emulator (`cordstream.shell.testing.emulator`), logs a real `discord.Client` into it, posts a
user question, and lets `StreamOrchestrator.stream_to_discord` stream the built-in answer as a
reply, played by the test kit's scripted provider (`cordstream.shell.testing.ScriptProvider`).
It prints each message as the channel receives it, then the channel as a user sees it, then
the `StreamResult`. Options schedule a `/stop`, a follow-up message or a hanging provider.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from cordstream.domain import DoneChunk, ProcessedChunk, StreamResult, TextChunk
from cordstream.shell.cli.console import Printer, local_channel
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext
from cordstream.shell.orchestrator import StreamOrchestrator
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing.emulator import SentMessage
from cordstream.shell.testing.script import Hang, ScriptProvider, Sleep, Step

_PARAGRAPH = (
    "Streaming into Discord looks simple until the details arrive. A message may hold at most "
    "two thousand characters, so a long answer must be cut, and every cut must fall where a "
    "reader expects it: after a sentence, never inside a word, never between an emoji and its "
    "skin tone. Code blocks are worse, because a block cut in two must be closed in the first "
    "message and reopened, with its language, in the second, or the rest of the answer renders "
    "as code. Meanwhile the model keeps writing, the user may press stop, a new message may "
    "arrive, and Discord may refuse a send. "
)
_CODE = "\n".join(
    [
        "```python",
        "from cordstream.shell import StreamOrchestrator, StreamConfig, StreamContext",
        "",
        "async def answer(channel, message, provider):",
        "    orchestrator = StreamOrchestrator()",
        "    context = StreamContext(channel, reply_to=message)",
        "    result = await orchestrator.stream_to_discord(provider, StreamConfig(), context)",
        *(
            f"    # step {i:02d}: the tool loop acts on result.status ({i * 7} ms budget)"
            for i in range(40)
        ),
        "    return result",
        "```",
    ]
)
ANSWER = (
    "<think>The user asked how cordstream works. Show prose, a long paragraph and code.</think>"
    "Here is how **cordstream** delivers an answer.\n\n"
    "Each line leaves as soon as it is complete, so the channel fills while the model writes.\n"
    + _PARAGRAPH * 3
    + "\n\nA code block longer than one message is split line by line:\n\n"
    + _CODE
    + "\n\nThat's all — nothing the model wrote is lost, and nothing is sent twice. 🎉\n"
)
USAGE = {"prompt_tokens": 412, "completion_tokens": 1337}


def chunks(text: str = ANSWER, size: int = 7) -> Iterator[ProcessedChunk]:
    """The built-in answer as a provider streams it, with usage on a trailing chunk."""
    for start in range(0, len(text), size):
        yield TextChunk(text[start : start + size])
    yield DoneChunk({"finish_reason": "stop"})
    yield TextChunk("", usage=USAGE)


@dataclass
class Options:
    speed: float = 200.0  # chunks per second
    humanizer: int = 1
    stop_after: float | None = None
    follow_up_after: float | None = None
    hang: bool = False
    timeout: float = 3.0  # inactivity timeout, seconds


def script(options: Options) -> list[Step]:
    """The built-in answer as the demo's model streams it (`chunks()`): `speed` chunks a
    second and, with `hang`, nothing more after the first third."""
    items = list(chunks())
    if options.hang:
        items = items[: len(items) // 3]
    steps: list[Step] = [step for item in items for step in (Sleep(1 / options.speed), item)]
    return [*steps, Hang()] if options.hang else steps


async def run_demo(
    options: Options, out: Printer = print
) -> tuple[StreamResult, list[SentMessage], ScriptProvider]:
    """Stream the built-in answer into a local Discord; return the result and the transcript.

    `out` gets a line for each message as the channel receives it (`console.local_channel`)
    and for each scheduled user action. A bad option is a `ValueError` (from `StreamConfig`),
    raised before anything starts; an emulator that cannot listen is a `console.Failure`.
    """
    config = StreamConfig(
        inactivity_timeout=options.timeout, humanizer_degree=options.humanizer, flush_limit=0
    )
    question = "@cordstream how do you deliver an answer?"
    async with local_channel(question, out) as local:
        context = StreamContext(local.channel, reply_to=local.question)
        orchestrator = StreamOrchestrator(StopRegistry())
        loop = asyncio.get_running_loop()
        start = local.start
        channel_id = local.channel.id
        timers: list[asyncio.TimerHandle] = []
        if options.stop_after is not None:
            stop = lambda: orchestrator.request_stop(channel_id, "demo-user", "/stop")  # noqa: E731
            timers.append(
                loop.call_later(options.stop_after, _say, out, start, "user runs /stop", stop)
            )
        if options.follow_up_after is not None:
            follow = lambda: orchestrator.request_follow_up(channel_id, "demo-user")  # noqa: E731
            timers.append(
                loop.call_later(
                    options.follow_up_after, _say, out, start, "user sends a new message", follow
                )
            )
        provider = ScriptProvider(script(options), name="demo")
        try:
            result = await orchestrator.stream_to_discord(provider, config, context)
        finally:
            for timer in timers:
                timer.cancel()
        return result, local.api.messages(), provider


def _say(out: Printer, start: float, what: str, action: Callable[[], object]) -> None:
    out(f"[{asyncio.get_running_loop().time() - start:7.3f}s] {what}")
    action()


def render(result: StreamResult, messages: list[SentMessage]) -> str:
    """The channel as a user sees it, then the result."""
    lines = ["", "══════ #general ══════"]
    for number, message in enumerate(messages, 1):
        if message.embeds:
            embed = message.embeds[0]
            lines += [f"┌─ embed: {embed.get('title')}", str(embed.get("description", "")), "└─"]
            continue
        pings = "pings nobody" if not message.pings.anyone else f"pings {message.pings}"
        lines += [
            f"┌─ message {number} ({len(message.content)} chars, {pings})",
            message.content,
            "└─",
        ]
    log = result.thought_log
    lines += [
        "",
        "══════ StreamResult ══════",
        f"status:          {result.status}",
        f"stop_reason:     {result.stop_reason}",
        f"stop_context:    {result.stop_context!r}",
        f"messages_sent:   {result.messages_sent}",
        f"accumulated:     {len(result.accumulated_text)} chars",
        f"usage:           {result.usage}",
        f"thought (raw):   {log.raw if log else None!r}",
        f"first reply:     {log.first_reply_url if log else None}",
        f"data:            {result.data!r}",
    ]
    return "\n".join(lines)
