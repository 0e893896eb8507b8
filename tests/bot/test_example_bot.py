"""`examples/bot.py`, whole: a real discord.py bot connected through the emulator's gateway, on a
local OpenAI-compatible model server, with the real SDK and shell.

Each test builds the bot from the environment (`examples.bot.build`: the model's URL, name and
key) and runs it with `local_bot`; users act through the gateway (`user_says`, `slash`,
`click`) and the test watches what the channel, the interactions and the model server see. No
handler is called by hand. The model's replies are scripted per question (the request's last
user message); a `held` reply writes its first part, then waits for the test before the rest,
so an answer is on screen, still streaming, while users act on it.

Virtual time (looptime): live delivery's cadence, the inactivity timeout and discord.py's waits
cost no real seconds. Every wait is for a condition (a change in the channel, an interaction's
state, a request reaching the model, a turn's result), never a sleep to let something finish.
Each test ends with no task left and no stop or follow-up left in the bot's registry (C5).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import discord
import pytest

from cordstream.shell import DEFAULT_STOPS, StopRegistry, TurnResult
from cordstream.shell.bot import NO_ANSWER, SUPERSEDED, ChatBot, Question
from cordstream.shell.buttons import STOP_REFUSED
from cordstream.shell.testing import (
    Delay,
    DiscordEmulator,
    InteractionRecord,
    SentMessage,
    local_bot,
)
from cordstream.shell.testing.openai_wire import answer, frame, tool_request, usage
from cordstream.shell.testing.sse import ModelServer, Reply, sse, sse_done
from examples.bot import SYSTEM, OpenAIModel, build, log_level, main, roll_dice

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

WAIT = 20.0  # seconds of loop time
CURSOR = " \u258c"


# ---- the model -----------------------------------------------------------------------------------


def held(first: str, rest: str = "") -> tuple[Reply, asyncio.Event]:
    """A reply that writes `first`, then waits until the event is set, then writes `rest` and
    ends (never, if the event is not set: the model is still writing)."""
    frames = [sse(frame({"role": "assistant", "content": ""})), sse(frame({"content": first}))]
    hang_after = len(frames)
    if rest:
        frames.append(sse(frame({"content": rest})))
    frames += [sse(frame({}, "stop")), usage(20, 8), sse_done()]
    resume = asyncio.Event()
    return Reply(frames=frames, hang_after=hang_after, resume=resume), resume


def text_then_tool(text: str, name: str, arguments: dict[str, object]) -> Reply:
    """A reply that writes `text`, then asks for a tool."""
    frames = [sse(frame({"role": "assistant", "content": ""})), sse(frame({"content": text}))]
    return Reply(frames=[*frames, *tool_request(name, arguments).frames])


def question_of(body: object) -> str:
    """The question a request asks: its last user message."""
    assert isinstance(body, dict)
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    return str(users[-1])


def by_question(script: Mapping[str, Sequence[Reply]]) -> Callable[[object], Reply]:
    """The model: each request gets the next reply scripted for its question (the last one
    again when they run out)."""
    left = {question: list(replies) for question, replies in script.items()}

    def reply(body: object) -> Reply:
        replies = left.get(question_of(body))
        if not replies:
            return Reply(status=400, body={"error": {"message": "nothing scripted"}})
        return replies.pop(0) if len(replies) > 1 else replies[0]

    return reply


# ---- the bot, running ----------------------------------------------------------------------------


@dataclass
class Scene:
    """The running bot, its local Discord and its model; `turns` gets each question and its
    `TurnResult` as the bot's answer ends (`ChatBot`'s `on_turn`)."""

    api: DiscordEmulator
    model: ModelServer
    bot: ChatBot
    stops: StopRegistry
    turns: asyncio.Queue[tuple[Question, TurnResult]]

    async def turn(self) -> tuple[Question, TurnResult]:
        """The next answer to end."""
        return await asyncio.wait_for(self.turns.get(), WAIT)

    async def shows(self, predicate: Callable[[list[SentMessage]], bool]) -> list[SentMessage]:
        """Wait until the channel's messages satisfy `predicate` (checked on every change)."""
        changed = asyncio.Event()
        stop_listening = self.api.on_change(lambda _: changed.set())
        try:
            async with asyncio.timeout(WAIT):
                while not predicate(messages := self.api.messages()):
                    changed.clear()
                    await changed.wait()
        finally:
            stop_listening()
        return messages

    async def showing(self, text: str) -> SentMessage:
        """Wait until a message of the channel shows `text`, still streaming (with the
        cursor); that message."""
        await self.shows(lambda ms: any(text in m.content and streaming(m) for m in ms))
        return next(m for m in self.api.messages() if text in m.content)

    def request(self, index: int) -> list[dict[str, Any]]:
        """The messages of the model's `index`th request."""
        body = self.model.seen[index].body
        assert isinstance(body, dict)
        messages: list[dict[str, Any]] = body["messages"]
        return messages


