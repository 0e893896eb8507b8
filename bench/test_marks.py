"""`python -m bench` marks each figure that has a target `ok` or `MISSED`, and counts them.

A test of the benchmark's own printing, beside it (pytest collects bench/ as well as tests/),
on made-up figures: the benchmark itself takes minutes."""

from __future__ import annotations

from bench.__main__ import _LABELS, TARGETS, line, met, summary


def test_every_target_belongs_to_a_figure_the_benchmark_prints() -> None:
    assert set(TARGETS) <= set(_LABELS)


def test_a_figure_within_its_target_is_ok_and_one_beyond_it_is_missed() -> None:
    assert line("core_ratio", 2.8).endswith("2.800  target <= 3: ok")
    assert line("core_ratio", 3.0).endswith("target <= 3: ok")  # the bound itself is allowed
    assert line("core_ratio", 3.01).endswith("target <= 3: MISSED")
    assert line("discord_requests_vs_naive", 1.0).endswith("target < 1: MISSED")
    assert line("global_limit_lost", 0).endswith("target == 0: ok")
    assert line("global_limit_lost", 1).endswith("target == 0: MISSED")
    assert met("core_events_per_s", 1e6) is None
    assert "target" not in line("core_events_per_s", 1e6)


def test_the_last_line_counts_the_targets_and_names_the_missed() -> None:
    figures = {"core_ratio": 2.5, "stop_latency_ms_p99": 61.0, "core_events_per_s": 1e6}
    assert summary(figures) == "targets: 1 of 2 met; MISSED: stop_latency_ms_p99"
    assert summary({"core_ratio": 2.5}) == "targets: 1 of 1 met"
