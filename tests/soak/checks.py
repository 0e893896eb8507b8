"""The invariants of one stream, as pure functions of its recorded `Outcome`.

`check_stream` is every invariant a stream must satisfy whatever its plan: the oracle's
(`tests.support.oracle.check`, shared with the shell's property tests), the caller's
(`check_caller`), what the plan says of the result (`_check_plan`), per answer (C9,
`check_targets`, with `admissible` and `holders` saying what C3 and C9 expect) and of
interactions (K1, K2, `check_asked`). `check_answer` judges an answer of the answers phase.
Each returns violations as data; none raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, cast, get_args

from cordstream import domain
from cordstream.domain import StopRequest
from cordstream.shell.buttons import STOP_REFUSED
from cordstream.shell.orchestrator import CLOSE_GRACE, CLOSE_TIMEOUT
from cordstream.shell.testing import emulator
from tests.soak.outcome import Outcome
from tests.soak.plans import Asking
from tests.support.oracle import (
    Fired,
    Request,
    TimedRegistry,
    Violation,
    check,
    is_quiet,
    request_reaches,
)

STATUSES: Final = frozenset(get_args(domain.StreamStatus))
STREAM_LIMIT: Final = 900.0  # a batch not done within this (virtual) is stuck
# A call interrupted by its caller (cancel, timeout) returns within the provider's cleanup
# budget (shell/orchestrator.py) and this much more.
RETURN_SLACK: Final = 0.5


def admissible(
    stops: TimedRegistry, channel_id: int, request: Request, pending: Sequence[StopRequest]
) -> bool:
    """Whether C2, C3 and C9 accept `request`, given the channel's `pending` entries: a stop
    always; a follow-up unless a stop reaching its requester's answer is pending (channel-wide,
    or aimed at them); `interrupt_own_answer` only while a stream answering its requester
    runs in the channel (its reader is open) and no such stop is pending."""
    if request.kind == "stop":
        return True
    user = request.requester or "user-2"
    if request.own:
        key = (channel_id, int(user))
        if key not in stops.opened or key in stops.closed:
            return False
    return not any(
        e.kind == "stop" and (e.answering is None or str(e.answering) == user) for e in pending
    )


def holders(
    stops: TimedRegistry, fired: Fired, members: Sequence[Outcome]
) -> tuple[list[Outcome], list[Outcome]]:
    """C9, B4, C5: the streams of an answer group an accepted request is for, and of those,
    the ones that took it when they started (B4). An entry is for the streams it reaches
    (`request_reaches`) whose readers were open when it was registered; when there are none,
    or when all of them ended without consuming it, it waits, and the first stream it reaches
    that starts after that takes it, if it is still in the registry then; and so on. Orders
    are the registry's count of events (`TimedRegistry.tick`), never the clock's."""
    if not fired.accepted or fired.entry is None:
        return [], []
    forever = float("inf")
    reached = [
        m
        for m in sorted(members, key=lambda m: forever if m.opened is None else m.opened)
        if m.opened is not None and request_reaches(fired.request, m.plan.answering)
    ]
    closed = {id(m): forever if m.closed is None else m.closed for m in reached}
    held = [m for m in reached if cast(int, m.opened) < fired.seq < closed[id(m)]]
    left = stops.left_at(fired.entry)
    gone = forever if left is None else left
    free = max((closed[id(m)] for m in held), default=fired.seq)
    took: list[Outcome] = []
    while gone > free:
        later = next((m for m in reached if m not in held and cast(int, m.opened) > free), None)
        if later is None or cast(int, later.opened) > gone:
            break
        held.append(later)
        took.append(later)
        free = closed[id(later)]
    return held, took


def check_stream(outcome: Outcome) -> list[Violation]:
    """Every invariant one stream must satisfy, whatever its plan; [] when all hold: the
    oracle's (`tests.support.oracle.check`), the caller's (`check_caller`) and what the plan says
    of the result (`_check_plan`)."""
    if outcome.stuck:
        return [("stuck", f"not done within {STREAM_LIMIT} virtual seconds")]
    found = check(outcome) + check_caller(outcome) + _check_plan(outcome)
    return found + check_targets(outcome) + check_asked(outcome)


def check_targets(outcome: Outcome) -> list[Violation]:
    """Per answer (C9): no request meant for another stream ended this one (a stop aimed at
    another user's answer, a follow-up from another user, a channel-wide stop registered
    before it started while the others streamed); each request made in its name was accepted
    or refused as C3 and C9 say (`admissible`)."""
    found = [("admission", text) for text in outcome.misadmitted]
    result = outcome.result
    if result is None or not outcome.plan.per_answer:
        return found
    foreign = outcome.foreign.get(result.stop_context) if result.stop_context else None
    if result.status == "stopped_by_user" and foreign is not None:
        found.append(("cross_answer", f"ended by {foreign.request} at {foreign.at:.4f}"))
    own = [f for f in outcome.heard() if f.request.kind == "follow_up"]
    others = [f for f in outcome.foreign.values() if f.request.kind == "follow_up"]
    if result.status == "follow_up_interrupt" and not own and others:
        found.append(("cross_answer", f"follow_up_interrupt, after {others[0].request}"))
    return found


def check_caller(outcome: Outcome) -> list[Violation]:
    """The caller gets back what it is owed (§A, B11): its task leaves the call with the
    `cancelling()` it came with (plus the one cancel request of its own a `cancel` caller
    made and nobody took back); its `asyncio.timeout` comes out as TimeoutError, and each
    comes out within the provider's cleanup budget (a cancel swallowed into a result is the
    oracle's `cancel_swallowed`)."""
    found: list[Violation] = []
    plan = outcome.plan
    expected = outcome.cancelling_before
    if plan.caller == "cancel" and outcome.cancel_delivered:
        expected += 1
    if plan.caller == "timeout" and outcome.timeout_expired and outcome.caller_cancelled:
        found.append(("timeout_as_cancelled", "CancelledError instead of TimeoutError"))
    if outcome.cancelling_after != expected:
        found.append(
            (
                "cancelling",
                f"cancelling() {outcome.cancelling_before} before the call, "
                f"{outcome.cancelling_after} after it (expected {expected})",
            )
        )
    if outcome.interrupted() and outcome.interrupted_at is not None:
        late = outcome.done_at - outcome.interrupted_at
        if late > CLOSE_TIMEOUT + CLOSE_GRACE + RETURN_SLACK:
            found.append(("slow_return", f"returned {late:.3f} s after the caller's cancel"))
    return found


