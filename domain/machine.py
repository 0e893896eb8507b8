"""The stream machine: `step(state, event) -> (state, effects)` (SPEC B, C, E, F, G).

Theory of operation
-------------------
One machine runs one stream. It never performs I/O and never reads a clock: the shell feeds
it events (`cordstream.domain.events`) carrying `now`, and carries out the effects it returns
(`cordstream.domain.effects`). Its phases:

    ready ──Started──▶ streaming ──(end of text, stop, error, timeout, limit)──▶ ending ──▶ finished
      └──Started(pending request)──────────────────────────────────────────────▲

*streaming*: chunks arrive. Per chunk (B5): the deadline moves to `now + timeout`; thoughts,
serving provider, terminal metadata and usage are recorded (`record`); then the chunk is routed
(B6): text goes through think/details capture (`capture`) and segmentation (`segments`) to the
delivery policy (`outbox`); a function call or an error ends the stream after a *pending
flush*. The shell checks the registry before each chunk and feeds a `StopRequested`; it also
calls `on_stream_progress` itself, before `process_chunk` (B5).

*ending*: the outcome is decided; the outbox drains (one Discord request at a time), then an
embed if one is due, then `Finish`. A stop or follow-up may still arrive meanwhile (Discord can
keep the last message waiting for seconds): `requests.resolve` says what it does (C2, C5–C7).
A Discord failure during delivery ends the stream quietly (10003 → `channel_deleted`, 50001 →
`missing_access`) or as an `error` (F4, B13).

*finished*: every event is a no-op. `Finish` is emitted exactly once.

This module keeps the phases, the routing and stop resolution. Delivery (packing pieces into
messages, pacing, limits, what Discord accepted) is `outbox`'s; what a result reports besides
is `record`'s; the registry's rules are `requests`'.

Time is data (aioquic style). The state holds the inactivity `deadline`; the shell's timer is
armed by `ArmTimer(at)` and reports `TimerFired(armed_for=at)`. A chunk only moves the deadline
(no effect, no timer call per chunk); when the timer fires early because chunks kept coming, the
machine re-arms it at the current deadline.

Impossible events are visible. Which event does what in which phase is one table, in
`_Run.handle` (as in h2): an event a correct shell never feeds (an answer to a request that is
not in flight, a chunk outside streaming, …) changes nothing but is recorded in the state's
`anomalies` and in the result's, where tests, the soak and a bot's logs can see it. `step`
stays total (B1), so it records rather than raises.

Rules chosen where the SPEC is silent:
- A chunk may have skipped its constructor's validation: every chunk off the hot path is
  re-checked (`chunks.trusted`) and a bad one ends the stream like a value that is not a chunk
  at all: `error` with the TypeError as data, pending text not flushed, the generic embed (B13).
- `stop_context` is the context of the stop that decided the outcome: kept when the channel is
  lost during its flush (the quiet F4 ending keeps it), None for a follow-up and for the
  stream's own internal stops.

Performance (E10): a plain text chunk that completes no line touches only the top-level
`deadline` and `tail`, so the hot path builds one small record. Whether it may is the
segmenter's to say (`segments.try_append`): its fast path is off in a new segmenter (before
streaming, once the stream ends) and while a capture is open (`segments.hold`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, Literal, TypeAlias

from cordstream.domain import capture, chunks, outbox, segments
from cordstream.domain import record as records
from cordstream.domain.catalogue import DEFAULT_CATALOGUE, Catalogue
from cordstream.domain.chunks import (
    DoneChunk,
    ErrorChunk,
    FunctionCall,
    FunctionCallChunk,
    ProviderError,
    TextChunk,
)
from cordstream.domain.config import StreamConfig
from cordstream.domain.effects import ArmTimer, CloseProvider, ConsumeRequest, Effect, Finish
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
from cordstream.domain.redact import NO_SECRETS, Secrets
from cordstream.domain.requests import Origin, StopRequest, is_internal, resolve, stop_reason
from cordstream.domain.results import StopReason, StreamResult, StreamStatus

Phase: TypeAlias = Literal["ready", "streaming", "ending", "finished"]
# Builds an embed from (locale, catalogue, secrets); only called when embeds are not
# suppressed (G7).
_EmbedBuilder: TypeAlias = Callable[[str, Catalogue, Secrets], EmbedSpec]

UNKNOWN_CHANNEL: Final = 10003
MISSING_ACCESS: Final = 50001
_QUIET_FAILURES: Final[dict[int, StopReason]] = {
    UNKNOWN_CHANNEL: "channel_deleted",
    MISSING_ACCESS: "missing_access",
}
_NO_EFFECTS: Final[tuple[Effect, ...]] = ()
_try_append: Final = segments.try_append  # one lookup less on the hot path


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What the stream was started with; constant for its whole life."""

    config: StreamConfig
    locale: str
    suppress_user_errors: bool
    catalogue: Catalogue
    secrets: Secrets = NO_SECRETS  # removed from every embed by value (G4)


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
    dropped: outbox.Pieces = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Core:
    """Everything but the two fields a plain text chunk changes, one sub-record per concern."""

    phase: Phase
    settings: Settings
    seg: segments.Segmenter
    started_at: float = 0.0
    armed_at: float = math.nan  # what the shell's timer is armed for; nan when not armed
    capture: capture.Capture = capture.IDLE
    record: records.Record = records.EMPTY
    out: outbox.Outbox = outbox.EMPTY
    ending: Ending | None = None
    anomalies: tuple[str, ...] = ()  # events a correct shell never feeds (see `_Run.handle`)


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
    settings = Settings(
        config=config,
        locale=locale,
        suppress_user_errors=suppress_user_errors,
        catalogue=catalogue,
        secrets=secrets,
    )
    core = Core(phase="ready", settings=settings, seg=_fresh_segmenter(config))
    return StreamState(math.inf, "", core)


