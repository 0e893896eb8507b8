"""The emulator's gateway against real discord.py bots (no mocks on either side).

A `discord.Client` or `commands.Bot` connects through `local_bot`, and the tests play its users:
messages, slash commands, button clicks, dropped connections, expired tokens. Most tests run on
looptime's virtual clock (discord.py's 2 s wait for guilds before `on_ready` and the interaction
deadlines then cost nothing); the emulator, discord.py and the test share one event loop, and
loopback I/O is ready as soon as it is written, so the clock only jumps when every task waits on
a timer. Heartbeats are the exception: discord.py sends them from a thread on the real clock, so
their test runs in real time with a 50 ms interval. Every wait is on a condition (a future, an
event, a record's state, a frame), never a sleep to let something finish.
"""

from __future__ import annotations

import asyncio
import json
import math
import zlib
from collections.abc import Callable
from typing import Any

import aiohttp
import discord
import discord.http
import discord.utils
import pytest
import yarl
from discord import app_commands
from discord.ext import commands
from discord.gateway import DiscordWebSocket

from cordstream.shell.testing import (
    DiscordEmulator,
    ErrorReply,
    GatewayFrame,
    GuildMember,
    InteractionRecord,
    local_bot,
)
from cordstream.shell.testing.gateway import EPHEMERAL, LOADING

WAIT = 10.0


def make_intents(*, content: bool = True, members: bool = False) -> discord.Intents:
    intents = discord.Intents.default()
    intents.message_content = content
    intents.members = members
    return intents


def make_bot(**options: Any) -> commands.Bot:
    return commands.Bot(command_prefix="!", intents=make_intents(), **options)


def dispatched(event: str) -> Callable[[GatewayFrame], bool]:
    return lambda frame: frame.sent and frame.payload.get("t") == event


def received(op: int) -> Callable[[GatewayFrame], bool]:
    return lambda frame: not frame.sent and frame.payload.get("op") == op


def responded(record: InteractionRecord) -> bool:
    return record.state == "responded"


def settled(record: InteractionRecord) -> bool:
    return record.state == "responded" and not record.thinking


class Inbox:
    """The messages a client's `on_message` saw, awaited one at a time."""

    def __init__(self, client: discord.Client) -> None:
        self.queue: asyncio.Queue[discord.Message] = asyncio.Queue()
        client.event(self.on_message)

    async def on_message(self, message: discord.Message) -> None:
        await self.queue.put(message)

    async def next(self) -> discord.Message:
        return await asyncio.wait_for(self.queue.get(), WAIT)


# ---- connecting ---------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_client_gets_ready_with_the_guild_its_channels_roles_and_members() -> None:
    api = DiscordEmulator()
    alice = api.add_member("alice", manage_messages=True)
    bob = api.add_member("bob")
    second = api.add_channel("second")
    client = discord.Client(intents=discord.Intents.all())
    ready: asyncio.Future[discord.Guild | None] = asyncio.get_running_loop().create_future()

    @client.event
    async def on_ready() -> None:
        ready.set_result(client.get_guild(api.guild_id))

    async with local_bot(client, api):
        assert client.user is not None
        assert (client.user.id, client.user.name, client.user.bot) == (
            api.user_id,
            "cordstream",
            True,
        )
        assert client.application_id == api.user_id
        guild = client.get_guild(api.guild_id)
        assert guild is not None
        assert await asyncio.wait_for(ready, WAIT) == guild  # cached before on_ready
        assert not guild.unavailable
        assert guild.owner_id == api.owner_id
        assert {(c.id, c.name) for c in guild.text_channels} == {
            (api.channel_id, "general"),
            (second, "second"),
        }
        assert {role.name for role in guild.roles} == {"@everyone", "cordstream", "Moderators"}
        # With GUILD_PRESENCES, GUILD_CREATE carries every member.
        assert {m.id for m in guild.members} == {api.user_id, api.owner_id, alice.id, bob.id}
        channel = guild.get_channel(api.channel_id)
        assert isinstance(channel, discord.TextChannel)
        as_alice, as_bob = guild.get_member(alice.id), guild.get_member(bob.id)
        assert as_alice is not None
        assert as_bob is not None
        assert as_alice.name == "alice"
        assert channel.permissions_for(as_alice).manage_messages
        assert not channel.permissions_for(as_bob).manage_messages
        assert channel.permissions_for(as_bob).send_messages
        assert channel.permissions_for(guild.me).send_messages
        assert not channel.permissions_for(guild.me).manage_messages
        assert api.gateway.permissions(bob) == as_bob.guild_permissions

        # The handshake: HELLO, IDENTIFY with the token and intents, READY then GUILD_CREATE.
        sent = [f.payload for f in api.gateway.frames if f.sent]
        assert sent[0]["op"] == 10
        assert [p["t"] for p in sent if p["op"] == 0][:2] == ["READY", "GUILD_CREATE"]
        ready_event = next(p["d"] for p in sent if p.get("t") == "READY")
        assert ready_event["resume_gateway_url"] == f"{api.gateway_url}/resume"
        assert ready_event["application"]["id"] == str(api.user_id)
        (identify,) = [f.payload["d"] for f in api.gateway.frames if received(2)(f)]
        assert identify["token"] == api.token
        assert identify["intents"] == discord.Intents.all().value
        # discord.py asked for the transport compression it decompresses, and got it.
        compression = discord.utils._ActiveDecompressionContext.COMPRESSION_TYPE
        assert api.gateway.urls == [f"/gateway?v=10&encoding=json&compress={compression}"]

        # GET /gateway/bot (what an AutoShardedClient asks) answers the websocket's address.
        shards, url, _ = await client.http.get_bot_gateway()
        assert (shards, url) == (1, api.gateway_url)
        assert api.requests[-1].kind == "gateway"

        # A channel added later arrives as CHANNEL_CREATE.
        created = asyncio.ensure_future(client.wait_for("guild_channel_create"))
        third = api.add_channel("third")
        channel_created = await asyncio.wait_for(created, WAIT)
        assert (channel_created.id, channel_created.name) == (third, "third")


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("members_intent", [True, False])
async def test_without_presences_members_come_by_chunk_or_not_at_all(members_intent: bool) -> None:
    api = DiscordEmulator()
    alice = api.add_member("alice")
    client = discord.Client(intents=make_intents(members=members_intent))
    async with local_bot(client, api):
        guild = client.get_guild(api.guild_id)
        assert guild is not None
        create = next(f.payload["d"] for f in api.gateway.frames if dispatched("GUILD_CREATE")(f))
        assert [m["user"]["id"] for m in create["members"]] == [str(api.user_id)]
        assert create["member_count"] == 3
        requests = [f for f in api.gateway.frames if received(8)(f)]
        if members_intent:  # discord.py asks for the members (op 8) and gets them in a chunk
            assert len(requests) == 1
            assert {m.id for m in guild.members} == {api.user_id, api.owner_id, alice.id}
            assert guild.chunked
        else:
            assert requests == []
            assert [m.id for m in guild.members] == [api.user_id]
        later = api.add_member("later")
        if members_intent:
            joined = await client.wait_for("member_join", timeout=WAIT)
            assert (joined.id, joined.name) == (later.id, "later")
        else:
            await api.gateway.flush()
            assert not any(dispatched("GUILD_MEMBER_ADD")(f) for f in api.gateway.frames)


