"""The local Discord emulator against a real `discord.Client` (no mocks of discord.py).

Waits (429 `retry_after`, discord.py's 5xx backoff, slow replies) run on looptime's virtual
clock: the emulator's server, discord.py's aiohttp session and the test share one event loop,
and loopback I/O is ready as soon as it is written, so the clock only jumps when every task
waits on a timer. Elapsed virtual times are therefore exact.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
import discord.http
import pytest

from cordstream.shell.testing.emulator import (
    BAD_GATEWAY,
    INTERNAL_SERVER_ERROR,
    MISSING_ACCESS,
    MISSING_PERMISSIONS,
    UNKNOWN_CHANNEL,
    Change,
    Delay,
    DiscordEmulator,
    Drop,
    ErrorReply,
    Limit,
    Pings,
    RateLimited,
    RateLimits,
    discord_client,
    local_discord,
    would_ping,
)

NONE = discord.AllowedMentions.none()


def now() -> float:
    return asyncio.get_running_loop().time()


# ---- login, channels, routes ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_login_fetches_the_bot_user_and_the_application() -> None:
    async with DiscordEmulator() as emulator, discord_client(emulator) as client:
        assert emulator.base_url == discord.http.Route.BASE
        assert client.user is not None
        assert client.user.id == emulator.user_id
        assert client.user.bot
        assert client.application_id == emulator.user_id
        assert [(r.method, r.path, r.status) for r in emulator.requests] == [
            ("GET", "/api/v10/users/@me", 200),
            ("GET", "/api/v10/oauth2/applications/@me", 200),
        ]
        assert emulator.requests[0].headers["Authorization"] == f"Bot {emulator.token}"
        assert emulator.requests[0].kind == "login"
    assert discord.http.Route.BASE == "https://discord.com/api/v10"
    assert client.is_closed()


@pytest.mark.asyncio
async def test_a_wrong_token_is_a_login_failure() -> None:
    async with DiscordEmulator() as emulator:
        previous = discord.http.Route.BASE
        discord.http.Route.BASE = emulator.base_url
        client = discord.Client(intents=discord.Intents.none())
        try:
            with pytest.raises(discord.LoginFailure):
                await client.login("not-the-token")
        finally:
            await client.close()
            discord.http.Route.BASE = previous
        assert emulator.requests[0].status == 401


@pytest.mark.asyncio
async def test_fetch_channel_gives_a_guild_text_channel() -> None:
    async with local_discord() as (emulator, client, channel):
        assert channel.id == emulator.channel_id
        assert channel.guild.id == emulator.guild_id
        assert channel.name == "general"
        assert channel.type is discord.ChannelType.text
        other = emulator.add_channel("second")
        fetched = await client.fetch_channel(other)
        assert isinstance(fetched, discord.TextChannel)
        assert (fetched.id, fetched.name) == (other, "second")


@pytest.mark.asyncio
async def test_unknown_channel_and_unknown_route_are_404_json() -> None:
    async with DiscordEmulator() as emulator, discord_client(emulator) as client:
        with pytest.raises(discord.NotFound) as unknown_channel:
            await client.fetch_channel(12345)
        assert unknown_channel.value.code == 10003
        with pytest.raises(discord.NotFound) as unknown_route:
            await client.fetch_user(12345)  # GET /users/{id}: not served
        assert (unknown_route.value.code, unknown_route.value.text) == (0, "404: Not Found")
        channel = await client.fetch_channel(emulator.channel_id)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.HTTPException) as wrong_method:
            await channel.delete()  # DELETE on the channel's route: not served
        assert wrong_method.value.status == 405
        assert emulator.requests[-1].kind == "other"
        with pytest.raises(discord.NotFound) as unknown_message:
            await channel.get_partial_message(1).delete()
        assert unknown_message.value.code == 10008
        assert [r.kind for r in emulator.requests[-2:]] == ["other", "delete"]


@pytest.mark.asyncio
async def test_replies_are_exactly_application_json() -> None:
    async with DiscordEmulator() as emulator, aiohttp.ClientSession() as session:
        auth = {"Authorization": f"Bot {emulator.token}"}
        async with session.get(f"{emulator.base_url}/users/@me", headers=auth) as response:
            assert response.headers["Content-Type"] == "application/json"
        async with session.get(f"{emulator.base_url}/nowhere", headers=auth) as response:
            assert response.status == 404
            assert response.headers["Content-Type"] == "application/json"
            assert await response.json() == {"message": "404: Not Found", "code": 0}
        async with session.get(f"{emulator.base_url}/users/@me") as response:
            assert response.status == 401


# ---- sending, replying, editing, typing ----------------------------------------------------------


@pytest.mark.asyncio
async def test_send_is_recorded_and_returns_a_message() -> None:
    async with local_discord() as (emulator, _, channel):
        message = await channel.send("hi", allowed_mentions=NONE)
        assert message.content == "hi"
        assert message.author.id == emulator.user_id
        assert message.type is discord.MessageType.default
        assert message.jump_url == (
            f"https://discord.com/channels/{emulator.guild_id}/{emulator.channel_id}/{message.id}"
        )
        [sent] = emulator.messages()
        assert (sent.id, sent.channel_id, sent.content) == (message.id, channel.id, "hi")
        assert sent.allowed_mentions == {"parse": []}
        assert sent.message_reference is None
        assert not sent.pings.anyone
        assert emulator.text() == "hi"
        request = emulator.requests[-1]
        assert (request.method, request.kind, request.channel_id, request.status) == (
            "POST",
            "send",
            channel.id,
            200,
        )
        assert request.json["content"] == "hi"


@pytest.mark.asyncio
async def test_transcripts_are_per_channel() -> None:
    async with DiscordEmulator() as emulator, discord_client(emulator) as client:
        other_id = emulator.add_channel("other")
        first = await client.fetch_channel(emulator.channel_id)
        second = await client.fetch_channel(other_id)
        assert isinstance(first, discord.TextChannel)
        assert isinstance(second, discord.TextChannel)
        await first.send("one")
        await second.send("two")
        await first.send("three")
        await first.send(embed=discord.Embed(title="no content"))
        # As a user copies it (F2): messages joined by line breaks; a bare embed adds nothing.
        assert emulator.text() == "one\nthree"
        assert emulator.text(other_id) == "two"


@pytest.mark.asyncio
async def test_a_reply_is_recorded_with_its_reference_and_pings_nobody() -> None:
    async with local_discord() as (emulator, _, channel):
        question = emulator.post_user_message("what is 2+2?")
        reply = await channel.send(
            "4",
            reference=channel.get_partial_message(question),
            mention_author=False,
            allowed_mentions=NONE,
        )
        assert reply.type is discord.MessageType.reply
        assert reply.reference is not None
        assert reply.reference.message_id == question
        assert isinstance(reply.reference.resolved, discord.Message)
        assert reply.reference.resolved.content == "what is 2+2?"
        [sent] = emulator.messages()
        assert sent.message_reference is not None
        assert sent.message_reference["message_id"] == question
        assert sent.pings == Pings()


@pytest.mark.asyncio
async def test_a_reply_that_mentions_the_author_pings_them() -> None:
    async with local_discord() as (emulator, _, channel):
        question = await channel.fetch_message(emulator.post_user_message("hello?"))
        assert question.author.id == emulator.owner_id
        await channel.send("hi", reference=question)  # discord.py's defaults: ping the author
        assert emulator.messages()[0].pings.replied_user == emulator.owner_id
        own = emulator.messages()[0].id
        await channel.send("again", reference=channel.get_partial_message(own))
        assert emulator.messages()[1].pings.replied_user is None  # replying to itself


@pytest.mark.asyncio
async def test_a_reply_to_a_missing_message_fails_unless_allowed() -> None:
    async with local_discord() as (emulator, _, channel):
        missing = channel.get_partial_message(424242)
        with pytest.raises(discord.HTTPException) as failed:
            await channel.send("x", reference=missing)
        assert (failed.value.status, failed.value.code) == (400, 50035)
        reference = discord.MessageReference(
            message_id=424242, channel_id=channel.id, fail_if_not_exists=False
        )
        message = await channel.send("y", reference=reference)
        assert message.type is discord.MessageType.default
        assert emulator.text() == "y"


@pytest.mark.asyncio
async def test_embeds_are_recorded() -> None:
    async with local_discord() as (emulator, _, channel):
        embed = discord.Embed(title="Response timed out", description="…", colour=0xFFAA00)
        message = await channel.send(embed=embed, allowed_mentions=NONE)
        assert message.embeds[0].title == "Response timed out"
        assert message.embeds[0].colour == discord.Colour(0xFFAA00)
        [sent] = emulator.messages()
        assert sent.content == ""
        [recorded] = sent.embeds
        assert recorded["title"] == "Response timed out"
        assert recorded["description"] == "…"
        assert recorded["color"] == 0xFFAA00


@pytest.mark.asyncio
async def test_discord_limits_are_enforced() -> None:
    async with local_discord() as (emulator, _, channel):
        await channel.send("😀" * 2000)  # code points (as len), not UTF-16 units
        with pytest.raises(discord.HTTPException) as too_long:
            await channel.send("😀" * 2001)
        assert (too_long.value.status, too_long.value.code) == (400, 50035)
        assert "content" in too_long.value.text
        with pytest.raises(discord.HTTPException) as blank:
            await channel.send(" \n ")
        assert blank.value.code == 50006
        with pytest.raises(discord.HTTPException) as big_embed:
            await channel.send(embed=discord.Embed(description="x" * 4097))
        assert big_embed.value.code == 50035
        assert [len(m.content) for m in emulator.messages()] == [2000]


@pytest.mark.asyncio
async def test_edit_replaces_content_and_accumulates_pings() -> None:
    async with local_discord() as (emulator, _, channel):
        message = await channel.send("draft", allowed_mentions=NONE)
        edited = await message.edit(content="final <@42>", allowed_mentions=NONE)
        assert edited.content == "final <@42>"
        assert edited.edited_at is not None
        [sent] = emulator.messages()
        assert (sent.content, sent.edits, sent.pings.anyone) == ("final <@42>", 1, False)
        await message.edit(content="ping <@42>")  # no allowed_mentions: Discord's defaults
        await message.edit(content="quiet", allowed_mentions=NONE)
        [sent] = emulator.messages()
        assert (sent.content, sent.edits) == ("quiet", 3)
        assert sent.pings.users == {42}  # a ping cannot be taken back
        assert emulator.requests[-1].method == "PATCH"
        assert emulator.requests[-1].kind == "edit"


@pytest.mark.asyncio
async def test_editing_others_or_missing_messages_fails() -> None:
    async with local_discord() as (emulator, _, channel):
        theirs = channel.get_partial_message(emulator.post_user_message("mine"))
        with pytest.raises(discord.Forbidden) as forbidden:
            await theirs.edit(content="hacked")
        assert forbidden.value.code == 50005
        with pytest.raises(discord.NotFound) as missing:
            await channel.get_partial_message(777).edit(content="x")
        assert missing.value.code == 10008


@pytest.mark.asyncio
async def test_a_message_a_moderator_deleted_is_gone_and_cannot_be_edited() -> None:
    async with local_discord() as (emulator, _, channel):
        first = await channel.send("first", allowed_mentions=NONE)
        live = await channel.send("live ▌", allowed_mentions=NONE)
        removed = emulator.delete_message(live.id)
        assert removed is not None
        assert removed.content == "live ▌"
        assert [m.content for m in emulator.messages()] == ["first"]
        assert emulator.text() == "first"
        with pytest.raises(discord.NotFound) as missing:
            await live.edit(content="live, more ▌")
        assert missing.value.code == 10008
        assert emulator.delete_message(emulator.post_user_message("a user's")) is None
        with pytest.raises(KeyError):
            emulator.delete_message(live.id)  # already gone
        await first.edit(content="first, edited")  # the others are untouched
        assert emulator.text() == "first, edited"
        with pytest.raises(discord.HTTPException) as too_long:
            await first.edit(content="x" * 2001)  # an edit's content has a send's limit
        assert (too_long.value.status, too_long.value.code) == (400, 50035)
        assert emulator.text() == "first, edited"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_wait_for_message_is_the_first_message_that_satisfies_pick_once_one_does() -> None:
    async with local_discord() as local:
        emulator, channel = local.api, local.channel
        other = await local.add_channel("other")
        first = await channel.send("one", allowed_mentions=NONE)
        assert (await emulator.wait_for_message(lambda m: True)).id == first.id  # already there
        later = asyncio.ensure_future(emulator.wait_for_message(lambda m: "two" in m.content))
        elsewhere = asyncio.ensure_future(
            emulator.wait_for_message(lambda m: True, channel_id=other.id)
        )
        await asyncio.sleep(1.0)
        assert not later.done()
        assert not elsewhere.done()
        await first.edit(content="one, two")  # an edit is a change too
        assert ((await later).id, (await later).content) == (first.id, "one, two")
        assert not elsewhere.done()
        note = await other.send("over there", allowed_mentions=NONE)
        assert (await elsewhere).id == note.id
        start = now()
        with pytest.raises(TimeoutError):
            await emulator.wait_for_message(lambda m: "three" in m.content, timeout=5.0)
        assert now() - start == pytest.approx(5.0)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_the_history_is_every_accepted_change_with_its_loop_time() -> None:
    async with local_discord() as local:
        emulator, channel = local.api, local.channel
        other = await local.add_channel("other")
        heard: list[Change] = []
        stop_hearing = emulator.on_change(heard.append)
        start = now()
        first = await channel.send("one", allowed_mentions=NONE)
        await asyncio.sleep(1.0)
        emulator.inject(Delay(0.5), route="edit")  # accepted, and stamped, when it answers
        first = await first.edit(content="one, two")
        with pytest.raises(discord.HTTPException):
            await first.edit(content="x" * 2001)  # refused: no change
        emulator.inject(MISSING_PERMISSIONS, route="send")
        with pytest.raises(discord.Forbidden):
            await channel.send("refused")
        embed = await other.send(embed=discord.Embed(title="note"))
        await asyncio.sleep(1.0)
        emulator.delete_message(first.id)
        stop_hearing()
        last = await channel.send("after")
        history = emulator.history()
        assert [(c.kind, c.message_id, c.content, c.at - start) for c in history] == [
            ("create", first.id, "one", 0.0),
            ("edit", first.id, "one, two", pytest.approx(1.5)),
            ("delete", first.id, "one, two", pytest.approx(2.5)),  # what it showed till then
            ("create", last.id, "after", pytest.approx(2.5)),
        ]
        assert {c.channel_id for c in history} == {channel.id}
        assert history[-1].at == emulator.messages()[-1].at  # the transcript's stamp
        (note,) = emulator.history(other.id)
        assert (note.kind, note.message_id, note.content) == ("create", embed.id, "")
        assert note.embeds[0]["title"] == "note"
        assert heard == [history[0], history[1], note, history[2]]  # every channel, in order


@pytest.mark.asyncio
async def test_typing_is_a_204() -> None:
    async with local_discord() as (emulator, _, channel):
        await channel.typing()
        request = emulator.requests[-1]
        assert (request.method, request.kind, request.status) == ("POST", "typing", 204)
        assert emulator.messages() == []


# ---- mentions ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_everyone_pings_only_when_allowed() -> None:
    async with local_discord() as (emulator, _, channel):
        user, role = 123456789012345678, 876543210987654321
        text = f"@everyone look <@{user}> <@&{role}>"
        quiet = await channel.send(text, allowed_mentions=NONE)
        loud = await channel.send(text, allowed_mentions=discord.AllowedMentions.all())
        default = await channel.send(text)  # no client default: discord.py sends "parse all"
        first, second, third = emulator.messages()
        assert first.pings == Pings()
        assert not quiet.mention_everyone
        assert quiet.raw_mentions == [user]  # the text is there, the ping is not
        assert quiet.mentions == []
        assert second.pings == Pings(
            everyone=True, users=frozenset({user}), roles=frozenset({role})
        )
        assert loud.mention_everyone
        assert [mentioned.id for mentioned in loud.mentions] == [user]
        assert loud.raw_role_mentions == [role]
        assert third.pings == second.pings
        assert default.mention_everyone


def test_would_ping_follows_discords_rules() -> None:
    content = "@here <@1> <@!2> <@&3> `<@4>`"
    assert would_ping(content, {"parse": []}) == Pings()
    assert would_ping(content, {}) == Pings()
    assert would_ping(content, None, replied_author=9) == Pings(
        everyone=True, users=frozenset({1, 2, 4}), roles=frozenset({3}), replied_user=9
    )
    assert would_ping(content, {"users": ["2", "7"], "roles": [3]}) == Pings(
        users=frozenset({2}), roles=frozenset({3})
    )
    assert would_ping(content, {"parse": ["everyone"], "replied_user": True}, 9) == Pings(
        everyone=True, replied_user=9
    )
    assert would_ping("no mentions <@abc>", None) == Pings()


# ---- faults ----------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("fault", "error", "code"),
    [
        (MISSING_ACCESS, discord.Forbidden, 50001),
        (MISSING_PERMISSIONS, discord.Forbidden, 50013),
        (UNKNOWN_CHANNEL, discord.NotFound, 10003),
    ],
)
async def test_client_errors_raise_with_their_code(
    fault: ErrorReply, error: type[discord.HTTPException], code: int
) -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(fault, route="send")
        with pytest.raises(error) as raised:
            await channel.send("lost", allowed_mentions=NONE)
        assert raised.value.code == code
        assert raised.value.status == fault.status
        assert emulator.messages() == []
        assert emulator.requests[-1].fault == fault
        await channel.send("next", allowed_mentions=NONE)  # the fault was used up
        assert emulator.text() == "next"


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(
    "send",
    [{"content": "bad \ud800 here"}, {"embed": discord.Embed(description="x \udfff")}],
    ids=["content", "embed"],
)
async def test_a_lone_surrogate_is_a_400_before_anything_is_recorded(
    send: dict[str, object],
) -> None:
    """JSON can escape a lone surrogate but it has no UTF-8 form: 400 50109 at once (no 5xx,
    no retries), nothing in the transcript, and the request's `json` is None."""
    async with local_discord() as (emulator, _, channel):
        start = now()
        with pytest.raises(discord.HTTPException) as raised:
            await channel.send(allowed_mentions=NONE, **send)  # type: ignore[call-overload]
        assert now() - start == 0
        assert (raised.value.status, raised.value.code) == (400, 50109)
        assert emulator.messages() == []
        sends = [r for r in emulator.requests if r.kind == "send"]
        assert [(r.status, r.json) for r in sends] == [(400, None)]
        await channel.send("next", allowed_mentions=NONE)  # the emulator still answers
        assert emulator.text() == "next"


