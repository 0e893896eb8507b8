"""Properties of segmentation over generated answers cut at arbitrary points (E1–E3, E6–E8).

Text is compared as the user sees it, whitespace included (`tests.support.answers.as_written`: only
the leading and trailing whitespace of a whole message may differ, as Discord trims it, and
the fences cordstream adds to a code block it splits, E3). Fences pair as Markdown pairs them
(`tests.support.answers.fences_balanced`).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cordstream.domain import segments
from cordstream.domain.graphemes import is_boundary
from tests.support.answers import (
    Answer,
    answers,
    as_written,
    chunkings,
    fences_balanced,
    no_lone_punctuation,
    without_closers,
)
from tests.support.driver import pack
from tests.support.fuzz import examples

_SETTINGS = settings(
    max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow], deadline=None
)


def segment(chunks: list[str], max_len: int, sentences: bool) -> list[segments.Piece]:
    seg = segments.new_segmenter(max_len, sentences=sentences)
    tail = ""
    pieces: list[segments.Piece] = []
    for chunk in chunks:
        seg, tail, out = segments.feed(seg, tail, chunk)
        pieces.extend(out)
    return pieces + segments.flush(seg, tail, close_markers=True)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Answer, list[str], int, bool]:
    answer = draw(answers(blocks=False))
    return (
        answer,
        draw(chunkings(answer.visible)),
        draw(st.sampled_from((200, 333, 1000, 1950, 2000))),
        draw(st.booleans()),
    )


@_SETTINGS
@given(cases())
def test_E7_every_piece_fits_a_message(case: tuple[Answer, list[str], int, bool]) -> None:
    _, chunks, max_len, sentences = case
    for piece in segment(chunks, max_len, sentences):
        # Whitespace a message ends with is trimmed (the outbox does, as Discord does).
        assert len(piece.text.rstrip()) <= max_len


@_SETTINGS
@given(cases())
def test_E3_every_piece_has_balanced_fences(case: tuple[Answer, list[str], int, bool]) -> None:
    _, chunks, max_len, sentences = case
    for piece in segment(chunks, max_len, sentences):
        assert fences_balanced(piece.text), piece


@_SETTINGS
@given(cases())
def test_E6_nothing_lost_nothing_duplicated(case: tuple[Answer, list[str], int, bool]) -> None:
    """Every piece is the text as written, whitespace included, but for added fences (E3)."""
    answer, chunks, max_len, sentences = case
    pieces = segment(chunks, max_len, sentences)
    as_written([p.text for p in pieces], answer.visible, closers=True, fences=True)


@_SETTINGS
@given(cases(), st.booleans())
def test_E6_messages_show_the_text_as_written_code_split_or_not(
    case: tuple[Answer, list[str], int, bool], one_each: bool
) -> None:
    """The same for the messages the outbox packs (blank lines between packed pieces kept)."""
    answer, chunks, max_len, sentences = case
    messages = pack(segment(chunks, max_len, sentences), max_len, one_each=one_each)
    as_written(messages, answer.visible, closers=True, fences=True)
    no_lone_punctuation(messages, answer.visible)  # E6, however it was chunked


@_SETTINGS
@given(cases())
def test_E7_no_cut_splits_a_grapheme_cluster(case: tuple[Answer, list[str], int, bool]) -> None:
    answer, chunks, max_len, sentences = case
    pieces = segment(chunks, max_len, sentences)
    # Every cut the segmenter made is at a boundary of the visible text.
    text = answer.visible
    position = 0
    for piece in pieces:
        body = piece.body
        if not body.strip():
            continue
        found = text.find(body.strip(), position)
        if found == -1:
            continue  # a body rewritten at a fence (opening line replaced); checked elsewhere
        end = found + len(body.strip())
        assert is_boundary(text, found), (text[found - 3 : found + 3], piece)
        assert is_boundary(text, end), (text[end - 3 : end + 3], piece)
        position = end


@_SETTINGS
@given(cases())
def test_E1_chunking_does_not_change_the_text(case: tuple[Answer, list[str], int, bool]) -> None:
    answer, chunks, max_len, sentences = case
    whole = segment([answer.visible], max_len, sentences)
    cut = segment(chunks, max_len, sentences)
    # Where the last piece starts may differ, and with it the markers closed at its end.
    assert without_closers("\n".join(p.text for p in cut)) == without_closers(
        "\n".join(p.text for p in whole)
    )
    for pieces in (whole, cut):  # and either way, exactly as written (E6)
        as_written([p.text for p in pieces], answer.visible, closers=True, fences=True)


@st.composite
def faithful_cases(draw: st.DrawFn) -> tuple[Answer, list[str], int, bool, bool]:
    """Answers in which cordstream adds no markup but E8's closers (`split_code=False`)."""
    answer = draw(answers(blocks=False, long_lines=draw(st.booleans()), split_code=False))
    return (
        answer,
        draw(chunkings(answer.visible)),
        draw(st.sampled_from((300, 500, 1950, 2000))),
        draw(st.booleans()),
        draw(st.booleans()),
    )


