"""The shell's figures on real time: how fast a stop or the deadline ends a hanging stream (B2, B3).

Each run streams through the real shell and discord.py into the local Discord emulator: a
provider yields one complete line and one unfinished one, then hangs forever.

- stop latency: from `request_stop` to `stream_to_discord` returning, the flush of the
  unfinished line to Discord included;
- timeout overshoot: from the deadline (last chunk + inactivity timeout) to the return, the
  flush and the timeout embed included.

And the per-chunk cost of the shell itself: a realistic answer in 1–8 character chunks
through `stream_to_discord` into a sink that accepts every send at once, against a bare
`async for` over the same provider (the floor any shell must pay). The sink is not Discord,
so cordstream's pacing of Discord requests (50 a second, SPEC F4) is off for it
(`set_global_budget(None)`): the figure is the shell's own cost. That provider awaits
nothing, so the shell feeds the core all of it as one run of text (`shell_overhead_ratio`:
the task's loop per chunk); `shell_yield_overhead_ratio` is the same with the event loop
turning before each chunk, every chunk a run of its own, the core stepped per chunk (a quarter
of the answer: each turn costs the bare loop too).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator

from bench.answers import answer, chunked
from cordstream.domain import ProcessedChunk, ProviderError, TextChunk
from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator, set_global_budget
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing import Hang, ScriptProvider, local_discord

TIMEOUT = 0.2  # inactivity timeout of the overshoot runs, seconds


def _hanging() -> ScriptProvider:
    """One complete line and one unfinished one, then the model stops answering."""
    return ScriptProvider(["A complete line.\n", "and half of the next", Hang()])


async def _measure(runs: int) -> tuple[list[float], list[float]]:
    stops: list[float] = []
    overshoots: list[float] = []
    async with local_discord() as (_, _, channel):
        orchestrator = StreamOrchestrator(StopRegistry())
        context = StreamContext(channel)
        loop = asyncio.get_running_loop()
        asked: list[float] = []

        def stop() -> None:
            asked.append(loop.time())
            orchestrator.request_stop(channel.id, "bench")

        for _ in range(runs):
            loop.call_later(0.05, stop)
            result = await orchestrator.stream_to_discord(
                _hanging(), StreamConfig(delivery="messages"), context
            )
            assert result.status == "stopped_by_user", result.status
            stops.append(loop.time() - asked[-1])

            provider = _hanging()
            config = StreamConfig(delivery="messages", inactivity_timeout=TIMEOUT)
            result = await orchestrator.stream_to_discord(provider, config, context)
            assert result.status == "timeout", result.status
            assert provider.last_chunk_at is not None
            overshoots.append(loop.time() - (provider.last_chunk_at + TIMEOUT))
    return stops, overshoots


class ListProvider:
    """Yields pre-built chunks, awaiting nothing: the provider costs as little as possible.
    Not the test kit's `ScriptProvider`, on purpose: this is the floor the ratio divides by,
    and a provider that notes every call would raise the floor and flatter the shell."""

    name = "list"

    def __init__(self, items: list[ProcessedChunk]) -> None:
        self.items = items

    async def start_stream(
        self, config: StreamConfig, context: StreamContext
    ) -> AsyncIterator[ProcessedChunk]:
        for item in self.items:
            yield item

    def process_chunk(self, raw: ProcessedChunk) -> ProcessedChunk:
        return raw

    def describe_error(self, error: ProviderError, locale: str) -> str | None:
        return None


class YieldingProvider(ListProvider):
    """`ListProvider`, but it lets the event loop turn before each chunk (`sleep(0)`), as a
    model whose chunks come one network read each does: every chunk is a run of its own, so
    the shell feeds the core once per chunk (`shell_yield_overhead_ratio`)."""

    name = "yielding"

    async def start_stream(
        self, config: StreamConfig, context: StreamContext
    ) -> AsyncIterator[ProcessedChunk]:
        for item in self.items:
            await asyncio.sleep(0)
            yield item


class _Sent:
    jump_url = "https://discord.com/channels/1/2/3"


class InstantSink:
    """A channel that accepts every message at once (what the shell costs without Discord)."""

    id = 1

    async def send(self, *args: object, **kwargs: object) -> _Sent:
        return _Sent()

    async def typing(self) -> None:
        return None


async def _throughput(provider: ListProvider, repeats: int) -> tuple[float, float]:
    config = StreamConfig(delivery="messages", flush_limit=0)
    context = StreamContext(InstantSink())  # type: ignore[arg-type]  # duck-typed sink
    orchestrator = StreamOrchestrator(StopRegistry())
    shell_s = bare_s = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = await orchestrator.stream_to_discord(provider, config, context)
        shell_s = min(shell_s, time.perf_counter() - start)
        assert result.status == "completed", result.status
        start = time.perf_counter()
        async for item in provider.start_stream(config, context):
            provider.process_chunk(item)
        bare_s = min(bare_s, time.perf_counter() - start)
    return shell_s, bare_s


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000


def measure(quick: bool = False) -> dict[str, float]:
    items: list[ProcessedChunk] = [TextChunk(c) for c in chunked(answer(200_000))]
    previous = set_global_budget(None)  # an instant sink, not Discord: nothing to pace
    try:
        shell_s, bare_s = asyncio.run(_throughput(ListProvider(items), 3 if quick else 5))
        yield_s, yield_bare_s = asyncio.run(
            _throughput(YieldingProvider(items[: len(items) // 4]), 3 if quick else 5)
        )
    finally:
        set_global_budget(previous)
    stops, overshoots = asyncio.run(_measure(20 if quick else 100))
    return {
        "shell_chunks_per_s": len(items) / shell_s,
        "bare_iter_chunks_per_s": len(items) / bare_s,
        "shell_overhead_ratio": shell_s / bare_s,
        "shell_yield_overhead_ratio": yield_s / yield_bare_s,
        "stop_latency_ms_p50": _p(stops, 50),
        "stop_latency_ms_p99": _p(stops, 99),
        "timeout_overshoot_ms_p50": _p(overshoots, 50),
        "timeout_overshoot_ms_p99": _p(overshoots, 99),
    }