# ---- messages -----------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_on_message_gets_a_users_post_and_the_bots_own_messages_come_back() -> None:
    client = discord.Client(intents=make_intents())
    inbox = Inbox(client)
    async with local_bot(client) as api:
        alice = api.add_member("alice", manage_messages=True)
        message_id = await api.user_says(alice, "hello there")
        message = await inbox.next()
        assert (message.id, message.content) == (message_id, "hello there")
        assert message.channel.id == api.channel_id
        assert message.guild is not None
        assert message.guild.id == api.guild_id
        # The author is a member with their roles, so permissions work without a member cache.
        assert isinstance(message.author, discord.Member)
        assert (message.author.id, message.author.name) == (alice.id, "alice")
        assert isinstance(message.channel, discord.TextChannel)
        assert message.channel.permissions_for(message.author).manage_messages
        assert api.text() == ""  # a user's message is not the bot's transcript

        reply = await message.channel.send("hi alice")
        echoed = await inbox.next()
        assert (echoed.id, echoed.author.id, echoed.content) == (reply.id, api.user_id, "hi alice")

        edited = asyncio.ensure_future(client.wait_for("message_edit"))
        await reply.edit(content="hi again")
        _, after = await asyncio.wait_for(edited, WAIT)
        assert (after.id, after.content) == (reply.id, "hi again")

        deleted = asyncio.ensure_future(client.wait_for("raw_message_delete"))
        api.delete_message(reply.id)
        gone = await asyncio.wait_for(deleted, WAIT)
        assert (gone.message_id, gone.channel_id) == (reply.id, api.channel_id)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_without_message_content_the_content_is_empty_unless_the_bot_is_mentioned() -> None:
    client = discord.Client(intents=make_intents(content=False))
    inbox = Inbox(client)
    async with local_bot(client) as api:
        alice, bob = api.add_member("alice"), api.add_member("bob")
        await api.user_says(alice, "a secret")
        hidden = await inbox.next()
        assert (hidden.author.id, hidden.content) == (alice.id, "")
        await api.user_says(alice, f"<@{api.user_id}> and <@{bob.id}>, hello")
        shown = await inbox.next()
        assert shown.content == f"<@{api.user_id}> and <@{bob.id}>, hello"
        assert client.user is not None
        assert client.user.mentioned_in(shown)
        assert {m.id for m in shown.mentions} == {api.user_id, bob.id}
        # Without the GUILD_MESSAGES intent nothing comes at all.
    quiet = discord.Client(intents=discord.Intents.none())
    quiet_inbox = Inbox(quiet)
    async with local_bot(quiet) as api:
        await api.user_says(api.add_member("carol"), "anyone?")
        assert not any(dispatched("MESSAGE_CREATE")(f) for f in api.gateway.frames)
        assert quiet_inbox.queue.empty()


