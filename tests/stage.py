"""Real parts for shell tests: the local Discord emulator, a logged-in discord.py client, an
orchestrator with its own registry, and a provider that plays a script.

`ScriptProvider` plays steps in order: text to yield (as a `TextChunk`), any other value
yielded as-is (a raw item that `process_chunk` returns unchanged, garbage included), a
`Sleep`, a `Hang` (await forever), a `Do` (run a callable), or an exception to raise. It
records what the shell did to it: whether it was started and closed, and the order of
`on_stream_progress` and `process_chunk` calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import discord

from cordstream.domain import ProcessedChunk, ProviderError, TextChunk
from cordstream.shell import (
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    StreamProvider,
    StreamResult,
)
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing.emulator import DiscordEmulator, discord_client


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Hang:
    """The model stops answering: the next `__anext__` never returns."""


@dataclass(frozen=True)
class Do:
    """Run `action` inside the provider, between two chunks, without awaiting anything."""

    action: Callable[[], object]


Step = str | Sleep | Hang | Do | BaseException | object


@dataclass
class ScriptProvider:
    steps: Sequence[Step]
    name: str = "script"
    headline: str | None = None
    calls: list[str] = field(default_factory=list)  # "progress", "process", "start", "close"
    started: bool = False
    closed: bool = False
    raise_in_process: BaseException | None = None

    async def _run(self) -> AsyncIterator[object]:
        try:
            for step in self.steps:
                match step:
                    case Sleep(seconds=seconds):
                        await asyncio.sleep(seconds)
                    case Hang():
                        await asyncio.Event().wait()
                    case Do(action=action):
                        action()
                    case BaseException():
                        raise step
                    case str():
                        yield TextChunk(step)
                    case _:
                        yield step
        finally:
            self.closed = True
            self.calls.append("close")

    def start_stream(self, config: StreamConfig, context: StreamContext) -> AsyncIterator[object]:
        self.started = True
        self.calls.append("start")
        return self._run()

    def process_chunk(self, raw: object) -> ProcessedChunk:
        self.calls.append("process")
        if self.raise_in_process is not None:
            raise self.raise_in_process
        return raw  # type: ignore[return-value]  # garbage passes through on purpose

    def describe_error(self, error: ProviderError, locale: str) -> str | None:
        return self.headline


@dataclass
class Stage:
    api: DiscordEmulator
    client: discord.Client
    channel: discord.TextChannel
    stops: StopRegistry
    orchestrator: StreamOrchestrator

    def context(self, **changes: object) -> StreamContext:
        return StreamContext(self.channel, **changes)  # type: ignore[arg-type]  # test knobs

    async def stream(
        self,
        provider: StreamProvider[Any],
        config: StreamConfig | None = None,
        **context: object,
    ) -> StreamResult:
        return await self.orchestrator.stream_to_discord(
            provider, config or StreamConfig(), self.context(**context)
        )

    @property
    def contents(self) -> list[str]:
        return [m.content for m in self.api.messages() if not m.embeds]

    @property
    def embeds(self) -> list[dict[str, object]]:
        return [dict(m.embeds[0]) for m in self.api.messages() if m.embeds]


@asynccontextmanager
async def stage() -> AsyncIterator[Stage]:
    """A fresh emulator, client, channel and registry (start it inside the test body, so
    looptime's virtual clock covers it)."""
    async with DiscordEmulator() as api, discord_client(api) as client:
        channel = await client.fetch_channel(api.channel_id)
        assert isinstance(channel, discord.TextChannel)
        stops = StopRegistry(clock=asyncio.get_running_loop().time)
        yield Stage(api, client, channel, stops, StreamOrchestrator(stops))


def other_tasks() -> set[asyncio.Task[object]]:
    """Tasks still running besides the current one (B11: a stream leaves none behind)."""
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}
