"""What every stream through the real shell keeps, whatever its script, Discord's faults, the
user's requests and the caller: the one oracle of the soak (`bench/soak.py`) and of the shell's
property tests (`tests/test_shell_properties.py`).

A harness runs `stream_to_discord` with a `ScriptProvider` against the Discord emulator and
records what happened in an `Observed` (the soak's `Outcome` and the property tests' `Run`
extend it); `check(observed)` returns the violations, `[]` when every invariant holds:

- B1: one `StreamResult` and nothing escaped, unless the caller's own cancel or timeout ended
  the call (`interrupted`: then no result, by design); a cancel that reached the call is not
  swallowed into a result. The result's `anomalies` are empty (a correct shell never feeds the
  core an impossible event).
- B10, B11: a started provider is told to stop, closed with `aclose()`, and none of its code
  still runs when the call returns.
- E7, F1, G7 and what must never be shown: no send over min(2000, max_message_length), every
  send with `allowed_mentions` that parse nothing, no message that pings, none holding a
  `hidden` text, no request refused as malformed (400); the first message replies when asked,
  later ones do not; no embed when suppressed.
- F2: `messages` is the transcript of the non-embed messages Discord accepted, in order,
  `accumulated_text` their join by "\\n", `messages_sent` their number, whatever the status.
- B4: a request made before the stream resolves it before the provider starts, and sends no
  text. B3: an accepted request, or the caller's cancel, closes the provider within `BOUND`.
- C4, C7: a user or system stop's result carries the context of a stop that was made (not one
  made with an internal id); a follow-up's result follows a follow-up. C2, C5: an accepted stop
  is never lost: it decided the result, or stays in the registry, or a later stop replaced it.
- Every status is explained by what happened (an `error` by a provider fault or a failing
  send, a `timeout` by a silent provider, a limit by its count, ...); a request heard while
  the stream listened decides its outcome, unless Discord's faults ended it first; a timeout
  closes the provider at the deadline, the last chunk plus the inactivity timeout (B2).
- A *quiet* stream (no request before its end, no Discord fault that can change its course,
  no limit reached) ends in one of the statuses its script predicts (`expected`), with one
  error or timeout embed, last, unless suppressed, and none otherwise (G6).

`entry_explained` says whether a registry entry left after a stream is for a later turn (C5).
The internal requester ids are the core's own (`cordstream.domain.requests`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from cordstream.domain import StopRequest, StreamResult
from cordstream.domain.requests import INTERNAL_REQUESTERS
from cordstream.shell import StreamConfig
from cordstream.shell.stops import Listener, StopRegistry
from cordstream.shell.testing.emulator import (
    Delay,
    ErrorReply,
    Fault,
    RateLimited,
    RecordedRequest,
    SentMessage,
)
from cordstream.shell.testing.script import ScriptProvider

BOUND: Final = 0.05  # B2, B3: how soon (virtual seconds) the provider must be closed
EPSILON: Final = 1e-6  # float rounding of the virtual clock
DISCORD_LIMIT: Final = 2000
# Labels of `ScriptProvider.reached` that end a stream as an error when nothing intervenes.
ERROR_LABELS: Final = frozenset({"raise", "process_raise", "garbage", "error_chunk"})
# The statuses a script ends in when nothing intervenes, by what it ends with.
ENDING_STATUSES: Final[Mapping[str, frozenset[str]]] = {
    "end": frozenset({"completed", "empty_response"}),
    "hang": frozenset({"timeout"}),
    "function_call": frozenset({"function_call"}),
    "error": frozenset({"error"}),
}
UNKNOWN_CHANNEL_CODE: Final = 10003
MISSING_ACCESS_CODE: Final = 50001

RequestKind: TypeAlias = Literal["stop", "follow_up"]
When: TypeAlias = Literal["before", "during", "after"]
Violation: TypeAlias = tuple[str, str]  # (name, detail)


@dataclass(frozen=True)
class Request:
    """A stop or follow-up: before the stream, `at` seconds after its start, or after it."""

    kind: RequestKind
    requester: str | None
    when: When = "during"
    at: float = 0.0


@dataclass(frozen=True)
class Fired:
    """A request the harness made: when (loop time), whether accepted, the context it carried,
    the registry's entry for the channel just before (`replaced`) and just after (`entry`)."""

    request: Request
    at: float
    accepted: bool
    context: str
    replaced: StopRequest | None = None
    entry: StopRequest | None = None