# ---- slash commands -----------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_deferred_slash_command_thinks_until_its_first_followup_folds_into_it() -> None:
    bot = make_bot()
    go = asyncio.Event()
    returned: asyncio.Future[discord.WebhookMessage] = asyncio.get_running_loop().create_future()

    @bot.tree.command(description="Ask a question")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await interaction.response.defer(thinking=True)
        await go.wait()
        returned.set_result(await interaction.followup.send(f"you asked: {question}", wait=True))

    async with local_bot(bot) as api:
        synced = await bot.tree.sync()
        assert [c.name for c in synced] == ["ask"]
        assert [c["name"] for c in api.gateway.commands()] == ["ask"]
        alice = api.add_member("alice")
        asked = await api.slash(alice, "ask", {"question": "why?"})
        await asked.wait_until()
        assert (asked.state, asked.thinking, asked.responses) == ("deferred", True, [5])
        thinking = asked.original
        assert thinking is not None
        assert (thinking.content, thinking.flags & LOADING) == ("", LOADING)
        assert api.messages() == [thinking]  # the channel shows "thinking…"
        assert api.text() == ""

        go.set()
        await asked.wait_until(settled)
        message = await asyncio.wait_for(returned, WAIT)
        original = asked.original
        assert original is not None
        assert original.id == thinking.id == message.id  # folded: the same message
        assert (original.content, original.flags, original.edits) == ("you asked: why?", 0, 1)
        assert original.interaction_id == asked.id
        assert asked.followups == []
        assert api.text() == "you asked: why?"
        assert [c.kind for c in api.history()] == ["create", "edit"]
        paths = [r.path for r in api.requests if r.kind == "interaction"]
        assert paths == [
            f"/api/v10/interactions/{asked.id}/{asked.token}/callback",
            f"/api/v10/webhooks/{api.user_id}/{asked.token}",
        ]
        # The interaction carried the synced command's id and the user as a member.
        (created,) = [
            f.payload["d"] for f in api.gateway.frames if dispatched("INTERACTION_CREATE")(f)
        ]
        assert created["data"]["id"] == str(synced[0].id)
        assert created["member"]["user"]["id"] == str(alice.id)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_slash_command_answers_then_follows_up_and_edits_both() -> None:
    bot = make_bot()
    done: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()

    @bot.tree.command(description="Ask a question")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await interaction.response.send_message(f"first: {question}")
        second = await interaction.followup.send("second", wait=True)
        await second.edit(content="second, edited")
        await interaction.edit_original_response(content="first, edited")
        original = await interaction.original_response()
        done.set_result((original.content, second.id))

    async with local_bot(bot) as api:  # not synced: the options' types follow their values
        asked = await api.slash(api.add_member("alice"), "ask", {"question": "q"})
        content, second_id = await asyncio.wait_for(done, WAIT)
        assert content == "first, edited"
        assert asked.responses == [4]
        assert asked.original is not None
        assert asked.original.content == "first, edited"
        assert [(m.id, m.content) for m in asked.followups] == [(second_id, "second, edited")]
        assert api.text() == "first, edited\nsecond, edited"
        assert [m.interaction_id for m in api.messages()] == [asked.id, asked.id]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_options_are_typed_from_the_synced_commands_and_subcommands_run() -> None:
    bot = make_bot()
    seen: asyncio.Queue[tuple[object, ...]] = asyncio.Queue()

    @bot.tree.command(description="Roll")
    async def roll(
        interaction: discord.Interaction, sides: int, loud: bool, ratio: float, who: discord.Member
    ) -> None:
        await seen.put((sides, loud, ratio, who.id, isinstance(who, discord.Member)))
        await interaction.response.send_message("rolled")

    config = app_commands.Group(name="config", description="Settings")

    @config.command(name="set", description="Set one")
    async def config_set(interaction: discord.Interaction, key: str, value: str) -> None:
        await seen.put((key, value))
        await interaction.response.send_message("set")

    bot.tree.add_command(config)
    async with local_bot(bot) as api:
        first = await bot.tree.sync()
        again = await bot.tree.sync()
        assert {c.name: c.id for c in first} == {c.name: c.id for c in again}  # ids are kept
        alice, bob = api.add_member("alice"), api.add_member("bob")
        await api.slash(alice, "roll", {"sides": 6, "loud": True, "ratio": 2.5, "who": bob})
        assert await asyncio.wait_for(seen.get(), WAIT) == (6, True, 2.5, bob.id, True)
        await api.slash(alice, "config set", {"key": "color", "value": "blue"})
        assert await asyncio.wait_for(seen.get(), WAIT) == ("color", "blue")

        # What Discord's client would not let a user send.
        for options in (
            {"sides": "six", "loud": True, "ratio": 1.0, "who": bob},  # a string for an integer
            {"sides": 6, "loud": True, "ratio": 1.0},  # a required option missing
            {"sides": 6, "loud": True, "ratio": 1.0, "who": bob, "extra": 1},  # unknown
        ):
            with pytest.raises(ValueError):  # noqa: PT011 (each reason is its own case)
                await api.slash(alice, "roll", options)
        with pytest.raises(ValueError, match="no subcommand"):
            await api.slash(alice, "config get", {"key": "color"})

        # Synced to the guild, the command is the guild's.
        guild = discord.Object(api.guild_id)
        bot.tree.copy_global_to(guild=guild)
        await bot.tree.sync(guild=guild)
        assert {c["name"] for c in api.gateway.commands(guild=True)} == {"roll", "config"}
        await api.slash(alice, "config set", {"key": "size", "value": "xl"})
        assert await asyncio.wait_for(seen.get(), WAIT) == ("size", "xl")
        last = [f.payload["d"] for f in api.gateway.frames if dispatched("INTERACTION_CREATE")(f)]
        assert last[-1]["data"]["guild_id"] == str(api.guild_id)


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("private", True),  # an ephemeral deferral: the follow-up is ephemeral whatever it says
        ("public", False),  # a public deferral: the follow-up is public whatever it says
    ],
)
async def test_a_folded_followup_keeps_the_visibility_of_the_deferral(
    command: str, shown: bool
) -> None:
    bot = make_bot()

    @bot.tree.command(description="Only you")
    async def private(interaction: discord.Interaction) -> None:
        await interaction.response.defer(ephemeral=True)
        await interaction.followup.send("only you", ephemeral=False)

    @bot.tree.command(description="Everyone")
    async def public(interaction: discord.Interaction) -> None:
        await interaction.response.defer()
        await interaction.followup.send("everyone", ephemeral=True)

    async with local_bot(bot) as api:
        alice = api.add_member("alice")
        asked = await api.slash(alice, command)
        await asked.wait_until(settled)
        original = asked.original
        assert original is not None
        if shown:
            assert (original.content, original.flags) == ("only you", EPHEMERAL)
            assert asked.ephemeral == api.ephemeral_messages(alice) == [original]
            assert api.messages() == []  # never in the channel, not even "thinking"
        else:
            assert (original.content, original.flags) == ("everyone", 0)
            assert asked.ephemeral == api.ephemeral_messages(alice) == []
            assert api.messages() == [original]


