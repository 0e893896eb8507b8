"""A generation worker: questions off the Redis list, answers streamed into Discord (see
`examples.cluster`).

    DISCORD_TOKEN=... REDIS_URL=redis://127.0.0.1:6379 OPENAI_BASE_URL=... CORDSTREAM_MODEL=... \\
        python -m examples.cluster.worker

It has no gateway connection, only discord.py's REST client: it never sees a click or a
message. Stops reach its streams through the shared `RedisStopRegistry`, and its requests to
Discord take their turns in the budgets every worker of the bot shares (`RedisBudgets`, keyed
by the bot's id). It answers up to `--streams` questions at once and prints a line of JSON as
each answer ends (the demo reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import discord
import openai
import redis.asyncio as redis

from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator, StreamProvider
from cordstream.shell.providers import OpenAIChatProvider
from cordstream.shell.redis_budgets import RedisBudgets
from cordstream.shell.redis_stops import RedisStopRegistry
from cordstream.shell.stops import answer_of
from examples.bot import SYSTEM
from examples.cluster.jobs import Job, discord_at, take, until_terminated

Model = Callable[[str], StreamProvider[Any]]
"""A provider for one question."""


async def answer(
    client: discord.Client,
    orchestrator: StreamOrchestrator,
    model: Model,
    job: Job,
    config: StreamConfig,
) -> dict[str, object]:
    """Stream the answer to `job`, live, with a Stop button, as a reply; what became of it."""
    channel = client.get_partial_messageable(job.channel_id)
    context = StreamContext(
        channel,
        reply_to=channel.get_partial_message(job.reply_to),
        answering=job.user_id,
        stop_button=True,
    )
    # A fresh answer starts clean (B4): a request for this user that no running stream is to
    # take (one that came as their last answer ended) must not end this one. A follow-up that
    # their running answer is still to take stays: it is that answer's.
    await answer_of(orchestrator.discard_requests(job.channel_id, answering=job.user_id))
    result = await orchestrator.stream_to_discord(model(job.question), config, context)
    return {
        "pid": os.getpid(),
        "user": job.user_id,
        "question": job.question,
        "status": result.status,
        "text": result.accumulated_text,
    }


async def run(
    token: str,
    url: str,
    namespace: str,
    model: Model,
    *,
    streams: int = 4,
    config: StreamConfig | None = None,
    api: str | None = None,
) -> None:
    """Answer questions until the process is stopped; `api`: a local Discord's REST URL."""
    config = config if config is not None else StreamConfig()
    queue = redis.Redis.from_url(url)
    try:
        with discord_at(api):
            async with discord.Client(intents=discord.Intents.none()) as client:
                await client.login(token)
                assert client.user is not None  # logged in
                async with (
                    RedisStopRegistry(url, namespace=namespace) as stops,
                    RedisBudgets(url, bot_id=client.user.id, namespace=namespace),
                ):
                    orchestrator = StreamOrchestrator(stops)
                    print("ready", flush=True)  # the demo waits for it
                    await _serve(
                        queue, namespace, streams, answering(client, orchestrator, model, config)
                    )
    finally:
        await queue.aclose()


async def _serve(
    queue: redis.Redis, namespace: str, streams: int, one: Callable[[Job], Awaitable[None]]
) -> None:
    """Take questions and answer up to `streams` of them at once, until cancelled; then the
    answers still streaming are cancelled too, and end (each cleans up, B11) before the
    client and the registries close."""
    free = asyncio.Semaphore(streams)
    running: set[asyncio.Task[None]] = set()

    async def answered(job: Job) -> None:
        try:
            await one(job)
        finally:
            free.release()

    try:
        while True:
            await free.acquire()
            task = asyncio.create_task(answered(await take(queue, namespace)))
            running.add(task)
            task.add_done_callback(running.discard)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def answering(
    client: discord.Client, orchestrator: StreamOrchestrator, model: Model, config: StreamConfig
) -> Callable[[Job], Awaitable[None]]:
    """What the worker does with a question: answer it, then print a line of JSON."""

    async def one(job: Job) -> None:
        said = await answer(client, orchestrator, model, job, config)
        print(json.dumps(said), flush=True)

    return one


def openai_model(environ: Mapping[str, str]) -> Model:
    """The model the environment names (as `examples/bot.py` reads it)."""
    client = openai.AsyncOpenAI(
        base_url=environ.get("OPENAI_BASE_URL") or None,
        api_key=environ.get("OPENAI_API_KEY") or "not-needed",
    )
    name = environ["CORDSTREAM_MODEL"]

    def model(question: str) -> StreamProvider[Any]:
        messages: Sequence[dict[str, str]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
        ]
        return OpenAIChatProvider(client, model=name, messages=messages)

    return model


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.cluster.worker")
    parser.add_argument("--namespace", default="cordstream", help="the bot's Redis namespace")
    parser.add_argument("--streams", type=int, default=4, help="answers at once (4)")
    parser.add_argument("--api", help=argparse.SUPPRESS)  # a local Discord's (the demo's)
    parser.add_argument("--scripted", type=float, help=argparse.SUPPRESS)  # the demo's model
    args = parser.parse_args()
    environ = os.environ
    missing = [name for name in ("DISCORD_TOKEN", "REDIS_URL") if not environ.get(name)]
    if args.scripted is None and not environ.get("CORDSTREAM_MODEL"):
        missing.append("CORDSTREAM_MODEL")
    if missing:
        print(f"examples.cluster.worker: set {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.scripted is not None:
        from examples.cluster.story import ScriptedModel  # noqa: PLC0415

        model: Model = ScriptedModel(args.scripted)
    else:
        model = openai_model(environ)
    token, url = environ["DISCORD_TOKEN"], environ["REDIS_URL"]
    until_terminated(run(token, url, args.namespace, model, streams=args.streams, api=args.api))
    return 0


if __name__ == "__main__":
    sys.exit(main())
