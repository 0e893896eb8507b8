"""The pace of cordstream's Discord requests, decided without a clock (SPEC F4, L2).

What it is: the decisions of pacing, as objects that are told the time. A `Window` is the
history of one budget's grants; asked `next_send_time(budget, now)`, it answers the earliest
moment from `now` on when one more request fits, and `update_after_send(budget, now)` records
one that went. `Turns` queues the requests of one event loop and gives them their turns first
in first out over several windows (the global one, and a lane per channel): `grant(now, ...)`
says which requests go now and when to ask again (`Grant.wake_at`). `after_try` decides what
follows a try Discord answered: send again after how long, or keep the result.

The one idea: every answer is a function of a window's history and `now`. The shell owns the
clock: it sleeps until `wake_at`, calls `grant` again, and carries the answer out. So a test
walks the pace step by step with plain numbers, and a change of policy (how a lane spends its
window) stays inside `Window.next_send_time`.

A budget is `Budget(requests, per)`: at most `requests` grants in any `per` seconds, a sliding
window (wherever a window of `per` seconds starts, it holds no more). A channel's budget is
spent evenly (`channel_spacing`), one request per `per / requests` seconds plus
`CHANNEL_MARGIN`.

What it never does: sleep, read a clock, touch a future or a task, or know what a request
sends. Which budgets hold for the process is the shell's (`cordstream.shell.budgets`); the
rules this module carries out are F4 and L2 in `docs/contract.md`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeAlias, TypeVar

K = TypeVar("K")


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
"""Seconds added between two message requests in one channel (L2)."""

RETRY_DELAYS: Final = (1.0, 2.0, 4.0, 8.0, 16.0)
"""The least wait before each new try of a send Discord answered 429 (one try per entry)."""

MAX_RETRY_AFTER: Final = 60.0
"""A 429 asking to wait longer than this (seconds) is not sent again."""


def channel_spacing(budget: Budget) -> Budget:
    """The lane a channel's `budget` becomes: one request per `per / requests` seconds, plus
    `CHANNEL_MARGIN`."""
    return Budget(1, budget.per / budget.requests + CHANNEL_MARGIN)


# -- one window ----------------------------------------------------------------------------------


class Window:
    """The latest grants counted against one budget (a sliding window)."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent: deque[float] = deque()  # at most as many as the budget counts, oldest first

    def next_send_time(self, budget: Budget, now: float) -> float:
        """The earliest moment from `now` on when one more request fits in `budget`: once the
        `requests`-th latest grant has left the window of `per` seconds."""
        sent = self.sent
        if len(sent) < budget.requests:
            return now
        return max(now, sent[-budget.requests] + budget.per)

    def update_after_send(self, budget: Budget, now: float) -> None:
        """One request went at `now`; only the latest `budget.requests` grants are kept."""
        sent = self.sent
        sent.append(now)
        while len(sent) > budget.requests:
            sent.popleft()


Lane: TypeAlias = tuple[Budget, Window]
"""A budget and the window counting against it."""


# -- the turns of one loop -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """What one request waits for: the `lanes` it names, and the global budget's window unless
    `with_global` is False."""

    lanes: tuple[Lane, ...] = ()
    with_global: bool = True


@dataclass(frozen=True, slots=True)
class Grant(Generic[K]):
    """One round of `Turns.grant`: the requests that go now (in order, already counted), and
    when to ask again (None: nobody waits)."""

    granted: tuple[K, ...]
    wake_at: float | None


class Turns(Generic[K]):
    """The requests of one event loop, given their turns first in first out. Each waiting
    request is a key of the shell's (`K`, its handle) and the `Request` it made."""

    __slots__ = ("channels", "waiting", "window")

    def __init__(self) -> None:
        self.window = Window()  # the global budget's
        self.channels: dict[int, Window] = {}  # each channel's lane, for live delivery (L2)
        self.waiting: deque[tuple[K, Request]] = deque()

    def channel(self, channel_id: int) -> Window:
        """The window of `channel_id`'s lane (a new one the first time)."""
        window = self.channels.get(channel_id)
        if window is None:
            window = self.channels[channel_id] = Window()
        return window

    def lanes(self, request: Request, budget: Budget | None) -> tuple[Lane, ...]:
        """The lanes `request` waits on, the global one (under `budget`, None: not paced) first."""
        if budget is None or not request.with_global:
            return request.lanes
        return ((budget, self.window), *request.lanes)

    def try_take(self, request: Request, budget: Budget | None, now: float) -> bool:
        """Take a turn for `request` if every lane has room at `now` and nobody waits (a waiting
        request is never overtaken); False takes nothing."""
        if self.waiting:
            return False
        lanes = self.lanes(request, budget)
        if any(window.next_send_time(lane, now) > now for lane, window in lanes):
            return False
        for lane, window in lanes:
            window.update_after_send(lane, now)
        return True

    def join(self, key: K, request: Request) -> None:
        """`key` waits for its turn, behind everyone already waiting."""
        self.waiting.append((key, request))

    def grant(self, now: float, budget: Budget | None, gone: Callable[[K], bool]) -> Grant[K]:
        """Give the turns due at `now`, in order, under the global `budget` as it is now.

        A request goes when every lane it names has room; one held by a full window holds
        every later request on that window (first in first out), and a full global window
        holds everyone behind it. A request whose key is `gone` (its caller left) is dropped
        without taking a turn."""
        earliest = math.inf
        full: set[int] = set()  # windows found without room in this round
        kept: list[tuple[K, Request]] = []  # held by a full window, in order
        granted: list[K] = []
        waiting = self.waiting
        while waiting:
            key, request = waiting.popleft()
            if gone(key):
                continue
            lanes = self.lanes(request, budget)
            held_by: Window | None = None
            for lane, window in lanes:
                if id(window) not in full:
                    ready = window.next_send_time(lane, now)
                    if ready <= now:
                        continue
                    full.add(id(window))
                    earliest = min(earliest, ready)
                held_by = window
                break
            if held_by is None:
                for lane, window in lanes:
                    window.update_after_send(lane, now)
                granted.append(key)
                continue
            kept.append((key, request))
            if held_by is self.window:  # nobody behind it can go either
                break
        waiting.extendleft(reversed(kept))
        wake_at = earliest if waiting and earliest < math.inf else None
        return Grant(tuple(granted), wake_at)


# -- a try Discord answered 429 ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendAgain:
    """Send the request again `after` seconds from now."""

    after: float


@dataclass(frozen=True, slots=True)
class KeepResult:
    """The try's result is the request's result."""

    reason: Literal["not a 429", "wait too long", "tries spent"]


def after_try(retry_after: float | None, tries: int) -> SendAgain | KeepResult:
    """What follows the `tries`-th try (1 for the first) of a send whose result asked to wait
    `retry_after` seconds (None: it was not Discord's 429). Each new try waits the longer of
    Discord's `retry_after` and its own `RETRY_DELAYS` entry; there is one try per entry."""
    if retry_after is None:
        return KeepResult("not a 429")
    if tries > len(RETRY_DELAYS):
        return KeepResult("tries spent")
    if retry_after > MAX_RETRY_AFTER:
        return KeepResult("wait too long")
    return SendAgain(max(retry_after, RETRY_DELAYS[tries - 1]))