def streaming(message: SentMessage) -> bool:
    """Still streaming: the cursor ends it and the Stop button rides on it."""
    return message.content.endswith(CURSOR) and bool(message.components)


def stop_button(message: SentMessage) -> str:
    """The custom id of the Stop button on `message`."""
    (row,) = message.components
    (button,) = row["components"]
    assert button["label"] == "Stop"
    return str(button["custom_id"])


def said(record: InteractionRecord) -> list[str]:
    """What an interaction answered, only to its user."""
    return [m.content for m in record.ephemeral]


def responded(record: InteractionRecord) -> bool:
    return record.state == "responded"


@asynccontextmanager
async def running(script: Mapping[str, Sequence[Reply]], **environ: str) -> AsyncIterator[Scene]:
    """The bot built from the environment, on a model server playing `script`, connected to a
    local Discord; on exit, everything is closed and no task is left."""
    before = asyncio.all_tasks()
    async with ModelServer(route=by_question(script)) as model:
        turns: asyncio.Queue[tuple[Question, TurnResult]] = asyncio.Queue()
        bot = build(
            {
                "DISCORD_TOKEN": "unused: local_bot logs in with the emulator's token",
                "CORDSTREAM_MODEL": "local-model",
                "OPENAI_BASE_URL": model.url + "/v1",
                "OPENAI_API_KEY": "local-key",
                **environ,
            },
            on_turn=lambda question, turn: turns.put_nowait((question, turn)),
        )
        stops = bot.orchestrator.stops  # the bot's own registry, not the process-wide default
        assert stops is not DEFAULT_STOPS
        assert isinstance(bot.conversations.model, OpenAIModel)
        try:
            async with local_bot(bot) as api:
                yield Scene(api, model, bot, stops, turns)
                assert turns.empty(), "an answer the test did not look at"
        finally:
            await bot.conversations.model.client.close()
    assert len(stops) == 0  # no stop or follow-up left to end a later answer (C5)
    assert asyncio.all_tasks() == before


def mention(api: DiscordEmulator, text: str) -> str:
    return f"<@{api.user_id}> {text}"


# ---- asking --------------------------------------------------------------------------------------


async def test_a_mention_is_answered_live_as_a_reply_and_remembered() -> None:
    reply, resume = held("It streams answers.\n", "Live, into Discord.")
    async with running({"what is cordstream?": [reply]}) as scene:
        api = scene.api
        alice, bob = api.add_member("alice"), api.add_member("bob")
        await api.user_says(bob, "just chatting")  # not for the bot
        asked = await api.user_says(alice, mention(api, "what is cordstream?"))
        partial = await scene.showing("It streams answers.")  # live: before the model is done
        assert partial.message_reference is not None
        assert partial.message_reference["message_id"] == asked  # a reply (F1)
        resume.set()
        question, turn = await scene.turn()
        assert (question.user_id, question.content, turn.status) == (
            alice.id,
            "what is cordstream?",
            "completed",
        )
        (message,) = api.messages()
        assert message.id == partial.id  # the same message, edited as the answer grew
        assert message.content == "It streams answers.\nLive, into Discord."
        assert message.components == ()  # the final edit took the Stop button away (K2)
        assert message.edits >= 1
        assert turn.final.messages == (message.content,)
        # The environment's model, URL and key; bob's chat never reached the model.
        (request,) = scene.model.seen
        assert isinstance(request.body, dict)
        assert request.body["model"] == "local-model"
        assert request.headers["Authorization"] == "Bearer local-key"
        assert [t["function"]["name"] for t in request.body["tools"]] == ["roll_dice"]
        assert scene.request(0) == [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "what is cordstream?"},
        ]
        assert scene.bot.conversations.memory[api.channel_id] == [
            {"role": "user", "content": "what is cordstream?"},
            {"role": "assistant", "content": "It streams answers.\nLive, into Discord."},
        ]


