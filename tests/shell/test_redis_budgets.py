"""Discord's budgets shared by a bot's processes through a real `redis-server` (SPEC N2, N3).

The workers are real OS processes, each with its own discord.py client, against one local
Discord (the emulator in this process, with Discord's rate limits on). Redis keeps its own
clock, so these tests run in real time; every wait is on a condition, and the budgets are
small so that they bind within a second or two.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Final

import pytest

from cordstream.shell import Budget, budgets, ratelimit
from cordstream.shell.redis_budgets import MARGIN, RedisBudgets
from cordstream.shell.testing import DiscordEmulator, RateLimits
from cordstream.shell.testing.redis import RedisServer, free_port, redis_server

pytestmark = pytest.mark.asyncio

BOT: Final = 4242


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as running:
        yield running


@pytest.fixture
def small_channel_budget() -> Iterator[Budget]:
    budget = Budget(3, 1.0)
    previous = budgets.set_channel_budget(budget)
    try:
        yield budget
    finally:
        budgets.set_channel_budget(previous)


@asynccontextmanager
async def shared(url: str, namespace: str) -> AsyncIterator[RedisBudgets]:
    """A `RedisBudgets` of the bot `BOT`, not registered for this process's streams."""
    budgets_ = RedisBudgets(url, bot_id=BOT, namespace=namespace)
    try:
        yield budgets_
    finally:
        await budgets_.aclose()


async def test_N2_two_processes_budgets_count_in_one_window(
    server: RedisServer, small_channel_budget: Budget
) -> None:
    namespace = f"n2-{free_port()}"
    async with shared(server.url, namespace) as one, shared(server.url, namespace) as two:
        start = time.monotonic()
        for side in (one, two, one):  # prompt turns: the whole budget, 3 per window
            assert await side.channel_turn(7, "edit", prompt=True) == 0
        waited = await two.channel_turn(7, "edit", prompt=True)
        elapsed = time.monotonic() - start
        # The fourth waits until the first has left the window of `per + MARGIN`.
        assert waited > 0
        assert elapsed >= small_channel_budget.per + MARGIN - 0.05
        # Another route, another channel and another bot have budgets of their own.
        assert await one.channel_turn(7, "send", prompt=True) == 0
        assert await one.channel_turn(8, "edit", prompt=True) == 0
        other = RedisBudgets(server.url, bot_id=BOT + 1, namespace=namespace)
        try:
            assert await other.channel_turn(7, "edit", prompt=True) == 0
        finally:
            await other.aclose()
        assert one.taken + two.taken == 6  # the other bot's is its own
        assert one.fallbacks == two.fallbacks == 0


async def test_L2_N2_a_spaced_turn_leaves_one_in_hand_for_a_final_edit(
    server: RedisServer, small_channel_budget: Budget
) -> None:
    namespace = f"keep-{free_port()}"
    async with shared(server.url, namespace) as one, shared(server.url, namespace) as two:
        assert await one.channel_turn(7, "edit", prompt=False) == 0
        assert await two.channel_turn(7, "edit", prompt=False) == 0
        # A third spaced turn would spend the last one: it waits; a final edit does not.
        assert not await one.try_take([one.channel_lane(7, "edit", prompt=False)])
        assert await two.channel_turn(7, "edit", prompt=True) == 0
        assert not await two.try_take([two.channel_lane(7, "edit", prompt=True)])


async def test_N3_without_redis_the_budgets_fall_back_to_a_conservative_local_pace(
    small_channel_budget: Budget, caplog: pytest.LogCaptureFixture
) -> None:
    gone = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    async with shared(gone, "down") as alone:
        with caplog.at_level(logging.WARNING, "cordstream.redis"):
            start = time.monotonic()
            assert await alone.channel_turn(7, "edit", prompt=True) == 0
            assert time.monotonic() - start < 2.0  # the connection is refused at once
            # Alone (as far as it knows) it keeps to the whole budget, its window widened.
            for _ in range(2):
                assert await alone.channel_turn(7, "edit", prompt=True) == 0
            assert await alone.channel_turn(7, "edit", prompt=True) > 0
        assert alone.fallbacks == 4
        assert alone.taken == 0
        assert [
            r.getMessage() for r in caplog.records if "pacing this process alone" in r.getMessage()
        ]


