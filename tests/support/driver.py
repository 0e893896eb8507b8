"""A synchronous stand-in for the shell, for tests of the pure machine.

`Driver` feeds events to `step`, keeps the clock, and answers effects the way Discord and the
shell would: a send is accepted (or refused, when the test says so), a typing pause ends when
the test advances time. It records everything a test wants to assert on.

It checks F2 on every result it sees, so every test that uses it does: `result.messages` is
what it accepted (`messages`), in order, `messages_sent` their number and `accumulated_text`
their join by "\\n".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from cordstream.domain import (
    ArmTimer,
    ChunkArrived,
    CloseProvider,
    ConsumeRequest,
    Delivered,
    DiscordFailure,
    EditMessage,
    Effect,
    Event,
    Finish,
    PauseOver,
    ProcessedChunk,
    ProviderCrashed,
    ProviderEnded,
    Rejected,
    SendEmbed,
    SendMessage,
    Started,
    StopRequest,
    StopRequested,
    StreamConfig,
    StreamResult,
    StreamState,
    TextChunk,
    TimerFired,
    TypingPause,
    initial_state,
    outbox,
    segments,
    step,
)
from cordstream.domain.embeds import EmbedSpec


@dataclass
class Harness:
    """What both drivers share: feeding events in order, the clock, the provider's side of a
    stream, and the effects every stream has (the timer, consumed requests, closing)."""

    config: StreamConfig = field(default_factory=StreamConfig)
    now: float = 0.0
    state: StreamState = field(init=False)
    effects: list[Effect] = field(default_factory=list)  # every effect, in order
    embeds: list[EmbedSpec] = field(default_factory=list)
    armed: float | None = None
    consumed: list[StopRequest] = field(default_factory=list)
    closed: bool = False
    reject_next: list[DiscordFailure] = field(default_factory=list)  # refuse the next requests
    refused: int = 0  # requests refused so far
    anomalies_fed: int = 0  # impossible events a test fed on purpose (`machine._Run.handle`)
    pause: TypingPause | None = None  # the typing pause running (E9) or the indicator (L1)
    in_flight: SendMessage | EditMessage | SendEmbed | None = None  # the request Discord has

    _events: deque[Event] = field(default_factory=deque, init=False, repr=False)
    _feeding: bool = field(default=False, init=False, repr=False)

    # -- feeding -------------------------------------------------------------------------

    def feed(self, event: Event) -> tuple[Effect, ...]:
        """Step `event`, and the events its effects cause (Discord's answers), in order.

        Answers are queued rather than fed from inside `_note`, so a stream of any length
        runs in a loop instead of a recursion.
        """
        self._events.append(event)
        if self._feeding:
            return ()
        produced: list[Effect] = []
        self._feeding = True
        try:
            while self._events:
                self.state, effects = step(self.state, self._events.popleft())
                self.effects.extend(effects)
                produced.extend(effects)
                for effect in effects:
                    self._note(effect)
        finally:
            self._feeding = False
        return tuple(produced)

    def start(self, pending: StopRequest | None = None) -> tuple[Effect, ...]:
        return self.feed(Started(self.now, pending))

    def text(self, *pieces: str) -> None:
        for piece in pieces:
            self.chunk(TextChunk(piece))

    def chunk(self, chunk: ProcessedChunk | object, headline: str | None = None) -> None:
        self.feed(ChunkArrived(self.now, chunk, headline))

    def stream(self, text: str | Iterable[str], size: int) -> None:
        """Feed `text` in chunks of `size` characters (or the given chunks)."""
        chunks = (
            [text[i : i + size] for i in range(0, len(text), size)]
            if isinstance(text, str)
            else text
        )
        self.text(*chunks)

    def run(self, text: str | Iterable[str], size: int) -> StreamResult:
        """Start, stream `text` (see `stream`) and end: the result."""
        self.start()
        self.stream(text, size)
        return self.end()

    def feed_end(self) -> None:
        """The provider ran out; Discord's answers are left to the test."""
        self.feed(ProviderEnded(self.now))

    def feed_crash(self, error: BaseException) -> None:
        self.feed(ProviderCrashed(self.now, error))

    def end(self) -> StreamResult:
        self.feed_end()
        return self.settle()

    def crash(self, error: BaseException) -> StreamResult:
        self.feed_crash(error)
        return self.settle()

    def request(self, request: StopRequest) -> tuple[Effect, ...]:
        return self.feed(StopRequested(self.now, request))

    def fire_timer(self, at: float | None = None) -> tuple[Effect, ...]:
        """Advance the clock to the armed time (or `at`) and report the timer."""
        assert self.armed is not None
        self.now = max(self.now, self.armed if at is None else at)
        return self.feed(TimerFired(self.now, self.armed))

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def end_pause(self) -> None:
        pause = self.pause
        assert pause is not None, "no pause in progress"
        self.pause = None
        self.now += pause.seconds
        self.feed(PauseOver(self.now, pause.token))

    def deliver(self, url: str | None = None) -> None:
        """Accept the request in flight."""
        raise NotImplementedError

    def reject(self, failure: DiscordFailure) -> None:
        """Refuse the request in flight."""
        request = self.in_flight
        assert request is not None, "no request in flight"
        self.in_flight = None
        self.refused += 1
        self._refusing(failure)
        self.feed(Rejected(self.now, request.seq, failure))

    def _refusing(self, failure: DiscordFailure) -> None:
        """What the channel makes of a refusal (nothing changes in it by default)."""

    def settle(self) -> StreamResult:
        """Accept what is in flight, else end what is awaited (`_wait_over`), until the
        result; return it."""
        for _ in range(100_000):
            if self.result is not None:
                return self.result
            if self.in_flight is not None:
                self.deliver()
            elif not self._wait_over():
                break
        raise AssertionError(f"no result; phase {self.state.phase}")

    def _wait_over(self) -> bool:
        """End one wait the stream is in, as the shell would; False if it is in none."""
        raise NotImplementedError

    # -- reading -------------------------------------------------------------------------

    @property
    def result(self) -> StreamResult | None:
        results = [e.result for e in self.effects if isinstance(e, Finish)]
        assert len(results) <= 1, "more than one result"
        return results[0] if results else None

    def of_type(self, kind: type[Effect]) -> list[Effect]:
        return [e for e in self.effects if isinstance(e, kind)]

    # -- effects ---------------------------------------------------------------------------

    def _note(self, effect: Effect) -> None:
        match effect:
            case ArmTimer(at=at):
                self.armed = at
            case ConsumeRequest(request=request):
                self.consumed.append(request)
            case CloseProvider():
                self.closed = True
            case Finish(result=result):
                accepted = tuple(self.accepted())  # F2, whatever the status (B9)
                assert result.messages == accepted, (result.messages, accepted)
                assert result.messages_sent == len(accepted)
                assert result.accumulated_text == "\n".join(accepted)
                # A correct shell feeds no impossible event: only those a test feeds on purpose.
                assert len(result.anomalies) == self.anomalies_fed, result.anomalies
            case _:
                pass

    def accepted(self) -> list[str]:
        """What the channel holds of the stream's messages, in order."""
        raise NotImplementedError


@dataclass
class Driver(Harness):
    """Drive one stream. With `auto_deliver`, every send is accepted as soon as it is made."""

    auto_deliver: bool = True
    suppress_user_errors: bool = False
    messages: list[str] = field(default_factory=list)  # contents Discord accepted

    def __post_init__(self) -> None:
        # This driver plays messages delivery (E9, the reference's style), whatever the
        # config's default; live delivery has its own (`tests.support.live_driver`).
        if self.config.delivery != "messages":
            self.config = replace(self.config, delivery="messages")
        self.state = initial_state(self.config, suppress_user_errors=self.suppress_user_errors)

    @property
    def pending_send(self) -> SendMessage | EditMessage | SendEmbed | None:
        """The send in flight."""
        return self.in_flight

    def deliver(self, url: str | None = None) -> None:
        """Accept the send in flight."""
        send = self.in_flight
        assert send is not None, "no send in flight"
        self.in_flight = None
        if isinstance(send, SendEmbed):
            self.embeds.append(send.embed)
        else:
            self.messages.append(send.content)
        self.feed(Delivered(self.now, send.seq, url))

    def _wait_over(self) -> bool:
        if self.pause is None:
            return False
        self.end_pause()
        return True

    def accepted(self) -> list[str]:
        return self.messages

    @property
    def sends(self) -> list[SendMessage]:
        return [e for e in self.effects if isinstance(e, SendMessage)]

    def _note(self, effect: Effect) -> None:
        match effect:
            case SendMessage() | SendEmbed():
                assert self.in_flight is None, "two Discord requests in flight"
                self.in_flight = effect
                if self.reject_next:
                    self.reject(self.reject_next.pop(0))
                elif self.auto_deliver:
                    self.deliver()
            case TypingPause():
                self.pause = effect
            case _:
                super()._note(effect)


def run(
    text: str | Iterable[str],
    *,
    config: StreamConfig | None = None,
    size: int = 3,
) -> tuple[Driver, StreamResult]:
    """Stream `text` (in `size`-character chunks, or the given chunks) to completion."""
    driver = Driver(config or StreamConfig())
    return driver, driver.run(text, size)


def pack(pieces: Iterable[segments.Piece], max_len: int, *, one_each: bool = False) -> list[str]:
    """The messages the machine's outbox makes of `pieces` (`one_each` at degrees 2 and 3),
    for tests that segment text themselves and compare with what the machine sent."""
    messages: list[str] = []
    queue = tuple(pieces)
    while queue:
        content, taken = outbox.take(queue, max_len, one_each=one_each)
        if content:
            messages.append(content)
        queue = queue[taken:]
    return messages
