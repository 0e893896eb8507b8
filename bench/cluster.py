"""Many processes of one bot (SPEC N1, N2, B3): `cross_process_stop_ms_p50` / `_p99`,
`cross_process_429s`, `cluster_streams_per_s_1` / `_4` and `cluster_scaling_4_over_1`.

Every figure runs OS processes (this module as a worker) against a real `redis-server` on
127.0.0.1 (`cordstream.shell.testing.redis`), in real time; every wait is on a line a worker
prints or on its exit, never on a sleep.

- A stop across processes: a worker (`--worker`) streams answers into its own local Discord
  through `RedisStopRegistry`, each a line then a hang, and says when each one shows its first
  text. For each answer, this process calls `request_stop` on its own `RedisStopRegistry` (one
  Redis round trip there and back, the worker's read of the change, the stream's end with its
  final edit) and the worker says when its `stream_to_discord` returned (live delivery, without
  Discord's pace, the channel's or the global one: the answers follow each other in one
  channel, faster than 50 requests a second). Both read `time.monotonic()`, one clock for
  every process of the machine; the figure is request to result, in ms.
- Discord's budgets across processes (N2): three workers (`--budget-worker`), each with its
  own discord.py client, stream a live answer of `SHARED_LINES` lines, written fast, at once
  into one channel of the emulator (in this process) with Discord's rate limits on, sharing
  the bot's budgets through `RedisBudgets`. `cross_process_429s` is the 429s the emulator
  answered them (each stream must complete, its whole text shown in the channel).
- Streams per second through 1 and 4 workers (`--jobs-worker`): each worker, with its own
  discord.py client, `RedisStopRegistry` and `RedisBudgets`, pulls jobs from a Redis list
  (`BLPOP`) until it is drained; a job is one live answer of `JOB_LINES` lines at a model's
  pace (`JOB_PACE` s before each), into a channel of its own of the emulator (in this process,
  without Discord's limits: the channel's pace off, the global budget too wide to bind, each
  message request still taking its turn in Redis). Timing starts when every worker is ready
  and the jobs are pushed, and ends with the last job's result; streams/s = jobs / seconds,
  for 1 worker, then 4, in one run.

    python -m bench.cluster [--json] [--runs N] [--jobs M]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

from bench import report

if TYPE_CHECKING:
    import discord

RUNS: Final = 100
JOBS: Final = 40
SHARED: Final = ("amber", "birch", "cedar")
SHARED_LINES: Final = 40
SHARED_PACE: Final = 0.1  # seconds after each line of a shared-channel answer: 4 s in all
JOB_LINES: Final = 6
JOB_PACE: Final = 0.06  # seconds before each line of a job's answer: 0.36 s of model time
WORDS: Final = " ".join(["words"] * 8)
UNBOUND: Final = 1_000_000  # the jobs workers' global budget, requests per second
SCALED: Final = 4  # the workers measured against one (the keys say 4)
WAIT: Final = 120.0  # seconds a phase may take before the benchmark fails
LABELS: Final = {
    "cross_process_stop_ms_p50": "stop in one process -> result in another, ms, p50",
    "cross_process_stop_ms_p99": "stop in one process -> result in another, ms, p99",
    "cross_process_429s": "3 processes streaming into one channel: 429s",
    "cluster_streams_per_s_1": "live answers per second, 1 worker process",
    "cluster_streams_per_s_4": "live answers per second, 4 worker processes",
    "cluster_scaling_4_over_1": "streams/s with 4 worker processes / with 1",
}


def shared_answer(who: str) -> list[object]:
    """The script of `who`'s answer in the shared channel: `SHARED_LINES` lines of about 110
    characters, written fast (4,400 characters: three messages)."""
    from cordstream.shell.testing import Sleep  # noqa: PLC0415

    script: list[object] = []
    for line in range(SHARED_LINES):
        script += [f"{who} line {line}: {WORDS} {WORDS}\n", Sleep(SHARED_PACE)]
    return script


def job_answer(job: int) -> list[object]:
    """The script of job `job`'s answer: `JOB_LINES` lines at the model's pace."""
    from cordstream.shell.testing import Sleep  # noqa: PLC0415

    script: list[object] = []
    for line in range(JOB_LINES):
        script += [Sleep(JOB_PACE), f"Job {job} line {line}: {WORDS}\n"]
    return script


def _lines(script: Sequence[object]) -> list[str]:
    """The lines a script writes."""
    return "".join(step for step in script if isinstance(step, str)).splitlines()


def _showing(line: str) -> Callable[[str], bool]:
    """Whether a channel's text shows `line`."""
    return lambda text: line in text


