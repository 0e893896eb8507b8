"""A synchronous stand-in for the shell and the channel, for tests of live delivery (SPEC L).

`LiveDriver` feeds events to `step` and answers the effects as the shell and Discord would:
a turn is granted (`AwaitTurn` → `TurnGranted`), a create adds a message to the channel, an
edit replaces the content of the stream's open message, and each message keeps its history
of contents, so a test can check L3 on every state a user saw. With `auto`, turns are granted
and requests accepted as soon as they are made (a channel without a budget); without it the
test grants and delivers by hand (`grant`, `deliver`) and keeps the clock (`advance`).

On every result it checks F2 and L8: `result.messages` is what the channel holds, in order;
and, unless Discord refused a request, that no message was left `streaming` (K2: what rides
on an open message, a Stop button, goes with its final edit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from cordstream.domain import (
    AwaitTurn,
    Delivered,
    DiscordFailure,
    EditMessage,
    Effect,
    Finish,
    SendEmbed,
    SendMessage,
    StreamConfig,
    StreamResult,
    TurnGranted,
    TypingPause,
    initial_state,
)
from tests.support.driver import Harness

Request = SendMessage | EditMessage | SendEmbed


def live(**fields: object) -> StreamConfig:
    """A live-delivery config."""
    return StreamConfig(delivery="live", **fields)  # type: ignore[arg-type]


@dataclass
class LiveDriver(Harness):
    config: StreamConfig = field(default_factory=live)
    auto: bool = True
    channel: list[str] = field(default_factory=list)  # each message's current content
    history: list[list[str]] = field(default_factory=list)  # each message's contents, in order
    turn: AwaitTurn | None = None
    typing_shown: int = 0  # typing indicators shown
    requests: list[Request] = field(default_factory=list)
    open_index: int | None = None  # the channel index of the message last changed
    mine: list[int] = field(default_factory=list)  # channel index of each message created
    deleted: set[int] = field(default_factory=set)
    streaming: dict[int, bool] = field(default_factory=dict)  # by channel index: to be edited
    granted: AwaitTurn | None = None  # the turn just granted, when nothing came between (auto)

    def __post_init__(self) -> None:
        assert self.config.delivery == "live"
        self.state = initial_state(self.config)

    def grant(self) -> None:
        turn = self.turn
        assert turn is not None, "no turn awaited"
        self.turn = None
        self.granted = turn
        self.feed(TurnGranted(self.now, turn.token))
        self.granted = None

    def deliver(self, url: str | None = None) -> None:
        request = self.in_flight
        assert request is not None, "no request in flight"
        self.in_flight = None
        match request:
            case SendMessage(content=content, streaming=streaming):
                self.streaming[len(self.channel)] = streaming
                self.channel.append(content)
                self.history.append([content])
                self.open_index = len(self.channel) - 1
                self.mine.append(self.open_index)
                if url is None:
                    url = f"https://discord.test/{len(self.channel)}"
            case EditMessage(content=content, message=index, streaming=streaming):
                assert 0 <= index < len(self.mine), "an edit of a message the stream never made"
                position = self.mine[index]
                self.streaming[position] = streaming
                self.channel[position] = content
                self.history[position].append(content)
                self.open_index = position
            case SendEmbed(embed=embed):
                self.embeds.append(embed)
        self.feed(Delivered(self.now, request.seq, url))

    def _refusing(self, failure: DiscordFailure) -> None:
        if failure.code == 10008 and self.open_index is not None:
            self.deleted.add(self.open_index)

    def _wait_over(self) -> bool:
        if self.turn is None:
            return False
        self.grant()
        return True

    # -- reading -------------------------------------------------------------------------

    @property
    def messages(self) -> list[str]:
        """What the channel holds: the contents of the messages not deleted."""
        return [c for i, c in enumerate(self.channel) if i not in self.deleted]

    def accepted(self) -> list[str]:
        return self.messages

    @property
    def edits(self) -> list[EditMessage]:
        return [r for r in self.requests if isinstance(r, EditMessage)]

    @property
    def creates(self) -> list[SendMessage]:
        return [r for r in self.requests if isinstance(r, SendMessage)]

    def _note(self, effect: Effect) -> None:
        match effect:
            case SendMessage() | EditMessage() | SendEmbed():
                if self.granted is not None:  # the turn named the request that went in it
                    route = "edit" if isinstance(effect, EditMessage) else "send"
                    assert self.granted.route == route, (self.granted, effect)  # always (L2)
                    if self.auto:  # and, with no text between, whether it is final
                        final = isinstance(effect, SendEmbed) or not effect.streaming
                        assert self.granted.prompt == final, (self.granted, effect)
                    self.granted = None
                assert self.in_flight is None, "two Discord requests in flight (L2)"
                assert self.turn is None, "a request without its turn (L2)"
                assert all(r.seq != effect.seq for r in self.requests), "a seq used twice"
                self.requests.append(effect)
                self.in_flight = effect
                if not isinstance(effect, SendEmbed):
                    limit = self.config.max_message_length
                    assert 0 < len(effect.content) <= limit, (len(effect.content), limit)
                if self.reject_next:
                    self.reject(self.reject_next.pop(0))
                elif self.auto:
                    self.deliver()
            case AwaitTurn():
                again = self.turn is not None and effect.prompt and not self.turn.prompt
                assert self.turn is None or again, "two turns awaited"
                assert self.in_flight is None, "a turn while a request is in flight (L2)"
                self.turn = effect
                if self.auto:
                    self.grant()
            case TypingPause():
                self.pause = effect
                self.typing_shown += 1
            case Finish() if not self.refused:  # K2: every message had its final edit
                assert not any(self.streaming.values()), self.streaming
                super()._note(effect)
            case _:
                super()._note(effect)


def run_live(
    text: str | Iterable[str], *, size: int = 3, **config: object
) -> tuple[LiveDriver, StreamResult]:
    """Stream `text` (in `size`-character chunks, or the given chunks) live, to completion."""
    driver = LiveDriver(live(**config))
    return driver, driver.run(text, size)
