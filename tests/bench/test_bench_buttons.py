"""bench/buttons.py runs: a few real Stop clicks through the gateway, each stopping its answer.

The script runs as a user runs it (`python -m bench.buttons --json --clicks 5`, from the tree
this file is in), and the test reads the JSON object it prints."""

from __future__ import annotations

import json

from tests.bench import run


def test_the_stop_button_figure_is_measured_from_real_clicks() -> None:
    # The script asserts that every click stopped its answer (`stopped_by_user`) and finds the
    # moment each click reached the bot; a few clicks in real time.
    figures = json.loads(run("bench.buttons", "--json", "--clicks", "5"))
    assert set(figures) == {"button_stop_latency_ms_p50", "button_stop_latency_ms_p99"}
    assert 0 <= figures["button_stop_latency_ms_p50"] <= figures["button_stop_latency_ms_p99"]
    # A sanity bound: tests/shell/test_interactions.py pins K2's 50 ms on virtual time.
    assert figures["button_stop_latency_ms_p99"] < 1000