async def _text_channel(client: discord.Client, channel_id: int) -> discord.TextChannel:
    import discord  # noqa: PLC0415

    channel = await client.fetch_channel(channel_id)
    assert isinstance(channel, discord.TextChannel), channel
    return channel


# ---- the workers ------------------------------------------------------------------------------


async def _worker(url: str, namespace: str, runs: int) -> None:
    from cordstream.shell import (  # noqa: PLC0415
        StreamConfig,
        StreamContext,
        StreamOrchestrator,
        set_channel_budget,
        set_global_budget,
    )
    from cordstream.shell.redis_stops import RedisStopRegistry  # noqa: PLC0415
    from cordstream.shell.testing import Hang, ScriptProvider, local_discord  # noqa: PLC0415

    async with (
        RedisStopRegistry(url, namespace=namespace) as stops,
        local_discord() as (api, _, channel),
    ):
        orchestrator = StreamOrchestrator(stops)
        # One channel, many answers: Discord's pace is not measured. Nor its global budget: the
        # answers follow each other faster than its 50 requests a second allow (3 requests
        # each), and a final edit held by it for most of a second is not the stop's latency.
        set_channel_budget(None)
        set_global_budget(None)
        for run in range(runs):
            line = f"Answer {run}."
            provider = ScriptProvider([f"{line}\n", Hang()])
            streaming = asyncio.ensure_future(
                orchestrator.stream_to_discord(provider, StreamConfig(), StreamContext(channel))
            )
            await api.wait_for_text(_showing(line), timeout=WAIT)
            print("ready", channel.id, flush=True)
            result = await streaming
            print("ended", time.monotonic(), result.status, flush=True)


async def _budget_worker(argv: Sequence[str]) -> None:
    """One of the processes sharing a channel (`argv`: the emulator's base URL and token, the
    channel's id, Redis's URL, the namespace, the answer's author): ready, then on a line from
    stdin, its answer; prints its result's status and text."""
    base, token, channel_id, url, namespace, who = argv
    from cordstream.shell import (  # noqa: PLC0415
        StopRegistry,
        StreamConfig,
        StreamContext,
        StreamOrchestrator,
    )
    from cordstream.shell.redis_budgets import RedisBudgets  # noqa: PLC0415
    from cordstream.shell.testing import ScriptProvider, discord_client_at  # noqa: PLC0415

    async with discord_client_at(base, token) as client:
        channel = await _text_channel(client, int(channel_id))
        assert client.user is not None
        async with RedisBudgets(url, bot_id=client.user.id, namespace=namespace):
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            result = await StreamOrchestrator(StopRegistry()).stream_to_discord(
                ScriptProvider(shared_answer(who)), StreamConfig(), StreamContext(channel)
            )
            print(json.dumps([result.status, result.accumulated_text]), flush=True)


