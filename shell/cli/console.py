"""What the two commands share (`cordstream demo`, `cordstream chat`).

- `local_channel`: the Discord emulator on 127.0.0.1 with a real `discord.Client` logged into
  it and a user's question posted, printing a line for each message the moment the channel
  receives it (`arrival`), or, with `edits` (live delivery), for each new message and each
  edit (`Log`), so a slow model never looks hung. The demo asks for no lines: it gives its
  own `View` the channel's changes (`follow`) and transcript.
- `View`, `Log`, `edited`: what a command shows of the channel while the answer streams; `Log`
  is a line per change, timed, as the emulator accepts it. `channel` and `render`: the channel
  as a user sees it, and the result, once the answer is in.
- Only `local_channel` runs the test kit (the local Discord); a command streaming into a real
  channel imports none of it.
- `Failure`: something outside the command is missing or refuses (a server that cannot be
  reached, a refused token, an SDK that is not installed). The command prints it as one line
  on stderr, `cordstream chat: cannot reach …`, and exits with its `status` (2).
- Checks for numbers on the command line (`positive_seconds` …), as argparse types: a bad
  value is an argparse error, like any other usage error.
- `say`: print a line and flush it, since stdout is often a pipe (block-buffered).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import discord

from cordstream.domain import StreamResult
from cordstream.domain.config import DELIVERIES

if TYPE_CHECKING:  # the test kit is imported only where the local emulator runs (local_channel)
    from cordstream.shell.testing.emulator import Change, DiscordEmulator, SentMessage

Printer = Callable[[str], None]

# How much of a message's first line a progress line shows.
PREVIEW = 60
# A deferred interaction's "thinking" message carries Discord's LOADING flag.
LOADING: Final = discord.MessageFlags.loading.flag


class Failure(Exception):
    """A problem outside the command, reported as one line (`str(failure)`) and `status`."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def say(line: str) -> None:
    """Print `line` to stdout now, even when stdout is a pipe. When the reader has gone
    (`cordstream demo | head`), the rest of the output goes nowhere, quietly: the stream into
    Discord is the command's work, and it finishes and cleans up as usual."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        # Python's own advice: point stdout at devnull, so that no later write (the flush at
        # exit included) fails again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


# --- the local Discord -------------------------------------------------------------------


@dataclass(frozen=True)
class LocalChannel:
    """The emulator, its channel as the client sees it, the user's question to reply to, and
    the loop time at which the question was posted (progress lines count from it)."""

    api: DiscordEmulator
    channel: discord.TextChannel
    question: discord.PartialMessage
    start: float


@asynccontextmanager
async def local_channel(
    question: str, out: Printer | None, edits: bool = False
) -> AsyncIterator[LocalChannel]:
    """Start the emulator, log a client into it (the test kit's `local_discord`), post
    `question` as a user; while inside, `out` (unless None) gets a line for each message the
    channel receives (`arrival`) or, with `edits`, for each new message and each edit (`Log`,
    as live delivery makes them). Everything is closed on exit, cancellation included. A
    failure to listen on 127.0.0.1 is a `Failure`."""
    # The test kit, for the commands' local Discord only (a real channel needs none of it).
    from cordstream.shell.testing.emulator import DiscordEmulator, local_discord  # noqa: PLC0415

    api = DiscordEmulator()
    try:
        await api.start()
    except OSError as error:
        where = "the local Discord emulator on 127.0.0.1"
        raise Failure(f"cannot start {where}: {why(error)}") from error
    try:
        async with local_discord(api) as (_, _, channel):
            asked = api.post_user_message(question)
            loop = asyncio.get_running_loop()
            start = loop.time()
            stop_listening: Callable[[], None] = lambda: None  # noqa: E731
            if out is not None and edits:
                log = Log(out)
                log.begin(start)
                stop_listening = follow(api, channel.id, log)
            elif out is not None:
                stop_listening = api.on_message(
                    lambda message: out(arrival(message, loop.time() - start))
                )
            try:
                yield LocalChannel(api, channel, channel.get_partial_message(asked), start)
            finally:
                stop_listening()
    finally:
        await api.close()


def follow(api: DiscordEmulator, channel_id: int, view: View) -> Callable[[], None]:
    """Tell `view` of each change to channel `channel_id` the moment the emulator accepts it,
    with the message as the transcript now holds it (None once deleted). Returns the function
    that stops it."""

    def changed(change: Change) -> None:
        if change.channel_id == channel_id:
            now = {m.id: m for m in api.messages(channel_id)}
            view.change(change, now.get(change.message_id))

    return api.on_change(changed)


def arrival(message: SentMessage, seconds: float, number: int | None = None) -> str:
    """`[  0.124s] channel receives message (46 chars) as a reply: Here is how …`, with the
    message's `number` in the channel (`message 1`) when given."""
    reply = " as a reply" if message.message_reference else ""
    which = "message" if number is None else f"message {number}"
    if message.flags & LOADING:
        return f"[{seconds:7.3f}s] channel receives {which}: thinking… (a deferred slash command)"
    if message.embeds:
        return f"[{seconds:7.3f}s] channel receives embed: {message.embeds[0].get('title')}{reply}"
    first = message.content.strip().split("\n", 1)[0]
    preview = first if len(first) <= PREVIEW else first[: PREVIEW - 1] + "…"
    return (
        f"[{seconds:7.3f}s] channel receives {which} ({len(message.content)} chars){reply}: "
        f"{preview}"
    )


def channel(messages: Sequence[SentMessage]) -> list[str]:
    """The channel as a user sees it, a line of text per item (`render`'s first half)."""
    lines = ["══════ #general ══════"]
    for number, message in enumerate(messages, 1):
        if message.embeds:
            embed = message.embeds[0]
            lines += [f"┌─ embed: {embed.get('title')}", str(embed.get("description", "")), "└─"]
            continue
        pings = "pings nobody" if not message.pings.anyone else f"pings {message.pings}"
        edits = f", {message.edits} edit{'s' * (message.edits != 1)}" if message.edits else ""
        lines += [
            f"┌─ message {number} ({len(message.content)} chars{edits}, {pings})",
            *message.content.split("\n"),
            "└─",
        ]
    return lines


def render(result: StreamResult, messages: list[SentMessage]) -> str:
    """The channel as a user sees it, then the result."""
    lines = ["", *channel(messages)]
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


# --- what a command shows while the answer streams -------------------------------------


class View:
    """What a command shows while the answer streams. `begin` once the question is posted
    (`start`, the loop time the seconds count from); then `change` with each change to the
    channel the moment the emulator accepts it (the message as the transcript now holds it,
    None once deleted; `follow`), and, from the demo, `show` with the whole transcript (each
    message with its current content) every `demo.POLL` seconds and once at the end, and
    `note` for each user action, all called on the event loop and never blocking; `close` on
    every exit path, even when `begin` was not called."""

    start = 0.0

    def begin(self, start: float) -> None:
        self.start = start

    def change(self, change: Change, message: SentMessage | None) -> None:
        pass

    def show(self, messages: Sequence[SentMessage], now: float) -> None:
        pass

    def note(self, line: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Log(View):
    """A line for each change to the channel, timed when the emulator accepted it: a new
    message (`console.arrival`, numbered), an edit (with the end of the text, where live text
    grows), a deletion. Messages delivery never edits, so there it is one line per message;
    live delivery shows each edit, the cursor included, up to the final one that removes it:

    `[  1.020s] message 1 edited (412 chars): …the user may press stop, a new message may ▌`
    """

    def __init__(self, out: Printer) -> None:
        self._out = out
        self._numbers: dict[int, int] = {}  # message id: its number in the channel

    def change(self, change: Change, message: SentMessage | None) -> None:
        seconds = change.at - self.start
        number = self._numbers.setdefault(change.message_id, len(self._numbers) + 1)
        if change.kind == "create" and message is not None:
            shown = replace(message, content=change.content, embeds=change.embeds)
            self._out(arrival(shown, seconds, number))
        elif change.kind == "delete":
            self._out(f"[{seconds:7.3f}s] message {number} was deleted")
        else:
            self._out(edited(change, seconds, number))

    def note(self, line: str) -> None:
        self._out(line)


def edited(change: Change, seconds: float, number: int) -> str:
    """`[  1.020s] message 1 edited (412 chars): …may arrive, and Discord may ▌`: the end of
    the message's last line, where live text grows."""
    if change.embeds:
        return f"[{seconds:7.3f}s] message {number} edited: embed {change.embeds[0].get('title')}"
    last = change.content.rstrip().rsplit("\n", 1)[-1]
    tail = last if len(last) <= PREVIEW else "…" + last[-(PREVIEW - 1) :]
    return f"[{seconds:7.3f}s] message {number} edited ({len(change.content)} chars): {tail}"


# --- connection failures -----------------------------------------------------------------


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error`, then what caused it, innermost last (each exception once). A context hidden
    with `raise … from None` counts too: anyio hides the refused connection that way."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


# The SDKs' and HTTP libraries' "could not open a connection" classes, by name (httpx2,
# httpcore2, aiohttp), so that none of them has to be installed to recognise the others.
_CONNECT_ERRORS = frozenset({"ConnectError", "ConnectTimeout", "ClientConnectorError"})


def could_not_connect(error: object) -> bool:
    """Whether `error` (or what caused it) is a failure to open a connection: refused, an
    unknown host, a connect timeout. A connection lost later is not one."""
    if not isinstance(error, BaseException):
        return False
    for link in _chain(error):
        if isinstance(link, ConnectionRefusedError | socket.gaierror):
            return True
        if any(kind.__name__ in _CONNECT_ERRORS for kind in type(link).__mro__):
            return True
    return False


def why(error: BaseException) -> str:
    """What went wrong, in a few words: `connection refused`, `unknown host (…)`, `timed
    out`, the system's words for another OS error, else the innermost cause's own text."""
    links = list(_chain(error))
    for link in links:
        if isinstance(link, ConnectionRefusedError):
            return "connection refused"
        if isinstance(link, socket.gaierror):
            return f"unknown host ({link.strerror or link})"
    for link in links:
        if isinstance(link, TimeoutError) or "Timeout" in type(link).__name__:
            return "timed out"
    for link in reversed(links):
        if isinstance(link, OSError) and link.strerror:  # "Address already in use"
            return link.strerror[:1].lower() + link.strerror[1:]
    for link in reversed(links):
        text = str(link).strip()
        if text:
            return text
    return type(error).__name__


# --- numbers on the command line ---------------------------------------------------------


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _number(rule: str, accept: Callable[[float], bool]) -> Callable[[str], float]:
    """An argparse type for a finite number that `accept`s; `rule` says what it must be."""

    def parse(text: str) -> float:
        value = _finite(text)
        if value is None or not accept(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}")
        return value

    return parse


positive_seconds = _number("a positive number of seconds", lambda value: value > 0)
seconds_from_now = _number("a number of seconds, 0 or more", lambda value: value >= 0)
per_second = _number("a positive number of chunks per second", lambda value: value > 0)


def positive_tokens(text: str) -> int:
    """argparse type: a whole number of tokens, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of tokens, 1 or more, got {text!r}"
        )
    return value


def http_url(text: str) -> str:
    """argparse type: an http:// or https:// address with a host (and a valid port, if any)."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}, got {text!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"must be an http:// or https:// address, such as http://127.0.0.1:11434/v1, "
            f"got {text!r}"
        )
    return text


LOG_LEVELS: Final = ("debug", "info", "warning", "error")


def log_options(parser: argparse.ArgumentParser) -> None:
    """`--log-level`, as `demo` and `chat` both offer it."""
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help="print cordstream's log records at this level and above on stderr (info: one "
        "line per stream's end; debug: each Discord request too); none by default",
    )


def show_logs(level: str | None) -> None:
    """cordstream's log records from `level` up, on stderr (`--log-level`)."""
    if level is None:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("cordstream")
    logger.addHandler(handler)
    logger.setLevel(level.upper())


def delivery_options(parser: argparse.ArgumentParser) -> None:
    """`--delivery` and `--humanizer`, as `demo` and `chat` both offer them."""
    parser.add_argument(
        "--delivery",
        choices=DELIVERIES,
        default="live",
        help="live (default): one message edited as the answer grows, a new one when it is "
        "full; messages: a new message per piece",
    )
    parser.add_argument(
        "--humanizer",
        type=int,
        default=1,
        choices=(0, 1, 2, 3),
        help="how --delivery messages cuts the answer (1); live delivery ignores it",
    )
