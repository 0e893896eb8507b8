"""Provider cleanup and the caller's cancellation state (SPEC §A, B1, B2, B3, B10, B11, B13).

The provider runs in a task of its own (see `cordstream.shell.orchestrator`): whatever it does
when it is stopped (return, raise, yield again, hang in a `finally`, swallow the cancellation,
raise from `aclose()`), the call ends within the cleanup budget, gives its one result, leaves
nothing behind and hands the caller's task back in the cancellation state it came in with.

Every test runs a real discord.py client against the local emulator on looptime's virtual
clock: the hangs (an hour each) and the budget cost no real time, and bounds are exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pytest

from cordstream.shell import (
    ErrorChunk,
    FunctionCall,
    FunctionCallChunk,
    ProcessedChunk,
    ProviderError,
    StreamConfig,
    StreamContext,
    StreamResult,
    TextChunk,
)
from cordstream.shell.orchestrator import CLOSE_GRACE, CLOSE_TIMEOUT
from cordstream.shell.testing import ScriptProvider
from tests.support.stage import Stage, other_tasks, stage

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

HOUR: Final = 3600.0
# Time for the sends and embeds an ending puts in flight (virtual time, paced at 50/s).
SLACK: Final = 0.5
# A cancelled caller gets its CancelledError back within this (see "Rules chosen").
HURRIED: Final = 2 * CLOSE_GRACE + 0.01
BUDGET: Final = CLOSE_TIMEOUT + CLOSE_GRACE


class Mine(BaseException):
    """A provider's own BaseException subclass (not an Exception)."""


# -- providers ------------------------------------------------------------------------------


@dataclass
class Probe:
    """What happened inside the provider."""

    interrupted: int = 0  # CancelledErrors it saw while reading
    cleanup_cancelled: int = 0  # CancelledErrors it saw while cleaning up
    left: bool = False  # its code is over: the outermost `finally` ran
    aclose_calls: int = 0
    cancelling_in_aclose: list[int] = field(default_factory=list)


class GenProvider(ScriptProvider):
    """The test kit's scripted provider, whose stream is what `make(probe)` builds: a
    generator with its own way of meeting cordstream's cancellation (the kit records the
    calls; `probe` what the generator itself saw)."""

    def __init__(
        self, make: Callable[[Probe], AsyncIterator[object]], probe: Probe | None = None
    ) -> None:
        super().__init__([], name="gen")
        self.make = make
        self.probe = probe if probe is not None else Probe()

    @property
    def starts(self) -> int:
        return self.calls.count("start")

    def start_stream(self, config: StreamConfig, context: StreamContext) -> AsyncIterator[object]:
        self.note_start()
        return self.make(self.probe)


async def hang() -> None:
    await asyncio.Event().wait()


async def hang_in_cleanup(probe: Probe) -> None:
    try:
        await asyncio.sleep(HOUR)
    except asyncio.CancelledError:
        probe.cleanup_cancelled += 1
        raise


FIRST: Final = TextChunk("Hello\nWorld")


def propagates(probe: Probe) -> AsyncIterator[object]:
    async def gen() -> AsyncIterator[object]:
        try:
            yield FIRST
            await hang()
        finally:
            probe.left = True

    return gen()


Script = Callable[[Probe], AsyncIterator[object]]


def when_interrupted(
    then: Callable[[Probe], Awaitable[None]] | None = None, *, late: Sequence[object] = ()
) -> Script:
    """A provider that yields its first chunk and hangs; interrupted there (cordstream's
    cancellation of its read), it counts it, yields `late`, then awaits `then` (returning,
    raising or waiting again), or else returns."""

    def make(probe: Probe) -> AsyncIterator[object]:
        async def gen() -> AsyncIterator[object]:
            try:
                yield FIRST
                try:
                    await hang()
                except asyncio.CancelledError:
                    probe.interrupted += 1
                    for item in late:
                        yield item
                    if then is not None:
                        await then(probe)
            finally:
                probe.left = True

        return gen()

    return make


def raising(error: Callable[[], BaseException]) -> Callable[[Probe], Awaitable[None]]:
    async def react(probe: Probe) -> None:
        raise error() from None

    return react