# ---- buttons ------------------------------------------------------------------------------------


class StopView(discord.ui.View):
    """A Stop button only the asker may press; anyone else gets an ephemeral reply."""

    def __init__(self, asker: int, stopped: asyncio.Future[int]) -> None:
        super().__init__(timeout=None)
        self.asker = asker
        self.stopped = stopped

    @discord.ui.button(label="Stop", style=discord.ButtonStyle.danger, custom_id="stop")
    async def stop_button(
        self, interaction: discord.Interaction, button: discord.ui.Button[StopView]
    ) -> None:
        if interaction.user.id != self.asker:
            await interaction.response.send_message("Only the asker can stop it.", ephemeral=True)
            return
        await interaction.response.edit_message(content="stopped", view=None)
        self.stopped.set_result(interaction.user.id)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_button_click_runs_its_callback_and_an_ephemeral_reply_is_kept_apart() -> None:
    bot = make_bot()
    stopped: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    @bot.tree.command(description="Ask a question")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        view = StopView(interaction.user.id, stopped)
        await interaction.response.send_message(f"answering {question}", view=view)

    async with local_bot(bot) as api:
        alice, bob = api.add_member("alice"), api.add_member("bob")
        asked = await api.slash(alice, "ask", {"question": "q"})
        await asked.wait_until(responded)
        message = asked.original
        assert message is not None
        assert [[b["custom_id"] for b in row["components"]] for row in message.components] == [
            ["stop"]
        ]
        channel = bot.get_channel(api.channel_id)
        assert isinstance(channel, discord.TextChannel)
        fetched = await channel.fetch_message(message.id)  # components come back through REST
        (row,) = fetched.components
        assert isinstance(row, discord.ActionRow)
        assert [getattr(c, "custom_id", None) for c in row.children] == ["stop"]

        refused = await api.click(bob, message.id, "stop")
        await refused.wait_until(responded)
        assert (refused.kind, refused.custom_id, refused.message_id) == (
            "component",
            "stop",
            message.id,
        )
        assert [m.content for m in refused.ephemeral] == ["Only the asker can stop it."]
        assert api.ephemeral_messages(bob) == refused.ephemeral
        assert api.ephemeral_messages(alice) == []
        assert api.text() == "answering q"  # the ephemeral reply is not in the channel
        assert not stopped.done()

        # What a user cannot click.
        with pytest.raises(ValueError, match="ephemeral"):
            await api.click(alice, refused.ephemeral[0].id, "stop")
        with pytest.raises(ValueError, match="no component"):
            await api.click(alice, message.id, "pause")

        pressed = await api.click(alice, message.id, "stop")
        await pressed.wait_until(responded)
        assert await asyncio.wait_for(stopped, WAIT) == alice.id
        assert pressed.responses == [7]  # UPDATE_MESSAGE: the message clicked on is edited
        assert pressed.original is not None
        assert pressed.original.id == message.id
        assert asked.original is not None
        assert (asked.original.content, asked.original.components) == ("stopped", ())
        with pytest.raises(ValueError, match="no component"):  # the button is gone
            await api.click(alice, message.id, "stop")


