"""The checks of what a bot hands `stream_to_discord` and `run_turn`, before anything starts.

Both calls promise a result, never an exception (B1), so a wrong argument is a result too: the
call returns status `error` with `data` a `TypeError` that names the call, the parameter and
the type it got ("stream_to_discord: config must be a StreamConfig, got dict"). Nothing is
sent to Discord or the model, and the core is never fed, so such a call lists no anomaly and
logs nothing: it is the caller's mistake, not cordstream's.

The checks are as loose as the calls themselves: a provider is anything with callable
`start_stream` and `process_chunk` (the Protocol, duck-typed), a channel anything with an int
`id`, or an interaction in a channel. When what came is one of the call's own argument types
in the wrong place (config and context swapped), the message quotes the signature; an int
channel is named as the id it probably is.
"""

from __future__ import annotations

from collections.abc import Mapping

import discord

from cordstream.domain import config as domain_config
from cordstream.shell.context import StreamContext

__all__ = ["stream_argument_error", "turn_argument_error"]

_STREAM = "stream_to_discord(provider, config, context)"
_TURN = "run_turn(orchestrator, provider, context, *, tools, config=None)"
_CHANNEL = "a channel with an int `id` or a discord.Interaction"


def stream_argument_error(provider: object, config: object, context: object) -> TypeError | None:
    """The first wrong argument of `stream_to_discord`, as a TypeError; None when all fit."""
    problem = (
        _provider(provider, _STREAM)
        or _expected(config, domain_config.StreamConfig, "config", _STREAM)
        or _context(context, _STREAM)
    )
    return None if problem is None else TypeError(f"stream_to_discord: {problem}")


def turn_argument_error(
    orchestrator: object, provider: object, context: object, tools: object, config: object
) -> TypeError | None:
    """The first wrong argument of `run_turn`, as a TypeError; None when all fit."""
    problem = (
        _orchestrator(orchestrator)
        or _provider(provider, _TURN)
        or _context(context, _TURN)
        or _tools(tools)
        or (
            None
            if config is None
            else _expected(config, domain_config.StreamConfig, "config", _TURN)
        )
    )
    return None if problem is None else TypeError(f"run_turn: {problem}")


def _orchestrator(value: object) -> str | None:
    if not isinstance(value, type) and callable(getattr(value, "stream_to_discord", None)):
        return None
    return f"orchestrator must be a StreamOrchestrator, got {_got(value, _TURN)}"


def _provider(provider: object, signature: str) -> str | None:
    if isinstance(provider, type):
        name = provider.__name__
        return f"provider must be a StreamProvider, got the class {name} (pass an instance)"
    if all(callable(getattr(provider, name, None)) for name in ("start_stream", "process_chunk")):
        return None
    got = _got(provider, signature)
    return f"provider must be a StreamProvider (with start_stream and process_chunk), got {got}"


def _context(context: object, signature: str) -> str | None:
    if not isinstance(context, StreamContext):
        return _expected(context, StreamContext, "context", signature)
    channel = context.channel
    if isinstance(channel, discord.Interaction):
        if isinstance(channel.channel_id, int):
            return None
        return "context.channel must be an interaction in a channel, got one without a channel_id"
    if isinstance(channel, int):
        got = type(channel).__name__
        return f"context.channel must be {_CHANNEL}, got {got} (pass the channel, not its id)"
    if isinstance(getattr(channel, "id", None), int):
        return None
    return f"context.channel must be {_CHANNEL}, got {_got(channel, signature)}"


def _tools(tools: object) -> str | None:
    if isinstance(tools, Mapping):
        return None
    return f"tools must be a mapping of tool names to async functions, got {type(tools).__name__}"


def _expected(value: object, kind: type, name: str, signature: str) -> str | None:
    if isinstance(value, kind):
        return None
    return f"{name} must be a {kind.__name__}, got {_got(value, signature)}"


def _got(value: object, signature: str) -> str:
    """What came, by its type's name; with the signature when it is one of the call's own
    argument types (a swap)."""
    name = type(value).__name__
    ours = isinstance(value, StreamContext | domain_config.StreamConfig) or (
        not isinstance(value, type) and hasattr(value, "stream_to_discord")
    )
    return f"{name} (the arguments are {signature})" if ours else name
