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
import os
import sys
from collections.abc import Sequence

import discord

# The command line, apart from the library: `demo` (the embedded default), `botdemo` (`demo
# --bot`: the example bot, `bot`, with simulated users), `chat` (a real model), `console` (the
# printing and local-Discord set-up they share). The test kit (the local Discord, the scripted
# model) is imported only when a demo, or chat into the local Discord, runs.
from cordstream.shell.cli import chat, demo
from cordstream.shell.cli.console import Failure, Log, render, say

# The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cordstream", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo.add_parser(commands)
    chat.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    name = f"{parser.prog} {args.command}"
    try:
        if args.command == "chat":
            return _chat(parser, args, name)
        if args.bot:
            return _bot_demo(args.demo_parser, args)
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
    options = demo.options_from(args)
    title = f"cordstream demo: {options.delivery} delivery"
    say(f"{title}: a scripted model → StreamOrchestrator → discord.py → local Discord")
    view = demo.Terminal.on_stdout(say, title) if _terminal() else Log(say)
    result, messages, _ = asyncio.run(demo.run_demo(options, view))
    say(render(result, messages))
    return 0


def _bot_demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.stop_after is not None or args.follow_up_after is not None or args.hang:
        parser.error(
            "--bot plays its own story: --stop-after, --follow-up-after, --hang do not apply"
        )
    if args.delivery != "live":
        parser.error("--bot streams with live delivery (its Stop button is a live message's)")
    from cordstream.shell.cli import botdemo  # noqa: PLC0415 (the test kit's gateway)

    title = "cordstream demo --bot"
    say(
        f"{title}: the example bot on the local Discord's gateway, a scripted model; alice, bob "
        "and carol ask, interrupt and press Stop"
    )
    view = demo.Terminal.on_stdout(say, title) if _terminal() else Log(say)
    speed = botdemo.SPEED if args.speed is None else args.speed
    ran = asyncio.run(botdemo.run_bot_demo(view, speed=speed))
    say(botdemo.render(ran))
    return 0


def _terminal() -> bool:
    """Whether stdout is a terminal that takes ANSI cursor movement (else: a plain log)."""
    return sys.stdout.isatty() and os.environ.get("TERM", "") not in ("", "dumb")


def _complain(name: str, line: str) -> None:
    print(f"{name}: {line}", file=sys.stderr, flush=True)
