"""The stream machine: `step(state, event) -> (state, effects)` (SPEC B, C4–C7, E, F2–F4, G).

Theory of operation
-------------------
One machine runs one stream. It never performs I/O and never reads a clock: the shell feeds
it events (`cordstream.domain.events`) carrying `now`, and carries out the effects it returns
(`cordstream.domain.effects`). Its phases:

    ready ──Started──▶ streaming ──(end of text, stop, error, timeout, limit)──▶ ending ──▶ finished
      └──Started(pending request)──────────────────────────────────────────────▲

*streaming*: chunks arrive. Per chunk (B5): the deadline moves to `now + timeout`; thoughts,
serving provider, terminal metadata and usage (latest valid report wins) are recorded; then
the chunk is routed (B6): text goes through think/details capture
(`cordstream.domain.capture`) and segmentation (`cordstream.domain.segments`) into the outbox;
a function call or an error ends the stream after a *pending flush*. The shell checks the registry
before each chunk and feeds a `StopRequested`; it also calls `on_stream_progress` itself, before
`process_chunk` (B5).

*ending*: the outcome is decided; the outbox drains (one Discord request at a time), then an
embed if one is due, then `Finish`. A stop or follow-up may still arrive meanwhile (Discord can
keep the last message waiting for seconds, a 429 say): see "Requests while the stream ends"
below. A Discord failure during delivery ends it quietly (10003 → `channel_deleted`, 50001 →
`missing_access`) or as an `error` (F4, B13).

*finished*: every event is a no-op. `Finish` is emitted exactly once.

Time is data (aioquic style). The state holds the inactivity `deadline`; the shell's timer is
armed by `ArmTimer(at)` and reports `TimerFired(armed_for=at)`. A chunk only moves the deadline
(no effect, no timer call per chunk); when the timer fires early because chunks kept coming, the
machine re-arms it at the current deadline. A `TimerFired` for an older arming is stale: no-op.

Delivery (F2, F3, E9). Discord outcomes come back as `Delivered`/`Rejected`; only accepted
content enters the result: `messages` in order, and `accumulated_text`, their join by "\\n",
built once when the result is. Pieces that are ready at the same moment share a message at
degrees 0 and 1 (one chunk finished several lines, or Discord was still busy with the previous
message), which keeps a fast model under Discord's per-channel rate limit. Degrees 2 and 3 send
one piece per message and pause before each further message as if typing (10 ms per
character, 0.75–4 s, counted from the previous message). A stop, a timeout or an error
delivers what is left at once, without pauses.

Requests while the stream ends (C2, C5–C7). The outcome being delivered has an origin: the
stream's own course (`completed`, `function_call`, `timeout`, `error`: *natural*), a
follow-up, a user or system stop, or an internal stop (a limit, a lost channel, or a stop
registered with an internal id, F3, F4). Until `Finish` (the result exists), an entry the
registry hands over is resolved by this table, first match wins:

    arriving    outcome so far             what happens
    follow-up   natural                    consumed; the outcome becomes follow_up_interrupt and
                                           the undelivered text is dropped (C6)
    follow-up   anything else              not consumed: left for the stream that answers it
    stop        natural or follow-up       consumed; the stop wins (C2): stopped_by_user with
                                           its reason and context (C4, C7); a user or system
                                           stop delivers the text still undelivered, including
                                           what a follow-up had dropped (C6); an internal id
                                           sends nothing more
    stop        user or system stop        consumed, changes nothing: the stream is already
                                           doing what it asks (the first stop's reason and
                                           context stay)
    stop        internal stop              not consumed: the outcome is fixed (nothing more can
                                           be sent, the status cannot change), so the entry stays
                                           in the registry for the bot to see (`has_stop_request`)

So a stop is never silently lost: it decides the result, or the stream already stops for a
stop, or it stays in the registry. After `Finish` every event is a no-op: an entry registered
then stays for the next stream. `stop_context` is the context of the stop that decided the
outcome: kept when the channel is lost during its flush (the quiet F4 ending keeps it), None
for a follow-up and for the stream's own internal stops.

Rules chosen where the SPEC is silent:
- A chunk may have skipped its constructor's validation (a subclass overriding
  `__post_init__`, a field set afterwards with `object.__setattr__`): every chunk off the hot
  path is re-checked (`cordstream.domain.chunks.check`; the hot path only takes a `str` it can
  append) and a bad field ends the stream like a value that is not a chunk at all: `error` with the
  TypeError as data, pending text not flushed, the generic embed (B13). So `step` stays
  total (B1).
- Every message is passed through `graphemes.sendable` as it is sent: a surrogate pair becomes
  the character it encodes and a lone surrogate U+FFFD, which is what Discord shows, so
  `accumulated_text` is exactly the channel's text (F2) and a message only gets shorter (E7).
  Done once per message, not per chunk (a pair split across two chunks is whole by then, and
  no cut falls between its halves); it costs a flag test for ASCII text.

Performance: a plain text chunk that completes no line touches only the top-level `deadline`
and `tail`, so the hot path builds one small record; everything else lives in `Core`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal, TypeAlias, assert_never

from cordstream.domain import capture, segments
from cordstream.domain.catalogue import DEFAULT_CATALOGUE, Catalogue
from cordstream.domain.chunks import (
    DoneChunk,
    ErrorChunk,
    FunctionCall,
    FunctionCallChunk,
    ProviderError,
    TextChunk,
)
from cordstream.domain.chunks import check as check_chunk
from cordstream.domain.config import StreamConfig
from cordstream.domain.effects import (
    ArmTimer,
    CloseProvider,
    ConsumeRequest,
    Effect,
    Finish,
    SendEmbed,
    SendMessage,
    TypingPause,
)
from cordstream.domain.embeds import (
    EmbedSpec,
    exception_embed,
    flush_limit_embed,
    provider_error_embed,
    timeout_embed,
)
from cordstream.domain.events import (
    ChunkArrived,
    Delivered,
    DiscordFailure,
    Event,
    PauseOver,
    ProviderCrashed,
    ProviderEnded,
    Rejected,
    Started,
    StopRequested,
    TimerFired,
)
from cordstream.domain.graphemes import sendable
from cordstream.domain.redact import NO_SECRETS, Secrets
from cordstream.domain.requests import StopRequest, is_internal, stop_reason
from cordstream.domain.results import StopReason, StreamResult, StreamStatus, ThoughtLog
from cordstream.domain.usage import TokenUsage, normalize_usage

Phase: TypeAlias = Literal["ready", "streaming", "ending", "finished"]
# Who decided the outcome (see "Requests while the stream ends" in the module docstring): the
# stream's own course, a follow-up, a user or system stop, or an internal stop.
Origin: TypeAlias = Literal["natural", "follow_up", "stop", "internal"]
# A persistent list (newest first) so that appending never copies: O(1) per piece (E10).
Rope: TypeAlias = "tuple[Rope, str] | None"
# Builds an embed from (locale, catalogue, secrets); only called when embeds are not
# suppressed (G7).
_EmbedBuilder: TypeAlias = Callable[[str, Catalogue, Secrets], EmbedSpec]

UNKNOWN_CHANNEL: Final = 10003
MISSING_ACCESS: Final = 50001
_QUIET_FAILURES: Final[dict[int, StopReason]] = {
    UNKNOWN_CHANNEL: "channel_deleted",
    MISSING_ACCESS: "missing_access",
}
TYPING_SECONDS_PER_CHAR: Final = 0.01
TYPING_MIN_SECONDS: Final = 0.75
TYPING_MAX_SECONDS: Final = 4.0
_PAUSE_SLACK: Final = 0.001  # a pause that ends this close to its target counts as over
_NO_EFFECTS: Final[tuple[Effect, ...]] = ()


@dataclass(frozen=True, slots=True)
class Settings:
    """What the stream was started with; constant for its whole life."""

    config: StreamConfig
    locale: str
    suppress_user_errors: bool
    catalogue: Catalogue
    secrets: Secrets = NO_SECRETS  # removed from every embed by value (G4)


@dataclass(frozen=True, slots=True)
class Record:
    """What the result reports besides delivery (B5, B9, E4, E5)."""

    usage: TokenUsage | None = None
    metadata: Mapping[str, object] | None = None
    serving_provider: str | None = None
    summary: Rope = None
    raw: Rope = None
    details: Rope = None  # finished <details> bodies
    details_block: Rope = None  # the block being read


@dataclass(frozen=True, slots=True)
class Outbox:
    """Pieces waiting for Discord, the one request in flight, and what Discord accepted (F2)."""

    queue: tuple[segments.Piece, ...] = ()
    in_flight: int | None = None  # seq of the outstanding request
    in_flight_text: str | None = None  # its content; None for an embed
    delivered: Rope = None
    sent: int = 0
    last_sent_at: float = -math.inf
    first_url: str | None = None
    pause: int | None = None  # token of the typing pause in progress
    next_seq: int = 1

    # The three transitions of every message, built directly: `dataclasses.replace` costs
    # several times more and these run once per piece or message.

    def enqueue(self, pieces: list[segments.Piece]) -> Outbox:
        return Outbox(
            self.queue + tuple(pieces),
            self.in_flight,
            self.in_flight_text,
            self.delivered,
            self.sent,
            self.last_sent_at,
            self.first_url,
            self.pause,
            self.next_seq,
        )

    def sending(self, taken: int, text: str) -> Outbox:
        """The first `taken` pieces leave the queue as message `next_seq`."""
        seq = self.next_seq
        return Outbox(
            self.queue[taken:],
            seq,
            text,
            self.delivered,
            self.sent,
            self.last_sent_at,
            self.first_url,
            self.pause,
            seq + 1,
        )

    def accepted(self, now: float, url: str | None) -> Outbox:
        """Discord accepted the request in flight (F2: only accepted content counts)."""
        text = self.in_flight_text
        if text is None:  # an embed
            return replace(self, in_flight=None)
        return Outbox(
            self.queue,
            None,
            None,
            (self.delivered, text),
            self.sent + 1,
            now,
            self.first_url if self.first_url is not None else url,
            self.pause,
            self.next_seq,
        )


@dataclass(frozen=True, slots=True)
class Ending:
    """The decided outcome, waiting for the outbox to drain."""

    status: StreamStatus
    origin: Origin
    data: object = None
    stop_reason: StopReason | None = None
    stop_context: object = None
    function_calls: tuple[FunctionCall, ...] = ()
    embed: EmbedSpec | None = None  # sent after the text; None once sent or if suppressed
    hurry: bool = False  # deliver the rest without humanizer pauses
    # A follow-up's outcome: the pending text it dropped (C6), which a stop that overrides the
    # follow-up before the result exists delivers after all (C2).
    dropped: tuple[segments.Piece, ...] = ()


@dataclass(frozen=True, slots=True)
class Core:
    """Everything but the two fields a plain text chunk changes."""

    phase: Phase
    settings: Settings
    timeout: float  # settings.config.inactivity_timeout, one lookup away for the hot path
    started_at: float
    armed_at: float  # what the shell's timer is armed for; nan when not armed
    # Longest tail the hot path may build without looking at it; -1 = take the slow path.
    tail_room: int
    capture: capture.Capture
    seg: segments.Segmenter
    record: Record
    out: Outbox
    ending: Ending | None


@dataclass(frozen=True, slots=True)
class StreamState:
    """The machine's state. `deadline`: when the stream times out; `tail`: the partial line."""

    deadline: float
    tail: str
    core: Core

    @property
    def phase(self) -> Phase:
        return self.core.phase

    @property
    def wants_chunks(self) -> bool:
        """Whether the shell should keep reading the provider."""
        return self.core.phase == "streaming"