async def test_ask_is_deferred_then_answered_live_in_the_original_response() -> None:
    reply, resume = held("Rayleigh scattering:\n", "short waves scatter more.")
    async with running({"why is the sky blue?": [reply]}) as scene:
        api = scene.api
        alice = api.add_member("alice")
        assert {c["name"] for c in api.gateway.commands()} == {"ask", "stop"}  # synced
        asked = await api.slash(alice, "ask", {"question": "why is the sky blue?"})
        await asked.wait_until(lambda i: i.thinking)
        assert asked.responses == [5]  # deferred: "thinking…" while the model starts (K1)
        await asked.wait_until(
            lambda i: i.original is not None and "Rayleigh" in i.original.content
        )
        assert not asked.thinking
        assert asked.original is not None
        assert streaming(asked.original)  # shown live, with the cursor and the Stop button
        resume.set()
        question, turn = await scene.turn()
        assert (question.content, turn.status) == ("why is the sky blue?", "completed")
        original = asked.original
        assert original is not None
        assert (original.content, original.components) == (
            "Rayleigh scattering:\nshort waves scatter more.",
            (),
        )
        assert asked.followups == []
        assert asked.ephemeral == []
        assert api.messages() == [original]  # in the channel, for everyone
        assert original.interaction_id == asked.id


# ---- several users, each stopping their own ------------------------------------------------------


def tea_and_coffee() -> tuple[dict[str, list[Reply]], asyncio.Event]:
    """The script of two answers at once: to "tell me about tea" (Alice's question), its first
    line, then the rest once the event is set; to "tell me about coffee" (Bob's), its first
    line, and nothing more ever."""
    tea, tea_rest = held("Tea is a drink.\n", "It comes from Camellia sinensis.")
    coffee, _ = held("Coffee is a drink.\n", "never shown")
    return {"tell me about tea": [tea], "tell me about coffee": [coffee]}, tea_rest


async def test_two_users_at_once_and_bobs_stop_stops_only_bobs_answer() -> None:
    script, tea_rest = tea_and_coffee()
    async with running(script) as scene:
        api = scene.api
        alice, bob = api.add_member("alice"), api.add_member("bob")
        await api.user_says(alice, mention(api, "tell me about tea"))
        asked = await api.slash(bob, "ask", {"question": "tell me about coffee"})
        alices = await scene.showing("Tea is a drink.")
        bobs = await scene.showing("Coffee is a drink.")  # both answers stream at once
        assert bobs.interaction_id == asked.id

        # Bob's /stop stops his answer; Alice's goes on.
        stopped = await api.slash(bob, "stop")
        await stopped.wait_until(responded)
        assert said(stopped) == ["Stopping your answer."]
        question, turn = await scene.turn()
        assert (question.user_id, turn.status, turn.final.stop_context) == (
            bob.id,
            "stopped_by_user",
            "/stop",
        )
        assert asked.original is not None
        assert (asked.original.content, asked.original.components) == ("Coffee is a drink.", ())
        assert streaming(next(m for m in api.messages() if m.id == alices.id))
        assert scene.turns.empty()

        again = await api.slash(bob, "stop")  # nothing of his streams now
        await again.wait_until(responded)
        assert said(again) == ["You have no answer here."]

        tea_rest.set()
        question, turn = await scene.turn()
        assert (question.user_id, turn.status) == (alice.id, "completed")
        assert {m.id: m.content for m in api.messages()} == {
            alices.id: "Tea is a drink.\nIt comes from Camellia sinensis.",
            bobs.id: "Coffee is a drink.",
        }


async def test_bobs_new_message_interrupts_only_his_answer_and_the_bot_answers_it() -> None:
    script, tea_rest = tea_and_coffee()
    script["in one word?"] = [answer("Energizing.")]
    async with running(script) as scene:
        api = scene.api
        alice, bob = api.add_member("alice"), api.add_member("bob")
        await api.user_says(alice, mention(api, "tell me about tea"))
        await api.user_says(bob, mention(api, "tell me about coffee"))
        alices = await scene.showing("Tea is a drink.")
        bobs = await scene.showing("Coffee is a drink.")

        # Bob writes again (without mentioning the bot): his answer alone ends, and his turn
        # restarts with the new message.
        again = await api.user_says(bob, "in one word?")
        question, turn = await scene.turn()
        assert (question.user_id, question.content, turn.status) == (
            bob.id,
            "tell me about coffee",
            "follow_up_interrupt",
        )
        question, turn = await scene.turn()
        assert (question.user_id, question.content, turn.status) == (
            bob.id,
            "in one word?",
            "completed",
        )
        first, second = (m for m in api.messages() if m.id != alices.id)
        assert first.id == bobs.id
        assert first.content == "Coffee is a drink."  # what was shown stays (C6)
        assert second.content == "Energizing."
        assert second.message_reference is not None
        assert second.message_reference["message_id"] == again  # answers the new one
        # The model heard Bob's interrupted exchange as the channel shows it; Alice's, still
        # running, is not in the memory yet.
        assert scene.request(2)[1:] == [
            {"role": "user", "content": "tell me about coffee"},
            {"role": "assistant", "content": "Coffee is a drink."},
            {"role": "user", "content": "in one word?"},
        ]
        assert streaming(next(m for m in api.messages() if m.id == alices.id))

        tea_rest.set()
        question, turn = await scene.turn()
        assert (question.user_id, turn.status) == (alice.id, "completed")
        assert next(m for m in api.messages() if m.id == alices.id).content == (
            "Tea is a drink.\nIt comes from Camellia sinensis."
        )