class Counter(discord.ui.View):
    def __init__(self, clicks: asyncio.Queue[int]) -> None:
        super().__init__(timeout=None)
        self.clicks = clicks
        self.add_item(discord.ui.Button(label="Docs", url="https://example.invalid/docs"))

    @discord.ui.button(label="+1", custom_id="count")
    async def count(
        self, interaction: discord.Interaction, button: discord.ui.Button[Counter]
    ) -> None:
        await interaction.response.defer()  # DEFERRED_UPDATE_MESSAGE: nothing visible changes
        await self.clicks.put(interaction.user.id)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_view_sent_to_the_channel_is_stored_and_its_button_clicks_through() -> None:
    client = discord.Client(intents=make_intents())
    clicks: asyncio.Queue[int] = asyncio.Queue()
    async with local_bot(client) as api:
        channel = client.get_channel(api.channel_id)
        assert isinstance(channel, discord.TextChannel)
        sent = await channel.send("streaming…", view=Counter(clicks))
        (stored,) = api.messages()
        assert stored.id == sent.id
        assert [b.get("custom_id") for b in stored.components[0]["components"]] == ["count", None]
        alice = api.add_member("alice")
        clicked = await api.click(alice, sent.id, "count")
        assert await asyncio.wait_for(clicks.get(), WAIT) == alice.id
        await clicked.wait_until()
        assert (clicked.responses, clicked.state, clicked.original) == ([6], "deferred", stored)
        with pytest.raises(ValueError, match="no component"):  # a link is no custom_id
            await api.click(alice, sent.id, "https://example.invalid/docs")
        # An edit that removes the view removes the components.
        await sent.edit(content="done", view=None)
        assert api.messages()[0].components == ()
        # Discord refuses two components with one custom_id in a message.
        button = {"type": 2, "style": 1, "label": "x", "custom_id": "same"}
        body = {"content": "x", "components": [{"type": 1, "components": [button, button]}]}
        auth = {"Authorization": f"Bot {api.token}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{api.base_url}/channels/{api.channel_id}/messages", json=body, headers=auth
            ) as response,
        ):
            assert response.status == 400
            error = await response.json()
            assert error["code"] == 50035
            assert "COMPONENT_CUSTOM_ID_DUPLICATED" in json.dumps(error["errors"])


# ---- resuming -----------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_dropped_connection_resumes_and_nothing_is_missed() -> None:
    client = discord.Client(intents=make_intents())
    inbox = Inbox(client)
    resumes: asyncio.Queue[None] = asyncio.Queue()

    @client.event
    async def on_resumed() -> None:
        await resumes.put(None)

    async with local_bot(client) as api:
        alice = api.add_member("alice")
        first = await api.user_says(alice, "one")
        assert (await inbox.next()).id == first
        assert api.drop_gateway() == 1
        missed = [await api.user_says(alice, text) for text in ("two", "three")]
        resumed = await api.gateway.wait_frames(dispatched("RESUMED"))
        assert [(await inbox.next()).id for _ in missed] == missed
        after = await api.user_says(alice, "four")
        assert (await inbox.next()).id == after
        assert inbox.queue.empty()  # nothing twice
        await asyncio.wait_for(resumes.get(), WAIT)
        assert resumes.empty()

        # The client came back on resume_gateway_url with RESUME, not a new IDENTIFY.
        assert api.gateway.urls[1].startswith("/gateway/resume?")
        assert len([f for f in api.gateway.frames if received(2)(f)]) == 1
        (resume,) = [f for f in api.gateway.frames if received(6)(f)]
        assert resume.connection == 2
        missed_ids = {str(message_id) for message_id in missed}
        missed_seqs = [
            f.payload["s"]
            for f in api.gateway.frames
            if dispatched("MESSAGE_CREATE")(f) and f.payload["d"]["id"] in missed_ids
        ]
        assert all(s > resume.payload["d"]["seq"] for s in missed_seqs)
        assert resumed[0].payload["s"] > max(missed_seqs)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_session_that_cannot_resume_identifies_again_and_loses_what_came_meanwhile() -> (
    None
):
    client = discord.Client(intents=make_intents())
    inbox = Inbox(client)
    async with local_bot(client) as api:
        alice = api.add_member("alice")
        assert api.drop_gateway(resumable=False) == 1
        await api.user_says(alice, "lost")  # no session to log it for
        await api.gateway.wait_frames(dispatched("READY"), 2)
        await api.wait_connected()
        later = await api.user_says(alice, "later")
        message = await inbox.next()
        assert (message.id, message.content) == (later, "later")
        invalid = [f for f in api.gateway.frames if f.sent and f.payload.get("op") == 9]
        assert [(f.connection, f.payload["d"]) for f in invalid] == [(2, False)]
        identifies = [f.connection for f in api.gateway.frames if received(2)(f)]
        assert identifies == [1, 3]
        assert client.is_ready()


