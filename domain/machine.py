"""The stream machine: `step(state, event) -> (state, effects)` (SPEC B, C, E, F, G).

Theory of operation
-------------------
One machine runs one stream. It never performs I/O and never reads a clock: the shell feeds
it events (`cordstream.domain.events`) carrying `now`, and carries out the effects it returns
(`cordstream.domain.effects`). Its phases:

    ready ──Started──▶ streaming ──(end of text, stop, error, timeout, limit)──▶ ending ──▶ finished
      └──Started(pending request)──────────────────────────────────────────────▲

*streaming*: per chunk (B5) the deadline moves, `record` notes thoughts, metadata and usage,
and the chunk is routed (B6): text goes through think/details capture (`capture`) to delivery;
a function call or an error ends the stream after a *pending flush*. *ending*: the outcome is
decided and delivery drains (one Discord request at a time), then an embed if one is due, then
`Finish`; a stop or follow-up arriving meanwhile is `requests.resolve`'s to weigh (C2, C5–C7).
*finished*: every event is a no-op; `Finish` is emitted exactly once.

Delivery is one value of the state (`StreamState.delivery`: messages delivery's or live
delivery's), driven through one interface (`delivery.Delivery`), so the reducer never asks
which one it drives. What a result reports besides is `record`'s; how a stream ends is `outcome`'s.

Time is data (aioquic style). The state holds the inactivity `deadline`; the shell's timer is
armed by `ArmTimer(at)` and reports `TimerFired(armed_for=at)`. A chunk only moves the deadline;
when the timer fires early because chunks kept coming, the machine re-arms it.

Impossible events are visible. Which event does what in which phase is one table, in
`_Run.handle` (as in h2): an event a correct shell never feeds changes nothing but is recorded
in `anomalies` (the state's and the result's). `step` stays total (B1): it records, never
raises; a chunk that skipped its validation ends the stream as B13 (`chunks.trusted`).

Performance (E10): a plain text chunk that completes no line touches only the top-level
`deadline` and `tail`, so the hot path builds one small record. Whether it may is the delivery
state's to say (`try_append`): never before streaming, after it or while a capture is open.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final, assert_never

from cordstream.domain import capture, chunks, delivery, events
from cordstream.domain import effects as fx
from cordstream.domain import outcome as outcomes
from cordstream.domain import record as records
from cordstream.domain.chunks import DoneChunk, ErrorChunk, FunctionCallChunk, TextChunk
from cordstream.domain.outbox import Limit, LimitReached
from cordstream.domain.outcome import Ending
from cordstream.domain.requests import StopRequest, resolve
from cordstream.domain.results import StreamResult
from cordstream.domain.state import Core, StreamState, initial_state

__all__ = ["StreamState", "abandon", "initial_state", "step"]

_NO_EFFECTS: Final[tuple[fx.Effect, ...]] = ()


def step(state: StreamState, event: events.Event) -> tuple[StreamState, tuple[fx.Effect, ...]]:
    """Apply one event. Total: any event in any phase gives a state and effects, never raises."""
    # The hot path (E10): plain text that completes no line and needs no capture.
    if type(event) is events.ChunkArrived:
        chunk = event.chunk
        if type(chunk) is TextChunk and chunk.usage is None and not chunk.thoughts:
            core = state.core
            # The first serving provider is recorded (B5).
            if chunk.serving_provider is None or core.record.serving_provider is not None:
                text = chunk.content
                value = state.delivery
                tail = value.try_append(state.tail, text)
                if tail is not None and "<" not in text:  # "<" may open a tag: capture's
                    deadline = event.now + core.settings.config.inactivity_timeout
                    return StreamState(deadline, tail, value, core), _NO_EFFECTS
    return _slow(state, event)


def abandon(
    state: StreamState,
    error: BaseException,
    now: float,
    late: tuple[events.Delivered | events.Rejected, ...] = (),
) -> StreamResult:
    """The result of a stream the shell cannot drive to its end: `error`, with what Discord
    accepted so far (B1, B9, F2): the state's own record, and the answers to its requests that
    the shell could no longer feed it (`late`: a fault kept them from it)."""
    run = _Run(state)
    for answer in late:
        if isinstance(answer, events.Delivered) and run.delivery.knows(answer.seq):
            run.delivery.accepted(answer.now, answer.url)
    run.core = replace(run.core, ending=Ending("error", "natural", error))
    run.finish(now)
    finish = run.effects[-1]
    assert isinstance(finish, fx.Finish)  # finish() always ends with it
    return finish.result


def _slow(state: StreamState, event: events.Event) -> tuple[StreamState, tuple[fx.Effect, ...]]:
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
        self.core = core
        # Delivery's values are worked on by the policy and put back into the state once, by
        # `state()`; the other sub-records are changed in `core` by name as they change.
        self.delivery = delivery.policy(state.delivery, state.tail, core.settings.config)
        self.effects: list[fx.Effect] = []

    def state(self) -> StreamState:
        core = self.core
        value = self.delivery.value(
            streaming=core.phase == "streaming", capturing=core.capture is not capture.IDLE
        )
        return StreamState(self.deadline, self.delivery.tail, value, core)

    def handle(self, event: events.Event) -> None:
        """What each event does in each phase, first match wins (after `finished`, nothing).

        Every row that does nothing says why it may happen; an event that matches no row is
        one a correct shell never feeds: it is recorded in `anomalies` and changes nothing else.
        """
        core = self.core
        phase = core.phase
        policy = self.delivery
        match event:
            case events.Started(now=now, pending=pending) if phase == "ready":
                self.start(now, pending)
            case events.ChunkArrived(now=now, chunk=chunk, headline=headline) if (
                phase == "streaming"
            ):
                self.deadline = now + core.settings.config.inactivity_timeout
                self.chunk(chunk, headline, now)
            case events.ProviderEnded(now=now) if phase == "streaming":
                self.end(outcomes.completed(core.record.metadata), now)
            case events.ProviderCrashed(now=now, error=error) if phase == "streaming":
                self.end(outcomes.crash(core.settings, error), now)
            case events.ProviderEnded() | events.ProviderCrashed() if phase == "ending":
                pass  # the provider ended as the stream did (or the shell's last resort, B13)
            case events.StopRequested(now=now, request=request) if phase != "ready":
                self.request(request, now)
            case events.TimerFired(now=now, armed_for=armed_for) if armed_for == core.armed_at:
                if phase == "streaming":
                    self.timer(now)
                # else: the timer outlived streaming
            case events.TimerFired() if phase != "ready":
                pass  # an earlier arming: stale
            case events.TurnGranted(now=now, token=token) if policy.awaits(token):
                self.granted(now)
            case events.TurnGranted(token=token) if policy.turn_issued(token):
                pass  # a turn the stream stopped waiting for
            case events.PauseOver(now=now, token=token) if policy.pausing(token):
                renew = policy.pause_over(streaming=phase == "streaming")
                if renew is not None:
                    self.effects.append(renew)
                self.pump(now)
            case events.PauseOver(token=token) if policy.pause_issued(token):
                pass  # a pause that a stop, a timeout or a message made needless (E9, L1)
            case events.Delivered(now=now, seq=seq, url=url) if policy.knows(seq):
                policy.accepted(now, url)
                self.pump(now)
            case events.Rejected(now=now, seq=seq, failure=failure) if policy.knows(seq):
                self.rejected(now, failure)
            case _:
                detail = _anomaly(event, core, policy)
                self.core = replace(core, anomalies=(*core.anomalies, detail))

    # -- the stream's course -------------------------------------------------------------

    def start(self, now: float, pending: StopRequest | None) -> None:
        self.core = replace(self.core, phase="streaming", started_at=now)
        if pending is not None:
            self.request(pending, now)  # B4: resolved before the provider is read
            return
        self.deadline = now + self.core.settings.config.inactivity_timeout
        self.arm(self.deadline)
        typing = self.delivery.begin()
        if typing is not None:
            self.effects.append(typing)

    def arm(self, at: float) -> None:
        self.core = replace(self.core, armed_at=at)
        self.effects.append(fx.ArmTimer(at))

    def timer(self, now: float) -> None:
        if now < self.deadline:
            self.arm(self.deadline)  # chunks moved the deadline since the timer was armed
            return
        self.end(outcomes.timeout(self.core.settings), now)

    def chunk(self, chunk: object, headline: str | None, now: float) -> None:
        checked = chunks.trusted(chunk)
        if isinstance(checked, Exception):
            self.end(outcomes.crash(self.core.settings, checked), now)
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
                    self.end(outcomes.function_call(calls), now)
            case ErrorChunk(error=error):
                if error is not None:
                    self.end(outcomes.provider_error(self.core.settings, error, headline), now)
            case DoneChunk():
                pass  # metadata is recorded by `note`; the provider goes on until exhausted

    def text(self, text: str, now: float) -> None:
        core = self.core
        if core.capture is capture.IDLE and "<" not in text:
            self.delivery.show(text)
        else:
            fence, line = self.delivery.context()
            captured, ops = capture.feed(core.capture, text, fence=fence, line=line)
            self.core = replace(core, capture=captured)
            self.apply(ops)
            if captured is not capture.IDLE:
                self.delivery.hold()  # the next text is capture's to see
        self.pump(now)

    def apply(self, ops: list[capture.Op]) -> None:
        for kind, text in ops:
            if kind == "visible":
                self.delivery.show(text)
            elif kind == "retract":  # E4: a stray closing think tag
                unsent = self.delivery.retract()
                self.core = replace(self.core, record=records.retracted(self.core.record, unsent))
            else:
                self.core = replace(
                    self.core, record=records.captured(self.core.record, kind, text)
                )

    # -- requests (C2, C4–C7) --------------------------------------------------------------

    def request(self, request: StopRequest, now: float) -> None:
        core = self.core
        ending = core.ending
        resolution = resolve(request, None if ending is None else ending.origin)
        if resolution == "leave":
            return
        self.effects.append(fx.ConsumeRequest(request))
        if resolution == "absorb":
            return
        if ending is not None and ending.dropped:  # a stop overrides a follow-up (C2)
            self.delivery.restore(ending.dropped)
        self.end(outcomes.requested(self.core.settings, request), now)

    # -- ending --------------------------------------------------------------------------

    def end(self, ending: Ending, now: float) -> None:
        """Decide the outcome; deliver or discard what is pending (E8, C6, B13); drain."""
        # A follow-up keeps what it drops aside: a stop may still override it (C2).
        keep = ending.deliver or ending.origin == "follow_up"
        if self.core.phase == "streaming":
            self.effects.append(fx.CloseProvider())
            closed, ops = capture.close(self.core.capture)
            self.core = replace(self.core, capture=closed)
            self.apply(ops if keep else [op for op in ops if op[0] != "visible"])
            self.delivery.close(keep=keep)
        if not ending.deliver:
            dropped = self.delivery.drop()
            if ending.origin == "follow_up" and dropped:
                ending = replace(ending, dropped=dropped)
        self.core = replace(self.core, phase="ending", ending=ending)
        self.pump(now)

    def pump(self, now: float) -> None:
        """Start the next Discord request if none is in flight; finish when all is done."""
        core = self.core
        self.send(self.delivery.pump(core.settings.config, now, core.ending), now)

    def granted(self, now: float) -> None:
        """Live delivery: the channel's turn came; send the latest (L2)."""
        core = self.core
        if self.send(self.delivery.granted(core.settings.config, core.ending), now):
            self.pump(now)

    def send(self, next_: delivery.Pumped, now: float) -> bool:
        """Carry out what delivery says comes next; False if that ended the stream's sending."""
        match next_:
            case None:
                return True
            case delivery.Drained():
                self.finish(now)
                return False
            case LimitReached(reason=reason):
                self.hit_limit(reason, now)
                return False
            case fx.SendEmbed():
                ending = self.core.ending
                if ending is not None:
                    self.core = replace(self.core, ending=replace(ending, embed=None))
                self.effects.append(next_)
                return True
            case fx.SendMessage() | fx.EditMessage() | fx.TypingPause() | fx.AwaitTurn():
                self.effects.append(next_)
                return True
            case _:
                assert_never(next_)

    def rejected(self, now: float, failure: events.DiscordFailure) -> None:
        refusal = self.delivery.refused(failure.code)
        if refusal == "embed":
            self.pump(now)  # a refused embed changes no outcome (G is best effort)
        elif refusal == "deleted":  # L9: someone deleted the message being edited
            self.end(outcomes.message_deleted(self.core.ending), now)
        else:
            self.end(outcomes.refused(self.core.settings, self.core.ending, failure), now)

    def hit_limit(self, reason: Limit, now: float) -> None:
        ending = self.core.ending
        if ending is not None and ending.origin != "natural":
            # Already stopping for a request or an internal reason: just stop sending.
            self.delivery.stop_sending()
            self.pump(now)
            return
        self.end(outcomes.internal_stop(self.core.settings, reason), now)

    def finish(self, now: float) -> None:
        core = self.core
        ending = core.ending
        assert ending is not None
        duration_ms = max(0, round((now - core.started_at) * 1000))
        result = outcomes.result(
            ending,
            core.record,
            self.delivery.messages(),
            first_url=self.delivery.first_url(),
            duration_ms=duration_ms,
            anomalies=core.anomalies,
        )
        self.effects.append(fx.Finish(result))
        self.core = replace(core, phase="finished")


def _anomaly(event: object, core: Core, policy: delivery.Delivery) -> str:
    """How an event that matches no row of `_Run.handle`'s table is recorded."""
    match event:
        case events.Delivered(seq=seq) | events.Rejected(seq=seq):
            detail = f" for request {seq} (in flight: {policy.in_flight()})"
        case events.PauseOver(token=token):
            detail = f" for pause {token} (current: {policy.pause()})"
        case events.TimerFired(armed_for=armed_for):
            detail = f" armed for {armed_for} (armed: {core.armed_at})"
        case _:
            detail = ""
    return f"{type(event).__name__}{detail} in phase {core.phase}"