def initial_state(
    config: StreamConfig,
    *,
    locale: str = "en",
    suppress_user_errors: bool = False,
    catalogue: Catalogue = DEFAULT_CATALOGUE,
    secrets: Secrets = NO_SECRETS,
) -> StreamState:
    """A machine in phase `ready`, waiting for `Started`; `secrets` are removed from every
    embed it composes (G4)."""
    settings = Settings(config, locale, suppress_user_errors, catalogue, secrets)
    core = Core(
        phase="ready",
        settings=settings,
        timeout=config.inactivity_timeout,
        started_at=0.0,
        armed_at=math.nan,
        tail_room=-1,
        capture=capture.IDLE,
        seg=_fresh_segmenter(config),
        record=Record(),
        out=Outbox(),
        ending=None,
    )
    return StreamState(math.inf, "", core)


def step(state: StreamState, event: Event) -> tuple[StreamState, tuple[Effect, ...]]:
    """Apply one event. Total: any event in any phase gives a state and effects, never raises."""
    # The hot path (E10): plain text that completes no line and needs no capture.
    if type(event) is ChunkArrived:
        chunk = event.chunk
        if type(chunk) is TextChunk and chunk.usage is None and not chunk.thoughts:
            core = state.core
            if chunk.serving_provider is not None and core.record.serving_provider is None:
                return _slow(state, event)  # the first serving provider is recorded (B5)
            text = chunk.content
            tail = state.tail
            try:  # free unless it raises: a content smuggled past validation goes the slow way
                if len(tail) + len(text) <= core.tail_room and "\n" not in text and "<" not in text:
                    return StreamState(event.now + core.timeout, tail + text, core), _NO_EFFECTS
            except TypeError:
                pass  # `_Run.chunk` checks it and ends the stream (B1, B13)
    return _slow(state, event)


