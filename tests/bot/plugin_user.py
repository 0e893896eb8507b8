"""A bot's tests as its author writes them with `cordstream[testing]`: the plugin's fixtures,
the scripted model, no pytest configuration. `test_pytest_plugin.py` copies this file out of
the repository and runs pytest on it there; mypy --strict checks it here."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import discord
import pytest

from cordstream.domain import FunctionCall
from cordstream.shell import StreamContext, StreamOrchestrator, ToolOutcome, ToolProvider, run_turn
from cordstream.shell.testing import LocalBot, LocalDiscord, ScriptedTurn


async def roll_dice(arguments: Mapping[str, object]) -> object:
    return {"rolled": 4}


class DiceBot(discord.Client):
    """Answers each message with a turn of `model()`, which may roll dice."""

    def __init__(self, model: Callable[[], ToolProvider[Any]]) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents)
        self.model = model
        self.orchestrator = StreamOrchestrator()

    async def on_message(self, message: discord.Message) -> None:
        if not message.author.bot:
            context = StreamContext(message.channel, reply_to=message)
            tools = {"roll_dice": roll_dice}
            await run_turn(self.orchestrator, self.model(), context, tools=tools)


def rolled(outcomes: Sequence[ToolOutcome]) -> list[str]:
    return [f"You rolled {outcomes[0].output}."]


# ---- the user's tests ----------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_the_bot_rolls_a_die(local_bot: LocalBot) -> None:
    model = ScriptedTurn(
        ["Let me roll.\n", FunctionCall("roll_dice", {"sides": 6}, id="call_1")],
        lambda outcomes: [f"You rolled {outcomes[0].output}."],
    )
    api = await local_bot(DiceBot(lambda: model))
    await api.user_says(api.add_member("alice"), "roll a die")
    await api.wait_for_text('Let me roll.\nYou rolled {"rolled": 4}.')
    assert model.outcomes[0][0].output == '{"rolled": 4}'


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_tool_turn_completes(local_discord: LocalDiscord) -> None:
    api, _, channel = local_discord
    model = ScriptedTurn(["Let me roll.\n", FunctionCall("roll_dice", id="call_1")], rolled)
    turn = await run_turn(
        StreamOrchestrator(), model, StreamContext(channel), tools={"roll_dice": roll_dice}
    )
    assert turn.status == "completed"
    assert api.text() == 'Let me roll.\nYou rolled {"rolled": 4}.'