@dataclass(kw_only=True)
class Observed:
    """One `stream_to_discord` call, as the oracle judges it.

    From the plan: `config`, the message the first one must reply to (`reply_to`, None: no
    reply asked), `suppress`, the texts that must never be sent (`hidden`) and the statuses the
    script ends in when the stream is quiet (`expected`, None: no prediction). From the run:
    what came out of the call, the caller's cancel (`cancel_delivered`: it reached the call,
    at `interrupted_at`; `caller_cancelled`: CancelledError came out of it), the
    loop times the call returned (`done_at`) and the stream stopped listening to the registry
    (`ended_at`, when known: its result existed by then), the requests made (`fired`), the
    messages Discord accepted and the requests it got in the stream's channel, the registry's
    entry once everything settled, and the provider's calls still under way at the return."""

    config: StreamConfig
    provider: ScriptProvider
    reply_to: int | None = None
    suppress: bool = False
    hidden: tuple[str, ...] = ()
    expected: frozenset[str] | None = None
    result: StreamResult | None = None
    escaped: BaseException | None = None
    cancel_delivered: bool = False
    interrupted_at: float | None = None
    caller_cancelled: bool = False
    done_at: float = 0.0
    ended_at: float | None = None
    fired: list[Fired] = field(default_factory=list)
    messages: list[SentMessage] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)
    registry_entry: StopRequest | None = None
    provider_running: int = 0

    def interrupted(self) -> bool:
        """The caller's own cancel ended the call: no result, by design (B11)."""
        return self.cancel_delivered and self.caller_cancelled

    @property
    def end(self) -> float:
        """When the stream stopped listening (its return, when that is not known)."""
        return self.ended_at if self.ended_at is not None else self.done_at

    def heard(self) -> list[Fired]:
        """The requests accepted while the stream could still hear them."""
        return [f for f in self.fired if f.accepted and f.at <= self.end]


def check(observed: Observed) -> list[Violation]:
    """Every invariant one stream must satisfy, whatever its plan; [] when all hold."""
    found = _check_call(observed)
    found += _check_provider(observed)
    found += _check_messages(observed)
    result = observed.result
    if result is None:
        return found
    found += _check_transcript(result, observed)
    found += _check_requests(result, observed)
    found += _check_stops(result, observed)
    found += _check_status(result, observed)
    return found


def _check_call(observed: Observed) -> list[Violation]:
    """B1: one result, nothing escaped; the caller's own cancel is not swallowed."""
    found: list[Violation] = []
    if observed.escaped is not None:
        found.append(("escaped", repr(observed.escaped)))
    if observed.cancel_delivered and observed.result is not None:
        found.append(("cancel_swallowed", "the call returned despite the caller's cancel"))
    if observed.result is None and not observed.interrupted():
        found.append(("no_result", "no result, and the caller did not interrupt the call"))
    return found


def _check_provider(observed: Observed) -> list[Violation]:
    """B10, B11: a started provider is closed with `aclose()`, and none of its code is still
    running when the call returns."""
    provider = observed.provider
    if not provider.started:
        return []
    found: list[Violation] = []
    if provider.closed_at is None:
        found.append(("provider_not_closed", ""))
    elif provider.aclose_at is None:
        found.append(("provider_not_closed", "aclose() was never called"))
    if observed.provider_running:
        found.append(("provider_outlived_call", f"{observed.provider_running} calls under way"))
    return found


def _check_messages(observed: Observed) -> list[Violation]:
    """What reached the channel, whatever the call returned (E7, F1, G7, E4, E5, B5)."""
    found: list[Violation] = []
    limit = min(DISCORD_LIMIT, observed.config.max_message_length)
    sent = [m.content for m in observed.messages]
    for request in observed.requests:
        if request.kind != "send":
            continue
        body = request.json if isinstance(request.json, Mapping) else {}
        sent.append(str(body.get("content") or ""))
        mentions = body.get("allowed_mentions")
        if not isinstance(mentions, Mapping) or mentions.get("parse") != []:
            found.append(("mentions_allowed", f"a send with allowed_mentions {mentions!r}"))
        if request.status == 400:
            found.append(("refused_by_discord", repr(request.json)[:120]))
    found += [  # what was sent, accepted or not, once each
        ("too_long", f"a {len(content)}-character message, over {limit}")
        for content in dict.fromkeys(sent)
        if len(content) > limit
    ]
    for message in observed.messages:
        if message.pings.anyone:
            found.append(("ping", repr(message.content[:80])))
        if any(text in message.content for text in observed.hidden):
            found.append(("hidden_text_sent", repr(message.content[:80])))
    texts = [m for m in observed.messages if not m.embeds]
    if observed.reply_to is not None and texts:
        first = texts[0].message_reference
        if first is None or int(first["message_id"]) != observed.reply_to:
            found.append(("reply", f"the first message replies to {first}"))
        if any(m.message_reference is not None for m in texts[1:]):
            found.append(("reply", "a later message is a reply"))
    if observed.suppress and any(m.embeds for m in observed.messages):
        found.append(("embed_despite_suppress", ""))
    return found


