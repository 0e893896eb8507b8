"""`cordstream` (the console script) and `python -m cordstream`: the command, Ctrl-C included.

The command itself is `cordstream.shell.cli`, which imports discord.py, aiohttp and the
library: about a second of loading, during which a Ctrl-C would end in a `KeyboardInterrupt`
traceback from whichever module was loading. So this module imports nothing but the standard
library, and loads the command inside the `try` that runs it. A Ctrl-C at any moment from
then on (loading, parsing the options, starting the local Discord, streaming, printing) is
one line on stderr, `cordstream demo: interrupted`, and exit status 130: while the command
runs, `asyncio.run` turns the first Ctrl-C into a cancellation, the command closes what it
opened, and the `KeyboardInterrupt` arrives here. Once the command has returned, or the line
is printed, Ctrl-C is ignored: there is nothing left to stop, only the exit.

Not covered: the interpreter's own start-up before this module runs (tens of milliseconds),
and `python -m cordstream.shell.cli`, which loads the library before any of its code runs.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

# The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `cordstream` command with `argv` (default: the process's arguments) and return
    its exit status; a Ctrl-C is 130, after one line on stderr. The process's entry point: it
    leaves Ctrl-C ignored when it returns."""
    given = sys.argv[1:] if argv is None else list(argv)
    try:
        from cordstream.shell.cli import main as command  # noqa: PLC0415 - the second of loading

        status = command(given)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"{command_name(given)}: interrupted", file=sys.stderr, flush=True)
        return INTERRUPTED
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return status


def command_name(argv: Sequence[str]) -> str:
    """`cordstream demo` for `demo --hang`: the program and its subcommand, as the errors of
    `cordstream.shell.cli` name it (`cordstream` alone when no subcommand was given)."""
    first = next(iter(argv), "-")
    return "cordstream" if first.startswith("-") else f"cordstream {first}"


if __name__ == "__main__":
    sys.exit(main())
