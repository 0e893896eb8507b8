"""A real Discord bot on cordstream's bot kit and any OpenAI-compatible model.

Run it (see the README, "Run a real bot"):

    export DISCORD_TOKEN=...                           # the bot's token
    export OPENAI_BASE_URL=http://127.0.0.1:11434/v1   # Ollama; or OpenRouter, vLLM, OpenAI…
    export OPENAI_API_KEY=...                          # any string for a local server
    export CORDSTREAM_MODEL=llama3.2
    export CORDSTREAM_LOG_LEVEL=info                   # debug: each Discord request too
    python -m examples.bot

The bot is `cordstream.shell.bot.ChatBot`: it answers mentions and `/ask`, live, with a Stop
button on each answer; `/stop` stops your own answer (a moderator's `/stop user:` anyone's); it
answers several users in a channel at once, a user's new message interrupts only their own
answer, and it remembers each channel's last 20 messages. This file adds the model (`OpenAIModel`,
with a `roll_dice` tool) and the environment (`build`, `main`; `StreamConfig.from_env` reads the
streaming settings). `tests/bot/test_example_bot.py` runs it whole against the local Discord's
gateway and a local OpenAI-compatible server.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from cordstream.shell import StreamConfig
from cordstream.shell.bot import ChatBot, Message
from cordstream.shell.cli.dice import roll_dice  # the demo's dice tool, shared
from cordstream.shell.providers import OpenAIChatProvider

__all__ = ["SYSTEM", "TOOL_SPECS", "OpenAIModel", "build", "main", "roll_dice"]

SYSTEM = "You are a helpful assistant in a Discord server. Answer concisely."


TOOL_SPECS: Sequence[Mapping[str, object]] = (
    {
        "type": "function",
        "function": {
            "name": "roll_dice",
            "description": "Roll dice. Use it whenever the user asks for a random roll.",
            "parameters": {
                "type": "object",
                "properties": {
                    "sides": {"type": "integer", "minimum": 2},
                    "count": {"type": "integer", "minimum": 1},
                },
            },
        },
    },
)


@dataclass(frozen=True)
class OpenAIModel:
    """The bot's model (`cordstream.shell.bot.Model`): each turn's provider, on `client`."""

    client: openai.AsyncOpenAI
    name: str

    def __call__(self, messages: Sequence[Message]) -> OpenAIChatProvider:
        return OpenAIChatProvider(self.client, model=self.name, messages=messages, tools=TOOL_SPECS)


def build(environ: Mapping[str, str], **options: Any) -> ChatBot:
    """The bot the environment describes (`options` go to `ChatBot`). A missing or bad
    variable is a `ValueError` naming it."""
    missing = [name for name in ("DISCORD_TOKEN", "CORDSTREAM_MODEL") if not environ.get(name)]
    if missing:
        raise ValueError(f"set {', '.join(missing)} (see the README)")
    config = StreamConfig.from_env(environ)  # names the variable, its unit and the value given
    client = openai.AsyncOpenAI(
        base_url=environ.get("OPENAI_BASE_URL") or None,
        api_key=environ.get("OPENAI_API_KEY") or "not-needed",
    )
    model = OpenAIModel(client, environ["CORDSTREAM_MODEL"])
    tools = {"roll_dice": roll_dice}
    return ChatBot(model, tools=tools, system=SYSTEM, config=config, **options)


LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def log_level(environ: Mapping[str, str]) -> int:
    """`CORDSTREAM_LOG_LEVEL` (info by default): info logs one line per answer's stream and
    turn; debug each Discord request and tool call too. A bad value is a `ValueError`."""
    given = environ.get("CORDSTREAM_LOG_LEVEL", "info").strip().lower() or "info"
    if given not in LOG_LEVELS:
        raise ValueError(
            f"CORDSTREAM_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {given!r}"
        )
    return LOG_LEVELS[given]


def main(environ: Mapping[str, str] = os.environ) -> int:
    try:
        bot = build(environ)
        level = log_level(environ)
    except ValueError as bad:
        print(f"examples/bot.py: {bad}", file=sys.stderr)
        return 2
    # discord.py's own set-up: its handler on the root logger, which `cordstream` reaches too.
    bot.run(environ["DISCORD_TOKEN"], log_level=level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
