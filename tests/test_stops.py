"""The stop registry in the shell (SPEC C1–C3, C5, C8): one entry per channel, woken at once;
and what a running stream does with entries that arrive while its outcome is decided (C2, C5,
C7), against the Discord emulator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from cordstream.domain import StopRequest, StreamResult
from cordstream.shell import StreamConfig, StreamOrchestrator
from cordstream.shell.stops import DEFAULT_STOPS, StopRegistry
from cordstream.shell.testing.emulator import Delay, RateLimited
from tests.stage import Hang, ScriptProvider, Stage, stage


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def entry(stops: StopRegistry, channel_id: int = 1) -> StopRequest:
    """The channel's entry, which the test expects to be there."""
    found = stops.peek(channel_id)
    assert found is not None
    return found


def test_C1_one_entry_per_channel_with_kind_requester_context_and_time() -> None:
    clock = Clock()
    stops = StopRegistry(clock=clock)
    assert stops.request_stop(1, "user-1", context="the /stop message")
    first = entry(stops)
    assert (first.kind, first.requester_id, first.context, first.at) == (
        "stop",
        "user-1",
        "the /stop message",
        1000.0,
    )
    assert stops.peek(2) is None
    assert len(stops) == 1


def test_C2_a_stop_replaces_a_follow_up_and_an_earlier_stop() -> None:
    stops = StopRegistry()
    assert stops.request_follow_up(1, "user-1")
    assert stops.request_stop(1, "user-2")
    assert stops.request_stop(1, None)  # a system stop
    assert (entry(stops).kind, entry(stops).requester_id) == ("stop", None)


def test_C2_an_empty_requester_is_a_system_stop() -> None:
    stops = StopRegistry()
    stops.request_stop(1, "")
    assert entry(stops).requester_id is None


def test_C3_a_follow_up_is_refused_while_a_stop_is_pending() -> None:
    stops = StopRegistry()
    stops.request_stop(1, "user-1")
    assert not stops.request_follow_up(1, "user-2")
    assert entry(stops).kind == "stop"


def test_C3_a_follow_up_replaces_an_earlier_follow_up() -> None:
    stops = StopRegistry()
    stops.request_follow_up(1, "user-1")
    assert stops.request_follow_up(1, "user-2")
    assert entry(stops).requester_id == "user-2"


def test_C5_consume_removes_only_the_entry_that_was_resolved() -> None:
    stops = StopRegistry()
    stops.request_follow_up(1, "user-1")
    resolved = entry(stops)
    stops.request_stop(1, "user-2")  # registered after the stream resolved the follow-up
    stops.consume(1, resolved)
    assert stops.has_stop_request(1)  # the newer entry stays for the next stream
    stops.consume(1, entry(stops))
    assert not stops.has_stop_request(1)


def test_B4_discard_forgets_a_request_that_would_end_a_fresh_turn_at_once() -> None:
    orchestrator = StreamOrchestrator(StopRegistry())
    orchestrator.request_follow_up(7, "user-1")  # arrived after the last stream had ended
    orchestrator.request_stop(8, "user-2")
    assert orchestrator.discard_requests(7)
    assert not orchestrator.has_stop_request(7)
    assert not orchestrator.discard_requests(7)  # nothing left
    assert orchestrator.has_stop_request(8)  # other channels keep theirs


def test_C8_entries_older_than_five_minutes_are_swept_by_the_registry() -> None:
    clock = Clock()
    stops = StopRegistry(clock=clock)
    stops.request_stop(1, "user-1")
    stops.request_stop(2, "user-1")
    clock.now += 299.0
    assert stops.has_stop_request(1)
    clock.now += 2.0
    assert not stops.has_stop_request(1)
    assert len(stops) == 0  # channel 2 swept too, without anyone asking for it


def test_B3_listeners_are_called_when_an_entry_is_registered() -> None:
    stops = StopRegistry()
    calls: list[str] = []
    unlisten = stops.listen(1, lambda: calls.append("woken"))
    stops.request_stop(2, "user-1")  # another channel
    stops.request_stop(1, "user-1")
    assert calls == ["woken"]
    stops.request_stop(1, "user-1")
    assert calls == ["woken", "woken"]
    unlisten()
    assert stops.listening() == 0
    stops.request_stop(1, "user-1")
    assert calls == ["woken", "woken"]


def test_B3_a_refused_follow_up_wakes_nobody() -> None:
    stops = StopRegistry()
    stops.request_stop(1, "user-1")
    calls: list[str] = []
    stops.listen(1, lambda: calls.append("woken"))
    assert not stops.request_follow_up(1, "user-2")
    assert calls == []


