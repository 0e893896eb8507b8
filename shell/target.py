"""Where a stream's messages go: a channel, or an application-command interaction (SPEC F, K1, K3).

The orchestrator carries the core's effects out against a target (`target_for(context)`): it
sends a message, edits one, sends an embed, shows "typing", and, for an interaction, begins
(the deferral) and settles (nothing left "thinking"). What is sent, when and how often is the
core's decision as for any channel, so every rule of B to G and L holds for an interaction as
it does for a channel (K3): the same channel lane (`ratelimit.turn(channel_id)`, L2), the same
retries of Discord's 429 (`ratelimit.deliver`, F4), the context's `allowed_mentions` on every
request (F1), and `StreamResult.messages` is what Discord holds (F2).

`ChannelTarget` is what cordstream always did: `Messageable.send`, `Message.edit` and the
channel's typing indicator (`cordstream.shell.delivery`). Any object with an int `id`, a
`send` and a `typing` will do.

`InteractionTarget` answers a `discord.Interaction` (K1):

- **The deferral.** When the stream starts, an interaction nobody answered yet is deferred at
  once ("thinking…", public: `response.defer(thinking=True)`), in a task of the stream, while
  the provider starts; every Discord request of the stream waits for it. An interaction the
  bot deferred itself (type 5, public or ephemeral) is used as it is; one it answered in any
  other way (a message, a component's update) gets only follow-ups.
- **Messages.** The first message is the interaction's original response: the deferral's
  "thinking" message, edited (`edit_original_response`), which ends the thinking state. Every
  further message is a webhook follow-up (`followup.send`). Live delivery edits both in place
  (`InteractionMessage.edit`, `WebhookMessage.edit`), each with the context's
  `allowed_mentions`.
- **Embeds.** Error, timeout and warning embeds are follow-ups, ephemeral by default
  (`StreamContext.ephemeral_errors`), so only the user who asked sees them. An embed that
  comes while the original response is still "thinking" (an error or timeout before any text)
  replaces the thinking state instead, publicly (what Discord does with the first follow-up
  of a pending deferral).
- **Typing.** While the original response is "thinking", Discord shows that, so no typing
  indicator is sent; once it shows something, typing goes to the channel as usual.
- **Nothing left thinking.** When a stream ends with the original response still "thinking"
  (no text and no embed: an empty answer, a stop or a follow-up before any text, errors
  suppressed, the caller's cancellation), the original response is deleted (through the
  channel's message route when the interaction's token no longer works): nothing shown,
  nothing stays. One exception: a stream that ends as `function_call` leaves it "thinking",
  because the answer is not over; the bot runs the tools and streams the next segment into
  the same interaction. `run_turn` settles it when a turn ends on a function call (a tool
  limit, a broken adapter, the caller's cancellation); a bot with a loop of its own calls
  `finish_interaction(interaction)` when it gives up.
- **Several streams, one interaction.** The segments of a tool-loop turn (and `run_turn`'s
  retries of an empty answer) stream into one interaction one after another. Where the
  interaction stands (its original response "thinking", showing something, or gone; its token
  dead) is kept with the interaction (`interaction.extras`), so the next stream carries on:
  its first message is a follow-up once the original response shows a message.
- **The token's expiry.** An interaction's token lives 15 minutes. When Discord answers a
  request of the interaction's webhook with 401 (50027 Invalid Webhook Token), the stream
  carries on in the channel, as normal messages: that same request is made again at once
  through the channel (a new message with `Messageable.send`; an edit of the original
  response or of a follow-up through the channel's message route, `PartialMessage.edit`,
  since public interaction messages are the bot's own), and so is every later one. A
  deferral still "thinking" then is deleted through the channel and the first message sent
  anew (only the token takes a message out of "thinking"). Nothing is lost, and `messages`
  holds what the channel shows. Embeds then go to the channel publicly
  (a channel cannot show an ephemeral message). An ephemeral answer (a deferral the bot made
  ephemeral) cannot outlive its token: the channel's routes do not reach it (Discord answers
  10008), so it ends as `message_deleted` (L9).
- **A deferral that fails.** 40060 (already acknowledged, by another process of the bot):
  follow-ups only. Any other failure (the 3 s deadline missed, 10062; the token dead; a
  connection error): the stream is delivered in the channel from its first message.
- **The stop registry's key** is the interaction's channel (`Interaction.channel_id`), so a
  `/stop` in that channel and a Stop button (K2) reach the stream.
- `reply_to` is not used for an interaction: its original response is already tied to the
  command.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import discord
from returns.future import future_safe

from cordstream.domain import EmbedSpec, StreamStatus
from cordstream.shell import delivery
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

EXPIRED_TOKEN: Final = 50027
"""Discord's code for an interaction token that no longer works (401 Invalid Webhook Token)."""
_ALREADY_ACKNOWLEDGED: Final = 40060
_KEY: Final = "cordstream.answer"  # where an interaction keeps `_Answer`, in its `extras`