def abandon(state: StreamState, error: BaseException, now: float) -> StreamResult:
    """The result of a stream the shell cannot drive to its end: `error`, with what Discord
    accepted so far (B1, B9). For the shell's last resort; a finished state keeps its result.
    """
    run = _Run(state)
    run.ending = Ending("error", "natural", error)
    run.finish(now)
    finish = run.effects[-1]
    assert isinstance(finish, Finish)  # finish() always ends with it
    return finish.result


def _slow(state: StreamState, event: Event) -> tuple[StreamState, tuple[Effect, ...]]:
    if state.core.phase == "finished":
        return state, _NO_EFFECTS  # nothing follows the result (B1)
    run = _Run(state)
    run.handle(event)
    return run.result()


class _Run:
    """One `step` call's scratch space: the state being rebuilt and the effects so far.

    It exists only for the length of one call, so `step` stays a pure function; it keeps the
    many small transitions readable without threading `(state, effects)` through each.
    """

    def __init__(self, state: StreamState) -> None:
        core = state.core
        self.deadline = state.deadline
        self.tail = state.tail
        self.phase: Phase = core.phase
        self.settings = core.settings
        self.timeout = core.timeout
        self.started_at = core.started_at
        self.armed_at = core.armed_at
        self.capture = core.capture
        self.seg = core.seg
        self.record = core.record
        self.out = core.out
        self.ending = core.ending
        self.effects: list[Effect] = []

    def result(self) -> tuple[StreamState, tuple[Effect, ...]]:
        room = -1
        if self.phase == "streaming" and self.capture is capture.IDLE:
            room = self.seg.tail_room
        core = Core(
            self.phase,
            self.settings,
            self.timeout,
            self.started_at,
            self.armed_at,
            room,
            self.capture,
            self.seg,
            self.record,
            self.out,
            self.ending,
        )
        return StreamState(self.deadline, self.tail, core), tuple(self.effects)

    # -- dispatch ------------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        phase = self.phase
        match event:
            case Started(now=now, pending=pending):
                if phase == "ready":
                    self.start(now, pending)
            case ChunkArrived(now=now, chunk=chunk, headline=headline):
                if phase == "streaming":
                    self.deadline = now + self.timeout
                    self.chunk(chunk, headline, now)
            case ProviderEnded(now=now):
                if phase == "streaming":
                    data = self.record.metadata
                    self.end(Ending("completed", "natural", data), "deliver", now)
            case ProviderCrashed(now=now, error=error):
                if phase == "streaming":
                    self.crash(error, now)
            case StopRequested(now=now, request=request):
                if phase in ("streaming", "ending"):
                    self.request(request, now)
            case TimerFired(now=now, armed_for=armed_for):
                if phase == "streaming" and armed_for == self.armed_at:
                    self.timer(now)
            case PauseOver(now=now, token=token):
                if self.out.pause == token:
                    self.out = replace(self.out, pause=None)
                    self.pump(now)
            case Delivered(now=now, seq=seq, url=url):
                if self.out.in_flight == seq:
                    self.delivered(now, url)
            case Rejected(now=now, seq=seq, failure=failure):
                if self.out.in_flight == seq:
                    self.rejected(now, failure)
            case _:
                assert_never(event)

    # -- the stream's course -------------------------------------------------------------

    def start(self, now: float, pending: StopRequest | None) -> None:
        self.phase = "streaming"
        self.started_at = now
        if pending is not None:
            self.request(pending, now)  # B4: resolved before the provider is read
            return
        self.deadline = now + self.timeout
        self.arm(self.deadline)

    def arm(self, at: float) -> None:
        self.armed_at = at
        self.effects.append(ArmTimer(at))

    def timer(self, now: float) -> None:
        if now < self.deadline:
            self.arm(self.deadline)  # chunks moved the deadline since the timer was armed
            return
        embed = self.embed(
            lambda loc, cat, sec: timeout_embed(locale=loc, catalogue=cat, secrets=sec)
        )
        self.end(Ending("timeout", "natural", embed=embed, hurry=True), "deliver", now)

    def chunk(self, chunk: object, headline: str | None, now: float) -> None:
        if not isinstance(chunk, TextChunk | FunctionCallChunk | ErrorChunk | DoneChunk):
            problem = TypeError(
                f"process_chunk returned {type(chunk).__name__}, expected a ProcessedChunk"
            )
            self.crash(problem, now)
            return
        if not _plain_text(chunk):  # a subclass or a field set after validation? (B1)
            invalid = _invalid(chunk)
            if invalid is not None:
                self.crash(invalid, now)
                return
        self.note(chunk)
        match chunk:
            case TextChunk(content=text):
                if text:
                    self.text(text, now)
            case FunctionCallChunk():
                calls = chunk.calls
                if calls:
                    ending = Ending("function_call", "natural", calls[0], function_calls=calls)
                    self.end(ending, "deliver", now)
            case ErrorChunk(error=error):
                if error is not None:
                    self.provider_error(error, headline, now)
            case DoneChunk():
                pass  # metadata is recorded by `note`; the provider goes on until exhausted

    def note(self, chunk: TextChunk | FunctionCallChunk | ErrorChunk | DoneChunk) -> None:
        """B5: thoughts, serving provider, terminal metadata, usage — in that order."""
        record = self.record
        changed = False
        summary, raw = record.summary, record.raw
        for thought in chunk.thoughts:
            if thought.content:
                changed = True
                if thought.kind == "summary":
                    summary = (summary, thought.content)
                else:
                    raw = (raw, thought.content)
        serving = record.serving_provider
        if serving is None and chunk.serving_provider:
            serving, changed = chunk.serving_provider, True
        metadata = record.metadata
        if isinstance(chunk, DoneChunk) and chunk.metadata:
            metadata, changed = chunk.metadata, True
        usage = record.usage
        if chunk.usage is not None:
            latest = normalize_usage(chunk.usage)
            if latest is not None:
                usage, changed = latest, True
        if changed:
            record = replace(
                record,
                summary=summary,
                raw=raw,
                serving_provider=serving,
                metadata=metadata,
                usage=usage,
            )
            self.record = record

    def text(self, text: str, now: float) -> None:
        if self.capture is capture.IDLE and "<" not in text:
            self.visible(text)
        else:
            fence, line = segments.context(self.seg, self.tail)
            self.capture, ops = capture.feed(self.capture, text, fence=fence, line=line)
            self.apply(ops)
        self.pump(now)

    def apply(self, ops: list[capture.Op]) -> None:
        for kind, text in ops:
            record = self.record
            match kind:
                case "visible":
                    self.visible(text)
                    continue
                case "retract":
                    self.retract()
                    continue
                case "think_open":
                    if record.raw is not None:
                        record = replace(record, raw=(record.raw, "\n\n"))
                case "think":
                    record = replace(record, raw=(record.raw, text))
                case "details":
                    record = replace(record, details_block=(record.details_block, text))
                case "details_end":
                    body = _join(record.details_block).strip()
                    details = (record.details, body) if body else record.details
                    record = replace(record, details=details, details_block=None)
            self.record = record

    def visible(self, text: str) -> None:
        self.seg, self.tail, pieces = segments.feed(self.seg, self.tail, text)
        if pieces:
            self.out = self.out.enqueue(pieces)

    def retract(self) -> None:
        """E4: a stray closing think tag; what was not sent yet was reasoning after all."""
        unsent = "".join(piece.body for piece in self.out.queue) + self.seg.buffered + self.tail
        raw = self.record.raw
        if unsent.strip():
            raw = (raw if raw is None else (raw, "\n\n"), unsent.strip())
        self.record = replace(self.record, raw=raw)
        self.seg = _fresh_segmenter(self.settings.config)
        self.out = replace(self.out, queue=())
        self.tail = ""

    def provider_error(self, error: ProviderError, headline: str | None, now: float) -> None:
        embed = self.embed(
            lambda loc, cat, sec: provider_error_embed(
                error, headline, locale=loc, catalogue=cat, secrets=sec
            )
        )
        self.end(Ending("error", "natural", error, embed=embed, hurry=True), "deliver", now)

    def crash(self, error: BaseException, now: float) -> None:
        """B13: the stream is broken; nothing pending is flushed."""
        embed = self.embed(
            lambda loc, cat, sec: exception_embed(error, locale=loc, catalogue=cat, secrets=sec)
        )
        self.end(Ending("error", "natural", error, embed=embed, hurry=True), "discard", now)

    def embed(self, build: _EmbedBuilder) -> EmbedSpec | None:
        settings = self.settings
        if settings.suppress_user_errors:
            return None  # G7
        return build(settings.locale, settings.catalogue, settings.secrets)

    # -- requests (C4–C7) ----------------------------------------------------------------

    def request(self, request: StopRequest, now: float) -> None:
        """C2, C5–C7: resolve, absorb or leave a registry entry (see the module docstring)."""
        ending = self.ending
        if ending is not None:
            origin = ending.origin
            if request.kind == "follow_up":
                if origin != "natural":
                    return  # left in the registry for the stream that will answer it (C5)
            elif origin == "stop":
                self.effects.append(ConsumeRequest(request))  # already stopping: absorbed (C5)
                return
            elif origin == "internal":
                return  # the outcome is fixed: left in the registry for the bot to see (C5)
            # Otherwise the request overrides an outcome the stream reached on its own, or a
            # stop overrides a follow-up (C2): the text the follow-up dropped is pending again.
            elif ending.dropped:
                self.out = replace(self.out, queue=self.out.queue + ending.dropped)
        self.effects.append(ConsumeRequest(request))
        reason = stop_reason(request)
        if request.kind == "follow_up":
            # Nothing of it is sent: a typing pause in progress is over (E9), no reason to wait.
            resolved = Ending("follow_up_interrupt", "follow_up", stop_reason=reason, hurry=True)
            self.end(resolved, "discard", now)
        elif is_internal(request):
            self.internal_stop(reason, now, context=request.context)
        else:
            resolved = Ending(
                "stopped_by_user",
                "stop",
                stop_reason=reason,
                stop_context=request.context,
                hurry=True,
            )
            self.end(resolved, "deliver", now)  # C6: a user or system stop flushes

    def internal_stop(self, reason: StopReason, now: float, *, context: object = None) -> None:
        """C4, C6, F3, F4: the stream stops itself; nothing more is sent (but one warning).

        `context`: an internal stop id registered from outside keeps its caller's context (C7).
        """
        embed = None
        if reason == "flush_limit":
            embed = self.embed(
                lambda loc, cat, sec: flush_limit_embed(locale=loc, catalogue=cat, secrets=sec)
            )
        ending = Ending(
            "stopped_by_user",
            "internal",
            stop_reason=reason,
            stop_context=context,
            embed=embed,
            hurry=True,
        )
        self.end(ending, "discard", now)

    # -- ending --------------------------------------------------------------------------

    def end(self, ending: Ending, pending: Literal["deliver", "discard"], now: float) -> None:
        """Decide the outcome; deliver or discard what is pending (E8, C6, B13); drain."""
        # A follow-up keeps what it drops aside: a stop may still override it (C2).
        keep = pending == "deliver" or ending.origin == "follow_up"
        if self.phase == "streaming":
            self.effects.append(CloseProvider())
            self.capture, ops = capture.close(self.capture)
            if not keep:
                ops = [op for op in ops if op[0] != "visible"]
            self.apply(ops)
            queue: tuple[segments.Piece, ...] = ()
            if keep:
                pieces = segments.flush(self.seg, self.tail, close_markers=True)
                queue = self.out.queue + tuple(pieces)
            self.seg = _fresh_segmenter(self.settings.config)
            self.out = replace(self.out, queue=queue)
            self.tail = ""
        if pending == "discard":
            if keep:
                ending = replace(ending, dropped=self.out.queue)
            self.out = replace(self.out, queue=())
        self.phase = "ending"
        self.ending = ending
        self.pump(now)

    def pump(self, now: float) -> None:
        """Start the next Discord request if none is in flight; finish when all is done."""
        out, ending = self.out, self.ending
        if out.in_flight is not None:
            return
        hurry = ending is not None and ending.hurry
        if out.pause is not None:
            if not hurry:
                return
            out = replace(out, pause=None)  # E9: a stop interrupts the typing pause
        config = self.settings.config
        degree = config.humanizer_degree
        while out.queue and (ending is not None or degree > 0):
            one_each = degree >= 2 and not hurry
            content, taken = _take(out.queue, config.max_message_length, one_each=one_each)
            if not content:
                out = replace(out, queue=out.queue[taken:])  # only whitespace: never sent (E6)
                continue
            content = sendable(content)  # what Discord will show (F2); never longer (E7)
            limit = _limit_reached(config, out.sent)
            if limit is not None:
                self.out = out
                self.hit_limit(limit, now)
                return
            if degree >= 2 and not hurry and out.sent:
                ready_at = out.last_sent_at + _typing_seconds(len(content))
                if now + _PAUSE_SLACK < ready_at:
                    token = out.next_seq
                    self.effects.append(TypingPause(token, ready_at - now))
                    self.out = replace(out, pause=token, next_seq=token + 1)
                    return
            self.effects.append(SendMessage(out.next_seq, content, reply=out.sent == 0))
            self.out = out.sending(taken, content)
            return
        self.out = out
        if ending is None or out.queue:
            return
        if ending.embed is not None:
            seq = out.next_seq
            self.effects.append(SendEmbed(seq, ending.embed))
            out = replace(out, in_flight=seq, in_flight_text=None, next_seq=seq + 1)
            self.out = out
            self.ending = replace(ending, embed=None)
            return
        self.finish(now)

    def hit_limit(self, reason: StopReason, now: float) -> None:
        ending = self.ending
        if ending is not None and ending.origin != "natural":
            # Already stopping for a request or an internal reason: just stop sending.
            self.out = replace(self.out, queue=())
            self.pump(now)
            return
        self.internal_stop(reason, now)

    def delivered(self, now: float, url: str | None) -> None:
        self.out = self.out.accepted(now, url)
        self.pump(now)

    def rejected(self, now: float, failure: DiscordFailure) -> None:
        out = self.out
        was_message = out.in_flight_text is not None
        self.out = replace(out, in_flight=None, in_flight_text=None)
        if not was_message:
            self.pump(now)  # a refused embed changes no outcome (G is best effort)
            return
        quiet = _QUIET_FAILURES.get(failure.code) if failure.code is not None else None
        ending = self.ending
        if quiet is not None:
            # F4: the channel is gone or closed to us; no embed could reach it either. A stop
            # being flushed keeps its context: its registry entry is already consumed (C7).
            context = ending.stop_context if ending is not None else None
            resolved = Ending(
                "stopped_by_user", "internal", stop_reason=quiet, stop_context=context, hurry=True
            )
            self.end(resolved, "discard", now)
        elif ending is None or (ending.origin == "natural" and ending.status != "error"):
            error: object = failure.error if failure.error is not None else failure
            embed = self.embed(
                lambda loc, cat, sec: exception_embed(error, locale=loc, catalogue=cat, secrets=sec)
            )
            self.end(Ending("error", "natural", error, embed=embed, hurry=True), "discard", now)
        else:
            # The first error or a stop stays the outcome; nothing more is sent after a refusal,
            # not even what a follow-up dropped, should a stop override it now.
            self.end(replace(ending, dropped=()), "discard", now)

    def finish(self, now: float) -> None:
        ending, record, out = self.ending, self.record, self.out
        assert ending is not None
        status = ending.status
        if status == "completed" and out.sent == 0:
            status = "empty_response"  # B8: keeps data, usage and thought log
        log = ThoughtLog(
            summary=_join(record.summary) or None,
            raw=_join(record.raw) or None,
            serving_provider=record.serving_provider,
            first_reply_url=out.first_url,
            generation_duration_ms=max(0, round((now - self.started_at) * 1000)),
        )
        details = "\n\n".join(_items(record.details)) or None
        messages = tuple(_items(out.delivered))
        result = StreamResult(
            status=status,
            data=ending.data,
            accumulated_text="\n".join(messages),  # F2: what a user copies from the channel
            details_content=details,
            stop_reason=ending.stop_reason,
            thought_log=log,
            usage=record.usage,
            messages_sent=out.sent,
            stop_context=ending.stop_context,
            function_calls=ending.function_calls,
            messages=messages,
        )
        self.effects.append(Finish(result))
        self.phase = "finished"


