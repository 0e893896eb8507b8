"""A stop across processes (SPEC N1, B3): `cross_process_stop_ms_p50` / `_p99`.

A real `redis-server` on 127.0.0.1 (`cordstream.shell.testing.redis`) and a second OS process
(this module with `--worker`): the worker streams answers into its own local Discord through
`RedisStopRegistry`, each a line then a hang, and says when each one shows its first text. For
each answer, this process calls `request_stop` on its own `RedisStopRegistry` (one Redis round
trip there and back, the worker's read of the change, the stream's end with its final edit) and
the worker says when its `stream_to_discord` returned (live delivery, without the channel's
pace: the answers follow each other in one channel). Both read `time.monotonic()`, one clock
for every process of the machine; the figure is request to result, in ms.

    python -m bench.cluster [--json] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Final

from bench import report

RUNS: Final = 100
LABELS: Final = {
    "cross_process_stop_ms_p50": "stop in one process -> result in another, ms, p50",
    "cross_process_stop_ms_p99": "stop in one process -> result in another, ms, p99",
}


async def _worker(url: str, namespace: str, runs: int) -> None:
    from cordstream.shell import (  # noqa: PLC0415
        StreamConfig,
        StreamContext,
        StreamOrchestrator,
        set_channel_budget,
    )
    from cordstream.shell.redis_stops import RedisStopRegistry  # noqa: PLC0415
    from cordstream.shell.testing import Hang, ScriptProvider, local_discord  # noqa: PLC0415

    async with (
        RedisStopRegistry(url, namespace=namespace) as stops,
        local_discord() as (api, _, channel),
    ):
        orchestrator = StreamOrchestrator(stops)
        set_channel_budget(None)  # one channel, many answers: Discord's pace is not measured
        for run in range(runs):
            line = f"Answer {run}."
            provider = ScriptProvider([f"{line}\n", Hang()])
            streaming = asyncio.ensure_future(
                orchestrator.stream_to_discord(provider, StreamConfig(), StreamContext(channel))
            )
            while line not in api.text():
                await asyncio.sleep(0.001)
            print("ready", channel.id, flush=True)
            result = await streaming
            print("ended", time.monotonic(), result.status, flush=True)


async def _measure(runs: int) -> list[float]:
    from cordstream.shell.redis_stops import RedisStopRegistry  # noqa: PLC0415
    from cordstream.shell.testing.redis import free_port, redis_server  # noqa: PLC0415

    latencies: list[float] = []
    with redis_server() as server:
        namespace = f"bench-{free_port()}"
        worker = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bench.cluster", "--worker", server.url, namespace),
            "--runs",
            str(runs),
            stdout=asyncio.subprocess.PIPE,
        )
        assert worker.stdout is not None
        try:
            async with RedisStopRegistry(server.url, namespace=namespace) as stops:
                for _ in range(runs):
                    ready = (await worker.stdout.readline()).split()
                    assert ready[:1] == [b"ready"], ready
                    asked = time.monotonic()
                    assert await stops.request_stop(int(ready[1]), "bench")
                    ended = (await worker.stdout.readline()).split()
                    assert ended[0] == b"ended", ended
                    assert ended[2] == b"stopped_by_user", ended
                    latencies.append((float(ended[1]) - asked) * 1000)
            await worker.wait()
        finally:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
    return latencies


def measure(runs: int = RUNS) -> dict[str, float]:
    latencies = asyncio.run(_measure(runs))
    cut = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"cross_process_stop_ms_p50": cut[49], "cross_process_stop_ms_p99": cut[98]}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"stops to time ({RUNS})")
    parser.add_argument("--worker", nargs=2, metavar=("URL", "NAMESPACE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, namespace = args.worker
        asyncio.run(_worker(url, namespace, args.runs))
        return
    report(measure(args.runs), lambda key: LABELS.get(key, key), width=60, as_json=args.json)


if __name__ == "__main__":
    main()