# ---- heartbeats (real time: discord.py heartbeats from a thread) --------------------------------


@pytest.mark.asyncio
async def test_heartbeats_are_acknowledged_at_the_interval_hello_asks_for() -> None:
    api = DiscordEmulator(heartbeat_interval=0.05)
    client = discord.Client(
        intents=discord.Intents.none(), guild_ready_timeout=0.05, enable_debug_events=True
    )
    async with local_bot(client, api):
        hello = next(f.payload for f in api.gateway.frames if f.sent)
        assert hello == {"op": 10, "d": {"heartbeat_interval": 50}}
        # The first heartbeat comes at once, the next ones from discord.py's keep-alive thread.
        beats = await api.gateway.wait_frames(received(1), 4, timeout=WAIT)
        acks = await api.gateway.wait_frames(lambda f: f.sent and f.payload["op"] == 11, 4)
        for beat, ack in zip(beats, acks, strict=True):
            assert beat.at <= ack.at
            sent_before = [
                f.payload.get("s") for f in api.gateway.frames if f.sent and f.at <= beat.at
            ]
            assert beat.payload["d"] in (None, *sent_before)

        # The gateway may ask for one (op 1): discord.py answers at once, and reads the ACK.
        acked = asyncio.ensure_future(
            client.wait_for("socket_raw_receive", check=lambda raw: json.loads(raw)["op"] == 11)
        )
        count = len(api.gateway.heartbeats)
        assert await api.gateway.request_heartbeat() == 1
        assert len(api.gateway.heartbeats) > count
        await asyncio.wait_for(acked, WAIT)
        assert math.isfinite(client.latency)
        assert client.latency >= 0


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_deleting_responses_through_the_token_or_the_channel() -> None:
    api = DiscordEmulator()
    bot = make_bot()
    done: asyncio.Queue[list[tuple[str, int | None]]] = asyncio.Queue()

    @bot.tree.command(description="Ask a question")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        outcomes: list[tuple[str, int | None]] = []
        await interaction.response.defer(thinking=True)
        if question == "token":
            follow = await interaction.followup.send("first", wait=True)  # folded: the original
            extra = await interaction.followup.send("extra", wait=True)
            await interaction.followup.delete_message(extra.id)
            await interaction.delete_original_response()
            assert follow.id != extra.id
        else:  # the channel's route, as after the token expired
            channel = interaction.channel
            assert isinstance(channel, discord.TextChannel)
            original = await interaction.original_response()
            await channel.get_partial_message(original.id).delete()
        for attempt in ("again", "edit"):
            try:
                if attempt == "again":
                    await interaction.delete_original_response()
                else:
                    await interaction.edit_original_response(content="gone")
            except discord.HTTPException as error:
                outcomes.append((attempt, error.code))
        await done.put(outcomes)

    async with local_bot(bot, api):
        alice = api.add_member("alice")
        for how in ("token", "channel"):
            asked = await api.slash(alice, "ask", {"question": how})
            outcomes = await asyncio.wait_for(done.get(), WAIT)
            assert outcomes == [("again", 10008), ("edit", 10008)]
            assert not asked.thinking
            assert asked.original is None
            assert asked.followups == []
        assert api.text() == ""
        assert [c.kind for c in api.history()].count("delete") == 3
        # Only the bot's own messages: a user's is 403.
        user_message = await api.user_says(alice, "mine")
        channel = bot.get_channel(api.channel_id)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.Forbidden):
            await channel.get_partial_message(user_message).delete()


