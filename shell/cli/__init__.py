"""The `cordstream` command.

`cordstream demo` shows a stream end to end without any token or key; `cordstream chat`
streams a real model's answer (any of the provider adapters) into the local Discord emulator
or a real channel.

It fails like a tool: a bad option is an argparse error (exit 2); a problem outside the
command (a server that cannot be reached, a refused token, a missing SDK) is one line on
stderr, `cordstream chat: cannot reach …` (exit 2); Ctrl-C is `cordstream demo: interrupted`
(exit 130), after the emulator, the Discord client and the model's client are closed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import discord

# The command line, apart from the library: `demo` (the embedded default), `chat` (a real
# model), `console` (the printing and local-Discord set-up both share).
from cordstream.shell.cli import chat
from cordstream.shell.cli.console import (
    Failure,
    per_second,
    positive_seconds,
    say,
    seconds_from_now,
)
from cordstream.shell.cli.demo import Options, render, run_demo

# The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
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
    demo.add_argument("--speed", type=per_second, default=200.0, help="chunks per second (200)")
    demo.add_argument("--humanizer", type=int, default=1, choices=(0, 1, 2, 3))
    demo.add_argument(
        "--stop-after", type=seconds_from_now, metavar="S", help="a user /stop after S seconds"
    )
    demo.add_argument(
        "--follow-up-after",
        type=seconds_from_now,
        metavar="S",
        help="a new user message after S seconds",
    )
    demo.add_argument(
        "--hang", action="store_true", help="the provider stops yielding a third of the way in"
    )
    demo.add_argument(
        "--timeout", type=positive_seconds, default=3.0, help="inactivity timeout in seconds (3)"
    )
    chat.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    name = f"{parser.prog} {args.command}"
    try:
        if args.command == "chat":
            return _chat(parser, args, name)
        return _demo(args)
    except KeyboardInterrupt:
        # asyncio.run cancelled the command on the first Ctrl-C and waited for its cleanup.
        _complain(name, "interrupted")
        return INTERRUPTED
    except Failure as failure:
        _complain(name, str(failure))
        return failure.status


def _chat(parser: argparse.ArgumentParser, args: argparse.Namespace, name: str) -> int:
    options = chat.options_from(args)
    problem = chat.check(options)
    if problem is not None:
        parser.error(problem)
    try:
        ran = asyncio.run(chat.run(options, say))
    except (discord.DiscordException, ValueError) as refused:  # none expected: the last resort
        raise Failure(f"{type(refused).__name__}: {refused}") from refused
    status, line = chat.outcome(ran)
    if line is not None:
        _complain(name, line)
    return status


def _demo(args: argparse.Namespace) -> int:
    options = Options(
        speed=args.speed,
        humanizer=args.humanizer,
        stop_after=args.stop_after,
        follow_up_after=args.follow_up_after,
        hang=args.hang,
        timeout=args.timeout,
    )
    say("cordstream demo: a scripted model → StreamOrchestrator → discord.py → local Discord")
    result, messages, _ = asyncio.run(run_demo(options, say))
    say(render(result, messages))
    return 0


def _complain(name: str, line: str) -> None:
    print(f"{name}: {line}", file=sys.stderr, flush=True)
