"""A real Discord bot on cordstream: any OpenAI-compatible model, `/stop`, follow-ups, a tool.

Run it (see the README, "Run a real bot"):

    export DISCORD_TOKEN=...                           # the bot's token
    export OPENAI_BASE_URL=http://127.0.0.1:11434/v1   # Ollama; or OpenRouter, vLLM, OpenAI…
    export OPENAI_API_KEY=...                          # any string for a local server
    export CORDSTREAM_MODEL=llama3.2
    python examples/bot.py

What it does:
- Replies when mentioned, streaming the answer into the channel
  (`cordstream.shell.run_turn`), with a `roll_dice` tool the model may call.
- `/stop` stops the answer streaming in the channel (`request_stop`).
- A new message from the same user while their answer streams interrupts it
  (`request_follow_up`), and the turn restarts with the new message; the part of the answer
  already shown stays in the conversation.
- Remembers each answer as the user saw it: `TurnResult.text`, the messages of every segment
  joined by line breaks (SPEC F2), an interrupted answer's shown part included.
- Keeps the last `HISTORY` messages per channel as the model's memory, each answer as the
  channel shows it (`TurnResult.text`: its messages joined by line breaks).
- Says so when the model gives no answer (`empty_response` after the retries, or a tool
  limit): cordstream shows nothing for those.
- Answers one user per channel at a time: another user's mention while an answer streams is
  not answered (a bot that wants a queue adds one in `Conversations.on_message`).

The Discord glue is `CordBot`; the logic is `Conversations`, which takes plain arguments so
`tests/test_example_bot.py` drives it against the Discord emulator and a local model server.
"""

from __future__ import annotations

import logging
import os
import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import discord
import openai
from discord import app_commands

from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator, TurnResult, run_turn
from cordstream.shell.providers import OpenAIChatProvider
from cordstream.shell.turn import Tool

HISTORY = 20
# Turns that end with nothing more in the channel (no embed): the bot says so itself.
UNANSWERED = frozenset({"empty_response", "tool_round_limit", "tool_error_limit"})
NO_ANSWER = "Sorry, I have no answer to that."
SYSTEM = "You are a helpful assistant in a Discord server. Answer concisely."

Message = dict[str, Any]


async def roll_dice(arguments: Mapping[str, object]) -> object:
    """The bot's one tool: roll `count` dice with `sides` sides."""
    sides, count = arguments.get("sides", 6), arguments.get("count", 1)
    if not isinstance(sides, int) or not isinstance(count, int) or sides < 2 or count < 1:
        raise ValueError("sides must be an integer ≥ 2 and count an integer ≥ 1")
    rolls = [random.randint(1, sides) for _ in range(min(count, 100))]  # a game, not a secret
    return {"rolls": rolls, "total": sum(rolls)}


TOOLS: Mapping[str, Tool] = {"roll_dice": roll_dice}
TOOL_SPECS: list[Any] = [
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
    }
]

ProviderFactory = Callable[[list[Message]], OpenAIChatProvider]


def openai_provider(client: openai.AsyncOpenAI, model: str) -> ProviderFactory:
    """Build each turn's provider: the system prompt, the channel's history, the tool."""

    def build(messages: list[Message]) -> OpenAIChatProvider:
        return OpenAIChatProvider(
            client,
            model=model,
            messages=[{"role": "system", "content": SYSTEM}, *messages],
            tools=TOOL_SPECS,
        )

    return build


@dataclass
class _Active:
    user_id: int
    latest: Any  # the newest message of that user: what the turn answers next
    content: str


