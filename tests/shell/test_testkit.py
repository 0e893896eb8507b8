"""The test kit's whole turns: `ScriptedTurn` through `run_turn`, `wait_for_text`, `LocalBot`.

Written as a bot's author writes a test (the README's style): the real shell, a real
discord.py client or bot against the local Discord, virtual time (looptime). The plugin that
gives these as fixtures is run as a user runs it in `tests/bot/test_pytest_plugin.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import discord
import pytest

from cordstream.domain import DoneChunk, FunctionCall, FunctionCallChunk
from cordstream.shell import (
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    ToolOutcome,
    ToolProvider,
    run_turn,
)
from cordstream.shell.testing import (
    LocalBot,
    ScriptedTurn,
    ScriptProvider,
    Sleep,
    local_discord,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

CURSOR = " \u258c"


async def roll_dice(arguments: Mapping[str, object]) -> object:
    sides = arguments.get("sides")
    assert isinstance(sides, int)
    return {"rolled": sides}  # the highest face: the answer is known


def rolled(outcomes: Sequence[ToolOutcome]) -> list[str]:
    """The answer after the roll: what the tool returned, in words."""
    return ["You rolled ", f"{outcomes[0].output}."]


ROLL = FunctionCall("roll_dice", {"sides": 6}, id="call_1")


# ---- ScriptedTurn ------------------------------------------------------------------------------


async def test_a_tool_round_then_the_answer_runs_through_run_turn_and_completes() -> None:
    model = ScriptedTurn(["Let me roll.\n", ROLL], rolled)
    provider: ToolProvider[Any] = model  # what run_turn takes, for mypy --strict
    async with local_discord() as (api, _, channel):
        turn = await run_turn(
            StreamOrchestrator(), provider, StreamContext(channel), tools={"roll_dice": roll_dice}
        )
        assert turn.status == "completed"
        assert [segment.status for segment in turn.segments] == ["function_call", "completed"]
        assert api.text() == turn.text == 'Let me roll.\nYou rolled {"rolled": 6}.'
    (run,) = turn.tool_runs
    assert run.call == ROLL
    assert model.outcomes == [[ToolOutcome(ROLL, '{"rolled": 6}')]]  # what the model was told
    first, second = model.segments
    assert second.outcomes is model.outcomes  # one record, whichever segment a test holds
    assert first.closed
    assert second.closed
    assert first.reached == {"function_call"}  # the call ended the first segment
    assert second.reached == {"end"}  # the answer was played to its end


async def test_a_later_segment_may_be_fixed_steps_and_calls_may_run_in_parallel() -> None:
    heads, tails = FunctionCall("flip", id="a"), FunctionCall("flip", {"again": True}, id="b")
    flips = iter(["heads", "tails"])

    async def flip(arguments: Mapping[str, object]) -> object:
        return next(flips)

    model = ScriptedTurn(
        [FunctionCallChunk([heads, tails])],
        ["Two coins: ", "done.", DoneChunk({"finish_reason": "stop"})],
        name="coins",
    )
    async with local_discord() as (api, _, channel):
        turn = await run_turn(
            StreamOrchestrator(),
            model,
            StreamContext(channel),
            tools={"flip": flip},
            config=StreamConfig(delivery="messages"),
        )
        assert turn.status == "completed"
        assert api.text() == "Two coins: done."
    assert model.outcomes == [[ToolOutcome(heads, "heads"), ToolOutcome(tails, "tails")]]
    assert [segment.name for segment in model.segments] == ["coins", "coins"]


async def test_a_call_with_no_segment_scripted_after_it_ends_the_turn_as_an_error() -> None:
    model = ScriptedTurn(["Rolling.\n", ROLL], ["Again!\n", ROLL])
    async with local_discord() as (api, _, channel):
        turn = await run_turn(
            StreamOrchestrator(), model, StreamContext(channel), tools={"roll_dice": roll_dice}
        )
        assert turn.status == "error"
        assert isinstance(turn.error, ValueError)
        assert "no segment after tool round 2" in str(turn.error)
        assert api.text() == "Rolling.\nAgain!"
    assert len(model.outcomes) == 2  # both rounds were handed back before it ran out
    assert len(model.segments) == 2


async def test_a_plain_script_provider_still_plays_a_function_call_as_an_item() -> None:
    provider = ScriptProvider(["Hi.", ROLL])  # not a chunk: garbage, as before ScriptedTurn
    async with local_discord() as (_, _, channel):
        result = await StreamOrchestrator().stream_to_discord(
            provider, StreamConfig(), StreamContext(channel)
        )
    assert result.status == "error"
    assert "garbage" in provider.reached


# ---- waiting for the answer --------------------------------------------------------------------


async def test_wait_for_text_returns_once_the_answer_is_written_to_the_end() -> None:
    model = ScriptProvider(["Hello ", Sleep(3.0), "there.\n", Sleep(3.0), "Bye."])
    async with local_discord() as (api, _, channel):
        loop = asyncio.get_running_loop()
        start = loop.time()
        streaming = asyncio.create_task(
            StreamOrchestrator().stream_to_discord(model, StreamConfig(), StreamContext(channel))
        )
        streamed = await api.wait_for_text(lambda text: text.startswith("Hello"))
        assert streamed[0].content == "Hello" + CURSOR  # live: not finished yet
        (message,) = await api.wait_for_text("Hello there.\nBye.")
        assert loop.time() - start >= 6.0  # not before the model wrote its last word
        assert message.content == "Hello there.\nBye."
        assert (await streaming).status == "completed"


async def test_wait_for_text_gives_up_at_its_timeout_saying_what_the_channel_shows() -> None:
    async with local_discord() as (api, _, channel):
        await channel.send("Hello.")
        loop = asyncio.get_running_loop()
        start = loop.time()
        shown = r"did not show 'Bye\.' within 5\.0 s; it shows 'Hello\.'"
        with pytest.raises(TimeoutError, match=shown):
            await api.wait_for_text("Bye.", timeout=5.0)
        assert loop.time() - start == pytest.approx(5.0)
        with pytest.raises(TimeoutError, match="did not show what was expected"):
            await api.wait_for_text(lambda text: "Bye" in text, timeout=1.0)


# ---- LocalBot ----------------------------------------------------------------------------------


class Echo(discord.Client):
    """Says back what users say, through cordstream."""

    def __init__(self) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents)
        self.orchestrator = StreamOrchestrator()

    async def on_message(self, message: discord.Message) -> None:
        if not message.author.bot:
            model = ScriptProvider([f"You said: {message.content}"])
            context = StreamContext(message.channel, reply_to=message)
            await self.orchestrator.stream_to_discord(model, StreamConfig(), context)


async def test_local_bot_runs_bots_until_it_is_closed() -> None:
    bots = LocalBot()
    first, second = Echo(), Echo()
    api = await bots(first)
    assert await bots(second, api) is api  # a second bot on the same Discord
    assert first.is_ready()
    assert second.is_ready()
    said = await api.user_says(api.add_member("alice"), "hello")
    (answer, _) = await api.wait_for_text("You said: hello\nYou said: hello")
    assert answer.message_reference is not None
    assert answer.message_reference["message_id"] == said
    await bots.aclose()
    assert first.is_closed()
    assert second.is_closed()
    assert not api.started  # the emulator the first bot started went with it
