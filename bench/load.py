"""Load figures: many streams at once, and how many Discord requests an answer costs.

Concurrent streams (`concurrent_streams`, `concurrent_wall_s`, `rss_per_stream_kb`): N streams
(1000 by default), each into its own channel of one Discord emulator through one logged-in
`discord.Client`, started together. Each provider yields the first lines of a short answer
and then waits until every stream has started, so all N are alive at the same moment; the
resident set size is read then (`/proc/self/statm`), against a baseline taken after the
emulator, the client and the N channels exist. The emulator runs in the same process, so
its storage of the messages is part of the figure: the per-stream cost is an upper bound.
The wall time runs from the start of the first stream to the end of the last. The emulator
has no rate limits here, so cordstream's pacing is off (`set_global_budget(None)`): the figure
is cordstream's own cost, not Discord's 50 requests a second.

Discord's real limits (`global_limit_*`): the same number of streams, each a 3-line answer into
its own channel, against the emulator with Discord's rate limits on (`RateLimits()`: 50
requests per second over the bot, 5 per 5 s per channel and route), at cordstream's default
budget (`DISCORD_GLOBAL`), on looptime's virtual clock (the waiting costs no real time).
`global_limit_lost` counts the answers that did not complete whole, in order and once (must be
0, SPEC F4); `global_limit_429s` the 429s the emulator answered; `global_limit_time_ratio` the
virtual time from the first start to the last result over the least the limit allows, the
requests that reached Discord ÷ 50 per second (1.0 is ideal; pacing releases 50 at once, so a
little under 1 is possible).

Discord requests (`discord_requests_per_10k_chars`): `make demo`'s answer, streamed at the
demo's pace (7-character chunks, 200 per second) in real time into the emulator at the
default humanizer degree, counting every request the emulator received for the channel
(messages and typing). The naive bot sends one message per non-empty line (a line longer
than 2000 characters takes several); `discord_requests_vs_naive` is ours ÷ naive.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import time

import looptime

from cordstream.shell import (
    DISCORD_GLOBAL,
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    set_global_budget,
)
from cordstream.shell.cli.demo import ANSWER, Options, script
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing import Do, RateLimits, ScriptProvider, local_discord

_LINES = (
    "Here is a short answer, streamed line by line.\n",
    "It has a second line, with a little more to say about the question.\n",
    "And a last one.",
)
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * _PAGE


class _Gate:
    """Counts arrivals until `expected` are in (`all_in`); `wait` arrives and holds its stream
    until the gate is `open`."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = 0
        self.all_in = asyncio.Event()
        self.open = asyncio.Event()

    def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.expected:
            self.all_in.set()

    async def wait(self) -> None:
        self.arrive()
        await self.open.wait()


async def _concurrent(streams: int) -> dict[str, float]:
    async with local_discord() as local:
        api = local.api
        channels = [local.channel, *[await local.add_channel(f"c{n}") for n in range(1, streams)]]
        orchestrator = StreamOrchestrator(StopRegistry())
        config = StreamConfig(delivery="messages")
        gate = _Gate(streams)
        gc.collect()
        baseline = _rss_bytes()
        start = time.perf_counter()
        first_lines = _Gate(streams)  # every stream mid-answer: its first message accepted
        stop_counting = api.on_message(lambda message: first_lines.arrive())
        gated = [_LINES[0], _LINES[1], Do(gate.wait), _LINES[2]]
        runs = [
            asyncio.create_task(
                orchestrator.stream_to_discord(
                    ScriptProvider(gated), config, StreamContext(channel)
                )
            )
            for channel in channels
        ]
        await gate.all_in.wait()
        await first_lines.all_in.wait()
        stop_counting()
        peak = _rss_bytes()
        gate.open.set()
        results = await asyncio.gather(*runs)
        wall = time.perf_counter() - start
        statuses = {result.status for result in results}
        assert statuses == {"completed"}, statuses
        expected = "".join(_LINES)  # the channel's text: its messages joined by "\n" (F2)
        for index in range(0, streams, max(1, streams // 20)):
            channel_id = channels[index].id
            assert api.text(channel_id) == expected, api.text(channel_id)
            assert results[index].accumulated_text == expected, results[index]
    return {
        "concurrent_streams": float(streams),
        "concurrent_wall_s": wall,
        "rss_per_stream_kb": max(0, peak - baseline) / streams / 1024,
    }


async def _global_limit(streams: int) -> dict[str, float]:
    """`streams` 3-line answers at once against Discord's real limits (see the docstring)."""
    loop = asyncio.get_running_loop()
    async with local_discord() as (api, client, _):
        ids = [api.add_channel(f"c{index}") for index in range(streams)]
        channels = [client.get_partial_messageable(channel_id) for channel_id in ids]
        api.rate_limits = RateLimits()
        orchestrator = StreamOrchestrator(StopRegistry())
        before = len(api.requests)
        start = loop.time()
        results = await asyncio.gather(
            *(
                orchestrator.stream_to_discord(
                    ScriptProvider(_LINES),
                    StreamConfig(delivery="messages"),
                    StreamContext(channel),
                )
                for channel in channels
            )
        )
        elapsed = loop.time() - start
        requests = len(api.requests) - before
        expected = "".join(_LINES)
        lost = sum(
            1
            for channel_id, result in zip(ids, results, strict=True)
            if result.status != "completed"
            or api.text(channel_id) != expected
            or len(api.messages(channel_id)) != result.messages_sent
        )
        return {
            "global_limit_streams": float(streams),
            "global_limit_lost": float(lost),
            "global_limit_429s": float(sum(api.rate_limit_hits.values())),
            "global_limit_time_ratio": elapsed / (requests / DISCORD_GLOBAL.requests),
        }


def naive_requests(text: str) -> int:
    """One message per non-empty line, a line over 2000 characters in several."""
    visible = text.split("</think>", 1)[-1]
    return sum(math.ceil(len(line) / 2000) for line in visible.split("\n") if line.strip())


async def _requests() -> tuple[int, int]:
    async with local_discord() as (api, _, channel):
        orchestrator = StreamOrchestrator(StopRegistry())
        before = len(api.requests)
        result = await orchestrator.stream_to_discord(
            ScriptProvider(script(Options())),
            StreamConfig(delivery="messages", flush_limit=0),
            StreamContext(channel),
        )
        assert result.status == "completed", result.status
        ours = sum(1 for r in api.requests[before:] if r.channel_id == channel.id)
        return ours, len(result.accumulated_text)


def measure(quick: bool = False, streams: int = 1000) -> dict[str, float]:
    count = 100 if quick else streams
    previous = set_global_budget(None)  # an emulator without limits: nothing to pace
    try:
        figures = asyncio.run(_concurrent(count))
    finally:
        set_global_budget(previous)
    with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        figures |= runner.run(_global_limit(count))
    ours, delivered = asyncio.run(_requests())
    naive = naive_requests(ANSWER)
    per_10k = 10_000 / len(ANSWER)
    figures |= {
        "discord_requests_per_10k_chars": ours * per_10k,
        "naive_requests_per_10k_chars": naive * per_10k,
        "discord_requests_vs_naive": ours / naive,
    }
    assert delivered > 0
    return figures
