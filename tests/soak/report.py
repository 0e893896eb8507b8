"""The soak's figures: each judged stream tallied into a `Report`, and the printed table.

`MUST_BE_ZERO` names the figures that fail the soak (docs/soak.md, "Must be zero"); a
violation counts toward `invariant_violations` and, through `COUNTED_AS`, toward its own
figure; a known defect (`tests.support.oracle.KNOWN_DEFECTS`) is counted apart. The labels
(`caller_label`, `race_label` ...) say what each fault, request and click met, so that the
report shows the soak injected what it planned.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, cast

from tests.soak.checks import check_stream
from tests.soak.faults import CLEANUPS, FAULT_TAILS, REACTIONS, fault_label
from tests.soak.outcome import Click, Outcome
from tests.soak.plans import ANSWERED, THIRD_USER, Asking
from tests.support.oracle import (
    KNOWN_DEFECTS,
    Fired,
    is_quiet,
)

MUST_BE_ZERO: Final = (
    "exceptions_escaped",
    "stuck_streams",
    "leaked_tasks",
    "leaked_listeners",
    "unexplained_registry_entries",
    "transcript_mismatches",
    "pings",
    "invariant_violations",
    "cancelling_changed",
    "timeouts_as_cancelled",
    "stops_lost",
    "wedged_clients",
    "answers_lost",
    "anomalies",
    "cursors_left",
    "shrinking_edits",
    "live_429s",
    "cross_answer_stops",
    "stops_missed",
    "entries_leaked",
    "left_thinking",
    "expiry_losses",
    "public_embeds",
    "refused_clicks_obeyed",
    "accepted_clicks_ignored",
)


@dataclass
class Report:
    seed: int = 0
    channels: int = 0
    streams: int = 0
    batches: int = 0
    exceptions_escaped: int = 0
    stuck_streams: int = 0
    leaked_tasks: int = 0
    leaked_listeners: int = 0
    unexplained_registry_entries: int = 0
    stale_requests_discarded: int = 0
    transcript_mismatches: int = 0
    pings: int = 0
    invariant_violations: int = 0
    quiet_streams: int = 0  # streams whose exact status the checker predicted
    cancelling_changed: int = 0  # the caller's task left the call in another cancel state
    timeouts_as_cancelled: int = 0  # an asyncio.timeout caller got CancelledError
    stops_lost: int = 0  # a stop consumed without deciding the result (C5)
    wedged_clients: int = 0  # a probe send after a batch did not complete (B11)
    answers_lost: int = 0  # answers phase: not `completed` with every line, in order (F4)
    anomalies: int = 0  # results whose core was fed an event a correct shell never feeds
    cursors_left: int = 0  # live messages left ending with the cursor (L4)
    shrinking_edits: int = 0  # live messages whose shown text shrank or changed (L3)
    live_429s: int = 0  # live streams' message requests answered 429 by Discord's limits (L2)
    # Per answer (C9): streams ended by a request meant for another stream (aimed at another
    # user's answer, a third user's follow-up, a stop registered before they started); streams
    # a request meant for them did not end (B3, B4); registry entries no later stream would
    # take (still owed to, or consumed by, a stream once none runs, C5).
    cross_answer_stops: int = 0
    stops_missed: int = 0
    entries_leaked: int = 0
    answer_streams: int = 0  # streams of answer groups (each answering a user, C9)
    targets: Counter[str] = field(default_factory=Counter)  # what their requests did
    # Interactions (K1, K2): answers left "thinking" after their result; F2 transcripts wrong
    # after a token expired during the stream (a message lost); public error embeds where an
    # ephemeral one was due; refused Stop clicks that stopped (or were taken for a stop);
    # accepted Stop clicks that did not stop the stream streaming.
    left_thinking: int = 0
    expiry_losses: int = 0
    public_embeds: int = 0
    refused_clicks_obeyed: int = 0
    accepted_clicks_ignored: int = 0
    interaction_streams: int = 0
    clicks: Counter[str] = field(default_factory=Counter)  # who clicked, and what came of it
    expiries: Counter[str] = field(default_factory=Counter)  # token expiries, by moment
    live_streams: int = 0  # streams with delivery="live" (the others: "messages")
    live_global_429s: int = 0  # live streams' message requests answered a global 429
    shared_streams: int = 0  # live streams sharing a channel with others of their group
    answers: int = 0  # streams of the answers phase
    live_answers: int = 0  # of those, the live ones (the others: messages delivery)
    limited_streams: int = 0  # streams run under Discord's real rate limits
    background_requests: int = 0  # cancelled calls that ended with requests handed over
    messages_accepted: int = 0
    embeds_accepted: int = 0
    virtual_seconds: float = 0.0
    wall_seconds: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    stop_reasons: Counter[str] = field(default_factory=Counter)
    violations: Counter[str] = field(default_factory=Counter)
    provider_faults: Counter[str] = field(default_factory=Counter)  # tails reached
    discord_faults: Counter[str] = field(default_factory=Counter)  # faults consumed
    user_requests: Counter[str] = field(default_factory=Counter)  # accepted, by moment
    provider_cleanups: Counter[str] = field(default_factory=Counter)  # cleanups, reactions
    callers: Counter[str] = field(default_factory=Counter)  # what each caller did and got
    races: Counter[str] = field(default_factory=Counter)  # how each stop-vs-follow-up ended
    deletions: Counter[str] = field(default_factory=Counter)  # the moderators' deletions (L9)
    # Violations whose fix is pending (`tests.support.oracle.KNOWN_DEFECTS`), not must-be-zero.
    known_defects: Counter[str] = field(default_factory=Counter)
    known_samples: list[str] = field(default_factory=list)
    rate_limit_hits: Counter[str] = field(default_factory=Counter)  # 429s of the real limits
    phases: dict[str, str] = field(default_factory=dict)  # phase -> streams, wall and virtual s
    leaked_task_names: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)  # the first few violations, described

    def failures(self) -> dict[str, int]:
        """The must-be-zero figures that are not zero."""
        figures = {name: int(getattr(self, name)) for name in MUST_BE_ZERO}
        return {name: value for name, value in figures.items() if value}

    def as_json(self) -> dict[str, Any]:
        """Every figure, by its name: counters sorted, seconds to the millisecond, the first
        20 leaked task names, and the names of the failed must-be-zero figures."""
        figures: dict[str, Any] = {}
        for figure in fields(self):
            value = getattr(self, figure.name)
            if isinstance(value, Counter):
                value = dict(sorted(value.items()))
            elif isinstance(value, float):
                value = round(value, 3)
            figures[figure.name] = value
        figures["leaked_task_names"] = self.leaked_task_names[:20]
        figures["failed"] = sorted(self.failures())
        return figures


def target_label(
    fired: Fired, held: Sequence[Outcome], took: Sequence[Outcome], members: Sequence[Outcome]
) -> str:
    """What a request of an answer group was, and what it did, for the report: whether it
    ended streams (at their start or while they streamed), and whether another stream of the
    group was streaming then and went on."""
    request = fired.request
    if request.kind == "stop":
        match request.answering:
            case None:
                kind = "channel-wide stop"
            case user if user in ANSWERED:
                kind = "stop aimed at an answer"
            case _:
                kind = "stop aimed at an answer nobody streams"
    else:
        who = "a third user" if request.requester == str(THIRD_USER) else "an asker"
        kind = f"{'interrupt_own_answer' if request.own else 'follow-up'} from {who}"
    if not fired.accepted:
        return f"{kind}: refused"
    if not held:
        return f"{kind}: reached no stream (waits for a later one)"
    ended = [
        m
        for m in held
        if m.result is not None
        and (
            m.result.status == "follow_up_interrupt"
            if request.kind == "follow_up"
            else m.result.stop_context == fired.context
        )
    ]
    if not ended:
        return f"{kind}: resolved otherwise (the outcome was fixed)"
    moment = "at its start (B4)" if set(map(id, ended)) <= set(map(id, took)) else "while streaming"
    streaming = [
        m
        for m in members
        if m.opened is not None and m.opened < fired.seq < (m.closed or fired.seq + 1)
    ]
    on = ", another went on" if any(m not in held for m in streaming) else ""
    return f"{kind}: ended {len(ended)} {moment}{on}"


def _sample(report: Report, outcome: Outcome, text: str) -> None:
    if len(report.samples) < 20:
        result = outcome.result
        status = f"{result.status}/{result.stop_reason}" if result is not None else "no result"
        faults = [label for label, *_ in outcome.plan.faults]
        report.samples.append(
            f"stream {outcome.plan.index} ({outcome.plan.tail}, {status}, faults {faults}): " + text
        )


def tally(report: Report, outcome: Outcome) -> None:
    """Add one judged stream to the report."""
    report.streams += 1
    if outcome.stuck:
        report.stuck_streams += 1
    if outcome.plan.config.delivery == "live":
        report.live_streams += 1
        if outcome.plan.group in (None, outcome.plan.index):  # a shared channel's once
            report.live_global_429s += sum(
                r.kind in ("send", "edit") and r.rate_limited == "global" for r in outcome.requests
            )
    report.shared_streams += outcome.plan.group is not None and not outcome.plan.per_answer
    report.answer_streams += outcome.plan.per_answer
    report.targets.update(outcome.targets)
    if outcome.plan.asking is not None:
        report.interaction_streams += 1
        report.clicks.update(click_label(outcome, c) for c in outcome.clicks)
        report.expiries[expiry_label(outcome)] += 1
    if outcome.plan.delete_at is not None:
        report.deletions[deletion_label(outcome)] += 1
    if outcome.escaped is not None:
        report.exceptions_escaped += 1
    if outcome.result is not None:
        report.quiet_streams += is_quiet(outcome.result, outcome)
        report.statuses[outcome.result.status] += 1
        if outcome.result.stop_reason is not None:
            report.stop_reasons[outcome.result.stop_reason] += 1
    for tail in outcome.provider.reached & (FAULT_TAILS | {"function_call", "done"}):
        report.provider_faults[tail] += 1
    for cleanup in outcome.provider.reached & CLEANUP_REACHED:
        report.provider_cleanups[cleanup] += 1
    report.callers[caller_label(outcome)] += 1
    report.background_requests += outcome.handed_over
    if outcome.plan.race:
        report.races[race_label(outcome)] += 1
    for label in consumed_faults(outcome):
        report.discord_faults[label] += 1
    for fired in outcome.fired:
        if fired.accepted:
            report.user_requests[_moment(outcome, fired)] += 1
    report.messages_accepted += sum(1 for m in outcome.messages if not m.embeds)
    report.embeds_accepted += sum(1 for m in outcome.messages if m.embeds)
    report.pings += sum(1 for m in outcome.messages if m.pings.anyone)
    violations = check_stream(outcome)
    for name, detail in violations:
        if name in KNOWN_DEFECTS:
            report.known_defects[name] += 1
            if len(report.known_samples) < 10:
                report.known_samples.append(f"stream {outcome.plan.index}: {name}: {detail}")
            continue
        report.violations[name] += 1
        report.invariant_violations += 1
        figure = COUNTED_AS.get(name)
        if figure is not None:
            setattr(report, figure, getattr(report, figure) + 1)
        if name == "transcript":  # a transcript that lost text at a token's expiry (K1)
            expired = outcome.expired_at
            report.expiry_losses += expired is not None and expired <= outcome.done_at
        _sample(report, outcome, f"{name}: {detail}")


# The must-be-zero figure a violation counts toward, besides `invariant_violations`.
COUNTED_AS: Final[Mapping[str, str]] = {
    "transcript": "transcript_mismatches",
    "cancelling": "cancelling_changed",
    "timeout_as_cancelled": "timeouts_as_cancelled",
    "stop_lost": "stops_lost",
    "anomalies": "anomalies",
    "cursor_left": "cursors_left",
    "shrank": "shrinking_edits",
    "rate_limited": "live_429s",
    "cross_answer": "cross_answer_stops",
    "request_ignored": "stops_missed",
    "B4": "stops_missed",
    "left_thinking": "left_thinking",
    "public_embed": "public_embeds",
    "refused_click_obeyed": "refused_clicks_obeyed",
    "click_ignored": "accepted_clicks_ignored",
}

CLEANUP_REACHED: Final = frozenset(CLEANUPS[1:]) | frozenset(REACTIONS[1:])


def caller_label(outcome: Outcome) -> str:
    """What the caller did, and when."""
    match outcome.plan.caller:
        case "cancel" if not outcome.cancel_delivered:
            return "cancel: after the call returned"
        case "cancel" if outcome.in_global_wait:
            return "cancel: during a global 429 wait"
        case "cancel":
            return "cancel: during the call"
        case "timeout" if outcome.timeout_expired:
            return "timeout: fired"
        case "timeout":
            return "timeout: not reached"
    return "plain"


def deletion_label(outcome: Outcome) -> str:
    """What a moderator's deletion (`Plan.delete_at`) met, and what came of it (L9)."""
    result = outcome.result
    if outcome.nothing_to_delete:
        return "no message to delete yet"
    if outcome.deleted_at is None:
        return "not made (the stream was stuck)"
    if result is not None and result.stop_reason == "message_deleted":
        return "found: ended as message_deleted"
    if outcome.deleted_at > outcome.done_at:
        return "after the call returned"
    return "during the call, not found (no edit of it followed)"