async def hang_again(probe: Probe) -> None:
    await hang()


returns = when_interrupted()  # StopAsyncIteration on cordstream's interrupt
yields_again = when_interrupted(
    hang_again,
    late=(TextChunk("late text\n"), ErrorChunk(ProviderError("api_error", "late error"))),
)
swallows_once = when_interrupted(hang_in_cleanup)  # goes on waiting, until cancelled again


def finally_hangs(probe: Probe) -> AsyncIterator[object]:
    """The issue's example: `try: yield; await sleep(3600) finally: await sleep(3600)`."""
    return _issue_generator(probe, last=None, then="sleep")


# name -> (provider script, whether its cleanup waits until it is cancelled a second time)
BEHAVIOURS: Final[dict[str, tuple[Script, bool]]] = {
    "propagates": (propagates, False),
    "returns": (returns, False),
    "raises-exception": (when_interrupted(raising(lambda: RuntimeError("interrupted"))), False),
    "raises-own-cancelled": (
        when_interrupted(raising(lambda: asyncio.CancelledError("its own"))),
        False,
    ),
    "raises-base-exception": (when_interrupted(raising(lambda: Mine("interrupted"))), False),
    "yields-again": (yields_again, False),
    "finally-hangs": (finally_hangs, True),
    "swallows-once": (swallows_once, True),
}


# -- running one call -----------------------------------------------------------------------


@dataclass
class Outcome:
    result: StreamResult | None
    escaped: BaseException | None
    cancelling_before: int
    cancelling_after: int
    started: float
    ended: float

    @property
    def took(self) -> float:
        return self.ended - self.started


async def call(
    s: Stage,
    provider: GenProvider,
    config: StreamConfig | None = None,
    *,
    entry: int = 0,
    timeout: float | None = None,
) -> Outcome:
    """One call from a task that enters with `entry` cancellation requests already counted
    (caught, as a task that survived a cancellation has), maybe inside `asyncio.timeout`."""
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    for _ in range(entry):
        me.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
    before = me.cancelling()
    started = loop.time()
    result: StreamResult | None = None
    escaped: BaseException | None = None
    try:
        if timeout is None:
            result = await s.stream(provider, config)
        else:
            async with asyncio.timeout(timeout):
                result = await s.stream(provider, config)
    except BaseException as error:  # whatever escaped is the finding
        escaped = error
    ended = loop.time()
    after = me.cancelling()
    while me.uncancel():  # leave this helper's task clean
        pass
    return Outcome(result, escaped, before, after, started, ended)


def spawn(coroutine: Awaitable[Outcome]) -> asyncio.Task[Outcome]:
    async def run() -> Outcome:
        return await coroutine

    return asyncio.get_running_loop().create_task(run())


async def settled(task: asyncio.Task[Any]) -> None:
    """Wait for a task the call left behind to end (never a sleep: the real condition)."""
    await asyncio.wait({task})


