"""OpenTelemetry through its API only, when the `otel` extra is installed (SPEC M2).

cordstream is an instrumentation library here: it asks the API's global providers for one
tracer and one meter (`opentelemetry.trace.get_tracer`, `opentelemetry.metrics.get_meter`) and
configures nothing. An application that sets a `TracerProvider` and a `MeterProvider` (the
SDK) gets cordstream's spans and metrics, whether it does so before or after the first stream
(the API's proxies pass them on); without the SDK, the API's no-op implementation records
nothing; without the API (`pip install cordstream` alone), `tracer()` and `instruments()` are
None and `cordstream.shell.telemetry` calls nothing at all.

Names follow OpenTelemetry's GenAI semantic conventions, version `SEMCONV`; cordstream's own
metrics are named `cordstream.*`. Message contents are recorded only when the application opts
in with the conventions' `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`
(`capture_content`), and redacted as embeds are (G4).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Final

from cordstream import __version__

try:
    from opentelemetry import context, metrics, trace
except ImportError:  # the `otel` extra is not installed: no telemetry, no cost
    AVAILABLE = False
else:
    AVAILABLE = True

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.trace import Tracer

__all__ = [
    "AVAILABLE",
    "CAPTURE_CONTENT",
    "PROVIDER_NAMES",
    "SCHEMA_URL",
    "SEMCONV",
    "Instruments",
    "capture_content",
    "context",  # the API's modules, for `cordstream.shell.telemetry` (only when AVAILABLE)
    "instruments",
    "trace",
    "tracer",
]

SEMCONV: Final = "1.41.0"
"""The version of OpenTelemetry's semantic conventions (GenAI included) the names follow."""
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV}"
CAPTURE_CONTENT: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# The conventions' advisory bucket boundaries: tokens, and seconds.
_TOKEN_BUCKETS: Final = [4.0**power for power in range(14)]
_SECOND_BUCKETS: Final = [0.01 * 2.0**power for power in range(14)]
# cordstream's own waits and latencies: milliseconds to a minute.
_SHORT_BUCKETS: Final = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]


@dataclass(frozen=True, slots=True)
class Instruments:
    """cordstream's metrics (created once, through the global meter provider)."""

    token_usage: Histogram
    duration: Histogram
    first_chunk: Histogram
    first_text: Histogram
    streams: Counter
    requests: Counter
    rate_limited: Counter
    budget_wait: Histogram
    stop_latency: Histogram
    tool_calls: Counter


@cache
def tracer() -> Tracer | None:
    """cordstream's tracer, or None without the OpenTelemetry API."""
    if not AVAILABLE:
        return None
    return trace.get_tracer("cordstream", __version__, schema_url=SCHEMA_URL)


@cache
def instruments() -> Instruments | None:
    """cordstream's instruments, or None without the OpenTelemetry API."""
    if not AVAILABLE:
        return None
    meter = metrics.get_meter("cordstream", __version__, schema_url=SCHEMA_URL)

    def histogram(name: str, unit: str, description: str, buckets: list[float]) -> Histogram:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
        )

    def counter(name: str, unit: str, description: str) -> Counter:
        return meter.create_counter(name, unit=unit, description=description)

    return Instruments(
        token_usage=histogram(
            "gen_ai.client.token.usage",
            "{token}",
            "Number of input and output tokens used",
            _TOKEN_BUCKETS,
        ),
        duration=histogram(
            "gen_ai.client.operation.duration", "s", "GenAI operation duration", _SECOND_BUCKETS
        ),
        first_chunk=histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            "s",
            "Time to receive the first chunk of the model's stream",
            _SECOND_BUCKETS,
        ),
        first_text=histogram(
            "cordstream.stream.time_to_first_text",
            "s",
            "Time from the start of a stream to the first text Discord accepted",
            _SECOND_BUCKETS,
        ),
        streams=counter("cordstream.streams", "{stream}", "Streams ended, by final status"),
        requests=counter(
            "cordstream.discord.requests",
            "{request}",
            "Discord requests made by streams, by route and outcome",
        ),
        rate_limited=counter(
            "cordstream.discord.rate_limited",
            "{response}",
            "Discord's 429 answers that reached cordstream, by route",
        ),
        budget_wait=histogram(
            "cordstream.discord.budget_wait",
            "s",
            "Time a stream's Discord requests waited for their turns in the budgets, per stream",
            _SHORT_BUCKETS,
        ),
        stop_latency=histogram(
            "cordstream.stop.latency",
            "s",
            "Time from a stop or follow-up request to the end of the stream it ended",
            _SHORT_BUCKETS,
        ),
        tool_calls=counter(
            "cordstream.tool.calls", "{call}", "Tool calls run by run_turn, by tool and outcome"
        ),
    )


def capture_content() -> bool:
    """Whether the application opted in to message contents on spans (redacted, G4)."""
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"


PROVIDER_NAMES: Final = {"openai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini"}
"""`gen_ai.provider.name` for the adapters' `name`; any other name is used as given."""
