"""How far one text chunk travels: from the OpenAI adapter to Discord and back (issue 11).

Streams a one-line answer ("Hello there.", one SSE content frame) through the real
`OpenAIChatProvider` (the official SDK against a local SSE server), the orchestrator, the
core, discord.py and the local Discord emulator, with a profiler hook that records every call
into cordstream's own code (`domain/`, `shell/`, not the test kit). Two stretches are
counted, each as cordstream frames entered and the files they are in:

- *there*: from the adapter turning the SSE chunk into a `TextChunk` to the request that
  sends the message (`discord_api.post`, which `discord_api.send_message` wraps);
- *back*: from Discord's answer becoming an event (`discord_api.outcome`) to the result
  (`_Stream.conclude`).

    python -m bench.hops            # the files, in the order first entered, and the counts
    python -m bench.hops --json     # {"hops_files": ..., "hops_frames": ...}

The chunk's path is then told in files, as the note of issue 11 walks it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from types import FrameType

import discord
import openai

import cordstream.domain
import cordstream.shell
from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator
from cordstream.shell.providers import OpenAIChatProvider
from cordstream.shell.testing import DiscordEmulator, ModelServer, discord_client
from cordstream.shell.testing.openai_wire import answer

# cordstream's code, by its folder's name, found where the packages were imported from (not
# where this file is: mutmut, for one, runs a copy of the tree whose packages live elsewhere).
_CODE = {
    "domain": Path(cordstream.domain.__file__ or "").resolve().parent,
    "shell": Path(cordstream.shell.__file__ or "").resolve().parent,
}
_LEFT_OUT = (_CODE["shell"] / "testing", _CODE["shell"] / "cli")


def _ours(filename: str) -> str | None:
    """`domain/...` or `shell/...` for a file of cordstream's code (the test kit and the CLI
    left out), else None."""
    path = Path(filename).resolve()
    if any(path.is_relative_to(d) for d in _LEFT_OUT):
        return None
    for name, folder in _CODE.items():
        if path.is_relative_to(folder):
            return (Path(name) / path.relative_to(folder)).as_posix()
    return None


class Trace:
    """Calls into cordstream's code, in order, with the stretch they fall in."""

    def __init__(self) -> None:
        self.stretch: str | None = None
        self.calls: dict[str, list[tuple[str, str]]] = {"there": [], "back": []}

    def hook(self, frame: FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        name = frame.f_code.co_name
        where = _ours(frame.f_code.co_filename)
        if where is None:
            return
        opens = self.stretch is None and where.startswith("shell/providers/openai")
        if opens and "Hello" in repr(frame.f_locals)[:2000]:
            self.stretch = "there"
        if self.stretch == "there" and name == "post" and where == "shell/discord_api.py":
            self.calls["there"].append((where, name))
            self.stretch = "between"
            return
        if self.stretch == "between" and name == "outcome" and where == "shell/discord_api.py":
            self.stretch = "back"
        if self.stretch in self.calls:
            self.calls[self.stretch].append((where, name))
        if self.stretch == "back" and name == "conclude":
            self.stretch = "done"


async def _run(trace: Trace) -> str:
    async with ModelServer() as server, DiscordEmulator() as api, discord_client(api) as bot:
        channel = await bot.fetch_channel(api.channel_id)
        assert isinstance(channel, discord.TextChannel)
        server.replies.append(answer("Hello there.", size=100))
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        provider = OpenAIChatProvider(
            client, model="local-model", messages=[{"role": "user", "content": "Hi"}]
        )
        sys.setprofile(trace.hook)
        try:
            result = await StreamOrchestrator().stream_to_discord(
                provider, StreamConfig(delivery="messages"), StreamContext(channel)
            )
        finally:
            sys.setprofile(None)
        await client.close()
        assert api.text() == result.accumulated_text == "Hello there.", result
        return result.status


def measure() -> dict[str, object]:
    trace = Trace()
    asyncio.run(_run(trace))
    figures: dict[str, object] = {}
    for stretch, calls in trace.calls.items():
        files = list(dict.fromkeys(where for where, _ in calls))
        figures[f"hops_{stretch}_files"] = files
        figures[f"hops_{stretch}_frames"] = len(calls)
    both = trace.calls["there"] + trace.calls["back"]
    figures["hops_files"] = len({where for where, _ in both})
    figures["hops_frames"] = len(both)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--calls", action="store_true", help="every call, in order")
    args = parser.parse_args()
    if args.calls:
        trace = Trace()
        asyncio.run(_run(trace))
        for stretch, calls in trace.calls.items():
            print(f"-- {stretch}")
            for where, name in calls:
                print(f"   {where}:{name}")
        return
    figures = measure()
    if args.json:
        print(json.dumps({k: v for k, v in figures.items() if not isinstance(v, list)}))
        return
    for key, value in figures.items():
        print(f"{key}: {' -> '.join(value) if isinstance(value, list) else value}")


if __name__ == "__main__":
    main()
