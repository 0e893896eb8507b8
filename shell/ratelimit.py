"""Waiting for a Discord request's turn, and sending again after a 429 (SPEC F4, L2).

What it is: the event-loop side of `cordstream.domain.pacing`. Each loop has one `Pacer`
(`pacer()`); a request asks it for a turn (`acquire`, or `try_acquire` for one that is skipped
rather than late, such as a typing indicator), waits on a future, and goes when the pacer
grants it. `turn(channel_id, prompt=...)` waits for a live stream's turn in its channel's
lane, and `answered(channel_id, route, granted_at)` says when Discord answered the request it gave;
`deliver(send)` sends a message or an embed in its turn and, after Discord's 429, again.

The one idea: the pacer decides nothing. It asks `Turns.grant(now, ...)` which requests go and
when to ask again, resolves their futures, and arms one timer for that moment; a changed budget
(`cordstream.shell.budgets`) re-runs the same call at once. `deliver` likewise asks
`pacing.after_try` whether and when to send again, and only sleeps that long.

What it never does: count requests or choose a delay itself, pace discord.py's own retries or
the bot's other requests, or read discord.py's state (the one workaround that does is
`cordstream.shell.discordpy_global_lock`, re-exported here with the budgets' settings so every
pacing name can still be imported from this module). The rules are F4 and L2 in
`docs/contract.md`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeAlias, TypeVar

from returns.io import IOResultE

from cordstream.domain import pacing
from cordstream.domain.effects import Route
from cordstream.domain.pacing import (
    CHANNEL_MARGIN,
    DISCORD_CHANNEL,
    DISCORD_GLOBAL,
    MAX_RETRY_AFTER,
    RETRY_DELAYS,
    Budget,
    ChannelWindow,
    Lane,
    Request,
    Window,
    spacing,
)
from cordstream.shell import budgets, discord_api, telemetry
from cordstream.shell.budgets import (
    channel_budget,
    global_budget,
    set_channel_budget,
    set_global_budget,
)
from cordstream.shell.discordpy_global_lock import (
    background_requests,
    cancel_requests,
    discord_global_gate,
    drain_background,
    global_wait_end,
)

T = TypeVar("T")

__all__ = [
    "CHANNEL_MARGIN",
    "DISCORD_CHANNEL",
    "DISCORD_GLOBAL",
    "MAX_RETRY_AFTER",
    "RETRY_DELAYS",
    "Budget",
    "ChannelWindow",
    "Lane",
    "Pacer",
    "Window",
    "answered",
    "background_requests",
    "cancel_requests",
    "channel_budget",
    "channel_lane",
    "deliver",
    "discord_global_gate",
    "drain_background",
    "give_back",
    "global_budget",
    "global_wait_end",
    "pacer",
    "set_channel_budget",
    "set_global_budget",
    "spacing",
    "turn",
    "typing_turn",
]

Ticket: TypeAlias = asyncio.Future[float]
"""A waiting request's handle: resolved with the time its turn came, cancelled when its caller
leaves."""


def _gone(ticket: Ticket) -> bool:
    return ticket.done()


class Pacer:
    """The turns of cordstream's requests on one event loop (`pacing.Turns`, on its clock)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # the registry of pacers must not keep loops alive
        self.turns: pacing.Turns[Ticket] = pacing.Turns()
        self.wakeup: asyncio.TimerHandle | None = None
        budgets.watch(self)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop()
        if loop is None:  # pragma: no cover - a pacer is used on its own, running loop
            raise RuntimeError("the pacer's event loop is gone")
        return loop

    @property
    def window(self) -> Window:
        """The global budget's window."""
        return self.turns.window

    @property
    def waiting(self) -> deque[tuple[Ticket, Request]]:
        """The requests waiting for their turn, in order."""
        return self.turns.waiting

    def try_acquire(self, *extra: Lane, with_global: bool = True) -> bool:
        """Take a turn if one is free now and nobody is waiting; never waits."""
        request = Request(extra, with_global)
        return self.turns.try_take(request, budgets.global_budget(), self.loop.time())

    async def acquire(
        self,
        *extra: Lane,
        with_global: bool = True,
        prompt: bool = True,
        route: Route = "send",
    ) -> float:
        """Wait for this request's turn: every lane has room, and no earlier request waits on
        a lane this one shares (`pacing.Turns.grant`). `with_global=False`: the extra lanes
        only; `prompt` and `route`: what the request is in a channel's lane
        (`pacing.ChannelWindow`). Returns when the turn was given, on the loop's clock."""
        request = Request(extra, with_global, prompt, route)
        now = self.loop.time()
        if self.turns.try_take(request, budgets.global_budget(), now):
            return now
        ticket: Ticket = self.loop.create_future()
        self.turns.join(ticket, request)
        self.grant()
        return await ticket  # cancelled: the request is dropped (a turn given just before is spent)

    def budget_changed(self) -> None:
        """A budget changed: judge the waiting requests by the new one."""
        loop = self._loop()
        if self.turns.waiting and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.grant)

    def grant(self) -> None:
        """Give the turns due now, and arm the timer for the next ones."""
        if self.wakeup is not None:
            self.wakeup.cancel()
            self.wakeup = None
        loop = self.loop
        now = loop.time()
        answer = self.turns.grant(now, budgets.global_budget(), _gone)
        for ticket in answer.granted:
            ticket.set_result(now)
        if answer.wake_at is not None:
            self.wakeup = loop.call_at(answer.wake_at, self.grant)


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
    budget = budgets.channel_budget()
    if budget is None:
        return None
    return budget, pacer().turns.channel(channel_id)


