"""`examples/bot.py`: its conversation logic against the Discord emulator and a local
OpenAI-compatible model server, with the real SDK, shell and discord.py.

Discord's gateway (which delivers messages and slash commands to a running bot) has no local
stand-in here, so the tests call `Conversations.on_message` and `Conversations.stop` the way
`CordBot.on_message` and the `/stop` command do, with real `PartialMessage`s of the emulator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import openai
import pytest

from cordstream.shell import StreamConfig
from examples.bot import NO_ANSWER, Conversations, main, openai_provider, roll_dice
from tests.openai_wire import answer, frame, tool_request
from tests.sse import ModelServer, Reply, sse
from tests.stage import Stage, stage

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

USER, OTHER = 1001, 1002


def hanging(*texts: str) -> Reply:
    """An answer that writes `texts` and then stops sending (the model is still 'thinking')."""
    frames = [sse(frame({"role": "assistant", "content": ""}))]
    frames += [sse(frame({"content": text})) for text in texts]
    return Reply(frames=frames, hang_after=len(frames))


def text_then_tool(text: str, name: str, arguments: dict[str, object]) -> Reply:
    """An answer that writes `text`, then asks for a tool."""
    frames = [sse(frame({"role": "assistant", "content": ""})), sse(frame({"content": text}))]
    return Reply(frames=[*frames, *tool_request(name, arguments).frames])


async def until(condition: Callable[[], bool]) -> None:
    """Wait, on the virtual clock, until `condition` holds."""
    while not condition():
        await asyncio.sleep(0.01)


def bot(s: Stage, server: ModelServer) -> Conversations:
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    return Conversations(
        s.orchestrator, openai_provider(client, "local-model"), StreamConfig(delivery="messages")
    )


async def say(
    s: Stage, conversations: Conversations, text: str, *, author: int = USER, mention: bool = True
) -> None:
    message_id = s.api.post_user_message(text, author_id=author)
    await conversations.on_message(
        s.channel,
        s.channel.id,
        s.channel.get_partial_message(message_id),
        author,
        text,
        mentioned=mention,
    )


async def test_a_mention_gets_a_streamed_reply_and_is_remembered() -> None:
    async with ModelServer([answer("Hello there!")]) as server, stage() as s:
        conversations = bot(s, server)
        await say(s, conversations, "hi")
        await say(s, conversations, "not for the bot", mention=False)  # ignored
        assert s.contents == ["Hello there!"]
        assert s.api.messages()[0].message_reference is not None
        assert conversations.history[s.channel.id] == [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello there!"},
        ]
        assert len(server.seen) == 1
        assert conversations.active == {}


async def test_a_new_message_from_the_same_user_restarts_the_turn_with_it() -> None:
    replies = [hanging("Working on it.\nStill"), answer("Here is the answer to both.")]
    async with ModelServer(replies) as server, stage() as s:
        conversations = bot(s, server)
        first = asyncio.create_task(say(s, conversations, "explain streams"))
        await until(lambda: s.contents == ["Working on it."])
        await say(s, conversations, "actually, keep it short")  # returns at once: follow-up
        await first
        statuses = [turn.status for turn in conversations.results]
        assert statuses == ["follow_up_interrupt", "completed"]
        assert s.contents == ["Working on it.", "Here is the answer to both."]
        second_request = server.seen[1].body
        assert isinstance(second_request, dict)
        assert second_request["messages"][1:] == [
            {"role": "user", "content": "explain streams"},
            {"role": "assistant", "content": "Working on it."},  # what the user saw
            {"role": "user", "content": "actually, keep it short"},
        ]
        replied = [m.message_reference for m in s.api.messages()]
        assert replied[0] is not None
        assert replied[1] is not None
        assert replied[0]["message_id"] != replied[1]["message_id"]  # answers the new one


async def test_F2_what_was_shown_before_a_follow_up_is_remembered_with_its_line_breaks() -> None:
    replies = [hanging("First line.\n", "Second line.\n", "Still"), answer("Short.")]
    async with ModelServer(replies) as server, stage() as s:
        conversations = bot(s, server)
        first = asyncio.create_task(say(s, conversations, "explain streams"))
        await until(lambda: s.contents == ["First line.", "Second line."])  # two messages
        await say(s, conversations, "actually, keep it short")
        await first
        assert [turn.status for turn in conversations.results] == [
            "follow_up_interrupt",
            "completed",
        ]
        second_request = server.seen[1].body
        assert isinstance(second_request, dict)
        assert second_request["messages"][1:] == [
            {"role": "user", "content": "explain streams"},
            {"role": "assistant", "content": "First line.\nSecond line."},  # not glued together
            {"role": "user", "content": "actually, keep it short"},
        ]


async def test_F2_a_turn_with_a_tool_round_is_remembered_with_its_line_breaks() -> None:
    replies = [
        text_then_tool("Let me roll.\n", "roll_dice", {"sides": 6}),
        answer("You rolled it.\nEnjoy!"),
        answer("Bye."),
    ]
    async with ModelServer(replies) as server, stage() as s:
        conversations = bot(s, server)
        await say(s, conversations, "roll a die")
        (turn,) = conversations.results
        assert [segment.status for segment in turn.segments] == ["function_call", "completed"]
        assert "\n".join(s.contents) == "Let me roll.\nYou rolled it.\nEnjoy!"
        await say(s, conversations, "thanks")  # the next turn's history
        third_request = server.seen[2].body
        assert isinstance(third_request, dict)
        assert third_request["messages"][1:] == [
            {"role": "user", "content": "roll a die"},
            {"role": "assistant", "content": "Let me roll.\nYou rolled it.\nEnjoy!"},
            {"role": "user", "content": "thanks"},
        ]


async def test_stop_ends_the_streaming_answer_and_is_refused_when_idle() -> None:
    async with ModelServer([hanging("Let me think.\nHmm")]) as server, stage() as s:
        conversations = bot(s, server)
        assert not conversations.stop(s.channel.id, USER)  # nothing streams yet
        assert not s.orchestrator.has_stop_request(s.channel.id)
        turn = asyncio.create_task(say(s, conversations, "a long story please"))
        await until(lambda: s.contents == ["Let me think."])
        assert conversations.stop(s.channel.id, USER)
        await turn
        (result,) = conversations.results
        assert result.status == "stopped_by_user"
        assert result.final.stop_context == "/stop"


async def test_another_users_mention_while_answering_is_not_a_follow_up() -> None:
    async with ModelServer([hanging("Busy.\nStill")]) as server, stage() as s:
        conversations = bot(s, server)
        turn = asyncio.create_task(say(s, conversations, "first"))
        await until(lambda: s.contents == ["Busy."])
        await say(s, conversations, "me too", author=OTHER)
        assert not s.orchestrator.has_stop_request(s.channel.id)
        conversations.stop(s.channel.id, USER)
        await turn
        assert [r.status for r in conversations.results] == ["stopped_by_user"]


async def test_the_dice_tool_rolls_within_bounds_and_rejects_nonsense() -> None:
    rolled = await roll_dice({"sides": 6, "count": 3})
    assert isinstance(rolled, dict)
    assert len(rolled["rolls"]) == 3
    assert all(1 <= roll <= 6 for roll in rolled["rolls"])
    with pytest.raises(ValueError, match="sides must be an integer"):
        await roll_dice({"sides": "six"})


async def test_an_answer_that_never_comes_is_said_in_the_channel() -> None:
    # B8: empty_response shows nothing, even after run_turn's two retries; the bot says so.
    async with ModelServer([answer("")] * 3) as server, stage() as s:
        conversations = bot(s, server)
        await say(s, conversations, "hi")
        assert conversations.results[-1].status == "empty_response"
        assert len(server.seen) == 3
        assert s.contents == [NO_ANSWER]
        assert s.api.messages()[0].message_reference is not None
        assert conversations.history[s.channel.id] == [{"role": "user", "content": "hi"}]


async def test_main_reports_a_bad_environment_variable_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    environ = {"DISCORD_TOKEN": "t", "CORDSTREAM_MODEL": "m", "INACTIVITY_TIMEOUT_MS": "-5"}
    assert main(environ) == 2
    err = capsys.readouterr().err
    assert err == (
        "examples/bot.py: INACTIVITY_TIMEOUT_MS must be a positive number of milliseconds, "
        "got '-5'\n"
    )


async def test_main_names_the_missing_environment_variables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main({}) == 2
    assert "set DISCORD_TOKEN, CORDSTREAM_MODEL" in capsys.readouterr().err
