"""The stop registry in the shell (SPEC C1–C3, C5, C8): one entry per channel, woken at once;
and what a running stream does with entries that arrive while its outcome is decided (C2, C5,
C7), against the Discord emulator. Per-answer requests (C9) in the registry, by example and as
properties, and who may stop an answer (C10)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import discord
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cordstream.domain import StopRequest, StreamResult, may_stop
from cordstream.domain.requests import Origin, admit, reaches, resolve
from cordstream.shell import StreamConfig, StreamOrchestrator
from cordstream.shell.stops import (
    DEFAULT_STOPS,
    StopReader,
    StopRegistry,
    interaction_may_stop,
    member_may_stop,
)
from cordstream.shell.testing.emulator import Delay, RateLimited
from tests.support.fuzz import examples
from tests.support.stage import Do, Hang, ScriptProvider, Sleep, Stage, stage


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


@pytest.mark.parametrize(
    "requester", ["send_message_limit", "flush_limit", "channel_deleted", "missing_access"]
)
def test_C4_the_registry_reads_an_internal_id_once_into_the_typed_field(requester: str) -> None:
    clock = Clock()
    stops = StopRegistry(clock=clock)
    stops.request_stop(1, requester, context="ops")
    internal = entry(stops)
    assert (internal.internal, internal.requester_id, internal.at) == (requester, requester, 1000.0)
    stops.request_stop(1, "user-1")
    assert entry(stops).internal is None


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
        # Apart, so that "one" goes alone (E10: text given at once is fed, and packed, at once).
        provider = ScriptProvider(["one\n", Sleep(0.1), "two\n", Sleep(0.1), "three", Hang()])
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


# -- C9: per-answer requests in the registry -------------------------------------------------------
# Users 10 (Alice), 20 (Bob) and 30 (Carol); a stream answering one of them holds a reader.

ALICE, BOB, CAROL = 10, 20, 30


def test_C9_a_stop_aimed_at_an_answer_has_a_slot_of_its_own() -> None:
    stops = StopRegistry()
    assert stops.request_stop(1, "20", "bob's /stop", answering=BOB)
    aimed = stops.peek(1, answering=BOB)
    assert aimed is not None
    assert (aimed.kind, aimed.requester_id, aimed.context, aimed.answering) == (
        "stop",
        "20",
        "bob's /stop",
        BOB,
    )
    assert stops.peek(1) is None  # the channel's own slot is empty
    assert stops.peek(1, answering=ALICE) is None
    assert stops.has_stop_request(1, answering=BOB)
    assert not stops.has_stop_request(1, answering=ALICE)
    assert stops.has_stop_request(1)  # something is pending in the channel
    assert len(stops) == 1


def test_C9_a_reader_is_handed_only_what_reaches_its_answer() -> None:
    stops = StopRegistry()
    alice, bob, anyone = stops.reader(1, ALICE), stops.reader(1, BOB), stops.reader(1, None)
    stops.request_stop(1, "20", answering=BOB)
    stops.request_follow_up(1, str(CAROL))  # no answer of Carol's runs: the channel's slot
    stops.request_follow_up(1, str(ALICE))  # Alice's answer runs: her slot
    carols, bobs, alices = (
        stops.peek(1),
        stops.peek(1, answering=BOB),
        stops.peek(1, answering=ALICE),
    )
    assert carols is not None
    assert carols.requester_id == str(CAROL)
    assert alices is not None
    assert alices.kind == "follow_up"
    assert alice.pending() == [alices]
    assert bob.pending() == [bobs]
    # A stream naming nobody is the channel's answer: everything reaches it, stops first.
    assert anyone.pending() == [bobs, alices, carols]
    assert stops.request_follow_up(1, "carol")  # an id that is no user's answer: the channel's
    assert stops.peek(1) is not carols  # ... and it replaced Carol's there (C3)
    assert alice.pending() == [alices]
    assert bob.pending() == [bobs]


def test_C9_a_follow_up_goes_to_its_authors_slot_only_while_their_answer_runs() -> None:
    stops = StopRegistry()
    stops.request_follow_up(1, str(ALICE))
    assert stops.peek(1) is not None
    assert stops.peek(1, answering=ALICE) is None
    stops.discard(1)
    alice = stops.reader(1, ALICE)
    assert stops.is_answering(1, ALICE)
    assert not stops.is_answering(1, BOB)
    stops.request_follow_up(1, str(ALICE))
    assert stops.peek(1) is None
    assert stops.peek(1, answering=ALICE) is not None
    alice.close()
    assert not stops.is_answering(1, ALICE)
    assert not stops.is_answering(2, ALICE)  # another channel


def test_C2_C9_a_stop_aimed_at_one_answer_replaces_that_answers_entries_only() -> None:
    stops = StopRegistry()
    stops.reader(1, ALICE)
    stops.reader(1, BOB)
    stops.request_follow_up(1, str(ALICE))
    stops.request_follow_up(1, str(BOB))
    bobs = stops.peek(1, answering=BOB)
    stops.request_stop(1, "10", "alice's /stop", answering=ALICE)
    alices = stops.peek(1, answering=ALICE)
    assert alices is not None
    assert alices.kind == "stop"
    assert stops.peek(1, answering=BOB) is bobs  # Bob's follow-up stays
    assert stops.request_stop(1, "10", "again", answering=ALICE)
    again = stops.peek(1, answering=ALICE)
    assert again is not None
    assert again.context == "again"
    assert len(stops) == 2


def test_C2_C9_a_stop_aimed_at_an_answer_replaces_its_follow_up_in_the_channels_slot() -> None:
    stops = StopRegistry()
    stops.request_follow_up(1, str(ALICE))  # no answer runs: the channel's slot
    stops.request_stop(1, "10", answering=ALICE)
    assert stops.peek(1) is None
    stops.request_follow_up(1, str(BOB))
    stops.request_stop(1, "10", answering=ALICE)
    assert stops.peek(1) is not None  # Bob's follow-up is no part of Alice's answer


def test_C3_C9_a_follow_up_is_refused_only_while_a_stop_reaches_its_authors_answer() -> None:
    stops = StopRegistry()
    stops.reader(1, ALICE)
    stops.reader(1, BOB)
    stops.request_stop(1, "20", answering=BOB)
    assert stops.request_follow_up(1, str(ALICE))  # Bob's stop is no part of Alice's answer
    assert not stops.request_follow_up(1, str(BOB))
    stops.request_stop(1, None, "shutdown")  # channel-wide: replaces every entry (C2)
    assert len(stops) == 1
    assert not stops.request_follow_up(1, str(ALICE))  # it reaches Alice's answer too
    assert not stops.request_follow_up(1, str(CAROL))


def test_C3_C9_a_follow_up_replaces_its_authors_earlier_one_wherever_it_is() -> None:
    stops = StopRegistry()
    stops.request_follow_up(1, str(ALICE))  # before her answer ran: the channel's slot
    alice = stops.reader(1, ALICE)
    assert alice.start() == [stops.peek(1)]  # B4: her answer takes it when it starts
    alice.close()  # ... and ended without resolving it: it waits
    alice = stops.reader(1, ALICE)
    stops.request_follow_up(1, str(ALICE))  # now into her slot
    assert stops.peek(1) is None  # the earlier one is replaced (C3)
    assert len(stops) == 1


def test_C5_C9_a_channel_wide_stop_reaches_every_running_answer_and_goes_once_all_took_it() -> None:
    stops = StopRegistry()
    alice, bob = stops.reader(1, ALICE), stops.reader(1, BOB)
    stops.request_stop(1, "99", "the moderator's /stop")
    stop = stops.peek(1)
    assert stop is not None
    assert alice.pending() == [stop]
    assert bob.pending() == [stop]
    alice.consume(stop)
    assert alice.pending() == []
    assert bob.pending() == [stop]  # Bob's stream has yet to resolve it
    bob.consume(stop)
    assert len(stops) == 0
    later = stops.reader(1, ALICE)
    assert later.start() == []  # nothing leaks into a later stream


def test_C5_C9_a_stop_one_answer_took_is_gone_when_the_other_ends_without_it() -> None:
    stops = StopRegistry()
    alice, bob = stops.reader(1, ALICE), stops.reader(1, BOB)
    stops.request_stop(1, None)
    stop = stops.peek(1)
    assert stop is not None
    alice.consume(stop)
    bob.close()  # Bob's answer had ended (its result made) before resolving it
    assert len(stops) == 0
    alice.close()
    assert stops.listening() == 0


def test_C5_C9_an_entry_no_running_answer_took_waits_for_the_next_answer_it_reaches() -> None:
    stops = StopRegistry()
    alice = stops.reader(1, ALICE)
    stops.request_stop(1, "10", "ctx", answering=ALICE)
    alice.close()  # it left it (say, it was stopping for a limit, C5)
    assert stops.has_stop_request(1, answering=ALICE)  # the bot sees it
    bob = stops.reader(1, BOB)
    assert bob.start() == []
    again = stops.reader(1, ALICE)
    started = again.start()
    assert [r.context for r in started] == ["ctx"]  # B4
    again.consume(started[0])
    assert len(stops) == 0


def test_B4_C9_a_request_made_while_no_stream_runs_is_taken_by_one_stream() -> None:
    stops = StopRegistry()
    stops.request_stop(1, None)
    first, second = stops.reader(1, ALICE), stops.reader(1, BOB)
    assert len(first.start()) == 1
    assert second.start() == []  # the first to start took it


def test_B4_C9_a_stream_starting_is_handed_stops_first_and_the_newest_first() -> None:
    stops = StopRegistry()
    stops.request_stop(1, "99", "wide")
    stops.request_stop(1, "10", "aimed", answering=ALICE)
    stops.reader(1, BOB)  # an answer running elsewhere in the channel changes nothing here
    alice = stops.reader(1, ALICE)
    assert [r.context for r in alice.start()] == ["aimed", "wide"]


def test_C8_C9_per_answer_entries_are_swept_too() -> None:
    clock = Clock()
    stops = StopRegistry(clock=clock)
    alice = stops.reader(1, ALICE)
    stops.request_stop(1, "10", answering=ALICE)
    stops.request_follow_up(2, str(BOB))
    clock.now += 300.0
    assert len(alice.pending()) == 1  # exactly five minutes old: kept
    clock.now += 1.0
    assert alice.pending() == []
    assert len(stops) == 0


def test_B4_C9_discarding_for_one_answer_keeps_the_other_answers_requests() -> None:
    orchestrator = StreamOrchestrator(StopRegistry())
    stops = orchestrator.stops
    bob = stops.reader(1, BOB)
    orchestrator.request_stop(1, "10", answering=ALICE)
    orchestrator.request_follow_up(1, str(CAROL))  # the channel's slot
    orchestrator.request_follow_up(1, str(BOB))  # for Bob's running answer
    assert orchestrator.discard_requests(1, answering=ALICE)
    assert not orchestrator.has_stop_request(1, answering=ALICE)
    assert not orchestrator.discard_requests(1, answering=ALICE)  # nothing left for her
    assert orchestrator.has_stop_request(1, answering=CAROL)
    assert bob.pending() != []  # owed to a running stream: not the new turn's to drop
    assert not orchestrator.discard_requests(1, answering=BOB)
    orchestrator.request_stop(1, None)  # channel-wide, with Bob's answer running
    assert not orchestrator.discard_requests(1, answering=ALICE)  # it is Bob's to resolve
    bob.close()  # ... and Bob ended without it: now Alice's next answer would take it
    assert orchestrator.discard_requests(1, answering=ALICE)
    assert len(stops) == 0


def test_C9_readers_are_counted_until_closed() -> None:
    stops = StopRegistry()
    reader = stops.reader(1, ALICE)
    assert stops.listening() == 1
    reader.close()
    reader.close()  # twice changes nothing
    assert stops.listening() == 0


@pytest.mark.parametrize(
    ("answering", "requester", "manage", "allowed"),
    [
        (ALICE, ALICE, False, True),
        (ALICE, BOB, False, False),
        (ALICE, BOB, True, True),
        (None, ALICE, False, False),
        (None, ALICE, True, True),
    ],
    ids=[
        "the user it answers",
        "another user",
        "a member who manages messages",
        "an answer to nobody: not a plain user",
        "an answer to nobody: a member who manages messages",
    ],
)
def test_C10_who_may_stop_an_answer(
    answering: int | None, requester: int, manage: bool, allowed: bool
) -> None:
    assert may_stop(answering, requester, manage_messages=manage) is allowed


@pytest.mark.parametrize(
    ("request_", "reached"),
    [
        (StopRequest("stop", "99"), {None, ALICE, BOB}),
        (StopRequest("stop", "10", answering=ALICE), {None, ALICE}),
        (StopRequest("follow_up", "10"), {None, ALICE}),
        (StopRequest("follow_up", "carol"), {None}),
        (StopRequest("follow_up", ""), {None}),
    ],
    ids=["channel-wide stop", "aimed stop", "follow-up", "follow-up by no user", "no requester"],
)
def test_C9_which_streams_a_request_reaches(
    request_: StopRequest, reached: set[int | None]
) -> None:
    assert {a for a in (None, ALICE, BOB) if reaches(request_, a)} == reached


def test_C9_a_request_is_admitted_only_to_its_own_slot_or_the_channels() -> None:
    with pytest.raises(ValueError, match="slot"):
        admit({}, "20", StopRequest("stop", "10", answering=ALICE))
    with pytest.raises(ValueError, match="slot"):
        admit({}, None, StopRequest("stop", "10", answering=ALICE))
    with pytest.raises(ValueError, match="slot"):
        admit({}, "20", StopRequest("follow_up", "10"))
    assert admit({}, None, StopRequest("follow_up", "10")) == (True, frozenset())


# -- C9 properties: random streams and requests in one channel ---------------------------------

USERS = (ALICE, BOB, CAROL)


@dataclass
class _Run:
    """A stream as the registry sees it: its reader, what it was handed and consumed, and who
    decided its outcome (`resolve`)."""

    reader: StopReader
    origin: Origin | None = None
    consumed: list[StopRequest] = field(default_factory=list)
    handed: list[StopRequest] = field(default_factory=list)

    def resolve(self) -> None:
        for request in self.reader.pending():
            if request in self.handed:
                continue
            self.handed.append(request)
            resolution = resolve(request, self.origin)
            if resolution != "leave":
                self.reader.consume(request)
                self.consumed.append(request)
            if resolution == "decide":
                self.origin = "stop" if request.kind == "stop" else "follow_up"


def _aimed_elsewhere(request: StopRequest, answering: int) -> bool:
    """A request aimed at an answer other than `answering` (spelled out, not `reaches`)."""
    if request.kind == "stop":
        return request.answering is not None and request.answering != answering
    return request.requester_id != str(answering)


_OPS = st.one_of(
    st.tuples(st.just("open"), st.sampled_from((None, *USERS))),
    st.tuples(st.just("resolve"), st.integers(0, 7)),
    st.tuples(st.just("close"), st.integers(0, 7)),
    st.tuples(st.just("stop"), st.sampled_from((None, *USERS))),
    st.tuples(st.just("follow_up"), st.sampled_from((*map(str, USERS), "carol"))),
    st.tuples(st.just("tick"), st.sampled_from((1.0, 200.0))),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_OPS, max_size=40))
def test_C9_C5_no_request_aimed_at_one_answer_reaches_another_and_none_leaks(
    ops: list[tuple[str, object]],
) -> None:
    clock = Clock()
    stops = StopRegistry(clock=clock)
    runs: list[_Run] = []
    closed: list[_Run] = []
    for op, arg in ops:
        open_runs = [r for r in runs if not r.reader.closed]
        if op == "open":
            assert arg is None or isinstance(arg, int)
            run = _Run(stops.reader(1, arg))
            run.reader.start()
            runs.append(run)
        elif op in ("resolve", "close") and open_runs:
            assert isinstance(arg, int)
            run = open_runs[arg % len(open_runs)]
            if op == "resolve":
                run.resolve()
            else:
                run.reader.close()
                closed.append(run)
        elif op == "stop":
            assert arg is None or isinstance(arg, int)
            stops.request_stop(1, "x", answering=arg)
            stop = stops.peek(1, answering=arg)
            assert stop is not None
            for run in open_runs:  # every running stream it reaches is handed it (B3)
                if run.reader.answering in (None, arg) or arg is None:
                    assert stop in run.reader.pending()
        elif op == "follow_up":
            assert isinstance(arg, str)
            stops.request_follow_up(1, arg)
        elif op == "tick":
            assert isinstance(arg, float)
            clock.now += arg
        for run in runs:
            answering = run.reader.answering
            if answering is not None:  # C9: nothing aimed at another answer reaches it
                assert not any(_aimed_elsewhere(r, answering) for r in run.reader.pending())
                assert not any(_aimed_elsewhere(r, answering) for r in run.handed)
            if not run.reader.closed:  # C5: what it consumed it is never handed again
                assert not any(r in run.consumed for r in run.reader.pending())
    for run in runs:
        run.reader.close()
    assert stops.listening() == 0
    left = [stops.peek(1, answering=a) for a in (None, *USERS)]
    consumed = [r for run in runs for r in run.consumed]
    # C5: once no stream runs, nothing a stream consumed is left behind.
    assert not any(r is not None and r in consumed for r in left)


# -- C9 in the shell: two answers streaming in one channel, against the Discord emulator ---------


@dataclass
class _Streaming:
    """An answer to `user` running in the stage's channel: it shows a line, then runs `rest`
    (by default the model hangs, so only a request can end it)."""

    provider: ScriptProvider
    shown: asyncio.Event
    task: asyncio.Task[StreamResult]


def _answer(s: Stage, user: int | None, rest: tuple[object, ...] = (Hang(),)) -> _Streaming:
    shown = asyncio.Event()
    provider = ScriptProvider([f"Answer to {user}\n", Do(shown.set), *rest])
    task = asyncio.get_running_loop().create_task(s.stream(provider, answering=user))
    return _Streaming(provider, shown, task)


async def _both_showing(*answers: _Streaming) -> None:
    for answer in answers:
        await answer.shown.wait()


@asynccontextmanager
async def _alice_and_bob() -> AsyncIterator[tuple[Stage, _Streaming, _Streaming]]:
    """The stage, with Alice's and Bob's answers both showing their line in its channel (their
    models then hang); on exit, no stop or follow-up is left in the registry (C5)."""
    async with stage() as s:
        alice, bob = _answer(s, ALICE), _answer(s, BOB)
        await _both_showing(alice, bob)
        yield s, alice, bob
        assert len(s.stops) == 0


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C9_B3_a_stop_aimed_at_one_answer_ends_it_alone_at_once() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        bob_stopped = asyncio.Event()
        alice = _answer(s, ALICE, (Do(bob_stopped.wait), "more for Alice"))
        bob = _answer(s, BOB)
        await _both_showing(alice, bob)
        start = loop.time()
        assert s.orchestrator.request_stop(s.channel.id, str(BOB), "bob's /stop", answering=BOB)
        result = await bob.task
        assert loop.time() - start <= 0.05  # B3: the hanging model is woken at once
        assert result.status == "stopped_by_user"
        assert (result.stop_reason, result.stop_context) == ("user_request", "bob's /stop")
        assert bob.provider.closed
        assert not alice.task.done()
        bob_stopped.set()  # Alice's model goes on only now: her answer must still be open
        mine = await alice.task
        assert mine.status == "completed"
        assert mine.messages == ("Answer to 10", "more for Alice")
        assert len(s.stops) == 0
        assert s.stops.listening() == 0


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C9_a_follow_up_ends_only_its_authors_answer() -> None:
    async with _alice_and_bob() as (s, alice, bob):
        channel = s.channel.id
        assert s.orchestrator.request_follow_up(channel, str(CAROL))  # Carol's message
        assert s.orchestrator.request_follow_up(channel, str(BOB))
        assert (await bob.task).status == "follow_up_interrupt"
        assert not alice.task.done()
        s.orchestrator.request_stop(channel, str(ALICE), "alice's /stop", answering=ALICE)
        mine = await alice.task
        assert mine.status == "stopped_by_user"  # not a follow-up: Carol's never reached her
        assert mine.stop_context == "alice's /stop"
        # Carol's follow-up waits for an answer to Carol (B4); Alice's next one is untouched.
        waiting = s.stops.peek(channel)
        assert waiting is not None
        assert waiting.requester_id == str(CAROL)
        again = await s.stream(ScriptProvider(["Alice again"]), answering=ALICE)
        assert again.status == "completed"
        carols = ScriptProvider(["never"])
        assert (await s.stream(carols, answering=CAROL)).status == "follow_up_interrupt"
        assert not carols.started


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C9_C5_a_channel_wide_stop_ends_every_answer_and_leaves_nothing() -> None:
    async with _alice_and_bob() as (s, alice, bob):
        assert s.orchestrator.request_stop(s.channel.id, "99", "the moderator's /stop")
        results = await asyncio.gather(alice.task, bob.task)
        assert [r.status for r in results] == ["stopped_by_user", "stopped_by_user"]
        assert [r.stop_context for r in results] == ["the moderator's /stop"] * 2
        assert len(s.stops) == 0  # each consumed it; it is gone
        later = await s.stream(ScriptProvider(["Later"]), answering=ALICE)
        assert later.status == "completed"  # nothing leaked into a later stream


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B4_C9_a_stop_aimed_at_an_answer_before_it_starts_ends_that_answer_alone() -> None:
    async with stage() as s:
        s.orchestrator.request_stop(s.channel.id, str(ALICE), "early", answering=ALICE)
        bobs, alices = ScriptProvider(["For Bob"]), ScriptProvider(["never"])
        # Bob's answer starts first: the stop waits for Alice's, not for the next stream.
        bob, alice = await asyncio.gather(
            s.stream(bobs, answering=BOB), s.stream(alices, answering=ALICE)
        )
        assert bob.status == "completed"
        assert bob.messages == ("For Bob",)
        assert (alice.status, alice.stop_context) == ("stopped_by_user", "early")
        assert not alices.started
        assert len(s.stops) == 0


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C2_C9_a_stop_right_after_a_follow_up_wins_for_that_answer_alone() -> None:
    async with _alice_and_bob() as (s, alice, bob):
        channel = s.channel.id
        assert s.orchestrator.request_follow_up(channel, str(ALICE))
        assert s.orchestrator.request_stop(channel, str(ALICE), "stop", answering=ALICE)
        assert not s.orchestrator.request_follow_up(channel, str(ALICE))  # C3, per answer
        assert s.orchestrator.request_follow_up(channel, str(BOB))  # Bob's is his own
        mine, his = await asyncio.gather(alice.task, bob.task)
        assert (mine.status, mine.stop_context) == ("stopped_by_user", "stop")
        assert his.status == "follow_up_interrupt"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C9_a_new_message_interrupts_only_its_authors_own_answer() -> None:
    async with _alice_and_bob() as (s, alice, bob):
        orchestrator, channel = s.orchestrator, s.channel.id
        assert orchestrator.is_answering(channel, ALICE)
        assert orchestrator.is_answering(channel, BOB)
        assert not orchestrator.is_answering(channel, CAROL)
        assert not orchestrator.interrupt_own_answer(channel, CAROL)  # nothing of hers runs
        assert len(s.stops) == 0  # ... and nothing waits to end her next answer
        assert orchestrator.interrupt_own_answer(channel, ALICE)
        assert (await alice.task).status == "follow_up_interrupt"
        assert not orchestrator.is_answering(channel, ALICE)
        assert not bob.task.done()
        orchestrator.request_stop(channel, str(BOB), answering=BOB)
        assert (await bob.task).status == "stopped_by_user"
        assert s.stops.listening() == 0


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_C9_a_stream_naming_nobody_is_the_channels_answer_every_request_ends_it() -> None:
    async with stage() as s:
        anyone = _answer(s, None)
        await anyone.shown.wait()
        s.orchestrator.request_stop(s.channel.id, str(BOB), "bob's /stop", answering=BOB)
        result = await anyone.task
        assert (result.status, result.stop_context) == ("stopped_by_user", "bob's /stop")
        assert len(s.stops) == 0


# -- C10: who may stop an answer, from discord.py's permissions -----------------------------------

_MANAGE = discord.Permissions(manage_messages=True).value
_OWNER, _MODS = 99, 2


def _user(user_id: int) -> dict[str, object]:
    return {"id": str(user_id), "username": f"user{user_id}", "discriminator": "0", "avatar": None}


def _role(role_id: int, name: str, permissions: int) -> dict[str, object]:
    return {
        "id": str(role_id),
        "name": name,
        "permissions": str(permissions),
        "position": role_id,
        "color": 0,
        "hoist": False,
        "managed": False,
        "mentionable": False,
    }


@dataclass
class _Guild:
    """A guild as discord.py builds it from Discord's payloads: @everyone may read and write,
    the role "mods" may manage messages; channel 5 has no overwrite, channel 6 denies the
    mods managing messages there."""

    state: Any
    guild: discord.Guild
    open: discord.TextChannel
    locked: discord.TextChannel

    def member(self, user_id: int, *roles: int) -> discord.Member:
        data = {
            "user": _user(user_id),
            "roles": [str(r) for r in roles],
            "joined_at": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
        }
        return discord.Member(data=data, guild=self.guild, state=self.state)  # type: ignore[arg-type]

    def interaction(self, user_id: int, permissions: int) -> discord.Interaction:
        """A Stop button's click by `user_id`, whose permissions in channel 5 Discord
        resolved to `permissions`."""
        member: dict[str, object] = {
            "user": _user(user_id),
            "roles": [],
            "permissions": str(permissions),
            "joined_at": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
        }
        data = {
            "id": "100",
            "application_id": "2",
            "type": 3,
            "token": "token",
            "version": 1,
            "channel_id": "5",
            "guild_id": "1",
            "member": member,
            "data": {"custom_id": "stop", "component_type": 2},
            "app_permissions": "0",
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {},
            "context": 0,
            "attachment_size_limit": 8388608,
        }
        return discord.Interaction(data=data, state=self.state)  # type: ignore[arg-type]


def _guild() -> _Guild:
    client = discord.Client(intents=discord.Intents.none())
    state = client._connection
    state.user = discord.ClientUser(state=state, data={**_user(2), "bot": True})  # type: ignore[typeddict-item]
    everyone = discord.Permissions(view_channel=True, send_messages=True).value
    guild_data = {
        "id": "1",
        "name": "guild",
        "owner_id": str(_OWNER),
        "roles": [_role(1, "@everyone", everyone), _role(_MODS, "mods", _MANAGE)],
    }
    guild = discord.Guild(data=guild_data, state=state)  # type: ignore[arg-type]

    def channel(channel_id: int, overwrites: list[dict[str, object]]) -> discord.TextChannel:
        data = {
            "id": str(channel_id),
            "type": 0,
            "name": f"channel{channel_id}",
            "position": 0,
            "guild_id": "1",
            "permission_overwrites": overwrites,
        }
        return discord.TextChannel(state=state, guild=guild, data=data)  # type: ignore[arg-type]

    deny = {"id": str(_MODS), "type": 0, "allow": "0", "deny": str(_MANAGE)}
    return _Guild(state, guild, channel(5, []), channel(6, [deny]))


def test_C10_the_user_answered_and_those_who_manage_messages_may_stop() -> None:
    g = _guild()
    alice, bob, mod, owner = g.member(ALICE), g.member(BOB), g.member(30, _MODS), g.member(_OWNER)
    assert member_may_stop(alice, g.open, answering=ALICE)
    assert not member_may_stop(bob, g.open, answering=ALICE)
    assert member_may_stop(mod, g.open, answering=ALICE)
    assert member_may_stop(owner, g.open, answering=ALICE)
    # The channel's overwrites count: the mods may not manage messages in channel 6.
    assert not member_may_stop(mod, g.locked, answering=ALICE)
    assert member_may_stop(alice, g.locked, answering=ALICE)
    # An answer to nobody: only those who manage messages.
    assert not member_may_stop(alice, g.open, answering=None)
    assert member_may_stop(mod, g.open, answering=None)


def test_C10_a_plain_user_manages_nothing() -> None:
    g = _guild()
    user = discord.User(state=g.state, data=_user(30))  # type: ignore[arg-type]
    assert not member_may_stop(user, g.open, answering=ALICE)
    assert member_may_stop(user, g.open, answering=30)


def test_C10_an_interaction_is_judged_by_its_resolved_permissions() -> None:
    g = _guild()
    assert interaction_may_stop(g.interaction(ALICE, 0), answering=ALICE)
    assert not interaction_may_stop(g.interaction(BOB, 0), answering=ALICE)
    assert interaction_may_stop(g.interaction(BOB, _MANAGE), answering=ALICE)
    assert not interaction_may_stop(g.interaction(ALICE, 0), answering=None)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B4_C5_C9_two_stops_pending_for_an_answer_that_starts_are_both_consumed() -> None:
    async with stage() as s:
        s.orchestrator.request_stop(s.channel.id, "99", "the moderator's /stop")
        s.orchestrator.request_stop(s.channel.id, str(ALICE), "alice's /stop", answering=ALICE)
        alices = ScriptProvider(["never"])
        result = await s.stream(alices, answering=ALICE)
        assert (result.status, result.stop_context) == ("stopped_by_user", "alice's /stop")
        assert not alices.started
        assert len(s.stops) == 0  # the channel-wide one too: a second stop is absorbed (C5)
        later = await s.stream(ScriptProvider(["For Bob"]), answering=BOB)
        assert later.status == "completed"