def _check_transcript(result: StreamResult, observed: Observed) -> list[Violation]:
    """F2: the result is exactly what Discord accepted, in order, and its text is those
    contents joined by "\\n"; and the core saw no impossible event."""
    found: list[Violation] = []
    contents = tuple(m.content for m in observed.messages if not m.embeds)
    if result.messages != contents:
        found.append(("transcript", _messages_diff(result.messages, contents)))
    elif result.accumulated_text != "\n".join(contents):
        found.append(("transcript", _diff(result.accumulated_text, "\n".join(contents))))
    if result.messages_sent != len(contents):
        found.append(("messages_sent", f"{result.messages_sent} != {len(contents)} accepted"))
    if result.anomalies:
        found.append(("anomalies", "; ".join(result.anomalies)[:200]))
    return found


def _check_requests(result: StreamResult, observed: Observed) -> list[Violation]:
    """B4, B3, C4, C7: what the requests made did to the stream."""
    found: list[Violation] = []
    provider = observed.provider
    heard = observed.heard()
    if any(f.request.when == "before" for f in heard):  # B4
        if provider.started:
            found.append(("B4", "the provider was started despite a pending request"))
        if result.status not in ("stopped_by_user", "follow_up_interrupt"):
            found.append(("B4", f"{result.status} despite a pending request"))
        if any(not m.embeds for m in observed.messages):
            found.append(("B4", "text sent despite a pending request"))
    # B3: an accepted request, or the caller's cancel, closes the provider at once.
    moments = [f.at for f in heard]
    if observed.cancel_delivered and observed.interrupted_at is not None:
        moments.append(observed.interrupted_at)
    if provider.started and provider.closed_at is not None and moments:
        late = provider.closed_at - min(moments)
        if late > BOUND:
            found.append(("late_close", f"closed {late:.3f} s after a request"))
    if result.status == "follow_up_interrupt":
        if not any(f.request.kind == "follow_up" for f in heard):
            found.append(("follow_up", "a follow_up_interrupt without a follow-up"))
        if result.stop_reason != "user_request":
            found.append(("follow_up", f"stop_reason {result.stop_reason!r}"))
    if result.status == "stopped_by_user" and result.stop_reason in (
        "user_request",
        "system_request",
    ):
        user = result.stop_reason == "user_request"
        contexts = {
            f.context
            for f in heard
            if f.request.kind == "stop"
            and bool(f.request.requester) == user
            and f.request.requester not in INTERNAL_REQUESTERS
        }
        if result.stop_context not in contexts:
            found.append(("stop_context", f"{result.stop_context!r} not in {sorted(contexts)}"))
    return found


def _check_stops(result: StreamResult, observed: Observed) -> list[Violation]:
    """C2, C5: a stop is never lost. Each accepted stop decided the result (the result is a
    stop's, with the context of one of the stops made: a later stop that found the stream
    stopping changes nothing), or is still the channel's entry once everything settled, or
    was replaced by a later stop while it was pending."""
    stops = [f for f in observed.fired if f.request.kind == "stop" and f.accepted]
    contexts = {f.context for f in stops}
    if result.status == "stopped_by_user" and result.stop_context in contexts:
        return []
    found: list[Violation] = []
    for made in stops:
        kept = made.entry is not None and made.entry is observed.registry_entry
        replaced = any(
            later.replaced is made.entry
            for later in observed.fired
            if later is not made and later.request.kind == "stop" and later.accepted
        )
        if not kept and not replaced:
            found.append(
                (
                    "stop_lost",
                    f"{made.request} at {made.at:.3f} consumed, but the result is "
                    f"{result.status}/{result.stop_reason} with {result.stop_context!r}",
                )
            )
    return found