def race_label(outcome: Outcome) -> str:
    """How a stop that raced a follow-up ended (C2, C5)."""
    result = outcome.result
    stop = next((f for f in outcome.fired if f.request.kind == "stop" and f.accepted), None)
    if result is None:
        return "no result (the caller cancelled)"
    if stop is None:
        return "the stop was not made (the stream was over)"
    if result.status == "stopped_by_user" and result.stop_context == stop.context:
        return "the stop decided the result"
    if outcome.ended_at is not None and stop.at >= outcome.ended_at:
        return "the stop came after the result (stays for the next turn)"
    if stop.entry is not None and stop.entry is outcome.registry_entry:
        return "the stop stayed in the registry (the outcome was fixed)"
    return f"other ({result.status})"


def _moment(outcome: Outcome, fired: Fired) -> str:
    if fired.request.when == "before":
        return "before"
    return "during" if fired.at <= outcome.done_at else "after"


def consumed_faults(outcome: Outcome) -> list[str]:
    """Labels of the faults the stream's requests consumed; the 500s of a planned `500-x6`
    count once as `500-x6` when at least five (one request's tries) were consumed."""
    labels = [fault_label(r.fault) for r in outcome.requests if r.fault is not None]
    if labels.count("500") >= 5 and any(label == "500-x6" for label, *_ in outcome.plan.faults):
        labels = [label for label in labels if label != "500"] + ["500-x6"]
    return labels


