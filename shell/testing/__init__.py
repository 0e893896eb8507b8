"""A test kit for bots built on cordstream: a local Discord that a real `discord.Client` talks to,
and a scripted model to stream into it.

Nothing here is needed to stream an answer; it is for tests and demos. `DiscordEmulator` is an
aiohttp server on 127.0.0.1 (a random port) that serves the part of Discord's REST API a
streaming bot uses, records every request and each channel's transcript, injects faults on
demand (429s, 403/404/5xx, dropped connections, slow replies) and, as an option, plays
Discord's real rate limits. `discord_client` logs a real `discord.Client` into it;
`local_discord` does both and fetches the emulator's channel. Its gateway runs a whole bot:
`local_bot(bot)` connects a real `discord.Client`/`commands.Bot` to it, and a test plays the
users (`add_member`, `user_says`, `slash`, `click`; each interaction is an `InteractionRecord`)
and waits for the bot's answer (`wait_for_text`). `ScriptProvider` is a model that plays a
script (text, chunks, pauses, a hang, an exception) and records what cordstream did to it;
`ScriptedTurn` scripts a whole `run_turn` turn, a script per segment, and records the tool
outcomes it was handed. With `cordstream[testing]`, pytest has them as fixtures
(`local_discord`, `local_bot`: `cordstream.shell.testing.pytest_plugin`). `ModelServer` plays a
model's HTTP API instead, for the real provider SDKs: a local server replaying scripted SSE
streams (`Reply`, `sse`; `cordstream.shell.testing.openai_wire` builds OpenAI's
chat-completions frames). See `cordstream.shell.testing.emulator` and
`cordstream.shell.testing.script` for every detail (`cordstream.shell.testing.gateway` for the
gateway, `cordstream.shell.testing.sse` for the model server), and the README's "Test your bot
against a local Discord".

    async with local_discord() as (api, client, channel):
        ...  # call your bot's code with `channel`
        assert api.text() == "what your bot should have said"

    async with local_bot(bot) as api:
        asked = await api.slash(api.add_member("alice"), "ask", {"question": "why?"})
        await asked.wait_until(lambda i: i.state == "responded" and not i.thinking)
        await api.user_says(api.add_member("bob"), "roll a die")
        await api.wait_for_text("...the answer to alice\\n...and the answer to bob")
"""

from __future__ import annotations

from cordstream.shell.testing.emulator import (
    Delay,
    DiscordEmulator,
    Drop,
    ErrorReply,
    Fault,
    Limit,
    LocalBot,
    LocalDiscord,
    RateLimited,
    RateLimits,
    RecordedRequest,
    SentMessage,
    discord_client,
    discord_client_at,
    local_bot,
    local_discord,
)
from cordstream.shell.testing.gateway import (
    Gateway,
    GatewayFrame,
    GuildMember,
    InteractionRecord,
)
from cordstream.shell.testing.redis import RedisServer, redis_server
from cordstream.shell.testing.script import (
    Do,
    Hang,
    Raw,
    Round,
    ScriptedTurn,
    ScriptProvider,
    Sleep,
    Step,
)
from cordstream.shell.testing.sse import ModelServer, Reply, sse, sse_done

# What a bot's tests need; the error codes, the route names and `would_ping` are in
# `cordstream.shell.testing.emulator`.
__all__ = [
    "Delay",
    "DiscordEmulator",
    "Do",
    "Drop",
    "ErrorReply",
    "Fault",
    "Gateway",
    "GatewayFrame",
    "GuildMember",
    "Hang",
    "InteractionRecord",
    "Limit",
    "LocalBot",
    "LocalDiscord",
    "ModelServer",
    "RateLimited",
    "RateLimits",
    "Raw",
    "RecordedRequest",
    "RedisServer",
    "Reply",
    "Round",
    "ScriptProvider",
    "ScriptedTurn",
    "SentMessage",
    "Sleep",
    "Step",
    "discord_client",
    "discord_client_at",
    "local_bot",
    "local_discord",
    "redis_server",
    "sse",
    "sse_done",
]
