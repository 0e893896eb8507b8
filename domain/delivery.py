"""The reducer's delivery: one state, two sibling policies behind one interface (SPEC E, F, L).

The reducer (`cordstream.domain.machine`) keeps the phases, the routing and stop resolution;
what happens to the visible text from there, and what Discord accepted of it, is delivery's,
chosen by `StreamConfig.delivery`. The state holds one value of the sum type `DeliveryState`
(`StreamState.delivery`):

- `Messages` (messages delivery): the segmenter (`segments`) finds the pieces and the outbox
  (`outbox`) packs them into messages, paces them and keeps what Discord accepted; its policy
  is `MessagesDelivery`;
- `live.Live` (live delivery, SPEC L): one message edited as the text grows, each request in
  the channel's turn (`live`); its policy is `LiveDelivery`.

The reducer calls only `Delivery`'s methods; where the two differ is said here, once. Like the
reducer's `_Run`, a policy object is scratch space for one `step`: built from the state's value
(`policy`), changed in place, and read back (`tail`, `value`), so a state is still plain data.
A policy answers what comes next with named values: an effect, `LimitReached` (F3), `DRAINED`
or None (wait).

`tail` is the visible text the policy has not handed on yet: the segmenter's unfinished line
(messages) or the text the open message does not show yet (live). The reducer's hot path asks
the state's value directly whether a plain chunk may just grow it (`try_append`: the
segmenter's `tail_room`, or live delivery's `appending`, which `value` keeps up to date).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal, Protocol, TypeAlias, assert_never

from cordstream.domain import live as lives
from cordstream.domain import outbox, segments
from cordstream.domain.config import StreamConfig
from cordstream.domain.effects import AwaitTurn, EditMessage, SendEmbed, SendMessage, TypingPause
from cordstream.domain.outbox import LimitReached
from cordstream.domain.outcome import UNKNOWN_MESSAGE, Ending

Pieces = tuple[segments.Piece, ...]


@dataclass(frozen=True, slots=True)
class Messages:
    """Messages delivery's state beside the machine's `tail`: the segmenter and the outbox."""

    seg: segments.Segmenter
    out: outbox.Outbox

    def try_append(self, tail: str, text: str) -> str | None:
        """The machine's hot path (E10): the new tail, when `text` ends no line and the tail
        stays short enough that the segmenter need not look at it yet (`tail_room`); None when
        it must (also for a `text` that is not a `str`: the reducer's caller rejects it)."""
        try:  # free unless it raises
            if len(tail) + len(text) <= self.seg.tail_room and "\n" not in text:
                return tail + text
        except TypeError:
            pass
        return None


DeliveryState: TypeAlias = Messages | lives.Live
"""The one delivery value a state holds (`StreamState.delivery`)."""


def initial(config: StreamConfig) -> DeliveryState:
    """The delivery state a stream with `config` starts with."""
    if config.delivery == "live":
        return lives.EMPTY
    return Messages(fresh_segmenter(config), outbox.EMPTY)


def fresh_segmenter(config: StreamConfig) -> segments.Segmenter:
    """A segmenter for `config`, as a stream starts or after its pending text is gone."""
    return segments.new_segmenter(config.max_message_length, sentences=config.humanizer_degree == 3)


@dataclass(frozen=True, slots=True)
class Drained:
    """What `pump` answers once everything is delivered and the outcome is decided."""


DRAINED: Final = Drained()

Request: TypeAlias = SendMessage | EditMessage | SendEmbed | TypingPause | AwaitTurn
"""A Discord request, a pause or a wait for the channel's turn, to start now."""

Next: TypeAlias = Request | LimitReached
"""A request to start, or a limit the next message would pass (F3)."""

Pumped: TypeAlias = Next | Drained | None
"""What `pump` answers: what to do next, `DRAINED`, or None (wait)."""

Refusal = Literal["embed", "message", "deleted"]
"""What Discord refused: an embed (best effort, G), a message request, or an edit of a message
someone deleted (L9)."""


class Delivery(Protocol):
    """What the reducer asks of a delivery policy."""

    tail: str

    def value(self, *, streaming: bool, capturing: bool) -> DeliveryState:
        """The value to keep in the state (the same object when nothing changed), ready for
        the hot path: whether a chunk may just grow the tail depends on whether the model
        writes (`streaming`) and whether a capture is open (`capturing`)."""
        ...

    def begin(self) -> TypingPause | None:
        """The stream starts (L1: typing until the first message exists)."""
        ...

    def context(self) -> tuple[str, str]:
        """For capture: the open code block's fence and the partial line (`capture.feed`)."""
        ...

    def hold(self) -> None:
        """A capture opened: the next text is capture's to see, not the hot path's."""
        ...

    def show(self, text: str) -> None:
        """Visible text, after what came before."""
        ...

    def retract(self) -> str:
        """E4: what was not sent yet was reasoning after all; it is taken back and returned."""
        ...

    def restore(self, dropped: Pieces) -> None:
        """What a follow-up dropped goes out after all (a stop overrode it, C2)."""
        ...

    def close(self, *, keep: bool) -> None:
        """The model stopped writing; the rest is to go out (`keep`) or not (C6, B13)."""
        ...

    def drop(self) -> Pieces:
        """Nothing more goes out but what is shown or in flight; what is dropped."""
        ...

    def pump(self, config: StreamConfig, now: float, ending: Ending | None) -> Pumped:
        """The next thing to do, `DRAINED` when all is delivered (ending only), or None: wait
        for an answer, a turn or a pause."""
        ...

    def granted(self, config: StreamConfig, ending: Ending | None) -> Next | None:
        """The channel's turn came (L2): the request it carries, a limit, or None."""
        ...

    def awaits(self, token: int) -> bool:
        """Whether turn `token` is the one awaited."""
        ...

    def turn_issued(self, token: int) -> bool:
        """Whether a turn `token` was asked for (an answer may come after the wait ended)."""
        ...

    def pausing(self, token: int) -> bool:
        """Whether pause `token` is the one running."""
        ...

    def pause_issued(self, token: int) -> bool:
        """Whether a pause `token` was handed out (a stop may have ended it early)."""
        ...

    def pause_over(self, *, streaming: bool) -> TypingPause | None:
        """The running pause is over; a renewal of the typing indicator, or None."""
        ...

    def knows(self, seq: int) -> bool:
        """Whether request `seq` is the one in flight."""
        ...

    def accepted(self, now: float, url: str | None) -> None:
        """Discord accepted the request in flight (F2)."""
        ...

    def refused(self, code: int | None) -> Refusal:
        """Discord refused the request in flight with error `code`: what it was."""
        ...

    def stop_sending(self) -> None:
        """A limit was reached while the stream was already ending: send no more text."""
        ...

    def messages(self) -> tuple[str, ...]:
        """The contents Discord accepted, in order (F2)."""
        ...

    def first_url(self) -> str | None: ...

    def in_flight(self) -> int | None:
        """The seq of the request in flight, if any."""
        ...

    def pause(self) -> int | None:
        """The token of the pause under way, if any."""
        ...


def policy(state: DeliveryState, tail: str, config: StreamConfig) -> Delivery:
    """The stream's delivery policy over the state's value."""
    match state:
        case Messages():
            return MessagesDelivery(state, tail, config)
        case lives.Live():
            return LiveDelivery(state, tail)
        case _:
            assert_never(state)


class MessagesDelivery:
    """Messages delivery: a message per piece or per packed pieces (E6–E9, F2, F3)."""

    __slots__ = ("config", "out", "seg", "state", "tail")

    def __init__(self, state: Messages, tail: str, config: StreamConfig) -> None:
        self.state = state
        self.seg = state.seg
        self.out = state.out
        self.tail = tail
        self.config = config

    def value(self, *, streaming: bool, capturing: bool) -> DeliveryState:
        state = self.state
        if self.seg is state.seg and self.out is state.out:
            return state
        return Messages(self.seg, self.out)

    def begin(self) -> TypingPause | None:
        return None

    def context(self) -> tuple[str, str]:
        return segments.context(self.seg, self.tail)

    def hold(self) -> None:
        self.seg = segments.hold(self.seg)

    def show(self, text: str) -> None:
        self.seg, self.tail, pieces = segments.feed(self.seg, self.tail, text)
        if pieces:
            self.out = outbox.enqueue(self.out, pieces)

    def retract(self) -> str:
        unsent = outbox.pending(self.out) + self.seg.buffered + self.tail
        self.seg = fresh_segmenter(self.config)
        self.out = outbox.clear(self.out)
        self.tail = ""
        return unsent

    def restore(self, dropped: Pieces) -> None:
        self.out = outbox.requeue(self.out, dropped)

    def close(self, *, keep: bool) -> None:
        if keep:
            self.out = outbox.enqueue(
                self.out, segments.flush(self.seg, self.tail, close_markers=True)
            )
        else:
            self.out = outbox.clear(self.out)
        self.seg = fresh_segmenter(self.config)
        self.tail = ""

    def drop(self) -> Pieces:
        dropped = self.out.queue
        self.out = outbox.clear(self.out)
        return dropped

    def pump(self, config: StreamConfig, now: float, ending: Ending | None) -> Pumped:
        hurry = ending is not None and ending.hurry
        self.out, next_ = outbox.pump(self.out, config, now, ending=ending is not None, hurry=hurry)
        if next_ is not None or ending is None or not outbox.drained(self.out):
            return next_
        if ending.embed is None:
            return DRAINED
        self.out, send = outbox.embed(self.out, ending.embed)
        return send

    def granted(self, config: StreamConfig, ending: Ending | None) -> Next | None:
        return None  # messages delivery asks for no turns

    def awaits(self, token: int) -> bool:
        return False

    def turn_issued(self, token: int) -> bool:
        return False

    def pausing(self, token: int) -> bool:
        return outbox.pausing(self.out, token)

    def pause_issued(self, token: int) -> bool:
        return outbox.issued(self.out, token)

    def pause_over(self, *, streaming: bool) -> TypingPause | None:
        self.out = outbox.pause_over(self.out)
        return None

    def knows(self, seq: int) -> bool:
        return outbox.knows(self.out, seq)

    def accepted(self, now: float, url: str | None) -> None:
        self.out = outbox.accepted(self.out, now, url)

    def refused(self, code: int | None) -> Refusal:
        self.out, was_message = outbox.refused(self.out)
        return "message" if was_message else "embed"

    def stop_sending(self) -> None:
        self.out = outbox.clear(self.out)

    def messages(self) -> tuple[str, ...]:
        return outbox.messages(self.out)

    def first_url(self) -> str | None:
        return self.out.first_url

    def in_flight(self) -> int | None:
        return self.out.in_flight

    def pause(self) -> int | None:
        return self.out.pause


class LiveDelivery:
    """Live delivery: the answer grows in edited messages (SPEC L)."""

    __slots__ = ("live", "tail")

    def __init__(self, live: lives.Live, tail: str) -> None:
        self.live = live
        self.tail = tail

    def value(self, *, streaming: bool, capturing: bool) -> DeliveryState:
        return lives.appending(self.live, streaming=streaming, capturing=capturing)

    def merge(self) -> None:
        self.live, self.tail = lives.merged(self.live, self.tail)

    def begin(self) -> TypingPause | None:
        self.live, typing = lives.start_typing(self.live)
        return typing

    def context(self) -> tuple[str, str]:
        self.merge()
        return lives.context(self.live, self.tail)

    def hold(self) -> None:
        pass  # no chunk grows the tail directly while a capture is open (`value`)

    def show(self, text: str) -> None:
        self.live, self.tail = lives.add(self.live, self.tail, text)  # shown in the next turn

    def retract(self) -> str:
        self.merge()
        self.tail, unsent = lives.unshown(self.live, self.tail)  # what is shown stays (L3)
        return unsent

    def restore(self, dropped: Pieces) -> None:
        self.merge()
        self.tail += "".join(piece.raw for piece in dropped)

    def close(self, *, keep: bool) -> None:
        pass  # the tail is the text still to show; `drop` when it is not to be shown

    def drop(self) -> Pieces:
        # The open message keeps what it shows and gets its final edit (L7).
        self.merge()
        self.tail, dropped = lives.unshown(self.live, self.tail)
        return (segments.Piece(dropped),) if dropped else ()

    def pump(self, config: StreamConfig, now: float, ending: Ending | None) -> Pumped:
        if not lives.busy(self.live) or ending is not None:
            self.merge()
        embed = ending.embed if ending is not None else None
        self.live, turn, done = lives.pump(
            self.live, self.tail, config, ending=ending is not None, embed=embed
        )
        return DRAINED if done else turn

    def granted(self, config: StreamConfig, ending: Ending | None) -> Next | None:
        self.merge()
        embed = ending.embed if ending is not None else None
        live, tail, request = lives.granted(
            self.live, self.tail, config, ending=ending is not None, embed=embed
        )
        if (
            isinstance(request, SendMessage | EditMessage | SendEmbed)
            and lives.route_of(request) != self.live.route
        ):
            # The text changed the request's route since the turn was asked (the next message
            # first, where an edit was foreseen): it asks for a turn on its own route (L2),
            # prompt, since it waited its spacing already.
            live, turn, _ = lives.pump(
                replace(self.live, turn=None),
                self.tail,
                config,
                ending=ending is not None,
                embed=embed,
            )
            if turn is not None:
                live, turn = replace(live, prompt=True), replace(turn, prompt=True)
            self.live = live
            return turn
        self.live, self.tail = live, tail
        return request

    def awaits(self, token: int) -> bool:
        return lives.awaits(self.live, token)

    def turn_issued(self, token: int) -> bool:
        return lives.issued(self.live, token)

    def pausing(self, token: int) -> bool:
        return lives.typing_due(self.live, token)

    def pause_issued(self, token: int) -> bool:
        return lives.issued(self.live, token)

    def pause_over(self, *, streaming: bool) -> TypingPause | None:
        self.live, renew = lives.typing_over(self.live, streaming=streaming)
        return renew

    def knows(self, seq: int) -> bool:
        return lives.knows(self.live, seq)

    def accepted(self, now: float, url: str | None) -> None:
        self.live = lives.accepted(self.live, url)

    def refused(self, code: int | None) -> Refusal:
        flight = self.live.flight
        deleted = (
            code == UNKNOWN_MESSAGE and flight is not None and flight.kind in ("edit", "close")
        )
        self.live, flight = lives.refused(self.live, deleted=deleted)
        if flight.kind == "embed":
            return "embed"
        return "deleted" if deleted else "message"

    def stop_sending(self) -> None:
        self.merge()
        self.tail = lives.unshown(self.live, self.tail)[0]

    def messages(self) -> tuple[str, ...]:
        return lives.messages(self.live)

    def first_url(self) -> str | None:
        return self.live.first_url

    def in_flight(self) -> int | None:
        return self.live.in_flight

    def pause(self) -> int | None:
        return self.live.typing
