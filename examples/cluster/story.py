"""The cluster demo's story, on this machine: `python -m examples.cluster`.

A `redis-server`, the local Discord (in this process), the gateway and two workers (OS
processes of their own, `examples.cluster.gateway` and `.worker` on a scripted model), then:

1. alice mentions the bot with a question: a worker streams her answer, with a Stop button;
   carol presses it, then tries `/stop user:alice`: the gateway refuses both (C10),
   privately;
2. bob asks with `/ask`: the gateway shows his question, a worker streams the answer to it;
3. alice writes again: the gateway interrupts her answer alone (in whichever worker streams
   it) and queues her new question; bob's answer goes on;
4. bob presses Stop on his answer: the click reaches the gateway, which stops it in its
   worker;
5. alice's new answer completes.

Each step waits for what it acts on to be on screen, or for a worker to say how an answer
ended, so the story is the same on any machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from cordstream.shell.buttons import STOP_BUTTON_PREFIX
from cordstream.shell.cli.console import View, channel, follow
from cordstream.shell.testing import DiscordEmulator, Hang, RateLimits, ScriptProvider, Sleep
from cordstream.shell.testing.emulator import SentMessage
from cordstream.shell.testing.redis import free_port, redis_server
from cordstream.shell.testing.script import Step

TEA = "how do I brew a good cup of tea?"
DICE = "tell me about dice"
GREEN_TEA = "actually, make it green tea"

_ANSWERS = {
    TEA: (
        "A good cup of black tea takes four things. First, **fresh water**, brought to a full "
        "boil. Then **enough leaf**: one teaspoon per cup, and one for the pot. Then "
    ),
    DICE: (
        "Dice have been rolled for at least five thousand years: the oldest known pair comes "
        "from Shahr-e Sukhteh, in Iran, with opposite faces adding up to seven, as ours do. "
    ),
    GREEN_TEA: (
        "Green tea is gentler: water at **70-80 °C**, one teaspoon per cup, and only **one to "
        "two minutes** of steeping, or it turns bitter. 🍵"
    ),
}
_ENDS = {GREEN_TEA}  # the others wait, streaming, until they are interrupted or stopped
SPEED = 30.0
"""The scripted model's words per second."""
_WAIT = 60.0  # seconds: the longest a step waits for its subject (then the demo fails)


@dataclass(frozen=True)
class ScriptedModel:
    """The workers' model in the demo: an answer per question, `speed` words a second."""

    speed: float = SPEED

    def __call__(self, question: str) -> ScriptProvider:
        text = _ANSWERS.get(question, "I have nothing to say to that.")
        goes_on = question in _ANSWERS and question not in _ENDS
        steps: list[Step] = []
        for word in re.findall(r"\S+\s*|\s+", text):
            steps += [Sleep(1 / self.speed), word]
        if goes_on:
            steps.append(Hang())
        return ScriptProvider(steps, name="scripted")


@dataclass
class Ended:
    """What a worker said of an answer as it ended."""

    worker: int  # its process id
    user: int
    question: str
    status: str
    text: str


@dataclass
class ClusterDemo:
    """What the run left: the channel, each answer as it ended, the processes' ids."""

    messages: list[SentMessage]
    ended: list[Ended]
    gateway: int
    workers: list[int]
    rate_limited: int
    names: dict[int, str] = field(default_factory=dict)
    refusal: list[str] = field(default_factory=list)