def ours(tasks: set[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    """Without the emulator's connection handlers (aiohttp's server side: Discord's, not ours;
    a request the call cancelled leaves its handler running for a moment)."""
    return {
        t
        for t in tasks
        if not getattr(t.get_coro(), "__qualname__", "").startswith("RequestHandler.")
    }


def assert_clean(s: Stage, before: set[asyncio.Task[object]]) -> None:
    """B11, C5: no task, listener or registry entry left by the call."""
    left = ours(other_tasks() - before)
    assert not left, f"left behind: {left}"
    assert s.stops.listening() == 0
    assert len(s.stops) == 0


# -- the endings ----------------------------------------------------------------------------

AT: Final = 1.0  # when a request or the caller ends a stream that hangs
TIMEOUT: Final = 0.3

# name -> (when the stream ends, its status or what the caller's `await` raises)
ENDINGS: Final[dict[str, tuple[float, str | type[BaseException]]]] = {
    "timeout": (TIMEOUT, "timeout"),
    "stop": (AT, "stopped_by_user"),
    "follow-up": (AT, "follow_up_interrupt"),
    "caller-cancels": (AT, asyncio.CancelledError),
    "caller-timeout": (AT, TimeoutError),
}


async def end_hanging_stream(
    s: Stage, provider: GenProvider, ending: str, *, entry: int = 0
) -> Outcome:
    """Run `provider` (it hangs after its first chunk) to the given ending."""
    loop = asyncio.get_running_loop()
    channel = s.channel.id
    config = StreamConfig(
        delivery="messages", inactivity_timeout=TIMEOUT if ending == "timeout" else 120
    )
    task = spawn(
        call(s, provider, config, entry=entry, timeout=AT if ending == "caller-timeout" else None)
    )
    if ending == "stop":
        loop.call_later(AT, s.orchestrator.request_stop, channel, "bob", "the /stop")
    elif ending == "follow-up":
        loop.call_later(AT, s.orchestrator.request_follow_up, channel, "bob")
    elif ending == "caller-cancels":
        loop.call_later(AT, task.cancel)
    return await task


def check_ending(outcome: Outcome, ending: str) -> None:
    _, expected = ENDINGS[ending]
    if isinstance(expected, str):
        assert outcome.escaped is None, f"escaped: {outcome.escaped!r}"
        assert outcome.result is not None
        assert outcome.result.status == expected
        if ending == "stop":
            assert outcome.result.stop_context == "the /stop"
    else:
        assert isinstance(outcome.escaped, expected), f"got {outcome.escaped or outcome.result!r}"
    # §A, B11: the caller's task leaves with the cancellation state it came in with; only the
    # caller's own cancel() (caller-cancels) is still counted, as after any cancelled await.
    own = 1 if ending == "caller-cancels" else 0
    assert outcome.cancelling_after == outcome.cancelling_before + own


# -- §A, B11: the caller's cancellation state, over provider behaviours x endings ---------------


@pytest.mark.parametrize("entry", [0, 1], ids=["clean-caller", "caller-cancelling-1"])
@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("behaviour", list(BEHAVIOURS))
async def test_A_B11_the_caller_leaves_with_the_cancellation_state_it_came_in_with(
    behaviour: str, ending: str, entry: int
) -> None:
    make, slow = BEHAVIOURS[behaviour]
    end_at, _ = ENDINGS[ending]
    async with stage() as s:
        before = other_tasks()
        provider = GenProvider(make)
        outcome = await end_hanging_stream(s, provider, ending, entry=entry)
        assert outcome.cancelling_before == entry
        check_ending(outcome, ending)
        # B2, B3, B10: bounded, whatever the provider does once it is stopped.
        caller = ending.startswith("caller")
        cleanup = HURRIED if caller else (CLOSE_TIMEOUT if slow else 0.0)
        assert end_at <= outcome.took <= end_at + cleanup + SLACK
        assert provider.probe.left, "the provider's code did not end (B10)"
        assert provider.starts == 1
        # What the provider did once stopped reached nobody.
        assert "late text" not in s.contents
        assert all("late error" not in str(e.get("description")) for e in s.embeds)
        if ending == "timeout":
            assert s.contents == ["Hello", "World"]  # B12: the pending text is delivered
        assert_clean(s, before)


# -- B1, B10: whatever aclose() does ---------------------------------------------------------


class Stream:
    """A hand-written provider iterator: `chunks`, then maybe a hang, with `aclose` set by the
    test to anything at all."""

    def __init__(self, chunks: list[object], *, then_hang: bool) -> None:
        self.chunks = list(chunks)
        self.then_hang = then_hang

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> object:
        if self.chunks:
            return self.chunks.pop(0)
        if self.then_hang:
            await hang()
        raise StopAsyncIteration


def _aclose_behaviours(probe: Probe) -> dict[str, object]:
    def note() -> None:
        probe.aclose_calls += 1
        task = asyncio.current_task()
        probe.cancelling_in_aclose.append(task.cancelling() if task else -1)

    def raising(error: BaseException) -> Callable[[], Awaitable[None]]:
        async def aclose() -> None:
            note()
            raise error

        return aclose

    async def hangs() -> None:
        note()
        await hang_in_cleanup(probe)

    async def swallows_then_ends() -> None:
        note()
        try:
            await asyncio.sleep(HOUR)
        except asyncio.CancelledError:
            probe.cleanup_cancelled += 1
        await asyncio.sleep(CLOSE_GRACE / 2)  # a little more work, within the grace

    def plain(value: object) -> Callable[[], object]:
        def aclose() -> object:
            note()
            return value

        return aclose

    def sync_raising() -> None:
        note()
        raise asyncio.CancelledError

    class Weird:
        """An awaitable that is no coroutine, failing when awaited."""

        def __await__(self) -> Iterator[None]:
            note()
            if probe.aclose_calls:  # always: a generator that raises at once
                raise asyncio.CancelledError
            yield  # pragma: no cover

    return {
        "raises-cancelled-error": raising(asyncio.CancelledError()),  # the issue's example
        "raises-generator-exit": raising(GeneratorExit()),
        "raises-own-base-exception": raising(Mine("aclose")),
        "raises-stop-async-iteration": raising(StopAsyncIteration()),
        "raises-exception": raising(RuntimeError("aclose failed")),
        "returns-none": plain(None),
        "returns-non-awaitable": plain(42),
        "sync-raises-cancelled-error": sync_raising,
        "returns-awaitable-raising-cancelled": Weird,
        "not-callable": "aclose",
        "hangs": hangs,
        "swallows-then-ends": swallows_then_ends,
    }


ACLOSE_KINDS: Final = list(_aclose_behaviours(Probe()))
SLOW_ACLOSE: Final = {"hangs", "swallows-then-ends"}

CALL: Final = FunctionCallChunk(FunctionCall("lookup", {"q": "x"}))
# name -> (chunks, whether the provider then hangs, the status)
STREAM_ENDS: Final[dict[str, tuple[list[object], bool, str]]] = {
    "function-call": ([TextChunk("Hello\n"), CALL], False, "function_call"),
    "error-chunk": (
        [TextChunk("Hello\n"), ErrorChunk(ProviderError("api_error", "bad"))],
        False,
        "error",
    ),
    "completed": ([TextChunk("Hello\n"), TextChunk("World")], False, "completed"),
    "timeout": ([TextChunk("Hello\n")], True, "timeout"),
    "stop": ([TextChunk("Hello\n")], True, "stopped_by_user"),
}


@pytest.mark.parametrize("end", list(STREAM_ENDS))
@pytest.mark.parametrize("kind", ACLOSE_KINDS)
async def test_B1_B10_whatever_aclose_does_the_call_gives_its_result(kind: str, end: str) -> None:
    chunks, then_hang, status = STREAM_ENDS[end]
    async with stage() as s:
        before = other_tasks()
        probe = Probe()
        iterator = Stream(chunks, then_hang=then_hang)
        iterator.aclose = _aclose_behaviours(probe)[kind]  # type: ignore[attr-defined]
        provider = GenProvider(lambda _: iterator, probe=probe)
        config = StreamConfig(
            delivery="messages", inactivity_timeout=TIMEOUT if end == "timeout" else 120
        )
        if end == "stop":
            asyncio.get_running_loop().call_later(
                AT, s.orchestrator.request_stop, s.channel.id, "bob"
            )
        outcome = await call(s, provider, config, entry=1)
        assert outcome.escaped is None, f"escaped: {outcome.escaped!r}"  # B1
        assert outcome.result is not None
        assert outcome.result.status == status
        assert outcome.cancelling_after == outcome.cancelling_before == 1
        if kind != "not-callable":
            assert probe.aclose_calls == 1  # B10
            # aclose() runs in a task that is not being cancelled.
            assert probe.cancelling_in_aclose == [0]
        end_at = {"timeout": TIMEOUT, "stop": AT}.get(end, 0.0)
        cleanup = CLOSE_TIMEOUT if kind in SLOW_ACLOSE else 0.0
        assert outcome.took <= end_at + cleanup + SLACK
        if kind == "hangs":
            assert probe.cleanup_cancelled == 1  # cut off at the budget, not left running
        assert_clean(s, before)


async def test_B10_aclose_may_use_asyncio_timeout_and_task_groups_after_an_interrupt() -> None:
    """The interrupted read's cancellation is taken back before `aclose()`, so structured
    concurrency inside it behaves as in any task."""
    ran: list[str] = []

    class Closing(Stream):
        async def aclose(self) -> None:
            async with asyncio.timeout(1):
                await asyncio.sleep(0.01)
            async with asyncio.TaskGroup() as group:
                group.create_task(asyncio.sleep(0.01))
            ran.append("closed")

    async with stage() as s:
        before = other_tasks()
        iterator = Closing([TextChunk("Hello\n")], then_hang=True)
        provider = GenProvider(lambda _: iterator)
        asyncio.get_running_loop().call_later(AT, s.orchestrator.request_stop, s.channel.id)
        outcome = await call(s, provider)
        assert outcome.result is not None
        assert outcome.result.status == "stopped_by_user"
        assert ran == ["closed"]
        assert_clean(s, before)


# -- B2, B3, B10: a generator whose finally hangs, at every ending ------------------------------


def _issue_generator(probe: Probe, *, last: object | None, then: str) -> AsyncIterator[object]:
    """Yields the first chunk (and `last`), then sleeps an hour (`then="sleep"`) or returns;
    its `finally` waits until it is cancelled."""

    async def gen() -> AsyncIterator[object]:
        try:
            try:
                yield FIRST
                if last is not None:
                    yield last
                if then == "sleep":
                    await asyncio.sleep(HOUR)
            finally:
                await hang_in_cleanup(probe)
        finally:
            probe.left = True

    return gen()


# name -> (the chunk after the text, what the body does then, config timeout, ends at, status)
FINALLY_ENDINGS: Final[dict[str, tuple[object | None, str, float, float, str]]] = {
    "timeout": (None, "sleep", TIMEOUT, TIMEOUT, "timeout"),
    "stop": (None, "sleep", 120, AT, "stopped_by_user"),
    "follow-up": (None, "sleep", 120, AT, "follow_up_interrupt"),
    "function-call": (CALL, "sleep", 120, 0.0, "function_call"),
    "error-chunk": (ErrorChunk(ProviderError("api_error", "bad")), "sleep", 120, 0.0, "error"),
    # The generator returns, so its `finally` runs inside the last `__anext__`: the model
    # sends nothing more, which is an inactivity timeout (B2).
    "completed": (None, "return", TIMEOUT, TIMEOUT, "timeout"),
}


@pytest.mark.parametrize("ending", list(FINALLY_ENDINGS))
async def test_B2_B3_B10_a_finally_that_hangs_is_cut_off_at_the_budget(ending: str) -> None:
    last, then, inactivity, end_at, status = FINALLY_ENDINGS[ending]
    async with stage() as s:
        before = other_tasks()
        loop = asyncio.get_running_loop()
        provider = GenProvider(lambda p: _issue_generator(p, last=last, then=then))
        if ending == "stop":
            loop.call_later(AT, s.orchestrator.request_stop, s.channel.id, "bob", "ctx")
        elif ending == "follow-up":
            loop.call_later(AT, s.orchestrator.request_follow_up, s.channel.id, "bob")
        outcome = await call(
            s, provider, StreamConfig(delivery="messages", inactivity_timeout=inactivity)
        )
        assert outcome.escaped is None, f"escaped: {outcome.escaped!r}"
        assert outcome.result is not None
        assert outcome.result.status == status
        assert outcome.cancelling_after == outcome.cancelling_before == 0
        assert end_at <= outcome.took <= end_at + CLOSE_TIMEOUT + SLACK
        assert provider.probe.cleanup_cancelled == 1  # its `finally` was cut off, once
        assert provider.probe.left
        assert_clean(s, before)


# -- B11: a provider that swallows every cancellation ---------------------------------------------


def _swallower(probe: Probe, release: asyncio.Event) -> AsyncIterator[object]:
    async def gen() -> AsyncIterator[object]:
        try:
            yield FIRST
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    probe.interrupted += 1
            # Abandoned, it wakes up and tries everything.
            yield TextChunk("late text\n")
            yield ErrorChunk(ProviderError("api_error", "late error"))
            yield CALL
            raise RuntimeError("late failure")
        finally:
            probe.left = True

    return gen()


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_B11_a_provider_that_swallows_every_cancellation_is_abandoned_within_the_budget(
    ending: str,
) -> None:
    end_at, _ = ENDINGS[ending]
    release = asyncio.Event()
    async with stage() as s:
        before = other_tasks()
        provider = GenProvider(lambda p: _swallower(p, release))
        outcome = await end_hanging_stream(s, provider, ending)
        check_ending(outcome, ending)
        bound = HURRIED if ending.startswith("caller") else BUDGET
        assert end_at <= outcome.took <= end_at + bound + SLACK
        assert provider.probe.interrupted >= 2  # interrupted, then cancelled once more
        # The one thing left behind: the provider's task, running the provider's code.
        (left,) = ours(other_tasks() - before)
        assert getattr(left.get_coro(), "__qualname__", "") == "ProviderTask.run"
        assert s.stops.listening() == 0
        assert len(s.stops) == 0
        # A stop registered after the call belongs to the next stream: the abandoned
        # provider must not consume it.
        s.orchestrator.request_stop(s.channel.id, "alice")
        messages = list(s.api.messages())
        release.set()
        await settled(left)
        assert left.exception() is None
        assert provider.probe.left  # it got out, and was closed
        assert list(s.api.messages()) == messages  # nothing it did reached Discord
        assert s.stops.has_stop_request(s.channel.id)
        assert s.stops.listening() == 0
        assert not ours(other_tasks() - before)


# -- B11: the caller cancels while the provider's cleanup hangs ----------------------------------


# name -> (provider, how the stream ends before the caller cancels)
CLEANUP_HANGS: Final[dict[str, tuple[Script, str]]] = {
    "finally-after-stop": (finally_hangs, "stop"),
    "finally-after-timeout": (finally_hangs, "timeout"),
    "swallowed-after-stop": (swallows_once, "stop"),
    "finally-after-function-call": (
        lambda p: _issue_generator(p, last=CALL, then="sleep"),
        "function-call",
    ),
}


@pytest.mark.parametrize("cancels", [1, 2], ids=["once", "twice"])
@pytest.mark.parametrize("case", list(CLEANUP_HANGS))
async def test_B11_the_caller_cancelling_while_the_cleanup_hangs_ends_the_call_at_once(
    case: str, cancels: int
) -> None:
    make, end = CLEANUP_HANGS[case]
    async with stage() as s:
        before = other_tasks()
        loop = asyncio.get_running_loop()
        provider = GenProvider(make)
        config = StreamConfig(
            delivery="messages", inactivity_timeout=TIMEOUT if end == "timeout" else 120
        )
        task = spawn(call(s, provider, config))
        if end == "stop":
            loop.call_later(AT, s.orchestrator.request_stop, s.channel.id, "bob")
        cancel_at = 2.0  # the stream has ended; its provider is still cleaning up
        for _ in range(cancels):
            loop.call_later(cancel_at, task.cancel)
        outcome = await task
        assert isinstance(outcome.escaped, asyncio.CancelledError)
        assert outcome.cancelling_after == cancels
        assert cancel_at <= outcome.took <= cancel_at + HURRIED
        assert provider.probe.left
        assert provider.probe.cleanup_cancelled == 1
        assert_clean(s, before)


async def test_B11_a_caller_cancelled_while_reading_a_provider_whose_finally_hangs() -> None:
    async with stage() as s:
        before = other_tasks()
        provider = GenProvider(finally_hangs)
        task = spawn(call(s, provider))
        asyncio.get_running_loop().call_later(AT, task.cancel)
        outcome = await task
        assert isinstance(outcome.escaped, asyncio.CancelledError)
        assert AT <= outcome.took <= AT + HURRIED
        assert provider.probe.cleanup_cancelled == 1
        assert provider.probe.left
        assert_clean(s, before)


# -- §A: asyncio.timeout around the call --------------------------------------------------------


@pytest.mark.parametrize("behaviour", list(BEHAVIOURS))
async def test_A_asyncio_timeout_around_the_call_raises_timeout_error(behaviour: str) -> None:
    make, _ = BEHAVIOURS[behaviour]
    async with stage() as s:
        before = other_tasks()
        provider = GenProvider(make)
        outer = asyncio.current_task()
        assert outer is not None
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(AT):
                await s.stream(provider)
        assert outer.cancelling() == 0
        await asyncio.sleep(0)  # no cancellation is left pending on this task
        assert provider.probe.left
        assert_clean(s, before)


async def test_A_the_caller_timeout_firing_after_the_result_still_finds_a_clean_task() -> None:
    """A provider that ends on the interrupt by returning, then a caller's timeout that does
    not fire: the timeout's block exits normally and the task can go on awaiting."""
    async with stage() as s:
        provider = GenProvider(returns)
        outer = asyncio.current_task()
        assert outer is not None
        async with asyncio.timeout(60):
            result = await s.stream(
                provider, StreamConfig(delivery="messages", inactivity_timeout=TIMEOUT)
            )
            await asyncio.sleep(1)  # would raise if a cancellation were left pending
        assert result.status == "timeout"
        assert outer.cancelling() == 0


# -- KeyboardInterrupt and SystemExit ----------------------------------------------------------


class Fatal(ScriptProvider):
    """The kit's scripted provider raising `error` (KeyboardInterrupt, SystemExit) `where`:
    at the start, in a read or in `aclose()`."""

    def __init__(self, error: type[BaseException], where: str) -> None:
        super().__init__([], name="fatal")
        self.error = error
        self.where = where
        self.probe = Probe()

    def start_stream(self, config: StreamConfig, context: StreamContext) -> AsyncIterator[object]:
        self.note_start()
        if self.where == "start":
            raise self.error
        probe, where, error = self.probe, self.where, self.error

        class It(Stream):
            async def __anext__(self) -> object:
                if where == "read" and not self.chunks:
                    raise error
                return await super().__anext__()

            async def aclose(self) -> None:
                probe.aclose_calls += 1
                if where == "aclose":
                    raise error

        return It([TextChunk("Hello\n")] + ([] if where == "read" else [CALL]), then_hang=False)

    def process_chunk(self, raw: object) -> ProcessedChunk:
        if self.where == "process" and raw == CALL:
            raise self.error
        return raw  # type: ignore[return-value]  # the script yields chunks

    def describe_error(self, error: ProviderError, locale: str) -> str | None:
        return None


@pytest.mark.parametrize("where", ["start", "read", "process", "aclose"])
@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
async def test_B1_keyboard_interrupt_and_system_exit_reach_the_caller_after_cleanup(
    error: type[BaseException], where: str
) -> None:
    """They ask the program to end: raised to the caller instead of a result, after the
    provider is closed and nothing is left (see "Rules chosen" in the orchestrator)."""
    async with stage() as s:
        before = other_tasks()
        provider = Fatal(error, where)
        outer = asyncio.current_task()
        assert outer is not None
        with pytest.raises(error):
            await s.stream(provider)
        assert outer.cancelling() == 0
        assert provider.probe.aclose_calls == (0 if where == "start" else 1)
        assert_clean(s, before)


# -- the provider's task ------------------------------------------------------------------------

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("REQUEST_ID", default="none")


async def test_the_provider_sees_the_callers_context_variables() -> None:
    """The provider runs in its own task, made with a copy of the caller's context: tracing
    and request ids set by the bot still reach the provider's code."""
    seen: list[str] = []

    def make(probe: Probe) -> AsyncIterator[object]:
        async def gen() -> AsyncIterator[object]:
            seen.append(REQUEST_ID.get())
            yield TextChunk("Hello")
            seen.append(REQUEST_ID.get())

        return gen()

    async with stage() as s:
        REQUEST_ID.set("turn-7")
        result = await s.stream(GenProvider(make))
        assert result.status == "completed"
        assert seen == ["turn-7", "turn-7"]


async def test_B4_a_request_pending_at_the_start_starts_no_provider_task() -> None:
    async with stage() as s:
        before = other_tasks()
        provider = GenProvider(propagates)
        s.orchestrator.request_stop(s.channel.id, "bob", "early")
        result = await s.stream(provider)
        assert result.status == "stopped_by_user"
        assert result.stop_context == "early"
        assert provider.starts == 0
        assert_clean(s, before)
