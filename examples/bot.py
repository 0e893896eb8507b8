"""A real Discord bot on cordstream and any OpenAI-compatible model.

Run it (see the README, "Run a real bot"):

    export DISCORD_TOKEN=...                           # the bot's token
    export OPENAI_BASE_URL=http://127.0.0.1:11434/v1   # Ollama; or OpenRouter, vLLM, OpenAI…
    export OPENAI_API_KEY=...                          # any string for a local server
    export CORDSTREAM_MODEL=llama3.2
    python -m examples.bot

What it does: it answers mentions and `/ask`, live, with a Stop button on each answer and a
`roll_dice` tool; `/stop` stops your own answer (a moderator's `/stop user:` anyone's); it
answers several users in a channel at once, and a user's new message interrupts only their own
answer, which restarts with it; it remembers each channel's last 20 messages, each answer as
the channel shows it. The bot itself, `CordBot` (the Discord glue) over `Conversations` (the
logic), is `cordstream.shell.cli.bot` (shell/cli/bot.py), where its module docstring says all
it does: it is in the package so that `cordstream demo --bot` runs the same bot, with a
scripted model, from a `pip install` too. This file adds the model (`OpenAIModel`) and the
environment (`build`, `main`). `tests/bot/test_example_bot.py` runs it whole against the emulator's
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

from cordstream.shell import StreamConfig, StreamOrchestrator
from cordstream.shell.cli.bot import (
    NO_ANSWER,
    SYSTEM,
    TOOL_SPECS,
    Conversations,
    CordBot,
    Message,
    Question,
    roll_dice,
)
from cordstream.shell.providers import OpenAIChatProvider

__all__ = [
    "NO_ANSWER",
    "Conversations",
    "CordBot",
    "OpenAIModel",
    "Question",
    "build",
    "main",
    "roll_dice",
]


@dataclass(frozen=True)
class OpenAIModel:
    """The bot's `Model` on an OpenAI-compatible endpoint: each turn's provider gets the system
    prompt, the channel's history and the question, and the tool."""

    client: openai.AsyncOpenAI
    name: str

    def __call__(self, messages: Sequence[Message]) -> OpenAIChatProvider:
        return OpenAIChatProvider(
            self.client,
            model=self.name,
            messages=[{"role": "system", "content": SYSTEM}, *messages],
            tools=TOOL_SPECS,
        )


def build(environ: Mapping[str, str], **options: Any) -> CordBot:
    """The bot the environment describes (`options` go to `discord.Client`). A missing or bad
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
    return CordBot(Conversations(StreamOrchestrator(), model, config), **options)


def main(environ: Mapping[str, str] = os.environ) -> int:
    try:
        bot = build(environ)
    except ValueError as bad:
        print(f"examples/bot.py: {bad}", file=sys.stderr)
        return 2
    bot.run(environ["DISCORD_TOKEN"], log_level=logging.INFO)
    return 0


if __name__ == "__main__":
    sys.exit(main())
