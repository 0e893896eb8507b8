"""B1 for the caller's own mistakes: a wrong argument to `stream_to_discord` or `run_turn` is one
clear TypeError, returned as the result's error (never raised), and nothing else happens.

Rules these tests pin (`cordstream.shell.arguments`): the call returns status `error` with the
TypeError naming the call, the parameter and the type it got (as `data`; for a turn, also as
`TurnResult.error`); nothing reaches Discord (no request after the client's own log-in); the
provider is never started; the result lists no anomaly and the `cordstream` logger says
nothing, so no "impossible events" line blames cordstream for the caller's mistake.

Real discord.py against the local emulator, the test kit's scripted model, virtual time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import discord
import pytest

from cordstream.shell import (
    StopRegistry,
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    StreamResult,
    stops,
)
from cordstream.shell.testing import DiscordEmulator, ScriptProvider, local_discord
from cordstream.shell.turn import TurnResult, run_turn

STREAM_ORDER = "(the arguments are stream_to_discord(provider, config, context))"
TURN_ORDER = "(the arguments are run_turn(orchestrator, provider, context, *, tools, config=None))"
CHANNEL = "context.channel must be a channel with an int `id` or a discord.Interaction"
PROVIDER = "provider must be a StreamProvider (with start_stream and process_chunk)"

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


@dataclass
class Scene:
    api: DiscordEmulator
    channel: discord.TextChannel
    provider: ScriptProvider
    orchestrator: StreamOrchestrator


# What each misuse passes, given the scene: (provider, config, context).
Arguments = Callable[[Scene], tuple[Any, Any, Any]]

MISUSES: dict[str, tuple[Arguments, str]] = {
    "a dict as config": (
        lambda s: (s.provider, {"delivery": "messages"}, StreamContext(s.channel)),
        "config must be a StreamConfig, got dict",
    ),
    "config and context swapped": (
        lambda s: (s.provider, StreamContext(s.channel), StreamConfig()),
        f"config must be a StreamConfig, got StreamContext {STREAM_ORDER}",
    ),
    "the channel's id as channel": (
        lambda s: (s.provider, StreamConfig(), StreamContext(s.channel.id)),  # type: ignore[arg-type]
        f"{CHANNEL}, got int (pass the channel, not its id)",
    ),
    "a string as provider": (
        lambda s: ("openai", StreamConfig(), StreamContext(s.channel)),
        f"{PROVIDER}, got str",
    ),
    "a list of strings as provider": (
        lambda s: (["Hello", "world"], StreamConfig(), StreamContext(s.channel)),
        f"{PROVIDER}, got list",
    ),
    "the provider's class as provider": (
        lambda s: (ScriptProvider, StreamConfig(), StreamContext(s.channel)),
        "provider must be a StreamProvider, got the class ScriptProvider (pass an instance)",
    ),
    "a channel without an id": (
        lambda s: (s.provider, StreamConfig(), StreamContext(object())),  # type: ignore[arg-type]
        f"{CHANNEL}, got object",
    ),
}


@asynccontextmanager
async def scene(caplog: pytest.LogCaptureFixture) -> AsyncIterator[Scene]:
    """A local Discord, a scripted model that would say "never said", the `cordstream` logger
    captured; on exit, checks that nothing reached Discord and that the logger said nothing."""
    async with local_discord() as (api, _, channel):
        logged_in = len(api.requests)
        provider = ScriptProvider(["never said"])
        with caplog.at_level(logging.DEBUG, logger="cordstream"):
            yield Scene(api, channel, provider, StreamOrchestrator(StopRegistry()))
        assert api.requests[logged_in:] == []  # nothing sent, not even "typing"
        assert provider.calls == []  # the model was never asked
    assert not [r for r in caplog.records if r.name.startswith("cordstream")]
    assert not [r for r in caplog.records if "impossible events" in r.getMessage()]


def refused(result: StreamResult, message: str) -> None:
    assert result.status == "error"
    assert type(result.data) is TypeError
    assert str(result.data) == message
    assert result.anomalies == ()
    assert (result.messages_sent, result.accumulated_text, result.usage) == (0, "", None)


TURN_MESSAGES = {
    **{name: message.replace(STREAM_ORDER, TURN_ORDER) for name, (_, message) in MISUSES.items()},
    # `run_turn` takes the context third: swapped, the context is what is wrong first.
    "config and context swapped": f"context must be a StreamContext, got StreamConfig {TURN_ORDER}",
}


@pytest.mark.parametrize("entry", ["stream_to_discord", "run_turn"])
@pytest.mark.parametrize("misuse", list(MISUSES))
async def test_B1_misuse_returns_a_TypeError_naming_the_argument(
    misuse: str, entry: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The same misuse through either entry point: a result (not an exception) whose error
    names the argument, in the order that entry point takes its arguments."""
    arguments, message = MISUSES[misuse]
    async with scene(caplog) as s:
        provider, config, context = arguments(s)
        if entry == "stream_to_discord":
            result = await s.orchestrator.stream_to_discord(provider, config, context)
            refused(result, f"stream_to_discord: {message}")
        else:
            turn = await run_turn(s.orchestrator, provider, context, tools={}, config=config)
            turn_refused(turn, f"run_turn: {TURN_MESSAGES[misuse]}")


