"""Benchmarks: scripts that print figures (`make bench`), never tests that fail when slow."""

from __future__ import annotations

import argparse
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


def labels(what: Mapping[str, str], *, prefix: str = "", unit: str = "") -> Callable[[str], str]:
    """A `label` for keys `{prefix}{scenario}_{figure}`: the scenario (underscores as spaces,
    then `unit`) and what the figure means (`what[figure]`); any other key as it is."""

    def label(key: str) -> str:
        for figure, meaning in what.items():
            if key.endswith("_" + figure) and key.startswith(prefix):
                scenario = key.removeprefix(prefix).removesuffix("_" + figure).replace("_", " ")
                return f"{scenario}{unit}: {meaning}"
        return key

    return label


def command(
    prog: str,
    doc: str | None,
    measure: Callable[[], Mapping[str, float]],
    label: Callable[[str], str],
) -> None:
    """A benchmark module's `main`: `--json` or a line per figure."""
    parser = argparse.ArgumentParser(prog=prog, description=doc)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    report(measure(), label, width=78, as_json=args.json)