@pytest.mark.asyncio
async def test_a_surrogate_pair_is_read_as_the_character_it_encodes() -> None:
    async with local_discord() as (emulator, _, channel):
        message = await channel.send("pair \ud83d\ude00 ok", allowed_mentions=NONE)
        assert message.content == "pair \U0001f600 ok"
        assert emulator.text() == "pair \U0001f600 ok"


@pytest.mark.asyncio
async def test_a_deleted_channel_is_unknown() -> None:
    async with local_discord() as (emulator, _, channel):
        await channel.send("before")
        emulator.delete_channel(channel.id)
        with pytest.raises(discord.NotFound) as raised:
            await channel.send("after")
        assert raised.value.code == 10003
        assert emulator.text() == "before"


@pytest.mark.asyncio
async def test_faults_are_taken_in_order_by_route_and_channel() -> None:
    async with local_discord() as (emulator, _, channel):
        other = emulator.add_channel("other")
        emulator.inject(MISSING_ACCESS, route="send")
        emulator.inject(MISSING_PERMISSIONS, route="any")
        emulator.inject(UNKNOWN_CHANNEL, route="send", channel_id=other)
        with pytest.raises(discord.Forbidden) as typing:
            await channel.typing()
        assert typing.value.code == 50013  # the "send" fault does not apply to typing
        with pytest.raises(discord.Forbidden) as send:
            await channel.send("x")
        assert send.value.code == 50001
        await channel.send("y")  # the remaining fault is for the other channel only
        assert [route for route, _ in emulator.pending_faults] == ["send"]
        emulator.inject(INTERNAL_SERVER_ERROR, route="typing", times=None)
        emulator.clear_faults()
        await channel.typing()
        assert emulator.pending_faults == []
        assert emulator.text() == "y"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_permanent_fault_lasts_until_cleared() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(MISSING_PERMISSIONS, route="send", times=None)
        for _ in range(3):
            with pytest.raises(discord.Forbidden):
                await channel.send("x")
        emulator.clear_faults()
        await channel.send("y")
        assert emulator.text() == "y"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_429_with_via_is_waited_out_and_retried_once() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(RateLimited(retry_after=2.5), route="send")
        start = now()
        message = await channel.send("patience", allowed_mentions=NONE)
        assert now() - start == pytest.approx(2.5)
        assert message.content == "patience"
        assert emulator.text() == "patience"  # once, not twice
        limited, retried = emulator.requests[-2:]
        assert (limited.status, retried.status) == (429, 200)
        assert retried.at - limited.at == pytest.approx(2.5)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_429_without_via_is_not_retried() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(RateLimited(retry_after=2.5, via=False), route="send")
        start = now()
        with pytest.raises(discord.HTTPException) as raised:
            await channel.send("banned")
        assert raised.value.status == 429
        assert now() == start
        assert emulator.messages() == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_global_429_holds_every_request() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(RateLimited(retry_after=3.0, is_global=True), route="send")
        start = now()
        sending = asyncio.create_task(channel.send("first"))
        await asyncio.sleep(1.0)  # discord.py got the 429 and sleeps until 3.0
        await channel.typing()  # another route, held until the global limit is over
        await sending
        typing = next(r for r in emulator.requests if r.kind == "typing")
        assert typing.at - start == pytest.approx(3.0)
        assert emulator.text() == "first"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_5xx_is_retried_with_backoff_then_succeeds() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(INTERNAL_SERVER_ERROR, route="send")
        emulator.inject(BAD_GATEWAY, route="send")
        start = now()
        await channel.send("eventually")
        assert now() - start == pytest.approx(1 + 3)
        assert [r.status for r in emulator.requests[-3:]] == [500, 502, 200]
        assert emulator.text() == "eventually"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_5xx_five_times_is_a_discord_server_error() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(INTERNAL_SERVER_ERROR, route="send", times=5)
        start = now()
        with pytest.raises(discord.DiscordServerError) as raised:
            await channel.send("never")
        assert now() - start == pytest.approx(1 + 3 + 5 + 7 + 9)  # it sleeps after the 5th too
        assert raised.value.status == 500
        assert [r.kind for r in emulator.requests].count("send") == 5
        assert emulator.messages() == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_slow_reply_takes_its_time() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(Delay(30.0), route="send")
        start = now()
        await channel.send("slow")
        assert now() - start == pytest.approx(30.0)
        assert emulator.messages()[0].at - start == pytest.approx(30.0)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_slow_request_abandoned_by_the_client_is_still_accepted() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(Delay(30.0), route="send")
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(5.0):
                await channel.send("abandoned")
        assert emulator.messages() == []
        await asyncio.sleep(30.0)
        assert emulator.text() == "abandoned"  # as Discord: the request had arrived


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_idle_waits_for_a_request_still_being_answered() -> None:
    """A test (the soak, between batches) can wait until Discord has answered everything
    already sent, an abandoned slow request included."""
    async with local_discord() as (emulator, _, channel):
        await emulator.idle()  # nothing pending: returns at once
        assert now() == pytest.approx(0.0, abs=1.0)
        emulator.inject(Delay(30.0), route="send")
        start = now()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(5.0):
                await channel.send("abandoned")
        await emulator.idle()
        assert now() - start == pytest.approx(30.0)
        assert emulator.text() == "abandoned"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_delay_then_a_fault() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(Delay(4.0, then=MISSING_ACCESS), route="send")
        start = now()
        with pytest.raises(discord.Forbidden):
            await channel.send("x")
        assert now() - start == pytest.approx(4.0)
        assert emulator.messages() == []


