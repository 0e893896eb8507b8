"""Discord's rate limits against the real shell (SPEC F4, B11, B13; `cordstream.shell.ratelimit`).

- The pacer: a sliding window (no `per` seconds hold more than `requests` releases), each
  request released at the earliest moment that allows, first in first out, a budget changed
  while requests wait, lanes of their own.
- A send Discord answered 429 after discord.py's five tries is sent again, with backoff, within
  a bounded budget; a Cloudflare 429 (no `Via`) is not; when the budget is spent the stream
  ends as `error` (B13). The order of a stream's messages holds, and nothing is duplicated.
- Hundreds of streams at once against the emulator with Discord's real limits on (50 requests
  per second over the bot, 5 per 5 s per channel and route): every answer completes, whole and
  in order (F4, defect 6 of issue 10).
- A caller that cancels while discord.py sleeps off a global 429 leaves the client usable
  (defect 5 of issue 10), at random moments too.

Everything runs on looptime's virtual clock: the pacing, discord.py's 429 waits and the
backoff cost no real seconds, and elapsed times are exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final

import discord
import looptime
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict
from returns.io import IOFailure, IOSuccess

import cordstream.shell
from cordstream.shell import (
    DISCORD_GLOBAL,
    Budget,
    StreamConfig,
    StreamContext,
    StreamResult,
    discord_api,
    ratelimit,
    set_global_budget,
)
from cordstream.shell.testing.emulator import FaultRoute, Limit, RateLimited, RateLimits
from tests.support.fuzz import examples
from tests.support.stage import Do, ScriptProvider, Sleep, Stage, Step, other_tasks, stage

ANSWER: Final = ("Here is a short answer.\n", "It has a second line.\n", "And a last one.")
EXPECTED: Final = "".join(ANSWER)
# A stream in these tests ends well within this (virtual) time, or it is stuck.
RUN_LIMIT: Final = 900.0
# Backoff of every retry round, summed.
BACKOFF: Final = sum(ratelimit.RETRY_DELAYS)


@pytest.fixture(autouse=True)
def discord_budget() -> Iterator[None]:
    """Every test starts with the default budget and leaves it as it found it."""
    previous = set_global_budget(DISCORD_GLOBAL)
    try:
        yield
    finally:
        set_global_budget(previous)


def run_virtual(main: Any) -> Any:
    """Run a coroutine on a fresh looptime loop (for hypothesis tests, which are sync)."""
    with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        return runner.run(main)


# -- the budget --------------------------------------------------------------------------------


def test_F4_a_budget_is_checked_when_built() -> None:
    assert Budget(50, 1.0) == DISCORD_GLOBAL
    for requests, per in ((0, 1.0), (5, 0.0), (5, -1.0), (5, float("inf")), (5, float("nan"))):
        with pytest.raises(ValueError, match="Budget"):
            Budget(requests, per)
    wrong: tuple[tuple[Any, Any], ...] = ((2.5, 1.0), (True, 1.0), (5, "1"), (5, True))
    for requests, per in wrong:
        with pytest.raises(TypeError):
            Budget(requests, per)
    with pytest.raises(TypeError):
        set_global_budget(50)  # type: ignore[arg-type]


def test_F4_set_global_budget_returns_the_previous_one() -> None:
    assert ratelimit.global_budget() == DISCORD_GLOBAL
    assert set_global_budget(Budget(10, 2.0)) == DISCORD_GLOBAL
    assert set_global_budget(None) == Budget(10, 2.0)
    assert ratelimit.global_budget() is None
    assert set_global_budget(DISCORD_GLOBAL) is None


# -- the pacer ---------------------------------------------------------------------------------


async def _release_times(
    arrivals: Sequence[float], lanes: Sequence[tuple[ratelimit.Lane, ...]] | None = None
) -> list[tuple[int, float]]:
    """Request `i` asks for its turn `arrivals[i]` seconds from now (in this order when two
    arrive together); (i, the moment it got its turn), in the order they got it."""
    loop = asyncio.get_running_loop()
    pacer = ratelimit.pacer()
    released: list[tuple[int, float]] = []

    async def one(index: int) -> None:
        await pacer.acquire(*(lanes[index] if lanes else ()))
        released.append((index, loop.time()))

    start = loop.time()
    tasks = []
    for index, at in enumerate(arrivals):
        if (wait := start + at - loop.time()) > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(one(index)))
    await asyncio.gather(*tasks)
    return [(index, at - start) for index, at in released]


@settings(max_examples=examples(60), deadline=None)
@given(
    requests=st.integers(1, 6),
    per=st.sampled_from([0.05, 0.3, 1.0, 2.5]),
    gaps=st.lists(st.sampled_from([0.0, 0.0, 0.01, 0.1, 0.5, 1.0, 3.0]), min_size=1, max_size=40),
)
def test_F4_the_pacer_is_a_sliding_window_that_releases_as_early_as_it_may_in_order(
    requests: int, per: float, gaps: list[float]
) -> None:
    arrivals = [sum(gaps[: i + 1]) for i in range(len(gaps))]

    async def main() -> list[tuple[int, float]]:
        set_global_budget(Budget(requests, per))
        return await _release_times(arrivals)

    released = run_virtual(main())
    assert [index for index, _ in released] == list(range(len(arrivals)))  # first in first out
    times = [at for _, at in released]
    for i, at in enumerate(times):
        # Never more than `requests` in any window of `per` seconds ...
        if i >= requests:
            assert at - times[i - requests] >= per - 1e-6
        # ... and never later than that rule and the order make it.
        earliest = max(
            arrivals[i],
            times[i - 1] if i else 0.0,
            times[i - requests] + per if i >= requests else 0.0,
        )
        assert at == pytest.approx(earliest, abs=2e-6)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_fifty_a_second_release_fifty_at_once_then_fifty_a_second_later() -> None:
    released = await _release_times([0.0] * 160)
    times = [at for _, at in released]
    assert times == [0.0] * 50 + [1.0] * 50 + [2.0] * 50 + [3.0] * 10


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_a_budget_changed_while_requests_wait_judges_them_by_the_new_one() -> None:
    loop = asyncio.get_running_loop()
    set_global_budget(Budget(1, 10.0))
    waiting = asyncio.create_task(_release_times([0.0] * 5))
    await asyncio.sleep(1.0)  # one went at 0; four wait until 10, 20, 30, 40
    set_global_budget(Budget(100, 1.0))
    released = await waiting
    assert [at for _, at in released] == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert loop.time() == 1.0
    set_global_budget(Budget(1, 10.0))
    waiting = asyncio.create_task(_release_times([0.0] * 3))
    await asyncio.sleep(0.5)
    set_global_budget(None)  # no pacing: every waiting request goes now
    # (the first waited too: the release at 1.0 still counts against 1 per 10 s)
    assert [at for _, at in await waiting] == [0.5, 0.5, 0.5]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_a_shrunk_budget_holds_the_next_requests_back() -> None:
    released = await _release_times([0.0] * 10)
    assert {at for _, at in released} == {0.0}
    set_global_budget(Budget(2, 1.0))
    later = await _release_times([0.0] * 4)
    assert [at for _, at in later] == [1.0, 1.0, 2.0, 2.0]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_a_request_cancelled_while_waiting_gives_its_turn_to_the_next() -> None:
    loop = asyncio.get_running_loop()
    set_global_budget(Budget(1, 1.0))
    pacer = ratelimit.pacer()
    await pacer.acquire()  # the window is full until 1.0
    first = asyncio.create_task(pacer.acquire())
    second = asyncio.create_task(pacer.acquire())
    await asyncio.sleep(0.5)
    first.cancel()
    await second
    assert loop.time() == 1.0
    assert first.cancelled()
    assert not pacer.waiting


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_try_acquire_never_waits_and_never_jumps_the_queue() -> None:
    set_global_budget(Budget(1, 1.0))
    pacer = ratelimit.pacer()
    assert pacer.try_acquire()
    assert not pacer.try_acquire()  # full: nothing taken
    waiter = asyncio.create_task(pacer.acquire())
    await asyncio.sleep(0.5)
    assert not waiter.done()
    assert not pacer.try_acquire()  # somebody waits
    await waiter
    assert asyncio.get_running_loop().time() == 1.0
    assert not pacer.try_acquire()  # the waiter took the turn that freed
    set_global_budget(None)
    assert pacer.try_acquire()


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_a_request_held_by_its_own_lane_does_not_hold_up_the_others() -> None:
    lane: ratelimit.Lane = (Budget(1, 5.0), ratelimit.Window())
    set_global_budget(Budget(10, 1.0))
    lanes = [(lane,), (lane,), (), (), (lane,)]
    released = await _release_times([0.0] * 5, lanes)
    by_index = dict(released)
    assert by_index == {0: 0.0, 2: 0.0, 3: 0.0, 1: 5.0, 4: 10.0}  # the lane keeps its order
    assert [index for index, _ in released] == [0, 2, 3, 1, 4]


# -- what `retry_after` reads --------------------------------------------------------------------


def _http_exception(status: int, headers: dict[str, str]) -> discord.HTTPException:
    """discord.py's exception as it raises it, around a stand-in for aiohttp's response."""
    response = SimpleNamespace(
        status=status, reason="Too Many Requests", headers=CIMultiDict(headers)
    )
    body = {"message": "You are being rate limited.", "code": 0}
    return discord.HTTPException(response, body)  # type: ignore[arg-type]


DISCORD_429: Final = {"Via": "1.1 google", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, DISCORD_429 | {"X-RateLimit-Reset-After": "2.5", "Retry-After": "3"}, 2.5),
        (429, DISCORD_429 | {"Retry-After": "3"}, 3.0),
        (429, DISCORD_429 | {"Retry-After": "soon"}, 0.0),
        (429, DISCORD_429 | {"X-RateLimit-Reset-After": "nan", "Retry-After": "4"}, 4.0),
        (429, DISCORD_429 | {"X-RateLimit-Reset-After": "-1"}, 0.0),
        (429, DISCORD_429, 0.0),
        (429, {"Content-Type": "application/json", "Retry-After": "3"}, None),  # Cloudflare
        (429, {"Via": "1.1 google", "Content-Type": "text/html", "Retry-After": "3"}, None),
        (500, DISCORD_429 | {"Retry-After": "3"}, None),
        (403, DISCORD_429, None),
    ],
)
def test_F4_retry_after_tells_discords_429_from_every_other_failure(
    status: int, headers: dict[str, str], expected: float | None
) -> None:
    result = IOFailure(_http_exception(status, headers))
    assert discord_api.retry_after(result) == expected


def test_F4_retry_after_is_none_for_a_success_and_for_other_exceptions() -> None:
    assert discord_api.retry_after(IOSuccess("sent")) is None
    assert discord_api.retry_after(IOFailure(ConnectionResetError())) is None
    rate_limited = discord.RateLimited(120.0)  # discord.py's max_ratelimit_timeout refusal
    assert discord_api.retry_after(IOFailure(rate_limited)) is None


# -- a 429 sent again (F4, B13) -----------------------------------------------------------------


def _sends(s: Stage, since: int = 0) -> list[int | None]:
    return [r.status for r in s.api.requests[since:] if r.kind == "send"]


async def _answered(
    s: Stage, fault: RateLimited, times: int, steps: Sequence[Step]
) -> tuple[StreamResult, list[int | None], float]:
    """Stream `steps` while Discord answers the first `times` sends with `fault`: the result,
    the status of each send the stream made, and how long (virtual) it took."""
    loop = asyncio.get_running_loop()
    before = len(s.api.requests)
    s.api.inject(fault, route="send", times=times)
    start = loop.time()
    result = await s.stream(ScriptProvider(steps))
    return result, _sends(s, before), loop.time() - start


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(
    "retry_after",
    [
        # discord.py sleeps 0.5 s after each 429; cordstream waits its first backoff (1 s).
        pytest.param(0.5, id="backoff"),
        # Retry-After: 3 (the emulator's injected 429 has no bucket headers): 3 s, not 1 s.
        pytest.param(3.0, id="discords-longer-retry-after"),
    ],
)
async def test_F4_a_send_discord_py_gave_up_on_after_five_429s_is_sent_again_once(
    retry_after: float,
) -> None:
    async with stage() as s:
        result, sends, took = await _answered(s, RateLimited(retry_after), 5, ["Hello"])
        assert result.status == "completed"
        assert s.contents == ["Hello"]
        assert sends == [429] * 5 + [200]
        wait = max(retry_after, ratelimit.RETRY_DELAYS[0])  # the longer of the two
        assert took == pytest.approx(5 * retry_after + wait)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_an_embed_discord_py_gave_up_on_is_sent_again_too() -> None:
    async with stage() as s:
        steps = [ValueError("the model broke")]
        result, sends, _ = await _answered(s, RateLimited(retry_after=0.1), 5, steps)
        assert result.status == "error"
        assert len(s.embeds) == 1
        assert sends == [429] * 5 + [200]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_a_cloudflare_429_is_not_sent_again_and_ends_the_stream_as_an_error() -> None:
    async with stage() as s:
        cloudflare = RateLimited(retry_after=1.0, via=False)
        result, sends, _ = await _answered(s, cloudflare, 1, ["Hello\n", "World"])
        assert result.status == "error"
        assert isinstance(result.data, discord.HTTPException)
        assert result.data.status == 429
        assert result.messages_sent == 0
        assert s.contents == []
        assert len(s.embeds) == 1  # the generic error embed (B13)
        assert sends == [429, 200]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_a_429_asking_for_more_than_a_minute_is_not_sent_again() -> None:
    async with stage() as s:
        wait = ratelimit.MAX_RETRY_AFTER + 1
        result, sends, _ = await _answered(s, RateLimited(retry_after=wait), 5, ["Hello"])
        assert result.status == "error"
        assert sends == [429] * 5 + [200]  # five 429s, then the error embed
        assert s.contents == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B13_when_the_retry_budget_is_spent_the_stream_ends_as_an_error() -> None:
    async with stage() as s:
        tries = 5 * (len(ratelimit.RETRY_DELAYS) + 1)  # discord.py's 5, each round
        fault = RateLimited(retry_after=0.1)
        result, sends, took = await _answered(s, fault, tries, ["Hello\n", "World"])
        assert result.status == "error"
        assert isinstance(result.data, discord.HTTPException)
        assert result.data.status == 429
        assert (result.messages_sent, result.messages, result.accumulated_text) == (0, (), "")
        assert s.contents == []
        assert len(s.embeds) == 1
        assert sends == [429] * tries + [200]
        # Bounded: discord.py's own waits, plus the backoff of each round.
        assert took == pytest.approx(tries * 0.1 + BACKOFF)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_a_stream_keeps_its_order_when_one_of_its_messages_is_sent_again() -> None:
    async with stage() as s:
        lines = [f"Line {n}: " + " ".join(["word"] * 30) + "\n" for n in range(8)]
        before = len(s.api.requests)
        # 7 429s: discord.py's five for the 4th line's message, then two of cordstream's tries.
        limit = Do(lambda: s.api.inject(RateLimited(retry_after=0.2), route="send", times=7))
        provider = ScriptProvider([*lines[:3], Sleep(0.5), limit, *lines[3:]])
        result = await s.stream(
            provider, StreamConfig(delivery="messages", max_message_length=200, flush_limit=0)
        )
        assert result.status == "completed"
        assert _sends(s, before).count(429) == 7
        contents = s.contents
        assert result.messages == tuple(contents)
        assert s.api.text() == result.accumulated_text == "".join(lines).rstrip("\n")


# -- many streams at Discord's real limits (F4) ---------------------------------------------


@dataclass(frozen=True)
class Load:
    results: list[StreamResult]
    elapsed: float
    requests: int  # requests that reached the emulator during the run
    accepted: int  # of which not refused with a 429
    texts: list[str]
    counts: list[int]  # messages each channel holds


async def _many_streams(
    s: Stage, streams: int, limits: RateLimits, answer: Sequence[str] = ANSWER
) -> Load:
    """`streams` streams at once, each into its own channel, with `limits` on."""
    ids = [s.api.add_channel(f"c{n}") for n in range(streams)]
    channels = [s.client.get_partial_messageable(i) for i in ids]
    s.api.rate_limits = limits
    loop = asyncio.get_running_loop()
    before = len(s.api.requests)
    start = loop.time()
    results = await asyncio.wait_for(
        asyncio.gather(
            *(
                s.orchestrator.stream_to_discord(
                    ScriptProvider(list(answer)),
                    StreamConfig(delivery="messages"),
                    StreamContext(channel),
                )
                for channel in channels
            )
        ),
        RUN_LIMIT,
    )
    elapsed = loop.time() - start
    made = s.api.requests[before:]
    return Load(
        results=list(results),
        elapsed=elapsed,
        requests=len(made),
        accepted=sum(1 for r in made if r.status != 429),
        texts=[s.api.text(i) for i in ids],
        counts=[len(s.api.messages(i)) for i in ids],
    )


def _every_answer_whole(load: Load) -> None:
    assert [r.status for r in load.results] == ["completed"] * len(load.results)
    assert load.texts == [EXPECTED] * len(load.results)  # every line, in order
    assert [r.accumulated_text for r in load.results] == load.texts
    assert [r.messages_sent for r in load.results] == load.counts  # none duplicated


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("streams", [200, 1000])
async def test_F4_hundreds_of_streams_at_discords_real_limits_all_complete(streams: int) -> None:
    async with stage() as s:
        load = await _many_streams(s, streams, RateLimits())
        _every_answer_whole(load)
        # Paced under 50 a second: no 429 at all, and no slower than the limit makes it.
        assert s.api.rate_limit_hits == {}
        assert load.accepted == load.requests
        assert load.elapsed == pytest.approx((load.requests - 1) // 50)
        assert load.elapsed <= load.requests / 50


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_streams_paced_faster_than_discord_allows_still_all_complete() -> None:
    """Another process with the same token uses part of the limit: cordstream's budget is too
    generous, Discord answers global 429s, and the retries carry every answer through."""
    async with stage() as s:
        limits = RateLimits(global_limit=Limit(30, 1.0))
        load = await _many_streams(s, 200, limits)
        _every_answer_whole(load)
        assert s.api.rate_limit_hits["global"] > 0


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F4_without_pacing_the_retries_alone_carry_two_hundred_streams() -> None:
    async with stage() as s:
        set_global_budget(None)
        load = await _many_streams(s, 200, RateLimits())
        _every_answer_whole(load)
        assert s.api.rate_limit_hits["global"] > 0


# -- a caller's cancellation during a global 429 (B11) --------------------------------------


def _leftovers() -> set[asyncio.Task[object]]:
    """Tasks left running besides the emulator's idle keep-alive connections (B11)."""
    return {
        task
        for task in other_tasks()
        if getattr(task.get_coro(), "__qualname__", "") != "RequestHandler.start"
    }


