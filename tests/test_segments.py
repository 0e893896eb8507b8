"""Example tests for buffering and segmentation, one SPEC rule behaviour each (E1–E3, E6–E10).

Each test walks one scenario step by step: feed this, expect exactly these pieces or messages.
Segmenter tests call `cordstream.domain.segments` directly (`Pieces` below keeps its state
between feeds); stream tests play the shell with `tests.driver.Driver`. Think/details capture (E4,
E5) is pinned in `tests/test_capture.py`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pytest

from cordstream.domain import (
    ErrorChunk,
    FunctionCall,
    FunctionCallChunk,
    ProviderEnded,
    ProviderError,
    SendMessage,
    StopRequest,
    StreamConfig,
    StreamResult,
    TypingPause,
    segments,
)
from cordstream.domain.graphemes import is_boundary
from tests.answers import fences_balanced, same_text
from tests.driver import Driver, run

# -- helpers ---------------------------------------------------------------------------------


@dataclass
class Pieces:
    """The segmenter driven by hand: `feed` returns the texts of the pieces it finished."""

    max_len: int = 1950
    sentences: bool = False
    seg: segments.Segmenter = field(init=False)
    tail: str = ""

    def __post_init__(self) -> None:
        self.seg = segments.new_segmenter(self.max_len, sentences=self.sentences)

    def feed(self, text: str) -> list[str]:
        self.seg, self.tail, pieces = segments.feed(self.seg, self.tail, text)
        return [piece.text for piece in pieces]

    def flush(self) -> list[str]:
        return [p.text for p in segments.flush(self.seg, self.tail, close_markers=True)]


def started(**config: int) -> Driver:
    """A driver whose stream has started, every send accepted at once."""
    driver = Driver(StreamConfig(**config))
    driver.start()
    return driver


def deliver(chunks: Iterable[str], config: StreamConfig) -> tuple[Driver, StreamResult]:
    """Like `tests.driver.run`, but accepts sends in a loop rather than recursively.

    The driver's `auto_deliver` answers a send from inside the step that made it, which
    recurses once per message; streams of thousands of messages need this loop instead.
    """
    driver = Driver(config, auto_deliver=False)
    driver.start()
    for chunk in chunks:
        driver.text(chunk)
        while driver.pending_send is not None:
            driver.deliver()
    return driver, driver.end()


def chunked(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def delivered(driver: Driver) -> str:
    """The accepted messages, one per line: the form `tests.answers.same_text` compares, and
    the result's `accumulated_text` (F2)."""
    return "\n".join(driver.messages)


def pauses(driver: Driver) -> list[TypingPause]:
    return [e for e in driver.of_type(TypingPause) if isinstance(e, TypingPause)]


NO_LIMIT = StreamConfig(flush_limit=0)


# -- E1: boundaries --------------------------------------------------------------------------


def test_E1_newline_is_a_boundary_once_a_character_follows() -> None:
    pieces = Pieces()
    assert pieces.feed("Hello\n") == []  # the newline is the last character: it waits
    assert pieces.feed("W") == ["Hello\n"]
    assert pieces.flush() == ["W"]


def test_E1_newline_followed_by_a_character_in_its_own_chunk_sends_the_line() -> None:
    driver = started()
    driver.text("Hello\n")
    assert driver.sends == []
    driver.text("World")  # no newline, no '<': the machine's fast path
    assert driver.sends == [SendMessage(1, "Hello", reply=True)]


def test_E1_a_fence_line_after_a_chunk_ending_in_newline_opens_a_block() -> None:
    driver = started()
    driver.text("Intro\n", "```python", "\nx = 1\n", "```\n", "Outro")
    assert driver.messages == ["Intro", "```python\nx = 1\n```"]


def test_E1_a_closed_fence_is_a_boundary_on_its_own() -> None:
    pieces = Pieces()
    assert pieces.feed("```py\nx = 1\n") == []
    assert pieces.feed("```\n") == []  # like a newline, it waits for the next character (E6)
    assert pieces.feed("A") == ["```py\nx = 1\n```"]  # no newline needed after that one


def test_E1_a_closed_fence_is_sent_once_any_character_follows() -> None:
    driver = started()
    driver.text("```py\nx = 1\n")
    assert driver.sends == []
    driver.text("```\n")
    assert driver.sends == []
    driver.text("S")
    assert driver.messages == ["```py\nx = 1\n```"]