def _check_status(result: StreamResult, observed: Observed) -> list[Violation]:
    """Every status is explained by what happened; a timeout comes at the deadline (B2); a
    request heard decides the outcome; a quiet stream ends as its script says (G6 too)."""
    found: list[Violation] = []
    config, provider = observed.config, observed.provider
    status, reason = result.status, result.stop_reason
    disturbing = disturbing_faults(observed.requests)
    if not _explained(result, observed, disturbing):
        reached = sorted(provider.reached)
        found.append(("unexplained_status", f"{status}/{reason}, reached {reached}"))
    if status == "function_call" and (
        not result.function_calls or result.data != result.function_calls[0]
    ):
        found.append(("data", f"function_call data {result.data!r}"))
    if status == "timeout":  # B2: the deadline is the last chunk plus the timeout
        closed = provider.closed_at if provider.closed_at is not None else float("inf")
        last = provider.last_chunk_at if provider.last_chunk_at is not None else float("-inf")
        deadline = last + config.inactivity_timeout
        if not deadline - EPSILON <= closed <= deadline + BOUND:
            found.append(("timeout_timing", f"closed at {closed}, deadline {deadline}"))
    # A request heard while the stream listened overrides any outcome of the stream's own
    # course (an internal stop or a failing Discord aside): the stream ends by a request.
    heard = [f for f in observed.heard() if f.at < observed.end]
    if heard and not disturbing and status not in ("stopped_by_user", "follow_up_interrupt"):
        found.append(("request_ignored", f"{status} after {heard[0].request}"))
    if is_quiet(result, observed):
        if observed.expected is not None and status not in observed.expected:
            found.append(("quiet_status", f"ended as {status}/{reason}, not {observed.expected}"))
        # G6, G7: an error or a timeout shows one embed, last, unless suppressed; else none.
        embeds = [i for i, m in enumerate(observed.messages) if m.embeds]
        want = 1 if status in ("error", "timeout") and not observed.suppress else 0
        if len(embeds) != want or (want and embeds[0] != len(observed.messages) - 1):
            found.append(("embeds", f"{len(embeds)} embeds for {status}"))
    return found


def _explained(result: StreamResult, observed: Observed, disturbing: list[Fault]) -> bool:
    provider, config = observed.provider, observed.config
    reached = provider.reached
    heard = observed.heard()
    kinds = {f.request.kind for f in heard}
    requesters = {f.request.requester for f in heard if f.request.kind == "stop"}
    codes = {f.code for f in disturbing if isinstance(f, ErrorReply)}
    match result.status:
        case "error":
            failed_send = any(
                not (isinstance(f, ErrorReply) and f.code in QUIET_ENDS) for f in disturbing
            )
            return bool(reached & ERROR_LABELS) or failed_send
        case "timeout":
            return "hang" in reached or _silent(provider, config.inactivity_timeout)
        case "function_call":
            return "function_call" in reached
        case "follow_up_interrupt":
            return "follow_up" in kinds
        case "completed" | "empty_response":
            # B8: completed exactly when something was sent.
            sent = result.messages_sent > 0
            return "end" in reached and sent == (result.status == "completed")
        case "stopped_by_user":
            match result.stop_reason:
                case "user_request" | "system_request":
                    return "stop" in kinds
                case "channel_deleted":
                    return "channel_deleted" in requesters or UNKNOWN_CHANNEL_CODE in codes
                case "missing_access":
                    return "missing_access" in requesters or MISSING_ACCESS_CODE in codes
                case "flush_limit":
                    limit = config.flush_limit
                    return "flush_limit" in requesters or result.messages_sent == limit
                case "send_message_limit":
                    limit = config.send_message_limit
                    return "send_message_limit" in requesters or result.messages_sent == limit
    return False


# Discord's failures that end a stream quietly (F4), not as an error.
QUIET_ENDS: Final = frozenset({UNKNOWN_CHANNEL_CODE, MISSING_ACCESS_CODE})


def _silent(provider: ScriptProvider, timeout: float) -> bool:
    """Whether the provider gave no chunk for the whole inactivity timeout before it closed."""
    if provider.last_chunk_at is None or provider.closed_at is None:
        return False
    return provider.closed_at - provider.last_chunk_at >= timeout - BOUND


def is_quiet(result: StreamResult, observed: Observed) -> bool:
    """No request before the stream's end, no Discord fault that can change its course and no
    limit reached: how it ends is then its script's doing alone."""
    limited = result.stop_reason in ("flush_limit", "send_message_limit")
    return not observed.heard() and not disturbing_faults(observed.requests) and not limited


def send_faults(requests: Iterable[RecordedRequest]) -> list[Fault]:
    """Faults consumed by message sends: these can change a stream's course (F4). A 429 from
    Discord's real rate limits counts as a `RateLimited` fault: it uses one of discord.py's
    tries too."""
    found: list[Fault] = []
    for r in requests:
        if r.kind != "send":
            continue
        if r.rate_limited is not None:
            found.append(RateLimited(is_global=r.rate_limited == "global"))
        elif r.fault is not None:
            found.append(r.fault)
    return found