def _gate(s: Stage) -> asyncio.Event:
    gate = ratelimit.discord_global_gate(s.channel)
    assert isinstance(gate, asyncio.Event)
    return gate


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B11_a_caller_cancelling_during_a_global_429_leaves_the_client_usable() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        s.api.inject(RateLimited(retry_after=5.0, is_global=True), route="send")
        first = asyncio.create_task(s.stream(ScriptProvider(["Hello"])))
        await asyncio.sleep(1.0)  # the send got its global 429 and sleeps it off
        assert not _gate(s).is_set()
        first.cancel()
        cancelled_at = loop.time()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert loop.time() == cancelled_at  # the caller was not held for discord.py's wait
        assert ratelimit.background_requests() == 1  # the keeper of discord.py's lock
        result = await asyncio.wait_for(s.stream(ScriptProvider(["again"])), 60.0)
        assert result.status == "completed"
        assert loop.time() == pytest.approx(5.0)  # sent as soon as the global wait was over
        assert _gate(s).is_set()
        await ratelimit.drain_background()
        assert ratelimit.background_requests() == 0
        assert not _leftovers()
        assert s.contents == ["again"]  # the cancelled send never went


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B11_cancelling_while_the_lock_is_open_hands_nothing_over() -> None:
    async with stage() as s:
        s.api.inject(RateLimited(retry_after=5.0), route="send")  # a route 429: no global lock
        first = asyncio.create_task(s.stream(ScriptProvider(["Hello"])))
        await asyncio.sleep(1.0)
        assert _gate(s).is_set()
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert ratelimit.background_requests() == 0
        assert not _leftovers()
        await asyncio.sleep(10.0)
        assert s.contents == []  # the cancelled request never went again


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B11_requests_waiting_on_the_lock_are_cancelled_at_once_and_never_sent() -> None:
    """Two streams: one sleeps off the global 429, the other's send waits on discord.py's
    lock. Both callers cancel; neither message is ever sent, and the next send goes out when
    Discord's global wait is over."""
    async with stage() as s:
        loop = asyncio.get_running_loop()
        other = s.client.get_partial_messageable(s.api.add_channel("other"))
        s.api.inject(RateLimited(retry_after=5.0, is_global=True), route="send")
        sleeping = asyncio.create_task(s.stream(ScriptProvider(["Hello"])))
        await asyncio.sleep(0.5)
        waiting = asyncio.create_task(
            s.orchestrator.stream_to_discord(
                ScriptProvider(["Hi"]), StreamConfig(delivery="messages"), StreamContext(other)
            )
        )
        await asyncio.sleep(0.5)
        for task in (waiting, sleeping):
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert loop.time() == 1.0
        result = await asyncio.wait_for(s.stream(ScriptProvider(["again"])), 60.0)
        assert result.status == "completed"
        assert loop.time() == 5.0
        await ratelimit.drain_background()
        assert _gate(s).is_set()
        assert not _leftovers()
        assert s.contents == ["again"]
        assert s.api.messages(other.id) == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B11_a_lock_opened_early_by_another_request_is_left_open() -> None:
    """Two requests sleep off global 429s at once; the caller of the longer one cancels; the
    shorter one opens the lock when its wait ends, the later sends go then, and the keeper of
    the longer wait leaves the lock open."""
    async with stage() as s:
        loop = asyncio.get_running_loop()
        other = s.client.get_partial_messageable(s.api.add_channel("other"))
        s.api.inject(RateLimited(retry_after=9.0, is_global=True), channel_id=s.channel.id)
        s.api.inject(RateLimited(retry_after=2.0, is_global=True), channel_id=other.id)
        long_wait = asyncio.create_task(s.stream(ScriptProvider(["Hello"])))
        short_wait = asyncio.create_task(
            s.orchestrator.stream_to_discord(
                ScriptProvider(["Hi"]), StreamConfig(delivery="messages"), StreamContext(other)
            )
        )
        await asyncio.sleep(1.0)
        assert not _gate(s).is_set()
        long_wait.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long_wait
        assert ratelimit.background_requests() == 1
        assert (await short_wait).status == "completed"
        assert loop.time() == 2.0
        await ratelimit.drain_background()  # the keeper found the lock open, and left
        assert loop.time() == 2.0
        result = await s.stream(ScriptProvider(["again"]))
        assert result.status == "completed"
        assert loop.time() == 2.0
        assert _gate(s).is_set()
        assert s.contents == ["again"]
        assert [m.content for m in s.api.messages(other.id)] == ["Hi"]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B11_a_client_whose_lock_cannot_be_read_has_its_requests_left_to_finish() -> None:
    """Another discord.py version: no `_global_over` to read. cordstream does not guess; the
    requests are handed over and finish on their own."""
    channel = SimpleNamespace(_state=SimpleNamespace(http=SimpleNamespace(_global_over=None)))
    assert ratelimit.discord_global_gate(channel) == "unknown"
    request = asyncio.create_task(asyncio.sleep(3.0))
    assert ratelimit.cancel_requests(channel, [request]) == set()
    assert ratelimit.background_requests() == 1
    await ratelimit.drain_background()
    assert asyncio.get_running_loop().time() == 3.0
    assert request.done()
    assert not request.cancelled()


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B11_requests_without_a_discord_client_are_cancelled_at_once() -> None:
    channel = SimpleNamespace(id=1)
    assert ratelimit.discord_global_gate(channel) == "no client"
    request = asyncio.create_task(asyncio.sleep(3.0))
    await asyncio.sleep(0)
    assert ratelimit.cancel_requests(channel, [request]) == {request}
    with pytest.raises(asyncio.CancelledError):
        await request
    assert ratelimit.background_requests() == 0


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B11_global_wait_end_reads_only_discord_pys_global_sleep() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        other = s.client.get_partial_messageable(s.api.add_channel("other"))
        s.api.inject(RateLimited(retry_after=5.0, is_global=True), channel_id=s.channel.id)
        s.api.inject(RateLimited(retry_after=4.0), channel_id=other.id)
        sleeping = asyncio.create_task(s.channel.send("Hello"))
        route_sleeping = asyncio.create_task(other.send("Hi"))  # in flight with it
        await asyncio.sleep(0.5)
        waiting = asyncio.create_task(s.channel.send("Hi"))  # held by the lock
        elsewhere = asyncio.create_task(asyncio.sleep(10.0))  # not in discord.py
        await asyncio.sleep(0.5)
        assert not _gate(s).is_set()
        assert ratelimit.global_wait_end(sleeping) == pytest.approx(5.0)
        for task in (route_sleeping, waiting, elsewhere):
            assert ratelimit.global_wait_end(task) is None
        await asyncio.gather(sleeping, route_sleeping, waiting)
        assert loop.time() == 5.0
        assert ratelimit.global_wait_end(elsewhere) is None
        elsewhere.cancel()