def click_label(outcome: Outcome, made: Click) -> str:
    """Who clicked a Stop button, and what came of it (K2, C10)."""
    if made.record is None:
        return f"{made.who}: no button to click"
    context = outcome.result.stop_context if outcome.result is not None else None
    mine = context is not None and getattr(context, "id", None) == made.record.id
    if made.who == "third":
        return f"{made.who}: refused" + (", answered ephemerally" if made.record.ephemeral else "")
    if mine:
        return f"{made.who}: stopped the answer"
    if made.at >= outcome.end:
        return f"{made.who}: after the answer ended"
    return f"{made.who}: the answer was stopping already"


def expiry_label(outcome: Outcome) -> str:
    """When an interaction's token expired, relative to the stream."""
    asking = cast(Asking, outcome.plan.asking)
    if asking.expire_at is None:
        return "not during the stream"
    if asking.expire_at == 0.0:
        return "before the stream started (deferral refused)"
    if outcome.expired_at is None:
        return "planned after the answer ended"
    messages = len(outcome.result.messages) if outcome.result is not None else 0
    return f"during the stream ({'text shown' if messages else 'no text yet'} at the end)"


def render(report: Report) -> str:
    """The printed table."""
    rows: list[tuple[str, object]] = [
        ("seed", report.seed),
        ("streams run", report.streams),
        (f"batches ({report.channels} channels streaming at once)", report.batches),
        ("exceptions escaped from stream_to_discord", report.exceptions_escaped),
        ("streams stuck", report.stuck_streams),
        ("leaked tasks after the batches", report.leaked_tasks),
        ("leaked registry listeners", report.leaked_listeners),
        ("unexplained registry entries", report.unexplained_registry_entries),
        ("stale requests discarded (not a leak)", report.stale_requests_discarded),
        ("transcript mismatches (accumulated_text)", report.transcript_mismatches),
        ("messages that pinged", report.pings),
        ("invariant violations", report.invariant_violations),
        ("quiet streams (exact status predicted)", report.quiet_streams),
        ("callers whose cancelling() changed", report.cancelling_changed),
        ("timeout callers that got CancelledError", report.timeouts_as_cancelled),
        ("stops lost (consumed, result not theirs)", report.stops_lost),
        ("clients wedged (probe send after a batch)", report.wedged_clients),
        (
            f"answers lost or incomplete (of {report.answers}, {report.live_answers} live)",
            report.answers_lost,
        ),
        ("results with anomalies (impossible events)", report.anomalies),
        ("live messages left with the cursor (L4)", report.cursors_left),
        ("live messages whose text shrank (L3)", report.shrinking_edits),
        ("live message requests answered 429 (L2)", report.live_429s),
        ("streams ended by another answer's request (C9)", report.cross_answer_stops),
        ("streams a request for them did not end", report.stops_missed),
        ("registry entries no later stream takes (C9)", report.entries_leaked),
        ("streams sharing a channel, each answering a user", report.answer_streams),
        ("interactions left thinking after the result (K1)", report.left_thinking),
        ("messages lost at a token's expiry (K1, F2)", report.expiry_losses),
        ("public error embeds due ephemeral (K1)", report.public_embeds),
        ("refused Stop clicks that stopped (K2, C10)", report.refused_clicks_obeyed),
        ("accepted Stop clicks that did not stop (K2)", report.accepted_clicks_ignored),
        ("streams into a slash command's interaction", report.interaction_streams),
        ("live streams (the others: messages delivery)", report.live_streams),
        ("live requests answered a global 429 (allowed)", report.live_global_429s),
        ("live streams sharing a channel (2 or 3)", report.shared_streams),
        ("streams under Discord's real rate limits", report.limited_streams),
        ("cancels that left work in the background (B11)", report.background_requests),
        (
            "messages accepted / embeds accepted",
            f"{report.messages_accepted} / {report.embeds_accepted}",
        ),
        ("virtual seconds", f"{report.virtual_seconds:,.1f}"),
        ("real seconds", f"{report.wall_seconds:,.1f}"),
    ]
    title = "cordstream soak: the real shell, discord.py and the emulator, under faults"
    lines = [title]
    lines += [f"  {label:<44} {value!s:>14}" for label, value in rows]
    for title, counter in (
        ("results per status", report.statuses),
        ("stop reasons", report.stop_reasons),
        ("provider faults reached", report.provider_faults),
        ("Discord faults consumed", report.discord_faults),
        ("user requests accepted", report.user_requests),
        ("provider cleanups and reactions reached", report.provider_cleanups),
        ("callers", report.callers),
        ("stops racing follow-ups", report.races),
        ("requests aimed at answers (C9)", report.targets),
        ("Stop button clicks (K2)", report.clicks),
        ("interaction tokens expired (K1)", report.expiries),
        ("moderators' deletions of a live message", report.deletions),
        ("429s from Discord's real rate limits", report.rate_limit_hits),
        ("violations", report.violations),
        ("known defects, fix pending (tests.support.oracle.KNOWN_DEFECTS)", report.known_defects),
    ):
        lines.append(f"  {title}:")
        lines += [f"    {key:<42} {value!s:>14}" for key, value in sorted(counter.items())]
    lines.append("  phases:")
    lines += [f"    {name:<14} {text}" for name, text in report.phases.items()]
    if report.leaked_task_names:
        lines.append(f"  leaked tasks: {report.leaked_task_names[:10]}")
    if report.samples:
        lines.append("  first violations:")
        lines += [f"    {sample}" for sample in report.samples]
    if report.known_samples:
        lines.append("  first known defects (fix pending):")
        lines += [f"    {sample}" for sample in report.known_samples]
    failures = report.failures()
    lines.append(f"  FAILED: {failures}" if failures else "  OK: every must-be-zero figure is 0")
    return "\n".join(lines)
