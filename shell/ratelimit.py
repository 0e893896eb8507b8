"""Discord's rate limits on cordstream's side: the pace of its requests, a 429 sent again, and a
caller's cancellation that must not wedge discord.py (SPEC F4, B11).

Pacing (F4)
-----------
Discord allows a bot about 50 requests per second over all routes (the global limit).
discord.py learns each route's bucket from the `X-RateLimit-*` headers and waits those out
before it meets a 429, but the global limit it only learns from a 429: every request already
on its way gets one too, and each 429 uses one of discord.py's five tries, so that many streams
at once lose whole answers to `HTTPException` 429. cordstream therefore paces its own requests
under a process-wide budget, shared by every stream of every `StreamOrchestrator`:
`Budget(requests, per)`, at most `requests` requests in any `per` seconds, by default
`DISCORD_GLOBAL` (50 per second). It is a sliding window: no window of `per` seconds, wherever
it starts, holds more, so Discord's own window (wherever it starts) holds no more either. The
budget is read at every request: `set_global_budget(budget)` changes it for the whole process
(None: no pacing at all, for a Discord without a global limit, such as the emulator without its
rate limits), and returns the previous one.

The budget is a property of the process (one bot token per process, as is usual); its
bookkeeping lives per event loop (`pacer()`), since a budget is counted on a loop's clock.
Requests wait their turn first in first out. A `Pacer` keeps one `Window` per budget; a request
may name more windows beside the global one (`acquire(*lanes)`), and goes out when all of them
have room, without overtaking an earlier request held by the same window.

The channel's budget (L2)
-------------------------
Live delivery edits a message about once a second, and Discord allows about 5 message
requests (creates and edits) per 5 s per channel (`DISCORD_CHANNEL`). Every live stream of the
process in one channel shares one lane (`channel_lane`): a stream asks for its turn
(`turn(channel_id)`) before each create, edit or embed, and the turns are given first in first
out, so two or three streams in a channel take turns fairly. The lane spaces its requests
evenly, `per / requests` apart plus `CHANNEL_MARGIN`, rather than letting 5 go at once and
then none for 5 s: a burst is what leaves a live answer frozen for seconds, and the margin
keeps Discord's window (opened by the first request it receives, a network hop later) from
ever seeing one request too many. `set_channel_budget(budget)` changes it for the process
(None: no channel pacing). Messages delivery does not use it (its sends keep the pace of E9).

What is paced: message and embed sends wait for their turn (`deliver`); a typing indicator is
cosmetic, so it goes out only when the budget has room at once (`Pacer.try_acquire`), and is
skipped otherwise, rather than showing late, after the text it announced. discord.py's own
retries and the bot's other requests are not paced here: keep the budget below Discord's limit
when the bot itself makes many requests.

A 429 sent again (F4)
---------------------
Pacing is the plan; a 429 can still come (the bot's other requests, another process with the
same token, a sub-limit). When discord.py gives up on a message or embed after its five tries
and the last answer was Discord's 429 (with `Via` and a JSON body, see
`cordstream.shell.delivery.retry_after`), Discord accepted nothing, so sending it again cannot
duplicate it: `deliver` waits the longer of Discord's `retry_after` and its own backoff
(`RETRY_DELAYS`: 1, 2, 4, 8, 16 s) and sends it again, under the budget, at most
`len(RETRY_DELAYS)` times. A Cloudflare 429 (no `Via`, a ban), a `retry_after` above
`MAX_RETRY_AFTER` and the last failure are given up: the stream ends as B13 says, as before.
The one request a stream has in flight is retried in place, so the order of its messages
holds.

A caller's cancellation during a global 429 (B11)
-------------------------------------------------
discord.py 2.7.1 closes its global lock (`HTTPClient._global_over`, an `asyncio.Event`) when a
request gets a global 429, sleeps `retry_after`, and opens it again, but not when that request
is cancelled during the sleep: every later request of that client then waits forever. Only
that one state is unsafe. A request waiting on the lock, on its bucket, in flight, or sleeping
off a route 429 or a 5xx can be cancelled at any moment without leaking anything; and while
the lock is open nothing can be left closed (a request still sleeping off an earlier global
429 was overtaken by the opening). So when the caller cancels, `cancel_requests` cancels the
stream's requests at once, and for a request that sleeps off a global 429 it also does what
discord.py would have done: a keeper task opens the lock the moment that sleep would have
ended (the sleep's own timer), unless something opened it earlier. Nothing the call started
is sent afterwards, the caller's cancellation goes through at once, and the client's other
requests go out when Discord's global wait is over, as they would have. The keepers run in
the background (`background_requests()`, `drain_background()`), at most `retry_after` long.

Which state a request is in is read from its coroutine chain (`cr_await`, down to discord.py's
`HTTPClient.request` and the `asyncio.sleep` it awaits: `is_global`, `retry_after`, the
sleep's timer), in `global_wait_end`. Where that cannot be read (another discord.py or Python
version), cordstream does not guess: while the lock is closed such a request is handed over
instead, to the background, and cancelled the moment the lock is open again (it may then send
what it was sending, which the stream no longer reports). Where the lock itself cannot be read
(`discord_global_gate`), the requests are handed over and left to finish on their own, which
cannot wedge anything. A channel without a discord.py HTTP client has no lock to leak:
its requests are cancelled at once. These two functions are the only places cordstream reads
discord.py's private state.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import math
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final, Literal, TypeVar

from returns.io import IOResultE

from cordstream.shell import delivery

T = TypeVar("T")

__all__ = [
    "CHANNEL_MARGIN",
    "DISCORD_CHANNEL",
    "DISCORD_GLOBAL",
    "MAX_RETRY_AFTER",
    "RETRY_DELAYS",
    "Budget",
    "Pacer",
    "Window",
    "background_requests",
    "cancel_requests",
    "channel_budget",
    "channel_lane",
    "channel_spacing",
    "deliver",
    "discord_global_gate",
    "drain_background",
    "global_budget",
    "global_wait_end",
    "pacer",
    "set_channel_budget",
    "set_global_budget",
    "turn",
]


@dataclass(frozen=True)
class Budget:
    """At most `requests` requests in any window of `per` seconds."""

    requests: int
    per: float

    def __post_init__(self) -> None:
        if isinstance(self.requests, bool) or not isinstance(self.requests, int):
            raise TypeError("Budget.requests must be an int")
        if self.requests < 1:
            raise ValueError("Budget.requests must be at least 1")
        if isinstance(self.per, bool) or not isinstance(self.per, int | float):
            raise TypeError("Budget.per must be a number of seconds")
        if not math.isfinite(self.per) or self.per <= 0:
            raise ValueError("Budget.per must be a positive number of seconds")


DISCORD_GLOBAL: Final = Budget(50, 1.0)
"""Discord's global limit: 50 requests per second for a bot, over all routes."""

