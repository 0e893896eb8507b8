"""The `cordstream` command.

`cordstream demo` shows a stream end to end without any token or key; `cordstream chat`
streams a real model's answer (any of the provider adapters) into the local Discord emulator
or a real channel.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import discord

from cordstream.shell import chat
from cordstream.shell.demo import Options, render, run_demo


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
    chat.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "chat":
        options = chat.options_from(args)
        problem = chat.check(options)
        if problem is not None:
            parser.error(problem)
        try:
            turn = asyncio.run(chat.run_chat(options))
        except ImportError as missing:  # the provider's extra is not installed
            parser.exit(2, f"cordstream chat: {missing}\n")
        except (discord.DiscordException, ValueError) as refused:  # bad token, unknown channel
            parser.exit(2, f"cordstream chat: {type(refused).__name__}: {refused}\n")
        return 0 if turn.status == "completed" else 1
    if args.speed <= 0:
        parser.error("--speed must be positive")
    demo_options = Options(
        speed=args.speed,
        humanizer=args.humanizer,
        stop_after=args.stop_after,
        follow_up_after=args.follow_up_after,
        hang=args.hang,
        timeout=args.timeout,
    )
    print("cordstream demo: a scripted model → StreamOrchestrator → discord.py → local Discord")
    result, messages, _ = asyncio.run(run_demo(demo_options))
    print(render(result, messages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
