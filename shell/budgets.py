"""The process's two budgets of Discord requests (SPEC F4, L2).

What it is: two settings of the whole process, one bot token per process as is usual. The
global budget (`set_global_budget`, by default `DISCORD_GLOBAL`) counts every message and
embed send of every stream; the channel budget (`set_channel_budget`, by default
`DISCORD_CHANNEL`) counts each channel's live message requests. None turns that pacing off
(for a Discord without the limit, such as the emulator without its rate limits).

The one idea: a budget is read at every decision, never copied, and a change wakes every
pacer that watches (`watch`), so requests already waiting are judged by the new budget at once.

With several processes of one bot, `share` adds the budgets they spend together (a
`cordstream.shell.redis_budgets.RedisBudgets`, registered while it is open): a request then
takes a turn there too (`cordstream.shell.ratelimit`).

What it never does: count requests or wait. The counting is `cordstream.domain.pacing`'s, the
waiting `cordstream.shell.ratelimit`'s; this module only holds the two values.
"""

from __future__ import annotations

import weakref
from typing import Protocol

from cordstream.domain.effects import Route
from cordstream.domain.pacing import DISCORD_CHANNEL, DISCORD_GLOBAL, Budget

__all__ = [
    "Shared",
    "channel_budget",
    "global_budget",
    "set_channel_budget",
    "set_global_budget",
    "share",
    "shared",
    "unshare",
    "watch",
]


class Watcher(Protocol):
    def budget_changed(self) -> None: ...


class Shared(Protocol):
    """The budgets as every process of the bot spends them (`cordstream.shell.redis_budgets`):
    a turn there as well as in the process's own pacer. Never raises; returns once given."""

    async def request_turn(self) -> float: ...
    async def channel_turn(self, channel_id: int, route: Route, *, prompt: bool) -> float: ...
    async def typing_turn(self, channel_id: int) -> bool: ...


_sharing: list[Shared] = []  # the latest one opened is in use
_global: Budget | None = DISCORD_GLOBAL
_channel: Budget | None = DISCORD_CHANNEL
_watchers: weakref.WeakSet[Watcher] = weakref.WeakSet()  # one pacer per live event loop


def global_budget() -> Budget | None:
    """The process-wide budget of cordstream's Discord requests (None: not paced)."""
    return _global


def set_global_budget(budget: Budget | None) -> Budget | None:
    """Pace every stream of the process under `budget` from now on (None: no pacing); returns
    the previous budget. Requests already waiting are judged by the new one."""
    global _global
    previous, _global = _global, _checked(budget, "set_global_budget")
    _changed()
    return previous


def channel_budget() -> Budget | None:
    """The per-channel budget of live delivery's message requests (None: not paced)."""
    return _channel


def set_channel_budget(budget: Budget | None) -> Budget | None:
    """Pace every live stream's message requests under `budget` per channel from now on (None:
    no channel pacing); returns the previous budget."""
    global _channel
    previous, _channel = _channel, _checked(budget, "set_channel_budget")
    _changed()
    return previous


def shared() -> Shared | None:
    """The budgets shared with the bot's other processes, while some are (None: this process's
    budgets are the bot's)."""
    return _sharing[-1] if _sharing else None


def share(budgets: Shared) -> None:
    """Take turns in `budgets` as well, from now on until `unshare(budgets)`."""
    _sharing.append(budgets)


def unshare(budgets: Shared) -> None:
    """No longer take turns in `budgets` (the one shared before it, if any, again)."""
    if budgets in _sharing:
        _sharing.remove(budgets)


def watch(watcher: Watcher) -> None:
    """Tell `watcher` of every change of a budget, for as long as it lives."""
    _watchers.add(watcher)


def _checked(budget: Budget | None, setter: str) -> Budget | None:
    """`budget`, once it is known to be a Budget or None (a TypeError naming `setter` if not)."""
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"{setter} takes a Budget or None")
    return budget


def _changed() -> None:
    for watcher in list(_watchers):
        watcher.budget_changed()