@pytest.mark.asyncio
async def test_a_dropped_connection_is_server_dislocal_discord() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(Drop(), route="send")
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await channel.send("dropped")
        assert [r.kind for r in emulator.requests].count("send") == 1  # discord.py: no retry
        assert emulator.requests[-1].status is None
        assert emulator.messages() == []
        await channel.send("after")
        assert emulator.text() == "after"


@pytest.mark.asyncio
async def test_a_dropped_get_on_a_reused_connection_is_retried_by_aiohttp() -> None:
    async with local_discord() as (emulator, client, channel):
        emulator.inject(Drop(), route="fetch")
        fetched = await client.fetch_channel(channel.id)
        assert fetched.id == channel.id
        assert [r.status for r in emulator.requests if r.kind == "fetch"][-2:] == [None, 200]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_closing_does_not_wait_for_delayed_requests() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.inject(Delay(1000.0), route="send")
        pending = asyncio.create_task(channel.send("never answered"))
        await asyncio.sleep(1.0)
        start = now()
        await emulator.close()
        assert now() - start < 1.0
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await pending
        assert emulator.messages() == []


# ---- Discord's rate limits (an option) -------------------------------------------------------

SENDS_ONLY = RateLimits(edit=None, typing=None, global_limit=None)
GLOBAL_ONLY = RateLimits(send=None, edit=None, typing=None, global_limit=Limit(50, 1.0))


