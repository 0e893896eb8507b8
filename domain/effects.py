"""Outputs of the machine: what the shell must do, as data (SPEC B, C, E9, F, G).

The shell interprets each effect and reports the outcome back as an event where there is one
(`SendMessage`/`EditMessage`/`SendEmbed` → `Delivered`/`Rejected`, `AwaitTurn` →
`TurnGranted`, `TypingPause` → `PauseOver`,
`ArmTimer` → `TimerFired`). Effects hold no callables, tasks or discord objects, so a test
compares a step's output with `==`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from cordstream.domain.embeds import EmbedSpec
from cordstream.domain.requests import StopRequest
from cordstream.domain.results import StreamResult


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """(Re)arm the inactivity timer to fire at `at`; any earlier arming is void (B2)."""

    at: float


@dataclass(frozen=True, slots=True)
class CloseProvider:
    """No more chunks are wanted: cancel a pending read and `aclose()` the iterator (B10)."""


@dataclass(frozen=True, slots=True)
class SendMessage:
    """Send `content` (≤ max_message_length). `reply`: as a reply to `context.reply_to` (F1).
    `streaming`: live delivery will edit the message again (it is not finished), so the shell
    may attach what rides on an open message, such as a Stop button (K2)."""

    seq: int
    content: str
    reply: bool = False
    streaming: bool = False


@dataclass(frozen=True, slots=True)
class EditMessage:
    """Live delivery (L1–L5): replace the content of one of the stream's messages with
    `content` (≤ max_message_length). `message` is its index among the messages the stream's
    accepted `SendMessage`s created, in order: 0 for the first. `streaming`: the message will
    be edited again; False on its final edit (a Stop button goes with it, K2)."""

    seq: int
    content: str
    message: int
    streaming: bool = False


Route: TypeAlias = Literal["send", "edit"]
"""A Discord message request's route: creating a message (or an embed), or editing one."""


@dataclass(frozen=True, slots=True)
class AwaitTurn:
    """Live delivery (L2): wait for the channel's budget to allow one more message request,
    then report `TurnGranted(token)`; the core decides then what the request carries, so it
    carries the latest text. A `prompt` turn is for a request whose content is final (a
    finished message, anything once the model ended): it goes as soon as Discord's window has
    room; otherwise the turn is spaced, so text gathers between two edits. `route`: whether
    the request will create a message (or an embed) or edit one, each counted by Discord in a
    bucket of its own."""

    token: int
    prompt: bool = False
    route: Route = "edit"


@dataclass(frozen=True, slots=True)
class SendEmbed:
    """Send an embed built from `embed` (G)."""

    seq: int
    embed: EmbedSpec


@dataclass(frozen=True, slots=True)
class TypingPause:
    """Show the typing indicator for `seconds`, then report `PauseOver(token)` (E9)."""

    token: int
    seconds: float


@dataclass(frozen=True, slots=True)
class ConsumeRequest:
    """Remove `request` from the registry if it is still the channel's entry (C5)."""

    request: StopRequest


@dataclass(frozen=True, slots=True)
class Finish:
    """The stream's one result (B1). Nothing follows it."""

    result: StreamResult


Effect: TypeAlias = (
    ArmTimer
    | CloseProvider
    | SendMessage
    | EditMessage
    | AwaitTurn
    | SendEmbed
    | TypingPause
    | ConsumeRequest
    | Finish
)