@dataclass(frozen=True)
class Cancel:
    stream: int
    at: float


@settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    streams=st.integers(2, 12),
    global_limit=st.integers(2, 8),
    cancels=st.lists(
        st.tuples(st.integers(0, 11), st.sampled_from([0.0, 0.01, 0.3, 0.5, 0.99, 1.0, 1.5, 2.7])),
        max_size=12,
    ),
    injected=st.booleans(),
)
def test_B11_callers_cancelling_at_random_moments_during_429_waits_never_wedge_the_client(
    seed: int,
    streams: int,
    global_limit: int,
    cancels: list[tuple[int, float]],
    injected: bool,
) -> None:
    """Discord's global limit far below cordstream's budget (the bot's other requests use it
    up), so discord.py keeps sleeping off global 429s; callers cancel meanwhile. Afterwards
    discord.py's lock is open, nothing is left running, and a new stream completes."""
    plan = [Cancel(i % streams, at) for i, at in cancels]
    rng = random.Random(seed)

    async def main() -> None:
        async with stage() as s:
            loop = asyncio.get_running_loop()
            ids = [s.api.add_channel(f"c{n}") for n in range(streams)]
            channels = [s.client.get_partial_messageable(i) for i in ids]
            s.api.rate_limits = RateLimits(global_limit=Limit(global_limit, 1.0))
            if injected:
                s.api.inject(RateLimited(retry_after=2.0, is_global=True), route="any")
            tasks = []
            for channel in channels:
                steps: list[object] = []
                for line in ANSWER:
                    steps += [line, Sleep(rng.choice([0.0, 0.1, 0.6]))]
                tasks.append(
                    asyncio.create_task(
                        s.orchestrator.stream_to_discord(
                            ScriptProvider(steps),
                            StreamConfig(delivery="messages"),
                            StreamContext(channel),
                        )
                    )
                )
            start = loop.time()
            for cancel in sorted(plan, key=lambda c: c.at):
                if (wait := start + cancel.at - loop.time()) > 0:
                    await asyncio.sleep(wait)
                target = tasks[cancel.stream]
                if target.done():
                    continue
                target.cancel()
                asked = loop.time()
                with contextlib.suppress(asyncio.CancelledError):
                    await target
                assert loop.time() - asked < 0.05, "the caller was held after cancelling"
                if not _gate(s).is_set():
                    event("cancelled during a global 429 wait")
                if ratelimit.background_requests():
                    event("discord.py's lock kept")
            outcomes = await asyncio.wait_for(
                asyncio.gather(*tasks, return_exceptions=True), RUN_LIMIT
            )
            for channel_id, outcome in zip(ids, outcomes, strict=True):
                assert isinstance(outcome, StreamResult | asyncio.CancelledError), outcome
                if isinstance(outcome, StreamResult):
                    assert outcome.status == "completed", outcome
                    assert s.api.text(channel_id) == EXPECTED  # whole, in order, once
            s.api.rate_limits = None
            result = await asyncio.wait_for(s.stream(ScriptProvider(["again"])), 60.0)
            assert result.status == "completed"
            await asyncio.wait_for(ratelimit.drain_background(), 60.0)
            assert _gate(s).is_set()
            assert not _leftovers()

    run_virtual(main())


