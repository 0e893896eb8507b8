"""The provider's lifecycle: when its task is cancelled, cancelled again, and given up (B10, B11).

Theory of operation
-------------------
The shell reads the provider in a task of its own, so that a stop, a follow-up or the deadline
takes effect while the provider hangs in `__anext__` (B2, B3). How that task is ended is
decided here, as aioquic's connection answers `get_timer()` and `handle_timer(now)`: the shell
tells a `Lifecycle` what happened, with `now` where time matters, and carries out the actions
it answers. This module never sees a task, a timer or a clock.

What it is told: the task was created (`started`), a read ended (`read_ends`), the stream
stopped wanting chunks (`stop`: the core's `CloseProvider`, a result, a fault; with whether the
task waits in `__anext__` then, a fact only the shell sees), the caller was cancelled
(`hurry`), the budget's timer fired (`expire`), the task ended (`ended`), and the shell stopped
waiting for it (`give_up`). Nothing is told per chunk: a read costs nothing here.

What it answers: `Cancel` (cancel the provider's task), `ArmExpiry(at)` (arm the budget's
timer; an earlier arming is void) and `TakeBack(count)` (the task takes back that many
cancellations once its `__anext__` is over, as `asyncio.timeout` does, so `aclose()` runs in a
task that is not being cancelled).

The budget. From the moment the stream stops wanting chunks, the provider's interrupted
`__anext__` and its `aclose()` share `Budgets.close_timeout`; when it is spent, the task is
cancelled once more and waited for `close_grace` longer (`wait_until`); a task still running
then is abandoned. The caller's cancellation shrinks what is left to `close_grace` from now and
cancels the task at once, wherever it is. A stop cancels the task only while it waits in
`__anext__`: the provider's own code (`process_chunk`, its `finally`, `aclose()`) is never
interrupted by a stop, only by the budget's end or the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, TypeAlias

__all__ = [
    "Action",
    "ArmExpiry",
    "Budgets",
    "Cancel",
    "Lifecycle",
    "Stage",
    "TakeBack",
    "TaskState",
]

TaskState: TypeAlias = Literal["none", "alive", "ended", "abandoned"]
"""Where the provider's task is: not created, running, finished, or left behind."""

Stage: TypeAlias = Literal["wanted", "closing", "expired"]
"""What the stream wants of the provider: its chunks; its cleanup within the budget; nothing
more (the budget is spent)."""


@dataclass(frozen=True, slots=True)
class Budgets:
    """The provider's cleanup budget, in seconds (see the module docstring)."""

    close_timeout: float = 5.0
    close_grace: float = 0.1


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel the provider's task."""


@dataclass(frozen=True, slots=True)
class ArmExpiry:
    """Arm the budget's timer to fire at `at`, then report `expire`; an earlier one is void."""

    at: float


@dataclass(frozen=True, slots=True)
class TakeBack:
    """In the provider's task: take back (`Task.uncancel`) `count` cancellations."""

    count: int


Action: TypeAlias = Cancel | ArmExpiry | TakeBack
Actions: TypeAlias = tuple[Action, ...]

_NONE: Actions = ()
_CANCEL: Actions = (Cancel(),)


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """One provider task's lifecycle. `close_by`: the end of the budget (inf while the stream
    wants chunks); `armed`: the budget's timer is armed; `cancels`: cancellations sent to the
    task and not taken back yet."""

    budgets: Budgets = Budgets()
    task: TaskState = "none"
    stage: Stage = "wanted"
    close_by: float = math.inf
    armed: bool = False
    cancels: int = 0

    @property
    def wait_until(self) -> float:
        """How long the shell waits for the task once the stream is over: the budget and the
        grace after it."""
        return self.close_by + self.budgets.close_grace

    @property
    def alive(self) -> bool:
        return self.task == "alive"

    def started(self) -> Lifecycle:
        """The provider's task was created."""
        return replace(self, task="alive")

    def read_ends(self) -> tuple[Lifecycle, Actions]:
        """`__anext__` is over: the cancellations it was sent are taken back (the shell asks
        only when `cancels` is not 0)."""
        if not self.cancels:
            return self, _NONE
        return replace(self, cancels=0), (TakeBack(self.cancels),)

    def stop(self, now: float, *, reading: bool) -> tuple[Lifecycle, Actions]:
        """The stream wants no more chunks: the budget starts, and the task is cancelled if it
        waits in `__anext__` (`reading`). Only the first stop does that: the stream starts no
        read after it. Later ones only arm the timer if it is not armed."""
        if self.stage != "wanted":
            return self._arm()
        state = replace(self, stage="closing", close_by=now + self.budgets.close_timeout)
        state, armed = state._arm()
        if not reading:
            return state, armed
        return state._cancelled(armed)

    def hurry(self, now: float) -> tuple[Lifecycle, Actions]:
        """The caller was cancelled: what is left of the budget shrinks to the grace, and the
        task is cancelled now, wherever it is."""
        state = self
        soon = now + state.budgets.close_grace
        if state.stage == "wanted":
            state = replace(state, stage="closing", close_by=soon, armed=False)
        elif state.close_by > soon:
            state = replace(state, close_by=soon, armed=False)
        state, armed = state._arm()
        return state._cancelled(armed)

    def expire(self) -> tuple[Lifecycle, Actions]:
        """The budget's timer fired: the task is cancelled once more, wherever it is."""
        return replace(self, stage="expired", armed=False)._cancelled(_NONE)

    def ended(self) -> Lifecycle:
        """The provider's task finished."""
        return replace(self, task="ended", armed=False)

    def give_up(self) -> Lifecycle:
        """The shell stopped waiting for the task: one still running is abandoned."""
        return replace(self, task="abandoned") if self.alive else self

    def _arm(self) -> tuple[Lifecycle, Actions]:
        if self.armed or self.stage != "closing" or not self.alive:
            return self, _NONE
        return replace(self, armed=True), (ArmExpiry(self.close_by),)

    def _cancelled(self, before: Actions) -> tuple[Lifecycle, Actions]:
        if not self.alive:
            return self, before
        return replace(self, cancels=self.cancels + 1), (*before, *_CANCEL)
