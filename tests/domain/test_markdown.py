"""E8: the closers added at the end of an answer for inline markers it left open
(`cordstream.domain.markdown.closers`), case by case."""

from __future__ import annotations

import pytest

from cordstream.domain.markdown import closers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("**bold", "**"),
        ("*it and **bold", "***"),
        ("`code", "`"),
        ("~~struck", "~~"),
        ("x**2 and 5*3", ""),  # inside a word: nothing opens
        ("* a list item", ""),  # a bullet, not emphasis
        ("**closed** text", ""),
        ("```\nan open block", ""),  # a code block is closed elsewhere (E3)
    ],
)
def test_E8_an_open_marker_is_closed(text: str, expected: str) -> None:
    assert closers(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("`a*` **bold", "**"),  # the scan goes on after a marker inside inline code
        ("`x*` *y", "*"),
        ("a `*(` ~~struck", "~~"),
    ],
)
def test_E8_markers_inside_inline_code_are_literal(text: str, expected: str) -> None:
    assert closers(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see (", ""),  # at the very end: nothing follows it, nothing opens
        ("see ( here", ""),  # followed by a space
        ("see (here", ")"),
        ("see (here) and **more", "**"),
    ],
)
def test_E8_a_parenthesis_opens_only_before_text(text: str, expected: str) -> None:
    assert closers(text) == expected
