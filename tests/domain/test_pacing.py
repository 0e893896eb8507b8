"""The pace of Discord requests, decided without a clock (SPEC F4, L2; `cordstream.domain.pacing`).

No event loop here: each test tells a `Window` or `Turns` the time, as the shell does, and reads
its answer. `walk` plays the shell's part for the property tests: it moves a clock from one
arrival, caller's departure or wake-up to the next and calls back as `shell/ratelimit.py` does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cordstream.domain import pacing
from cordstream.domain.effects import Route
from cordstream.domain.pacing import (
    Budget,
    Grant,
    KeepResult,
    Lane,
    Request,
    SendAgain,
    Turns,
    Window,
    after_try,
    spacing,
)
from tests.support.fuzz import examples


def _never_gone(key: str) -> bool:
    return False


# -- one window ----------------------------------------------------------------------------------


def test_F4_an_empty_window_lets_a_request_go_now() -> None:
    assert Window().next_send_time(Budget(1, 5.0), 3.0) == 3.0


def test_F4_a_window_with_room_lets_a_request_go_now() -> None:
    window = Window()
    window.update_after_send(Budget(2, 1.0), 0.0)
    assert window.next_send_time(Budget(2, 1.0), 0.5) == 0.5


def test_F4_a_full_window_answers_when_its_oldest_counted_grant_leaves_it() -> None:
    budget = Budget(2, 1.0)
    window = Window()
    window.update_after_send(budget, 0.0)
    window.update_after_send(budget, 0.25)
    assert window.next_send_time(budget, 0.5) == 1.0
    assert window.next_send_time(budget, 1.75) == 1.75  # long since free


def test_F4_a_window_keeps_only_the_grants_its_budget_counts() -> None:
    budget = Budget(2, 1.0)
    window = Window()
    for at in (0.0, 0.1, 0.2):
        window.update_after_send(budget, at)
    assert list(window.sent) == [0.1, 0.2]


def test_F4_a_shrunk_budget_is_judged_by_the_latest_grants() -> None:
    window = Window()
    for at in (0.0, 0.1, 0.2, 0.3):
        window.update_after_send(Budget(10, 1.0), at)
    assert window.next_send_time(Budget(2, 1.0), 0.3) == pytest.approx(1.2)  # 0.2 + 1.0


def test_F4_answering_leaves_the_window_as_it_was() -> None:
    window = Window()
    for at in (0.0, 0.1, 0.2, 0.3):
        window.update_after_send(Budget(10, 1.0), at)
    window.next_send_time(Budget(1, 1.0), 0.3)
    assert list(window.sent) == [0.0, 0.1, 0.2, 0.3]


# -- a channel's lane (L2) -----------------------------------------------------------------------


def _spaced(route: Route = "edit", *lanes: Lane) -> Request:
    return Request(lanes, with_global=False, prompt=False, route=route)


def _prompt(route: Route = "edit", *lanes: Lane) -> Request:
    return Request(lanes, with_global=False, prompt=True, route=route)


def _channel(turns: Turns[str]) -> Lane:
    return pacing.DISCORD_CHANNEL, turns.channel(7)


SPACING = 5.0 / 5 + pacing.CHANNEL_MARGIN


def test_L2_spaced_requests_get_the_windows_even_share_plus_the_margin() -> None:
    assert spacing(pacing.DISCORD_CHANNEL) == SPACING
    assert spacing(Budget(4, 2.0)) == 0.5 + pacing.CHANNEL_MARGIN


def test_L2_two_spaced_requests_in_one_channel_go_one_spacing_apart() -> None:
    turns: Turns[str] = Turns()
    lane = _channel(turns)
    assert turns.try_take(_spaced("edit", lane), pacing.DISCORD_GLOBAL, 0.0)
    turns.join("second", _spaced("send", lane))  # whatever its route
    assert turns.grant(0.0, pacing.DISCORD_GLOBAL, _never_gone) == Grant((), SPACING)
    assert turns.grant(SPACING, pacing.DISCORD_GLOBAL, _never_gone) == Grant(("second",), None)


def test_L2_a_prompt_request_goes_at_once_past_a_spaced_one_waiting() -> None:
    turns: Turns[str] = Turns()
    lane = _channel(turns)
    assert turns.try_take(_spaced("edit", lane), None, 0.0)
    turns.join("spaced", _spaced("edit", lane))
    turns.join("later", _spaced("edit", lane))
    turns.join("prompt", _prompt("edit", lane))
    assert turns.grant(0.5, None, _never_gone) == Grant(("prompt",), SPACING)
    assert [key for key, _ in turns.waiting] == ["spaced", "later"]
    assert turns.grant(SPACING, None, _never_gone) == Grant(("spaced",), 2 * SPACING)


def test_L2_a_prompt_request_does_not_move_the_spacing() -> None:
    window = pacing.ChannelWindow()
    budget = pacing.DISCORD_CHANNEL
    window.update_after_send(budget, 0.0, _spaced())
    window.update_after_send(budget, 0.5, _prompt())
    assert window.next_send_time(budget, 0.6, _spaced()) == SPACING
    assert window.next_send_time(budget, 0.6, _prompt()) == 0.6


def test_L2_a_full_bucket_holds_its_route_until_it_resets_counted_from_discords_answer() -> None:
    window = pacing.ChannelWindow()
    budget = pacing.DISCORD_CHANNEL
    for at in (1.0, 1.1, 1.2, 1.3, 1.4):
        window.update_after_send(budget, at, _prompt("send"))
    # Not answered yet: Discord opened it at most when it answers, so a margin is kept.
    assert window.next_send_time(budget, 2.0, _prompt("send")) == 6.0 + pacing.UNANSWERED_MARGIN
    window.buckets["send"].answered(1.1, 1.3)  # not the request that opened it
    assert window.next_send_time(budget, 2.0, _prompt("send")) == 6.0 + pacing.UNANSWERED_MARGIN
    window.buckets["send"].answered(1.0, 1.25)
    assert window.next_send_time(budget, 2.0, _prompt("send")) == 6.25
    assert window.next_send_time(budget, 2.0, _spaced("send")) == 6.25
    assert window.next_send_time(budget, 7.0, _prompt("send")) == 7.0
    window.buckets["send"].answered(1.0, 1.5)  # a window counts from its first answer only
    assert window.buckets["send"].resets_at(budget) == 6.25


def test_L2_creates_and_edits_count_in_buckets_of_their_own() -> None:
    window = pacing.ChannelWindow()
    budget = pacing.DISCORD_CHANNEL
    for at in (0.0, 0.1, 0.2, 0.3, 0.4):
        window.update_after_send(budget, at, _prompt("send"))
    assert window.next_send_time(budget, 0.5, _prompt("send")) > 5.0
    assert window.next_send_time(budget, 0.5, _prompt("edit")) == 0.5
    assert window.buckets["edit"].count == 0


def test_L2_a_spaced_request_held_by_a_full_bucket_goes_the_moment_it_resets() -> None:
    # One spaced edit per spacing fills the window before it resets: the next one goes at the
    # reset, not a spacing after the last (L2: the new window's turns are spent at once).
    window = pacing.ChannelWindow()
    budget = pacing.DISCORD_CHANNEL
    times = [n * SPACING for n in range(5)]
    for at in times:
        window.update_after_send(budget, at, _spaced())
        window.buckets["edit"].answered(at, at)
    assert window.next_send_time(budget, times[-1], _spaced()) == 5.0
    window.update_after_send(budget, 5.0, _spaced())
    assert (window.buckets["edit"].opened, window.buckets["edit"].count) == (5.0, 1)
    assert window.buckets["edit"].answered_at is None
    assert window.next_send_time(budget, 5.0, _spaced()) == 5.0 + SPACING


def test_L2_a_request_at_the_reset_opens_a_new_window_and_one_before_it_does_not() -> None:
    bucket = pacing.Bucket()
    budget = Budget(2, 5.0)
    bucket.take(budget, 0.0)
    bucket.answered(0.0, 0.0)
    bucket.take(budget, 4.9)
    assert (bucket.opened, bucket.count) == (0.0, 2)
    bucket.take(budget, 5.0)
    assert (bucket.opened, bucket.count, bucket.answered_at) == (5.0, 1, None)


def test_L2_no_request_goes_while_the_bucket_may_or_may_not_have_reset() -> None:
    # Discord opened the window between the grant (1.0) and the answer: it resets between
    # 3.5 and the answer plus 2.5. A request in between could land in either window, the full
    # one included, so it waits until the bucket has surely reset.
    bucket = pacing.Bucket()
    budget = Budget(2, 2.5)
    bucket.take(budget, 1.0)
    assert bucket.ready(budget, 3.4) == 3.4
    assert bucket.ready(budget, 3.5) == 3.5 + pacing.UNANSWERED_MARGIN
    bucket.answered(1.0, 1.2)
    assert bucket.ready(budget, 3.5) == 3.7
    assert bucket.ready(budget, 3.7) == 3.7
    window = pacing.ChannelWindow()
    window.buckets["send"] = bucket
    window.spaced_at = 3.5 - spacing(budget)
    assert window.next_send_time(budget, 3.5, _prompt("send")) == 3.7
    assert window.next_send_time(budget, 3.0, _spaced("send")) == 3.7  # spaced into it


def test_L2_a_turn_given_back_is_not_counted_and_a_window_it_opened_opens_with_the_next() -> None:
    bucket = pacing.Bucket()
    budget = Budget(2, 5.0)
    bucket.take(budget, 1.0)
    bucket.take(budget, 2.0)
    assert bucket.ready(budget, 2.5) == 1.0 + pacing.UNANSWERED_MARGIN + 5.0  # full
    bucket.give_back(1.0)  # the request of the turn at 1.0 was never made
    assert (bucket.opened, bucket.grants, bucket.count) == (2.0, [2.0], 1)
    assert bucket.ready(budget, 2.5) == 2.5
    bucket.answered(2.0, 2.1)
    assert bucket.resets_at(budget) == 7.1
    bucket.give_back(0.5)  # not one of this window's: nothing changes
    bucket.take(budget, 3.0)
    bucket.give_back(3.0)
    assert (bucket.opened, bucket.grants, bucket.answered_at) == (2.0, [2.0], 2.1)
    bucket.give_back(2.0)
    assert (bucket.opened, bucket.count) == (2.0, 0)  # answered: it went, whatever comes
    alone = pacing.Bucket()
    alone.take(budget, 1.0)
    alone.give_back(1.0)
    assert (alone.opened, alone.count) == (-math.inf, 0)
    assert alone.ready(budget, 1.5) == 1.5


def test_L2_each_channel_has_a_lane_of_its_own() -> None:
    turns: Turns[str] = Turns()
    assert turns.channel(1) is turns.channel(1)
    assert turns.channel(1) is not turns.channel(2)


def test_L2_a_channel_turn_takes_nothing_from_the_global_window() -> None:
    turns: Turns[str] = Turns()
    assert turns.try_take(_spaced("edit", _channel(turns)), Budget(1, 1.0), 0.0)
    assert not turns.window.sent
    assert turns.try_take(Request(), Budget(1, 1.0), 0.0)


def test_L2_a_held_prompt_request_holds_the_later_prompt_ones_on_its_route() -> None:
    turns: Turns[str] = Turns()
    lane = (Budget(1, 5.0), turns.channel(7))
    assert turns.try_take(_prompt("send", lane), None, 0.0)
    turns.join("send", _prompt("send", lane))
    turns.join("edit", _prompt("edit", lane))
    turns.join("send again", _prompt("send", lane))
    wake = 5.0 + pacing.UNANSWERED_MARGIN
    assert turns.grant(1.0, None, _never_gone) == Grant(("edit",), wake)
    assert turns.grant(wake, None, _never_gone) == Grant(("send",), wake + 5.0 + 1.0)


# -- the turns of one loop (F4) ------------------------------------------------------------------


def test_F4_try_take_takes_a_free_turn_at_once() -> None:
    turns: Turns[str] = Turns()
    assert turns.try_take(Request(), Budget(1, 1.0), 0.0)
    assert list(turns.window.sent) == [0.0]


def test_F4_try_take_on_a_full_window_takes_nothing() -> None:
    turns: Turns[str] = Turns()
    assert turns.try_take(Request(), Budget(1, 1.0), 0.0)
    assert not turns.try_take(Request(), Budget(1, 1.0), 0.5)
    assert list(turns.window.sent) == [0.0]


def test_F4_try_take_never_jumps_the_queue() -> None:
    turns: Turns[str] = Turns()
    turns.join("waiting", Request())
    assert not turns.try_take(Request(), Budget(5, 1.0), 0.0)  # room, but somebody waits


def test_F4_without_a_global_budget_only_the_named_lanes_count() -> None:
    turns: Turns[str] = Turns()
    for _ in range(100):
        assert turns.try_take(Request(), None, 0.0)
    assert not turns.window.sent


def test_F4_a_held_request_is_told_when_to_ask_again() -> None:
    turns: Turns[str] = Turns()
    assert turns.try_take(Request(), Budget(1, 1.0), 0.0)
    turns.join("next", Request())
    assert turns.grant(0.25, Budget(1, 1.0), _never_gone) == Grant((), 1.0)
    assert turns.grant(1.0, Budget(1, 1.0), _never_gone) == Grant(("next",), None)


def test_F4_requests_waiting_on_one_window_go_first_in_first_out() -> None:
    turns: Turns[str] = Turns()
    for key in ("a", "b", "c"):
        turns.join(key, Request())
    assert turns.grant(0.0, Budget(2, 1.0), _never_gone) == Grant(("a", "b"), 1.0)
    assert turns.grant(1.0, Budget(2, 1.0), _never_gone) == Grant(("c",), None)


def test_F4_a_request_held_by_a_window_holds_every_later_one_on_it_whatever_its_budget() -> None:
    # One window counted against two budgets: full for the first request's, with room for the
    # second's. The second still waits behind the first (first in first out on a window).
    turns: Turns[str] = Turns()
    window = Window()
    tight, loose = (Budget(1, 5.0), window), (Budget(5, 5.0), window)
    assert turns.try_take(Request((tight,)), None, 0.0)
    turns.join("tight", Request((tight,)))
    turns.join("loose", Request((loose,)))
    assert turns.grant(1.0, None, _never_gone) == Grant((), 5.0)
    assert turns.grant(5.0, None, _never_gone) == Grant(("tight", "loose"), None)


def test_F4_a_full_global_window_holds_everyone_behind_it() -> None:
    turns: Turns[str] = Turns()
    lane = (Budget(5, 1.0), turns.channel(1))
    assert turns.try_take(Request(), Budget(1, 1.0), 0.0)
    turns.join("global", Request())
    turns.join("lane only", Request((lane,), with_global=False))
    assert turns.grant(0.0, Budget(1, 1.0), _never_gone) == Grant((), 1.0)
    assert [key for key, _ in turns.waiting] == ["global", "lane only"]


def test_F4_a_request_held_by_its_own_lane_does_not_hold_up_the_others() -> None:
    turns: Turns[str] = Turns()
    lane = (Budget(1, 5.0), Window())
    budget = Budget(10, 1.0)
    for key, lanes in (("a", (lane,)), ("b", (lane,)), ("c", ()), ("d", ()), ("e", (lane,))):
        turns.join(key, Request(lanes))
    assert turns.grant(0.0, budget, _never_gone) == Grant(("a", "c", "d"), 5.0)
    assert turns.grant(5.0, budget, _never_gone) == Grant(("b",), 10.0)
    assert turns.grant(10.0, budget, _never_gone) == Grant(("e",), None)


def test_F4_a_request_whose_caller_left_is_dropped_without_a_turn() -> None:
    turns: Turns[str] = Turns()
    turns.join("left", Request())
    turns.join("stayed", Request())
    assert turns.grant(0.0, Budget(1, 1.0), lambda key: key == "left") == Grant(("stayed",), None)
    assert list(turns.window.sent) == [0.0]


def test_F4_waiting_requests_are_judged_by_the_budget_given_at_each_round() -> None:
    turns: Turns[str] = Turns()
    for key in ("a", "b", "c"):
        turns.join(key, Request())
    assert turns.grant(0.0, Budget(1, 10.0), _never_gone) == Grant(("a",), 10.0)
    assert turns.grant(1.0, Budget(100, 1.0), _never_gone) == Grant(("b", "c"), None)


# -- a try Discord answered 429 (F4) -------------------------------------------------------------


def test_F4_a_try_that_was_not_discords_429_keeps_its_result() -> None:
    assert after_try(None, 1) == KeepResult("not a 429")


@pytest.mark.parametrize(("tries", "delay"), list(enumerate(pacing.RETRY_DELAYS, start=1)))
def test_F4_a_429_is_sent_again_after_the_backoff_when_discord_asks_less(
    tries: int, delay: float
) -> None:
    assert after_try(0.5, tries) == SendAgain(delay)


def test_F4_a_429_is_sent_again_after_retry_after_when_it_is_longer_than_the_backoff() -> None:
    assert after_try(3.5, 1) == SendAgain(3.5)


def test_F4_a_429_asking_more_than_max_retry_after_keeps_its_result() -> None:
    assert after_try(pacing.MAX_RETRY_AFTER, 1) == SendAgain(pacing.MAX_RETRY_AFTER)
    assert after_try(pacing.MAX_RETRY_AFTER + 0.1, 1) == KeepResult("wait too long")


def test_F4_a_send_is_tried_once_more_per_backoff_entry_and_no_more() -> None:
    assert isinstance(after_try(1.0, len(pacing.RETRY_DELAYS)), SendAgain)
    assert after_try(1.0, len(pacing.RETRY_DELAYS) + 1) == KeepResult("tries spent")


# -- properties ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    at: float
    lanes: tuple[int, ...]  # the channel lanes it names, by index
    with_global: bool
    leaves_at: float | None  # its caller leaves then, if it still waits
    prompt: bool = True  # in its channel lanes (`ChannelWindow`)
    route: Route = "send"


def walk(
    arrivals: Sequence[Arrival], budget: Budget | None, lanes: Sequence[Budget]
) -> tuple[Turns[int], dict[int, float]]:
    """The shell's part, on a clock of plain numbers: each arrival takes a free turn or joins
    and asks for a round; a caller's departure marks its request gone; the wake-up asks for a
    round. Returns the turns and when each request got its turn, in the order given."""
    turns: Turns[int] = Turns()
    windows = [(lane, turns.channel(n)) for n, lane in enumerate(lanes)]
    granted: dict[int, float] = {}
    left: set[int] = set()
    events = sorted(
        [(a.at, 0, i) for i, a in enumerate(arrivals)]
        + [(a.leaves_at, 1, i) for i, a in enumerate(arrivals) if a.leaves_at is not None]
    )
    wake: float | None = None

    def round_at(now: float) -> float | None:
        answer = turns.grant(now, budget, left.__contains__)
        granted.update(dict.fromkeys(answer.granted, now))
        return answer.wake_at

    while events or wake is not None:
        if wake is not None and (not events or wake < events[0][0]):
            wake = round_at(wake)
            continue
        now, kind, index = events.pop(0)
        arrival = arrivals[index]
        if kind == 1:
            if index not in granted:
                left.add(index)
            continue
        lanes_named = tuple(windows[n] for n in arrival.lanes)
        request = Request(lanes_named, arrival.with_global, arrival.prompt, arrival.route)
        if turns.try_take(request, budget, now):
            granted[index] = now
        else:
            turns.join(index, request)
            wake = round_at(now)
    return turns, granted


ROUTES: tuple[Route, ...] = ("send", "edit")
BUDGETS = st.builds(Budget, st.integers(1, 4), st.sampled_from([0.05, 0.3, 1.0, 1.1, 2.5]))
TIMES = st.sampled_from([0.0, 0.0, 0.01, 0.1, 0.5, 1.0, 1.1, 3.0])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Arrival], Budget | None, list[Budget]]:
    lanes = draw(st.lists(BUDGETS, min_size=0, max_size=3))
    budget = draw(st.none() | BUDGETS)
    shapes: list[tuple[tuple[int, ...], bool]] = [((), True)]
    shapes += [((n,), False) for n in range(len(lanes))]  # live delivery's channel turns
    shapes += [((n,), True) for n in range(len(lanes))]
    if len(lanes) > 1:
        shapes.append(((0, 1), True))
    at = 0.0
    arrivals = []
    kinds = st.tuples(st.booleans(), st.sampled_from(ROUTES))
    for gap, (named, with_global), leave, (prompt, route) in draw(
        st.lists(
            st.tuples(TIMES, st.sampled_from(shapes), st.none() | TIMES, kinds),
            min_size=1,
            max_size=30,
        )
    ):
        at += gap
        leaves_at = None if leave is None else at + leave + 0.001
        arrivals.append(Arrival(at, named, with_global, leaves_at, prompt, route))
    return arrivals, budget, lanes


def _windows_named(arrival: Arrival, budget: Budget | None) -> frozenset[object]:
    named: set[object] = {f"lane {n}" for n in arrival.lanes}
    if budget is not None and arrival.with_global:
        named.add("global")
    return frozenset(named)


def _buckets_named(arrival: Arrival) -> set[tuple[int, Route]]:
    return {(n, arrival.route) for n in arrival.lanes}


@settings(max_examples=examples(300), deadline=None)
@given(scenarios())
def test_F4_L2_no_request_ever_meets_a_full_window_or_bucket(
    scenario: tuple[list[Arrival], Budget | None, list[Budget]],
) -> None:
    """The global budget: no window of `per` seconds holds more than `requests` grants. A
    channel's lane: Discord's bucket of each route, a fixed window that opens at the first
    request after it reset (as Discord counts them), never holds more than `requests`."""
    arrivals, budget, lanes = scenario
    _, granted = walk(arrivals, budget, lanes)
    if budget is not None:
        times = sorted(
            at for i, at in granted.items() if "global" in _windows_named(arrivals[i], budget)
        )
        for i in range(budget.requests, len(times)):
            assert times[i] - times[i - budget.requests] >= budget.per - 1e-9, times
    for n, lane in enumerate(lanes):
        for route in ROUTES:
            resets, remaining = -math.inf, 0
            for at in sorted(
                at for i, at in granted.items() if (n, route) in _buckets_named(arrivals[i])
            ):
                if at >= resets:
                    resets, remaining = at + lane.per, lane.requests
                remaining -= 1
                assert remaining >= 0, (n, route, lane)


@settings(max_examples=examples(300), deadline=None)
@given(scenarios())
def test_F4_L2_grants_are_first_in_first_out_per_window(
    scenario: tuple[list[Arrival], Budget | None, list[Budget]],
) -> None:
    """Requests of one kind that wait on the same windows get their turns in the order they
    asked (live delivery's channel turns and the sends each wait on one window). A request
    held by another window it names does not hold up the requests behind it."""
    arrivals, budget, lanes = scenario
    turns, granted = walk(arrivals, budget, lanes)
    assert not turns.waiting  # every request got its turn, or its caller left
    by_windows: dict[tuple[frozenset[object], bool, Route], list[int]] = {}
    for i in granted:  # in the order the turns were given
        arrival = arrivals[i]
        kind = (_windows_named(arrival, budget), arrival.prompt, arrival.route)
        by_windows.setdefault(kind, []).append(i)
    for order in by_windows.values():
        assert order == sorted(order)


@settings(max_examples=examples(200), deadline=None)
@given(
    budget=BUDGETS,
    gaps=st.lists(st.sampled_from([0.0, 0.0, 0.01, 0.1, 0.5, 1.0, 3.0]), min_size=1, max_size=40),
)
def test_F4_each_request_goes_at_the_earliest_moment_its_window_and_the_order_allow(
    budget: Budget, gaps: list[float]
) -> None:
    arrivals = [Arrival(sum(gaps[: i + 1]), (), True, None) for i in range(len(gaps))]
    _, granted = walk(arrivals, budget, [])
    times = [granted[i] for i in range(len(arrivals))]
    for i, at in enumerate(times):
        earliest = max(
            arrivals[i].at,
            times[i - 1] if i else 0.0,
            times[i - budget.requests] + budget.per if i >= budget.requests else 0.0,
        )
        assert at == pytest.approx(earliest)


@pytest.mark.parametrize(
    ("requests", "per", "error", "message"),
    [
        (True, 1.0, TypeError, "Budget.requests must be an int"),
        (2.0, 1.0, TypeError, "Budget.requests must be an int"),
        (0, 1.0, ValueError, "Budget.requests must be at least 1"),
        (5, "5", TypeError, "Budget.per must be a number of seconds"),
        (5, True, TypeError, "Budget.per must be a number of seconds"),
        (5, 0.0, ValueError, "Budget.per must be a positive number of seconds"),
        (5, math.inf, ValueError, "Budget.per must be a positive number of seconds"),
    ],
)
def test_F4_a_budget_names_what_is_wrong_with_it(
    requests: object, per: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        Budget(requests, per)  # type: ignore[arg-type]  # the wrong types are the point
