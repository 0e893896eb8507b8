"""What every stream through the real shell keeps, whatever its script, Discord's faults, the
user's requests and the caller: the one oracle of the soak (`tests/soak/`) and of the shell's
property tests (`tests/shell/test_shell_properties.py`).

A harness runs `stream_to_discord` with a `ScriptProvider` against the Discord emulator and
records what happened in an `Observed` (the soak's `Outcome` and the property tests' `Run`
extend it); `check(observed)` returns the violations, `[]` when every invariant holds:

- B1: one `StreamResult` and nothing escaped, unless the caller's own cancel or timeout ended
  the call (`interrupted`: then no result, by design); a cancel that reached the call is not
  swallowed into a result. The result's `anomalies` are empty (a correct shell never feeds the
  core an impossible event).
- B10, B11: a started provider is told to stop, closed with `aclose()`, and none of its code
  still runs when the call returns.
- E7, F1, G7, K3 and what must never be shown: no send over min(2000, max_message_length),
  every send (an interaction's requests that show a message too, `message_body`) with
  `allowed_mentions` that parse nothing, no message that pings, none holding a `hidden` text,
  no request refused as malformed (400); the first message replies when asked, later ones do
  not; no embed when suppressed.
- F2: `messages` is the transcript of the non-embed messages Discord accepted, in order,
  `accumulated_text` their join by "\\n", `messages_sent` their number, whatever the status.
- B4: a request made before the stream resolves it before the provider starts, and sends no
  text. B3: an accepted request, or the caller's cancel, closes the provider within `BOUND`.
- C4, C7: a user or system stop's result carries the context of a stop that was made (not one
  made with an internal id); a follow-up's result follows a follow-up. C2, C5: an accepted stop
  is never lost: it decided the result, or stays in the registry, or a later stop replaced it
  (or, C9, a channel-wide stop decided another stream's result in the channel). C3: a
  refused request changed nothing in the registry.
- C9: a harness running several streams in one channel, each answering a user, gives each
  the requests meant for it (`request_reaches` says which reach a stream, apart from the
  domain's rule) and the entries left that reach it (`Observed.registry_entries`); then every
  check above holds per answer. `TimedRegistry` orders requests, streams' readers and
  entries leaving the registry by a count of events, and finds entries no later stream would
  take (`leaks`).
- Every status is explained by what happened (an `error` by a provider fault or a failing
  send, a `timeout` by a silent provider, a limit by its count, ...); a request heard while
  the stream listened decides its outcome, unless Discord's faults ended it first; a timeout
  closes the provider at the deadline, the last chunk plus the inactivity timeout (B2).
- A *quiet* stream (no request before its end, no Discord fault that can change its course,
  no limit reached, no message of it deleted under it) ends in one of the statuses its script
  predicts (`expected`), with one error or timeout embed, last, unless suppressed, and none
  otherwise (G6).
- Live delivery (SPEC L), from the channel's `history` (every create, edit and moderator's
  deletion the emulator accepted): every message request, edits included, fits
  max_message_length, parses no mention and holds no hidden text (L4, L6); what each message
  shows, the cursor and provisional closers aside, only grows (L3); every content it shows,
  the cursor aside, has balanced fences (E3, L4; the cursor is taken off first because, glued
  to a closing fence line as in "``` ▌", it keeps that line from closing the block by the
  fence rules of `tests.support.answers`); no message the stream leaves ends with the cursor (L4),
  unless the last edit of it was refused by Discord, or the caller interrupted the call while
  the request that left it was on its way and Discord accepted that request after the call
  returned; none of its message requests was answered 429 by a channel's rate limit (L2; a
  global 429 may come from requests cordstream does not pace, such as discord.py's retries);
  and a moderator's deletion the stream found (an edit answered 10008) ends it as
  `stopped_by_user`/`message_deleted` (L9), the message gone from `messages` (F2), while a
  deletion it never found leaves the message in `messages` as Discord last accepted it.
  Violations whose fix is pending are named apart (`KNOWN_DEFECTS`).

`entry_explained` says whether a registry entry left after a stream is for a later turn (C5).
The internal requester ids are the core's own (`cordstream.domain.requests`).
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from cordstream.domain import StopRequest, StreamResult
from cordstream.domain.requests import INTERNAL_REQUESTERS, Slot
from cordstream.shell import StreamConfig
from cordstream.shell.stops import Listener, StopReader, StopRegistry
from cordstream.shell.testing.emulator import (
    Change,
    Delay,
    ErrorReply,
    Fault,
    RateLimited,
    RecordedRequest,
    SentMessage,
)
from cordstream.shell.testing.script import ScriptProvider
from tests.support.answers import fences_balanced

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
UNKNOWN_MESSAGE_CODE: Final = 10008  # an edit of a message a moderator deleted (L9)
# Stop reasons of an outcome fixed from inside (C5: a later stop stays in the registry).
FIXED_REASONS: Final = INTERNAL_REQUESTERS | {"message_deleted"}
# What a live message may show provisionally after its text (L4, E8): inline markers' closers
# and a code block's closing fence line.
PROVISIONAL: Final = '*~`)"\n'
# The requests that carry a message's content.
MESSAGE_REQUESTS: Final = frozenset({"send", "edit"})
# Violations of live delivery whose fix is pending in domain/live.py and shell/orchestrator.py
# (issue 12), found by the soak and the shell's property tests: `check` names them apart, the
# soak counts them apart from its must-be-zero figures and the property tests note them
# without failing. Each is pinned by a strict xfail test in tests/soak/test_soak.py: the day it is
# fixed, that test passes, fails as an unexpected pass, and its name goes from here.
# - `bare_fence`: the answer's last line is a code block's opening fence line with nothing
#   after it (``"Hello\n```py"``); the live message's final content ends with it, leaving the
#   block open (messages delivery drops such a line, E3).
# - `cursor_left_after_cancel`: the caller cancelled (or timed out) while the message's create
#   was answered during the provider's cleanup, or while its finishing edit waited its turn;
#   the shell made no final edit of it, so it keeps the cursor (L4).
# - `transcript_order`: a message whose final edit waited while the next one was created and
#   finished at once (it filled a message) is listed after that one in `messages` (F2).
# - `limit_loop`: a code block rolls over into a message that `send_message_limit` or
#   `flush_limit` forbids; the core asks for the channel's turn again and again, and the call
#   never returns (B1; see `limit_loop`, which the harnesses ask of a stuck stream).
# The four above were fixed (2026-12-02), and so was, found by the soak's interactions phase:
# - `thinking_after_expiry` (K1): the interaction's token expires while its original response
#   still shows "thinking" (no text yet); the shell edited that message through the channel's
#   route, which does not end the thinking state (the LOADING flag stays), so the answer was
#   left "thinking" after its result. Now the message is deleted and the text sent anew
#   (`test_K1_a_token_expiring_while_the_answer_thinks_leaves_nothing_thinking`).
KNOWN_DEFECTS: Final[frozenset[str]] = frozenset()

RequestKind: TypeAlias = Literal["stop", "follow_up"]
When: TypeAlias = Literal["before", "during", "after"]
Violation: TypeAlias = tuple[str, str]  # (name, detail)


@dataclass(frozen=True)
class Request:
    """A stop or follow-up: before the stream, `at` seconds after its start, or after it.

    Per answer (C9): a stop `answering` a user id is aimed at the answer to that user (None:
    channel-wide); a follow-up is aimed at its requester's answer, and `own` makes it through
    `interrupt_own_answer(channel_id, int(requester))` (refused when no answer of theirs
    streams) rather than `request_follow_up`."""

    kind: RequestKind
    requester: str | None
    when: When = "during"
    at: float = 0.0
    answering: int | None = None
    own: bool = False


def request_reaches(request: Request, answering: int | None) -> bool:
    """C9, written out apart from `cordstream.domain.requests.reaches`: whether `request`
    ends a stream answering `answering`. A stream that names nobody (None) is the channel's
    answer: every request reaches it. A channel-wide stop reaches every stream; a stop aimed
    at an answer, that answer's stream; a follow-up, the stream answering its requester
    (`requester == str(answering)`)."""
    if answering is None:
        return True
    if request.kind == "stop":
        return request.answering is None or request.answering == answering
    return request.requester == str(answering)


@dataclass(frozen=True)
class Fired:
    """A request the harness made: when (loop time), whether accepted, the context it carried,
    the registry's entry for the channel just before (`replaced`) and the entry it registered
    (`entry`; before C9, the channel's entry just after). Per answer (C9): the entries of the
    channel's other slots it removed too (`displaced`), and the registry's event count when
    it was made (`seq`, `TimedRegistry.tick`: it orders the request among streams opening and
    closing their readers and entries leaving the registry, without ties)."""

    request: Request
    at: float
    accepted: bool
    context: object  # a string of the harness, or what a caller passed (a click)
    replaced: StopRequest | None = None
    entry: StopRequest | None = None
    displaced: tuple[StopRequest, ...] = ()
    seq: int = -1


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
    messages Discord accepted, the channel's history (every create, edit and moderator's
    deletion, `DiscordEmulator.history`; empty: no edit and no deletion happened) and the
    requests it got in the stream's channel, the registry's entry once everything settled, and
    the provider's calls still under way at the return."""

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
    history: list[Change] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)
    registry_entry: StopRequest | None = None
    provider_running: int = 0
    # Streams sharing a channel, each answering a user (C9): the entries still in the
    # registry once everything settled that reach this stream (its `registry_entry` is then
    # None), and the contexts of the stops that decided the other streams' results (a
    # channel-wide stop one of them consumed is gone from the registry, C9).
    registry_entries: tuple[StopRequest, ...] = ()
    decided_elsewhere: frozenset[object] = frozenset()

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
    found += _check_live(observed)
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
    """What reached the channel, whatever the call returned (E7, F1, G7, E4, E5, B5): every
    message request (a send, a live edit) accepted or not, and the messages left."""
    found: list[Violation] = []
    limit = min(DISCORD_LIMIT, observed.config.max_message_length)
    sent = [m.content for m in observed.messages]
    for request in observed.requests:
        body = message_body(request)
        if body is None:
            continue
        sent.append(str(body.get("content") or ""))
        mentions = body.get("allowed_mentions")
        if not isinstance(mentions, Mapping) or mentions.get("parse") != []:
            found.append(
                ("mentions_allowed", f"a {request.kind} with allowed_mentions {mentions!r}")
            )
        if request.status == 400:
            found.append(("refused_by_discord", repr(request.json)[:120]))
    for content in dict.fromkeys(sent):  # what was sent, accepted or not, once each
        if len(content) > limit:
            found.append(("too_long", f"a {len(content)}-character message, over {limit}"))
        if any(text in content for text in observed.hidden):
            found.append(("hidden_text_sent", repr(content[:80])))
    found += [("ping", repr(m.content[:80])) for m in observed.messages if m.pings.anyone]
    if observed.reply_to is not None:
        found += _check_replies(observed, observed.reply_to)
    if observed.suppress and any(m.embeds for m in observed.messages):
        found.append(("embed_despite_suppress", ""))
    return found


