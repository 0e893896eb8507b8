"""What the gateway and the workers share: a question on a Redis list, and where Discord is."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Final

import discord
import redis.asyncio as redis
import yarl
from discord.gateway import DiscordWebSocket

QUEUE: Final = "questions"
"""The Redis list of questions, under the bot's namespace."""
WAIT: Final = 1
"""How long one blocking read of the list waits, in seconds (then it reads again): within the
client's socket timeout."""


@dataclass(frozen=True)
class Job:
    """A question to answer: in which channel, for whom, what, and the message to reply to."""

    channel_id: int
    user_id: int
    question: str
    reply_to: int

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str | bytes) -> Job:
        fields = json.loads(text)
        return cls(
            int(fields["channel_id"]),
            int(fields["user_id"]),
            str(fields["question"]),
            int(fields["reply_to"]),
        )


def queue_key(namespace: str) -> str:
    return f"{namespace}:{QUEUE}"


async def put(client: redis.Redis, namespace: str, job: Job) -> None:
    await client.rpush(queue_key(namespace), job.dumps())


async def take(client: redis.Redis, namespace: str) -> Job:
    """The next question, when there is one (the oldest first)."""
    while True:
        found = await client.blpop([queue_key(namespace)], timeout=WAIT)
        if found is not None:
            return Job.loads(found[1])


@contextmanager
def discord_at(base_url: str | None, gateway_url: str | None = None) -> Iterator[None]:
    """discord.py's REST base (and gateway) pointed at a local Discord for the block; None:
    Discord itself."""
    base, gateway = discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    if base_url is not None:
        discord.http.Route.BASE = base_url
    if gateway_url is not None:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
    try:
        yield
    finally:
        discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = base, gateway


def until_terminated(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` until it returns, or until SIGTERM or Ctrl-C cancels it: it closes what it
    opened (a worker's streams end as cancelled ones do, B11), and the process exits quietly."""

    async def run() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
        await main

    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(run())
