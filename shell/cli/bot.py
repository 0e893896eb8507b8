"""The example bot: a model answering in Discord, live, through cordstream (`examples/bot.py`).

`examples/bot.py` runs it on a real Discord with any OpenAI-compatible model (its token and
model come from the environment); `cordstream demo --bot` runs it on the local Discord with a
scripted model. It lives in the package, not in `examples/`, so that the demo works from a
`pip install` too; `examples/bot.py` adds the model and the environment.

What it does:

- **Asks.** It answers a message that mentions it (a reply to that message) and the slash
  command `/ask question:<text>` (the command's response), both live: one message edited as
  the answer grows, a new one when it is full. The model may call the `roll_dice` tool
  (`cordstream.shell.run_turn` runs the tool loop).
- **Several users at once.** Each user's question in a channel is its own turn and its own
  stream, `StreamContext(answering=<the user>)`, so Alice and Bob are answered at the same
  time, and a stop or a new message reaches only its own answer (C9).
- **Stop.** Each answer carries a Stop button (`stop_button=True`, K2) while it streams: the
  user it answers and the channel's moderators (Manage Messages) may press it; anyone else is
  told so, privately (C10). `/stop` stops the caller's own answer in the channel;
  `/stop user:<member>` stops that member's, for a moderator (anyone else is refused,
  privately). Each reply of `/stop` is ephemeral.
- **Interrupting.** A new message from a user whose answer is streaming in that channel
  (mentioning the bot or not), or a new `/ask`, interrupts that answer alone
  (`follow_up_interrupt`), and the turn restarts with the new message; what the channel
  already shows of the interrupted answer stays in the memory.
- **Memory.** The last `HISTORY` messages per channel are the model's memory. Each question
  and its answer, as the channel shows it (`TurnResult.text`: each message as Discord holds
  it, the messages joined by line breaks, F2), are added together when the answer ends, so
  two users' exchanges never interleave.
- **No answer.** When the model gives none (`empty_response` after the retries, or a tool
  limit) cordstream shows nothing, so the bot says so itself (`NO_ANSWER`).

Structure: `Conversations` is the logic, in plain terms (a `Question` in: who asks, where, what;
turns, stops and memory out), and holds no discord.py event code; `CordBot` is the Discord
glue: the events and the commands, each a few lines that make a `Question` or a stop. The
model is a function from the conversation to a provider (`Model`), so the same bot runs on
any provider. Tests and the demo run `CordBot` whole through the emulator's gateway
(`cordstream.shell.testing.local_bot`): no handler is called by hand.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import discord
from discord import app_commands

from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext
from cordstream.shell.orchestrator import StreamOrchestrator
from cordstream.shell.providers.base import ToolProvider
from cordstream.shell.stops import interaction_may_stop
from cordstream.shell.turn import Tool, TurnResult, run_turn

__all__ = [
    "HISTORY",
    "NO_ANSWER",
    "SUPERSEDED",
    "SYSTEM",
    "TOOLS",
    "TOOL_SPECS",
    "Conversations",
    "CordBot",
    "Message",
    "Model",
    "Question",
    "roll_dice",
]

log = logging.getLogger("cordstream.bot")

HISTORY: Final = 20
"""How many messages of a channel the model remembers."""
NO_ANSWER: Final = "Sorry, I have no answer to that."
SUPERSEDED: Final = "You asked again before I started on this: I'm answering that instead."
SYSTEM: Final = "You are a helpful assistant in a Discord server. Answer concisely."
# Turns that end with nothing more in the channel (no embed): the bot says so itself.
_UNANSWERED: Final = frozenset({"empty_response", "tool_round_limit", "tool_error_limit"})

Message: TypeAlias = dict[str, str]
"""One message of the conversation, as chat APIs take it: `{"role": ..., "content": ...}`."""
Model: TypeAlias = Callable[[Sequence[Message]], ToolProvider[Any]]
"""The model: a provider for one turn, given the conversation (oldest first, the question last;
the system prompt is the model's own business)."""
Target: TypeAlias = discord.abc.Messageable | discord.Interaction[Any]


async def roll_dice(arguments: Mapping[str, object]) -> object:
    """The bot's one tool: roll `count` dice with `sides` sides."""
    sides, count = arguments.get("sides", 6), arguments.get("count", 1)
    if not isinstance(sides, int) or not isinstance(count, int) or sides < 2 or count < 1:
        raise ValueError("sides must be an integer ≥ 2 and count an integer ≥ 1")
    rolls = [random.randint(1, sides) for _ in range(min(count, 100))]  # a game, not a secret
    return {"rolls": rolls, "total": sum(rolls)}


TOOLS: Mapping[str, Tool] = {"roll_dice": roll_dice}
TOOL_SPECS: Final[Sequence[Mapping[str, object]]] = (
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
"""`roll_dice` declared the way OpenAI-compatible chat APIs take tools."""


@dataclass(frozen=True, eq=False)
class Question:
    """A user's question: in which channel, from whom, what it says, and where to answer it
    (`target`: the channel, replying to `reply_to`; or the slash command's interaction)."""

    channel_id: int
    user_id: int
    content: str
    target: Target
    reply_to: discord.Message | None = None


@dataclass(eq=False)
class _Turn:
    """One user's turn in one channel: the question being answered, and the newest one."""

    latest: Question
    answering: Question | None = None


@dataclass(eq=False)
class Conversations:
    """The bot's logic: turns per user and channel, stops, memory (see the module docstring).

    `on_turn` (optional) is called with each question and its `TurnResult` when its answer
    ends (a log, a bill, a test)."""

    orchestrator: StreamOrchestrator
    model: Model
    config: StreamConfig = field(default_factory=StreamConfig)
    on_turn: Callable[[Question, TurnResult], None] | None = None
    memory: dict[int, list[Message]] = field(default_factory=dict)
    _turns: dict[tuple[int, int], _Turn] = field(default_factory=dict)

    def answering(self, channel_id: int, user_id: int) -> bool:
        """Whether a turn for `user_id` runs in the channel (streaming, or running a tool)."""
        return (channel_id, user_id) in self._turns

    async def ask(self, question: Question) -> None:
        """Answer `question`; returns when its turn is over. When the user's answer in that
        channel is already running, the question interrupts it instead (`interrupt`) and
        returns at once: that turn restarts with it."""
        if await self.interrupt(question):
            return
        key = (question.channel_id, question.user_id)
        turn = self._turns[key] = _Turn(question)
        try:
            await self._run(turn)
        finally:
            del self._turns[key]

    async def interrupt(self, question: Question) -> bool:
        """A new message from a user whose answer runs in the channel: end that answer alone
        (C9) and restart the turn with `question`. False when no answer of theirs runs there
        (nothing is registered)."""
        key = (question.channel_id, question.user_id)
        if key not in self._turns:
            return False
        # First acknowledged, if it is a slash command: it may wait, and cordstream must find
        # it deferred when the restarted turn streams into it (K1).
        await _acknowledge(question)
        turn = self._turns.get(key)
        if turn is None:  # the answer ended meanwhile: the question starts a turn of its own
            return False
        waiting, turn.latest = turn.latest, question
        # Registered whether a stream answers them right now or the turn is between two model
        # requests (a tool runs): the turn's next request resolves it before it is sent (B4).
        self.orchestrator.request_follow_up(question.channel_id, str(question.user_id))
        if waiting is not turn.answering:  # an earlier new question no stream took up yet
            await _superseded(waiting)
        return True

    def stop(self, channel_id: int, user_id: int, *, by: int) -> bool:
        """Stop the answer to `user_id` in the channel, for user `by` (the caller has checked
        that `by` may: C10). False when no answer to that user runs there."""
        if (channel_id, user_id) not in self._turns:
            return False
        return self.orchestrator.request_stop(channel_id, str(by), "/stop", answering=user_id)

    async def _run(self, turn: _Turn) -> None:
        while True:
            question = turn.answering = turn.latest
            channel_id, user_id = question.channel_id, question.user_id
            # A fresh answer starts clean: a request of this user's that came after their last
            # stream had ended must not end this one (B4). Other users' requests stay.
            self.orchestrator.discard_requests(channel_id, answering=user_id)
            asked: Message = {"role": "user", "content": question.content}
            history = self.memory.get(channel_id, [])[-(HISTORY - 1) :]
            result = await run_turn(
                self.orchestrator,
                self.model([*history, asked]),
                self.context(question),
                tools=TOOLS,
                config=self.config,
                prompt_text=question.content,
            )
            self._remember(channel_id, asked, result.text)
            log.info("answered %s in %s: %s, %s", user_id, channel_id, result.status, result.usage)
            if self.on_turn is not None:
                self.on_turn(question, result)
            if turn.latest is question:  # no newer message: the turn is over
                if result.status in _UNANSWERED:
                    await _say(question, NO_ANSWER)
                return
            # A newer message arrived (it interrupted this answer, or came as it ended).

    def context(self, question: Question) -> StreamContext:
        """Where and for whom `question`'s answer streams: a Stop button on it (K2)."""
        return StreamContext(
            question.target,
            reply_to=question.reply_to,
            answering=question.user_id,
            stop_button=True,
        )

    def _remember(self, channel_id: int, asked: Message, answer: str) -> None:
        # What the user saw is what the model said, interrupted or not: the messages of every
        # segment, as the channel shows them, joined by line breaks (F2).
        memory = self.memory.setdefault(channel_id, [])
        memory.append(asked)
        if answer:
            memory.append({"role": "assistant", "content": answer})
        del memory[:-HISTORY]


async def _acknowledge(question: Question) -> None:
    """A slash command that waits for the user's running answer to end is deferred now:
    Discord wants an answer to it within 3 s, and a tool the running answer calls may take
    longer. cordstream fills the deferral when the answer starts (K1)."""
    interaction = question.target
    if isinstance(interaction, discord.Interaction) and not interaction.response.is_done():
        with suppress(discord.HTTPException):  # if it fails, cordstream uses the channel (K1)
            await interaction.response.defer(thinking=True)


async def _superseded(question: Question) -> None:
    """`question` was replaced by a newer one before its answer started: a slash command's
    deferral says so (it would think forever)."""
    interaction = question.target
    if isinstance(interaction, discord.Interaction) and interaction.response.is_done():
        with suppress(discord.HTTPException):
            await interaction.edit_original_response(content=SUPERSEDED)


async def _say(question: Question, text: str) -> None:
    """A line of the bot's own, where `question` is answered."""
    target = question.target
    try:
        if isinstance(target, discord.Interaction):
            await target.followup.send(text)
        elif question.reply_to is None:
            await target.send(text)
        else:
            await target.send(text, reference=question.reply_to, mention_author=False)
    except discord.HTTPException as error:
        log.warning("could not say %r in %s: %s", text, question.channel_id, error)


class CordBot(discord.Client):
    """The Discord glue: messages in, `/ask` and `/stop` as slash commands (synced globally at
    start, `setup_hook`). `options` go to `discord.Client` (e.g. `guild_ready_timeout`)."""

    def __init__(self, conversations: Conversations, **options: Any) -> None:
        intents = discord.Intents.default()
        intents.message_content = True  # privileged: enable it in the developer portal
        super().__init__(
            intents=intents, allowed_mentions=discord.AllowedMentions.none(), **options
        )
        self.conversations = conversations
        self.tree = app_commands.CommandTree(self)

        @self.tree.command(name="ask", description="Ask the bot a question")
        @app_commands.describe(question="What you want to know")
        async def ask(interaction: discord.Interaction, question: str) -> None:
            if interaction.channel_id is not None:
                await conversations.ask(
                    Question(interaction.channel_id, interaction.user.id, question, interaction)
                )

        @self.tree.command(name="stop", description="Stop your answer here (moderators: anyone's)")
        @app_commands.describe(user="Whose answer to stop (moderators only); yours by default")
        async def stop(interaction: discord.Interaction, user: discord.User | None = None) -> None:
            await interaction.response.send_message(
                self.stop_reply(interaction, user), ephemeral=True
            )

    def stop_reply(self, interaction: discord.Interaction, user: discord.abc.User | None) -> str:
        """`/stop [user]`: stop that answer when the caller may (C10); what to tell them."""
        caller = interaction.user
        whose = user if user is not None else caller
        own = whose.id == caller.id
        channel_id = interaction.channel_id
        if channel_id is None:
            return "There is nothing to stop here."
        if not interaction_may_stop(interaction, answering=whose.id):
            return f"Only {whose.mention} or a moderator can stop that answer."
        if not self.conversations.stop(channel_id, whose.id, by=caller.id):
            return "You have no answer here." if own else f"{whose.mention} has no answer here."
        return "Stopping your answer." if own else f"Stopping the answer to {whose.mention}."

    async def setup_hook(self) -> None:
        await self.tree.sync()

    async def on_message(self, message: discord.Message) -> None:
        me = self.user
        if message.author.bot or me is None:
            return  # its own messages come back too
        content = _MENTION.sub(
            lambda found: "" if int(found.group(1)) == me.id else found.group(0), message.content
        ).strip()
        question = Question(
            message.channel.id,
            message.author.id,
            content or message.content,
            message.channel,
            message,
        )
        if me in message.mentions:
            await self.conversations.ask(question)
        else:  # not for the bot, unless it interrupts the author's own answer
            await self.conversations.interrupt(question)


_MENTION: Final = re.compile(r"<@!?(\d+)>")
