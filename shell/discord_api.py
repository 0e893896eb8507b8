"""The Discord boundary: sends, edits and typing, with failures turned into values (SPEC F1, F4, G).

Every call goes through discord.py's `Messageable.send` or `Message.edit`, with the context's
`allowed_mentions` (F1); `cordstream.shell.target` calls these for a channel, and discord.py's
interaction routes for an interaction (K1). `future_safe` turns what discord.py raises — `NotFound`,
`Forbidden`, `HTTPException`, `DiscordServerError` after its own retries, connection errors —
into an `IOFailure`; `outcome` turns either result into the event the core decides on (F4):
the core, not this module, knows that 10003 means the channel is gone. `retry_after` tells a
429 that Discord itself answered (so nothing was accepted, and the send may go again, see
`cordstream.shell.ratelimit`) from every other failure.
"""

from __future__ import annotations

import math
from typing import Any, Final, TypeAlias

import discord
from returns.future import FutureResultE, future_safe
from returns.io import IOFailure, IOResultE, IOSuccess
from returns.result import Failure, Success

from cordstream.domain import Delivered, DiscordFailure, EmbedSpec, Rejected

_COLOURS = {"warning": discord.Colour.orange(), "error": discord.Colour.red()}

Sending = FutureResultE[discord.Message]
"""A message request under way: awaited, Discord's message or the failure, never an exception."""

ReplyTo: TypeAlias = discord.Message | discord.PartialMessage | None
"""The message a new one replies to (without pinging its author, F1), or None."""

KEEP: Final[Any] = discord.utils.MISSING
"""An edit's `view` that leaves the message's components as they are (a Stop button stays, K2);
`None` removes them."""


async def post(
    channel: discord.abc.Messageable,
    content: str,
    *,
    reply_to: ReplyTo,
    allowed_mentions: discord.AllowedMentions,
    view: discord.ui.View | None = None,
) -> discord.Message:
    """Send one message; a reply to `reply_to` when given, never pinging its author (F1).
    `view`: the components that ride on it (a Stop button, K2).

    A deleted `reply_to` does not fail the send (`fail_if_not_exists=False`): the message
    then goes out as a plain one.
    """
    extra: dict[str, Any] = {} if view is None else {"view": view}
    if reply_to is None:
        return await channel.send(content, allowed_mentions=allowed_mentions, **extra)
    return await channel.send(
        content,
        allowed_mentions=allowed_mentions,
        reference=reply_to.to_reference(fail_if_not_exists=False),
        mention_author=False,
        **extra,
    )


send_message = future_safe(post)
"""`post`, its failure a value (`IOFailure`) instead of an exception."""


@future_safe
async def send_embed(
    channel: discord.abc.Messageable, spec: EmbedSpec, *, allowed_mentions: discord.AllowedMentions
) -> discord.Message:
    """Send an embed built from the core's `EmbedSpec` (G)."""
    return await channel.send(embed=build_embed(spec), allowed_mentions=allowed_mentions)


def build_embed(spec: EmbedSpec) -> discord.Embed:
    """The embed the core's `EmbedSpec` describes (G)."""
    return discord.Embed(
        title=spec.title, description=spec.description, colour=_COLOURS[spec.colour]
    )


@future_safe
async def edit_message(
    message: discord.Message | discord.PartialMessage,
    content: str,
    *,
    allowed_mentions: discord.AllowedMentions,
    view: discord.ui.View | None = KEEP,
) -> discord.Message:
    """Replace a live message's content (L1–L5), with the context's `allowed_mentions` (F1).
    `view`: `KEEP` leaves its components alone, `None` removes them (K2)."""
    if view is KEEP:
        return await message.edit(content=content, allowed_mentions=allowed_mentions)
    return await message.edit(content=content, allowed_mentions=allowed_mentions, view=view)


@future_safe
async def trigger_typing(channel: discord.abc.Messageable) -> None:
    """Show "is typing…" once (it lasts about ten seconds or until the next message).

    The request's coroutine is awaited directly (`Typing.wrapped_typer`, discord.py 2.x), not
    through `Typing.__await__`, whose wrapper hides the chain from
    `cordstream.shell.discordpy_global_lock`:
    a typing request cancelled while discord.py sleeps off a global 429 must be seen as one,
    or discord.py's global lock is left closed (B11)."""
    typing = channel.typing()
    wrapped = getattr(typing, "wrapped_typer", None)
    if callable(wrapped):
        await wrapped()
    else:  # pragma: no cover - another discord.py
        await typing


def outcome(seq: int, now: float, result: IOResultE[discord.Message]) -> Delivered | Rejected:
    """The event for the core: Discord accepted send `seq`, or refused it and why (F4)."""
    match result:
        case IOSuccess(Success(message)):
            return Delivered(now, seq, message.jump_url)
        case IOFailure(Failure(error)):
            return Rejected(now, seq, failure(error))
    raise AssertionError(f"not an IOResult: {result!r}")  # pragma: no cover


def message_of(result: IOResultE[discord.Message]) -> discord.Message | None:
    """The message Discord answered with, if it accepted the request."""
    match result:
        case IOSuccess(Success(discord.Message() as message)):
            return message
    return None


def retry_after(result: IOResultE[object]) -> float | None:
    """The seconds Discord asked to wait when `result` is Discord's own 429, which discord.py
    gave up on after its tries: a reply with `Via` and a JSON body (Discord accepted nothing).
    None for anything else, a Cloudflare 429 (no `Via`: a ban, not to be hammered) included.

    The wait is `X-RateLimit-Reset-After` (a bucket's 429) or else `Retry-After` (a global
    one), 0.0 when neither reads as a number of seconds; discord.py keeps the body's
    `retry_after` to itself.
    """
    match result:
        case IOFailure(Failure(discord.HTTPException() as error)) if error.status == 429:
            headers = getattr(error.response, "headers", None) or {}
            if not headers.get("Via"):
                return None
            if not str(headers.get("Content-Type", "")).startswith("application/json"):
                return None
            for name in ("X-RateLimit-Reset-After", "Retry-After"):
                try:
                    seconds = float(headers.get(name, ""))
                except (TypeError, ValueError):
                    continue
                if math.isfinite(seconds) and seconds >= 0:
                    return seconds
            return 0.0
    return None


def failure(error: BaseException) -> DiscordFailure:
    """Discord's JSON error code and HTTP status, when the failure came from Discord."""
    if isinstance(error, discord.HTTPException):
        return DiscordFailure(error.code or None, error.status, error)
    return DiscordFailure(None, None, error)  # a connection error, a timeout


__all__ = [
    "KEEP",
    "Sending",
    "build_embed",
    "edit_message",
    "failure",
    "message_of",
    "outcome",
    "post",
    "retry_after",
    "send_embed",
    "send_message",
    "trigger_typing",
]