def test_E6_the_as_written_oracle_allows_only_what_discord_trims() -> None:
    """The oracle can fail: each case below is a fault it exists to catch."""
    assert as_written(["a", "b"], "  a \n\n b  ") == [(2, 3), (7, 8)]  # edges: trimmed
    assert as_written(["| a |\n\nNext"], "| a |\n\nNext") == [(0, 11)]
    assert as_written(['say "(hi)"'], 'say "(hi', closers=True) == [(0, 8)]
    for messages, text, closers in [
        (["| a |\nNext"], "| a |\n\nNext", False),  # a blank line lost inside a message
        (["| a |\n\n\nNext"], "| a |\n\nNext", False),  # one added
        (["Wow! \n..."], "Wow! ...", False),  # a line break added
        (["  indented"], "x\n  indented", False),  # a line lost
        (["say (hi)"], "say (hi", False),  # closers only when the flush may add them
        (["x)", "y"], "x y", True),  # and only at the very end
    ]:
        with pytest.raises(AssertionError):
            as_written(messages, text, closers=closers)


def test_E3_the_fence_oracle_pairs_fences_as_markdown_does() -> None:
    """A closing fence is backticks alone on their line: prose glued to it closes nothing."""
    assert fences_balanced("```py\nx = 1\n```")
    assert fences_balanced("```py\nx = 1\n```  \nAfter")
    assert fences_balanced("Before\n````\n```\nstill code\n````")  # a shorter run is code
    assert fences_balanced("no fence at all, `inline` only")
    assert not fences_balanced("```py\nx = 1\n```After")  # glued prose: still open
    assert not fences_balanced("```py\nx = 1\n``` After")
    assert not fences_balanced("````\nx\n```")  # too short to close it
    assert not fences_balanced("```py\nx = 1")
    assert not fences_balanced("```py\nx = 1\n```\n```js")


def test_E3_E6_the_as_written_oracle_allows_only_the_fences_cordstream_adds() -> None:
    good = "Intro\n```py\n" + "a = 1\n" * 3 + "```\nAfter\n"
    split = ["Intro", "```py\na = 1\na = 1\n```", "```py\na = 1\n```", "After"]
    assert as_written(split, good, fences=True)
    assert as_written(
        ["```py\n    x\n```", "```py\n    y\n```"], "```py\n    x\n    y\n```", fences=True
    )
    assert as_written(["x\n```py\nopen\n```"], "x\n```py\nopen\n", fences=True)  # E8
    assert as_written(["Text"], "Text\n```py\n", fences=True)  # a fence line alone (E3)
    for messages, text in [
        (split, good.replace("After", "Later")),  # changed text
        (["Intro", "```py\na = 1\n\na = 1\n```", "After"], good),  # a blank line added
        (["```py\nx\n```", "```py\ny\n```"], "```py\n    x\n    y\n```"),  # indent lost
        (["```py\nx\n```After"], "```py\nx\n```\nAfter"),  # a line break lost
    ]:
        with pytest.raises(AssertionError):
            as_written(messages, text, fences=True)


@_SETTINGS
@given(faithful_cases())
def test_E6_pieces_that_share_a_message_show_the_text_as_written(
    case: tuple[Answer, list[str], int, bool, bool],
) -> None:
    """Blank lines (after prose, tables, lists, code) survive between pieces packed together,
    all at once (degree 0, or Discord busy) or one per message (degrees 2 and 3)."""
    answer, chunks, max_len, sentences, one_each = case
    messages = pack(segment(chunks, max_len, sentences), max_len, one_each=one_each)
    as_written(messages, answer.visible, closers=True)


@_SETTINGS
@given(
    st.sampled_from(("a", "word ", "漢", "👍🏽", "e\u0301")),
    st.integers(1, 400),
    st.integers(1, 300),
    st.sampled_from((20, 200, 333)),
)
def test_E1_E7_a_sentence_end_after_a_long_wait_never_makes_a_piece_too_long(
    unit: str, run: int, sentence: int, max_len: int
) -> None:
    # Degree 3 cuts at a sentence end that a chunk brings after up to the overflow size of
    # text that waited: that sentence can be longer than a message (found by the shell
    # machine: a 218-character piece at max_len 200).
    waited = unit * run
    chunks = [waited, " " + "w" * sentence + ". Next"]
    pieces = segment(chunks, max_len, sentences=True)
    assert all(len(piece.text.rstrip()) <= max_len for piece in pieces)
    assert "".join(piece.text for piece in pieces) == "".join(chunks)
