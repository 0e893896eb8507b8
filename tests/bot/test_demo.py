"""`cordstream demo`: the built-in answer through the real shell, discord.py and the emulator.

Virtual time (looptime): the scripted provider's pace, the inactivity timeout and the
humanizer's pauses cost no real seconds. Live delivery is the default; what is checked of it
here holds for messages delivery too (the answer arrives whole, each message's last state is
what the log shows last), so it does not depend on how live delivery paces its edits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

import discord
import looptime
import pytest

from cordstream.domain import StreamResult, TokenUsage
from cordstream.domain.config import Delivery
from cordstream.shell import TurnResult
from cordstream.shell.bot import Question
from cordstream.shell.buttons import STOP_REFUSED
from cordstream.shell.cli import botdemo, demo, main
from cordstream.shell.cli.console import Log
from cordstream.shell.cli.demo import ANSWER, Options, Terminal, run_demo
from cordstream.shell.testing.emulator import Change, ChangeKind, Pings, SentMessage
from tests.support.answers import as_written, fences_balanced

DELIVERIES: list[Delivery] = ["live", "messages"]
CURSOR = "\u258c"
T = TypeVar("T")


def quiet() -> Log:
    """Progress lines are for people; tests read the transcript."""
    return Log(lambda _: None)


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("delivery", DELIVERIES)
async def test_demo_delivers_the_whole_answer_as_a_reply(delivery: Delivery) -> None:
    result, messages, provider = await run_demo(Options(delivery=delivery), quiet())
    assert result.status == "completed"
    contents = [m.content for m in messages]
    assert result.messages == tuple(contents)
    assert result.accumulated_text == "\n".join(contents)
    as_written(contents, ANSWER.split("</think>", 1)[1], fences=True)
    assert not any(CURSOR in c for c in contents)  # no streaming cursor left behind (L4)
    assert result.usage == TokenUsage(412, 1337)
    assert all(len(c) <= 1950 and fences_balanced(c) for c in contents)
    assert messages[0].message_reference is not None  # F1
    assert not any(m.pings.anyone for m in messages)
    assert provider.closed  # B10


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("degree", [0, 1, 2, 3])
@pytest.mark.parametrize("delivery", DELIVERIES)
async def test_no_two_messages_of_the_demo_are_alike_and_none_is_a_lone_emoji(
    delivery: Delivery, degree: int
) -> None:
    """The demo must not look like a bug: a message that repeats another reads as a duplicate
    send, and an emoji or a mark alone reads as a stray one, in every delivery, at every
    humanizer degree (live delivery ignores the degree)."""
    result, messages, _ = await run_demo(Options(delivery=delivery, humanizer=degree), quiet())
    assert result.status == "completed"
    contents = [m.content for m in messages]
    assert len(contents) > 1
    assert [c for c in contents if contents.count(c) > 1] == []
    assert [c for c in contents if not any(char.isalnum() for char in c)] == []


def test_no_sentence_of_the_demo_answer_is_written_twice() -> None:
    prose = ANSWER.split("</think>", 1)[1].split("```", 1)[0] + ANSWER.rsplit("```", 1)[1]
    sentences = [s for s in re.split(r"(?<=[.!?:])\s+", prose) if s]
    assert len(sentences) > 10
    assert [s for s in sentences if sentences.count(s) > 1] == []


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("delivery", DELIVERIES)
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
async def test_demo_options_show_their_outcome(
    options: Options, status: str, delivery: Delivery
) -> None:
    options.delivery = delivery
    printed: list[str] = []
    result, messages, provider = await run_demo(options, Log(printed.append))
    assert result.status == status
    assert provider.closed
    assert not any(CURSOR in m.content for m in messages)
    action = {"stopped_by_user": "user runs /stop", "follow_up_interrupt": "user sends a new"}
    if status in action:
        assert sum(action[status] in line for line in printed) == 1


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_with_messages_delivery_the_log_has_each_message_once() -> None:
    printed: list[str] = []
    _, messages, _ = await run_demo(Options(humanizer=2, delivery="messages"), Log(printed.append))
    assert len(printed) == len(messages)
    assert all("channel receives message" in line for line in printed)
    assert printed[0].endswith(
        "channel receives message 1 (46 chars) as a reply: "
        "Here is how **cordstream** delivers an answer."
    )
    previews = [line.split(": ", 1)[1].removesuffix("…") for line in printed]
    assert all(p in m.content for p, m in zip(previews, messages, strict=True))


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("delivery", DELIVERIES)
async def test_the_log_shows_each_message_arrive_then_change_up_to_its_final_state(
    delivery: Delivery,
) -> None:
    printed: list[str] = []
    _, messages, _ = await run_demo(Options(delivery=delivery), Log(printed.append))
    arrivals = [line for line in printed if "channel receives message" in line]
    assert len(arrivals) == len(messages)
    assert " channel receives message 1 (" in arrivals[0]
    assert arrivals[0].split(": ", 1)[0].endswith("as a reply")
    for number, message in enumerate(messages, 1):
        about = [line for line in printed if f" message {number} " in line]
        assert about[0] in arrivals
        assert all(" edited (" in line for line in about[1:])
        assert len(about) == 1 + message.edits  # every edit, once
        assert f"({len(message.content)} chars)" in about[-1]  # the last state is the final one
        preview = about[-1].split(": ", 1)[1]
        if len(about) == 1:  # the start of its first line
            assert message.content.lstrip().startswith(preview.removesuffix("…"))
        else:  # the end of its last line
            assert message.content.rstrip().endswith(preview.removeprefix("…"))
    stamps = [float(line[1:8]) for line in printed]
    assert stamps == sorted(stamps)  # as the channel accepted them
    assert stamps[0] >= 0


def sent(id_: int, content: str, *, edits: int = 0, at: float = 10.5) -> SentMessage:
    return SentMessage(id_, 1, content, (), None, None, Pings(), 0, at, edits)


def test_the_log_prints_a_line_per_new_message_per_edit_and_per_deletion() -> None:
    printed: list[str] = []
    log = Log(printed.append)
    log.begin(10.0)

    def change(at: float, kind: ChangeKind, id_: int, content: str) -> None:
        message = None if kind == "delete" else sent(id_, content, at=10.0)
        log.change(Change(at, kind, id_, content, 1), message)

    change(10.25, "create", 7, "Hi ▌")
    change(11.5, "edit", 7, "Hi there, this is a line\nand the next one is growing ▌")
    change(12.0, "create", 8, "x" * 100 + " ▌")
    change(12.25, "edit", 7, "Hi there, this is a line\nand the next one is growing.")
    log.note("[  2.300s] user runs /stop")
    change(13.0, "delete", 7, "Hi there, this is a line\nand the next one is growing.")
    change(14.0, "edit", 8, "y" * 100 + " ▌")
    assert printed == [
        "[  0.250s] channel receives message 1 (4 chars): Hi ▌",
        "[  1.500s] message 1 edited (54 chars): and the next one is growing ▌",
        "[  2.000s] channel receives message 2 (102 chars): " + "x" * 59 + "…",
        "[  2.250s] message 1 edited (53 chars): and the next one is growing.",
        "[  2.300s] user runs /stop",
        "[  3.000s] message 1 was deleted",
        "[  4.000s] message 2 edited (102 chars): …" + "y" * 57 + " ▌",
    ]


class Screen:
    """What a `Terminal` view writes, at a fixed size."""

    def __init__(self, columns: int, lines: int) -> None:
        self.size = os.terminal_size((columns, lines))
        self.written: list[str] = []
        self.printed: list[str] = []

    def terminal(self) -> Terminal:
        return Terminal(self.written.append, lambda: self.size, self.printed.append, "demo")

    def frames(self) -> list[list[str]]:
        """Each frame's rows, with the ANSI controls taken off."""
        frames = [w for w in self.written if w.startswith(demo._HOME)]
        return [
            [
                row.removesuffix(demo._CLEAR_LINE)
                for row in frame.removeprefix(demo._HOME)
                .removesuffix(demo._CLEAR_BELOW)
                .split("\r\n")
            ]
            for frame in frames
        ]


