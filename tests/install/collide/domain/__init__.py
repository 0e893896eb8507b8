"""The bot's own `domain` package: a name cordstream must not take from it."""

from __future__ import annotations

BOT_DOMAIN = "the bot's own domain package"


def greet(name: str) -> str:
    return f"hello, {name}"