Original = Literal["thinking", "shown", "none"]


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
        self, content: str, *, reply_to: delivery.ReplyTo, view: discord.ui.View | None
    ) -> delivery.Sending:
        """A new message of the stream (F1; `view`: a Stop button on it, K2)."""
        ...

    def edit(
        self, message: discord.Message, content: str, *, view: discord.ui.View | None
    ) -> delivery.Sending:
        """An edit of a message the stream created (L; `view`: `KEEP`, or None to remove)."""
        ...

    def embed(self, spec: EmbedSpec) -> delivery.Sending:
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
        self, content: str, *, reply_to: delivery.ReplyTo, view: discord.ui.View | None
    ) -> delivery.Sending:
        mentions = self.allowed_mentions
        return delivery.send_message(
            self.channel, content, reply_to=reply_to, allowed_mentions=mentions, view=view
        )

    def edit(
        self, message: discord.Message, content: str, *, view: discord.ui.View | None
    ) -> delivery.Sending:
        mentions = self.allowed_mentions
        return delivery.edit_message(message, content, allowed_mentions=mentions, view=view)

    def embed(self, spec: EmbedSpec) -> delivery.Sending:
        return delivery.send_embed(self.channel, spec, allowed_mentions=self.allowed_mentions)

    def typing(self) -> Awaitable[object]:
        return delivery.trigger_typing(self.channel)

    async def settle(self, status: StreamStatus | None) -> None:
        return None


@dataclass(eq=False)
class _Answer:
    """Where an interaction stands, shared by the streams that answer it (the module docstring):
    its original response (`thinking`, `shown`, or `none`: deleted, or not ours), that
    response's message id when known, and whether the interaction's routes are done with
    (`channel_only`: the token expired, or the deferral failed)."""

    original: Original
    original_id: int | None = None
    channel_only: bool = False


