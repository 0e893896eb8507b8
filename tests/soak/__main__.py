"""`python -m tests.soak [--streams N] [--seed S] ... [--json]`: the soak's command line.

Prints the report (or one JSON object) and exits 1 when a must-be-zero figure is not zero.
docs/soak.md lists the options and the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Final

from tests.soak.phases import soak
from tests.soak.report import render

DESCRIPTION: Final = "A soak of the real shell under faults, on looptime's virtual clock."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=DESCRIPTION)
    parser.add_argument("--streams", type=int, default=5000, help="streams to run (5000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the plans (0)")
    parser.add_argument("--channels", type=int, default=8, help="concurrent channels (8)")
    parser.add_argument(
        "--limited", type=int, default=1000, help="streams under Discord's real limits (1000)"
    )
    parser.add_argument(
        "--limited-channels", type=int, default=250, help="their concurrent channels (250)"
    )
    parser.add_argument(
        "--answers", type=int, default=1000, help="3-line answers at once, at 50/s (1000)"
    )
    parser.add_argument(
        "--interactions",
        type=int,
        default=500,
        help="streams into slash commands' interactions, through a bot on the gateway (500)",
    )
    parser.add_argument(
        "--interaction-channels", type=int, default=20, help="their concurrent channels (20)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    report = soak(
        args.streams,
        args.seed,
        args.channels,
        limited=args.limited,
        limited_channels=args.limited_channels,
        answers=args.answers,
        interactions=args.interactions,
        interaction_channels=args.interaction_channels,
    )
    print(json.dumps(report.as_json()) if args.json else render(report))
    return 1 if report.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