def _plain_text(chunk: object) -> bool:
    """A `TextChunk` as built, without thoughts: the common case, too cheap to check further."""
    return (
        type(chunk) is TextChunk
        and type(chunk.content) is str
        and type(chunk.thoughts) is tuple
        and not chunk.thoughts
        and (chunk.serving_provider is None or type(chunk.serving_provider) is str)
    )


def _invalid(chunk: TextChunk | FunctionCallChunk | ErrorChunk | DoneChunk) -> Exception | None:
    """Why a chunk of a subclass cannot be trusted (its constructor's TypeError), or None."""
    try:
        check_chunk(chunk)
    except Exception as error:  # a field the checks cannot even read is as bad
        return error
    return None


def _fresh_segmenter(config: StreamConfig) -> segments.Segmenter:
    return segments.new_segmenter(config.max_message_length, sentences=config.humanizer_degree == 3)


def _limit_reached(config: StreamConfig, sent: int) -> StopReason | None:
    """F3: the next send would pass a limit."""
    if config.send_message_limit and sent >= config.send_message_limit:
        return "send_message_limit"
    if config.flush_limit and sent >= config.flush_limit:
        return "flush_limit"
    return None


def _typing_seconds(length: int) -> float:
    return min(TYPING_MAX_SECONDS, max(TYPING_MIN_SECONDS, TYPING_SECONDS_PER_CHAR * length))