async def _jobs_worker(base: str, token: str, url: str, namespace: str) -> None:
    """One of the processes pulling jobs (`{number} {channel id}`) from the list
    `{namespace}:jobs` until it pops `end`; prints each job's result."""
    import redis.asyncio as aioredis  # noqa: PLC0415

    from cordstream.shell import (  # noqa: PLC0415
        Budget,
        StreamConfig,
        StreamContext,
        StreamOrchestrator,
        set_channel_budget,
        set_global_budget,
    )
    from cordstream.shell.redis_budgets import RedisBudgets  # noqa: PLC0415
    from cordstream.shell.redis_stops import RedisStopRegistry  # noqa: PLC0415
    from cordstream.shell.testing import ScriptProvider, discord_client_at  # noqa: PLC0415

    # An emulator without Discord's limits: the channel's pace is off, and the bot's global
    # budget so wide that it never binds (Discord's 50 per second would cap 4 workers at about
    # 6 answers per second), though each message request still takes its turn in Redis.
    set_channel_budget(None)
    set_global_budget(Budget(UNBOUND, 1.0))
    queue = aioredis.from_url(url)
    try:
        async with (
            discord_client_at(base, token) as client,
            RedisStopRegistry(url, namespace=namespace) as stops,
        ):
            assert client.user is not None
            async with RedisBudgets(url, bot_id=client.user.id, namespace=namespace):
                orchestrator = StreamOrchestrator(stops)
                print("ready", flush=True)
                while True:
                    popped = await queue.blpop([f"{namespace}:jobs"], timeout=WAIT)
                    if popped is None:
                        raise RuntimeError(f"no job within {WAIT} s")
                    _, value = popped
                    job = value.decode() if isinstance(value, bytes) else value
                    if job == "end":
                        break
                    number, channel_id = (int(part) for part in job.split())
                    channel = await _text_channel(client, channel_id)
                    result = await orchestrator.stream_to_discord(
                        ScriptProvider(job_answer(number)), StreamConfig(), StreamContext(channel)
                    )
                    said = [number, result.status, time.monotonic(), result.accumulated_text]
                    print(json.dumps(said), flush=True)
    finally:
        await queue.aclose()


# ---- this process's side ----------------------------------------------------------------------