# -- the public knobs ---------------------------------------------------------------------------


def test_F4_the_knobs_a_bot_needs_are_public() -> None:
    for name in ("Budget", "DISCORD_GLOBAL", "set_global_budget"):
        assert name in cordstream.shell.__all__
        assert getattr(cordstream.shell, name) is getattr(ratelimit, name)


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("route", ["send", "typing"])
@pytest.mark.parametrize("cancel_at", [0.05, 0.5, 1.9])
async def test_B11_a_caller_cancelling_during_a_global_429_on_any_route_frees_every_channel(
    route: FaultRoute, cancel_at: float
) -> None:
    """The global 429 hits the typing indicator or the send, both of which cordstream awaits
    through `returns`' `future_safe` wrappers; `global_wait_end` looks through them. A later
    request on another channel goes out when Discord's wait is over (soak seed 2 once wedged
    here: the walk stopped at the wrapper and the sleeping request was cancelled)."""
    async with stage() as s:
        loop = asyncio.get_running_loop()
        other = s.client.get_partial_messageable(s.api.add_channel("other"))
        s.api.inject(RateLimited(retry_after=2.0, is_global=True), route=route)
        provider = ScriptProvider(["Hello\n", "two\n", "three"])
        first = asyncio.create_task(
            s.stream(provider, StreamConfig(delivery="messages", humanizer_degree=2))
        )
        await asyncio.sleep(cancel_at)
        assert not _gate(s).is_set()  # the cancel lands inside discord.py's global wait
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        probe = await asyncio.wait_for(other.send("probe"), RUN_LIMIT)
        assert probe.content == "probe"
        assert loop.time() == pytest.approx(2.0)
        await ratelimit.drain_background()
        assert not _leftovers()
