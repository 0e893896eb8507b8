"""`python -m examples.cluster` (`make demo ARGS=--cluster`): the story of `story`, printed."""

from __future__ import annotations

import asyncio
import sys

from cordstream.shell.cli.console import Log, say
from examples.cluster.story import render, run_cluster_demo


def main() -> int:
    say(
        "cordstream demo --cluster: a gateway process and two workers fed through Redis, on the "
        "local Discord; alice and bob ask, alice interrupts, bob presses Stop"
    )
    demo = asyncio.run(run_cluster_demo(Log(say)))
    say(render(demo))
    return 0


if __name__ == "__main__":
    sys.exit(main())