def message_body(request: RecordedRequest) -> Mapping[str, Any] | None:
    """The body of a request that shows a message (None for the others): a send or an edit
    through the channel, and of an interaction (K1, K3) a callback with a message (its
    `data`), a follow-up, or an edit of the original response or of a follow-up, when it
    carries content or embeds."""
    body = request.json if isinstance(request.json, Mapping) else {}
    if request.kind in MESSAGE_REQUESTS:
        return body
    if request.kind != "interaction" or request.method not in ("POST", "PATCH"):
        return None
    if request.path.endswith("/callback"):
        data = body.get("data")
        body = data if isinstance(data, Mapping) else {}
    return body if "content" in body or "embeds" in body else None


def _check_replies(observed: Observed, reply_to: int) -> list[Violation]:
    """F1: the stream's first message replies to `reply_to` (when it is still there: a
    moderator may have deleted it), and no later one replies."""
    texts = [m for m in observed.messages if not m.embeds]
    created = [c.message_id for c in observed.history if c.kind == "create" and not c.embeds]
    first = created[0] if created else texts[0].id if texts else None
    found: list[Violation] = []
    for message in texts:
        reference = message.message_reference
        if message.id != first:
            if reference is not None:
                found.append(("reply", "a later message is a reply"))
        elif reference is None or int(reference["message_id"]) != reply_to:
            found.append(("reply", f"the first message replies to {reference}"))
    return found


