"""`python -m bench.sdk` compares like with like: each SDK's bare loop reads the bench's answer
whole from its wire format, and the adapter's stream of the same answer completes.

Beside the benchmark (pytest collects bench/ as well as tests/), on a short answer: the
benchmark itself takes a minute. `pairs_of` checks both paths' output on every run."""

from __future__ import annotations

import pytest

from bench.sdk import SDKS, pairs_of


@pytest.mark.parametrize("sdk", SDKS)
def test_both_paths_read_the_whole_answer_and_are_timed(sdk: str) -> None:
    times = pairs_of(sdk, pairs=2, chunks=40)
    assert len(times) == 2
    assert all(bare > 0 and adapter > 0 for bare, adapter in times)
