"""What telemetry costs a stream: `telemetry_overhead_ratio` (SPEC M, issue "Observable in
production").

One answer of 2,000 chunks (`bench.answers`, 1-8 characters each), each a network read of its
own (`bench.shell.YieldingProvider`: the loop turns before each chunk, as a model's stream
does), through `stream_to_discord` with messages delivery into a sink that accepts at once
(`bench.shell.InstantSink`, Discord's pacing off), run two ways in this one process:

- *off*: no telemetry, as without the `otel` extra (`cordstream.shell.otel.tracer()` and
  `instruments()` None) and with the `cordstream` logger silent, as a bot leaves it;
- *on*: the OpenTelemetry SDK configured as an application configures it (a global
  `TracerProvider` whose spans go through a `SimpleSpanProcessor` to an in-memory exporter,
  a global `MeterProvider` with an in-memory reader), and the `cordstream` loggers at INFO
  into a handler that keeps the records.

Each is run once untimed, then in pairs, off first in one pair and on first in the next, with
a garbage collection before each run; a run is timed in the process's CPU time. The figure is
the median of the pairs' ratios (on / off); `telemetry_ms_per_stream` is the median
difference, in ms. The spans and the log line of a run are checked, so "on" did record.

    python -m bench.telemetry [--json]
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Final
from unittest.mock import patch

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench import command
from bench.answers import answer, chunked
from bench.shell import InstantSink, YieldingProvider
from cordstream.domain import ProcessedChunk, TextChunk
from cordstream.shell import (
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    otel,
    set_global_budget,
)
from cordstream.shell.stops import StopRegistry

CHUNKS: Final = 2000
PAIRS: Final = 21

LABELS: Final = {
    "telemetry_overhead_ratio": "2,000-chunk answer, telemetry on / off (median)",
    "telemetry_ms_per_stream": "telemetry's cost per stream, CPU ms (median)",
}


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


_SPANS = InMemorySpanExporter()
_KEPT = _Kept()


def _configure() -> None:
    """The SDK, as an application sets it up (once per process)."""
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(_SPANS))
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


@contextmanager
def _off() -> Iterator[None]:
    """As without the extra: cordstream finds no tracer and no instruments."""
    with (
        patch.object(otel, "tracer", lambda: None),
        patch.object(otel, "instruments", lambda: None),
    ):
        yield


@contextmanager
def _logging_on() -> Iterator[None]:
    logger = logging.getLogger("cordstream")
    level = logger.level
    logger.addHandler(_KEPT)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(_KEPT)
        logger.setLevel(level)


async def _pairs(items: list[ProcessedChunk], pairs: int) -> list[tuple[float, float]]:
    provider = YieldingProvider(items)
    config = StreamConfig(delivery="messages", flush_limit=0)
    context = StreamContext(InstantSink())  # type: ignore[arg-type]  # duck-typed sink
    orchestrator = StreamOrchestrator(StopRegistry())

    async def off() -> float:
        with _off():
            return await _timed(lambda: orchestrator.stream_to_discord(provider, config, context))

    async def on() -> float:
        _SPANS.clear()
        _KEPT.records.clear()
        with _logging_on():
            took = await _timed(lambda: orchestrator.stream_to_discord(provider, config, context))
        names = [span.name for span in _SPANS.get_finished_spans()]
        assert names.count("chat") == 1, names
        assert [r.name for r in _KEPT.records] == ["cordstream.stream"], _KEPT.records
        return took

    times: list[tuple[float, float]] = []
    for index in range(pairs + 1):
        if index % 2:
            on_s = await on()
            off_s = await off()
        else:
            off_s = await off()
            on_s = await on()
        if index:  # the first pair warms both up
            times.append((off_s, on_s))
    return times


async def _timed(run: Callable[[], Awaitable[object]]) -> float:
    gc.collect()
    start = time.process_time()
    result = await run()
    took = time.process_time() - start
    assert getattr(result, "status", None) == "completed", result
    return took


def measure(pairs: int = PAIRS) -> dict[str, float]:
    _configure()
    items: list[ProcessedChunk] = [TextChunk(c) for c in chunked(answer(12_000))[:CHUNKS]]
    assert len(items) == CHUNKS, len(items)
    previous = set_global_budget(None)  # an instant sink, not Discord: nothing to pace
    try:
        times = asyncio.run(_pairs(items, pairs))
    finally:
        set_global_budget(previous)
    return {
        "telemetry_overhead_ratio": statistics.median(on / off for off, on in times),
        "telemetry_ms_per_stream": statistics.median((on - off) * 1000 for off, on in times),
    }


def measure_apart() -> dict[str, float]:
    """`measure()` in a process of its own (`python -m bench.telemetry --json`): the SDK's
    global providers, once set, would stay for every benchmark after it."""
    ran = subprocess.run(
        [sys.executable, "-m", "bench.telemetry", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    figures: dict[str, float] = json.loads(ran.stdout)
    return figures


def main() -> None:
    command("python -m bench.telemetry", __doc__, measure, lambda key: LABELS.get(key, key))


if __name__ == "__main__":
    main()