def step(state: StreamState, event: Event) -> tuple[StreamState, tuple[Effect, ...]]:
    """Apply one event. Total: any event in any phase gives a state and effects, never raises."""
    # The hot path (E10): plain text that completes no line and needs no capture.
    if type(event) is ChunkArrived:
        chunk = event.chunk
        if type(chunk) is TextChunk and chunk.usage is None and not chunk.thoughts:
            core = state.core
            # The first serving provider is recorded (B5).
            if chunk.serving_provider is None or core.record.serving_provider is not None:
                text = chunk.content
                tail = _try_append(core.seg, state.tail, text)
                if tail is not None and "<" not in text:  # "<" may open a tag: capture's
                    deadline = event.now + core.settings.config.inactivity_timeout
                    return StreamState(deadline, tail, core), _NO_EFFECTS
    return _slow(state, event)


def abandon(
    state: StreamState, error: BaseException, now: float, accepted: tuple[str, ...] | None = None
) -> StreamResult:
    """The result of a stream the shell cannot drive to its end: `error`, with what Discord
    accepted so far (B1, B9): `accepted` when the shell knows better than the state (a fault
    may have kept an answer from reaching it), else the state's own record."""
    run = _Run(state)
    run.core = replace(run.core, ending=Ending("error", "natural", error))
    run.finish(now, accepted)
    finish = run.effects[-1]
    assert isinstance(finish, Finish)  # finish() always ends with it
    return finish.result


def _slow(state: StreamState, event: Event) -> tuple[StreamState, tuple[Effect, ...]]:
    if state.core.phase == "finished":
        return state, _NO_EFFECTS  # nothing follows the result (B1)
    run = _Run(state)
    run.handle(event)
    return run.state(), tuple(run.effects)