def _take(queue: tuple[segments.Piece, ...], max_len: int, *, one_each: bool) -> tuple[str, int]:
    """The next message's content and how many pieces it uses (packing, E7, E9).

    A piece of a code block starts on its own line when packed after other text. Whitespace
    around the message is trimmed (Discord does too); whitespace-only content comes back as "".
    `one_each` (degrees 2 and 3): one piece per message, but a punctuation-only piece is never
    a message of its own when a piece next to it is queued and both fit (E6): it goes with the
    piece after it, or with the one before (the segmenter's leftovers at the end of a stream).
    """
    parts: list[str] = []
    size = 0
    taken = 0
    previous: segments.Piece | None = None
    substantive = False  # a piece with more than whitespace and punctuation is taken
    for piece in queue:
        text = piece.text
        separator = ""
        if (
            previous is not None
            and (piece.code or segments.ends_in_fence(previous))
            and not parts[-1].endswith("\n")
        ):
            separator = "\n"
        # Whitespace at the end of the message is trimmed: a piece's own does not count (E7).
        if parts and size + len(separator) + len(text.rstrip()) > max_len:
            break
        parts.append(separator + text)
        size += len(separator) + len(text)
        taken += 1
        previous = piece
        if one_each and not substantive and text.strip() and not segments.lone(piece):
            substantive = True
        if substantive and not _lone_follows(queue, taken):
            break
    return "".join(parts).strip(), taken


def _lone_follows(queue: tuple[segments.Piece, ...], start: int) -> bool:
    """Whether the first piece from `start` on that is not whitespace is punctuation-only."""
    for index in range(start, len(queue)):
        piece = queue[index]
        if piece.text.strip():
            return segments.lone(piece)
    return False


def _items(rope: Rope) -> list[str]:
    items: list[str] = []
    while rope is not None:
        rope, item = rope
        items.append(item)
    items.reverse()
    return items


def _join(rope: Rope) -> str:
    return "".join(_items(rope))
