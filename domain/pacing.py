"""The pace of cordstream's Discord requests, decided without a clock (SPEC F4, L2).

What it is: the decisions of pacing, as objects that are told the time. A `Window` is the
history of one budget's grants; asked `next_send_time(budget, now)`, it answers the earliest
moment from `now` on when one more request fits, and `update_after_send(budget, now)` records
one that went. A `ChannelWindow` answers the same for a channel's message requests (L2), as
Discord's own bucket counts them. `Turns` queues the requests of one event loop and gives them
their turns first in first out over several windows (the global one, and a lane per channel):
`grant(now, ...)` says which requests go now and when to ask again (`Grant.wake_at`).
`after_try` decides what follows a try Discord answered: send again after how long, or keep
the result.

The one idea: every answer is a function of a window's history and `now`. The shell owns the
clock: it sleeps until `wake_at`, calls `grant` again, and carries the answer out. So a test
walks the pace step by step with plain numbers, and a change of policy (how a lane spends its
window) stays inside the windows' `next_send_time`.

A budget is `Budget(requests, per)`. The global one is a sliding window: wherever a window of
`per` seconds starts, it holds no more than `requests`. A channel's lane (`ChannelWindow`)
holds Discord's buckets for the channel, one per route (message creates, message edits), each
a fixed window (`Bucket`): it opens at the first request after the last one reset, holds
`requests`, and resets `per` seconds later. Live delivery spends them whole (L2): a *spaced*
request (one that shows text still growing) goes at most once per `spacing(budget)` seconds
in the channel, so text gathers between two edits and the channel never waits much longer
than that for new text; a *prompt* one (a message's final content, anything once the model
ended) goes as soon as its bucket has room; and when a full bucket resets, the request it
held goes at once.

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

from cordstream.domain.effects import Route

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

CHANNEL_MARGIN: Final = 0.05
"""Seconds added to the even share of a channel's window between two spaced requests (L2)."""

UNANSWERED_MARGIN: Final = 1.0
"""Seconds a channel's window is assumed to last longer while Discord has not answered its
first request (Discord opened it on receiving that request, at most when it answered)."""

RETRY_DELAYS: Final = (1.0, 2.0, 4.0, 8.0, 16.0)
"""The least wait before each new try of a send Discord answered 429 (one try per entry)."""

MAX_RETRY_AFTER: Final = 60.0
"""A 429 asking to wait longer than this (seconds) is not sent again."""


def spacing(budget: Budget) -> float:
    """The least time between two spaced requests in a channel under `budget`: its even share,
    `per / requests` seconds, plus `CHANNEL_MARGIN`."""
    return budget.per / budget.requests + CHANNEL_MARGIN


# -- one window ----------------------------------------------------------------------------------


class Window:
    """The latest grants counted against one budget (a sliding window)."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent: deque[float] = deque()  # at most as many as the budget counts, oldest first

    def next_send_time(self, budget: Budget, now: float, request: Request | None = None) -> float:
        """The earliest moment from `now` on when one more request fits in `budget`: once the
        `requests`-th latest grant has left the window of `per` seconds (any request)."""
        sent = self.sent
        if len(sent) < budget.requests:
            return now
        return max(now, sent[-budget.requests] + budget.per)

    def update_after_send(self, budget: Budget, now: float, request: Request | None = None) -> None:
        """One request went at `now`; only the latest `budget.requests` grants are kept."""
        sent = self.sent
        sent.append(now)
        while len(sent) > budget.requests:
            sent.popleft()


class Bucket:
    """One of Discord's buckets for a channel's message requests, as cordstream's requests
    fill it: a fixed window (see the module docstring).

    Discord opens the window when it receives its first request: after cordstream granted it
    (`opened`) and before Discord answered it (`answered_at`). So the window resets somewhere
    between `opened + per` and `answered_at + per` (until the answer comes, `opened` plus
    `UNANSWERED_MARGIN` stands for it); no request is granted in between, where it could land
    in either window. So no request of cordstream's meets a full bucket (L2)."""

    __slots__ = ("answered_at", "grants", "opened")

    def __init__(self) -> None:
        self.opened = -math.inf  # the current window's first grant
        self.answered_at: float | None = None  # Discord's answer to it (None: not yet)
        self.grants: list[float] = []  # the grants counted in it, in order

    @property
    def count(self) -> int:
        """How many requests the current window counts."""
        return len(self.grants)

    def resets_at(self, budget: Budget) -> float:
        """When the current window has reset at Discord, at the latest."""
        opened = self.opened + UNANSWERED_MARGIN if self.answered_at is None else self.answered_at
        return opened + budget.per

    def ready(self, budget: Budget, at: float) -> float:
        """The earliest moment from `at` on when one more request fits: at once while the
        window has room and has surely not reset; when it has surely reset otherwise."""
        resets = self.resets_at(budget)
        if at < resets and (self.count >= budget.requests or at >= self.opened + budget.per):
            return resets
        return at

    def take(self, budget: Budget, now: float) -> None:
        """One request went at `now` (the first one after a reset opens a new window)."""
        if now >= self.resets_at(budget):
            self.opened, self.answered_at, self.grants = now, None, []
        self.grants.append(now)

    def answered(self, granted_at: float, now: float) -> None:
        """Discord answered at `now` the request granted at `granted_at`: if it opened the
        window, the window reset at `now + per` at the latest."""
        if self.answered_at is None and granted_at == self.opened:
            self.answered_at = now

    def give_back(self, granted_at: float) -> None:
        """The request granted at `granted_at` was not made after all: Discord never counted
        it. If it opened the window, Discord's window opens with the next one."""
        if granted_at not in self.grants:
            return  # an earlier window's
        self.grants.remove(granted_at)
        if granted_at == self.opened and self.answered_at is None:
            self.opened = self.grants[0] if self.grants else -math.inf