class _Run:
    """One `step` call's scratch space: the state being rebuilt and the effects so far.

    It exists only for the length of one call, so `step` stays a pure function; it keeps the
    many small transitions readable without threading `(state, effects)` through each.
    """

    def __init__(self, state: StreamState) -> None:
        core = state.core
        self.deadline = state.deadline
        self.tail = state.tail
        self.core = core
        # The two sub-records most events change are worked on here and put back into `core`
        # once, by `state()`; the others are changed in `core` by name as they change.
        self.seg = core.seg
        self.out = core.out
        self.effects: list[Effect] = []

    def state(self) -> StreamState:
        core = self.core
        if self.seg is not core.seg or self.out is not core.out:
            # Built in full rather than with `replace`, which costs twice as much (E10).
            core = Core(
                phase=core.phase,
                settings=core.settings,
                seg=self.seg,
                started_at=core.started_at,
                armed_at=core.armed_at,
                capture=core.capture,
                record=core.record,
                out=self.out,
                ending=core.ending,
                anomalies=core.anomalies,
            )
        return StreamState(self.deadline, self.tail, core)

    def handle(self, event: Event) -> None:
        """What each event does in each phase, first match wins (after `finished`, nothing).

        Every row that does nothing says why it may happen; an event that matches no row is
        one a correct shell never feeds: it is recorded in `anomalies` and changes nothing else.
        """
        core = self.core
        phase = core.phase
        match event:
            case Started(now=now, pending=pending) if phase == "ready":
                self.start(now, pending)
            case ChunkArrived(now=now, chunk=chunk, headline=headline) if phase == "streaming":
                self.deadline = now + core.settings.config.inactivity_timeout
                self.chunk(chunk, headline, now)
            case ProviderEnded(now=now) if phase == "streaming":
                self.end(Ending("completed", "natural", core.record.metadata), "deliver", now)
            case ProviderCrashed(now=now, error=error) if phase == "streaming":
                self.crash(error, now)
            case ProviderEnded() | ProviderCrashed() if phase == "ending":
                pass  # the provider ended as the stream did (or the shell's last resort, B13)
            case StopRequested(now=now, request=request) if phase != "ready":
                self.request(request, now)
            case TimerFired(now=now, armed_for=armed_for) if armed_for == core.armed_at:
                if phase == "streaming":
                    self.timer(now)
                # else: the timer outlived streaming
            case TimerFired() if phase != "ready":
                pass  # an earlier arming: stale
            case PauseOver(now=now, token=token) if token == self.out.pause:
                self.out = replace(self.out, pause=None)
                self.pump(now)
            case PauseOver(token=token) if outbox.issued(self.out, token):
                pass  # a pause that a stop or a timeout ended early (E9)
            case Delivered(now=now, seq=seq, url=url) if outbox.knows(self.out, seq):
                self.delivered(now, url)
            case Rejected(now=now, seq=seq, failure=failure) if outbox.knows(self.out, seq):
                self.rejected(now, failure)
            case _:
                self.core = replace(core, anomalies=(*core.anomalies, _anomaly(event, core)))

    # -- the stream's course -------------------------------------------------------------

    def start(self, now: float, pending: StopRequest | None) -> None:
        self.core = replace(self.core, phase="streaming", started_at=now)
        if pending is not None:
            self.request(pending, now)  # B4: resolved before the provider is read
            return
        self.deadline = now + self.core.settings.config.inactivity_timeout
        self.arm(self.deadline)

    def arm(self, at: float) -> None:
        self.core = replace(self.core, armed_at=at)
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
        checked = chunks.trusted(chunk)
        if isinstance(checked, Exception):
            self.crash(checked, now)
            return
        record = records.note(self.core.record, checked)
        if record is not self.core.record:
            self.core = replace(self.core, record=record)
        match checked:
            case TextChunk(content=text):
                if text:
                    self.text(text, now)
            case FunctionCallChunk(calls=calls):
                if calls:
                    ending = Ending("function_call", "natural", calls[0], function_calls=calls)
                    self.end(ending, "deliver", now)
            case ErrorChunk(error=error):
                if error is not None:
                    self.provider_error(error, headline, now)
            case DoneChunk():
                pass  # metadata is recorded by `note`; the provider goes on until exhausted

    def text(self, text: str, now: float) -> None:
        core = self.core
        if core.capture is capture.IDLE and "<" not in text:
            self.visible(text)
        else:
            fence, line = segments.context(self.seg, self.tail)
            captured, ops = capture.feed(core.capture, text, fence=fence, line=line)
            self.core = replace(core, capture=captured)
            self.apply(ops)
            if captured is not capture.IDLE:
                self.seg = segments.hold(self.seg)  # the next text is capture's to see
        self.pump(now)

    def apply(self, ops: list[capture.Op]) -> None:
        for kind, text in ops:
            if kind == "visible":
                self.visible(text)
            elif kind == "retract":
                self.retract()
            else:
                self.core = replace(
                    self.core, record=records.captured(self.core.record, kind, text)
                )

    def visible(self, text: str) -> None:
        self.seg, self.tail, pieces = segments.feed(self.seg, self.tail, text)
        if pieces:
            self.out = outbox.enqueue(self.out, pieces)

    def retract(self) -> None:
        """E4: a stray closing think tag; what was not sent yet was reasoning after all."""
        unsent = outbox.pending(self.out) + self.seg.buffered + self.tail
        self.core = replace(self.core, record=records.retracted(self.core.record, unsent))
        self.seg = _fresh_segmenter(self.core.settings.config)
        self.out = outbox.clear(self.out)
        self.tail = ""

    def provider_error(self, error: ProviderError, headline: str | None, now: float) -> None:
        embed = self.embed(
            lambda loc, cat, sec: provider_error_embed(
                error, headline, locale=loc, catalogue=cat, secrets=sec
            )
        )
        self.end(Ending("error", "natural", error, embed=embed, hurry=True), "deliver", now)

    def crash(self, error: object, now: float) -> None:
        """B13: the stream is broken; nothing pending is flushed."""
        embed = self.embed(
            lambda loc, cat, sec: exception_embed(error, locale=loc, catalogue=cat, secrets=sec)
        )
        self.end(Ending("error", "natural", error, embed=embed, hurry=True), "discard", now)

    def embed(self, build: _EmbedBuilder) -> EmbedSpec | None:
        settings = self.core.settings
        if settings.suppress_user_errors:
            return None  # G7
        return build(settings.locale, settings.catalogue, settings.secrets)

    # -- requests (C2, C4–C7) --------------------------------------------------------------

    def request(self, request: StopRequest, now: float) -> None:
        core = self.core
        ending = core.ending
        resolution = resolve(request, None if ending is None else ending.origin)
        if resolution == "leave":
            return
        self.effects.append(ConsumeRequest(request))
        if resolution == "absorb":
            return
        if ending is not None and ending.dropped:  # a stop overrides a follow-up (C2)
            self.out = outbox.requeue(self.out, ending.dropped)
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
        if self.core.phase == "streaming":
            self.effects.append(CloseProvider())
            closed, ops = capture.close(self.core.capture)
            self.core = replace(self.core, capture=closed)
            self.apply(ops if keep else [op for op in ops if op[0] != "visible"])
            if keep:
                pieces = segments.flush(self.seg, self.tail, close_markers=True)
                self.out = outbox.enqueue(self.out, pieces)
            else:
                self.out = outbox.clear(self.out)
            self.seg = _fresh_segmenter(self.core.settings.config)
            self.tail = ""
        if pending == "discard":
            if keep:
                ending = replace(ending, dropped=self.out.queue)
            self.out = outbox.clear(self.out)
        self.core = replace(self.core, phase="ending", ending=ending)
        self.pump(now)

    def pump(self, now: float) -> None:
        """Start the next Discord request if none is in flight; finish when all is done."""
        core = self.core
        ending = core.ending
        hurry = ending is not None and ending.hurry
        self.out, next_ = outbox.pump(
            self.out, core.settings.config, now, ending=ending is not None, hurry=hurry
        )
        if isinstance(next_, str):
            self.hit_limit(next_, now)
        elif next_ is not None:
            self.effects.append(next_)
        elif ending is not None and outbox.drained(self.out):
            if ending.embed is None:
                self.finish(now)
                return
            self.out, send = outbox.embed(self.out, ending.embed)
            self.core = replace(core, ending=replace(ending, embed=None))
            self.effects.append(send)

    def hit_limit(self, reason: StopReason, now: float) -> None:
        ending = self.core.ending
        if ending is not None and ending.origin != "natural":
            # Already stopping for a request or an internal reason: just stop sending.
            self.out = outbox.clear(self.out)
            self.pump(now)
            return
        self.internal_stop(reason, now)

    def delivered(self, now: float, url: str | None) -> None:
        self.out = outbox.accepted(self.out, now, url)
        self.pump(now)

    def rejected(self, now: float, failure: DiscordFailure) -> None:
        self.out, was_message = outbox.refused(self.out)
        if not was_message:
            self.pump(now)  # a refused embed changes no outcome (G is best effort)
            return
        quiet = _QUIET_FAILURES.get(failure.code) if failure.code is not None else None
        ending = self.core.ending
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
            self.crash(error, now)
        else:
            # The first error or a stop stays the outcome; nothing more is sent after a refusal,
            # not even what a follow-up dropped, should a stop override it now.
            self.end(replace(ending, dropped=()), "discard", now)

    def finish(self, now: float, accepted: tuple[str, ...] | None = None) -> None:
        core = self.core
        ending, record = core.ending, core.record
        assert ending is not None
        messages = outbox.messages(self.out) if accepted is None else accepted
        status = ending.status
        if status == "completed" and not messages:
            status = "empty_response"  # B8: keeps data, usage and thought log
        duration_ms = max(0, round((now - core.started_at) * 1000))
        result = StreamResult(
            status=status,
            data=ending.data,
            accumulated_text=outbox.accumulated_text(messages),
            details_content=records.details(record),
            stop_reason=ending.stop_reason,
            thought_log=records.thought_log(record, self.out.first_url, duration_ms),
            usage=record.usage,
            messages_sent=len(messages),
            stop_context=ending.stop_context,
            function_calls=ending.function_calls,
            messages=messages,
            anomalies=core.anomalies,
        )
        self.effects.append(Finish(result))
        self.core = replace(core, phase="finished")


def _anomaly(event: object, core: Core) -> str:
    """How an event that matches no row of `_Run.handle`'s table is recorded."""
    match event:
        case Delivered(seq=seq) | Rejected(seq=seq):
            detail = f" for request {seq} (in flight: {core.out.in_flight})"
        case PauseOver(token=token):
            detail = f" for pause {token} (current: {core.out.pause})"
        case TimerFired(armed_for=armed_for):
            detail = f" armed for {armed_for} (armed: {core.armed_at})"
        case _:
            detail = ""
    return f"{type(event).__name__}{detail} in phase {core.phase}"


def _fresh_segmenter(config: StreamConfig) -> segments.Segmenter:
    return segments.new_segmenter(config.max_message_length, sentences=config.humanizer_degree == 3)