async def test_a_new_ask_while_answering_is_deferred_and_only_the_newest_is_answered() -> None:
    story, _ = held("Once upon a time,\n", "never shown")
    script = {"a story": [story], "shorter": [answer("unused")], "a poem": [answer("Roses.")]}
    async with running(script) as scene:
        api = scene.api
        alice = api.add_member("alice")
        await api.user_says(alice, mention(api, "a story"))
        await scene.showing("Once upon a time,")
        # The interrupted answer's final edit is slow: two new questions come meanwhile.
        api.inject(Delay(2.0), route="edit")
        shorter = await api.slash(alice, "ask", {"question": "shorter"})
        await shorter.wait_until(lambda i: i.thinking)  # deferred at once: it has to wait
        slow = [r for r in api.requests if r.kind == "edit"]
        while not any(r.fault is not None for r in slow):  # the final edit is under way
            await asyncio.sleep(0.1)
            slow = [r for r in api.requests if r.kind == "edit"]
        poem = await api.slash(alice, "ask", {"question": "a poem"})
        await shorter.wait_until(lambda i: i.original is not None and not i.thinking)
        assert shorter.original is not None
        assert shorter.original.content == SUPERSEDED  # nothing left thinking
        question, turn = await scene.turn()
        assert (question.content, turn.status) == ("a story", "follow_up_interrupt")
        question, turn = await scene.turn()
        assert (question.content, turn.status) == ("a poem", "completed")
        assert poem.responses == [5]
        assert poem.original is not None
        assert poem.original.content == "Roses."
        assert [question_of(seen.body) for seen in scene.model.seen] == ["a story", "a poem"]


# ---- the Stop button and moderators --------------------------------------------------------------


async def test_the_stop_button_refuses_a_third_user_and_stops_for_the_asker() -> None:
    haiku, haiku_rest = held("Old pond,\n", "a frog jumps in.")
    another, _ = held("Autumn moon,\n", "never shown")
    script = {"a haiku please": [haiku], "another one": [another]}
    async with running(script) as scene:
        api = scene.api
        alice, carol = api.add_member("alice"), api.add_member("carol")
        await api.user_says(alice, mention(api, "a haiku please"))
        message = await scene.showing("Old pond,")

        # Carol may not stop Alice's answer: she is told so, privately, and it goes on.
        refused = await api.click(carol, message.id, stop_button(message))
        await refused.wait_until(responded)
        assert said(refused) == [STOP_REFUSED]
        assert api.ephemeral_messages(carol) == refused.ephemeral
        assert api.ephemeral_messages(alice) == []
        haiku_rest.set()
        question, turn = await scene.turn()
        assert (question.content, turn.status) == ("a haiku please", "completed")
        assert api.messages()[0].content == "Old pond,\na frog jumps in."

        # Alice's own click stops her answer.
        await api.user_says(alice, mention(api, "another one"))
        message = await scene.showing("Autumn moon,")
        pressed = await api.click(alice, message.id, stop_button(message))
        question, turn = await scene.turn()
        assert (question.content, turn.status) == ("another one", "stopped_by_user")
        stop_context = turn.final.stop_context
        assert isinstance(stop_context, discord.Interaction)
        assert stop_context.id == pressed.id  # the click itself (C7)
        assert pressed.responses == [6]  # acknowledged; the final edit removed the button
        assert said(pressed) == []
        last = api.messages()[-1]
        assert (last.id, last.content, last.components) == (message.id, "Autumn moon,", ())