def test_E1_degree_3_cuts_at_sentence_ends() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("It works. It ") == ["It works. "]
    assert pieces.feed("really works! And") == ["It really works! "]
    assert pieces.flush() == ["And"]


def test_E1_degree_3_does_not_cut_after_an_abbreviation() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("Dr. Smith arrived, e.g. at noon. Then") == [
        "Dr. Smith arrived, e.g. at noon. "
    ]


def test_E1_degree_3_does_not_cut_inside_a_decimal() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("Pi is 3.") == []  # "3." may still become "3.14"
    assert pieces.feed("14 exactly. Next") == ["Pi is 3.14 exactly. "]


def test_E1_degree_3_a_full_stop_at_the_very_end_waits() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("It works.") == []
    assert pieces.feed(" ") == []  # still nothing after it: the next word may be lower case
    assert pieces.feed("Next") == ["It works. "]


def test_E1_degree_3_a_full_stop_followed_by_lower_case_is_not_a_sentence_end() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("Use version 2. it is newer.\n") == []
    assert pieces.flush() == ["Use version 2. it is newer.\n"]


def test_E1_degree_3_cuts_after_a_cjk_full_stop() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("你好。世界。再") == ["你好。", "世界。"]


def test_E1_sentence_ends_are_not_boundaries_below_degree_3() -> None:
    driver, _ = run("One. Two! Three? Four", config=StreamConfig(humanizer_degree=1))
    assert driver.messages == ["One. Two! Three? Four"]


# -- E2: holding -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opener", "closer"),
    [('"', '"'), ("“", "”"), ("(", ")"), ("[", "]")],
    ids=["quote", "curly-quote", "paren", "bracket"],
)
def test_E2_an_unbalanced_construct_holds_the_segment(opener: str, closer: str) -> None:
    pieces = Pieces()
    assert pieces.feed(f"He said {opener}hi\nthere") == []  # the first line is held
    assert pieces.feed(f"{closer} she said\nNext") == [
        f"He said {opener}hi\nthere{closer} she said\n"
    ]


def test_E2_a_table_is_held_until_a_non_row_line() -> None:
    pieces = Pieces()
    assert pieces.feed("| a | b |\n") == []
    assert pieces.feed("|---|---|\n") == []
    assert pieces.feed("| 1 | 2 |\n") == []
    assert pieces.feed("| 3 | 4 |\nAfter") == []  # every row complete, still growing
    assert pieces.feed(" all\nMore") == [
        "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n",
        "After all\n",
    ]


def test_E2_a_frown_does_not_count_as_an_open_parenthesis() -> None:
    driver = started()
    driver.text("Oh no :(\nNext")
    assert driver.messages == ["Oh no :("]


def test_E2_a_lone_frown_does_not_stall_the_answer() -> None:
    driver = started()
    driver.text("Oh no :( ")
    for _ in range(30):
        driver.text("word " * 10)  # 1,500 characters on the same line, nothing closes
    assert driver.sends, "nothing delivered before the end"
    driver.end()
    assert same_text(delivered(driver), "Oh no :( " + "word " * 300)


def test_E2_an_open_parenthesis_is_held_at_most_the_overflow_size() -> None:
    driver = started()
    driver.text("Note (see below\n")
    for i in range(15):
        driver.text(f"line {i:02d} " + "x" * 90 + "\n")  # 15 lines of 99 characters, no ')'
    assert driver.sends, "the held paragraph never left the buffer"
    assert all(len(m) <= 1950 for m in driver.messages)


# -- E3: code fences -------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_E3_a_code_block_that_fits_stays_whole(size: int) -> None:
    text = "Intro\n```python\nx = 1\ny = 2\n```\nOutro\n"
    driver, _ = run(text, size=size)
    block = "```python\nx = 1\ny = 2\n```"
    assert sum(block in m for m in driver.messages) == 1
    assert all(m.count("```") in (0, 2) for m in driver.messages)


def test_E3_a_longer_block_is_split_linewise_and_every_piece_rewrapped() -> None:
    lines = [f"line_{i:03d} = {i}" for i in range(30)]
    text = "```python\n" + "\n".join(lines) + "\n```\n"
    driver, _ = run(text, config=StreamConfig(max_message_length=200))
    assert len(driver.messages) > 1
    inner: list[str] = []
    for message in driver.messages:
        assert len(message) <= 200
        assert message.startswith("```python\n"), message
        assert message.endswith("\n```"), message
        inner.extend(message.removeprefix("```python\n").removesuffix("\n```").split("\n"))
    assert inner == lines  # line-wise: no line cut, none lost or repeated


