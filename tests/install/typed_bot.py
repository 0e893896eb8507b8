"""A bot author's typed tool loop, type-checked against the installed wheel (not the repo).

`tests/install/check.py` runs `mypy --strict` on this file in a fresh virtual environment that
has only the wheel (with the `openai` extra) and mypy: it proves a user's type checker sees
cordstream's types (`py.typed`), and that a natural bot passes `--strict` without casts.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import discord
import openai

import cordstream
from cordstream.shell import (
    StopRegistry,
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    StreamResult,
    Tool,
    TurnResult,
    run_turn,
)
from cordstream.shell.providers import OpenAIChatProvider

VERSION: str = cordstream.__version__  # the top-level package is typed too
orchestrator = StreamOrchestrator(StopRegistry())
config = StreamConfig.from_env()
model = openai.AsyncOpenAI(base_url="http://127.0.0.1:11434/v1", api_key="local")


async def roll_dice(arguments: Mapping[str, object]) -> dict[str, int]:
    sides = arguments.get("sides", 6)
    return {"rolled": random.randint(1, sides if isinstance(sides, int) else 6)}


TOOLS: dict[str, Tool] = {"roll_dice": roll_dice}


def provider_for(message: discord.Message) -> OpenAIChatProvider:
    return OpenAIChatProvider(
        model,
        model="llama3.2",
        messages=[{"role": "user", "content": message.content}],
        tools=[{"type": "function", "function": {"name": "roll_dice", "parameters": {}}}],
    )


async def answer(message: discord.Message) -> str:
    orchestrator.discard_requests(message.channel.id)
    context = StreamContext(message.channel, reply_to=message)
    turn: TurnResult = await run_turn(
        orchestrator, provider_for(message), context, tools=TOOLS, config=config
    )
    final: StreamResult = turn.final
    lines: tuple[str, ...] = final.messages
    if turn.status == "follow_up_interrupt":
        return "\n".join(lines)
    return turn.text


async def one_segment(message: discord.Message) -> int:
    result = await orchestrator.stream_to_discord(
        provider_for(message), config, StreamContext(message.channel)
    )
    if result.status == "function_call":
        return len(result.function_calls)
    return result.messages_sent


def stop(channel_id: int, user_id: int) -> bool:
    return orchestrator.request_stop(channel_id, str(user_id))