async def test_a_moderator_may_stop_anyones_answer_and_others_may_not() -> None:
    story, _ = held("Once upon a time,\n", "never shown")
    async with running({"a long story": [story]}) as scene:
        api = scene.api
        alice, bob = api.add_member("alice"), api.add_member("bob")
        moderator = api.add_member("mod", manage_messages=True)
        await api.user_says(alice, mention(api, "a long story"))
        await scene.showing("Once upon a time,")

        refused = await api.slash(bob, "stop", {"user": alice})
        await refused.wait_until(responded)
        assert said(refused) == [f"Only <@{alice.id}> or a moderator can stop that answer."]
        assert streaming(api.messages()[0])
        assert scene.turns.empty()

        stopped = await api.slash(moderator, "stop", {"user": alice})
        await stopped.wait_until(responded)
        assert said(stopped) == [f"Stopping the answer to <@{alice.id}>."]
        question, turn = await scene.turn()
        assert (question.user_id, turn.status, turn.final.stop_context) == (
            alice.id,
            "stopped_by_user",
            "/stop",
        )
        assert turn.final.stop_reason == "user_request"
        assert api.messages()[0].content == "Once upon a time,"

        idle = await api.slash(moderator, "stop", {"user": bob})
        await idle.wait_until(responded)
        assert said(idle) == [f"<@{bob.id}> has no answer here."]


# ---- memory --------------------------------------------------------------------------------------


async def test_F2_the_next_question_carries_the_answer_as_the_channel_shows_it() -> None:
    long_line = " ".join(f"word{i}" for i in range(50))
    script = {
        "roll a die": [
            text_then_tool("Let me roll.\n", "roll_dice", {"sides": 6}),
            answer(f"You rolled it.\n{long_line}\nEnjoy!"),
        ],
        "thanks": [answer("Any time.")],
    }
    async with running(script, CORDSTREAM_MAX_MESSAGE_LENGTH="200") as scene:
        api = scene.api
        alice = api.add_member("alice")
        await api.user_says(alice, mention(api, "roll a die"))
        _, turn = await scene.turn()
        assert turn.status == "completed"
        assert [segment.status for segment in turn.segments] == ["function_call", "completed"]
        (run,) = turn.tool_runs
        assert run.call.name == "roll_dice"
        shown = [m.content for m in api.messages()]
        assert len(shown) >= 3  # the tool round's line, then an answer longer than a message
        assert shown[0] == "Let me roll."
        assert turn.text == "\n".join(shown)

        await api.user_says(alice, mention(api, "thanks"))
        _, turn = await scene.turn()
        assert turn.status == "completed"
        assert scene.request(2)[1:] == [
            {"role": "user", "content": "roll a die"},
            {"role": "assistant", "content": "\n".join(shown)},  # each message, line breaks
            {"role": "user", "content": "thanks"},
        ]
        assert "Let me roll.\nYou rolled it.\n" in scene.request(2)[2]["content"]


async def test_an_answer_that_never_comes_is_said_in_the_channel() -> None:
    # B8: empty_response shows nothing, even after run_turn's two retries; the bot says so.
    async with running({"hi": [answer("")]}) as scene:
        api = scene.api
        alice = api.add_member("alice")
        asked = await api.user_says(alice, mention(api, "hi"))
        _, turn = await scene.turn()
        assert turn.status == "empty_response"
        assert len(scene.model.seen) == 3
        (message,) = await scene.shows(lambda ms: len(ms) == 1)
        assert message.content == NO_ANSWER
        assert message.message_reference is not None
        assert message.message_reference["message_id"] == asked
        assert scene.bot.conversations.memory[api.channel_id] == [{"role": "user", "content": "hi"}]


# ---- the tool and the environment ----------------------------------------------------------------


async def test_the_dice_tool_rolls_within_bounds_and_rejects_nonsense() -> None:
    rolled = await roll_dice({"sides": 6, "count": 3})
    assert isinstance(rolled, dict)
    assert len(rolled["rolls"]) == 3
    assert all(1 <= roll <= 6 for roll in rolled["rolls"])
    with pytest.raises(ValueError, match="sides must be an integer"):
        await roll_dice({"sides": "six"})


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
    assert capsys.readouterr().err == (
        "examples/bot.py: set DISCORD_TOKEN, CORDSTREAM_MODEL (see the README)\n"
    )


async def test_main_reports_a_bad_log_level_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    environ = {"DISCORD_TOKEN": "t", "CORDSTREAM_MODEL": "m", "CORDSTREAM_LOG_LEVEL": "loud"}
    assert main(environ) == 2
    assert capsys.readouterr().err == (
        "examples/bot.py: CORDSTREAM_LOG_LEVEL must be one of debug, info, warning, got 'loud'\n"
    )


async def test_the_log_level_is_info_unless_the_environment_says_otherwise() -> None:
    assert log_level({}) == logging.INFO
    assert log_level({"CORDSTREAM_LOG_LEVEL": " DEBUG "}) == logging.DEBUG
    assert log_level({"CORDSTREAM_LOG_LEVEL": "warning"}) == logging.WARNING
