"""The bot kit: a Discord chat bot on any model, answering live through cordstream.

    bot = ChatBot(model, tools={"roll_dice": roll_dice}, system="Answer concisely.")
    bot.run(token)

`ChatBot` is a `discord.Client` that answers a message mentioning it (a reply to it) and the
slash command `/ask question:<text>` (the command's response), each answer streamed live by
`run_turn` (the tool loop) with a Stop button on it. `/stop` stops the caller's own answer in
the channel; `/stop user:<member>` stops that member's, for a moderator (Manage Messages); the
Stop button obeys the same rule (C10); each reply of `/stop` is ephemeral.

The one idea: a turn per user and channel. Each question starts a turn that streams with
`StreamContext(answering=<the user>)`, so several users are answered at once in one channel and
a stop or a follow-up reaches only its own answer (C9). A new message from a user whose answer
runs there (mentioning the bot or not), or a new `/ask`, interrupts that answer alone
(`follow_up_interrupt`) and the turn restarts with the newest question; a question replaced
before any stream took it up is told so (`SUPERSEDED`). When the model gives nothing
(`empty_response` after the retries, or a tool limit) cordstream shows nothing, so the bot says
`NO_ANSWER` itself.

Memory is per channel: each question and its answer as the channel shows it (`TurnResult.text`,
F2; an interrupted answer as far as it got) are stored together when the turn ends, so two
users' exchanges never interleave; the model gets the last `history` of them before the
question, after the `system` prompt if one is given.

The model is a factory (`Model`): given the conversation, a `ToolProvider` for one turn, so the
same bot runs on any provider; tool declarations in the provider's own format go to the
provider, their code (`tools`) to the bot. `Conversations` is the logic in plain terms (a
`Question` in; turns, stops and memory out) and holds no discord.py event code; `ChatBot` is the
glue: the events and the commands, each a few lines that make a `Question` or a stop.

Commands sync by themselves: `setup_hook` (after login, before the gateway connects) overwrites
the bot's global commands with its tree, so commands added to `bot.tree` before `start`/`run`
are included. Global commands show in every guild and DM of the bot, and an unchanged overwrite
costs nothing against Discord's daily limit; pass `sync_commands=False` to sync yourself.

Each `ChatBot` holds all its state (its own `StopRegistry` unless given an `orchestrator`), so a
process or a test module may build any number of them; `on_turn` sees each turn as it ends.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final, TypeAlias

import discord
from discord import app_commands

from cordstream.domain.redact import NO_SECRETS
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext
from cordstream.shell.orchestrator import StreamOrchestrator
from cordstream.shell.providers.base import ToolProvider
from cordstream.shell.stops import StopRegistry, answer_of, interaction_may_stop, registered
from cordstream.shell.telemetry import error_text
from cordstream.shell.turn import Tool, TurnResult, run_turn

__all__ = [
    "HISTORY",
    "NO_ANSWER",
    "SUPERSEDED",
    "ChatBot",
    "Conversations",
    "Message",
    "Model",
    "OnTurn",
    "Question",
]

log = logging.getLogger("cordstream.bot")

HISTORY: Final = 20
"""How many earlier messages of a channel the model gets with a question, by default."""
NO_ANSWER: Final = "Sorry, I have no answer to that."
SUPERSEDED: Final = "You asked again before I started on this: I'm answering that instead."
# Turns that end with nothing more in the channel (no embed): the bot says so itself.
_UNANSWERED: Final = frozenset({"empty_response", "tool_round_limit", "tool_error_limit"})

Message: TypeAlias = dict[str, str]
"""One message of the conversation, as chat APIs take it: `{"role": ..., "content": ...}`."""
Model: TypeAlias = Callable[[Sequence[Message]], ToolProvider[Any]]
"""The model: a provider for one turn, given the conversation (the system prompt if the bot has
one, then the channel's memory, oldest first, then the question)."""
Target: TypeAlias = discord.abc.Messageable | discord.Interaction[Any]


@dataclass(frozen=True, eq=False)
class Question:
    """A user's question: in which channel, from whom, what it says, and where to answer it
    (`target`: the channel, replying to `reply_to`; or the slash command's interaction)."""

    channel_id: int
    user_id: int
    content: str
    target: Target
    reply_to: discord.Message | None = None


OnTurn: TypeAlias = Callable[[Question, TurnResult], Awaitable[None] | None]
"""Called with each question and its `TurnResult` when its answer ends (a log, a bill, a
test); a coroutine function is awaited before the bot says `NO_ANSWER` or takes up a newer
question of that user."""


@dataclass(eq=False)
class _Turn:
    """One user's turn in one channel: the question being answered, and the newest one."""

    latest: Question
    answering: Question | None = None


def _own_orchestrator() -> StreamOrchestrator:
    return StreamOrchestrator(StopRegistry())


@dataclass(eq=False)
class Conversations:
    """The bot's logic: turns per user and channel, stops, memory (see the module docstring).

    `model` makes each turn's provider; `tools` are the functions it may call, by name
    (`run_turn`); `system` is the first message of every conversation, if given; `history`
    is how many earlier messages of the channel come with a question (0: none); `memory` holds
    them, per channel id. `orchestrator` streams the answers (by default one with a stop
    registry of its own); `on_turn` sees each turn as it ends."""

    model: Model
    _: KW_ONLY
    tools: Mapping[str, Tool] = field(default_factory=dict)
    system: str | None = None
    history: int = HISTORY
    config: StreamConfig = field(default_factory=StreamConfig)
    orchestrator: StreamOrchestrator = field(default_factory=_own_orchestrator)
    on_turn: OnTurn | None = None
    memory: dict[int, list[Message]] = field(default_factory=dict)
    _turns: dict[tuple[int, int], _Turn] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not callable(self.model):
            raise TypeError(
                "model must be a function from the conversation to a provider, "
                f"got {type(self.model).__name__}"
            )
        history: object = self.history  # checked: an untyped caller may pass anything
        if not isinstance(history, int) or isinstance(history, bool):
            raise TypeError(f"history must be an int, got {type(history).__name__}")
        if history < 0:
            raise ValueError(f"history must be 0 or more, got {self.history}")

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
        await answer_of(  # a shared registry's is a coroutine (N1)
            self.orchestrator.request_follow_up(question.channel_id, str(question.user_id))
        )
        if waiting is not turn.answering:  # an earlier new question no stream took up yet
            await _superseded(waiting)
        return True

    def stop(self, channel_id: int, user_id: int, *, by: int) -> bool:
        """Stop the answer to `user_id` in the channel, for user `by` (the caller has checked
        that `by` may: C10). False when no answer to that user runs there: no turn of this
        bot's, and no stream its orchestrator's registry knows (on a `RedisStopRegistry`, a
        stream of any process, N1)."""
        answered = (channel_id, user_id) in self._turns
        if not answered and not self.orchestrator.is_answering(channel_id, user_id):
            return False
        return registered(
            self.orchestrator.request_stop(channel_id, str(by), "/stop", answering=user_id)
        )

    def conversation(self, question: Question) -> list[Message]:
        """What the model is given for `question`: the system prompt, the channel's last
        `history` messages, the question."""
        memory = self.memory.get(question.channel_id, [])
        system: list[Message] = [] if self.system is None else [_message("system", self.system)]
        earlier = memory[max(0, len(memory) - self.history) :]
        return [*system, *earlier, _message("user", question.content)]

    def context(self, question: Question) -> StreamContext:
        """Where and for whom `question`'s answer streams: a Stop button on it (K2)."""
        return StreamContext(
            question.target,
            reply_to=question.reply_to,
            answering=question.user_id,
            stop_button=True,
        )

    async def _run(self, turn: _Turn) -> None:
        while True:
            question = turn.answering = turn.latest
            channel_id, user_id = question.channel_id, question.user_id
            # A fresh answer starts clean: a request of this user's that came after their last
            # stream had ended must not end this one (B4). Other users' requests stay.
            await answer_of(self.orchestrator.discard_requests(channel_id, answering=user_id))
            result = await run_turn(
                self.orchestrator,
                self.model(self.conversation(question)),
                self.context(question),
                tools=self.tools,
                config=self.config,
                prompt_text=question.content,
            )
            self._remember(question, result.text)
            log.info("answered %s in %s: %s, %s", user_id, channel_id, result.status, result.usage)
            if self.on_turn is not None:
                called = self.on_turn(question, result)
                if inspect.isawaitable(called):
                    await called
            if turn.latest is question:  # no newer message: the turn is over
                if result.status in _UNANSWERED:
                    await _say(question, NO_ANSWER)
                return
            # A newer message arrived (it interrupted this answer, or came as it ended).

    def _remember(self, question: Question, answer: str) -> None:
        # What the user saw is what the model said, interrupted or not: the messages of every
        # segment, as the channel shows them, joined by line breaks (F2).
        memory = self.memory.setdefault(question.channel_id, [])
        memory.append(_message("user", question.content))
        if answer:
            memory.append(_message("assistant", answer))
        del memory[: max(0, len(memory) - self.history)]


def _message(role: str, content: str) -> Message:
    return {"role": role, "content": content}


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
        problem = error_text(error, NO_SECRETS)  # G4, as every log line
        log.warning("could not say %r in %s: %s", text, question.channel_id, problem)


class ChatBot(discord.Client):
    """A chat bot on `model` (see the module docstring): mentions and `/ask` answered live,
    `/stop` and the Stop button, per-channel memory, commands synced at start.

    `tools`, `system`, `history`, `config`, `orchestrator` and `on_turn` go to its
    `Conversations` (`bot.conversations`). `options` go to `discord.Client`; by default the
    intents are the default ones plus message content (privileged: enable it in the developer
    portal) and the bot's own lines mention no one. `bot.tree` holds the commands; add your own
    before `start`/`run` and they are synced with `/ask` and `/stop`. A subclass may override
    `wants` (which messages are questions) and `question`; one that overrides `setup_hook` or
    `on_message` calls the kit's (`super()`)."""

    def __init__(
        self,
        model: Model,
        *,
        tools: Mapping[str, Tool] | None = None,
        system: str | None = None,
        history: int = HISTORY,
        config: StreamConfig | None = None,
        orchestrator: StreamOrchestrator | None = None,
        on_turn: OnTurn | None = None,
        sync_commands: bool = True,
        **options: Any,
    ) -> None:
        self.conversations = Conversations(
            model,
            tools=dict(tools) if tools is not None else {},
            system=system,
            history=history,
            config=config if config is not None else StreamConfig(),
            orchestrator=orchestrator if orchestrator is not None else _own_orchestrator(),
            on_turn=on_turn,
        )
        if "intents" not in options:
            options["intents"] = discord.Intents.default()
            options["intents"].message_content = True
        options.setdefault("allowed_mentions", discord.AllowedMentions.none())
        super().__init__(**options)
        self.sync_commands = sync_commands
        self.tree: app_commands.CommandTree[ChatBot] = app_commands.CommandTree(self)
        self._add_commands()

    @property
    def orchestrator(self) -> StreamOrchestrator:
        """What streams the answers; its `request_stop` and `stops` reach them (custom stops)."""
        return self.conversations.orchestrator

    def wants(self, message: discord.Message) -> bool:
        """Whether `message` asks the bot a question: it mentions the bot. (A message that
        does not may still interrupt its author's own answer.) Override to answer others."""
        return self.user is not None and self.user in message.mentions

    def question(self, message: discord.Message) -> Question:
        """`message` as a question: its text without the bot's mention, answered as a reply."""
        me = self.user
        content = _MENTION.sub(
            lambda found: "" if me is not None and int(found.group(1)) == me.id else found[0],
            message.content,
        ).strip()
        return Question(
            message.channel.id,
            message.author.id,
            content or message.content,
            message.channel,
            message,
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
        if self.sync_commands:
            await self.tree.sync()

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or self.user is None:
            return  # its own messages come back too
        if self.wants(message):
            await self.conversations.ask(self.question(message))
        else:  # not for the bot, unless it interrupts the author's own answer
            await self.conversations.interrupt(self.question(message))

    def _add_commands(self) -> None:
        @self.tree.command(name="ask", description="Ask the bot a question")
        @app_commands.describe(question="What you want to know")
        async def ask(interaction: discord.Interaction, question: str) -> None:
            if interaction.channel_id is not None:
                asked = Question(interaction.channel_id, interaction.user.id, question, interaction)
                await self.conversations.ask(asked)

        @self.tree.command(name="stop", description="Stop your answer here (moderators: anyone's)")
        @app_commands.describe(user="Whose answer to stop (moderators only); yours by default")
        async def stop(interaction: discord.Interaction, user: discord.User | None = None) -> None:
            reply = self.stop_reply(interaction, user)
            await interaction.response.send_message(reply, ephemeral=True)


_MENTION: Final = re.compile(r"<@!?(\d+)>")