@dataclass
class Conversations:
    """Per channel: who is being answered, their newest message, and the history."""

    orchestrator: StreamOrchestrator
    provider: ProviderFactory
    config: StreamConfig = field(default_factory=StreamConfig)
    history: dict[int, list[Message]] = field(default_factory=dict)
    active: dict[int, _Active] = field(default_factory=dict)
    results: list[TurnResult] = field(default_factory=list)

    async def on_message(
        self,
        channel: discord.abc.Messageable,
        channel_id: int,
        message: discord.Message | discord.PartialMessage,
        author_id: int,
        content: str,
        *,
        mentioned: bool,
    ) -> None:
        """A user message arrived in `channel`."""
        running = self.active.get(channel_id)
        if running is not None:
            if running.user_id == author_id:  # the same user again: restart with this one
                running.latest, running.content = message, content
                self.orchestrator.request_follow_up(channel_id, str(author_id))
            return  # one answer per channel at a time: another user's mention is not answered
        if not mentioned:
            return
        running = self.active[channel_id] = _Active(author_id, message, content)
        try:
            await self._answer(channel, channel_id, running)
        finally:
            del self.active[channel_id]

    async def _answer(
        self, channel: discord.abc.Messageable, channel_id: int, running: _Active
    ) -> None:
        memory = self.history.setdefault(channel_id, [])
        while True:
            message, content = running.latest, running.content
            self.orchestrator.discard_requests(channel_id)  # a fresh turn starts clean
            memory.append({"role": "user", "content": content})
            context = StreamContext(channel, reply_to=message)
            turn = await run_turn(
                self.orchestrator,
                self.provider(memory[-HISTORY:]),
                context,
                tools=TOOLS,
                config=self.config,
                prompt_text=content,
            )
            self.results.append(turn)
            # What the user saw is what the model said, interrupted or not: the messages of
            # every segment, joined by line breaks (F2), so lines are not glued together.
            if turn.text:
                memory.append({"role": "assistant", "content": turn.text})
            if turn.status in UNANSWERED and running.latest is message:
                # cordstream shows nothing for these: without a word the user sees no answer.
                await channel.send(NO_ANSWER, reference=message, mention_author=False)
            del memory[:-HISTORY]
            if running.latest is message:
                return  # no newer message: the turn is over
            # A newer message arrived (a follow-up, or just as the answer ended): answer it.

    def stop(self, channel_id: int, user_id: int) -> bool:
        """`/stop`: stop the channel's streaming answer; False when nothing streams."""
        if channel_id not in self.active:
            return False
        return self.orchestrator.request_stop(channel_id, str(user_id), "/stop")


class CordBot(discord.Client):
    """The Discord side: mentions and messages in, `/stop` as a slash command."""

    def __init__(self, conversations: Conversations) -> None:
        intents = discord.Intents.default()
        intents.message_content = True  # privileged: enable it in the developer portal
        super().__init__(intents=intents, allowed_mentions=discord.AllowedMentions.none())
        self.conversations = conversations
        self.tree = app_commands.CommandTree(self)

        @self.tree.command(name="stop", description="Stop the answer streaming in this channel")
        async def stop(interaction: discord.Interaction) -> None:
            channel_id = interaction.channel_id or 0
            stopped = self.conversations.stop(channel_id, interaction.user.id)
            text = "Stopping." if stopped else "Nothing is streaming here."
            await interaction.response.send_message(text, ephemeral=True)

    async def setup_hook(self) -> None:
        await self.tree.sync()

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or self.user is None:
            return
        mentioned = self.user in message.mentions
        content = message.content.replace(self.user.mention, "").strip()
        await self.conversations.on_message(
            message.channel,
            message.channel.id,
            message,
            message.author.id,
            content or message.content,
            mentioned=mentioned,
        )


def main(environ: Mapping[str, str] = os.environ) -> int:
    missing = [name for name in ("DISCORD_TOKEN", "CORDSTREAM_MODEL") if not environ.get(name)]
    if missing:
        print(f"examples/bot.py: set {', '.join(missing)} (see the README)", file=sys.stderr)
        return 2
    try:
        config = StreamConfig.from_env(environ)
    except ValueError as bad:  # names the variable, its unit and the value given
        print(f"examples/bot.py: {bad}", file=sys.stderr)
        return 2
    client = openai.AsyncOpenAI(
        base_url=environ.get("OPENAI_BASE_URL") or None,
        api_key=environ.get("OPENAI_API_KEY") or "not-needed",
    )
    conversations = Conversations(
        StreamOrchestrator(),
        openai_provider(client, environ["CORDSTREAM_MODEL"]),
        config,
    )
    bot = CordBot(conversations)
    bot.run(environ["DISCORD_TOKEN"], log_level=logging.INFO)
    return 0


if __name__ == "__main__":
    sys.exit(main())
