"""The `cordstream` command. `cordstream demo` shows a stream end to end without any token."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from shell.demo import Options, render, run_demo


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cordstream", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="stream a built-in answer into a local Discord emulator and print it",
        description="Stream a built-in answer (a think block, prose, a long paragraph, a code "
        "block longer than one message, usage on a trailing chunk) through the real shell and "
        "discord.py into a local Discord emulator on 127.0.0.1, and print the channel as a user "
        "sees it, then the StreamResult. No token or key needed.",
    )
    demo.add_argument("--speed", type=float, default=200.0, help="chunks per second (200)")
    demo.add_argument("--humanizer", type=int, default=1, choices=(0, 1, 2, 3))
    demo.add_argument("--stop-after", type=float, metavar="S", help="a user /stop after S seconds")
    demo.add_argument(
        "--follow-up-after", type=float, metavar="S", help="a new user message after S seconds"
    )
    demo.add_argument(
        "--hang", action="store_true", help="the provider stops yielding a third of the way in"
    )
    demo.add_argument(
        "--timeout", type=float, default=3.0, help="inactivity timeout in seconds (3)"
    )
    args = parser.parse_args(argv)
    if args.speed <= 0:
        parser.error("--speed must be positive")
    options = Options(
        speed=args.speed,
        humanizer=args.humanizer,
        stop_after=args.stop_after,
        follow_up_after=args.follow_up_after,
        hang=args.hang,
        timeout=args.timeout,
    )
    print("cordstream demo: a scripted model → StreamOrchestrator → discord.py → local Discord")
    result, messages, _ = asyncio.run(run_demo(options))
    print(render(result, messages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
