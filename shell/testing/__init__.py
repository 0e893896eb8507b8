"""A test kit for bots built on cordstream: a local Discord that a real `discord.Client` talks to.

Nothing here is needed to stream an answer; it is for tests and demos. `DiscordEmulator` is an
aiohttp server on 127.0.0.1 (a random port) that serves the part of Discord's REST API a
streaming bot uses, records every request and each channel's transcript, injects faults on
demand (429s, 403/404/5xx, dropped connections, slow replies) and, as an option, plays
Discord's real rate limits. `discord_client` logs a real `discord.Client` into it. See
`cordstream.shell.testing.emulator` for every detail, and the README's "Test your bot against a
local Discord".

    async with DiscordEmulator() as api, discord_client(api) as client:
        channel = await client.fetch_channel(api.channel_id)
        ...  # call your bot's code with `channel`
        assert api.text() == "what your bot should have said"
"""

from __future__ import annotations

from cordstream.shell.testing.emulator import (
    Delay,
    DiscordEmulator,
    Drop,
    ErrorReply,
    Fault,
    Limit,
    RateLimited,
    RateLimits,
    RecordedRequest,
    SentMessage,
    discord_client,
)

# What a bot's tests need; the error codes, the route names and `would_ping` are in
# `cordstream.shell.testing.emulator`.
__all__ = [
    "Delay",
    "DiscordEmulator",
    "Drop",
    "ErrorReply",
    "Fault",
    "Limit",
    "RateLimited",
    "RateLimits",
    "RecordedRequest",
    "SentMessage",
    "discord_client",
]
