"""Where a stream's messages go: a channel, or an application-command interaction (SPEC F, K).

The orchestrator carries the core's effects out against a `Target` (`target_for(context)`): it
sends a message, edits one, sends an embed, shows "typing", and, for an interaction, begins (the
deferral) and settles (nothing left "thinking"). What is sent, when and how often is the core's
decision as for any channel, so every rule of B to G and L holds for an interaction as it does
for a channel (K3): the same channel lane (L2), the same retries of Discord's 429 (F4), the
context's `allowed_mentions` on every request (F1), and `StreamResult.messages` is what Discord
holds (F2).

`ChannelTarget` is a channel, thread or DM: `Messageable.send`, `Message.edit` and the
channel's typing indicator (`cordstream.shell.discord_api`). Any object with an int `id`, a `send`
and a `typing` will do.

`InteractionTarget` answers a `discord.Interaction` (K1). The one idea: where the interaction's
answer stands is one value, `cordstream.domain.interaction.Answer`, and that module makes every
choice about it: whether to defer, the route of each message, embed and edit, what a refusal of
the token means, whether "typing" shows, what settling deletes. This class asks, makes the
discord.py call the answer names, reports what Discord answered as a value (`Accepted`,
`Refused`, `Unreachable`) and keeps the value that comes back. A request Discord refuses because
the token expired is reported, and its route asked again: the same request goes through the
channel.

The value is kept with the interaction (`interaction.extras`), not with the target: the
segments of a tool-loop turn, and `run_turn`'s retries, stream into one interaction one after
another, and each stream carries on where the last one left it. `finish_interaction` settles
what a turn that ended on a function call left "thinking".

This module never chooses a route itself, never retries a 429 (`ratelimit.deliver` does), and
`begin` and `settle` never raise. The rules it carries out are K1's, in `docs/contract.md`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar, assert_never

import discord
from returns.future import future_safe

from cordstream.domain import EmbedSpec, StreamStatus
from cordstream.domain import interaction as answers
from cordstream.shell import discord_api
from cordstream.shell.context import StreamContext

if TYPE_CHECKING:
    from discord.abc import PartialMessageableChannel

__all__ = [
    "EXPIRED_TOKEN",
    "ChannelTarget",
    "InteractionTarget",
    "Target",
    "channel_id_of",
    "finish_interaction",
    "target_for",
]

EXPIRED_TOKEN: Final = answers.EXPIRED_TOKEN
"""Discord's code for an interaction token that no longer works (401 Invalid Webhook Token)."""
_KEY: Final = "cordstream.answer"  # where an interaction keeps its `answers.Answer`, in `extras`
_NOT_BEGUN: Final = answers.Answer(answers.NoOriginal())  # before `begin` knows better
_T = TypeVar("_T")


class Target(Protocol):
    """What the orchestrator sends through (see the module docstring)."""

    @property
    def channel_id(self) -> int | None:
        """The channel's id, which keys the stop registry; None when there is none."""
        ...

    @property
    def owner(self) -> object:
        """The discord.py object behind the target (its client's HTTP state is read for the bot's
        token, G4, and discord.py's global lock, B11)."""
        ...

    async def begin(self) -> None:
        """Before the first request: an interaction is deferred (K1). Never raises."""
        ...

    def send(
        self, content: str, *, reply_to: discord_api.ReplyTo, view: discord.ui.View | None
    ) -> discord_api.Sending:
        """A new message of the stream (F1; `view`: a Stop button on it, K2)."""
        ...

    def edit(
        self, message: discord.Message, content: str, *, view: discord.ui.View | None
    ) -> discord_api.Sending:
        """An edit of a message the stream created (L; `view`: `KEEP`, or None to remove)."""
        ...

    def embed(self, spec: EmbedSpec) -> discord_api.Sending:
        """An error, timeout or warning embed (G)."""
        ...

    def typing(self) -> Awaitable[object]:
        """Show "typing…" once, or nothing; awaited, its result ignored (never raises)."""
        ...

    async def settle(self, status: StreamStatus | None) -> None:
        """The stream is over (`status`: its result's, None when it has none): nothing is left
        "thinking" (K1). Never raises."""
        ...


