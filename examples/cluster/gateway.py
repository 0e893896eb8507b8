"""The gateway process: questions in, stops and follow-ups out (see `examples.cluster`).

    DISCORD_TOKEN=... REDIS_URL=redis://127.0.0.1:6379 python -m examples.cluster.gateway

It streams nothing itself. A mention of the bot, or `/ask`, goes on the Redis list for a
worker; a new message from a user whose answer streams (in any process: the registry is
shared) interrupts that answer alone and goes on the list too; `/stop` and the Stop button
stop an answer wherever it streams, for whoever C10 allows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from typing import Any, Final

import discord
import redis.asyncio as redis
from discord import app_commands

from cordstream.shell.buttons import stop_clicks
from cordstream.shell.redis_stops import RedisStopRegistry
from cordstream.shell.stops import answer_of, interaction_may_stop
from examples.cluster.jobs import Job, discord_at, put, until_terminated

_MENTION: Final = re.compile(r"<@!?\d+>")


class Gateway(discord.Client):
    """The bot on Discord's gateway (see the module docstring)."""

    def __init__(self, stops: RedisStopRegistry, queue: redis.Redis, **options: Any) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(
            intents=intents, allowed_mentions=discord.AllowedMentions.none(), **options
        )
        self.stops = stops
        self.queue = queue
        self.tree: app_commands.CommandTree[Gateway] = app_commands.CommandTree(self)
        self._add_commands()

    async def setup_hook(self) -> None:
        self.add_dynamic_items(stop_clicks(self.stops))  # every worker's Stop buttons
        await self.tree.sync()

    async def ask(self, channel_id: int, user_id: int, question: str, reply_to: int) -> None:
        """Queue `question`; first interrupt the user's own answer, if one streams there."""
        if self.stops.is_answering(channel_id, user_id):
            await answer_of(self.stops.request_follow_up(channel_id, str(user_id)))
        await put(self.queue, self.stops.namespace, Job(channel_id, user_id, question, reply_to))

    async def on_message(self, message: discord.Message) -> None:
        me, author = self.user, message.author
        if author.bot or me is None:
            return
        asked = me in message.mentions
        if asked or self.stops.is_answering(message.channel.id, author.id):
            question = _MENTION.sub("", message.content).strip() or message.content
            await self.ask(message.channel.id, author.id, question, message.id)

    def _add_commands(self) -> None:
        @self.tree.command(name="ask", description="Ask the bot a question")
        @app_commands.describe(question="What you want to know")
        async def ask(interaction: discord.Interaction, question: str) -> None:
            if interaction.channel_id is None:
                return
            # A worker holds no interaction: the gateway answers it with the question, and the
            # worker's answer is a reply to that.
            await interaction.response.send_message(f"{interaction.user.mention} asked: {question}")
            shown = await interaction.original_response()
            await self.ask(interaction.channel_id, interaction.user.id, question, shown.id)

        @self.tree.command(name="stop", description="Stop your answer here (moderators: anyone's)")
        @app_commands.describe(user="Whose answer to stop (moderators only); yours by default")
        async def stop(interaction: discord.Interaction, user: discord.User | None = None) -> None:
            await interaction.response.send_message(
                await self.stop_reply(interaction, user), ephemeral=True
            )

    async def stop_reply(
        self, interaction: discord.Interaction, user: discord.abc.User | None
    ) -> str:
        """`/stop [user]`: stop that answer, wherever it streams, when the caller may (C10)."""
        caller = interaction.user
        whose = user if user is not None else caller
        own = whose.id == caller.id
        channel_id = interaction.channel_id
        if channel_id is None or not self.stops.is_answering(channel_id, whose.id):
            return "You have no answer here." if own else f"{whose.mention} has no answer here."
        if not interaction_may_stop(interaction, answering=whose.id):
            return f"Only {whose.mention} or a moderator can stop that answer."
        stopping = self.stops.request_stop(
            channel_id, str(caller.id), interaction, answering=whose.id
        )
        if not await answer_of(stopping):
            return "I could not reach that answer; please try again."
        return "Stopping your answer." if own else f"Stopping the answer to {whose.mention}."


async def run(
    token: str, url: str, namespace: str, *, api: str | None = None, gateway: str | None = None
) -> None:
    """Run the gateway until it is closed (or the process is stopped); `api` and `gateway`: a
    local Discord's REST and gateway URLs (the demo's)."""
    queue = redis.Redis.from_url(url)
    try:
        async with RedisStopRegistry(url, namespace=namespace) as stops:
            with discord_at(api, gateway):
                bot = Gateway(stops, queue)
                async with bot:
                    await bot.login(token)
                    connected = asyncio.create_task(bot.connect())
                    await bot.wait_until_ready()
                    print("ready", flush=True)  # the demo waits for it
                    await connected
    finally:
        await queue.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.cluster.gateway")
    parser.add_argument("--namespace", default="cordstream", help="the bot's Redis namespace")
    parser.add_argument("--api", help=argparse.SUPPRESS)  # a local Discord's (the demo's)
    parser.add_argument("--gateway", help=argparse.SUPPRESS)
    args = parser.parse_args()
    token, url = os.environ.get("DISCORD_TOKEN"), os.environ.get("REDIS_URL")
    if not token or not url:
        print("examples.cluster.gateway: set DISCORD_TOKEN and REDIS_URL", file=sys.stderr)
        return 2
    until_terminated(run(token, url, args.namespace, api=args.api, gateway=args.gateway))
    return 0


if __name__ == "__main__":
    sys.exit(main())