async def test_N3_the_local_pace_is_the_processes_share(
    server: RedisServer, small_channel_budget: Budget
) -> None:
    namespace = f"share-{free_port()}"
    async with shared(server.url, namespace) as one, shared(server.url, namespace) as two:
        assert await one.channel_turn(9, "send", prompt=True) == 0
        assert await two.channel_turn(9, "send", prompt=True) == 0  # Redis: 2 processes
        server.stop()
        try:
            # Each of the two now takes 3 // 2 = 1 request per window of its own.
            assert await two.channel_turn(9, "edit", prompt=True) == 0
            assert not await two.try_take([two.channel_lane(9, "edit", prompt=True)])
            assert two.fallbacks == 1
        finally:
            server.start()


async def test_N2_typing_goes_only_when_its_channel_has_room(
    server: RedisServer, small_channel_budget: Budget
) -> None:
    namespace = f"typing-{free_port()}"
    async with RedisBudgets(server.url, bot_id=BOT, namespace=namespace) as registered:
        assert budgets.shared() is registered
        assert [await ratelimit.typing_turn(5) for _ in range(4)] == [True, True, True, False]
    assert budgets.shared() is None


LINES: Final = 25
WORKER: Final = f"LINES = {LINES}" + textwrap.dedent(
    """
    import asyncio, contextlib, json, sys
    from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator, StopRegistry
    from cordstream.shell.redis_budgets import RedisBudgets
    from cordstream.shell.testing import ScriptProvider, Sleep, discord_client_at

    async def main(base: str, token: str, channel_id: int, url: str, ns: str, who: str) -> None:
        async with discord_client_at(base, token) as client:
            channel = await client.fetch_channel(channel_id)
            assert client.user is not None
            sharing = RedisBudgets(url, bot_id=client.user.id, namespace=ns)
            async with sharing if ns else contextlib.nullcontext():
                print("ready", flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
                script = []
                for line in range(LINES):
                    script += [f"{who} line {line}: " + "words " * 8 + "\\n", Sleep(0.2)]
                result = await StreamOrchestrator(StopRegistry()).stream_to_discord(
                    ScriptProvider(script), StreamConfig(), StreamContext(channel)
                )
                print(json.dumps([result.status, result.accumulated_text]), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:]))
    """
)


async def test_N2_three_workers_streaming_into_one_channel_get_no_429(
    server: RedisServer,
) -> None:
    namespace = f"workers-{free_port()}"
    async with DiscordEmulator(rate_limits=RateLimits()) as api:
        workers = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                WORKER,
                *(api.base_url, api.token, str(api.channel_id), server.url, namespace, who),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            for who in ("amber", "birch", "cedar")
        ]
        try:
            for worker in workers:
                assert worker.stdout is not None
                async with asyncio.timeout(60):
                    assert (await worker.stdout.readline()).decode().strip() == "ready"
            for worker in workers:  # all three at once
                assert worker.stdin is not None
                worker.stdin.write(b"go\n")
                await worker.stdin.drain()
            said = []
            for worker in workers:
                assert worker.stdout is not None
                async with asyncio.timeout(120):
                    said.append(json.loads(await worker.stdout.readline()))
                    assert await worker.wait() == 0
        finally:
            for worker in workers:
                if worker.returncode is None:
                    worker.kill()
                    await worker.wait()
        assert [status for status, _ in said] == ["completed"] * 3
        assert sum(api.rate_limit_hits.values()) == 0, api.rate_limit_hits
        shown = api.text()
        for who, (_, text) in zip(("amber", "birch", "cedar"), said, strict=True):
            assert text.count(f"{who} line") == LINES
            assert all(line in shown for line in text.splitlines())
        # They ran together: each one's first message came while the others were streaming
        # (without the shared budgets the same run gets 429s on edits: checked by hand).
        sends = [r for r in api.requests if r.kind == "send"]
        firsts = [
            next(r.at for r in sends if who in str(r.json)) for who in ("amber", "birch", "cedar")
        ]
        last = max(r.at for r in api.requests)
        assert max(firsts) < last - 2.0