def test_C_a_module_level_registry_is_shared_by_default() -> None:
    assert StreamOrchestrator().stops is DEFAULT_STOPS
    assert StreamOrchestrator().stops is StreamOrchestrator().stops
    own = StopRegistry()
    assert StreamOrchestrator(own).stops is own


# -- C2, C5, C7 in a running stream: requests while the last message waits out a 429 ------------
# Discord answers the first send with a 429 (retry after 1 s), so the outcome is decided while
# that message is still in flight: the window in which a later request meets a decided outcome.


Made = Callable[[Stage], bool]


def _stop(requester: str | None, context: str) -> Made:
    return lambda s: s.orchestrator.request_stop(s.channel.id, requester, context)


def _follow_up(requester: str) -> Made:
    return lambda s: s.orchestrator.request_follow_up(s.channel.id, requester)


async def _two_requests(
    s: Stage, first: Made, second: Made, *, hang: bool = True
) -> tuple[StreamResult, ScriptProvider, list[bool]]:
    """Stream "First line\nSecond" (then hang, or end) while its first send waits out a 429
    (1 s); `first` is made at 0.1 s, `second` at 0.15 s. The result, the provider, and
    whether the registry accepted each request."""
    loop = asyncio.get_running_loop()
    s.api.inject(RateLimited(retry_after=1.0), route="send")
    provider = ScriptProvider(["First line\nSecond", *([Hang()] if hang else [])])
    accepted: list[bool] = []
    loop.call_later(0.1, lambda: accepted.append(first(s)))
    loop.call_later(0.15, lambda: accepted.append(second(s)))
    return await s.stream(provider), provider, accepted


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(
    ("requester", "reason"), [("bob", "user_request"), (None, "system_request")]
)
async def test_C2_C7_a_stop_50ms_after_a_follow_up_wins_and_leaves_nothing_behind(
    requester: str | None, reason: str
) -> None:
    async with stage() as s:
        result, provider, accepted = await _two_requests(
            s, _follow_up("bob"), _stop(requester, "ctx")
        )
        assert accepted == [True, True]
        assert result.status == "stopped_by_user"
        assert result.stop_reason == reason
        assert result.stop_context == "ctx"
        assert len(s.stops) == 0  # C5: the stream consumed the stop it resolved
        assert s.contents == ["First line", "Second"]  # C6: what the follow-up dropped, sent
        assert result.messages == ("First line", "Second")
        assert provider.closed


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C5_C7_a_follow_up_50ms_after_a_stop_stays_for_the_next_stream() -> None:
    async with stage() as s:
        result, _, _ = await _two_requests(s, _stop("bob", "ctx"), _follow_up("carol"))
        assert result.status == "stopped_by_user"
        assert result.stop_context == "ctx"
        assert s.contents == ["First line", "Second"]
        left = entry(s.stops, s.channel.id)
        assert (left.kind, left.requester_id) == ("follow_up", "carol")


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C2_a_stop_after_a_follow_up_on_a_completed_answer_still_wins() -> None:
    async with stage() as s:
        # The answer ends on its own.
        result, _, _ = await _two_requests(s, _follow_up("bob"), _stop("bob", "ctx"), hang=False)
        assert result.status == "stopped_by_user"
        assert result.stop_context == "ctx"
        assert len(s.stops) == 0
        assert s.contents == ["First line", "Second"]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C5_a_stop_during_an_internal_stop_stays_in_the_registry() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        s.api.inject(Delay(0.0), route="send")  # "one"
        s.api.inject(Delay(2.0), route="send")  # the flush-limit warning, slow
        provider = ScriptProvider(["one\n", "two\n", "three", Hang()])
        loop.call_later(0.5, s.orchestrator.request_stop, s.channel.id, "bob", "ctx")
        result = await s.stream(provider, StreamConfig(delivery="messages", flush_limit=1))
        assert result.status == "stopped_by_user"
        assert result.stop_reason == "flush_limit"
        assert result.stop_context is None
        assert s.contents == ["one"]
        # The outcome was fixed: the bot sees the stop.
        assert entry(s.stops, s.channel.id).context == "ctx"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C5_a_second_stop_while_stopping_is_consumed() -> None:
    async with stage() as s:
        result, _, _ = await _two_requests(s, _stop(None, "shutdown"), _stop("bob", "ctx"))
        assert result.stop_reason == "system_request"
        assert result.stop_context == "shutdown"
        assert len(s.stops) == 0
        assert s.contents == ["First line", "Second"]
