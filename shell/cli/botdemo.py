"""`cordstream demo --bot`: the example bot, whole, on the local Discord, with simulated users.

The bot is the bot kit's `cordstream.shell.bot.ChatBot` (what `examples/bot.py` runs on a real
Discord) with the dice tool (`cordstream.shell.cli.dice`), here on a scripted model
(`ScriptedModel`: no network, no key). It connects through the emulator's
gateway (`cordstream.shell.testing.local_bot`), and users act as Discord would deliver it:

1. alice mentions the bot with a question; her answer streams live, as a reply;
2. carol presses the Stop button on alice's answer: she may not, so she is told, privately,
   and the answer goes on;
3. bob asks with `/ask`; the model rolls dice with the bot's tool, and his answer streams into
   the command's response ("thinking…" until then), at the same time as alice's;
4. alice writes again: that interrupts her own answer (bob's goes on), and the bot answers the
   new message; at once, bob presses Stop on his own answer: it stops.

Each step waits for what it acts on to be on screen (an answer streaming, a click answered), so
the story is the same on any machine; the whole run takes a few seconds. The channel is shown
as it changes, by the same views as `cordstream demo` (`console.Log`, a line per new message
and edit, or `demo.Terminal`, redrawn in place), with each user action as a note; then the
channel as a user sees it and each turn's outcome (`render`).

The model's answers that are to be interrupted or stopped end by waiting (`Hang`): they never
finish on their own, so the story cannot outrun a slow machine.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cordstream.domain import FunctionCall, FunctionCallChunk
from cordstream.shell.bot import ChatBot, Message, Question
from cordstream.shell.buttons import STOP_BUTTON_PREFIX
from cordstream.shell.cli.console import Failure, Log, View, channel, follow, why
from cordstream.shell.cli.dice import roll_dice
from cordstream.shell.providers.base import ToolOutcome
from cordstream.shell.testing.emulator import DiscordEmulator, SentMessage, local_bot
from cordstream.shell.testing.script import Do, Hang, ScriptProvider, Sleep, Step
from cordstream.shell.turn import TurnResult

__all__ = [
    "DICE",
    "GREEN_TEA",
    "SPEED",
    "TEA",
    "BotDemo",
    "ScriptedAnswer",
    "ScriptedModel",
    "render",
    "run_bot_demo",
]

TEA = "how do I brew a good cup of tea?"
DICE = "roll two dice for me"
GREEN_TEA = "actually, make it green tea"

_TEA_ANSWER = (
    "A good cup of black tea takes four things.\n\n"
    "1. **Fresh water**, brought to a full boil: black tea wants it at 95-100 °C.\n"
    "2. **Enough leaf**: one teaspoon (about 2.5 g) per cup, plus one for the pot if you like "
    "it strong.\n"
)
_TEA_GOES_ON = (
    "3. **Time**: three to five minutes. Less is thin; more is bitter, because the tannins "
    "come out last.\n"
    "4. **A warm pot**: rinse it with hot water first, so the brew does not cool at once.\n\n"
    "Then pour it all out, so the leaves do not go on steeping in the pot, and add milk "
)
_DICE_STORY = (
    "\nA fine throw. Dice have been rolled for at least five thousand years: the oldest known "
    "pair comes from Shahr-e Sukhteh, in Iran, and its faces are numbered much as ours are, "
    "with opposite faces adding up to seven. Roman soldiers played with them, medieval "
    "gamblers loaded them, and probability theory itself began with a question about them "
    "in a letter from Pascal to Fermat, in 1654, "
)
_GREEN_TEA_ANSWER = (
    "Green tea is gentler: use water at **70-80 °C** (let boiled water rest for a few "
    "minutes), one teaspoon per cup, and steep it for only **one to two minutes**, or it "
    "turns bitter. Good leaves can be steeped two or three times. 🍵"
)
_SILENCE = "I have nothing to say to that."
SPEED = 30.0
"""The scripted model's words per second, by default."""