def test_the_terminal_view_redraws_the_channel_in_place_within_the_screen() -> None:
    screen = Screen(40, 8)
    view = screen.terminal()
    view.begin(100.0)
    assert screen.written == [demo._ENTER]
    view.show([sent(1, "Hello ▌")], 100.2)
    view.show([sent(1, "Hello ▌")], 100.21)  # nothing changed, same tenth of a second
    words = " ".join(f"word{i}" for i in range(60))
    view.show([sent(1, "Hello\n\n" + words + " ▌", edits=1)], 101.0)
    view.note("[  1.100s] user runs /stop")
    view.show([sent(1, "Hello\n\n" + words + ".", edits=2), sent(2, "🎉" * 30)], 101.2)
    first, grown, last = screen.frames()
    assert first == [
        "demo ·   0.2s · 1 message, 0 edits · ",
        "Ctrl-C quits",
        "══════ #general ══════",
        "┌─ message 1 (7 chars, pings nobody)",
        "Hello ▌",
        "└─",
    ]
    for frame in (grown, last):
        assert len(frame) == 8  # the channel's end, scrolled up to fit the screen
        assert all(demo.width(row) <= 39 for row in frame)
    assert grown[0].startswith("demo ·   1.0s · 1 message, 1 edit")
    assert grown[-3:] == ["word52 word53 word54 word55 word56 ", "word57 word58 word59 ▌", "└─"]
    assert last[2] == "[  1.100s] user runs /stop"
    assert last[-4:] == ["┌─ message 2 (30 chars, pings nobody)", "🎉" * 19, "🎉" * 11, "└─"]
    view.close()
    assert screen.written[-1] == demo._LEAVE
    assert screen.printed == ["[  1.100s] user runs /stop"]
    view.close()
    assert screen.written.count(demo._LEAVE) == 1


