"""What one stream produced: the record the runners fill in and the checks judge.

`Outcome` extends the oracle's `Observed` (what Discord accepted, the result, the requests
made, the registry's entries) with the soak's own records: the plan, the provider, the
caller's `cancelling()` before and after, a moderator's deletion, an answer group's reader
moments and requests, an interaction's record, expiry and Stop clicks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from cordstream.shell.testing import InteractionRecord
from tests.soak.faults import HIDDEN_MARKERS, SoakProvider
from tests.soak.plans import Clicker, Plan
from tests.support.oracle import (
    ENDING_STATUSES,
    Fired,
    Observed,
)


@dataclass(kw_only=True)
class Outcome(Observed):
    """Everything one stream produced, for `check_stream`: what the oracle judges
    (`tests.support.oracle.Observed`), and the soak's own records."""

    plan: Plan
    channel_id: int
    reply_id: int
    provider: SoakProvider
    stuck: bool = False
    # The caller (`Plan.caller`): its task's `cancelling()` before and after the call; whether
    # its cancel (or its timeout) reached the call's task (`cancel_delivered`), and when
    # (`interrupted_at`, also a timeout's deadline); whether the global 429 lock of discord.py
    # was closed then; whether CancelledError (`caller_cancelled`) or TimeoutError
    # (`timed_out`) came out of the call.
    cancelling_before: int = 0
    cancelling_after: int = 0
    in_global_wait: bool = False
    timed_out: bool = False
    timeout_expired: bool = False  # the caller's asyncio.timeout fired
    handed_over: bool = False  # requests ran in the background when the cancelled call ended
    # The plan's moderator (`Plan.delete_at`): when it deleted the stream's newest message
    # (None: not yet, or never), or found none to delete.
    deleted_at: float | None = None
    nothing_to_delete: bool = False
    deleter: asyncio.TimerHandle | None = None  # the moderator's deletion, once scheduled
    # A stream of an `answer_group` (C9): when its reader opened and closed in the registry's
    # count of events (`TimedRegistry.tick`; None: not known); the group's accepted requests
    # not meant for it (`foreign`, by context: none may decide its result); what the group's
    # requests did (`targets`, labels for the report, on its first stream); requests made
    # in its name whose acceptance was not C3's and C9's (`misadmitted`).
    opened: int | None = None
    closed: int | None = None
    foreign: dict[object, Fired] = field(default_factory=dict)
    targets: list[str] = field(default_factory=list)
    misadmitted: list[str] = field(default_factory=list)
    # A stream into an interaction (`Plan.asking`): its record in the emulator, where its
    # channel's messages began, when its token was made to expire (None: not during the
    # call), the clicks on its Stop button, and whether it was left "thinking" once settled.
    record: InteractionRecord | None = None
    first_message: int = 0
    expired_at: float | None = None
    clicks: list[Click] = field(default_factory=list)
    thinking_left: bool = False

    def interrupted(self) -> bool:
        """The caller's own cancel or timeout ended the call: no result, by design (B11)."""
        cancelled = self.plan.caller == "cancel" and self.caller_cancelled
        return (cancelled and self.cancel_delivered) or self.timed_out


def outcome_of(plan: Plan, channel_id: int, reply_id: int, provider: SoakProvider) -> Outcome:
    """A stream's record before it runs, with what the oracle needs to know of its plan."""
    return Outcome(
        plan=plan,
        channel_id=channel_id,
        reply_id=reply_id,
        provider=provider,
        config=plan.config,
        reply_to=reply_id if plan.reply else None,
        suppress=plan.suppress,
        hidden=HIDDEN_MARKERS,
        expected=ENDING_STATUSES[TAIL_ENDINGS.get(plan.tail, "error")],
    )


# What a quiet stream ends as, by its tail (`tests.support.oracle.ENDING_STATUSES`); the
# others: error.
TAIL_ENDINGS: Final[Mapping[str, str]] = {
    "end": "end",
    "done": "end",
    "hang": "hang",
    "function_call": "function_call",
}


@dataclass(frozen=True)
class Click:
    """A click on a stream's Stop button: who, when (loop time), and its record (None: there
    was no button to click then)."""

    who: Clicker
    at: float
    record: InteractionRecord | None
