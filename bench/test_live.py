"""The arithmetic of bench/live.py's figures, from a made-up history (no Discord, no clock).

A test of the benchmark's own code, beside it (pytest collects bench/ as well as tests/); the
benchmark itself takes minutes of real time and prints numbers, so no test runs it."""

from __future__ import annotations

import pytest

from bench.live import Stream, figures, first_visible, long_answer, pieces, request_figures
from cordstream.shell.testing import RecordedRequest
from cordstream.shell.testing.emulator import Change, RouteKind

CHANNEL = 5
CURSOR = " ▌"


def test_the_figures_of_a_live_stream() -> None:
    changes = [
        Change(10.7, "create", 1, "Hello ▌", CHANNEL),  # the first text: 0.2 s after its chunk
        Change(11.0, "edit", 1, "Hello ▌", CHANNEL),  # nothing new
        Change(11.2, "edit", 1, "Hello there ▌", CHANNEL),
        Change(11.9, "create", 2, "", CHANNEL, ({"title": "note"},)),  # an embed: no text
        Change(12.6, "edit", 1, "Hello there.", CHANNEL),  # the final edit: complete
    ]
    stream = Stream([10.0, 10.5, 11.0, 11.5, 12.0], 1, changes, CURSOR)
    assert figures(stream) == {
        "first_text_s": pytest.approx(0.2),
        "longest_wait_s": pytest.approx(0.8),  # 11.2 (new text) -> 12.0 (the last chunk)
        "lag_s": pytest.approx(0.6),
        "messages": 1.0,
    }


def test_the_wait_for_the_first_text_counts_and_a_deleted_message_shows_nothing() -> None:
    changes = [
        Change(11.5, "create", 1, "Hi", CHANNEL),
        Change(11.6, "delete", 1, "Hi", CHANNEL),
        Change(11.8, "create", 2, "Hi", CHANNEL),  # new text again: the old one is gone
    ]
    found = figures(Stream([10.0, 12.0], 0, changes, CURSOR))
    assert found["longest_wait_s"] == pytest.approx(1.5)  # the first chunk -> the first text
    assert found["messages"] == 2.0
    with pytest.raises(ValueError, match="never showed"):
        figures(Stream([10.0], 0, [Change(11.0, "create", 3, " ▌", CHANNEL)], CURSOR))


def _request(kind: RouteKind, status: int, channel_id: int = CHANNEL) -> RecordedRequest:
    return RecordedRequest("POST", "/", kind, channel_id, None, {}, 0.0, status)


def test_request_figures_count_message_requests_of_the_channel_and_every_429() -> None:
    requests = [
        _request("send", 200),
        _request("edit", 429),
        _request("typing", 429),
        _request("send", 200, channel_id=6),
    ]
    assert request_figures(requests, CHANNEL, 20_000) == {
        "requests_per_10k_chars": 1.0,
        "429s": 2.0,
    }


def test_the_answers_pieces() -> None:
    answer = long_answer()
    assert len(answer) == 30_000
    assert answer.count("```") == 8  # four code blocks, each closed
    assert "".join(pieces(answer, 25)) == answer
    assert len(pieces(answer, 25)) == 1_200
    assert first_visible("<think>hm</think>\n\nHello") == len("<think>hm</think>\n\n")
    assert first_visible("Hello") == 0
