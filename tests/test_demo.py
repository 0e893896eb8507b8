"""`cordstream demo`: the built-in answer through the real shell, discord.py and the emulator.

Virtual time (looptime): the scripted provider's pace, the inactivity timeout and the
humanizer's pauses cost no real seconds.
"""

from __future__ import annotations

import pytest

from cordstream.domain import TokenUsage
from cordstream.shell.cli import main
from cordstream.shell.cli.demo import ANSWER, Options, run_demo
from tests.answers import as_written, fences_balanced


def quiet(_: str) -> None:
    """Progress lines are for people; tests read the transcript."""


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_demo_delivers_the_whole_answer_as_a_reply() -> None:
    result, messages, provider = await run_demo(Options(), quiet)
    assert result.status == "completed"
    contents = [m.content for m in messages]
    assert result.messages == tuple(contents)
    assert result.accumulated_text == "\n".join(contents)
    as_written(contents, ANSWER.split("</think>", 1)[1], fences=True)
    assert result.usage == TokenUsage(412, 1337)
    assert all(len(c) <= 1950 and fences_balanced(c) for c in contents)
    assert messages[0].message_reference is not None  # F1
    assert not any(m.pings.anyone for m in messages)
    assert provider.closed  # B10


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(
    ("options", "status"),
    [
        (Options(stop_after=1.0), "stopped_by_user"),
        (Options(follow_up_after=1.0), "follow_up_interrupt"),
        (Options(hang=True), "timeout"),
        (Options(humanizer=2, speed=2000), "completed"),
        (Options(humanizer=0), "completed"),
    ],
    ids=["stop", "follow-up", "hang", "humanizer-2", "humanizer-0"],
)
async def test_demo_options_show_their_outcome(options: Options, status: str) -> None:
    result, _, provider = await run_demo(options, quiet)
    assert result.status == status
    assert provider.closed


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_demo_prints_each_message_once_as_the_channel_receives_it() -> None:
    printed: list[str] = []
    _, messages, _ = await run_demo(Options(humanizer=2), printed.append)
    arrivals = [line for line in printed if "channel receives" in line]
    assert len(arrivals) == len(messages)
    assert arrivals[0].endswith(
        "channel receives message (46 chars) as a reply: "
        "Here is how **cordstream** delivers an answer."
    )
    previews = [line.split(": ", 1)[1].removesuffix("…") for line in arrivals]
    assert all(p in m.content for p, m in zip(previews, messages, strict=True))


def test_demo_command_prints_progress_transcript_and_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--speed", "2000"]) == 0
    out = capsys.readouterr().out
    assert "channel receives message" in out
    assert "#general" in out
    assert "status:          completed" in out