def test_a_terminal_view_that_never_began_leaves_the_screen_alone() -> None:
    screen = Screen(80, 24)
    view = screen.terminal()
    view.show([sent(1, "Hi")], 1.0)
    view.close()
    assert screen.written == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_on_a_terminal_the_demo_draws_frames_and_leaves_the_screen_as_it_was() -> None:
    screen = Screen(100, 30)
    result, messages, _ = await run_demo(Options(stop_after=1.0), screen.terminal())
    assert result.status == "stopped_by_user"
    assert screen.written[0] == demo._ENTER
    assert screen.written[-1] == demo._LEAVE
    frames = screen.frames()
    assert len(frames) > 1
    assert all(len(frame) <= 30 for frame in frames)
    assert frames[-1][-1] == "└─"
    assert screen.printed == [line for line in screen.printed if "user runs /stop" in line]
    assert len(screen.printed) == 1
    assert messages


def test_wrap_cuts_after_a_space_and_counts_wide_characters() -> None:
    assert demo.wrap("hello world this is", 12) == ["hello world ", "this is"]
    assert demo.wrap("abcdefghijklmnop", 10) == ["abcdefghij", "klmnop"]
    assert demo.wrap("", 10) == [""]
    assert demo.wrap("🎉🎉🎉", 5) == ["🎉🎉", "🎉"]
    assert demo.wrap("a\x1b[2Jb\tc", 20) == ["a�[2Jb    c"]


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_demo_command_prints_progress_transcript_and_result(
    capsys: pytest.CaptureFixture[str], delivery: Delivery
) -> None:
    assert main(["demo", "--speed", "2000", "--delivery", delivery]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"cordstream demo: {delivery} delivery: ")
    assert "channel receives message 1 (" in out
    assert "\x1b" not in out  # stdout is no terminal: a plain log
    assert "#general" in out
    assert "status:          completed" in out