DISCORD_CHANNEL: Final = Budget(5, 5.0)
"""Discord's per-channel limit on message creates and edits: about 5 per 5 s (L2)."""

CHANNEL_MARGIN: Final = 0.1
"""Seconds added between two message requests in one channel (see "The channel's budget")."""

RETRY_DELAYS: Final = (1.0, 2.0, 4.0, 8.0, 16.0)
"""The least wait before each new try of a send Discord answered 429 (one try per entry)."""

MAX_RETRY_AFTER: Final = 60.0
"""A 429 asking to wait longer than this (seconds) is not sent again."""

_budget: Budget | None = DISCORD_GLOBAL
_channel_budget: Budget | None = DISCORD_CHANNEL


def global_budget() -> Budget | None:
    """The process-wide budget of cordstream's Discord requests (None: not paced)."""
    return _budget


def set_global_budget(budget: Budget | None) -> Budget | None:
    """Pace every stream of the process under `budget` from now on (None: no pacing); returns
    the previous budget. Requests already waiting are judged by the new one."""
    global _budget
    previous, _budget = _budget, _checked(budget, "set_global_budget")
    _budgets_changed()
    return previous


def channel_budget() -> Budget | None:
    """The per-channel budget of live delivery's message requests (None: not paced)."""
    return _channel_budget