def test_E3_a_fence_still_open_at_the_end_is_closed() -> None:
    driver, result = run("Look:\n```js\nlet a = 1;\nlet b")
    assert driver.messages == ["Look:", "```js\nlet a = 1;\nlet b\n```"]
    assert result.status == "completed"


@pytest.mark.parametrize("fence", ["```", "```py", "````"])
@pytest.mark.parametrize("degree", [0, 1])
def test_E3_an_opening_fence_line_that_ends_the_answer_without_its_newline_is_not_sent(
    fence: str, degree: int
) -> None:
    """Markup alone, as with its newline: never a message with a fence left open, alone or
    packed after a closed block."""
    config = StreamConfig(humanizer_degree=degree)
    for text in (f"Hi\n{fence}", f"Hi\n```\nx\n```\n{fence}"):
        for ending in ("end", "stop"):
            driver = Driver(config)
            driver.start()
            driver.text(text)
            if ending == "stop":
                driver.request(StopRequest("stop", "user-1"))  # the pending flush (E8)
            else:
                driver.feed(ProviderEnded(driver.now))
            driver.settle()
            assert all(fences_balanced(m) for m in driver.messages), driver.messages
            assert "\n".join(driver.messages) == text.removesuffix(fence).strip()


def test_E3_a_single_50_kb_code_line_is_cut_into_wrapped_pieces() -> None:
    code = "x" * 50_000
    driver, _ = deliver(chunked(f"```text\n{code}\n```\n", 4096), NO_LIMIT)
    assert len(driver.messages) >= math.ceil(50_000 / 1950)
    inner = ""
    for message in driver.messages:
        assert len(message) <= 1950
        assert message.startswith("```text\n"), message[:20]
        assert message.endswith("\n```"), message[-20:]
        inner += message.removeprefix("```text\n").removesuffix("\n```")
    assert inner == code


# -- E6: nothing visible dropped -------------------------------------------------------------


def test_E6_a_one_character_cjk_line_is_delivered() -> None:
    driver, _ = run("好的\n嗯\n明白了\n", size=1)
    assert driver.messages == ["好的", "嗯", "明白了"]


def test_E6_a_one_character_answer_is_delivered() -> None:
    driver, result = run("嗯")
    assert driver.messages == ["嗯"]
    assert result.status == "completed"


def test_E6_whitespace_only_text_is_never_sent() -> None:
    driver, result = run("   \n\n\t\n  ", size=1)
    assert driver.sends == []
    assert result.status == "empty_response"


def test_E6_whitespace_only_lines_between_text_are_not_sent() -> None:
    driver, _ = run("Answer\n   \n\t\nMore\n", size=1)
    assert driver.messages == ["Answer", "More"]


@pytest.mark.parametrize("line", [":)", "...", "!", "?!"])
def test_E6_a_punctuation_only_line_is_merged_into_the_previous_message(line: str) -> None:
    driver, _ = run(f"Great\n{line}\nNext\n", size=1)
    assert driver.messages == [f"Great\n{line}", "Next"]


def test_E6_a_punctuation_only_last_line_is_merged_into_the_previous_message() -> None:
    driver, _ = run("Great\n:)", size=1)
    assert driver.messages == ["Great\n:)"]


def test_E6_a_punctuation_only_line_is_merged_at_degree_2_too() -> None:
    driver, _ = run("Hi\n!\nBye\n", size=1, config=StreamConfig(humanizer_degree=2))
    assert driver.messages == ["Hi\n!", "Bye"]


def test_E6_a_punctuation_only_line_after_a_blank_line_is_not_sent_alone() -> None:
    driver, _ = run("Great\n\n:)\nNext\n", size=1)
    assert ":)" not in driver.messages


def test_E6_a_punctuation_only_line_after_a_code_block_is_not_sent_alone() -> None:
    driver = started()
    driver.text("```\ncode\n", "```\n", ":)\n", "Next\n")
    driver.end()
    assert ":)" not in driver.messages


