"""Properties of segmentation over generated answers cut at arbitrary points (E1–E3, E6–E8).

Most compare text modulo whitespace (`tests.answers.same_text`); the E6 "as written" property
compares what the user sees, whitespace included (`tests.answers.as_written`: only the
leading and trailing whitespace of a whole message may differ, as Discord trims it).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cordstream.domain import segments
from cordstream.domain.graphemes import is_boundary
from tests.answers import (
    Answer,
    answers,
    as_written,
    chunkings,
    fences_balanced,
    same_text,
    without_closers,
)
from tests.driver import pack
from tests.fuzz import examples

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
        assert piece.size <= max_len


@_SETTINGS
@given(cases())
def test_E3_every_piece_has_balanced_fences(case: tuple[Answer, list[str], int, bool]) -> None:
    _, chunks, max_len, sentences = case
    for piece in segment(chunks, max_len, sentences):
        assert fences_balanced(piece.text), piece


@_SETTINGS
@given(cases())
def test_E6_nothing_lost_nothing_duplicated(case: tuple[Answer, list[str], int, bool]) -> None:
    answer, chunks, max_len, sentences = case
    pieces = segment(chunks, max_len, sentences)
    assert same_text("\n".join(p.text for p in pieces), answer.visible)


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
