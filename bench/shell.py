"""The shell's figures on real time: how fast a stop or the deadline ends a hanging stream (B2, B3).

Each run streams through the real shell and discord.py into the local Discord emulator: a
provider yields one complete line and one unfinished one, then hangs forever.

- stop latency: from `request_stop` to `stream_to_discord` returning, the flush of the
  unfinished line to Discord included;
- timeout overshoot: from the deadline (last chunk + inactivity timeout) to the return, the
  flush and the timeout embed included.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import AsyncIterator

import discord

from domain import ProcessedChunk, ProviderError, TextChunk
from shell import StreamConfig, StreamContext, StreamOrchestrator
from shell.emulator import DiscordEmulator, discord_client
from shell.stops import StopRegistry

TIMEOUT = 0.2  # inactivity timeout of the overshoot runs, seconds


class HangingProvider:
    name = "hanging"

    def __init__(self) -> None:
        self.last_chunk_at = 0.0

    async def start_stream(
        self, config: StreamConfig, context: StreamContext
    ) -> AsyncIterator[ProcessedChunk]:
        loop = asyncio.get_running_loop()
        for text in ("A complete line.\n", "and half of the next"):
            self.last_chunk_at = loop.time()
            yield TextChunk(text)
        await asyncio.Event().wait()

    def process_chunk(self, raw: ProcessedChunk) -> ProcessedChunk:
        return raw

    def describe_error(self, error: ProviderError, locale: str) -> str | None:
        return None


async def _measure(runs: int) -> tuple[list[float], list[float]]:
    stops: list[float] = []
    overshoots: list[float] = []
    async with DiscordEmulator() as api, discord_client(api) as client:
        channel = await client.fetch_channel(api.channel_id)
        assert isinstance(channel, discord.TextChannel)
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
                HangingProvider(), StreamConfig(), context
            )
            assert result.status == "stopped_by_user", result.status
            stops.append(loop.time() - asked[-1])

            provider = HangingProvider()
            config = StreamConfig(inactivity_timeout=TIMEOUT)
            result = await orchestrator.stream_to_discord(provider, config, context)
            assert result.status == "timeout", result.status
            overshoots.append(loop.time() - (provider.last_chunk_at + TIMEOUT))
    return stops, overshoots


def _p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000


def measure(quick: bool = False) -> dict[str, float]:
    stops, overshoots = asyncio.run(_measure(20 if quick else 100))
    return {
        "stop_latency_ms_p50": _p(stops, 50),
        "stop_latency_ms_p99": _p(stops, 99),
        "timeout_overshoot_ms_p50": _p(overshoots, 50),
        "timeout_overshoot_ms_p99": _p(overshoots, 99),
    }
