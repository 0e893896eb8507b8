"""`examples/cluster`, whole: a gateway process and two generation workers, each a real OS
process with its own discord.py client, fed through a real `redis-server`, against the local
Discord in this process with Discord's rate limits on (SPEC N1, N2, K2, C9, C10).

The story is the demo's (`examples.cluster.story`): users act through the emulator's gateway,
the gateway process takes their messages, commands and clicks, the workers stream. Every wait
is on a condition (a message streaming, a click answered, a worker's line); Redis keeps its own
clock, so this runs in real time (a few seconds).
"""

from __future__ import annotations

import pytest

from cordstream.shell.buttons import STOP_REFUSED
from cordstream.shell.cli.console import Log
from examples.cluster.story import DICE, GREEN_TEA, TEA, run_cluster_demo

pytestmark = pytest.mark.asyncio


async def test_N1_C9_C10_K2_a_gateway_stops_and_interrupts_answers_its_workers_stream() -> None:
    lines: list[str] = []
    demo = await run_cluster_demo(Log(lines.append), speed=200.0)
    names = demo.names
    ended = {(names[end.user], end.question): end for end in demo.ended}
    assert sorted(ended) == [("alice", GREEN_TEA), ("alice", TEA), ("bob", DICE)]
    # alice's new message ended her answer alone (C9), in whichever worker streamed it;
    # bob's Stop click, taken by the gateway process, ended his answer in its worker (K2).
    assert ended["alice", TEA].status == "follow_up_interrupt"
    assert ended["bob", DICE].status == "stopped_by_user"
    assert ended["alice", GREEN_TEA].status == "completed"
    order = [(names[end.user], end.question) for end in demo.ended]
    assert order.index(("alice", TEA)) < order.index(("bob", DICE))  # bob's outlived it
    # carol's click and her /stop of alice's answer were refused by the gateway (C10),
    # privately, and stopped nothing.
    alice = next(who for who, name in names.items() if name == "alice")
    assert demo.refusal == [STOP_REFUSED, f"Only <@{alice}> or a moderator can stop that answer."]
    # Streamed by the workers, not by the gateway or this process.
    assert {end.worker for end in demo.ended} <= set(demo.workers)
    assert demo.gateway not in demo.workers
    # Nothing lost, nothing left: each answer's text is in the channel, no Stop button is
    # left on any message, and the shared budgets kept every process out of Discord's 429s.
    shown = "\n".join(message.content for message in demo.messages)
    for end in demo.ended:
        assert end.text
        assert end.text in shown
    assert not [message.id for message in demo.messages if message.components]
    assert demo.rate_limited == 0
