"""Real parts for shell tests: the local Discord emulator, a logged-in discord.py client, an
orchestrator with its own registry, and the scripted provider.

The provider is the test kit's `ScriptProvider` (`cordstream.shell.testing.script`, re-exported
here with its steps): it plays text, raw items, `Sleep`, `Hang`, `Do` and exceptions, and
records what the shell did to it (started, closed, the order of `process_chunk` calls and
when).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import discord

from cordstream.shell import (
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    StreamProvider,
    StreamResult,
)
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing import (
    DiscordEmulator,
    Do,
    Hang,
    Raw,
    ScriptProvider,
    Sleep,
    Step,
    local_discord,
)

__all__ = [
    "Do",
    "Hang",
    "Raw",
    "ScriptProvider",
    "Sleep",
    "Stage",
    "Step",
    "other_tasks",
    "stage",
]


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
            provider, config or StreamConfig(delivery="messages"), self.context(**context)
        )

    @property
    def contents(self) -> list[str]:
        return [m.content for m in self.api.messages() if not m.embeds]

    @property
    def embeds(self) -> list[dict[str, object]]:
        return [dict(m.embeds[0]) for m in self.api.messages() if m.embeds]


@asynccontextmanager
async def stage(registry: type[StopRegistry] = StopRegistry) -> AsyncIterator[Stage]:
    """A fresh emulator, client, channel and registry (start it inside the test body, so
    looptime's virtual clock covers it); `registry` is the registry's class, on the loop's clock."""
    async with local_discord() as (api, client, channel):
        stops = registry(clock=asyncio.get_running_loop().time)
        yield Stage(api, client, channel, stops, StreamOrchestrator(stops))


def other_tasks() -> set[asyncio.Task[object]]:
    """Tasks still running besides the current one (B11: a stream leaves none behind)."""
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}
