"""The arithmetic of bench/pace.py's figures, from made-up records (no Discord, no clock)."""

from __future__ import annotations

import pytest

from bench.live import Stream
from bench.pace import ANSWERS, bound, longest_wait
from cordstream.shell.testing.emulator import Change

CHANNEL = 5
CURSOR = " ▌"


def test_the_bound_is_the_window_from_the_first_request_or_the_models_end() -> None:
    # 5 per 5 s: requests 1-5 by the first one's time, 6-10 five seconds later, and so on
    assert bound([1.0] * 5, last_chunk=0.5) == 1.0
    assert bound([1.0] * 6, last_chunk=0.5) == 6.0
    assert bound((1.0, *[9.0] * 10), last_chunk=0.5) == 11.0  # 11 requests: 1 + 2 × 5
    assert bound((1.0, 2.0), last_chunk=30.0) == 30.0  # the model wrote for longer
    assert bound([], last_chunk=3.0) == 3.0


def test_the_longest_wait_starts_at_the_first_visible_chunk() -> None:
    changes = [
        Change(30.5, "create", 1, "Hi ▌", CHANNEL),
        Change(31.6, "edit", 1, "Hi there ▌", CHANNEL),
        Change(31.9, "edit", 1, "Hi there ▌", CHANNEL),  # nothing new
        Change(34.0, "edit", 1, "Hi there, you.", CHANNEL),
    ]
    # 30 s of thinking first (chunks 0-2), then visible text from chunk 3 (at 30.0)
    stream = Stream([0.0, 10.0, 20.0, 30.0, 31.0, 32.0, 33.0], 3, changes, CURSOR)
    assert longest_wait(stream) == pytest.approx(1.4)  # 31.6 -> 33.0, the last chunk


def test_the_matrix_answers() -> None:
    assert set(ANSWERS) == {"short", "prose8k", "code5k", "think", "markdown", "30k"}
    assert len(ANSWERS["prose8k"]) == pytest.approx(8_000, abs=2)
    assert len(ANSWERS["code5k"]) == pytest.approx(5_000, rel=0.05)
    assert ANSWERS["code5k"].count("```") == 2
    assert ANSWERS["think"].startswith("<think>")
    assert len(ANSWERS["30k"]) == 30_000