# -- E6: blank lines reach Discord as written, after a table like after anything else -----------

AT_THE_END = StreamConfig(humanizer_degree=0)  # everything leaves in one message at the end


@pytest.mark.parametrize("size", [1, 3, 1000])
@pytest.mark.parametrize(
    "text",
    [
        "| 1 | 2 |\n\nNext paragraph.",
        "| 1 | 2 |\n\n\nNext paragraph.",
        "| 1 | 2 |\n\n\n\n\nNext paragraph.",
        "| 1 | 2 |\n  \n\t\nNext paragraph.",  # blank lines holding spaces and a tab
        "| a | b |\n|---|---|\n| 1 | 2 |\n\nNext paragraph.\n\nAnd another.",
        "Prose.\n\n| 1 | 2 |\n\nMore prose.\n\n| 3 | 4 |\n\nEnd.",
        "- item\n  | a | b |\n  |---|---|\n\n- next item",  # a table inside a list
        "| a |\n\n```py\nx = 1\n```\n\nAfter the code.",  # a table, then a fence
        "| a |\n```py\nx = 1\n```\n\n\nAfter the code.",
        "| a |\n\n| b |",  # two tables: the blank line is what separates them
    ],
)
def test_E6_blank_lines_after_a_table_are_kept(text: str, size: int) -> None:
    driver, _ = run(text, config=AT_THE_END, size=size)
    assert driver.messages == [text]


@pytest.mark.parametrize("size", [1, 2, 1000])
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("| a |\n\n<think>hidden</think>Next", "| a |\n\nNext"),
        ("| a |\n<think>hidden</think>\n\nNext", "| a |\n\n\nNext"),
        ("| a |\n\n<details><summary>s</summary>body</details>\nNext", "| a |\n\n\nNext"),
    ],
)
def test_E6_blank_lines_around_a_removed_block_after_a_table_are_kept(
    text: str, shown: str, size: int
) -> None:
    driver, _ = run(text, config=AT_THE_END, size=size)
    assert driver.messages == [shown]  # the block goes (E4, E5); the lines around it stay


def test_E6_a_table_keeps_its_blank_line_at_the_end_of_a_long_message() -> None:
    prose = "word " * 300 + "\n"  # 1,501 characters, then the table in the same message
    text = prose + "| a | b |\n|---|---|\n\n\nNext"
    driver, _ = run(text, config=AT_THE_END, size=7)
    assert driver.messages == [text.strip()]


def test_E6_a_table_sent_with_the_next_line_while_discord_is_busy_keeps_the_blank() -> None:
    driver = Driver(StreamConfig(humanizer_degree=1), auto_deliver=False)
    driver.start()
    driver.text("Intro\nmo")
    assert driver.pending_send == SendMessage(1, "Intro", reply=True)
    driver.text("re\n| 1 | 2 |\n\nNext\nX")  # three pieces ready while "Intro" is in flight
    driver.deliver()
    assert driver.pending_send == SendMessage(2, "more\n| 1 | 2 |\n\nNext", reply=False)
    driver.end()
    assert driver.messages == ["Intro", "more\n| 1 | 2 |\n\nNext", "X"]


def test_E6_the_segmenter_keeps_the_blank_lines_after_a_table_with_its_piece() -> None:
    pieces = Pieces()
    assert pieces.feed("| 1 | 2 |\n") == []  # the table may still grow
    assert pieces.feed("\n") == []  # it ended; it waits for what follows the blank line
    assert pieces.feed("\nN") == ["| 1 | 2 |\n\n\n"]
    assert pieces.flush() == ["N"]


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_E6_a_punctuation_only_line_after_a_table_is_not_sent_alone(degree: int) -> None:
    driver, _ = run("| a |\n...\nNext\n", size=1, config=StreamConfig(humanizer_degree=degree))
    assert driver.messages == ["| a |\n...", "Next"]


@pytest.mark.parametrize("size", [1, 2, 1000])
def test_E6_punctuation_joining_a_sentence_at_degree_3_is_not_moved_to_a_new_line(
    size: int,
) -> None:
    driver, _ = run("Wow! ...\nNext\n", size=size, config=StreamConfig(humanizer_degree=3))
    assert driver.messages == ["Wow! ...", "Next"]  # not "Wow! \n..."


# -- E7: message size and grapheme clusters --------------------------------------------------