def channel_id_of(channel: object) -> object:
    """The id that keys the stop registry: a channel's `id`, an interaction's `channel_id`."""
    if isinstance(channel, discord.Interaction):
        return channel.channel_id
    return getattr(channel, "id", None)


def target_for(context: StreamContext) -> Target:
    """The target `context.channel` names."""
    channel, mentions = context.channel, context.allowed_mentions
    if isinstance(channel, discord.Interaction):
        return InteractionTarget(
            channel, allowed_mentions=mentions, ephemeral_errors=context.ephemeral_errors
        )
    return ChannelTarget(channel, allowed_mentions=mentions)


class ChannelTarget:
    """A channel, thread or DM (any `discord.abc.Messageable` with an int `id`); every request
    with `allowed_mentions` (F1)."""

    def __init__(
        self, channel: discord.abc.Messageable, *, allowed_mentions: discord.AllowedMentions
    ) -> None:
        self.channel = channel
        self.allowed_mentions = allowed_mentions

    @property
    def channel_id(self) -> int | None:
        found = getattr(self.channel, "id", None)
        return found if isinstance(found, int) else None

    @property
    def owner(self) -> object:
        return self.channel

    async def begin(self) -> None:
        return None

    def send(
        self, content: str, *, reply_to: discord_api.ReplyTo, view: discord.ui.View | None
    ) -> discord_api.Sending:
        mentions = self.allowed_mentions
        return discord_api.send_message(
            self.channel, content, reply_to=reply_to, allowed_mentions=mentions, view=view
        )

    def edit(
        self, message: discord.Message, content: str, *, view: discord.ui.View | None
    ) -> discord_api.Sending:
        mentions = self.allowed_mentions
        return discord_api.edit_message(message, content, allowed_mentions=mentions, view=view)

    def embed(self, spec: EmbedSpec) -> discord_api.Sending:
        return discord_api.send_embed(self.channel, spec, allowed_mentions=self.allowed_mentions)

    def typing(self) -> Awaitable[object]:
        return discord_api.trigger_typing(self.channel)

    async def settle(self, status: StreamStatus | None) -> None:
        return None


class _Expired(enum.Enum):
    """What a request through the token returns when Discord refused the token as expired."""

    TOKEN = enum.auto()


def _answer_of(interaction: discord.Interaction[Any]) -> answers.Answer | None:
    known = interaction.extras.get(_KEY)
    return known if isinstance(known, answers.Answer) else None


def _current(interaction: discord.Interaction[Any]) -> answers.Answer:
    known = _answer_of(interaction)
    return _NOT_BEGUN if known is None else known


def _keep(interaction: discord.Interaction[Any], answer: answers.Answer) -> None:
    interaction.extras[_KEY] = answer


def _refusal(error: discord.HTTPException) -> answers.Refused:
    return answers.Refused(status=error.status, code=error.code)


async def _through_token(
    interaction: discord.Interaction[Any], request: Callable[[], Awaitable[_T]]
) -> _T | Literal[_Expired.TOKEN]:
    """`request`, made through the interaction's token. When Discord refuses the token as
    expired, the answer learns it, and the caller asks the answer for the route again."""
    try:
        return await request()
    except discord.HTTPException as error:
        if not _refusal(error).token_is_dead:
            raise
        _keep(interaction, answers.token_expired(_current(interaction)))
        return _Expired.TOKEN


async def _outcome(request: Awaitable[int | None]) -> answers.Outcome:
    """What Discord answered a request of `begin` (a message id, or None), as a value."""
    try:
        message_id = await request
    except discord.HTTPException as error:
        return _refusal(error)
    except discord.InteractionResponded:  # pragma: no cover - `begin` checked: Discord's 40060
        return answers.Refused(code=answers.ALREADY_ACKNOWLEDGED)
    except Exception:  # a connection error: the request cannot be counted on
        return answers.Unreachable()
    return answers.Accepted(message_id)


def _interaction_message(message: discord.Message) -> bool:
    """A message reached through the interaction's token (its original response, a follow-up)."""
    return isinstance(message, discord.InteractionMessage | discord.WebhookMessage)