def _check_live(observed: Observed) -> list[Violation]:
    """SPEC L, from the channel's history: L3 (what each message shows, cursor and provisional
    closers aside, only grows), L4 (no cursor left behind, but for the two exceptions of the
    module docstring), E3 and L4 (every content a message showed, the cursor aside, has
    balanced fences) and L2 (none of the stream's message requests was answered 429 by the
    channel's rate limit)."""
    config = observed.config
    if config.delivery != "live":
        return []
    found: list[Violation] = []
    cursor = config.cursor
    shown: dict[int, list[str]] = {}
    last: dict[int, Change] = {}
    for change in observed.history:
        last[change.message_id] = change
        if change.kind != "delete" and not change.embeds:
            shown.setdefault(change.message_id, []).append(without_cursor(change.content, cursor))
    for message_id, contents in shown.items():
        for before, after in itertools.pairwise(contents):
            rest = before[_common(before, after) :]
            if rest.strip(PROVISIONAL):
                found.append(
                    ("shrank", f"message {message_id}: {before[-40:]!r} then {after[-40:]!r}")
                )
                break
    for message_id, change in last.items():
        if change.kind == "delete" or change.embeds or not has_cursor(change.content, cursor):
            continue
        if _cursor_excused(observed, change):
            continue
        name = "cursor_left_after_cancel" if _no_final_edit(observed, message_id) else "cursor_left"
        found.append((name, f"message {message_id}: {change.content[-40:]!r}"))
    for contents in shown.values():
        unbalanced = next((c for c in contents if not fences_balanced(c)), None)
        if unbalanced is not None:
            name = "bare_fence" if _bare_fence(unbalanced) else "fences"
            found.append((name, f"an open code block in {unbalanced[-60:]!r}"))
    limited = [r for r in observed.requests if r.kind in MESSAGE_REQUESTS and r.rate_limited]
    if any(r.rate_limited == "route" for r in limited):
        kinds = sorted({f"{r.kind} ({r.rate_limited})" for r in limited})
        found.append(("rate_limited", f"{len(limited)} message requests answered 429: {kinds}"))
    return found