# ---- Discord's errors -------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_an_expired_token_is_401_invalid_webhook_token() -> None:
    api = DiscordEmulator(interaction_ttl=30.0)
    bot = make_bot()
    go: dict[int, asyncio.Event] = {}
    errors: asyncio.Queue[list[discord.HTTPException]] = asyncio.Queue()

    @bot.tree.command(description="Ask a question")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await interaction.response.defer()
        await go.setdefault(interaction.id, asyncio.Event()).wait()
        caught: list[discord.HTTPException] = []
        for attempt in (
            interaction.followup.send("late"),
            interaction.original_response(),
            interaction.edit_original_response(content="late"),
        ):
            try:
                await attempt
            except discord.HTTPException as error:
                caught.append(error)
        await errors.put(caught)

    async with local_bot(bot, api):
        alice = api.add_member("alice")
        # By the clock: the token lives interaction_ttl seconds.
        timed = await api.slash(alice, "ask", {"question": "q"})
        await timed.wait_until()
        assert timed.expires_at == timed.created_at + 30.0
        await asyncio.sleep(30.0)  # the subject: loop time passes the token's lifetime
        assert timed.expired
        go.setdefault(timed.id, asyncio.Event()).set()
        # By hand: expire_interaction.
        by_hand = await api.slash(alice, "ask", {"question": "q"})
        await by_hand.wait_until()
        api.expire_interaction(by_hand)
        assert by_hand.expired
        go.setdefault(by_hand.id, asyncio.Event()).set()
        for record in (timed, by_hand):
            caught = await asyncio.wait_for(errors.get(), WAIT)
            assert [(type(e), e.status, e.code) for e in caught] == [
                (discord.HTTPException, 401, 50027)
            ] * 3
            assert caught[0].text == "Invalid Webhook Token"
            assert record.thinking  # nothing the expired token tried changed anything
        # The public "thinking" message is still the bot's: the channel's route edits it.
        channel = bot.get_channel(api.channel_id)
        assert isinstance(channel, discord.TextChannel)
        assert timed.original_id is not None
        await channel.get_partial_message(timed.original_id).edit(content="through the channel")
        assert timed.original is not None
        assert timed.original.content == "through the channel"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_responding_twice_is_40060_and_a_late_callback_10062() -> None:
    outcomes: asyncio.Queue[str] = asyncio.Queue()

    def answering_bot(delay: float = 0.0) -> commands.Bot:
        bot = make_bot()

        @bot.tree.command(description="Ask a question")
        async def ask(interaction: discord.Interaction) -> None:
            if delay:
                await asyncio.sleep(delay)  # the subject: the bot is too slow
            try:
                await interaction.response.send_message("mine")
            except discord.HTTPException as error:
                await outcomes.put(f"{type(error).__name__} {error.status} {error.code}")
            else:
                await outcomes.put("ok")

        return bot

    # The same bot running twice (two sessions): both answer, Discord takes the first.
    async with (
        DiscordEmulator() as api,
        local_bot(answering_bot(), api),
        local_bot(answering_bot(), api),
    ):
        assert api.gateway.connected == 2
        asked = await api.slash(api.add_member("alice"), "ask")
        results = {await asyncio.wait_for(outcomes.get(), WAIT) for _ in range(2)}
        assert results == {"ok", "HTTPException 400 40060"}
        assert asked.responses == [4]
        assert [m.content for m in api.messages()] == ["mine"]

    # Acknowledging later than 3 s after the interaction: Unknown interaction.
    async with local_bot(answering_bot(delay=3.5)) as api:
        late = await api.slash(api.add_member("alice"), "ask")
        assert await asyncio.wait_for(outcomes.get(), WAIT) == "NotFound 404 10062"
        assert late.timed_out
        assert late.state == "pending"
        assert api.messages() == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_an_interactions_webhook_before_its_callback_is_unknown_and_faults_apply() -> None:
    bot = make_bot()
    outcomes: asyncio.Queue[str] = asyncio.Queue()

    @bot.tree.command(description="Ask a question")
    async def ask(interaction: discord.Interaction) -> None:
        for attempt in (interaction.followup.send("too early"), interaction.response.defer()):
            try:
                await attempt
            except discord.HTTPException as error:
                await outcomes.put(f"{type(error).__name__} {error.status} {error.code}")
            else:
                await outcomes.put("ok")

    async with local_bot(bot) as api:
        alice = api.add_member("alice")
        first = await api.slash(alice, "ask")
        got = [await asyncio.wait_for(outcomes.get(), WAIT) for _ in range(2)]
        assert got == ["NotFound 404 10015", "ok"]
        assert first.responses == [5]
        # Faults injected on the interaction routes refuse the callback; nothing is recorded.
        api.inject(ErrorReply(403, 50013, "Missing Permissions"), route="interaction", times=2)
        second = await api.slash(alice, "ask")
        got = [await asyncio.wait_for(outcomes.get(), WAIT) for _ in range(2)]
        assert got == ["Forbidden 403 50013", "Forbidden 403 50013"]
        assert (second.state, second.responses) == ("pending", [])
        faulted = [r for r in api.requests if r.fault is not None]
        assert [r.channel_id for r in faulted] == [api.channel_id, api.channel_id]


# ---- the protocol, below discord.py -----------------------------------------------------------