class InteractionTarget:
    """An application-command interaction (K1; see the module docstring); every request with
    `allowed_mentions` (F1), error embeds ephemeral if `ephemeral_errors`."""

    def __init__(
        self,
        interaction: discord.Interaction[Any],
        *,
        allowed_mentions: discord.AllowedMentions,
        ephemeral_errors: bool,
    ) -> None:
        self.interaction = interaction
        self.allowed_mentions = allowed_mentions
        self.ephemeral_errors = ephemeral_errors
        self.ready = asyncio.Event()  # set once `begin` knows where the interaction stands

    @property
    def channel_id(self) -> int | None:
        return self.interaction.channel_id

    @property
    def owner(self) -> object:
        return self.interaction

    @property
    def answer(self) -> answers.Answer:
        """Where the interaction's answer stands (`cordstream.domain.interaction`)."""
        return _current(self.interaction)

    async def begin(self) -> None:
        """Defer the interaction, or look its deferral up, as `answers.begin` says (K1); an
        earlier stream of the same turn already did."""
        interaction = self.interaction
        try:
            if _answer_of(interaction) is not None:
                return
            opening = answers.begin(self.prior())
            _keep(interaction, opening.answer)
            match opening.ask:
                case "defer":
                    deferral = await _outcome(self.defer())
                    _keep(interaction, answers.deferred(self.answer, deferral))
                case "original_id":
                    found = await _outcome(self.original_id())
                    _keep(interaction, answers.looked_up(self.answer, found))
                case "nothing":
                    pass
                case _:
                    assert_never(opening.ask)
        finally:
            self.ready.set()

    def prior(self) -> answers.Prior:
        """How the interaction was answered before the stream, in the answer's words."""
        response = self.interaction.response
        if not response.is_done():
            return "none"
        if response.type is discord.InteractionResponseType.deferred_channel_message:
            return "deferred"
        return "other"

    async def defer(self) -> int | None:
        """Defer the interaction, public and "thinking"; its message id, when Discord says."""
        callback = await self.interaction.response.defer(thinking=True)
        return None if callback is None else callback.message_id

    async def original_id(self) -> int | None:
        return (await self.interaction.original_response()).id

    # -- requests -----------------------------------------------------------------------------

    def fallback_channel(self) -> PartialMessageableChannel:
        """The interaction's channel, for what its token can no longer do."""
        return _channel_of(self.interaction)

    async def new_message(
        self,
        shows: dict[str, Any],
        followup: Callable[[], Awaitable[discord.Message]],
        in_channel: Callable[[PartialMessageableChannel], Awaitable[discord.Message]],
    ) -> discord.Message:
        """A new message of the stream, text or embed, by the route `answers.route_message`
        names: the thinking original response, edited to `shows`; `followup`; or `in_channel`."""
        await self.ready.wait()
        interaction = self.interaction
        while True:  # once more after the token expired, which routes it to the channel
            route = answers.route_message(self.answer)
            match route:
                case answers.EditOriginal():
                    filled = await _through_token(
                        interaction, lambda: interaction.edit_original_response(**shows)
                    )
                    if filled is not _Expired.TOKEN:
                        _keep(interaction, answers.shown(self.answer))
                        return filled
                case answers.FollowUp():
                    sent = await _through_token(interaction, followup)
                    if sent is not _Expired.TOKEN:
                        return sent
                case answers.SendInChannel(delete_first=thinking):
                    channel = self.fallback_channel()
                    if thinking is not None:
                        _keep(interaction, answers.thinking_deleted(self.answer))
                        with contextlib.suppress(discord.HTTPException):  # gone, or no access:
                            await channel.get_partial_message(thinking).delete()  # send anyway
                    return await in_channel(channel)
                case _:
                    assert_never(route)

    @future_safe
    async def send(
        self, content: str, *, reply_to: discord_api.ReplyTo, view: discord.ui.View | None
    ) -> discord.Message:
        mentions = self.allowed_mentions
        components = discord_api.KEEP if view is None else view
        return await self.new_message(
            {"content": content, "allowed_mentions": mentions, "view": components},
            lambda: self.interaction.followup.send(
                content, allowed_mentions=mentions, view=components, wait=True
            ),
            lambda channel: discord_api.post(
                channel, content, reply_to=None, allowed_mentions=mentions, view=view
            ),
        )

    @future_safe
    async def edit(
        self, message: discord.Message, content: str, *, view: discord.ui.View | None
    ) -> discord.Message:
        await self.ready.wait()
        mentions, through_token = self.allowed_mentions, _interaction_message(message)
        while True:  # once more after the token expired, which routes it to the channel
            route = answers.route_edit(self.answer, through_token=through_token)
            match route:
                case answers.EditByToken():
                    edited = await _through_token(
                        self.interaction,
                        lambda: message.edit(content=content, allowed_mentions=mentions, view=view),
                    )
                    if edited is not _Expired.TOKEN:
                        return edited
                case answers.EditInChannel():
                    target = self.fallback_channel().get_partial_message(message.id)
                    return await target.edit(content=content, allowed_mentions=mentions, view=view)
                case answers.EditChannelMessage():
                    return await message.edit(content=content, allowed_mentions=mentions, view=view)
                case _:
                    assert_never(route)

    @future_safe
    async def embed(self, spec: EmbedSpec) -> discord.Message:
        embed, mentions = discord_api.build_embed(spec), self.allowed_mentions
        return await self.new_message(
            {"embed": embed, "allowed_mentions": mentions},
            lambda: self.interaction.followup.send(
                embed=embed, allowed_mentions=mentions, ephemeral=self.ephemeral_errors, wait=True
            ),
            lambda channel: channel.send(embed=embed, allowed_mentions=mentions),
        )

    async def typing(self) -> None:
        await self.ready.wait()
        if not answers.shows_typing(self.answer):
            return
        try:
            channel = self.fallback_channel()
        except Exception:  # pragma: no cover - cosmetic: no channel, no typing
            return
        await discord_api.trigger_typing(channel)

    async def settle(self, status: StreamStatus | None) -> None:
        """Nothing is left "thinking" (K1), as `answers.settle` says."""
        await _settle(self.interaction, status)


