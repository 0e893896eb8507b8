"""Markdown as Discord renders it, as far as segmentation needs it (SPEC E3, E8).

Two questions, each answered from one line or one piece of text: is this line a code fence,
with which language, and does it close an open one (`fence_of`, `language_of`,
`closes_fence`; what a fence is, E3)? Which inline markers does a cut or a stop leave open
(`closers`, E8)? It keeps no state and never changes the text it reads.
"""

from __future__ import annotations

import re
from typing import Final

_FENCE = re.compile(r"[ \t]*(`{3,16})([^`\r\n]*)\r?\n?\Z")
LANGUAGE_MAX: Final = 24
_MARKERS = re.compile(r"\*\*|~~|\*|`|\(|\)|\"")
_CLOSING: Final = {"(": ")"}


def fence_of(line: str) -> str | None:
    """The backtick run if `line` opens a fenced block (E3), else None."""
    match = _FENCE.match(line)
    return match.group(1) if match is not None else None


def language_of(line: str) -> str:
    """The language word of a fence line (`python` in ```` ```python title ````), or ""."""
    match = _FENCE.match(line)
    info = match.group(2).split() if match is not None else []
    return info[0][:LANGUAGE_MAX] if info else ""


def closes_fence(line: str, fence: str) -> bool:
    """Whether `line` closes a block opened by `fence` (at least as many backticks, alone)."""
    stripped = line.strip()
    return len(stripped) >= len(fence) and stripped == "`" * len(stripped)


def closers(text: str) -> str:
    """Closers for inline markers left open at the end of `text` (E8), innermost first.

    Only a marker followed by non-space text and not preceded by a letter or digit counts as
    opened (`2 * 3`, `x**2` open nothing), so closing it makes the text render as meant.
    """
    if text.count("```") % 2:
        return ""
    stack: list[str] = []
    for match in _MARKERS.finditer(text):
        marker, index = match.group(), match.end()
        following = text[index : index + 1]
        if stack and stack[-1] == "`" and marker != "`":
            continue  # markers inside inline code are literal
        if marker == ")":
            if "(" in stack:
                while stack and stack.pop() != "(":
                    pass
            continue
        if marker == "(":
            if following and not following.isspace():
                stack.append(marker)
            continue
        if stack and stack[-1] == marker:
            stack.pop()
            continue
        if marker in stack:
            continue  # crossing markers: leave the text as written
        before = text[match.start() - 1] if match.start() else "\n"
        if marker == "*" and before == "\n" and following == " ":
            continue  # a list bullet
        if before.isalnum():
            continue  # inside a word: "x**2", "5*3" open nothing
        if following and not following.isspace():
            stack.append(marker)
    return "".join(_CLOSING.get(marker, marker) for marker in reversed(stack))
