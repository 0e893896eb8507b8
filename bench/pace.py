"""Live delivery at Discord's limit (SPEC L2): how close to what Discord's window allows an
answer completes, and how long the channel goes without new text, over a matrix of answers.

`python -m bench.pace [--json]` runs only these; `python -m bench` includes them.

The matrix: six answers (`ANSWERS`: a short one, 8k of prose, 5k of code, a think block, 4k of
markdown, 30k of mixed markdown) at 50 and 500 characters a second (`RATES`, in chunks of
`CHUNK` characters), one live stream each; and three live streams of the markdown answer
sharing one channel, at both rates. Each runs against the Discord emulator with Discord's rate
limits on, through the real shell and a logged-in `discord.Client`, as `bench.live` does.

The idea: these figures are the pacing's and the core's decisions, not the machine's speed, so
every scenario runs in virtual time (`looptime`): the clock moves only while every task waits,
and a 600 s answer takes seconds. The same code gives the same figures on any machine.

The bound. Discord's window lets `DISCORD_CHANNEL.requests` message requests through per
`DISCORD_CHANNEL.per` seconds in a channel, so the stream's N message requests (creates and
edits it made, accepted) cannot all be through before its first one's time plus
`per × ⌊(N − 1) / requests⌋`, nor before the model's last chunk: `bound` is the later of the
two, and `lag_over_bound_s` how long after it the channel showed the answer complete. (Discord
counts creates and edits in buckets of their own, so a stream can beat this bound; the figure
is then 0 or below.) For streams sharing a channel, each one's bound ignores the others'
requests, so `channel_lag_over_bound_s` counts every stream's requests against one window,
from the channel's first request to its last answer complete.

Keys: per scenario `pace_<answer>_<rate>_<figure>` (`lag_over_bound_s`, `lag_s`,
`longest_wait_s` while the model writes visible text, `requests`, `429s`;
`channel_lag_over_bound_s` for the shared channel), and the maxima the targets are set on:
`live_lag_over_bound_s_max` and `live_longest_wait_s_max` over the matrix of single streams,
`live_shared_channel_wait_s_max` and `live_shared_channel_lag_over_bound_s_max` over the
shared channel, and `live_matrix_429s`, the 429s of all scenarios. A stream that does not
complete, or whose channel does not hold exactly what it reported, fails the benchmark
(`bench.live.check`).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from itertools import pairwise
from typing import Final, TypeVar

import looptime

from bench import command, labels, live
from cordstream.domain.pacing import DISCORD_CHANNEL
from cordstream.shell.testing import (
    DiscordEmulator,
    RateLimits,
    local_discord,
)

T = TypeVar("T")

RATES: Final = (50, 500)  # characters per second
CHUNK: Final = 5  # characters per chunk
STREAMS: Final = 3  # live streams sharing one channel
SHARED: Final = "markdown"  # the answer they stream


def _prose(size: int, seed: int) -> str:
    rng = random.Random(seed)
    text = ""
    while len(text) < size:
        text += live.paragraph(rng) + "\n\n"
    return text[:size].rstrip() + "."


def _code(size: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = ["Here is the module:", "", "```python"]
    number = 0
    while sum(len(line) + 1 for line in lines) < size - 60:
        lines.append(f"def step_{number}(value: int) -> int:")
        lines.append(f"    return value * {rng.randint(2, 99)} + {number}  # step {number}")
        number += 1
    return "\n".join([*lines, "```", "", "Run it with `python module.py`."])


ANSWERS: Final[dict[str, str]] = {
    "short": "Sure! The answer is 42, and here is why it fits: it is what you asked for.",
    "prose8k": _prose(8_000, 1),
    "code5k": _code(5_000, 2),
    "think": "<think>" + _prose(1_500, 3) + "</think>\n" + _prose(1_500, 4),
    "markdown": live.long_answer(4_000, seed=5),
    "30k": live.long_answer(),
}


def bound(sent: Sequence[float], last_chunk: float) -> float:
    """The earliest moment Discord's window lets a stream's message requests, accepted at the
    times `sent` (in order), all through, and not before the model's `last_chunk`."""
    if not sent:
        return last_chunk
    window = DISCORD_CHANNEL
    return max(last_chunk, sent[0] + window.per * ((len(sent) - 1) // window.requests))


async def _streams(answer: str, rate: int, streams: int) -> dict[str, float]:
    """`streams` live streams of `answer` at `rate` characters a second into one channel."""
    async with local_discord(DiscordEmulator(rate_limits=RateLimits())) as (api, _, channel):
        before = len(api.requests)
        models = [live.Model(live.pieces(answer, CHUNK), rate / CHUNK) for _ in range(streams)]
        taps, results = await live.together(channel, models)
        requests = api.requests[before:]
        figures: dict[str, float] = {"429s": float(sum(r.status == 429 for r in requests))}
        first = live.first_visible(answer) // CHUNK
        everyone: list[float] = []  # the channel's creates and edits, every stream's
        for model, tap, result in zip(models, taps, results, strict=True):
            stream = live.tapped(api, tap, result, model.times, first)
            each = live.figures(stream)
            wait = longest_wait(stream)
            sent = [c.at for c in stream.changes if c.kind != "delete"]  # creates and edits
            complete = each["lag_s"] + model.times[-1]
            over = complete - bound(sent, model.times[-1])
            figures["lag_s"] = max(figures.get("lag_s", 0.0), each["lag_s"])
            figures["lag_over_bound_s"] = max(figures.get("lag_over_bound_s", 0.0), over)
            figures["longest_wait_s"] = max(figures.get("longest_wait_s", 0.0), wait)
            figures["requests"] = figures.get("requests", 0.0) + len(sent)
            everyone += sent
        if streams > 1:  # the channel's bound: every stream's requests through one window
            last = max(model.times[-1] for model in models)
            complete = last + figures["lag_s"]
            over = complete - bound(sorted(everyone), last)
            figures["channel_lag_over_bound_s"] = max(0.0, over)
        return figures


def longest_wait(stream: live.Stream) -> float:
    """The longest time the channel showed no new text while the model wrote visible text:
    from the chunk holding the first visible character to the last chunk (a think block
    before it shows nothing by design, E4)."""
    times = stream.chunk_times
    first, last = times[stream.first_visible], times[-1]
    moments = live.text_moments(stream.changes, stream.cursor)
    points = [first, *(at for at in moments if first < at < last), last]
    return max((b - a for a, b in pairwise(points)), default=0.0)


def virtual(run: Callable[[], Awaitable[T]]) -> T:
    """`run()` on a fresh event loop in virtual time (see the module docstring)."""
    loop = looptime.new_event_loop(start=0.0, _enabled=True)
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def _run(answer: str, rate: int, streams: int) -> Callable[[], dict[str, float]]:
    return lambda: virtual(lambda: _streams(answer, rate, streams))


def scenarios() -> list[tuple[str, Callable[[], dict[str, float]]]]:
    """(key prefix, run) for every scenario, in the order they run."""
    single = [
        (f"pace_{name}_{rate}_", _run(answer, rate, 1))
        for name, answer in ANSWERS.items()
        for rate in RATES
    ]
    shared = [
        (f"pace_shared_{STREAMS}x{SHARED}_{rate}_", _run(ANSWERS[SHARED], rate, STREAMS))
        for rate in RATES
    ]
    return single + shared


def measure() -> dict[str, float]:
    """Every scenario's figures, then the maxima (see the module docstring)."""
    found: dict[str, float] = {}
    for prefix, run in scenarios():
        found |= {prefix + key: value for key, value in run().items()}
    single = {k: v for k, v in found.items() if not k.startswith("pace_shared_")}
    shared = {k: v for k, v in found.items() if k.startswith("pace_shared_")}
    return found | {
        "live_lag_over_bound_s_max": max(
            v for k, v in single.items() if k.endswith("_lag_over_bound_s")
        ),
        "live_longest_wait_s_max": max(
            v for k, v in single.items() if k.endswith("_longest_wait_s")
        ),
        "live_shared_channel_wait_s_max": max(
            v for k, v in shared.items() if k.endswith("_longest_wait_s")
        ),
        "live_shared_channel_lag_over_bound_s_max": max(
            v for k, v in shared.items() if k.endswith("_channel_lag_over_bound_s")
        ),
        "live_matrix_429s": sum(v for k, v in found.items() if k.endswith("_429s")),
    }


_WHAT: Final = {
    # the longer suffix first: `channel_lag_over_bound_s` also ends in `_lag_over_bound_s`
    "channel_lag_over_bound_s": "last answer complete -> the channel's bound, s",
    "lag_over_bound_s": "answer complete -> Discord's bound, s",
    "lag_s": "model's last chunk -> answer complete, s",
    "longest_wait_s": "longest time without new text while the model writes, s",
    "requests": "message creates and edits accepted",
    "429s": "requests answered 429",
}


label = labels(_WHAT, prefix="pace_", unit=" chars/s")
"""A line of text for a key of `measure()`."""


def main() -> None:
    command("python -m bench.pace", __doc__, measure, label)


if __name__ == "__main__":
    main()
