"""Live delivery's figures (SPEC L): how soon and how steadily the channel shows an answer,
live (`StreamConfig(delivery="live")`) against messages delivery, under Discord's limits.

`python -m bench.live [--json]` runs only these; `python -m bench` (and `make bench`) runs them
as its last section. They take about three minutes of real time: the model writes at its own
pace, and the channel shows what Discord's rate limits let through.

The method, the scenarios (`demo` and `30k`, at 50 and 500 chunks per second, in both
deliveries, and three live streams sharing one channel), the keys and what each figure means
are stated once, in BENCHMARKS.md ("Live delivery"), with the measured values.

The idea: every figure is read from the two ends of the pipe, never from inside it. The
model's end is the test kit's `ScriptProvider`, writing fixed-size chunks on a schedule (chunk
i is due at the first chunk's time + i / rate, so a slow moment is caught up) and noting when
it yields each. The channel's end is the Discord emulator: its history
(`DiscordEmulator.history()`, every create, edit and deletion it accepted, with its time) and
the requests it received. Between them runs the real shell
(`StreamOrchestrator().stream_to_discord`), a logged-in `discord.Client` and the emulator with
Discord's rate limits on (`DiscordEmulator(rate_limits=RateLimits())`), with a fresh emulator
and event loop per scenario. `figures()` and `request_figures()` compute the figures from those
records alone; the three streams sharing a channel are told apart by a thin wrapper around the
channel that notes the ids its `send` returned (`Tap`).

It never mocks time: everything runs in real time, and a scenario that does not end within
`LIMIT_S` (300 s) fails the benchmark.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Final, cast

import discord

from bench import command, labels
from cordstream.domain import DoneChunk, StreamResult
from cordstream.domain.config import Delivery
from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator
from cordstream.shell.cli.demo import ANSWER
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing import (
    DiscordEmulator,
    Do,
    RateLimits,
    RecordedRequest,
    ScriptProvider,
    Step,
    local_discord,
)
from cordstream.shell.testing.emulator import Change

DELIVERIES: Final[tuple[Delivery, ...]] = ("live", "messages")
RATES: Final = (50, 500)  # chunks per second
DEMO_CHUNK: Final = 4  # characters per chunk of the demo answer
LONG_CHARS: Final = 30_000
LONG_CHUNK: Final = 25  # characters per chunk of the 30k answer: 1,200 chunks, 24 s at 50/s
STREAMS: Final = 3  # live streams at once in one channel
LIMIT_S: Final = 300.0  # a scenario that takes longer is a failure (a hang), not a figure
FIGURES: Final = (
    "first_text_s",
    "longest_wait_s",
    "lag_s",
    "messages",
    "requests_per_10k_chars",
    "429s",
)
_WHAT: Final = {
    "first_text_s": "first visible char -> first text in the channel, s",
    "longest_wait_s": "longest time without new text while the model writes, s",
    "lag_s": "model's last chunk -> channel complete, s",
    "messages": "messages created",
    "requests_per_10k_chars": "message creates+edits per 10k chars",
    "429s": "requests answered 429",
}


# --------------------------------------------------------------------------------------------
# The figures, from what the model did and what the channel showed


@dataclass(frozen=True)
class Stream:
    """One stream as the figures see it, on the event loop's clock: `chunk_times`, when the
    model yielded each text chunk; `first_visible`, the index of the chunk holding the answer's
    first visible character; `changes`, the emulator's history of the stream's messages (only
    theirs); `cursor`, the live cursor (`StreamConfig.cursor`)."""

    chunk_times: Sequence[float]
    first_visible: int
    changes: Sequence[Change]
    cursor: str


def shown(content: str, cursor: str) -> str:
    """The text a message shows: its content without the live cursor and outer blanks."""
    return (content.replace(cursor, "") if cursor else content).strip()


def text_moments(changes: Iterable[Change], cursor: str) -> list[float]:
    """The moments the channel showed new text: a message created with text, or edited to show
    other text than before."""
    showing: dict[int, str] = {}
    moments: list[float] = []
    for change in changes:
        if change.kind == "delete":
            showing.pop(change.message_id, None)
            continue
        text = shown(change.content, cursor)
        if text and text != showing.get(change.message_id):
            moments.append(change.at)
        showing[change.message_id] = text
    return moments


def figures(stream: Stream) -> dict[str, float]:
    """`first_text_s`, `longest_wait_s`, `lag_s` and `messages` (see the module docstring).
    ValueError when the channel never showed text or the model wrote nothing."""
    times = stream.chunk_times
    if not times:
        raise ValueError("the model wrote nothing")
    moments = text_moments(stream.changes, stream.cursor)
    if not moments:
        raise ValueError("the channel never showed text")
    first, last = times[0], times[-1]
    points = [first, *(at for at in moments if first < at < last), last]
    complete = max(c.at for c in stream.changes if c.kind != "delete" and c.content)
    created = sum(1 for c in stream.changes if c.kind == "create" and c.content.strip())
    return {
        "first_text_s": moments[0] - times[stream.first_visible],
        "longest_wait_s": max(b - a for a, b in pairwise(points)),
        "lag_s": complete - last,
        "messages": float(created),
    }


def request_figures(
    requests: Iterable[RecordedRequest], channel_id: int, chars: int
) -> dict[str, float]:
    """`requests_per_10k_chars` (the channel's message creates and edits, any status, per
    10,000 of the answer's `chars`) and `429s` (every request answered 429)."""
    requests = list(requests)
    messages = sum(1 for r in requests if r.kind in ("send", "edit") and r.channel_id == channel_id)
    return {
        "requests_per_10k_chars": messages * 10_000 / chars,
        "429s": float(sum(1 for r in requests if r.status == 429)),
    }


# --------------------------------------------------------------------------------------------
# The answers and the model


def pieces(text: str, size: int) -> list[str]:
    """`text` in chunks of `size` characters (the last one shorter)."""
    return [text[start : start + size] for start in range(0, len(text), size)]


def first_visible(text: str) -> int:
    """Where the answer's visible text starts: after a leading think block, past blanks."""
    start = 0
    if text.startswith("<think>"):
        start = text.index("</think>") + len("</think>")
    while start < len(text) and text[start].isspace():
        start += 1
    return start


_VOCABULARY: Final = (
    "the stream shows each answer while the model writes it and every message must stay "
    "under two thousand characters so long answers continue in a new message code blocks are "
    "closed and reopened with their language lists keep their markers a user may stop the "
    "answer at any moment and the channel keeps what was shown Discord allows five edits "
    "every five seconds in a channel so edits carry the latest text"
)
_WORDS: Final = tuple(_VOCABULARY.split())
_LANGUAGES: Final = ("python", "javascript", "sql", "rust")
_CODE_LINES: Final = (12, 60, 20, 35)  # lines of the four code blocks (60: over a message)


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 20))]
    if rng.random() < 0.2:
        index = rng.randrange(len(words))
        words[index] = f"**{words[index]}**"
    if rng.random() < 0.15:
        index = rng.randrange(len(words))
        words[index] = f"`{words[index]}()`"
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", ".", ".", "!", "?"))


def paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(3, 6)))


def _code(rng: random.Random, number: int) -> str:
    language = _LANGUAGES[number % len(_LANGUAGES)]
    lines = [
        f"    value_{i} = compute(step={i}, weight={rng.randint(1, 999)})  # line {i}"
        for i in range(_CODE_LINES[number])
    ]
    return "\n".join([f"```{language}", f"def block_{number}():", *lines, "    return 0", "```"])


def long_answer(size: int = LONG_CHARS, seed: int = 12) -> str:
    """Exactly `size` characters of markdown: sections with a heading, paragraphs, a bullet or
    numbered list, and four code blocks (in sections 2, 6, 10 and 14), ending in prose."""
    rng = random.Random(seed)
    parts: list[str] = []
    section = 0
    while sum(len(p) + 2 for p in parts) < size - 2_000:
        section += 1
        parts.append(f"## Part {section}: {' '.join(rng.sample(_WORDS, 3))}")
        parts.extend(paragraph(rng) for _ in range(rng.randint(1, 3)))
        if section % 2:
            items = [_sentence(rng) for _ in range(rng.randint(3, 6))]
            parts.append("\n".join(f"- {item}" for item in items))
        else:
            items = [_sentence(rng) for _ in range(rng.randint(3, 5))]
            parts.append("\n".join(f"{n}. {item}" for n, item in enumerate(items, 1)))
        if section % 4 == 2 and section // 4 < len(_CODE_LINES):
            parts.append(_code(rng, section // 4))
            parts.append(paragraph(rng))
    text = "\n\n".join(parts) + "\n\n"
    while len(text) < size:  # plain prose to the end: a cut there breaks no construct
        text += paragraph(rng) + " "
    return text[:size]


class Model:
    """A model writing `chunks` at `rate` chunks a second, on the loop's clock: chunk i is due
    at the first chunk's time + i / rate. `times` holds when each was yielded."""

    def __init__(self, chunks: Sequence[str], rate: float) -> None:
        self.chunks = chunks
        self.rate = rate
        self.times: list[float] = []

    def script(self) -> list[Step]:
        steps: list[Step] = []
        for chunk in self.chunks:
            steps += [Do(self._due), chunk]
        return [*steps, DoneChunk({"finish_reason": "stop"})]

    async def _due(self) -> None:
        loop = asyncio.get_running_loop()
        if self.times:
            wait = self.times[0] + len(self.times) / self.rate - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
        self.times.append(loop.time())


# --------------------------------------------------------------------------------------------
# The runs


def config_for(delivery: Delivery) -> StreamConfig:
    return StreamConfig(delivery=delivery, flush_limit=0)


def check(result: StreamResult, shown_text: str) -> None:
    if result.status != "completed":
        raise RuntimeError(f"a benchmark stream ended as {result.status}: {result}")
    if not shown_text or result.accumulated_text != shown_text:
        raise RuntimeError("the channel does not hold what the stream reported")


async def run_one(answer: str, size: int, rate: float, delivery: Delivery) -> dict[str, float]:
    """One stream of `answer` in `size`-character chunks at `rate` chunks a second."""
    async with local_discord(DiscordEmulator(rate_limits=RateLimits())) as (api, _, channel):
        before = len(api.requests)
        model = Model(pieces(answer, size), rate)
        config = config_for(delivery)
        async with asyncio.timeout(LIMIT_S):
            result = await StreamOrchestrator(StopRegistry()).stream_to_discord(
                ScriptProvider(model.script(), name="bench"), config, StreamContext(channel)
            )
        check(result, api.text())
        stream = Stream(model.times, first_visible(answer) // size, api.history(), config.cursor)
        return figures(stream) | request_figures(api.requests[before:], channel.id, len(answer))


class Tap:
    """The channel, with the ids of the messages sent through it noted (`sent`), so that
    streams sharing a channel can be told apart; every other attribute is the channel's."""

    def __init__(self, channel: discord.TextChannel) -> None:
        self._channel = channel
        self.id = channel.id
        self.sent: set[int] = set()

    async def send(self, *args: Any, **kwargs: Any) -> discord.Message:
        message = await self._channel.send(*args, **kwargs)
        self.sent.add(message.id)
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)


async def together(
    channel: discord.TextChannel, models: Sequence[Model]
) -> tuple[list[Tap], list[StreamResult]]:
    """Each model's live stream into `channel`, all at once, each through a `Tap` of its own."""
    taps = [Tap(channel) for _ in models]
    orchestrator = StreamOrchestrator(StopRegistry())
    results = await asyncio.gather(
        *(
            orchestrator.stream_to_discord(
                ScriptProvider(model.script(), name="bench"),
                config_for("live"),
                StreamContext(cast(discord.abc.Messageable, tap)),
            )
            for model, tap in zip(models, taps, strict=True)
        )
    )
    return taps, list(results)


def tapped(
    api: DiscordEmulator, tap: Tap, result: StreamResult, times: Sequence[float], first: int
) -> Stream:
    """One stream of `together`: checked (`check`), and its figures' record (`Stream`)."""
    mine = [m.content for m in api.messages() if m.id in tap.sent]
    check(result, "\n".join(text for text in mine if text))
    changes = [c for c in api.history() if c.message_id in tap.sent]
    return Stream(times, first, changes, config_for("live").cursor)


async def run_shared(
    answer: str, size: int, rate: float, streams: int = STREAMS
) -> dict[str, float]:
    """`streams` live streams of `answer` at once into one channel."""
    async with local_discord(DiscordEmulator(rate_limits=RateLimits())) as (api, _, channel):
        before = len(api.requests)
        models = [Model(pieces(answer, size), rate) for _ in range(streams)]
        async with asyncio.timeout(LIMIT_S):
            taps, results = await together(channel, models)
        each = [
            figures(tapped(api, tap, result, model.times, first_visible(answer) // size))
            for model, tap, result in zip(models, taps, results, strict=True)
        ]
        return {
            "429s": float(sum(1 for r in api.requests[before:] if r.status == 429)),
            "longest_wait_s": max(one["longest_wait_s"] for one in each),
            "lag_s": max(one["lag_s"] for one in each),
        }


def answers() -> dict[str, tuple[str, int]]:
    """The answers by name, with their chunk size."""
    return {"demo": (ANSWER, DEMO_CHUNK), "30k": (long_answer(), LONG_CHUNK)}


def scenarios() -> list[tuple[str, Callable[[], dict[str, float]]]]:
    """(key prefix, run) for every scenario, in the order they run."""
    runs: list[tuple[str, Callable[[], dict[str, float]]]] = []
    for name, (answer, size) in answers().items():
        for rate in RATES:
            for delivery in DELIVERIES:

                def run(
                    answer: str = answer, size: int = size, rate: int = rate, d: Delivery = delivery
                ) -> dict[str, float]:
                    return asyncio.run(run_one(answer, size, rate, d))

                runs.append((f"{delivery}_{name}_{rate}_", run))
    demo, size = answers()["demo"]
    runs.append((f"live_{STREAMS}_streams_", lambda: asyncio.run(run_shared(demo, size, RATES[0]))))
    return runs


def measure() -> dict[str, float]:
    """Every scenario's figures, keyed as the module docstring says. Each scenario runs on its
    own event loop (`asyncio.run`), so no pacing state carries over from the one before."""
    found: dict[str, float] = {}
    for prefix, run in scenarios():
        found |= {prefix + key: value for key, value in run().items()}
    return found


label = labels(_WHAT)
"""A line of text for a key of `measure()`."""


def main() -> None:
    command("python -m bench.live", __doc__, measure, label)


if __name__ == "__main__":
    main()
