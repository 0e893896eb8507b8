"""The `cordstream` command.

`cordstream demo` shows a stream end to end without any token or key; `cordstream chat`
streams a real model's answer (any of the provider adapters) into the local Discord emulator
or a real channel. `cordstream --version` prints the package's version.

It fails like a tool: a bad option is an argparse error naming the subcommand, `cordstream
chat: error: …` (exit 2); a problem outside the command (a server that cannot be reached, a
refused token, a missing SDK) is one line on stderr, `cordstream chat: cannot reach …` (exit
2), and a chat whose model failed says so in one line before anything else is printed (exit
1 or 2). Ctrl-C is the entry point's (`cordstream.__main__`): one line, `cordstream demo:
interrupted`, and exit 130, after the emulator, the Discord client and the model's client
are closed (`asyncio.run` turns the first Ctrl-C into a cancellation of the command).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import discord

# The command line, apart from the library: `demo` (the embedded default), `botdemo` (`demo
# --bot`: the example bot, `bot`, with simulated users), `chat` (a real model), `console` (the
# printing and local-Discord set-up they share). The test kit (the local Discord, the scripted
# model) is imported only when a demo, or chat into the local Discord, runs.
from cordstream import __version__
from cordstream.shell.cli import chat, demo
from cordstream.shell.cli.console import Failure, Log, render, say, show_logs

T = TypeVar("T")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cordstream", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo.add_parser(commands)
    chat.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with `argv` (default: the process's arguments); the exit status. A bad
    option raises SystemExit(2) after argparse's message; a Ctrl-C is a KeyboardInterrupt,
    which the entry point (`cordstream.__main__`) turns into one line and 130."""
    args = build_parser().parse_args(argv)
    command: argparse.ArgumentParser = args.command_parser  # errors name the subcommand
    name = command.prog
    show_logs(args.log_level)
    try:
        if args.command == "chat":
            return _chat(command, args, name)
        if args.bot:
            return _bot_demo(command, args)
        return _demo(args)
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
        _complain(name, line)  # first: the channel and the turn follow, when they say more
    if line is None or ran.turn.messages_sent:
        say(ran.report)
    return status


def _demo(args: argparse.Namespace) -> int:
    options = demo.options_from(args)
    title = f"cordstream demo: {options.delivery} delivery"
    first = f"{title}: a scripted model → StreamOrchestrator → discord.py → local Discord"
    view = demo.Terminal.on_stdout(say, title) if _terminal() else Log(say)
    result, messages, _ = asyncio.run(_said(first, lambda: demo.run_demo(options, view)))
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
    first = (
        f"{title}: the example bot on the local Discord's gateway, a scripted model; alice, bob "
        "and carol ask, interrupt and press Stop"
    )
    view = demo.Terminal.on_stdout(say, title) if _terminal() else Log(say)
    speed = botdemo.SPEED if args.speed is None else args.speed
    ran = asyncio.run(_said(first, lambda: botdemo.run_bot_demo(view, speed=speed)))
    say(botdemo.render(ran))
    return 0


async def _said(line: str, run: Callable[[], Awaitable[T]]) -> T:
    """`line` printed, then `run()` awaited, both in the running loop: a Ctrl-C once the line
    is out is `asyncio.run`'s cancellation, never a `KeyboardInterrupt` inside the loop's own
    start-up (which left a coroutine never awaited and a half-built loop to warn about)."""
    say(line)
    return await run()


def _terminal() -> bool:
    """Whether stdout is a terminal that takes ANSI cursor movement (else: a plain log)."""
    return sys.stdout.isatty() and os.environ.get("TERM", "") not in ("", "dumb")


def _complain(name: str, line: str) -> None:
    print(f"{name}: {line}", file=sys.stderr, flush=True)