def _expired(error: BaseException) -> bool:
    """Discord refused the interaction's token: it expired (401, 50027)."""
    return isinstance(error, discord.HTTPException) and (
        error.code == EXPIRED_TOKEN or error.status == 401
    )


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
        self.answer = _Answer("none")
        self.ready = asyncio.Event()  # set once `begin` knows where the interaction stands

    @property
    def channel_id(self) -> int | None:
        return self.interaction.channel_id

    @property
    def owner(self) -> object:
        return self.interaction

    async def begin(self) -> None:
        """Defer the interaction unless it was answered; learn where it stands (K1)."""
        interaction = self.interaction
        try:
            known = interaction.extras.get(_KEY)
            if isinstance(known, _Answer):  # an earlier stream of the same turn
                self.answer = known
                return
            answer = self.answer = _Answer("none")
            interaction.extras[_KEY] = answer
            response = interaction.response
            if not response.is_done():
                answer.original = "thinking"  # until the deferral says otherwise
                try:
                    callback = await response.defer(thinking=True)
                except discord.HTTPException as error:
                    answer.original = "none"
                    answer.channel_only = error.code != _ALREADY_ACKNOWLEDGED
                except discord.InteractionResponded:  # pragma: no cover - checked just above
                    answer.original = "none"
                except Exception:  # a connection error: the interaction cannot be counted on
                    answer.original = "none"
                    answer.channel_only = True
                else:
                    answer.original_id = None if callback is None else callback.message_id
            elif response.type is discord.InteractionResponseType.deferred_channel_message:
                answer.original = "thinking"  # the bot deferred it: cordstream fills it
                try:
                    answer.original_id = (await interaction.original_response()).id
                except Exception as error:
                    answer.channel_only = _expired(error)
        finally:
            self.ready.set()

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
        """A new message of the stream, text or embed (K1): the original response while it is
        "thinking" (`shows`: what that edit carries), else `followup`; once the token is dead,
        the deferral's message through the channel, else `in_channel`."""
        await self.ready.wait()
        answer = self.answer
        if not answer.channel_only:
            try:
                if answer.original == "thinking":
                    message = await self.interaction.edit_original_response(**shows)
                    answer.original, answer.original_id = "shown", message.id
                    return message
                return await followup()
            except discord.HTTPException as error:
                if not _expired(error):
                    raise
                answer.channel_only = True
        channel = self.fallback_channel()
        if answer.original == "thinking" and answer.original_id is not None:
            # The deferral's message stays "thinking" whatever the channel's route edits into
            # it (only the token ends that state): it is deleted, and the message sent anew.
            thinking, answer.original, answer.original_id = answer.original_id, "none", None
            with contextlib.suppress(discord.HTTPException):  # gone already, or no access:
                await channel.get_partial_message(thinking).delete()  # the text goes anyway
        return await in_channel(channel)

    @future_safe
    async def send(
        self, content: str, *, reply_to: delivery.ReplyTo, view: discord.ui.View | None
    ) -> discord.Message:
        mentions = self.allowed_mentions
        components = delivery.KEEP if view is None else view
        return await self.new_message(
            {"content": content, "allowed_mentions": mentions, "view": components},
            lambda: self.interaction.followup.send(
                content, allowed_mentions=mentions, view=components, wait=True
            ),
            lambda channel: delivery.post(
                channel, content, reply_to=None, allowed_mentions=mentions, view=view
            ),
        )

    @future_safe
    async def edit(
        self, message: discord.Message, content: str, *, view: discord.ui.View | None
    ) -> discord.Message:
        await self.ready.wait()
        answer, allowed_mentions = self.answer, self.allowed_mentions
        if _interaction_message(message):
            if not answer.channel_only:
                try:
                    return await message.edit(
                        content=content, allowed_mentions=allowed_mentions, view=view
                    )
                except discord.HTTPException as error:
                    if not _expired(error):
                        raise
                    answer.channel_only = True
            # Public interaction messages are the bot's own: the channel's route edits them.
            target = self.fallback_channel().get_partial_message(message.id)
            return await target.edit(content=content, allowed_mentions=allowed_mentions, view=view)
        return await message.edit(content=content, allowed_mentions=allowed_mentions, view=view)

    @future_safe
    async def embed(self, spec: EmbedSpec) -> discord.Message:
        embed, mentions = delivery.build_embed(spec), self.allowed_mentions
        # Before any text, the embed replaces the thinking state (K1).
        return await self.new_message(
            {"embed": embed, "allowed_mentions": mentions},
            lambda: self.interaction.followup.send(
                embed=embed, allowed_mentions=mentions, ephemeral=self.ephemeral_errors, wait=True
            ),
            lambda channel: channel.send(embed=embed, allowed_mentions=mentions),
        )

    async def typing(self) -> None:
        await self.ready.wait()
        if self.answer.original == "thinking":  # Discord shows "thinking…" meanwhile
            return
        try:
            channel = self.fallback_channel()
        except Exception:  # pragma: no cover - cosmetic: no channel, no typing
            return
        await delivery.trigger_typing(channel)

    async def settle(self, status: StreamStatus | None) -> None:
        """Nothing is left "thinking" (K1): the original response that received nothing is
        deleted, unless the stream ended on a function call (the turn goes on)."""
        if status != "function_call":
            await _settle(self.interaction, self.answer)


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


async def _settle(interaction: discord.Interaction[Any], answer: _Answer) -> None:
    if answer.original != "thinking":
        return
    answer.original = "none"
    try:
        if not answer.channel_only:
            try:
                await interaction.delete_original_response()
                return
            except discord.HTTPException as error:
                if not _expired(error) or answer.original_id is None:
                    raise
                answer.channel_only = True
        if answer.original_id is not None:
            await _channel_of(interaction).get_partial_message(answer.original_id).delete()
    except Exception:  # nothing more can be done about it; the stream's result stands
        pass


async def finish_interaction(interaction: discord.Interaction[Any]) -> None:
    """Settle an interaction cordstream left "thinking" because its last stream ended on a
    function call (K1): its original response, which received nothing, is deleted. Nothing
    happens when cordstream did not leave it thinking. `run_turn` calls it when a turn ends;
    a bot running its own tool loop calls it when it stops streaming into the interaction.
    Never raises."""
    known = interaction.extras.get(_KEY)
    if isinstance(known, _Answer):
        await _settle(interaction, known)