def _check_plan(outcome: Outcome) -> list[Violation]:
    """What the plan says of the result: its status is one of the known ones, its usage the
    latest valid one the provider reported (B5), a function call the one planned, and a
    quiet error chunk's error the result's data."""
    result, plan = outcome.result, outcome.plan
    if result is None:
        return []
    found: list[Violation] = []
    if result.status not in STATUSES:
        found.append(("status", repr(result.status)))
    expected_usage = outcome.provider.expected_usage
    if expected_usage is not None and result.usage != expected_usage:
        found.append(("usage", f"{result.usage} != {expected_usage}"))
    if result.status == "function_call" and plan.call is not None and result.data != plan.call:
        found.append(("data", f"function_call data {result.data!r}, planned {plan.call!r}"))
    if (
        is_quiet(result, outcome)
        and plan.tail == "error_chunk"
        and result.status == "error"
        and not isinstance(result.data, domain.ProviderError)
    ):
        found.append(("data", f"error data {result.data!r}"))
    return found


def check_asked(outcome: Outcome) -> list[Violation]:
    """K1, K2, C10 for a stream into an interaction: nothing left "thinking" once it is
    settled (`left_thinking`; a known defect apart, `_expired_thinking`); no public error
    embed where an ephemeral one was due (a public follow-up with an embed while the token
    lived and errors are ephemeral, or an embed on the original response after it showed
    text); a third
    user's click registers no stop, is not acknowledged as a stop, ends nothing, and, made
    while the stream listened, is answered with the ephemeral refusal; an allowed click
    (the asker's, a moderator's) made while the stream listened registered a stop, and the
    stream ended stopped (the oracle judges that stop as any request: B3, C7)."""
    asking, result = outcome.plan.asking, outcome.result
    if asking is None:
        return []
    found: list[Violation] = []
    if outcome.thinking_left:
        status = result.status if result is not None else "no result"
        found.append(("left_thinking", f"still thinking after {status}"))
    found += _public_embeds(outcome, asking)
    listened = outcome.end
    for made in outcome.clicks:
        record = made.record
        if record is None:
            continue
        # The stop the click registered: its context is the click (`ClickRegistry`).
        stop = next((f for f in outcome.fired if getattr(f.context, "id", None) == record.id), None)
        during = made.at < listened - EPSILON_SOAK
        if made.who == "third":
            if stop is not None or 6 in record.responses:
                found.append(("refused_click_obeyed", f"a third user's click at {made.at:.4f}"))
            refusal = [m.content for m in record.ephemeral]
            if during and refusal != [STOP_REFUSED]:
                found.append(("refusal_missing", f"the click at {made.at:.4f} got {refusal}"))
            continue
        if during and stop is None:
            found.append(("click_ignored", f"{made.who}'s click at {made.at:.4f}: no stop"))
        elif stop is not None and (result is None or result.status != "stopped_by_user"):
            status = result.status if result is not None else "no result"
            found.append(("click_ignored", f"{made.who}'s click at {made.at:.4f}: {status}"))
    return found


EPSILON_SOAK: Final = 1e-6


def _public_embeds(outcome: Outcome, asking: Asking) -> list[Violation]:
    """K1: error, timeout and warning embeds are the asker's alone (ephemeral follow-ups)
    while the token lives, when `ephemeral_errors`; only one that comes before any text
    replaces the "thinking" response, publicly. After the token expired every embed goes to
    the channel."""
    if not asking.ephemeral_errors:
        return []
    found: list[Violation] = []
    expired = outcome.expired_at if outcome.expired_at is not None else float("inf")
    showed: set[int] = set()
    for change in outcome.history:
        if change.kind == "delete":
            continue
        if change.embeds and change.at < expired:
            if change.kind == "create" or change.message_id in showed:
                found.append(("public_embed", f"a public embed at {change.at:.4f}"))
        elif change.content:
            showed.add(change.message_id)
    return found


def check_answer(
    lines: Sequence[str], got: object, sent: Sequence[emulator.SentMessage]
) -> str | None:
    """What is wrong with one answer of the answers phase (None: nothing): it must end
    `completed`, its three lines in order in `accumulated_text` and in its channel (F2, F4),
    with no embed."""
    want = "\n".join(lines)
    texts = "\n".join(m.content for m in sent if not m.embeds)
    if not isinstance(got, domain.StreamResult):
        return f"no result: {got!r}"[:120]
    if got.status != "completed":
        return f"{got.status} ({got.data!r})"[:120]
    if got.accumulated_text != want or texts != want:
        return f"text {got.accumulated_text[-40:]!r}, channel {texts[-40:]!r}, want {want[-40:]!r}"
    if any(m.embeds for m in sent) or got.messages_sent != len(sent):
        return f"{got.messages_sent} messages sent, {len(sent)} in the channel"
    return None