@dataclass(eq=False)
class ScriptedAnswer(ScriptProvider):
    """One scripted answer (a `ScriptProvider`) that can go on after a tool round: `then` makes
    the next segment's steps from the tools' outcomes (`ToolProvider.after_tools`)."""

    then: Callable[[Sequence[ToolOutcome]], Sequence[Step]] | None = None

    def after_tools(self, outcomes: Sequence[ToolOutcome]) -> ScriptedAnswer:
        if self.then is None:
            raise ValueError("this scripted answer has no tool round")
        return ScriptedAnswer(list(self.then(outcomes)), name=self.name)


@dataclass(frozen=True)
class ScriptedModel:
    """The demo's model (a `cordstream.shell.bot.Model`): an answer per question (the last
    message of the conversation), written `speed` words a second. The
    answer to alice's first question goes on once `refused` is set (carol's click refused), so
    that the channel shows it go on."""

    speed: float = SPEED
    asked: list[str] = field(default_factory=list)
    refused: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, messages: Sequence[Message]) -> ScriptedAnswer:
        question = messages[-1]["content"] if messages else ""
        self.asked.append(question)
        if question == TEA:  # interrupted by alice's next message: it never ends by itself
            return ScriptedAnswer(
                [
                    *self.paced(_TEA_ANSWER),
                    Do(self.refused.wait),  # the rest once carol was refused: it goes on
                    *self.paced(_TEA_GOES_ON),
                    Hang(),
                ],
                name="demo",
            )
        if question == DICE:  # a tool round, then an answer bob stops
            roll = FunctionCall("roll_dice", {"sides": 6, "count": 2}, id="call_1")
            return ScriptedAnswer(
                [Sleep(1 / self.speed), FunctionCallChunk(roll)],
                name="demo",
                then=lambda outcomes: [*self.paced(_rolled(outcomes) + _DICE_STORY), Hang()],
            )
        if question == GREEN_TEA:
            return ScriptedAnswer(self.paced(_GREEN_TEA_ANSWER), name="demo")
        return ScriptedAnswer(self.paced(_SILENCE), name="demo")

    def paced(self, text: str) -> list[Step]:
        """`text` as a model writes it: a word (and the space after it) at a time."""
        steps: list[Step] = []
        for word in re.findall(r"\S+\s*|\s+", text):
            steps += [Sleep(1 / self.speed), word]
        return steps


def _rolled(outcomes: Sequence[ToolOutcome]) -> str:
    """What the model says of the roll (the tool's output is JSON: rolls and total)."""
    output = outcomes[0].output if outcomes else ""
    return f"The dice say: `{output}`."


@dataclass
class BotDemo:
    """What the run left: the channel's messages, each turn as it ended (the user's name, the
    question, the `TurnResult`), and what carol was told when her click was refused."""

    messages: list[SentMessage]
    turns: list[tuple[str, Question, TurnResult]]
    refusal: list[str]
    model: ScriptedModel


async def run_bot_demo(
    view: View | None = None, *, speed: float = SPEED, pause: float = 0.3
) -> BotDemo:
    """Run the story (the module docstring) and return what it left. `view` (default: a `Log`
    to stdout) is shown each change to the channel and each user action; it is closed on every
    exit path. `speed`: the model's words per second. `pause`: seconds to watch the answers
    stream before the next user acts. An
    emulator that cannot listen on 127.0.0.1 is a `console.Failure`."""
    view = Log(print) if view is None else view
    model = ScriptedModel(speed)
    names: dict[int, str] = {}
    turns: list[tuple[str, Question, TurnResult]] = []
    ended: asyncio.Queue[None] = asyncio.Queue()

    def on_turn(question: Question, turn: TurnResult) -> None:
        turns.append((names.get(question.user_id, "?"), question, turn))
        ended.put_nowait(None)

    bot = ChatBot(
        model,
        tools={"roll_dice": roll_dice},
        on_turn=on_turn,
        guild_ready_timeout=0.05,  # no wait for more guilds
    )
    api = DiscordEmulator()
    try:
        try:
            await api.start()
        except OSError as error:
            where = "the local Discord emulator on 127.0.0.1"
            raise Failure(f"cannot start {where}: {why(error)}") from error
        async with local_bot(bot, api):
            story = _Story(api, model, view, pause)
            stop_following = follow(api, api.channel_id, view)
            watcher = asyncio.create_task(story.watch())
            try:
                alice, bob, carol = (api.add_member(n) for n in ("alice", "bob", "carol"))
                names.update({alice.id: "alice", bob.id: "bob", carol.id: "carol"})
                refusal = await story.play(alice.id, bob.id, carol.id, ended)
            finally:
                stop_following()
                watcher.cancel()
                await asyncio.wait([watcher])
            messages = api.messages()
            view.show(messages, asyncio.get_running_loop().time())
            return BotDemo(messages, turns, refusal, model)
    finally:
        await api.close()
        view.close()


