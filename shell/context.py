"""What a bot hands `stream_to_discord`: where to stream, and the provider (SPEC §A)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import discord

from cordstream.domain import ProcessedChunk, ProviderError
from cordstream.shell.config import StreamConfig

Raw = TypeVar("Raw")


@dataclass(frozen=True)
class StreamContext:
    """One stream's Discord side.

    - `channel`: where messages go; any `discord.abc.Messageable` with an `.id` (a text
      channel, thread, DM), or a `discord.Interaction` to answer (a slash command, K1: see
      `cordstream.shell.target` for what cordstream does with it). The channel's id (an
      interaction's `channel_id`) keys the stop registry.
    - `reply_to`: the user's message; the first message replies to it without pinging (F1).
      Not used for an interaction, whose answer is already tied to the command.
    - `suppress_user_errors`: send no error, timeout or warning embed (G7), e.g. while the
      tool loop retries.
    - `on_stream_progress`: called on every chunk, before `process_chunk` (B5); an exception
      it raises is ignored, so a heartbeat cannot break a stream.
    - `locale`: for embed texts (see `cordstream.domain.catalogue`).
    - `allowed_mentions`: passed to every send; the default pings nobody, so model output
      can never ping @everyone, a role or a user (F1).
    - `answering`: the id of the user this stream answers (C9), or None. With it, a stop aimed
      at that user (`request_stop(..., answering=user_id)`) or a follow-up from that user ends
      this stream alone, and requests aimed at other users' answers in the channel never reach
      it; a channel-wide `request_stop` still does. None: the stream is the channel's answer,
      and every stop or follow-up in the channel ends it (C1–C8).
    - `stop_button`: a Stop button rides on each live message while it streams and goes with
      its final edit (K2, live delivery only); pressing it is a user stop for this answer,
      allowed to the user it answers (`answering`) and to members who may manage messages in
      the channel (C10); anyone else gets an ephemeral refusal. See `cordstream.shell.buttons`.
    - `ephemeral_errors`: for an interaction, error, timeout and warning embeds are ephemeral
      follow-ups only the user sees (K1; the default); False: public follow-ups. An embed
      that comes before any text replaces the "thinking" state, publicly, either way.
    """

    channel: discord.abc.Messageable | discord.Interaction[Any]
    reply_to: discord.Message | discord.PartialMessage | None = None
    suppress_user_errors: bool = False
    on_stream_progress: Callable[[], None] | None = None
    locale: str = "en"
    allowed_mentions: discord.AllowedMentions = field(default_factory=discord.AllowedMentions.none)
    answering: int | None = None
    stop_button: bool = False
    ephemeral_errors: bool = True


class StreamProvider(Protocol[Raw]):
    """A model's stream, adapted: raw items in, processed chunks out (SPEC §A)."""

    name: str

    def start_stream(self, config: StreamConfig, context: StreamContext) -> AsyncIterator[Raw]:
        """Open the stream. Called only when no stop is pending (B4); closed with `aclose()`."""
        ...

    def process_chunk(self, raw: Raw) -> ProcessedChunk:
        """Turn one raw item into a chunk. May raise: that ends the stream as `error` (B13)."""
        ...

    def describe_error(self, error: ProviderError, locale: str) -> str | None:
        """A short headline for an error embed, or None for the generic one (G1)."""
        ...
