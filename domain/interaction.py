"""Where an interaction's answer stands, and what that means for each request (SPEC K1, K3).

A stream answering an application-command interaction has two ways into Discord: the
interaction's token (its original response, and webhook follow-ups) and the channel. One value,
`Answer`, says which of them works and what the original response shows:

- `original`: the original response is `Thinking` (Discord shows "thinking…"; its message id,
  when Discord told it), `Shown` (it shows the stream's first message or embed) or
  `NoOriginal` (cordstream has none to fill: it deleted it, or the interaction was answered
  another way). It only moves forward: thinking, then shown or none; never back.
- `token`: `live`, or `dead` once Discord refused it as expired (15 minutes) or the deferral
  failed. A dead token never comes back: from then on, every request goes through the channel.

The shell asks this module what to do and reports what Discord answered, as values:
`begin(prior)` says whether to defer or look the original response up, and `deferred` /
`looked_up` take the outcome; `route_message` and `route_edit` name the route of each request;
`token_expired`, `shown` and `thinking_deleted` record what a request taught or did;
`shows_typing` and `settle` answer the rest. Every result is a named value (a dataclass, or a
Literal), compared with `==` in tests.

The one idea: only the token takes a message out of "thinking". While the original response is
thinking and the token lives, the next message or embed fills it; once the token is dead, a
thinking message the channel can reach (its id is known) is deleted, and the message sent anew.

This module never calls Discord, never waits and keeps no state of its own: the shell keeps the
value (with the interaction, since several streams of one tool-loop turn answer it in turn) and
carries each decision out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal, TypeAlias, assert_never

from cordstream.domain.results import StreamStatus

__all__ = [
    "ALREADY_ACKNOWLEDGED",
    "EXPIRED_TOKEN",
    "Accepted",
    "Answer",
    "DeleteInChannel",
    "DeleteOriginal",
    "EditByToken",
    "EditChannelMessage",
    "EditInChannel",
    "EditOriginal",
    "EditRoute",
    "FollowUp",
    "NoOriginal",
    "Opening",
    "Original",
    "Outcome",
    "Prior",
    "Refused",
    "Route",
    "SendInChannel",
    "Settling",
    "Shown",
    "Thinking",
    "Token",
    "Unreachable",
    "begin",
    "deferred",
    "looked_up",
    "route_edit",
    "route_message",
    "settle",
    "shown",
    "shows_typing",
    "thinking_deleted",
    "token_expired",
]

EXPIRED_TOKEN: Final = 50027
"""Discord's code for an interaction token that no longer works (401 Invalid Webhook Token)."""
ALREADY_ACKNOWLEDGED: Final = 40060
"""Discord's code for a deferral of an interaction something else answered already."""


# -- the state --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Thinking:
    """Discord shows "thinking…" as the original response; `message_id`: that message, when
    Discord told it (only then can the channel's route reach it)."""

    message_id: int | None = None


@dataclass(frozen=True, slots=True)
class Shown:
    """The original response shows the stream's first message or embed."""


@dataclass(frozen=True, slots=True)
class NoOriginal:
    """cordstream has no original response to fill: it deleted the thinking one, or the
    interaction was answered another way (by the bot, or by another of its processes)."""


Original: TypeAlias = Thinking | Shown | NoOriginal
Token: TypeAlias = Literal["live", "dead"]


@dataclass(frozen=True, slots=True)
class Answer:
    """Where an interaction's answer stands (see the module docstring)."""

    original: Original
    token: Token = "live"

    @property
    def thinking(self) -> bool:
        return isinstance(self.original, Thinking)


# -- what Discord answered --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Accepted:
    """Discord did it; `message_id`: the original response's id, when its answer says."""

    message_id: int | None = None


@dataclass(frozen=True, slots=True)
class Refused:
    """Discord refused: the HTTP `status` and its JSON error `code`."""

    status: int | None = None
    code: int | None = None

    @property
    def token_is_dead(self) -> bool:
        """Discord refused the interaction's token: it expired (401, 50027)."""
        return self.code == EXPIRED_TOKEN or self.status == 401


@dataclass(frozen=True, slots=True)
class Unreachable:
    """No answer from Discord (a connection error): what was asked cannot be counted on."""


Outcome: TypeAlias = Accepted | Refused | Unreachable


# -- the start --------------------------------------------------------------------------------

Prior: TypeAlias = Literal["none", "deferred", "other"]
"""How the interaction was answered before the stream: not at all, deferred by the bot itself
(type 5, public or ephemeral), or in another way (a message, a component's update)."""


@dataclass(frozen=True, slots=True)
class Opening:
    """What the first stream does before its first request: `answer`, where the interaction
    stands meanwhile; `ask`, what to ask Discord first (`defer`: defer it, public and
    "thinking", and report to `deferred`; `original_id`: look its original response up and
    report to `looked_up`; `nothing`)."""

    answer: Answer
    ask: Literal["defer", "original_id", "nothing"]


def begin(prior: Prior) -> Opening:
    """The first stream into an interaction: an interaction nobody answered is deferred (its
    response "thinking" until the deferral says otherwise); one the bot deferred is filled as
    it is; one it answered in another way gets only follow-ups."""
    match prior:
        case "none":
            return Opening(Answer(Thinking()), "defer")
        case "deferred":
            return Opening(Answer(Thinking()), "original_id")
        case "other":
            return Opening(Answer(NoOriginal()), "nothing")
        case _:
            assert_never(prior)