class _Process:
    """One OS process of the bot: its lines, as they come."""

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process = process
        self.name = name
        self.lines: asyncio.Queue[str] = asyncio.Queue()
        self.reading = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, name: str, module: str, *args: str, env: dict[str, str]) -> _Process:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, *args, env=env, stdout=asyncio.subprocess.PIPE
        )
        return cls(process, name)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            await self.lines.put(line.decode().strip())

    async def ready(self) -> None:
        async with asyncio.timeout(_WAIT):
            while await self.lines.get() != "ready":
                pass

    async def close(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
        try:
            async with asyncio.timeout(10):
                await self.process.wait()
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        self.reading.cancel()


async def run_cluster_demo(view: View, *, speed: float = SPEED) -> ClusterDemo:
    """Run the story (the module docstring) and return what it left; `view` is shown each
    change to the channel and each step."""
    async with AsyncExitStack() as stack:
        server = stack.enter_context(redis_server())
        api = await stack.enter_async_context(DiscordEmulator(rate_limits=RateLimits()))
        namespace = f"cluster-{free_port()}"
        env = {**os.environ, "DISCORD_TOKEN": api.token, "REDIS_URL": server.url}
        common = ("--namespace", namespace, "--api", api.base_url)
        gateway = await _Process.start(
            "gateway", "examples.cluster.gateway", *common, "--gateway", api.gateway_url, env=env
        )
        stack.push_async_callback(gateway.close)
        workers = []
        for number in (1, 2):
            worker = await _Process.start(
                f"worker {number}",
                "examples.cluster.worker",
                *common,
                "--scripted",
                str(speed),
                env=env,
            )
            stack.push_async_callback(worker.close)
            workers.append(worker)
        for process in (gateway, *workers):
            await process.ready()
        story = _Story(api, view, workers)
        stop_following = follow(api, api.channel_id, view)
        stack.callback(stop_following)
        ended = await story.play()
        messages = api.messages()
        view.show(messages, asyncio.get_running_loop().time())
        return ClusterDemo(
            messages,
            ended,
            gateway.process.pid,
            [worker.process.pid for worker in workers],
            sum(api.rate_limit_hits.values()),
            story.names,
            story.refusal,
        )
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises


class _Story:
    """The users' side of the demo: what they do, each step once its subject is on screen."""

    def __init__(self, api: DiscordEmulator, view: View, workers: Sequence[_Process]) -> None:
        self.api = api
        self.view = view
        self.start = asyncio.get_running_loop().time()
        self.ended: asyncio.Queue[Ended] = asyncio.Queue()
        self.names: dict[int, str] = {}
        self.refusal: list[str] = []
        self.listening = [asyncio.create_task(self._listen(worker)) for worker in workers]
        view.begin(self.start)

    async def _listen(self, worker: _Process) -> None:
        while True:
            said = json.loads(await worker.lines.get())
            await self.ended.put(
                Ended(
                    int(said["pid"]),
                    int(said["user"]),
                    str(said["question"]),
                    str(said["status"]),
                    str(said["text"]),
                )
            )

    def note(self, line: str) -> None:
        seconds = asyncio.get_running_loop().time() - self.start
        self.view.note(f"[{seconds:7.3f}s] {line}")

    async def play(self) -> list[Ended]:
        api = self.api
        try:
            alice, bob, carol = (api.add_member(name) for name in ("alice", "bob", "carol"))
            self.names = {alice.id: "alice", bob.id: "bob", carol.id: "carol"}
            self.note(f"alice: @cordstream {TEA}")
            await api.user_says(alice, f"<@{api.user_id}> {TEA}")
            tea = await self.streaming(lambda m: m.content.startswith("A good cup"))

            self.note("carol presses Stop on alice's answer")
            refused = await api.click(carol, tea.id, _stop_button(tea))
            await refused.wait_until(lambda record: bool(record.ephemeral))
            self.note("carol: /stop user:alice")
            told = await api.slash(carol, "stop", {"user": alice})
            await told.wait_until(lambda record: bool(record.ephemeral))
            self.refusal = [m.content for m in (*refused.ephemeral, *told.ephemeral)]
            for line in self.refusal:
                self.note(f"the gateway tells carol, and only her: {line}")

            self.note(f"bob: /ask question: {DICE}")
            await api.slash(bob, "ask", {"question": DICE})
            dice = await self.streaming(lambda m: m.content.startswith("Dice have"))

            self.note(f"alice: {GREEN_TEA}")
            await api.user_says(alice, GREEN_TEA)
            ended = [await self.next_end()]  # her first answer, interrupted
            dice = await self.streaming(lambda m: m.id == dice.id)  # still: not interrupted
            self.note("bob's answer still streams; bob presses Stop on it")
            await api.click(bob, dice.id, _stop_button(dice))
            ended += [await self.next_end(), await self.next_end()]
            return ended
        finally:
            for task in self.listening:
                task.cancel()

    async def next_end(self) -> Ended:
        async with asyncio.timeout(_WAIT):
            ended = await self.ended.get()
        who = self.names.get(ended.user, str(ended.user))
        self.note(f"worker {ended.worker}: {who}'s answer to {ended.question!r}: {ended.status}")
        return ended

    async def streaming(self, which: Callable[[SentMessage], bool]) -> SentMessage:
        """Wait until a message that `which` picks is streaming (its Stop button on it)."""
        return await self.api.wait_for_message(
            lambda message: which(message) and bool(message.components), timeout=_WAIT
        )


def _stop_button(message: SentMessage) -> str:
    """The custom id of the Stop button on `message`."""
    return next(found for found in message.custom_ids if found.startswith(STOP_BUTTON_PREFIX))


def render(demo: ClusterDemo) -> str:
    """The channel as a user sees it, then the processes and each answer's end."""
    workers = ", ".join(str(pid) for pid in demo.workers)
    lines = [
        "",
        *channel(demo.messages),
        "",
        f"══════ processes: gateway {demo.gateway}, workers {workers} ══════",
    ]
    for ended in demo.ended:
        who = demo.names.get(ended.user, str(ended.user))
        lines.append(f"{who:<6} {ended.question!r:<34} worker {ended.worker:<8} {ended.status}")
    lines.append(f"429s from the local Discord: {demo.rate_limited}")
    return "\n".join(lines)
