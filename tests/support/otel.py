"""The OpenTelemetry SDK, configured as an application configures it, for the telemetry tests.

The API's global providers can be set once per process, so `recording()` sets them the first
time (a `TracerProvider` whose spans go to an in-memory exporter, a `MeterProvider` with an
in-memory reader) and, each time, records spans only until it exits: the rest of the suite's
streams then cost a dropped span. Metrics are cumulative, so a test reads what changed while
it ran (`Recorded.metrics`: the difference from the start).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from opentelemetry import context, metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

Key: TypeAlias = tuple[str, frozenset[tuple[str, Any]]]
"""A metric's name and one data point's attributes."""


class _Switch(SpanProcessor):
    """Passes finished spans on while `on`."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self.on = False

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            self.inner.on_end(span)


_SPANS = InMemorySpanExporter()
_READER = InMemoryMetricReader()
_SWITCH = _Switch(SimpleSpanProcessor(_SPANS))
_installed: list[bool] = []


def _points() -> dict[Key, tuple[int, float]]:
    """Every cordstream data point: (count, sum) of a histogram, (0, value) of a counter."""
    found: dict[Key, tuple[int, float]] = {}
    data = _READER.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            if scope.scope.name != "cordstream":
                continue
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, frozenset(dict(point.attributes or {}).items()))
                    if isinstance(point, HistogramDataPoint):
                        found[key] = (point.count, point.sum)
                    elif isinstance(point, NumberDataPoint):
                        found[key] = (0, float(point.value))
    return found


@dataclass
class Recorded:
    """What the SDK got while `recording()` ran."""

    before: dict[Key, tuple[int, float]] = field(default_factory=_points)

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(_SPANS.get_finished_spans())

    def span(self, name: str) -> ReadableSpan:
        found = [span for span in self.spans if span.name == name]
        assert len(found) == 1, [span.name for span in self.spans]
        return found[0]

    def metrics(self, name: str) -> list[tuple[Mapping[str, Any], int, float]]:
        """Each of the metric's data points that changed: its attributes, and what was
        added to its count (histograms) and its sum (histograms) or value (counters)."""
        changed: list[tuple[Mapping[str, Any], int, float]] = []
        for (metric, attributes), (count, total) in _points().items():
            old_count, old_total = self.before.get((metric, attributes), (0, 0.0))
            if metric == name and (count, total) != (old_count, old_total):
                changed.append((dict(attributes), count - old_count, total - old_total))
        return changed


@contextmanager
def recording() -> Iterator[Recorded]:
    """The SDK's spans and metrics of what runs inside."""
    if not _installed:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(_SWITCH)
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))
        _installed.append(True)
    _SPANS.clear()
    recorded = Recorded()
    _SWITCH.on = True
    try:
        yield recorded
    finally:
        _SWITCH.on = False