def deferred(answer: Answer, outcome: Outcome) -> Answer:
    """The deferral's outcome: its "thinking" message (with its id, when Discord says);
    already acknowledged elsewhere (40060): follow-ups only; any other failure (the 3 s deadline
    missed, the token dead, a connection error): the channel only, from the first message. An
    answer settled meanwhile stays settled."""
    match outcome:
        case Accepted(message_id=message_id):
            return _thinking_as(answer, message_id)
        case Refused(code=code) if code == ALREADY_ACKNOWLEDGED:
            return replace(answer, original=NoOriginal())
        case Refused() | Unreachable():
            return replace(answer, original=NoOriginal(), token="dead")
        case _:
            assert_never(outcome)


def looked_up(answer: Answer, outcome: Outcome) -> Answer:
    """The bot's own deferral, looked up: its message id; a dead token: the channel only; any
    other failure leaves it thinking with no id (the token still fills it)."""
    match outcome:
        case Accepted(message_id=message_id):
            return _thinking_as(answer, message_id)
        case Refused() as refused if refused.token_is_dead:
            return token_expired(answer)
        case Refused() | Unreachable():
            return answer
        case _:
            assert_never(outcome)


def _thinking_as(answer: Answer, message_id: int | None) -> Answer:
    """A thinking answer whose message is `message_id`; any other answer as it is."""
    return replace(answer, original=Thinking(message_id)) if answer.thinking else answer


# -- requests ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EditOriginal:
    """Fill the "thinking" original response (`edit_original_response`), then report `shown`.
    Public, whatever it carries (Discord folds the first follow-up of a pending deferral into
    it the same way)."""


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A webhook follow-up (`followup.send`); an embed is ephemeral if the context says so."""


@dataclass(frozen=True, slots=True)
class SendInChannel:
    """A normal message in the channel (`Messageable.send`); an embed is public there.
    `delete_first`: the thinking message to delete through the channel first (report
    `thinking_deleted`): whatever the channel's route edits into it, it stays "thinking"."""

    delete_first: int | None = None


Route: TypeAlias = EditOriginal | FollowUp | SendInChannel


def route_message(answer: Answer) -> Route:
    """Where the stream's next message or embed goes: into the thinking original response,
    else a follow-up; once the token is dead, the channel."""
    live, original = answer.token == "live", answer.original
    match original:
        case Thinking(message_id=message_id):
            return EditOriginal() if live else SendInChannel(delete_first=message_id)
        case Shown() | NoOriginal():
            return FollowUp() if live else SendInChannel()
        case _:
            assert_never(original)


@dataclass(frozen=True, slots=True)
class EditByToken:
    """Edit an interaction message through the token (`InteractionMessage.edit`,
    `WebhookMessage.edit`)."""


@dataclass(frozen=True, slots=True)
class EditInChannel:
    """Edit an interaction message through the channel's message route, by its id
    (`PartialMessage.edit`): public interaction messages are the bot's own."""


@dataclass(frozen=True, slots=True)
class EditChannelMessage:
    """Edit a message the channel holds, by its own route (`Message.edit`)."""


EditRoute: TypeAlias = EditByToken | EditInChannel | EditChannelMessage


def route_edit(answer: Answer, *, through_token: bool) -> EditRoute:
    """How an edit of a message the stream created goes: one reached through the token
    (`through_token`: the original response, a follow-up) by the token while it lives, else by
    the channel; a channel message by its own route."""
    if not through_token:
        return EditChannelMessage()
    match answer.token:
        case "live":
            return EditByToken()
        case "dead":
            return EditInChannel()
        case _:
            assert_never(answer.token)


def shown(answer: Answer) -> Answer:
    """The original response, thinking, now shows a message (`EditOriginal` went through)."""
    return replace(answer, original=Shown()) if answer.thinking else answer


def thinking_deleted(answer: Answer) -> Answer:
    """The thinking original response is being deleted: whatever Discord answers, nothing more
    is shown in it."""
    return replace(answer, original=NoOriginal()) if answer.thinking else answer


def token_expired(answer: Answer) -> Answer:
    """Discord refused the token as expired: every request goes through the channel from now
    on, the one refused first (ask for its route again)."""
    return replace(answer, token="dead")


def shows_typing(answer: Answer) -> bool:
    """Whether "typing…" is shown: not while Discord shows "thinking…" instead."""
    return not answer.thinking


# -- the end ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteOriginal:
    """Delete the original response through the token (`delete_original_response`). If
    Discord refuses the token as expired, settle `token_expired(answer)` again."""


@dataclass(frozen=True, slots=True)
class DeleteInChannel:
    """Delete the thinking message through the channel's message route, by its id."""

    message_id: int


@dataclass(frozen=True, slots=True)
class Settling:
    """What the end of a stream does: `answer`, where the interaction stands from now on (kept
    before `delete` is carried out); `delete`, how the thinking original response goes, or None
    (nothing thinking, the turn goes on, or no route reaches it)."""

    answer: Answer
    delete: DeleteOriginal | DeleteInChannel | None = None


def settle(answer: Answer, status: StreamStatus | None) -> Settling:
    """A stream ended with `status` (None: it has no result): nothing is left "thinking". The
    original response that received nothing is deleted, by the token while it lives, else by
    the channel when its id is known. A stream that ends on a function call leaves it thinking:
    the turn goes on, and its next segment fills it."""
    original = answer.original
    if status == "function_call":
        return Settling(answer)
    match original:
        case Shown() | NoOriginal():
            return Settling(answer)
        case Thinking(message_id=message_id):
            after = thinking_deleted(answer)
            if answer.token == "live":
                return Settling(after, DeleteOriginal())
            if message_id is None:  # no route reaches it; Discord ends it with the token
                return Settling(after)
            return Settling(after, DeleteInChannel(message_id))
        case _:
            assert_never(original)