_TEN_MB = 10 * 1024 * 1024
_BIG_LINE = ("stream 👨‍👩‍👧‍👦 🇫🇷 e\u0301 漢字 " * (_TEN_MB // 20 + 1))[:_TEN_MB]


@pytest.mark.parametrize("line", ["!" * 5000, "..." * 1000, " " * 5000])
def test_E7_a_punctuation_or_blank_line_longer_than_a_message_after_a_piece_fits(
    line: str,
) -> None:
    """Whole in one chunk, after a finished piece it cannot join (E6): cut like any line."""
    config = StreamConfig(max_message_length=200, flush_limit=0)
    pieces = Pieces(max_len=200)
    texts = pieces.feed("Hi\n" + line + "\nNext\n") + pieces.flush()
    assert all(len(text) <= 200 for text in texts)
    driver, _ = run("Hi\n" + line + "\nNext", config=config, size=10_000)
    assert all(len(m) <= 200 for m in driver.messages)
    assert "".join(driver.messages) == ("Hi" + line + "Next").replace(" ", "")


@pytest.mark.parametrize("size", [None, 4096], ids=["one-chunk", "4096-chunks"])
def test_E7_a_10_mb_single_line_fits_every_message(size: int | None) -> None:
    chunks = [_BIG_LINE] if size is None else chunked(_BIG_LINE, size)
    driver, result = deliver(chunks, NO_LIMIT)
    assert result.status == "completed"
    assert max(len(m) for m in driver.messages) <= 1950
    assert same_text(delivered(driver), _BIG_LINE)


@pytest.mark.parametrize("single_line", [False, True], ids=["lines", "one-line"])
def test_E7_a_paragraph_held_by_an_unclosed_parenthesis_fits_every_message(
    single_line: bool,
) -> None:
    body = "".join(f"part {i} of an aside that goes on " for i in range(400))
    text = "Consider this (an aside " + (body if single_line else body.replace("on ", "on\n"))
    driver, _ = deliver(chunked(text, 5), StreamConfig(max_message_length=200, flush_limit=0))
    assert max(len(m) for m in driver.messages) <= 200
    assert same_text(delivered(driver), text)


@pytest.mark.parametrize("max_len", [200, 1950])
def test_E7_a_50_kb_code_line_fits_every_message(max_len: int) -> None:
    text = "```c\n" + ("a[i] = b; " * 5000) + "\n```\n"
    config = StreamConfig(max_message_length=max_len, flush_limit=0)
    driver, _ = deliver(chunked(text, 4096), config)
    assert max(len(m) for m in driver.messages) <= max_len
    assert all(fences_balanced(m) for m in driver.messages)
    assert same_text(delivered(driver), text)


_CLUSTERS = {
    "zwj-family": "👨‍👩‍👧‍👦",
    "flags": "🇫🇷🇯🇵",
    "skin-tone": "👍🏽",
    "combining": "e\u0301",
    "stacked-combining": "a\u0301\u0302\u0303",
}


@pytest.mark.parametrize("size", [None, 7, 1001], ids=["one-chunk", "7-chunks", "1001-chunks"])
@pytest.mark.parametrize("cluster", list(_CLUSTERS.values()), ids=list(_CLUSTERS))
def test_E7_a_cut_never_splits_a_grapheme_cluster(cluster: str, size: int | None) -> None:
    text = "x" + cluster * (5000 // len(cluster))  # no whitespace: every cut is a hard cut
    chunks = [text] if size is None else chunked(text, size)
    driver, _ = deliver(chunks, StreamConfig(max_message_length=200))
    assert "".join(driver.messages) == text
    position = 0
    for message in driver.messages[:-1]:
        assert len(message) <= 200
        position += len(message)
        # anchor=0: regional indicators paired exactly from the text's start (the flag run
        # starts at offset 1, so the unanchored approximation, even offsets, would be wrong).
        exact = is_boundary(text, position, anchor=0)
        assert exact, (position, text[position - 3 : position + 3])


# -- E8: flushes -----------------------------------------------------------------------------


def _function_call(driver: Driver) -> StreamResult:
    driver.chunk(FunctionCallChunk(FunctionCall("lookup", {"q": "x"})))
    return driver.settle()


def _provider_end(driver: Driver) -> StreamResult:
    return driver.end()


def _user_stop(driver: Driver) -> StreamResult:
    driver.request(StopRequest("stop", "user-1"))
    return driver.settle()


def _timeout(driver: Driver) -> StreamResult:
    driver.fire_timer()
    return driver.settle()


def _provider_error(driver: Driver) -> StreamResult:
    driver.chunk(ErrorChunk(ProviderError("api_error", "boom")))
    return driver.settle()


_ENDINGS: dict[str, Callable[[Driver], StreamResult]] = {
    "function-call": _function_call,
    "provider-end": _provider_end,
    "user-stop": _user_stop,
    "timeout": _timeout,
    "provider-error": _provider_error,
}
ending_kinds = pytest.mark.parametrize("ending", list(_ENDINGS.values()), ids=list(_ENDINGS))


def test_E8_a_function_call_delivers_all_text_before_it() -> None:
    driver = started()
    driver.text("First line\nand a trailing clause")
    assert driver.messages == ["First line"]
    result = _function_call(driver)
    assert driver.messages == ["First line", "and a trailing clause"]
    assert result.status == "function_call"
    assert result.data == FunctionCall("lookup", {"q": "x"})


def test_E8_a_function_call_closes_an_open_fence() -> None:
    driver = started()
    driver.text("Code:\n```py\nx = 1\n")
    _function_call(driver)
    assert driver.messages == ["Code:", "```py\nx = 1\n```"]


@ending_kinds
@pytest.mark.parametrize(
    ("text", "sent"),
    [("This is **bold", "This is **bold**"), ("Use `code", "Use `code`"), ("a ~~del", "a ~~del~~")],
    ids=["bold", "code", "strike"],
)
def test_E8_a_flush_auto_closes_a_marker_the_stream_stopped_in(
    ending: Callable[[Driver], StreamResult], text: str, sent: str
) -> None:
    driver = started()
    driver.text(text)
    ending(driver)
    assert driver.messages == [sent]


@ending_kinds
def test_E8_a_flush_leaves_a_spaced_asterisk_alone(
    ending: Callable[[Driver], StreamResult],
) -> None:
    driver = started()
    driver.text("2 * 3")
    ending(driver)
    assert driver.messages == ["2 * 3"]


@pytest.mark.parametrize("text", ["Square it: x**2", "Compute 5*3"])
def test_E8_a_flush_leaves_intraword_asterisks_alone(text: str) -> None:
    driver, _ = run(text)
    assert driver.messages == [text]


# -- E9: humanizer degree --------------------------------------------------------------------


def test_E9_degree_0_sends_nothing_until_the_end() -> None:
    driver = started(humanizer_degree=0)
    driver.text("One\nTwo\n", "Three\n", "Four")
    assert driver.sends == []
    driver.end()
    assert driver.messages == ["One\nTwo\nThree\nFour"]


def test_E9_degree_0_packs_the_answer_into_few_messages() -> None:
    text = "".join(f"Line number {i} of a long answer\n" for i in range(200))
    driver, _ = run(text, config=StreamConfig(humanizer_degree=0))
    assert len(driver.messages) == math.ceil(len(text) / 1950)
    assert all(len(m) <= 1950 for m in driver.messages)
    assert "\n".join(driver.messages) == text.strip()


def test_E9_degree_1_sends_as_soon_as_a_segment_is_complete() -> None:
    driver = started(humanizer_degree=1)
    driver.text("One\nTw")
    assert driver.sends == [SendMessage(1, "One", reply=True)]
    driver.text("o\nTh")
    assert driver.messages == ["One", "Two"]
    assert pauses(driver) == []


def test_E9_degree_2_sends_the_first_message_without_a_pause() -> None:
    driver = started(humanizer_degree=2)
    driver.text("First line\nS")
    assert driver.messages == ["First line"]
    assert pauses(driver) == []


@pytest.mark.parametrize(
    ("length", "elapsed", "seconds"),
    [(10, 0.0, 0.75), (250, 0.0, 2.5), (250, 1.0, 1.5), (600, 0.0, 4.0), (600, 3.5, 0.5)],
    ids=["minimum", "10ms-per-char", "from-previous-message", "maximum", "maximum-elapsed"],
)
def test_E9_degree_2_pauses_before_the_second_message(
    length: int, elapsed: float, seconds: float
) -> None:
    driver = started(humanizer_degree=2)
    driver.text("First line\n" + "b" * length)
    assert driver.messages == ["First line"]  # sent at t=0
    driver.advance(elapsed)
    driver.text("\nz")  # completes the second segment
    assert driver.messages == ["First line"]
    (pause,) = pauses(driver)
    assert pause.seconds == pytest.approx(seconds)
    driver.end_pause()
    assert driver.messages == ["First line", "b" * length]
    assert driver.now == pytest.approx(max(elapsed, min(4.0, max(0.75, 0.01 * length))))


def test_E9_degree_2_sends_at_once_when_the_typing_time_has_passed() -> None:
    driver = started(humanizer_degree=2)
    driver.text("First line\n" + "b" * 100)
    driver.advance(1.5)  # more than clamp(0.01 x 100, 0.75, 4) = 1 s
    driver.text("\nz")
    assert pauses(driver) == []
    assert driver.messages == ["First line", "b" * 100]


def test_E9_a_stop_during_a_typing_pause_delivers_the_rest_at_once() -> None:
    driver = started(humanizer_degree=2)
    driver.text("First line\n", "Second line here\n", "x")
    assert driver.messages == ["First line"]
    assert len(pauses(driver)) == 1
    driver.advance(0.3)
    driver.request(StopRequest("stop", "user-1"))
    result = driver.result
    assert result is not None
    assert result.status == "stopped_by_user"
    assert driver.messages == ["First line", "Second line here\nx"]
    assert len(pauses(driver)) == 1  # no further pause
    assert driver.now == pytest.approx(0.3)


def test_E9_degree_3_splits_at_sentence_ends() -> None:
    driver, _ = run("One. Two! Three? Four", config=StreamConfig(humanizer_degree=3))
    assert driver.messages == ["One.", "Two!", "Three?", "Four"]
    assert len(pauses(driver)) == 3


# -- E10: a long stream in small chunks ------------------------------------------------------

_ANSWER_PART = (
    'Here is prose with (parentheses), "quotes", 👍🏽 and 你好。\n'
    "```python\nfor i in range(3):\n    print(i)\n```\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n"
    ":)\n"
    "\n"
    "Dr. Smith paid 3.14 dollars. Then he left!\n"
)


def test_E10_a_1_mb_answer_in_1_to_8_character_chunks_is_delivered_completely() -> None:
    text = _ANSWER_PART * (1024 * 1024 // len(_ANSWER_PART) + 1)
    rng = random.Random(10)
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = start + rng.randint(1, 8)
        chunks.append(text[start:end])
        start = end
    driver, result = deliver(chunks, NO_LIMIT)
    assert result.status == "completed"
    assert max(len(m) for m in driver.messages) <= 1950
    assert same_text(delivered(driver), text)


# -- E3: an opening fence line that is still arriving is code, not prose -------------------------


@pytest.mark.parametrize("sentences", [False, True], ids=["degree-1", "degree-3"])
def test_E3_a_fence_line_longer_than_the_overflow_opens_the_block_before_its_newline(
    sentences: bool,
) -> None:
    """Bounded holding cuts the line before its newline arrives: as code, each piece wrapped
    in the fence with the (capped) language word, exactly as when the line arrives whole."""
    pieces = Pieces(max_len=100, sentences=sentences)
    opener = "```" + "python" * 20  # 123 characters, no newline yet
    out = pieces.feed(opener)
    assert out  # cut at once: holding is bounded (E2) ...
    assert all(p.startswith("```pythonpython") and p.endswith("\n```") for p in out)  # ... as code
    out += pieces.feed("\nprint(1)\n```\nafter\n")
    out += pieces.flush()
    *code, prose = out
    assert prose == "after\n"  # the closing fence closed the block: no prose was taken for code
    assert len(code) >= 2
    assert all(p.startswith("```pythonpython") and p.endswith("\n```") for p in code)
    whole = Pieces(max_len=100, sentences=sentences)
    assert whole.feed(opener + "\nprint(1)\n```\nafter\n") + whole.flush() == out


def test_E1_E3_at_degree_3_a_fence_line_is_not_cut_at_a_sentence_end() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("```text Hello there. More words") == []  # a fence line, not prose
    out = pieces.feed(" here\ncode line\n```\nThe end. ") + pieces.flush()
    assert out[0].startswith("```text Hello there. More words here\ncode line\n```")
    assert all(fences_balanced(p) for p in out)
