"""The bot's own `shell` module: a name cordstream must not take from it."""

from __future__ import annotations

BOT_SHELL = "the bot's own shell module"


def run(command: str) -> str:
    return f"ran {command}"