def _effective(fault: Fault) -> Fault | None:
    """What the request got in the end: a Delay without a fault is just a slow success."""
    return fault.then if isinstance(fault, Delay) else fault


def _retried(fault: Fault | None) -> bool:
    """A reply discord.py retries (a 429 with `Via`, a 5xx), within its five tries."""
    retry_429 = isinstance(fault, RateLimited) and fault.via
    return retry_429 or (isinstance(fault, ErrorReply) and fault.status in (500, 502))


def disturbing_faults(requests: Iterable[RecordedRequest]) -> list[Fault]:
    """Send faults that may change how the stream ends. discord.py makes five tries per
    request, and every retried reply uses one: fewer than five retried replies in the whole
    stream cannot fail a send."""
    faults = [f for f in map(_effective, send_faults(requests)) if f is not None]
    if sum(map(_retried, faults)) < 5:
        faults = [f for f in faults if not _retried(f)]
    return faults


def entry_explained(observed: Observed, entry: StopRequest) -> bool:
    """C5: whether a registry entry left after the stream is for a later turn: registered
    after the stream stopped listening; a follow-up that came while a stop or follow-up was
    already ending it; a stop that came once an internal stop had fixed the outcome (it stays
    for the bot to see); or the caller interrupted the call, which then resolved nothing."""
    result = observed.result
    if observed.ended_at is not None and entry.at >= observed.ended_at:
        return True
    if result is None:
        return observed.interrupted()
    waiting_follow_up = entry.kind == "follow_up" and result.status in (
        "stopped_by_user",
        "follow_up_interrupt",
    )
    fixed = (
        entry.kind == "stop"
        and result.status == "stopped_by_user"
        and result.stop_reason in INTERNAL_REQUESTERS
    )
    return waiting_follow_up or fixed


def describe(violations: Iterable[Violation]) -> str:
    return "\n".join(f"{name}: {detail}" for name, detail in violations)


def _diff(got: str, want: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    at = min(len(got), len(want)) if at is None else at
    return f"accumulated_text differs from the transcript at {at}: {got[at : at + 40]!r} vs " + (
        f"{want[at : at + 40]!r} ({len(got)} vs {len(want)} chars)"
    )


def _messages_diff(got: tuple[str, ...], want: tuple[str, ...]) -> str:
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    at = min(len(got), len(want)) if at is None else at
    mine = got[at][:40] if at < len(got) else None
    theirs = want[at][:40] if at < len(want) else None
    return (
        f"messages differ from the transcript at message {at}: {mine!r} vs {theirs!r} "
        f"({len(got)} vs {len(want)} messages)"
    )


# -- what the harnesses share besides the checks -----------------------------------------------

# Prose whose pieces a cut must keep together (E1-E3): an open parenthesis or quote, markdown,
# a URL with parentheses, a numbered item. Both harnesses' scripts draw from it.
PROSE_TRAPS: Final = (
    "(an open paren ",
    'a "quote ',
    "**bold ",
    "https://example.com/a_(b) ",
    "1. item\n",
)


class TimedRegistry(StopRegistry):
    """The real registry, noting (loop time) when each channel's stream stopped listening:
    its result exists by then, so an entry registered at or after it is for the next turn."""

    def __init__(self, *, clock: Callable[[], float], max_age: float = 3600.0) -> None:
        # No entry ages out (C8) before its stream is judged: C8 has tests of its own.
        super().__init__(clock=clock, max_age=max_age)
        self.clock = clock
        self.unlistened: dict[int, float] = {}

    def listen(self, channel_id: int, listener: Listener) -> Callable[[], None]:
        unlisten = super().listen(channel_id, listener)

        def timed() -> None:
            unlisten()
            self.unlistened[channel_id] = self.clock()

        return timed


def server_side(task: asyncio.Task[Any]) -> bool:
    """The emulator's own connection handlers (aiohttp's server): Discord's side, not ours."""
    name: str = getattr(task.get_coro(), "__qualname__", "")
    return name.startswith("RequestHandler.")


def leftover_tasks(before: set[asyncio.Task[Any]]) -> list[str]:
    """The tasks started since `before` and still running, the current one and the emulator's
    own aside: a stream must leave none behind (B11)."""
    current = asyncio.current_task()
    return sorted(
        getattr(t.get_coro(), "__qualname__", repr(t))
        for t in asyncio.all_tasks() - before
        if t is not current and not t.done() and not server_side(t)
    )
