"""`python -m bench [--json] [--quick] [--no-live]`: print the project's figures, measured in one
run. The live matrix at Discord's limit (`bench.pace`, in virtual time, seconds) gives three
figures with targets and a section of its own; live delivery's real-time figures (`bench.live`,
about three minutes of real time, whatever `--quick` says) come last; `--no-live` leaves them
out, `python -m bench.live` and `python -m bench.pace` run only theirs.

A figure with a target (`TARGETS`, the bounds BENCHMARKS.md states) is printed with it and a
mark, `ok` or `MISSED`, and a last line counts them; a missed target is news, not a failure:
the exit status stays 0, since these machines are shared and a figure can be noisy."""

from __future__ import annotations

import argparse
import json
import operator
import platform
from collections.abc import Callable, Mapping
from typing import Final

from bench import buttons, cluster, core, live, load, pace, report, sdk, shell, telemetry

_LABELS = {
    "core_events_per_s": "text events/s through step",
    "core_floor_events_per_s": "events/s, minimal frozen-dataclass reducer",
    "core_ratio": "core cost per event / floor cost per event",
    "core_100kb_s": "100 KB answer in 1-8 char chunks, seconds",
    "core_1mb_s": "1 MB answer in 1-8 char chunks, seconds",
    "scaling_ratio_10x": "1 MB time / 100 KB time (10 = linear)",
    "live_core_ratio": "live delivery: core cost per event / floor cost per event",
    "live_scaling_ratio_10x": "live delivery: 1 MB time / 100 KB time (10 = linear)",
    "shell_chunks_per_s": "chunks/s through stream_to_discord, instant sink",
    "bare_iter_chunks_per_s": "chunks/s, bare async for over the same provider",
    "shell_overhead_ratio": "shell cost per chunk / bare iteration cost per chunk",
    "shell_yield_overhead_ratio": "the same, the loop turning before each chunk",
    **sdk.LABELS,
    **telemetry.LABELS,
    **cluster.LABELS,
    "stop_latency_ms_p50": "stop -> result, provider hanging, ms, p50",
    "stop_latency_ms_p99": "stop -> result, provider hanging, ms, p99",
    "timeout_overshoot_ms_p50": "deadline -> result, provider hanging, ms, p50",
    "timeout_overshoot_ms_p99": "deadline -> result, provider hanging, ms, p99",
    "concurrent_streams": "streams at once, each into its own channel of the emulator",
    "concurrent_wall_s": "wall seconds for all of them, first start to last result",
    "rss_per_stream_kb": "resident memory per live stream, KB",
    "global_limit_streams": "3-line answers at once, Discord's limits on (50/s global)",
    "global_limit_lost": "of them not complete, whole, in order, once",
    "global_limit_429s": "429s Discord answered them",
    "global_limit_time_ratio": "their virtual time / (requests / 50 per s) (ideal 1)",
    "discord_requests_per_10k_chars": "Discord requests per 10k chars of the demo answer",
    "naive_requests_per_10k_chars": "the same for a naive bot, one message per line",
    "discord_requests_vs_naive": "ours / naive",
    "button_stop_latency_ms_p50": "Stop click reaching the bot -> stream stopped, ms, p50",
    "button_stop_latency_ms_p99": "Stop click reaching the bot -> stopped, ms, p99",
    "live_lag_over_bound_s_max": "live matrix: answer complete -> Discord's bound, s, max",
    "live_longest_wait_s_max": "live matrix: longest wait without new text, s, max",
    "live_shared_channel_wait_s_max": "3 live streams in one channel: longest wait, s, max",
    "live_shared_channel_lag_over_bound_s_max": "3 live streams in one channel: last answer "
    "complete -> the channel's bound, s, max",
    "live_matrix_429s": "live matrix: requests answered 429",
}