def set_channel_budget(budget: Budget | None) -> Budget | None:
    """Pace every live stream's message requests under `budget` per channel from now on (None:
    no channel pacing); returns the previous budget."""
    global _channel_budget
    previous, _channel_budget = _channel_budget, _checked(budget, "set_channel_budget")
    _budgets_changed()
    return previous


def _checked(budget: Budget | None, setter: str) -> Budget | None:
    """`budget`, once it is known to be a Budget or None (a TypeError naming `setter` if not)."""
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"{setter} takes a Budget or None")
    return budget


def _budgets_changed() -> None:
    """Every loop's pacer judges its waiting requests by the budgets as they are now."""
    for each in list(_pacers.values()):
        each.budget_changed()


def channel_spacing(budget: Budget) -> Budget:
    """The lane a channel's `budget` becomes: one request per `per / requests` seconds, plus
    the margin (see "The channel's budget")."""
    return Budget(1, budget.per / budget.requests + CHANNEL_MARGIN)


# -- pacing --------------------------------------------------------------------------------------


class Window:
    """The latest releases counted against one budget (a sliding window)."""

    __slots__ = ("releases",)

    def __init__(self) -> None:
        self.releases: deque[float] = deque()

    def ready_at(self, budget: Budget, now: float) -> float:
        """The earliest moment from `now` on when one more request fits in `budget`."""
        releases = self.releases
        while len(releases) > budget.requests:  # the budget shrank
            releases.popleft()
        if len(releases) < budget.requests:
            return now
        return max(now, releases[0] + budget.per)

    def take(self, budget: Budget, now: float) -> None:
        self.releases.append(now)
        while len(self.releases) > budget.requests:
            self.releases.popleft()


Lane = tuple[Budget, Window]
"""A budget and the window counting against it."""


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[None]
    lanes: tuple[Lane, ...]
    with_global: bool = True


class Pacer:
    """The turn of cordstream's requests on one event loop: first in first out, under the
    global budget and any other lanes a request names."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # the registry of pacers must not keep loops alive
        self.window = Window()  # the global budget's
        self.channels: dict[int, Window] = {}  # each channel's, for live delivery (L2)
        self.waiting: deque[_Waiter] = deque()
        self.wakeup: asyncio.TimerHandle | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop()
        if loop is None:  # pragma: no cover - a pacer is used on its own, running loop
            raise RuntimeError("the pacer's event loop is gone")
        return loop

    def lanes(self, extra: tuple[Lane, ...], with_global: bool = True) -> tuple[Lane, ...]:
        budget = _budget
        return extra if budget is None or not with_global else ((budget, self.window), *extra)

    def try_acquire(self, *extra: Lane, with_global: bool = True) -> bool:
        """Take a turn if one is free now and nobody is waiting; never waits."""
        if self.waiting:
            return False
        now = self.loop.time()
        lanes = self.lanes(extra, with_global)
        if any(window.ready_at(budget, now) > now for budget, window in lanes):
            return False
        for budget, window in lanes:
            window.take(budget, now)
        return True

    async def acquire(self, *extra: Lane, with_global: bool = True) -> None:
        """Wait for this request's turn: every lane has room, and no earlier request waits on
        a full lane this one shares. `with_global=False`: the extra lanes only."""
        if self.try_acquire(*extra, with_global=with_global):
            return
        future: asyncio.Future[None] = self.loop.create_future()
        self.waiting.append(_Waiter(future, extra, with_global))
        self.grant()
        await future  # cancelled: the waiter is skipped (a turn given just before is spent)

    def budget_changed(self) -> None:
        """The budget changed: judge the waiting requests by the new one."""
        loop = self._loop()
        if self.waiting and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.grant)

    def grant(self) -> None:
        """Give the turns due now, in order, and arm the timer for the next one."""
        if self.wakeup is not None:
            self.wakeup.cancel()
            self.wakeup = None
        now = self.loop.time()
        earliest = math.inf
        full: set[int] = set()  # windows found without room in this round
        kept: list[_Waiter] = []  # held by a full window, in order
        global_full = False
        waiting = self.waiting
        while waiting:
            waiter = waiting.popleft()
            if waiter.future.done():
                continue  # cancelled while waiting
            lanes = self.lanes(waiter.lanes, waiter.with_global)
            blocked = False
            for budget, window in lanes:
                if id(window) not in full:
                    ready = window.ready_at(budget, now)
                    if ready <= now:
                        continue
                    full.add(id(window))
                    earliest = min(earliest, ready)
                blocked = True
                global_full = window is self.window
                break
            if not blocked:
                for budget, window in lanes:
                    window.take(budget, now)
                waiter.future.set_result(None)
                continue
            kept.append(waiter)
            if global_full:  # nobody behind it can go either
                break
        waiting.extendleft(reversed(kept))
        if waiting and earliest < math.inf:
            self.wakeup = self.loop.call_at(earliest, self.grant)


_pacers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer] = weakref.WeakKeyDictionary()


def pacer() -> Pacer:
    """The running loop's pacer."""
    loop = asyncio.get_running_loop()
    found = _pacers.get(loop)
    if found is None:
        found = _pacers[loop] = Pacer(loop)
    return found