class ChannelWindow:
    """A channel's lane for live delivery (L2): Discord's bucket for each route (message
    creates, message edits) and when the last spaced request went."""

    __slots__ = ("buckets", "spaced_at")

    def __init__(self) -> None:
        self.buckets: dict[Route, Bucket] = {"send": Bucket(), "edit": Bucket()}
        self.spaced_at = -math.inf  # the latest spaced request's grant

    def next_send_time(self, budget: Budget, now: float, request: Request) -> float:
        """The earliest moment from `now` on when `request` may go: when its route's bucket
        has reset if it is full, whatever its kind (so a request held by a full bucket goes
        the moment it resets); else at once if it is prompt, and `spacing(budget)` after the
        last spaced one if it is spaced; never while the bucket may or may not have reset
        (`Bucket.ready`)."""
        bucket = self.buckets[request.route]
        if bucket.count >= budget.requests:
            return max(now, bucket.resets_at(budget))
        if request.prompt:
            return bucket.ready(budget, now)
        return bucket.ready(budget, max(now, self.spaced_at + spacing(budget)))

    def update_after_send(self, budget: Budget, now: float, request: Request) -> None:
        """`request` went at `now`."""
        self.buckets[request.route].take(budget, now)
        if not request.prompt:
            self.spaced_at = now


Lane: TypeAlias = tuple[Budget, Window | ChannelWindow]
"""A budget and the window counting against it."""


# -- the turns of one loop -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """What one request waits for: the `lanes` it names, and the global budget's window unless
    `with_global` is False; whether it is prompt or spaced (the module docstring), and the
    route whose bucket it counts in."""

    lanes: tuple[Lane, ...] = ()
    with_global: bool = True
    prompt: bool = True  # False: a spaced request in its channel's lane (`ChannelWindow`)
    route: Route = "send"  # the bucket it counts in, in its channel's lane


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
        self.channels: dict[int, ChannelWindow] = {}  # each channel's lane, for live delivery
        self.waiting: deque[tuple[K, Request]] = deque()

    def channel(self, channel_id: int) -> ChannelWindow:
        """The window of `channel_id`'s lane (a new one the first time)."""
        window = self.channels.get(channel_id)
        if window is None:
            window = self.channels[channel_id] = ChannelWindow()
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
        if any(window.next_send_time(lane, now, request) > now for lane, window in lanes):
            return False
        for lane, window in lanes:
            window.update_after_send(lane, now, request)
        return True

    def join(self, key: K, request: Request) -> None:
        """`key` waits for its turn, behind everyone already waiting."""
        self.waiting.append((key, request))

    def grant(self, now: float, budget: Budget | None, gone: Callable[[K], bool]) -> Grant[K]:
        """Give the turns due at `now`, in order, under the global `budget` as it is now.

        A request goes when every lane it names has room; one held by a window holds every
        later request on that window (first in first out), except that a spaced one does not
        hold a prompt one; and a full global window holds everyone behind it. A request whose
        key is `gone` (its caller left) is dropped without taking a turn."""
        earliest = math.inf
        held: set[tuple[int, Route, bool]] = set()  # (window, route, prompt) without room
        kept: list[tuple[K, Request]] = []  # held by a window, in order
        granted: list[K] = []
        waiting = self.waiting
        while waiting:
            key, request = waiting.popleft()
            if gone(key):
                continue
            lanes, route, prompt = self.lanes(request, budget), request.route, request.prompt
            held_by: Window | ChannelWindow | None = None
            for lane, window in lanes:
                if (id(window), route, prompt) not in held:
                    ready = window.next_send_time(lane, now, request)
                    if ready <= now:
                        continue
                    held.update({(id(window), route, False), (id(window), route, prompt)})
                    earliest = min(earliest, ready)
                held_by = window
                break
            if held_by is None:
                for lane, window in lanes:
                    window.update_after_send(lane, now, request)
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