# --- `cordstream demo --bot`: the example bot, whole, with simulated users ---------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_demo_bot_plays_its_story_through_the_gateway() -> None:
    before = asyncio.all_tasks()
    printed: list[str] = []
    ran = await botdemo.run_bot_demo(Log(printed.append))
    # Each answer ended as its user made it end: alice's first by her new message, bob's by
    # his Stop (after a tool round), alice's new one by itself.
    outcomes = {(name, question.content): turn for name, question, turn in ran.turns}
    assert {key: turn.status for key, turn in outcomes.items()} == {
        ("alice", botdemo.TEA): "follow_up_interrupt",
        ("bob", botdemo.DICE): "stopped_by_user",
        ("alice", botdemo.GREEN_TEA): "completed",
    }
    dice = outcomes["bob", botdemo.DICE]
    assert [run.call.name for run in dice.tool_runs] == ["roll_dice"]
    assert isinstance(dice.final.stop_context, discord.Interaction)  # his click (C7)
    assert ran.refusal == [STOP_REFUSED]  # carol's click, refused privately
    assert ran.model.asked == [botdemo.TEA, botdemo.DICE, botdemo.GREEN_TEA]

    # The channel: alice's answer (a reply), bob's (the command's response), alice's next.
    tea, rolled, green = ran.messages
    assert tea.message_reference is not None
    assert tea.content.startswith("A good cup of black tea takes four things.")
    assert rolled.interaction_id is not None
    assert rolled.content.startswith('The dice say: `{"rolls": [')
    assert green.message_reference is not None
    assert green.content.startswith("Green tea is gentler")
    assert green.content.endswith("🍵")
    for message in ran.messages:
        assert not message.content.endswith(CURSOR)
        assert message.components == ()  # no Stop button left behind (K2)
    assert outcomes["alice", botdemo.TEA].text == tea.content  # what the channel shows (F2)
    assert dice.text == rolled.content
    assert outcomes["alice", botdemo.GREEN_TEA].text == green.content

    # The log: the users' actions in order, each change to the channel as it came; alice's
    # answer went on after carol's click.
    actions = [line.split("] ", 1)[1] for line in printed if "] alice: " in line or "press" in line]
    assert actions == [
        f"alice: @cordstream {botdemo.TEA}",
        "carol presses Stop on alice's answer",
        f"alice: {botdemo.GREEN_TEA}",
        "bob presses Stop on his answer",
    ]
    told = next(i for i, line in enumerate(printed) if "carol is told" in line)
    assert printed[told].endswith(STOP_REFUSED)
    assert any("message 1 edited" in line and CURSOR in line for line in printed[told:])
    assert "channel receives message 2: thinking…" in "\n".join(printed)
    stamps = [float(line[1:8]) for line in printed]
    assert stamps == sorted(stamps)
    assert asyncio.all_tasks() == before


def test_demo_bot_renders_the_channel_then_each_turn() -> None:
    question = Question(1, 2, botdemo.DICE, cast(discord.abc.Messageable, None))
    segment = StreamResult("stopped_by_user", messages_sent=1)
    stopped = TurnResult("stopped_by_user", (segment,), TokenUsage(5, 3), usage_estimated=False)
    shown = botdemo.render(
        botdemo.BotDemo(
            [sent(1, "The dice say: 7.")], [("bob", question, stopped)], [], botdemo.ScriptedModel()
        )
    )
    assert shown.splitlines()[1:] == [
        "══════ #general ══════",
        "┌─ message 1 (16 chars, pings nobody)",
        "The dice say: 7.",
        "└─",
        "",
        "══════ turns ══════",
        "bob    'roll two dice for me'                 stopped_by_user      1 message",
    ]


def test_demo_bot_command_runs_the_story_and_exits_0(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asyncio, "run", on_virtual_time)  # the story's pace costs no seconds
    assert main(["demo", "--bot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cordstream demo --bot: the example bot on the local Discord's gateway")
    assert "carol is told, and only she sees it: " + STOP_REFUSED in out
    assert "══════ turns ══════" in out
    for status in ("follow_up_interrupt", "stopped_by_user", "completed"):
        assert f" {status} " in out


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        (["--hang"], "--bot plays its own story"),
        (["--stop-after", "1"], "--bot plays its own story"),
        (["--delivery", "messages"], "--bot streams with live delivery"),
    ],
)
def test_demo_bot_refuses_the_options_of_the_other_story(
    options: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--bot", *options])
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1].startswith(f"cordstream demo: error: {complaint}")
    )


def on_virtual_time(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on looptime's virtual clock."""
    loop = looptime.new_event_loop()
    assert loop.looptime_on
    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(main)


@pytest.mark.parametrize("level", [None, "info", "debug"])
def test_demo_prints_cordstreams_log_on_stderr_at_the_level_asked(
    capsys: pytest.CaptureFixture[str], level: str | None
) -> None:
    logger = logging.getLogger("cordstream")
    handlers, was = list(logger.handlers), logger.level
    try:
        asked = [] if level is None else ["--log-level", level]
        assert main(["demo", "--speed", "2000", *asked]) == 0
    finally:
        logger.handlers[:], logger.level = handlers, was
    captured = capsys.readouterr()
    ended = [line for line in captured.err.splitlines() if " INFO cordstream.stream: " in line]
    requests = [line for line in captured.err.splitlines() if " DEBUG cordstream.discord: " in line]
    assert "cordstream.stream" not in captured.out  # the log goes to stderr only
    if level is None:
        assert (ended, requests) == ([], [])
        return
    assert len(ended) == 1
    assert ": completed after " in ended[0]
    assert (level == "debug") == bool(requests)
    assert all(" in channel " in line for line in requests)