def channel_lane(channel_id: int) -> Lane | None:
    """The lane of `channel_id` under the channel budget, or None when channels are not paced."""
    budget = _channel_budget
    if budget is None:
        return None
    windows = pacer().channels
    window = windows.get(channel_id)
    if window is None:
        window = windows[channel_id] = Window()
    return channel_spacing(budget), window


async def turn(channel_id: int) -> None:
    """Wait for a live stream's turn to make a message request in `channel_id` (L2). The
    global budget is not taken here: the request itself goes through `deliver`."""
    lane = channel_lane(channel_id)
    if lane is not None:
        await pacer().acquire(lane, with_global=False)


async def deliver(send: Callable[[], Awaitable[IOResultE[T]]]) -> IOResultE[T]:
    """Send a message or an embed in its turn; after a 429 from Discord, again (see the module
    docstring). Returns the last try's result."""
    turns = pacer()
    for delay in RETRY_DELAYS:
        await turns.acquire()
        result = await send()
        wait = delivery.retry_after(result)
        if wait is None or wait > MAX_RETRY_AFTER:
            return result
        await asyncio.sleep(max(wait, delay))
    await turns.acquire()
    return await send()


# -- cancelling requests (B11) -------------------------------------------------------------------

NoClient = Literal["no client"]
Unknown = Literal["unknown"]


def discord_global_gate(channel: object) -> asyncio.Event | NoClient | Unknown:
    """discord.py's global rate-limit lock for the client behind `channel`: an `asyncio.Event`,
    set while no request of the client sleeps off a global 429. `"no client"` when `channel`
    has no discord.py HTTP client (nothing to leak); `"unknown"` when it has one whose lock this
    cannot read (another discord.py version).

    Reads discord.py's private state (`Messageable._state.http`, `HTTPClient._global_over`,
    discord.py 2.x).
    """
    state = getattr(channel, "_state", None)
    http = getattr(state, "http", None)
    if http is None:
        return "no client"
    gate = getattr(http, "_global_over", None)
    return gate if isinstance(gate, asyncio.Event) else "unknown"


_SLEEP_CODE: Final = asyncio.sleep.__code__


def _frames(task: asyncio.Task[Any]) -> list[FrameType]:
    """The frames of the coroutines `task` is suspended in, outermost first. An awaitable that
    hides the coroutine it drives (`coro.__await__()`'s wrapper, as `returns` awaits) is looked
    through with `gc.get_referents`."""
    frames: list[FrameType] = []
    awaited: object = task.get_coro()
    while awaited is not None and len(frames) < 200:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if not isinstance(frame, FrameType):
            inner = [r for r in gc.get_referents(awaited) if inspect.iscoroutine(r)]
            if len(inner) != 1:
                break
            awaited = inner[0]
            continue
        frames.append(frame)
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return frames