def _common(before: str, after: str) -> int:
    """The length of the longest prefix `before` and `after` share."""
    common = 0
    for a, b in zip(before, after, strict=False):
        if a != b:
            break
        common += 1
    return common


def _no_final_edit(observed: Observed, message_id: int) -> bool:
    """The caller interrupted the call, and no edit of the message reached Discord after that:
    the shell made no final edit of it (known defect `cursor_left_after_cancel`)."""
    moment = observed.interrupted_at
    if not observed.interrupted() or moment is None:
        return False
    return not any(r.at >= moment - EPSILON for r in _edits_of(observed, message_id))


_BARE_FENCE: Final = re.compile(r"(?:\A|\n)[ \t]*`{3,}[^`\n]*\Z")


def _bare_fence(content: str) -> bool:
    """Whether what leaves `content`'s fences unbalanced is a fence line at its very end, with
    nothing after it (known defect `bare_fence`)."""
    match = _BARE_FENCE.search(content)
    return match is not None and fences_balanced(content[: match.start()])


def without_cursor(content: str, cursor: str) -> str:
    """A live message's content without its streaming cursor (after the text, or on a line of
    its own after a code block's provisional closing fence, L4)."""
    if cursor and content.endswith(cursor):
        return content[: -len(cursor)]
    mark = cursor.strip()
    if mark and content.endswith("\n" + mark):
        return content[: -len(mark) - 1]
    return content


def has_cursor(content: str, cursor: str) -> bool:
    return bool(cursor) and without_cursor(content, cursor) != content


def _edits_of(observed: Observed, message_id: int) -> list[RecordedRequest]:
    suffix = f"/messages/{message_id}"
    return [r for r in observed.requests if r.kind == "edit" and r.path.endswith(suffix)]


def _cursor_excused(observed: Observed, change: Change) -> bool:
    """Whether a cursor left in a message is not the stream's doing: Discord refused the last
    edit of it (its final edit, or the one before when that refusal left nothing more to
    send), or the caller interrupted the call while the request that left it was on its way,
    and Discord accepted that request after the call returned (L4's final edit came first,
    or the stream never heard of the message)."""
    edits = _edits_of(observed, change.message_id)
    if edits and edits[-1].status != 200:
        return True
    return observed.interrupted() and change.at > observed.done_at


def limit_loop(observed: Observed) -> bool:
    """Whether a stream that did not end is known defect `limit_loop`: live delivery, and the
    stream created as many messages as its `send_message_limit` or `flush_limit` allows."""
    config = observed.config
    created = sum(1 for c in observed.history if c.kind == "create" and not c.embeds)
    limits = {config.send_message_limit, config.flush_limit} - {0}
    return config.delivery == "live" and created in limits