def turn_refused(result: TurnResult, message: str) -> None:
    assert result.status == "error"
    assert type(result.error) is TypeError
    assert str(result.error) == message
    (segment,) = result.segments
    assert segment.data is result.error
    refused(segment, message)
    assert result.text == ""
    assert result.tool_runs == ()


async def test_B1_run_turn_names_a_wrong_orchestrator_and_tools(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with scene(caplog) as s:
        context = StreamContext(s.channel)
        swapped = await run_turn(
            s.provider,  # type: ignore[arg-type]  # the misuse under test
            s.orchestrator,  # type: ignore[arg-type]
            context,
            tools={},
        )
        listed = await run_turn(
            s.orchestrator,
            s.provider,  # type: ignore[arg-type]  # no after_tools: fine without tool calls
            context,
            tools=[len],  # type: ignore[arg-type]  # the misuse under test
        )
    turn_refused(swapped, "run_turn: orchestrator must be a StreamOrchestrator, got ScriptProvider")
    turn_refused(
        listed, "run_turn: tools must be a mapping of tool names to async functions, got list"
    )


async def test_B1_the_right_arguments_still_stream(caplog: pytest.LogCaptureFixture) -> None:
    """The checks refuse nothing a bot passes: the same call with the right arguments streams
    and logs no warning (only the stream's own INFO line, and DEBUG records)."""
    async with local_discord() as (api, _, channel):
        with caplog.at_level(logging.DEBUG, logger="cordstream"):
            config = StreamConfig(delivery="messages")
            result = await StreamOrchestrator(StopRegistry()).stream_to_discord(
                ScriptProvider(["Hello"]), config, StreamContext(channel)
            )
    assert (result.status, api.text()) == ("completed", "Hello")
    ours = [r for r in caplog.records if r.name.startswith("cordstream")]
    assert not [r for r in ours if r.levelno >= logging.WARNING]
    assert [r.name for r in ours if r.levelno == logging.INFO] == ["cordstream.stream"]


class _BrokenStops(StopRegistry):
    """A registry whose reader fails as the stream starts: a fault in the shell before the
    core was fed anything."""

    def reader(self, channel_id: int, answering: int | None = None) -> stops.StopReader:
        reader = super().reader(channel_id, answering)

        def start() -> list[Any]:
            raise ConnectionError("the registry is unreachable")

        reader.start = start  # type: ignore[method-assign]
        return reader


async def test_B1_a_fault_before_the_stream_started_feeds_the_core_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fault before `Started` ends the call as `error` with the fault as `data`; the core,
    never started, is not fed `ProviderCrashed` (an impossible event for it), so there is no
    anomaly and no "impossible events" line."""
    provider = ScriptProvider(["never said"])
    async with local_discord() as (api, _, channel):
        logged_in = len(api.requests)
        with caplog.at_level(logging.DEBUG, logger="cordstream"):
            result = await StreamOrchestrator(_BrokenStops()).stream_to_discord(
                provider, StreamConfig(delivery="messages"), StreamContext(channel)
            )
        assert api.requests[logged_in:] == []
    assert result.status == "error"
    assert isinstance(result.data, ConnectionError)
    assert result.anomalies == ()
    assert cast("Any", result.thought_log).generation_duration_ms == 0  # it never ran
    assert provider.calls == []
    assert not [r for r in caplog.records if "impossible events" in r.getMessage()]
