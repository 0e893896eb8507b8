"""The Stop button's figure (SPEC K2, issue 13): how soon a click stops the answer it is on.

`python -m bench.buttons [--json] [--clicks N]` runs only this; `python -m bench` (and
`make bench`) includes it. Real time, a few seconds.

A real `discord.Client` is connected to the emulator's gateway (`local_bot`); for each user
message it streams an answer live into the channel with `StreamContext(stop_button=True)`,
answering its author. The model (the test kit's `ScriptProvider`) writes one line and then
hangs, so only the stop can end the stream. Once the message shows the line and its Stop
button, the author clicks the button (`DiscordEmulator.click`: INTERACTION_CREATE through the
gateway), and the stream's result is awaited; then the next message. `CLICKS` (200) clicks,
one after another, each on a new answer.

- The click *reaches the bot* when discord.py's gateway receives its INTERACTION_CREATE (the
  client's `dispatch("socket_raw_receive", ...)`, called synchronously as the websocket
  message arrives, before discord.py parses it; `enable_debug_events`).
- The stop *takes effect* when the provider is told to stop (`ScriptProvider.closed_at`: its
  stream is cancelled and closed, B10), which comes before the final edit and the result.

`button_stop_latency_ms_p50` / `_p99`: the time between the two, on the loop's clock, in
milliseconds (SPEC K2 and issue 13: p99 at most 50 ms). It covers discord.py's parsing and
dispatch of the click, its view store, the button's callback (C10's check and `request_stop`,
before the click's acknowledgement is sent), the registry waking the stream (B3), the core's
decision and the provider's cancellation. The channel's pace (L2) is off
(`set_channel_budget(None)`), since the emulator runs without Discord's limits here, and the
answers' own requests must not queue behind 1.1 s turns: it paces requests, not the stop.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any, Final

import discord

from bench import report
from cordstream.shell import (
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    StreamResult,
    set_channel_budget,
)
from cordstream.shell.buttons import STOP_BUTTON_PREFIX
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing import DiscordEmulator, Hang, ScriptProvider, local_bot
from cordstream.shell.testing.emulator import SentMessage

CLICKS: Final = 200
WAIT: Final = 30.0  # seconds a step may take before the benchmark fails

_LABELS: Final = {
    "button_stop_latency_ms_p50": "Stop click reaching the bot -> stream stopped, ms, p50",
    "button_stop_latency_ms_p99": "Stop click reaching the bot -> stream stopped, ms, p99 "
    "(target <= 50)",
}


def label(key: str) -> str:
    return _LABELS[key]


class _Bot(discord.Client):
    """Answers each user message live, with a Stop button; notes when gateway messages arrive."""

    def __init__(self) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents, enable_debug_events=True)
        self.orchestrator = StreamOrchestrator(StopRegistry())
        self.received: list[tuple[float, str]] = []  # (loop time, raw gateway message)
        self.providers: asyncio.Queue[ScriptProvider] = asyncio.Queue()
        self.results: asyncio.Queue[StreamResult] = asyncio.Queue()

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        raw = args[0] if event == "socket_raw_receive" and args else None
        if isinstance(raw, str) and '"INTERACTION_CREATE"' in raw:
            self.received.append((asyncio.get_running_loop().time(), raw))
        super().dispatch(event, *args, **kwargs)

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot:
            return
        provider = ScriptProvider(["The answer's first line, then the model hangs.\n", Hang()])
        await self.providers.put(provider)
        context = StreamContext(
            message.channel, reply_to=message, answering=message.author.id, stop_button=True
        )
        result = await self.orchestrator.stream_to_discord(
            provider, StreamConfig(delivery="live"), context
        )
        await self.results.put(result)


def _button(message: SentMessage) -> str | None:
    for row in message.components:
        for item in row.get("components", ()):
            custom_id = item.get("custom_id")
            if isinstance(custom_id, str) and custom_id.startswith(STOP_BUTTON_PREFIX):
                return custom_id
    return None


async def _shown_with_button(api: DiscordEmulator, after: int) -> SentMessage:
    """The first message newer than `after` that shows the Stop button."""
    return await api.wait_for_message(
        lambda message: message.id > after and _button(message) is not None, timeout=WAIT
    )


async def _measure(clicks: int) -> list[float]:
    bot = _Bot()
    latencies: list[float] = []
    async with local_bot(bot) as api:
        user = api.add_member("asker")
        last = 0
        for n in range(clicks):
            await api.user_says(user, f"Question {n}?")
            provider = await asyncio.wait_for(bot.providers.get(), WAIT)
            message = await _shown_with_button(api, last)
            last = message.id
            button = _button(message)
            assert button is not None
            pressed = await api.click(user, message.id, button)
            result = await asyncio.wait_for(bot.results.get(), WAIT)
            assert result.status == "stopped_by_user", result.status
            reached = next(at for at, raw in bot.received if str(pressed.id) in raw)
            assert provider.closed_at is not None
            latencies.append((provider.closed_at - reached) * 1000)
            await pressed.wait_until(timeout=WAIT)  # acknowledged before the next question
    return latencies


def measure(clicks: int = CLICKS) -> dict[str, float]:
    previous = set_channel_budget(None)  # see the module docstring
    try:
        latencies = asyncio.run(_measure(clicks))
    finally:
        set_channel_budget(previous)
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "button_stop_latency_ms_p50": quantiles[49],
        "button_stop_latency_ms_p99": quantiles[98],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.buttons", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--clicks", type=int, default=CLICKS, help=f"clicks ({CLICKS})")
    args = parser.parse_args()
    report(measure(args.clicks), label, width=70, as_json=args.json)


if __name__ == "__main__":
    main()