def deleted_unseen(observed: Observed) -> list[Change]:
    """The stream's messages a moderator deleted without the stream finding out (it made no
    edit of them that Discord answered 10008 Unknown Message, so it ends otherwise than as
    `message_deleted`): they are in its `messages` as Discord last accepted them (F2)."""
    result = observed.result
    if result is not None and result.stop_reason == "message_deleted":
        return []
    return [c for c in observed.history if c.kind == "delete" and not c.embeds]


def deleted_seen(observed: Observed) -> bool:
    """Whether an edit of one of the stream's messages was answered 10008 Unknown Message: a
    moderator deleted it, and the stream found out (L9)."""
    deleted = {c.message_id for c in observed.history if c.kind == "delete"}
    return any(
        r.status == 404 and (r.fault is None or _effective(r.fault) is None)
        for message_id in deleted
        for r in _edits_of(observed, message_id)
    )


def transcript(observed: Observed) -> tuple[str, ...]:
    """What the stream's `messages` must be (F2): its messages in the channel, in order, and
    those a moderator deleted without its knowing, as they were (`deleted_unseen`)."""
    return tuple(content for _, content in _transcript(observed))


def _transcript(observed: Observed) -> list[tuple[int, str]]:
    kept = [(m.id, m.content) for m in observed.messages if not m.embeds]
    kept += [(c.message_id, c.content) for c in deleted_unseen(observed)]
    return sorted(kept)


def _check_transcript(result: StreamResult, observed: Observed) -> list[Violation]:
    """F2: the result is exactly what Discord accepted, in order, and its text is those
    contents joined by "\\n"; and the core saw no impossible event."""
    found: list[Violation] = []
    contents = transcript(observed)
    if result.messages != contents:
        name = "transcript"
        live = observed.config.delivery == "live"
        if live and sorted(result.messages) == sorted(contents):
            name = "transcript_order"  # a known defect (see `KNOWN_DEFECTS`)
        found.append((name, _messages_diff(result.messages, contents)))
    elif result.accumulated_text != "\n".join(contents):
        found.append(("transcript", _diff(result.accumulated_text, "\n".join(contents))))
    if result.messages_sent != len(contents):
        found.append(("messages_sent", f"{result.messages_sent} != {len(contents)} accepted"))
    if result.anomalies:
        found.append(("anomalies", "; ".join(result.anomalies)[:200]))
    return found


def _check_requests(result: StreamResult, observed: Observed) -> list[Violation]:
    """B4, B3, C3, C4, C7: what the requests made did to the stream (a refused one changed
    nothing in the registry)."""
    found: list[Violation] = []
    provider = observed.provider
    heard = observed.heard()
    for refused in (f for f in observed.fired if not f.accepted):  # C3: changes nothing
        changed = refused.entry is not None and refused.entry is not refused.replaced
        if changed or refused.displaced:
            found.append(("refused_changed", f"{refused.request} refused, the registry changed"))
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
            made = sorted(map(repr, contexts))
            found.append(("stop_context", f"{result.stop_context!r} not in {made}"))
    return found


def _check_stops(result: StreamResult, observed: Observed) -> list[Violation]:
    """C2, C5: a stop is never lost. Each accepted stop decided the result (the result is a
    stop's, with the context of one of the stops made: a later stop that found the stream
    stopping changes nothing), or is still the channel's entry once everything settled, or
    was replaced by a later stop while it was pending, or (C9: a channel-wide stop, streams
    sharing the channel) decided another stream's result."""
    stops = [f for f in observed.fired if f.request.kind == "stop" and f.accepted]
    contexts = {f.context for f in stops}
    if result.status == "stopped_by_user" and result.stop_context in contexts:
        return []
    found: list[Violation] = []
    left = (observed.registry_entry, *observed.registry_entries)
    for made in stops:
        kept = made.entry is not None and any(made.entry is e for e in left)
        replaced = any(
            later.replaced is made.entry or any(made.entry is d for d in later.displaced)
            for later in observed.fired
            if later is not made and later.request.kind == "stop" and later.accepted
        )
        elsewhere = made.context in observed.decided_elsewhere
        if not kept and not replaced and not elsewhere:
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
                case "message_deleted":  # L9
                    return deleted_seen(observed)
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
    deleted = deleted_seen(observed)
    return (
        not observed.heard()
        and not disturbing_faults(observed.requests)
        and not limited
        and not deleted
    )