def _channel_of(interaction: discord.Interaction[Any]) -> PartialMessageableChannel:
    channel = interaction.channel
    if isinstance(
        channel,
        discord.TextChannel
        | discord.VoiceChannel
        | discord.StageChannel
        | discord.Thread
        | discord.DMChannel
        | discord.PartialMessageable,
    ):
        return channel
    channel_id = interaction.channel_id
    assert channel_id is not None  # the orchestrator streams only into a channel
    client: discord.Client = interaction.client
    return client.get_partial_messageable(channel_id, guild_id=interaction.guild_id)


async def _settle(interaction: discord.Interaction[Any], status: StreamStatus | None) -> None:
    answer = _answer_of(interaction)
    if answer is None:  # `begin` never ran: nothing of cordstream's to settle
        return
    try:
        while True:  # once more after the token expired, which routes it to the channel
            settling = answers.settle(answer, status)
            _keep(interaction, settling.answer)
            delete = settling.delete
            match delete:
                case None:
                    return
                case answers.DeleteOriginal():
                    deleted = await _through_token(
                        interaction, interaction.delete_original_response
                    )
                    if deleted is not _Expired.TOKEN:
                        return
                    answer = answers.token_expired(answer)
                case answers.DeleteInChannel(message_id=message_id):
                    await _channel_of(interaction).get_partial_message(message_id).delete()
                    return
                case _:
                    assert_never(delete)
    except Exception:  # nothing more can be done about it; the stream's result stands
        pass


async def finish_interaction(interaction: discord.Interaction[Any]) -> None:
    """Settle an interaction cordstream left "thinking" because its last stream ended on a
    function call (K1): its original response, which received nothing, is deleted. Nothing
    happens when cordstream did not leave it thinking. `run_turn` calls it when a turn ends;
    a bot running its own tool loop calls it when it stops streaming into the interaction.
    Never raises."""
    await _settle(interaction, None)
