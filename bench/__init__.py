"""Benchmarks: scripts that print figures (`make bench`), never tests that fail when slow."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping


def report(
    figures: Mapping[str, float], label: Callable[[str], str], *, width: int, as_json: bool = False
) -> None:
    """Print `figures`: one JSON object with `as_json`, else a line each, its label (`label` of
    its key) padded to `width`."""
    if as_json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        print(f"  {label(key):<{width}} {value:>10,.3f}")