@asynccontextmanager
async def _spawned(
    commands: Sequence[Sequence[str]], *, stdin: bool = False
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Worker processes (`python -m bench.cluster` with each of `commands`); whichever still
    runs when the block ends is killed."""
    workers: list[asyncio.subprocess.Process] = []
    try:
        for command in commands:  # one by one: those started are killed if one fails
            workers.append(  # noqa: PERF401
                await asyncio.create_subprocess_exec(
                    *(sys.executable, "-m", "bench.cluster", *command),
                    stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        yield workers
    finally:
        for worker in workers:
            if worker.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.kill()
                await worker.wait()


async def _line(worker: asyncio.subprocess.Process) -> bytes:
    """The worker's next line; it must print one."""
    assert worker.stdout is not None
    line = await worker.stdout.readline()
    if not line:
        raise RuntimeError(f"worker {worker.pid} ended without a line: {await worker.wait()}")
    return line.strip()


async def _all_ready(workers: Sequence[asyncio.subprocess.Process]) -> None:
    async with asyncio.timeout(WAIT):
        for worker in workers:
            ready = await _line(worker)
            assert ready == b"ready", ready


async def _exited(workers: Sequence[asyncio.subprocess.Process]) -> None:
    for worker in workers:
        code = await worker.wait()
        assert code == 0, f"worker {worker.pid} exited with {code}"


async def _stops(url: str, runs: int) -> list[float]:
    from cordstream.shell.redis_stops import RedisStopRegistry  # noqa: PLC0415
    from cordstream.shell.testing.redis import free_port  # noqa: PLC0415

    latencies: list[float] = []
    namespace = f"bench-{free_port()}"
    async with _spawned([("--worker", url, namespace, "--runs", str(runs))]) as (worker,):
        async with RedisStopRegistry(url, namespace=namespace) as stops:
            for _ in range(runs):
                ready = (await _line(worker)).split()
                assert ready[:1] == [b"ready"], ready
                asked = time.monotonic()
                assert await stops.request_stop(int(ready[1]), "bench")
                ended = (await _line(worker)).split()
                assert ended[0] == b"ended", ended
                assert ended[2] == b"stopped_by_user", ended
                latencies.append((float(ended[1]) - asked) * 1000)
        await _exited([worker])
    return latencies


async def _shared_channel(url: str) -> float:
    """`cross_process_429s`: three workers streaming into one rate-limited channel at once."""
    from cordstream.shell.testing import DiscordEmulator, RateLimits  # noqa: PLC0415
    from cordstream.shell.testing.redis import free_port  # noqa: PLC0415

    namespace = f"bench-429-{free_port()}"
    async with DiscordEmulator(rate_limits=RateLimits()) as api:
        where = (api.base_url, api.token, str(api.channel_id), url, namespace)
        commands = [("--budget-worker", *where, who) for who in SHARED]
        async with _spawned(commands, stdin=True) as workers:
            await _all_ready(workers)
            for worker in workers:  # all three at once
                assert worker.stdin is not None
                worker.stdin.write(b"go\n")
                await worker.stdin.drain()
            async with asyncio.timeout(WAIT):
                said = [json.loads(await _line(worker)) for worker in workers]
                await _exited(workers)
        shown = api.text()
        for who, (status, text) in zip(SHARED, said, strict=True):
            assert status == "completed", (who, status)
            lines = _lines(shared_answer(who))
            assert text.splitlines() == lines, (who, text)
            lost = [line for line in lines if line not in shown]
            assert not lost, (who, lost)
        return float(sum(api.rate_limit_hits.values()))


async def _results(worker: asyncio.subprocess.Process) -> list[list[Any]]:
    """Every result a jobs worker prints, until it exits."""
    assert worker.stdout is not None
    results = []
    while line := await worker.stdout.readline():
        results.append(json.loads(line))
    return results


async def _streams_per_s(url: str, workers_count: int, jobs: int) -> float:
    """Streams per second through `workers_count` jobs workers, for `jobs` jobs."""
    import redis.asyncio as aioredis  # noqa: PLC0415

    from cordstream.shell.testing import DiscordEmulator  # noqa: PLC0415
    from cordstream.shell.testing.redis import free_port  # noqa: PLC0415

    namespace = f"bench-jobs-{free_port()}"
    queue = aioredis.from_url(url)
    try:
        async with DiscordEmulator() as api:
            channels = [api.add_channel(f"job-{job}") for job in range(jobs)]
            command = ("--jobs-worker", api.base_url, api.token, url, namespace)
            async with _spawned([command] * workers_count) as workers:
                await _all_ready(workers)
                started = time.monotonic()
                pushed = [f"{job} {channel}" for job, channel in enumerate(channels)]
                await queue.rpush(f"{namespace}:jobs", *pushed, *["end"] * workers_count)
                async with asyncio.timeout(WAIT):
                    said = await asyncio.gather(*(_results(worker) for worker in workers))
                    await _exited(workers)
            results = {result[0]: result[1:] for each in said for result in each}
            assert sorted(results) == list(range(jobs)), sorted(results)
            for job, channel in enumerate(channels):
                status, _, text = results[job]
                assert status == "completed", (job, status)
                lines = _lines(job_answer(job))
                assert text.splitlines() == lines, (job, text)
                shown = api.text(channel)
                lost = [line for line in lines if line not in shown]
                assert not lost, (job, lost)
            last = max(float(ended) for _, ended, _ in results.values())
            return jobs / (last - started)
    finally:
        await queue.aclose()


async def _measure(runs: int, jobs: int) -> dict[str, float]:
    from cordstream.shell.testing.redis import redis_server  # noqa: PLC0415

    with redis_server() as server:
        latencies = await _stops(server.url, runs)
        hits = await _shared_channel(server.url)
        one = await _streams_per_s(server.url, 1, jobs)
        many = await _streams_per_s(server.url, SCALED, jobs)
    cut = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "cross_process_stop_ms_p50": cut[49],
        "cross_process_stop_ms_p99": cut[98],
        "cross_process_429s": hits,
        "cluster_streams_per_s_1": one,
        "cluster_streams_per_s_4": many,
        "cluster_scaling_4_over_1": many / one,
    }


def measure(runs: int = RUNS, jobs: int = JOBS) -> dict[str, float]:
    return asyncio.run(_measure(runs, jobs))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"stops to time ({RUNS})")
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"streams to time ({JOBS})")
    parser.add_argument("--worker", nargs=2, metavar=("URL", "NAMESPACE"), help=argparse.SUPPRESS)
    parser.add_argument("--budget-worker", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--jobs-worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, namespace = args.worker
        asyncio.run(_worker(url, namespace, args.runs))
        return
    if args.budget_worker:
        asyncio.run(_budget_worker(args.budget_worker))
        return
    if args.jobs_worker:
        asyncio.run(_jobs_worker(*args.jobs_worker))
        return
    report(
        measure(args.runs, args.jobs), lambda key: LABELS.get(key, key), width=60, as_json=args.json
    )


if __name__ == "__main__":
    main()
