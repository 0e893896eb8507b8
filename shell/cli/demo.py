"""`cordstream demo`: a built-in answer streamed through the real shell into a local Discord.

No token, no key, no network beyond 127.0.0.1: the demo starts the project's Discord REST
emulator (`cordstream.shell.testing.emulator`), logs a real `discord.Client` into it, posts a
user question, and lets `StreamOrchestrator.stream_to_discord` stream the built-in answer as a
reply, played by the test kit's scripted provider (`cordstream.shell.testing.ScriptProvider`).

Live delivery is the default (`--delivery messages` for a new message per piece). While the
answer streams, a `View` watches the channel: on a terminal, `Terminal` redraws it as it is
edited (from the transcript, looked at every `POLL` seconds); otherwise `Log` prints a line
for each new message and each edit, as the emulator accepts it. Then the command prints the
channel as a user sees it, and the `StreamResult`. Options schedule a `/stop`, a follow-up
message or a hanging provider.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cordstream.domain import DoneChunk, ProcessedChunk, StreamResult, TextChunk
from cordstream.domain.config import Delivery
from cordstream.shell.cli.console import (
    Log,
    Printer,
    View,
    channel,
    delivery_options,
    follow,
    local_channel,
    log_options,
    per_second,
    positive_seconds,
    seconds_from_now,
)
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext
from cordstream.shell.orchestrator import StreamOrchestrator
from cordstream.shell.stops import StopRegistry

if TYPE_CHECKING:  # the test kit is imported when the demo runs (`script`, `run_demo`)
    from cordstream.shell.testing.emulator import SentMessage
    from cordstream.shell.testing.script import ScriptProvider, Step

# One long paragraph, every sentence in it once: at humanizer degree 3 each sentence is a
# message of its own, and a repeated one would look like a duplicate send.
_PARAGRAPH = (
    "Streaming into Discord looks simple until the details arrive. A message may hold at most "
    "two thousand characters, so a long answer must be cut, and every cut must fall where a "
    "reader expects it: after a sentence, never inside a word, never between an emoji and its "
    "skin tone. Code blocks are worse, because a block cut in two must be closed in the first "
    "message and reopened, with its language, in the second, or the rest of the answer renders "
    "as code. Live delivery edits one message as the answer grows, a cursor at its end, and "
    "goes on in a new message once that one is full. Messages delivery sends a new message per "
    "piece instead, and the humanizer sets the size of a piece: the whole answer at the end, a "
    "line at a time, lines with a pause for typing, or one sentence at a time. Meanwhile the "
    "model keeps writing, the user may press stop, a new message may arrive, and Discord may "
    "refuse a send. Each of those moments has one answer, decided by a pure core that never "
    "touches the network and never reads a clock. A stop sends the text already written and "
    "ends the stream there; a new message from the user ends it too, and drops what was not "
    "shown yet. When the model goes quiet for too long, the stream ends with a timeout, and "
    "the channel is told why. Discord's rate limits set the pace, so the shell waits its turn "
    "instead of collecting refusals. Whatever happens, the caller gets exactly one typed "
    "result, with the messages sent, the text the channel shows and the tokens used, and its "
    "tool loop decides what comes next."
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
    "The channel shows the answer while the model writes it, instead of all of it at the end.\n"
    + _PARAGRAPH
    + "\n\nA code block longer than one message is split line by line:\n\n"
    + _CODE
    # The emoji inside the sentence: alone after it, it would be a message of its own.
    + "\n\nThat's all 🎉 — nothing the model wrote is lost, and nothing is sent twice.\n"
)
USAGE = {"prompt_tokens": 412, "completion_tokens": 1337}
QUESTION = "@cordstream how do you deliver an answer?"
# How often a view looks at the channel's transcript, in seconds.
POLL = 0.05


def chunks(text: str = ANSWER, size: int = 7) -> Iterator[ProcessedChunk]:
    """The built-in answer as a provider streams it, with usage on a trailing chunk."""
    for start in range(0, len(text), size):
        yield TextChunk(text[start : start + size])
    yield DoneChunk({"finish_reason": "stop"})
    yield TextChunk("", usage=USAGE)


@dataclass
class Options:
    speed: float = 200.0  # chunks per second
    humanizer: int = 1  # messages delivery only (SPEC L11)
    stop_after: float | None = None
    follow_up_after: float | None = None
    hang: bool = False
    timeout: float = 3.0  # inactivity timeout, seconds
    delivery: Delivery = "live"


def config_for(options: Options) -> StreamConfig:
    """The `StreamConfig` the demo streams with. A bad option is a `ValueError`."""
    return StreamConfig(
        inactivity_timeout=options.timeout,
        humanizer_degree=options.humanizer,
        flush_limit=0,
        delivery=options.delivery,
    )


def script(options: Options) -> list[Step]:
    """The built-in answer as the demo's model streams it (`chunks()`): `speed` chunks a
    second and, with `hang`, nothing more after the first third."""
    from cordstream.shell.testing.script import Hang, Sleep  # noqa: PLC0415 (the demo's only)

    items = list(chunks())
    if options.hang:
        items = items[: len(items) // 3]
    steps: list[Step] = [step for item in items for step in (Sleep(1 / options.speed), item)]
    return [*steps, Hang()] if options.hang else steps


# --- the command line --------------------------------------------------------------------


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="stream a built-in answer into a local Discord emulator and print it",
        description="Stream a built-in answer (a think block, prose, a long paragraph, a code "
        "block longer than one message, usage on a trailing chunk) through the real shell and "
        "discord.py into a local Discord emulator on 127.0.0.1, and print the channel as a user "
        "sees it, then the StreamResult. No token or key needed. On a terminal, the channel is "
        "redrawn as the answer is edited into it; otherwise a line is printed for each new "
        "message and each edit.",
    )
    delivery_options(demo)
    log_options(demo)
    demo.add_argument(
        "--speed",
        type=per_second,
        help="chunks per second (200); with --bot, the model's words per second (30)",
    )
    demo.add_argument(
        "--stop-after", type=seconds_from_now, metavar="S", help="a user /stop after S seconds"
    )
    demo.add_argument(
        "--follow-up-after",
        type=seconds_from_now,
        metavar="S",
        help="a new user message after S seconds",
    )
    demo.add_argument(
        "--hang", action="store_true", help="the provider stops yielding a third of the way in"
    )
    demo.add_argument(
        "--timeout", type=positive_seconds, default=3.0, help="inactivity timeout in seconds (3)"
    )
    demo.set_defaults(command_parser=demo)  # its errors say `cordstream demo: error: …`
    demo.add_argument(
        "--bot",
        action="store_true",
        help="run the example bot (examples/bot.py) instead, connected to the local Discord's "
        "gateway, with a scripted model and users who ask (a mention, /ask), interrupt with a "
        "new message and press Stop (live delivery; --speed applies)",
    )


def options_from(args: argparse.Namespace) -> Options:
    return Options(
        speed=200.0 if args.speed is None else args.speed,
        humanizer=args.humanizer,
        stop_after=args.stop_after,
        follow_up_after=args.follow_up_after,
        hang=args.hang,
        timeout=args.timeout,
        delivery=args.delivery,
    )


# --- the run -----------------------------------------------------------------------------


async def run_demo(
    options: Options, view: View | None = None
) -> tuple[StreamResult, list[SentMessage], ScriptProvider]:
    """Stream the built-in answer into a local Discord; return the result and the transcript.

    `view` (default: a `Log` to stdout) is told of each change to the channel and each
    scheduled user action, and shown the channel's transcript every `POLL` seconds and once
    more at the end (`View`); it is closed on every exit path. A bad option is a `ValueError`
    (from `StreamConfig`), raised before anything starts; an emulator that cannot listen is a
    `console.Failure`.
    """
    view = Log(print) if view is None else view
    config = config_for(options)
    try:
        async with local_channel(QUESTION, None) as local:
            loop = asyncio.get_running_loop()
            view.begin(local.start)
            context = StreamContext(local.channel, reply_to=local.question)
            orchestrator = StreamOrchestrator(StopRegistry())
            channel_id = local.channel.id

            def act(what: str, action: Callable[[], object]) -> None:
                view.note(f"[{loop.time() - local.start:7.3f}s] {what}")
                action()

            timers: list[asyncio.TimerHandle] = []
            if options.stop_after is not None:
                stop = lambda: orchestrator.request_stop(channel_id, "demo-user", "/stop")  # noqa: E731
                timers.append(loop.call_later(options.stop_after, act, "user runs /stop", stop))
            if options.follow_up_after is not None:
                follow_up = lambda: orchestrator.request_follow_up(channel_id, "demo-user")  # noqa: E731
                timers.append(
                    loop.call_later(
                        options.follow_up_after, act, "user sends a new message", follow_up
                    )
                )

            from cordstream.shell.testing.script import ScriptProvider  # noqa: PLC0415

            provider = ScriptProvider(script(options), name="demo")
            stop_watching = follow(local.api, channel_id, view)
            watcher = asyncio.create_task(_watch(local.api.messages, view))
            try:
                result = await orchestrator.stream_to_discord(provider, config, context)
            finally:
                for timer in timers:
                    timer.cancel()
                stop_watching()
                watcher.cancel()
                await asyncio.wait([watcher])
            if not watcher.cancelled():
                watcher.result()  # a view that failed fails the demo
            messages = local.api.messages()
            view.show(messages, loop.time())
            return result, messages, provider
    finally:
        view.close()


async def _watch(transcript: Callable[[], list[SentMessage]], view: View) -> None:
    loop = asyncio.get_running_loop()
    while True:
        view.show(transcript(), loop.time())
        await asyncio.sleep(POLL)


# ANSI: the terminal's alternate screen (left as it was on exit), cursor hidden while drawing.
_ENTER = "\x1b[?1049h\x1b[?25l"
_LEAVE = "\x1b[?25h\x1b[?1049l"
_HOME = "\x1b[H"
_CLEAR_LINE = "\x1b[K"
_CLEAR_BELOW = "\x1b[J"


class Terminal(View):
    """The channel redrawn in place as it is edited, on the terminal's alternate screen: a
    status line, the user actions so far, then the channel scrolled to its end (the newest
    text, where the answer grows), each line wrapped to the terminal's width here rather than
    by the terminal, so a frame is never taller than the screen. Every frame is drawn whole
    from the top-left corner, so a frame the terminal drew differently (an unusual character
    width, a resize) is mended by the next one. A frame is drawn when something changed, and
    at least every tenth of a second for the clock. `close` leaves the alternate screen, so
    the shell's own screen comes back as it was, and prints the user actions there (`out`)."""

    def __init__(
        self,
        write: Callable[[str], None],
        size: Callable[[], os.terminal_size],
        out: Printer,
        title: str = "cordstream demo",
    ) -> None:
        self._write = write
        self._size = size
        self._out = out
        self._title = title
        self._notes: list[str] = []
        self._drawn: object = None
        self._open = False

    @classmethod
    def on_stdout(cls, out: Printer, title: str = "cordstream demo") -> Terminal:
        def write(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()

        return cls(write, shutil.get_terminal_size, out, title)

    def begin(self, start: float) -> None:
        super().begin(start)
        self._write(_ENTER)
        self._open = True

    def show(self, messages: Sequence[SentMessage], now: float) -> None:
        if not self._open:
            return
        size = self._size()
        seconds = now - self.start
        key = (
            size,
            int(seconds * 10),
            len(self._notes),
            [(m.id, m.content, m.edits) for m in messages],
        )
        if key == self._drawn:
            return
        self._drawn = key
        self._write(frame(self._title, seconds, self._notes, messages, size))

    def note(self, line: str) -> None:
        self._notes.append(line)

    def close(self) -> None:
        if self._open:
            self._open = False
            self._write(_LEAVE)
            for line in self._notes:
                self._out(line)


def frame(
    title: str,
    seconds: float,
    notes: Sequence[str],
    messages: Sequence[SentMessage],
    size: os.terminal_size,
) -> str:
    """One whole screen for `Terminal`: at most `size.lines` rows of at most `size.columns - 1`
    cells, drawn from the top-left corner, each row erasing what was left of the previous
    frame's, and the rest of the screen cleared."""
    width = max(size.columns - 1, 10)
    edits = sum(m.edits for m in messages)
    status = (
        f"{title} · {seconds:5.1f}s · {len(messages)} message{'s' * (len(messages) != 1)}, "
        f"{edits} edit{'s' * (edits != 1)} · Ctrl-C quits"
    )
    top = [row for line in [status, *notes[-3:]] for row in wrap(line, width)]
    body = [row for line in channel(messages) for row in wrap(line, width)]
    room = max(size.lines - len(top), 0)
    rows = (top + body[-room:] if room else top)[: max(size.lines, 1)]
    return _HOME + "\r\n".join(row + _CLEAR_LINE for row in rows) + _CLEAR_BELOW


def _cells(char: str) -> int:
    """How many terminal columns `char` takes, as most terminals draw it."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def width(text: str) -> int:
    """How many terminal columns `text` (one line) takes, as most terminals draw it."""
    return sum(map(_cells, text))


def wrap(line: str, width: int) -> list[str]:
    """`line` cut into rows of at most `width` columns, after a space where the row has one
    (else inside the word); control characters (which would move the terminal's cursor) shown
    as `�`, a tab as four spaces."""
    rows: list[str] = []
    row: list[str] = []
    used = 0
    for given in line.replace("\t", "    "):
        char = "\N{REPLACEMENT CHARACTER}" if unicodedata.category(given) == "Cc" else given
        cells = _cells(char)
        while used + cells > width and row:
            cut = len(row) - row[::-1].index(" ") if " " in row[1:] else len(row)
            rows.append("".join(row[:cut]))
            row = row[cut:]
            used = sum(map(_cells, row))
        row.append(char)
        used += cells
    rows.append("".join(row))
    return rows