def send_faults(requests: Iterable[RecordedRequest]) -> list[Fault]:
    """Faults consumed by message requests (sends, and live delivery's edits): these can
    change a stream's course (F4). A 429 from Discord's real rate limits counts as a
    `RateLimited` fault: it uses one of discord.py's tries too."""
    found: list[Fault] = []
    for r in requests:
        if r.kind not in MESSAGE_REQUESTS:
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
        and result.stop_reason in FIXED_REASONS
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
    its result exists by then, so an entry registered at or after it is for the next turn.

    For streams sharing a channel, each answering a user (C9), it also counts its events
    (`tick`) and notes, by that count, when each stream's reader opened (`opened`) and closed
    (`closed`, with the loop time), keyed by channel and answered user, and when each entry
    left the registry (`left_at`: consumed, replaced, discarded): the order of requests,
    streams and entries without ties of the virtual clock. It hooks the registry's own
    `_close` and `_remove`, and reads its entries (`entries`, `leaks`)."""

    def __init__(self, *, clock: Callable[[], float], max_age: float = 3600.0) -> None:
        # No entry ages out (C8) before its stream is judged: C8 has tests of its own.
        super().__init__(clock=clock, max_age=max_age)
        self.clock = clock
        self.unlistened: dict[int, float] = {}
        self._ticks = itertools.count()
        self.opened: dict[tuple[int, int | None], int] = {}
        self.closed: dict[tuple[int, int | None], tuple[int, float]] = {}
        self._left: dict[int, tuple[StopRequest, int]] = {}

    def listen(self, channel_id: int, listener: Listener) -> Callable[[], None]:
        unlisten = super().listen(channel_id, listener)

        def timed() -> None:
            unlisten()
            self.unlistened[channel_id] = self.clock()

        return timed

    def tick(self) -> int:
        """The next event count."""
        return next(self._ticks)

    def reader(self, channel_id: int, answering: int | None = None) -> StopReader:
        reader = super().reader(channel_id, answering)
        self.opened[(channel_id, answering)] = self.tick()
        return reader

    def _close(self, reader: StopReader) -> None:
        self.closed[(reader.channel_id, reader.answering)] = (self.tick(), self.clock())
        super()._close(reader)

    def _remove(self, channel_id: int, slot: Slot) -> None:
        entry = self._entries.get(channel_id, {}).get(slot)
        if entry is not None:
            self._left[id(entry.request)] = (entry.request, self.tick())
        super()._remove(channel_id, slot)

    def left_at(self, request: StopRequest) -> int | None:
        """When (`tick`) `request` left the registry; None: it is still there."""
        left = self._left.get(id(request))
        return left[1] if left is not None and left[0] is request else None

    def entries(self, channel_id: int) -> list[StopRequest]:
        """The channel's entries, every slot's, oldest first."""
        return [e.request for e in sorted(self._channel(channel_id).values(), key=lambda e: e.seq)]

    def leaks(self) -> list[StopRequest]:
        """Entries no later stream would take (C5, C9): still owed to a stream, or consumed by
        one, although no stream runs (a stream takes only an entry nobody is owed, and one a
        stream consumed is removed once no other is to resolve it)."""
        return [
            e.request
            for slots in self._entries.values()
            for e in slots.values()
            if e.owed or e.taken
        ]

    def forget(self) -> None:
        """Drop the notes of a batch that was judged."""
        self.unlistened.clear()
        self.opened.clear()
        self.closed.clear()
        self._left.clear()


def server_side(task: asyncio.Task[Any]) -> bool:
    """The emulator's own connection handlers (aiohttp's server) and its gateway's writers (one
    per websocket connection, `Gateway._write`): Discord's side, not ours."""
    name: str = getattr(task.get_coro(), "__qualname__", "")
    return name.startswith(("RequestHandler.", "Gateway."))


def leftover_tasks(before: set[asyncio.Task[Any]]) -> list[str]:
    """The tasks started since `before` and still running, the current one and the emulator's
    own aside: a stream must leave none behind (B11)."""
    current = asyncio.current_task()
    return sorted(
        getattr(t.get_coro(), "__qualname__", repr(t))
        for t in asyncio.all_tasks() - before
        if t is not current and not t.done() and not server_side(t)
    )