@pytest.mark.asyncio
async def test_the_websocket_speaks_zlib_stream_and_closes_with_discords_codes() -> None:
    async with DiscordEmulator(heartbeat_interval=1.5) as api, aiohttp.ClientSession() as session:
        url = f"{api.gateway_url}?v=10&encoding=json"

        # zlib-stream: binary frames of one zlib stream, each ending with a sync flush.
        async with session.ws_connect(f"{url}&compress=zlib-stream") as ws:
            inflate = zlib.decompressobj()
            frames = []
            for _ in range(2):
                frame = await ws.receive()
                assert frame.type is aiohttp.WSMsgType.BINARY
                assert frame.data.endswith(b"\x00\x00\xff\xff")
                frames.append(json.loads(inflate.decompress(frame.data)))
                if len(frames) == 1:
                    await ws.send_json({"op": 1, "d": None})
            assert frames == [{"op": 10, "d": {"heartbeat_interval": 1500}}, {"op": 11}]
            await ws.send_json({"op": 2, "d": {"token": "not-the-token", "intents": 0}})
            closed = await ws.receive()
            assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 4004)

        async def closing(send: dict[str, Any] | None, query: str = "") -> tuple[Any, Any]:
            async with session.ws_connect(url + query) as ws:
                hello = await ws.receive()  # uncompressed: text frames
                assert hello.type is aiohttp.WSMsgType.TEXT
                if send is not None:
                    await ws.send_json(send)
                answer = await ws.receive()
                return answer.type, answer.data

        close = aiohttp.WSMsgType.CLOSE
        assert await closing({"op": 8, "d": {}}) == (close, 4003)  # before IDENTIFY
        unknown_session = {"op": 6, "d": {"token": api.token, "session_id": "nope", "seq": 1}}
        assert await closing(unknown_session) == (aiohttp.WSMsgType.TEXT, '{"op":9,"d":false}')
        async with session.ws_connect(url.replace("v=10", "v=9")) as ws:
            assert ((await ws.receive()).type, ws.close_code) == (close, 4012)
        async with session.ws_connect(url) as ws:
            await ws.receive()
            await ws.send_json({"op": 2, "d": {"token": api.token, "intents": 0}})
            for event in ("READY", "GUILD_CREATE"):
                assert json.loads((await ws.receive()).data)["t"] == event
            await ws.send_json({"op": 2, "d": {"token": api.token, "intents": 0}})
            assert ((await ws.receive()).type, ws.close_code) == (close, 4005)
        # Closing the emulator closes its connections with 1001 (going away).
        async with session.ws_connect(url) as ws:
            await ws.receive()
            await ws.send_json({"op": 2, "d": {"token": api.token, "intents": 0}})
            await api.gateway.wait_connected()
            assert api.gateway.connected == 1
            await api.gateway.close()
            while (message := await ws.receive()).type is aiohttp.WSMsgType.TEXT:
                pass  # READY, GUILD_CREATE
            assert (message.type, ws.close_code) == (close, 1001)
            assert api.gateway.connected == 0
        # GET /gateway needs no token; /gateway/bot does.
        async with session.get(f"{api.base_url}/gateway") as response:
            assert await response.json() == {"url": api.gateway_url}
        async with session.get(f"{api.base_url}/gateway/bot") as response:
            assert response.status == 401


@pytest.mark.asyncio
async def test_the_websocket_speaks_zstd_stream_when_zstandard_is_there() -> None:
    zstandard = pytest.importorskip("zstandard")
    async with DiscordEmulator() as api, aiohttp.ClientSession() as session:
        url = f"{api.gateway_url}?v=10&encoding=json&compress=zstd-stream"
        async with session.ws_connect(url) as ws:
            inflate = zstandard.ZstdDecompressor().decompressobj()
            await ws.send_json({"op": 1, "d": None})
            frames = [json.loads(inflate.decompress((await ws.receive()).data)) for _ in range(2)]
            assert [f["op"] for f in frames] == [10, 11]


# ---- local_bot ---------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_local_bot_restores_discord_py_and_leaves_no_task_behind() -> None:
    before = asyncio.all_tasks()
    base, gateway = discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    client = discord.Client(intents=make_intents())
    async with local_bot(client) as api:
        assert api.base_url == discord.http.Route.BASE
        assert yarl.URL(api.gateway_url) == DiscordWebSocket.DEFAULT_GATEWAY
        assert api.gateway.connected == 1
        assert client.is_ready()
    assert client.is_closed()
    assert api.gateway.connected == 0
    assert not api.started
    assert (base, gateway) == (discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    assert asyncio.all_tasks() == before


class FailingBot(commands.Bot):
    async def setup_hook(self) -> None:
        raise RuntimeError("the bot's setup failed")


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_local_bot_raises_the_bots_own_error_and_cleans_up() -> None:
    before = asyncio.all_tasks()
    base = discord.http.Route.BASE
    bot = FailingBot(command_prefix="!", intents=make_intents())
    with pytest.raises(RuntimeError, match="setup failed"):
        async with local_bot(bot):
            pytest.fail("the block must not run")
    assert bot.is_closed()
    assert base == discord.http.Route.BASE
    assert asyncio.all_tasks() == before


def test_members_are_plain_records() -> None:
    api = DiscordEmulator()
    moderator = api.add_member("mod", manage_messages=True)
    assert moderator == GuildMember(moderator.id, "mod", manage_messages=True)
    assert [m.name for m in api.gateway.members] == ["cordstream", "owner", "mod"]
    assert api.gateway.permissions(moderator).manage_messages
    assert api.gateway.permissions(api.owner_id) == discord.Permissions.all()
    with pytest.raises(ValueError, match="not a member"):
        api.gateway.permissions(12345)
