"""The bot kit (`cordstream.shell.bot.ChatBot`) as a bot author uses it: built with a model
factory and tools, run whole through the emulator's gateway (`local_bot`), several times in one
process. What the bot does for users (stops, interrupts, moderators, memory as shown) is
`test_example_bot.py`'s, through `examples/bot.py`; here is what the kit itself promises: its
commands sync without the author's code, each instance keeps its own state, the model factory
gets the conversation (system prompt, memory, question) and the tools run, and the hooks
(`on_turn`, `wants`, `orchestrator`) reach the answers.

A scripted model (`Scripted`) plays a script per question and records what it was given. Virtual
time (looptime); every wait is for a condition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import discord
import pytest

from cordstream.domain import FunctionCall, FunctionCallChunk
from cordstream.shell import DEFAULT_STOPS, StopRegistry, StreamOrchestrator, TurnResult
from cordstream.shell.bot import HISTORY, ChatBot, Message, Question
from cordstream.shell.cli.botdemo import ScriptedAnswer
from cordstream.shell.providers import ToolOutcome
from cordstream.shell.testing import DiscordEmulator, Hang, SentMessage, Step, local_bot

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

WAIT = 20.0  # seconds of loop time


@dataclass
class Scripted:
    """A model factory: each question (the last message) gets the answer scripted for it;
    `then`, if scripted, makes the answer after a tool round. `given` holds each call's
    conversation."""

    answers: Mapping[str, Sequence[Step]]
    then: Mapping[str, Callable[[Sequence[ToolOutcome]], Sequence[Step]]] = field(
        default_factory=dict
    )
    given: list[list[Message]] = field(default_factory=list)

    def __call__(self, messages: Sequence[Message]) -> ScriptedAnswer:
        self.given.append([dict(m) for m in messages])
        question = messages[-1]["content"]
        steps = self.answers.get(question, ["I was not told what to say."])
        return ScriptedAnswer(list(steps), then=self.then.get(question))


def mention(api: DiscordEmulator, text: str) -> str:
    return f"<@{api.user_id}> {text}"


def final(text: str) -> Callable[[SentMessage], bool]:
    """A message that shows `text`, its answer over (no Stop button left on it)."""
    return lambda m: m.content == text and not m.components


Turns = asyncio.Queue[tuple[Question, TurnResult]]


def watched(model: Scripted, **options: Any) -> tuple[ChatBot, Turns]:
    """A bot on `model` (`options` go to `ChatBot`) and the queue its turns go to as they end."""
    turns: Turns = asyncio.Queue()
    bot = ChatBot(
        model,
        on_turn=lambda question, turn: turns.put_nowait((question, turn)),
        guild_ready_timeout=0.05,
        **options,
    )
    return bot, turns


async def next_turn(turns: Turns) -> TurnResult:
    _, turn = await asyncio.wait_for(turns.get(), WAIT)
    return turn


# ---- command sync --------------------------------------------------------------------------------


async def test_ask_and_stop_are_synced_at_start_with_the_authors_own_commands() -> None:
    bot = ChatBot(Scripted({"hi": ["Hello."]}), guild_ready_timeout=0.05)

    @bot.tree.command(name="ping", description="Is the bot there?")
    async def ping(interaction: discord.Interaction) -> None:
        await interaction.response.send_message("pong")

    async with local_bot(bot) as api:
        commands = {c["name"]: c for c in api.gateway.commands()}
        assert set(commands) == {"ask", "stop", "ping"}  # global, with nothing of ours called
        assert api.gateway.commands(guild=True) == []
        (question,) = commands["ask"]["options"]
        assert (question["name"], question["type"], question["required"]) == ("question", 3, True)
        (user,) = commands["stop"]["options"]
        assert (user["name"], user["type"], user.get("required", False)) == ("user", 6, False)
        alice = api.add_member("alice")
        asked = await api.slash(alice, "ask", {"question": "hi"})  # usable at once
        await asked.wait_until(lambda i: i.original is not None and i.original.content == "Hello.")
        pinged = await api.slash(alice, "ping")
        await pinged.wait_until(lambda i: i.state == "responded")


async def test_sync_commands_false_leaves_the_command_list_to_the_author() -> None:
    bot = ChatBot(Scripted({}), sync_commands=False, guild_ready_timeout=0.05)
    async with local_bot(bot) as api:
        assert api.gateway.commands() == []
        assert [r for r in api.requests if r.kind == "commands"] == []


# ---- several bots in one process -----------------------------------------------------------------


async def test_each_bot_keeps_its_own_state_and_many_run_in_one_process() -> None:
    bots: list[ChatBot] = []
    for name in ("first", "second", "third"):
        model = Scripted({"who are you?": [f"I am the {name} bot."]})
        bot, turns = watched(model)
        async with local_bot(bot) as api:
            alice = api.add_member("alice")
            await api.user_says(alice, mention(api, "who are you?"))
            assert (await next_turn(turns)).status == "completed"
            assert api.text() == f"I am the {name} bot."
            assert api.gateway.commands()  # each synced its own tree
            # The model was given only this bot's conversation: no other bot's memory.
            assert model.given == [[{"role": "user", "content": "who are you?"}]]
        bots.append(bot)
    registries = {id(bot.orchestrator.stops) for bot in bots}
    assert len(registries) == 3  # a stop registry each, not the process-wide default
    assert all(bot.orchestrator.stops is not DEFAULT_STOPS for bot in bots)
    assert all(len(bot.orchestrator.stops) == 0 for bot in bots)
    assert [len(bot.conversations.memory) for bot in bots] == [1, 1, 1]


async def test_an_orchestrator_given_is_the_one_that_streams() -> None:
    stops = StopRegistry()
    orchestrator = StreamOrchestrator(stops)
    story = Scripted({"a long story": ["Once upon a time,\n", Hang()]})
    bot, turns = watched(story, orchestrator=orchestrator)
    assert bot.orchestrator is orchestrator
    async with local_bot(bot) as api:
        alice = api.add_member("alice")
        await api.user_says(alice, mention(api, "a long story"))
        await api.wait_for_message(lambda m: "Once upon a time," in m.content, timeout=WAIT)
        assert bot.conversations.answering(api.channel_id, alice.id)
        # A stop of the bot's own (a custom command, a moderation rule) through its orchestrator.
        assert bot.orchestrator.request_stop(api.channel_id, "automod", answering=alice.id)
        turn = await next_turn(turns)
        assert (turn.status, turn.final.stop_context) == ("stopped_by_user", None)
        assert api.messages()[0].content == "Once upon a time,"
        assert not bot.conversations.answering(api.channel_id, alice.id)
    assert len(stops) == 0


# ---- the model factory, the tools, the hooks -----------------------------------------------------


async def test_the_model_gets_system_memory_and_question_and_the_tools_run() -> None:
    looked_up: list[Mapping[str, object]] = []

    async def look_up(arguments: Mapping[str, object]) -> object:
        looked_up.append(arguments)
        return {"capital": "Paris"}

    call = FunctionCall("look_up", {"country": "France"}, id="call_1")
    model = Scripted(
        {"capital of France?": [FunctionCallChunk(call)], "thanks": ["You're welcome."]},
        then={"capital of France?": lambda outcomes: [f"It is {outcomes[0].output}."]},
    )
    seen: list[tuple[str, str]] = []
    ended: asyncio.Queue[None] = asyncio.Queue()

    async def on_turn(question: Question, turn: TurnResult) -> None:
        await asyncio.sleep(0)  # a coroutine: awaited before the turn is over
        seen.append((question.content, turn.status))
        ended.put_nowait(None)

    bot = ChatBot(
        model, tools={"look_up": look_up}, system="Be brief.", on_turn=on_turn, history=HISTORY
    )
    async with local_bot(bot) as api:
        alice = api.add_member("alice")
        await api.user_says(alice, mention(api, "capital of France?"))
        await asyncio.wait_for(ended.get(), WAIT)
        (answer,) = api.messages()
        assert answer.content == 'It is {"capital": "Paris"}.'
        assert looked_up == [{"country": "France"}]
        asked = await api.slash(alice, "ask", {"question": "thanks"})
        await asyncio.wait_for(ended.get(), WAIT)
        assert asked.original is not None
        assert asked.original.content == "You're welcome."
        assert seen == [("capital of France?", "completed"), ("thanks", "completed")]
    system: Message = {"role": "system", "content": "Be brief."}
    first: Message = {"role": "user", "content": "capital of France?"}
    assert model.given == [
        [system, first],
        [
            system,
            first,
            {"role": "assistant", "content": answer.content},
            {"role": "user", "content": "thanks"},
        ],
    ]


async def test_history_bounds_what_the_model_is_given() -> None:
    model = Scripted({q: [f"answer {q}"] for q in ("one", "two", "three")})
    bot, turns = watched(model, history=2)
    async with local_bot(bot) as api:
        alice = api.add_member("alice")
        for question in ("one", "two", "three"):
            await api.user_says(alice, mention(api, question))
            assert (await next_turn(turns)).status == "completed"
    assert [len(given) for given in model.given] == [1, 3, 3]
    assert model.given[2] == [
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "answer two"},
        {"role": "user", "content": "three"},
    ]
    assert bot.conversations.memory[api.channel_id] == [
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "answer three"},
    ]


async def test_wants_decides_which_messages_are_questions() -> None:
    class EveryMessage(ChatBot):
        def wants(self, message: discord.Message) -> bool:
            return not message.content.startswith("!")

    model = Scripted({"no mention needed": ["Heard you."]})
    turns: Turns = asyncio.Queue()
    bot = EveryMessage(model, on_turn=lambda q, turn: turns.put_nowait((q, turn)))
    async with local_bot(bot) as api:
        alice = api.add_member("alice")
        await api.user_says(alice, "!ignored")
        asked = await api.user_says(alice, "no mention needed")
        assert (await next_turn(turns)).status == "completed"
        (reply,) = api.messages()
        assert reply.content == "Heard you."
        assert reply.message_reference is not None
        assert reply.message_reference["message_id"] == asked
    assert [given[-1]["content"] for given in model.given] == ["no mention needed"]


async def test_a_model_that_is_not_a_factory_or_a_bad_history_is_refused_at_once() -> None:
    with pytest.raises(TypeError, match=r"model must be a function .*, got str"):
        ChatBot("gpt-4o-mini")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="history must be an int, got str"):
        ChatBot(Scripted({}), history="20")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="history must be 0 or more, got -1"):
        ChatBot(Scripted({}), history=-1)
