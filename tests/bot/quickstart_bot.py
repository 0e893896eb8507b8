"""A Discord bot that streams an OpenAI-compatible model's answers live (the kit's quick start)."""

import os
import random
from collections.abc import Mapping, Sequence

import openai

from cordstream.shell.bot import ChatBot, Message
from cordstream.shell.providers import OpenAIChatProvider

DICE = {"type": "function", "function": {"name": "roll_dice", "parameters": {"type": "object"}}}


async def roll_dice(arguments: Mapping[str, object]) -> object:
    return random.randint(1, 6)


def make_bot(client: openai.AsyncOpenAI, model_name: str) -> ChatBot:
    """Answers mentions and /ask; /stop and the Stop button; remembers each channel."""

    def model(messages: Sequence[Message]) -> OpenAIChatProvider:
        return OpenAIChatProvider(client, model=model_name, messages=messages, tools=[DICE])

    return ChatBot(model, tools={"roll_dice": roll_dice}, system="Answer concisely.")


if __name__ == "__main__":
    client = openai.AsyncOpenAI()  # OPENAI_API_KEY, OPENAI_BASE_URL (any compatible server)
    make_bot(client, os.environ.get("MODEL", "gpt-4o-mini")).run(os.environ["DISCORD_TOKEN"])