async def turn(channel_id: int, *, prompt: bool, route: Route) -> float | None:
    """Wait for a live stream's turn to make a message request on `route` in `channel_id`
    (L2), prompt or spaced (`pacing.ChannelWindow`); returns when it was given (None: channels
    are not paced). The global budget is not taken here: the request goes through `deliver`."""
    lane = channel_lane(channel_id)
    if lane is None:
        return None
    turns = pacer()
    asked_at = turns.loop.time()
    granted_at = await turns.acquire(lane, with_global=False, prompt=prompt, route=route)
    given_at = granted_at
    shared = budgets.shared()
    if shared is not None:  # N2: the bot's other processes spend this channel's budget too
        await shared.channel_turn(channel_id, route, prompt=prompt)
        given_at = turns.loop.time()
    watch = telemetry.current()
    if watch is not None:
        watch.waited_turn(given_at - asked_at)
    return granted_at


async def typing_turn(channel_id: int) -> bool:
    """Whether a typing indicator in `channel_id` fits in the budgets now; it never waits."""
    if not pacer().try_acquire():
        return False
    shared = budgets.shared()
    return shared is None or await shared.typing_turn(channel_id)


def give_back(channel_id: int, route: Route, granted_at: float) -> None:
    """The turn given at `granted_at` on `route` in `channel_id` made no request after all
    (`pacing.Bucket.give_back`)."""
    window = pacer().turns.channels.get(channel_id)
    if window is not None:
        window.buckets[route].give_back(granted_at)


def answered(channel_id: int, route: Route, granted_at: float) -> None:
    """Discord answered, now, the request on `route` of the turn given at `granted_at` in
    `channel_id` (`pacing.Bucket.answered`)."""
    window = pacer().turns.channels.get(channel_id)
    if window is not None:
        window.buckets[route].answered(granted_at, pacer().loop.time())


async def deliver(
    send: Callable[[], Awaitable[IOResultE[T]]], route: telemetry.Route = "send"
) -> IOResultE[T]:
    """Send a message or an embed (`route`) in its turn; after Discord's 429, again, as
    `pacing.after_try` decides (F4). Returns the last try's result. Each try is reported to
    the stream's watch (`cordstream.shell.telemetry`), when there is one."""
    turns = pacer()
    watch = telemetry.current()
    clock = turns.loop.time
    tries = 0
    while True:
        asked_at = clock()
        granted_at = await turns.acquire()
        shared = budgets.shared()
        if shared is not None:  # N2: and in the bot's budget, shared with its other processes
            await shared.request_turn()
            granted_at = clock()
        result = await send()
        tries += 1
        decided = pacing.after_try(discord_api.retry_after(result), tries)
        if watch is not None:
            again = isinstance(decided, pacing.SendAgain)
            watch.request(route, granted_at - asked_at, clock() - granted_at, result, retry=again)
        match decided:
            case pacing.SendAgain(after):
                await asyncio.sleep(after)
            case pacing.KeepResult():
                return result
