"""B1 through the real shell: a bug in the shell that feeds the core an impossible event is not
silent. It is listed in `StreamResult.anomalies` and logged on the `cordstream` logger, and
changes nothing else: the channel and the result still agree (F2).

The bug is simulated, as no correct code path makes one: the orchestrator's `step` feeds every
Discord answer twice. Real discord.py, the local emulator, virtual time."""

from __future__ import annotations

import logging

import pytest

from cordstream.domain import Delivered, Effect, Event, StreamState, step
from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator, StreamResult
from cordstream.shell import orchestrator as orchestrator_module
from cordstream.shell.testing import ScriptProvider, local_discord

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def two_lines(caplog: pytest.LogCaptureFixture) -> tuple[StreamResult, str]:
    """Two lines streamed as messages into a local Discord, the `cordstream` logger captured:
    the result, and the channel's text."""
    provider = ScriptProvider(["One line.\n", "Two lines.\n"])
    async with local_discord() as (api, _, channel):
        with caplog.at_level(logging.WARNING, logger="cordstream"):
            result = await StreamOrchestrator().stream_to_discord(
                provider,
                StreamConfig(delivery="messages", humanizer_degree=1),
                StreamContext(channel),
            )
        return result, api.text()


async def test_B1_an_answer_fed_twice_is_listed_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def twice(state: StreamState, event: Event) -> tuple[StreamState, tuple[Effect, ...]]:
        state, effects = step(state, event)
        if isinstance(event, Delivered):  # the shell's bug: the same answer again
            state, more = step(state, event)
            effects += more
        return state, effects

    monkeypatch.setattr(orchestrator_module, "step", twice)
    result, channel_text = await two_lines(caplog)
    assert result.status == "completed"
    assert result.accumulated_text == channel_text == "One line.\nTwo lines."
    assert result.anomalies
    assert all(line.startswith("Delivered for request") for line in result.anomalies)
    warnings = [r for r in caplog.records if r.name.startswith("cordstream")]
    assert [r.name for r in warnings] == ["cordstream.stream"]
    assert len(warnings) == 1
    assert "impossible events" in warnings[0].getMessage()
    assert result.anomalies[0] in warnings[0].getMessage()


async def test_B1_a_correct_shell_feeds_no_impossible_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    result, _ = await two_lines(caplog)
    assert result.anomalies == ()
    assert not [r for r in caplog.records if r.name.startswith("cordstream")]
