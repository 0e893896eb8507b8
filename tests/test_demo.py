"""`cordstream demo` on the built-in answer: each option shows its outcome."""

from __future__ import annotations

import pytest

from domain import TokenUsage
from shell.cli import main
from shell.demo import ANSWER, Options, simulate
from tests.answers import fences_balanced, same_text


def test_demo_delivers_the_whole_answer() -> None:
    result, channel = simulate(Options())
    assert result.status == "completed"
    assert result.accumulated_text == "".join(channel.messages)
    visible = ANSWER.split("</think>", 1)[1]
    assert same_text("\n".join(channel.messages), visible)
    assert result.usage == TokenUsage(412, 1337)
    assert all(len(m) <= 1950 and fences_balanced(m) for m in channel.messages)


@pytest.mark.parametrize(
    ("options", "status"),
    [
        (Options(stop_after=1.0), "stopped_by_user"),
        (Options(follow_up_after=1.0), "follow_up_interrupt"),
        (Options(hang=True), "timeout"),
        (Options(humanizer=2), "completed"),
        (Options(humanizer=0), "completed"),
    ],
)
def test_demo_options_show_their_outcome(options: Options, status: str) -> None:
    result, _ = simulate(options)
    assert result.status == status


def test_demo_command_prints_transcript_and_result(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--speed", "500"]) == 0
    out = capsys.readouterr().out
    assert "#demo-channel" in out
    assert "status:          completed" in out