def global_wait_end(task: asyncio.Task[Any]) -> float | Unknown | None:
    """When the global 429 wait that `task` sleeps off in discord.py ends (a loop time); None
    when it sleeps off none (cancelling it leaks nothing); `"unknown"` when that cannot be
    told (another discord.py or Python version).

    Reads discord.py 2.x's `HTTPClient.request` locals (`is_global`, `retry_after`) and
    `asyncio.sleep`'s (`delay`, its timer `h`).
    """
    frames = _frames(task)
    if not frames or frames[-1].f_code is not _SLEEP_CODE:
        return None  # not sleeping: waiting on a lock or a bucket, in flight, or done
    request = next(
        (
            f
            for f in reversed(frames)
            if f.f_code.co_name == "request" and f.f_globals.get("__name__") == "discord.http"
        ),
        None,
    )
    if request is None:
        return None  # a sleep outside discord.py's requests: not its lock's
    if not {"is_global", "retry_after"} <= set(request.f_code.co_varnames):
        return "unknown"
    names = request.f_locals
    sleep = frames[-1].f_locals
    if names.get("is_global") is not True or sleep.get("delay") != names.get("retry_after"):
        return None  # a route 429's sleep, or a 5xx backoff
    timer = sleep.get("h")
    return timer.when() if isinstance(timer, asyncio.TimerHandle) else "unknown"


_background: set[asyncio.Task[Any]] = set()


def _keep(task: asyncio.Task[Any]) -> None:
    _background.add(task)
    task.add_done_callback(_background.discard)


def background_requests() -> int:
    """How many tasks cancelled streams left in the background (lock keepers, and requests
    handed over) still run, in the whole process."""
    return sum(1 for task in _background if not task.done())


async def drain_background() -> None:
    """Wait until every task cancelled streams left in the background on this loop has ended."""
    loop = asyncio.get_running_loop()
    while pending := {t for t in _background if t.get_loop() is loop and not t.done()}:
        await asyncio.wait(pending)


def cancel_requests(channel: object, tasks: Iterable[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Cancel a cancelled stream's requests without wedging discord.py (see the module
    docstring). Returns the requests cancelled now, for the caller to await; the others are
    handed over to the background."""
    live = {task for task in tasks if not task.done()}
    if not live:
        return set()
    gate = discord_global_gate(channel)
    if gate == "no client" or (isinstance(gate, asyncio.Event) and gate.is_set()):
        for task in live:
            task.cancel()
        return live
    loop = next(iter(live)).get_loop()
    if not isinstance(gate, asyncio.Event):
        for task in live:
            _keep(task)  # cannot tell: left to finish on their own, which wedges nothing
        return set()
    cancelled: set[asyncio.Task[Any]] = set()
    handed: set[asyncio.Task[Any]] = set()
    for task in live:
        end = global_wait_end(task)
        if end == "unknown":
            handed.add(task)
            continue
        if end is not None:
            _keep(loop.create_task(_reopen(gate, end)))
        task.cancel()
        cancelled.add(task)
    if handed:
        for task in handed:
            _keep(task)
        _keep(loop.create_task(_reap(handed, gate)))
    return cancelled


async def _reopen(gate: asyncio.Event, at: float) -> None:
    """Open discord.py's global lock at `at`, as the cancelled request sleeping until then
    would have (unless something opened it before)."""
    loop = asyncio.get_running_loop()
    while not gate.is_set() and (left := at - loop.time()) > 0:
        opened = asyncio.ensure_future(gate.wait())
        try:
            await asyncio.wait({opened}, timeout=left)
        finally:
            opened.cancel()
    gate.set()


async def _reap(tasks: set[asyncio.Task[Any]], gate: asyncio.Event) -> None:
    """Cancel `tasks` the moment `gate` is open (never while it is closed)."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        if gate.is_set():
            for task in pending:
                task.cancel()  # no await between the check and the cancel
            break
        opened = asyncio.ensure_future(gate.wait())
        try:
            await asyncio.wait({opened, *pending}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
        pending = {task for task in pending if not task.done()}
    if pending:
        await asyncio.wait(pending)