class _Story:
    """The users' side of the demo: what they do, each step once its subject is on screen."""

    def __init__(
        self, api: DiscordEmulator, model: ScriptedModel, view: View, pause: float
    ) -> None:
        self.api = api
        self.model = model
        self.view = view
        self.pause = pause
        self.start = asyncio.get_running_loop().time()
        view.begin(self.start)

    def note(self, line: str) -> None:
        seconds = asyncio.get_running_loop().time() - self.start
        self.view.note(f"[{seconds:7.3f}s] {line}")

    async def play(self, alice: int, bob: int, carol: int, ended: asyncio.Queue[None]) -> list[str]:
        api = self.api
        self.note(f"alice: @cordstream {TEA}")
        await api.user_says(alice, f"<@{api.user_id}> {TEA}")
        tea = await self.streaming(lambda m: m.message_reference is not None)
        await asyncio.sleep(self.pause)

        self.note("carol presses Stop on alice's answer")
        tea = await self.streaming(lambda m: m.id == tea.id)  # as it is now
        refused = await api.click(carol, tea.id, _stop_button(tea))
        await refused.wait_until(lambda record: bool(record.ephemeral))
        refusal = [message.content for message in refused.ephemeral]
        for line in refusal:
            self.note(f"carol is told, and only she sees it: {line}")
        self.model.refused.set()  # the model goes on, and so does the answer

        self.note(f"bob: /ask question: {DICE}")
        await api.slash(bob, "ask", {"question": DICE})
        dice = await self.streaming(lambda m: m.content.startswith("The dice say"))
        await self.streaming(lambda m: m.id == tea.id and m.edits > tea.edits)  # it went on
        await asyncio.sleep(self.pause)  # two answers streaming at once

        self.note(f"alice: {GREEN_TEA}")
        await api.user_says(alice, GREEN_TEA)
        self.note("bob presses Stop on his answer")
        await api.click(bob, dice.id, _stop_button(dice))
        for _ in range(3):  # alice's first answer, interrupted; bob's, stopped; alice's next one
            await asyncio.wait_for(ended.get(), _WAIT)
        return refusal

    async def streaming(self, which: Callable[[SentMessage], bool]) -> SentMessage:
        """Wait until a message that `which` picks is streaming (its Stop button on it)."""
        return await self.api.wait_for_message(
            lambda message: which(message) and bool(message.components), timeout=_WAIT
        )

    async def watch(self) -> None:
        """Show the channel to the view every `_POLL` seconds (a `Terminal` redraws it)."""
        loop = asyncio.get_running_loop()
        while True:
            self.view.show(self.api.messages(), loop.time())
            await asyncio.sleep(_POLL)


_WAIT = 30.0  # seconds: the longest a step waits for its subject (then the demo fails)
_POLL = 0.05


def _stop_button(message: SentMessage) -> str:
    """The custom id of the Stop button on `message`."""
    return next(found for found in message.custom_ids if found.startswith(STOP_BUTTON_PREFIX))


def render(demo: BotDemo) -> str:
    """The channel as a user sees it, then each turn: who asked what, and how it ended."""
    lines = ["", *channel(demo.messages), "", "══════ turns ══════"]
    for name, question, turn in demo.turns:
        tools = ", ".join(run.call.name for run in turn.tool_runs)
        used = f", tools: {tools}" if tools else ""
        lines.append(
            f"{name:<6} {question.content!r:<38} {turn.status:<20} "
            f"{turn.messages_sent} message{'s' * (turn.messages_sent != 1)}{used}"
        )
    return "\n".join(lines)