@dataclass
class Raw:
    """One raw answer: status, headers, JSON body (or None)."""

    status: int
    headers: Mapping[str, str]
    body: Any


async def raw_send(
    emulator: DiscordEmulator, session: aiohttp.ClientSession, channel_id: int, content: str
) -> Raw:
    """A message create without discord.py, so nothing waits on its own: the emulator's raw
    answer."""
    url = f"{emulator.base_url}/channels/{channel_id}/messages"
    auth = {"Authorization": f"Bot {emulator.token}"}
    async with session.post(url, json={"content": content}, headers=auth) as response:
        body = await response.json() if response.content_type == "application/json" else None
        return Raw(response.status, response.headers, body)


async def raw_edit(
    emulator: DiscordEmulator,
    session: aiohttp.ClientSession,
    channel_id: int,
    message_id: int,
    content: str,
) -> Raw:
    """A message edit (PATCH) without discord.py: the emulator's raw answer."""
    url = f"{emulator.base_url}/channels/{channel_id}/messages/{message_id}"
    auth = {"Authorization": f"Bot {emulator.token}"}
    async with session.patch(url, json={"content": content}, headers=auth) as response:
        body = await response.json() if response.content_type == "application/json" else None
        return Raw(response.status, response.headers, body)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_rate_limits_are_off_by_default() -> None:
    async with DiscordEmulator() as emulator, aiohttp.ClientSession() as session:
        answers = [
            await raw_send(emulator, session, emulator.channel_id, f"{n}") for n in range(60)
        ]
        assert {a.status for a in answers} == {200}
        assert not any(k.lower().startswith("x-ratelimit") for k in answers[-1].headers)
        assert emulator.rate_limit_hits == {}
        assert emulator.rate_limits is None


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_send_bucket_answers_with_discords_headers_and_refuses_the_sixth() -> None:
    async with (
        DiscordEmulator(rate_limits=SENDS_ONLY) as emulator,
        aiohttp.ClientSession() as session,
    ):
        start = now()
        answers = [await raw_send(emulator, session, emulator.channel_id, f"{n}") for n in range(5)]
        assert [a.status for a in answers] == [200] * 5
        assert [a.headers["X-RateLimit-Remaining"] for a in answers] == ["4", "3", "2", "1", "0"]
        first = answers[0].headers
        assert first["X-RateLimit-Limit"] == "5"
        assert first["X-RateLimit-Reset-After"] == "5.000"
        assert float(first["X-RateLimit-Reset"]) == pytest.approx(time.time() + 5.0, abs=1.0)
        assert first["X-RateLimit-Bucket"] == answers[4].headers["X-RateLimit-Bucket"]
        await asyncio.sleep(2.0)
        refused = await raw_send(emulator, session, emulator.channel_id, "sixth")
        assert refused.status == 429
        assert refused.body == {
            "message": "You are being rate limited.",
            "retry_after": 3.0,
            "global": False,
            "code": 0,
        }
        assert refused.headers["Via"]
        assert refused.headers["X-RateLimit-Scope"] == "user"
        assert refused.headers["X-RateLimit-Remaining"] == "0"
        assert refused.headers["X-RateLimit-Reset-After"] == "3.000"
        assert "X-RateLimit-Global" not in refused.headers
        assert emulator.rate_limit_hits == {"send": 1}
        assert emulator.requests[-1].rate_limited == "route"
        assert emulator.text() == "0\n1\n2\n3\n4"  # the refused one is not accepted
        await asyncio.sleep(start + 5.0 - now())  # the window ends 5 s after its first send
        again = await raw_send(emulator, session, emulator.channel_id, "sixth")
        assert again.status == 200
        assert again.headers["X-RateLimit-Remaining"] == "4"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_buckets_are_per_channel_and_per_route() -> None:
    limits = RateLimits(send=Limit(2, 5.0), typing=Limit(2, 5.0), global_limit=None)
    async with (
        DiscordEmulator(rate_limits=limits) as emulator,
        aiohttp.ClientSession() as session,
    ):
        other = emulator.add_channel("other")
        auth = {"Authorization": f"Bot {emulator.token}"}
        for channel_id in (emulator.channel_id, other):
            for n in range(2):
                assert (await raw_send(emulator, session, channel_id, f"{n}")).status == 200
            url = f"{emulator.base_url}/channels/{channel_id}/typing"
            for _ in range(2):
                async with session.post(url, headers=auth) as response:
                    assert response.status == 204
                    assert response.headers["X-RateLimit-Bucket"] == "emulator-typing"
            async with session.post(url, headers=auth) as response:
                assert response.status == 429
        assert (await raw_send(emulator, session, other, "third")).status == 429
        assert emulator.rate_limit_hits == {"typing": 2, "send": 1}


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_discord_py_reads_the_bucket_and_waits_instead_of_meeting_a_429() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.rate_limits = SENDS_ONLY  # after the setup requests
        start = now()
        for n in range(6):
            await channel.send(f"line {n}")
        # discord.py saw Remaining 0 on the 5th send and slept until the bucket reset.
        assert emulator.rate_limit_hits == {}
        accepted = [m.at - start for m in emulator.messages()]
        assert accepted[:5] == [0.0] * 5
        assert accepted[5] == pytest.approx(5.0)
        assert emulator.text() == "\n".join(f"line {n}" for n in range(6))


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_concurrent_sends_into_one_channel_meet_no_429_through_discord_py() -> None:
    async with local_discord() as (emulator, _, channel):
        emulator.rate_limits = SENDS_ONLY
        start = now()
        await asyncio.gather(*(channel.send(f"{n}") for n in range(12)))
        assert emulator.rate_limit_hits == {}
        accepted = sorted(m.at - start for m in emulator.messages())
        assert len(accepted) == 12
        assert accepted[4] < 5.0 <= accepted[5]
        assert accepted[9] < 10.0 <= accepted[10]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_the_global_limit_answers_a_global_429() -> None:
    async with (
        DiscordEmulator(rate_limits=GLOBAL_ONLY) as emulator,
        aiohttp.ClientSession() as session,
    ):
        channels = [emulator.add_channel(f"c{n}") for n in range(51)]
        start = now()
        answers = [await raw_send(emulator, session, c, "hi") for c in channels]
        assert [a.status for a in answers] == [200] * 50 + [429]
        refused = answers[-1]
        assert refused.body["global"] is True
        assert refused.body["retry_after"] == pytest.approx(1.0 - (now() - start))
        assert refused.headers["X-RateLimit-Global"] == "true"
        assert refused.headers["X-RateLimit-Scope"] == "global"
        assert refused.headers["Via"]
        assert emulator.rate_limit_hits == {"global": 1}
        assert emulator.requests[-1].rate_limited == "global"
        await asyncio.sleep(1.0)
        assert (await raw_send(emulator, session, channels[-1], "hi")).status == 200


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_global_429_makes_discord_py_hold_and_retry_until_all_arrive() -> None:
    async with DiscordEmulator() as emulator, discord_client(emulator) as client:
        channels = [
            client.get_partial_messageable(emulator.add_channel(f"c{n}")) for n in range(80)
        ]
        emulator.rate_limits = GLOBAL_ONLY
        start = now()
        await asyncio.gather(*(channel.send("hi") for channel in channels))
        assert all(emulator.text(channel.id) == "hi" for channel in channels)
        assert emulator.rate_limit_hits["global"] >= 30  # the 30 over the first second at least
        assert set(emulator.rate_limit_hits) == {"global"}
        assert now() - start >= 1.0
        refused = [r for r in emulator.requests if r.status == 429]
        assert all(r.rate_limited == "global" for r in refused)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_edits_have_their_own_bucket() -> None:
    limits = RateLimits(edit=Limit(2, 5.0), global_limit=None)
    async with local_discord() as (emulator, _, channel):
        emulator.rate_limits = limits
        message = await channel.send("v0")
        start = now()
        for n in range(1, 4):
            message = await message.edit(content=f"v{n}")
        assert emulator.rate_limit_hits == {}  # discord.py waited, as the headers said
        assert now() - start == pytest.approx(5.0)
        assert emulator.messages()[0].content == "v3"
        assert emulator.messages()[0].edits == 3


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_an_edit_over_its_bucket_is_a_429_with_retry_after_and_headers() -> None:
    edits_only = RateLimits(send=None, typing=None, global_limit=None)
    async with (
        DiscordEmulator(rate_limits=edits_only) as emulator,
        aiohttp.ClientSession() as session,
    ):
        sent = await raw_send(emulator, session, emulator.channel_id, "v0")
        message_id = int(sent.body["id"])
        start = now()
        answers = [
            await raw_edit(emulator, session, emulator.channel_id, message_id, f"v{n}")
            for n in range(1, 6)
        ]
        assert [a.status for a in answers] == [200] * 5
        assert [a.headers["X-RateLimit-Remaining"] for a in answers] == ["4", "3", "2", "1", "0"]
        assert answers[0].headers["X-RateLimit-Limit"] == "5"
        assert answers[0].headers["X-RateLimit-Reset-After"] == "5.000"
        assert answers[0].headers["X-RateLimit-Bucket"] == "emulator-edit"
        await asyncio.sleep(1.0)
        refused = await raw_edit(emulator, session, emulator.channel_id, message_id, "v6")
        assert refused.status == 429
        assert refused.body == {
            "message": "You are being rate limited.",
            "retry_after": 4.0,
            "global": False,
            "code": 0,
        }
        assert refused.headers["Via"]
        assert refused.headers["Retry-After"] == "4"
        assert refused.headers["X-RateLimit-Scope"] == "user"
        assert refused.headers["X-RateLimit-Limit"] == "5"
        assert refused.headers["X-RateLimit-Remaining"] == "0"
        assert refused.headers["X-RateLimit-Reset-After"] == "4.000"
        assert refused.headers["X-RateLimit-Bucket"] == "emulator-edit"
        assert "X-RateLimit-Global" not in refused.headers
        assert emulator.rate_limit_hits == {"edit": 1}
        assert (emulator.requests[-1].kind, emulator.requests[-1].status) == ("edit", 429)
        assert emulator.requests[-1].rate_limited == "route"
        (message,) = emulator.messages()
        assert (message.content, message.edits) == ("v5", 5)  # the refused edit changed nothing
        assert [c.content for c in emulator.history()] == ["v0", "v1", "v2", "v3", "v4", "v5"]
        await asyncio.sleep(start + 5.0 - now())
        again = await raw_edit(emulator, session, emulator.channel_id, message_id, "v6")
        assert again.status == 200
        assert emulator.text() == "v6"


def test_limits_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match="Limit"):
        Limit(0, 1.0)
    with pytest.raises(ValueError, match="Limit"):
        Limit(5, 0.0)
    with pytest.raises(TypeError):
        Limit(2.5, 1.0)  # type: ignore[arg-type]