# The figures with a target (BENCHMARKS.md and the README's table state them): how the figure
# must compare with its bound.
_COMPARE: Final[Mapping[str, Callable[[float, float], bool]]] = {
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}
TARGETS: Final[Mapping[str, tuple[str, float]]] = {
    "core_ratio": ("<=", 3),
    "scaling_ratio_10x": ("<=", 12),
    "shell_overhead_ratio": ("<=", 40),
    "sdk_overhead_ratio_openai": ("<=", 1.10),
    "sdk_overhead_ratio_anthropic": ("<=", 1.10),
    "sdk_overhead_ratio_gemini": ("<=", 1.10),
    "telemetry_overhead_ratio": ("<=", 1.05),
    "cross_process_stop_ms_p99": ("<=", 50),
    "cross_process_429s": ("==", 0),
    "stop_latency_ms_p99": ("<=", 50),
    "timeout_overshoot_ms_p99": ("<=", 50),
    "rss_per_stream_kb": ("<=", 200),
    "global_limit_lost": ("==", 0),
    "discord_requests_vs_naive": ("<", 1),
    "button_stop_latency_ms_p99": ("<=", 50),
    "live_lag_over_bound_s_max": ("<=", 0.2),
    "live_longest_wait_s_max": ("<=", 1.1),
    "live_matrix_429s": ("==", 0),
}


def met(key: str, value: float) -> bool | None:
    """Whether `value` meets the target of figure `key`; None when it has none."""
    if key not in TARGETS:
        return None
    how, bound = TARGETS[key]
    return _COMPARE[how](value, bound)


def line(key: str, value: float) -> str:
    """A figure's line: its label, its value and, when it has a target, the target and the
    mark (`target <= 3: ok`, `target <= 3: MISSED`)."""
    shown = f"  {_LABELS[key]:<60} {value:>14,.3f}"
    verdict = met(key, value)
    if verdict is None:
        return shown
    how, bound = TARGETS[key]
    return f"{shown}  target {how} {bound:g}: {'ok' if verdict else 'MISSED'}"


def summary(figures: Mapping[str, float]) -> str:
    """`targets: 9 of 9 met`, or which were missed."""
    judged = {key: met(key, value) for key, value in figures.items() if key in TARGETS}
    missed = [key for key, verdict in judged.items() if not verdict]
    counted = f"targets: {len(judged) - len(missed)} of {len(judged)} met"
    return f"{counted}; MISSED: {', '.join(missed)}" if missed else counted


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, 100 streams")
    parser.add_argument(
        "--streams", type=int, default=1000, help="concurrent streams to run at once (1000)"
    )
    parser.add_argument(
        "--no-live", action="store_true", help="leave out live delivery's figures (bench.live)"
    )
    args = parser.parse_args()
    figures = (
        core.measure(quick=args.quick)
        | shell.measure(quick=args.quick)
        | sdk.measure(quick=args.quick)
        | telemetry.measure_apart()  # its own process: it sets OpenTelemetry's global providers
        | cluster.measure(
            runs=30 if args.quick else cluster.RUNS, jobs=16 if args.quick else cluster.JOBS
        )
        | load.measure(quick=args.quick, streams=args.streams)
        | buttons.measure(clicks=50 if args.quick else buttons.CLICKS)
    )
    matrix = pace.measure()  # virtual time: seconds of real time, whatever `--quick` says
    figures |= {key: value for key, value in matrix.items() if key in _LABELS}
    live_figures = {} if args.no_live else live.measure()
    if args.json:
        print(json.dumps(matrix | figures | live_figures))
        return
    print(
        f"cordstream benchmarks on {platform.python_implementation()} {platform.python_version()}"
    )
    for key, value in figures.items():
        print(line(key, value))
    print(summary(figures))
    print("live delivery at Discord's limit (bench.pace: rate limits on, virtual time)")
    report({k: v for k, v in matrix.items() if k not in _LABELS}, pace.label, width=78)
    if live_figures:
        print("live delivery (bench.live: Discord's rate limits on, real time)")
        report(live_figures, live.label, width=78)


if __name__ == "__main__":
    main()
