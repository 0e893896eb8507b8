"""Generated model answers for property tests, with what the channel should end up showing.

An `Answer` is markup a model might write (prose, quotes, parentheses, emoji and CJK, tables,
code fences, think and details blocks, punctuation-only lines, very long lines) together with
the *visible* text (think/details removed) and the details bodies, computed independently of
the code under test. `oracle_key` is how delivered text is compared with visible text:
"modulo whitespace at split points and added fences" (SPEC E, hypothesis invariants).

Whitespace. `shown` is the one normalization the whitespace-exact oracles allow: Discord trims
the leading and trailing whitespace of a whole message, nothing else. `as_written` checks that
messages show the visible text exactly as the model wrote it, blank lines and indentation
included, apart from that trimming at message edges (E6: content reaches Discord as written).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

# Multi-code-point clusters that must never be cut (E7).
CLUSTERS = (
    "👨‍👩‍👧‍👦",  # ZWJ family
    "🇫🇷",  # flag
    "🇯🇵",
    "👍🏽",  # skin tone
    "1️⃣",  # keycap
    "🏴󠁧󠁢󠁥󠁮󠁧󠁿",  # tag sequence
    "é",  # e + combining acute
    "한",  # Hangul from jamo
    "\u200fשלום\u200f",  # RTL marks around Hebrew
)
_WORDS = (
    "stream", "Discord", "message", "model", "token", "嗯", "你好世界", "データ", "ok", "e.g.",
    "Dr.", "3.14", "https://example.com/a_b?c=d", "[link](https://x.io)", "**bold**", "*it*",
    "~~del~~", "`code`", ":(", ":)", "a < b", "<3", "<b>", "<thinker>", "(aside)", '"quoted"',
    "“curly”", "—", "...", "!", "?", "#tag", "@everyone",
)  # fmt: skip
_TAG_NAMES = ("think", "THINK", "thinking", "reasoning", "x:think", "Thinking")


@dataclass(frozen=True)
class Answer:
    markup: str  # what the model writes
    visible: str  # what should reach the channel (before whitespace at split points)
    details: tuple[str, ...]  # the <details> bodies, summary removed, in order


def _word() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(_WORDS),
        st.sampled_from(CLUSTERS),
        st.text(alphabet="abcdefghij XYZ,.;!?'()\"", min_size=1, max_size=12),
    )


_line = st.lists(_word(), min_size=1, max_size=12).map(" ".join)
_prose = st.lists(_line, min_size=1, max_size=4).map(lambda lines: "\n".join(lines) + "\n")
# Blank lines, alone or in runs, some with spaces or tabs on them: they must show as written.
_blank = st.sampled_from(("\n", "\n", "\n\n", "\n\n\n", "  \n", "\t\n\n"))
_punctuation_line = st.sampled_from((":)\n", "...\n", "!\n", "—\n", "?!\n"))
# A sentence, then punctuation alone to the end of the line: at degree 3 the sentence may
# leave before the punctuation arrives, which then joins it (E6) exactly as written.
_sentence_then_punctuation = st.tuples(
    _line, st.sampled_from((" ! ...", "? :)", "。!", "! —"))
).map(lambda parts: f"{parts[0]}{parts[1]}\n")
_table = st.lists(_line, min_size=1, max_size=4).map(
    lambda rows: "| a | b |\n|---|---|\n" + "".join(f"| {r} |\n" for r in rows)
)
# A table inside a list item: indented rows, still rows (E2).
_list_table = st.lists(_line, min_size=1, max_size=3).map(
    lambda rows: "- item\n  | a | b |\n  |---|---|\n" + "".join(f"  | {r} |\n" for r in rows)
)
_code_line = st.one_of(
    st.text(alphabet="abcdefxyz =+-*/(){}[]:;'\"<>#", min_size=0, max_size=60),
    st.sampled_from(("    return 1", "\tif x:", "# comment", "print('hi')")),
)
_long_line = st.sampled_from(("a", "word ", "漢", "👍🏽", "(x ", "e\u0301")).flatmap(
    lambda unit: st.integers(200, 1600).map(lambda n: unit * n + "\n")
)


@st.composite
def _code(draw: st.DrawFn, *, small: bool = False) -> str:
    """A closed code block; `small`: at most 4 short lines, so it fits a 300-character message."""
    language = draw(st.sampled_from(("", "python", "js", "c++")))
    lines = draw(st.lists(_code_line, min_size=0, max_size=4 if small else 30))
    long_line = not small and draw(st.booleans()) and draw(st.integers(100, 3000))
    body = "".join(line + "\n" for line in lines)
    if long_line:
        body += "x" * long_line + "\n"
    return f"```{language}\n{body}```\n"


@st.composite
def answers(
    draw: st.DrawFn, *, blocks: bool = True, long_lines: bool = True, split_code: bool = True
) -> Answer:
    """An answer made of parts; think/details blocks when `blocks`.

    `split_code=False` keeps every code block closed and short enough for a message of 300
    characters: no message then carries markup cordstream added (reopened or closing fences,
    E3), only the inline closers a final flush may add (E8), so `as_written` applies.
    """
    kinds = [_prose, _prose, _blank, _blank, _punctuation_line, _sentence_then_punctuation]
    kinds += [_table, _list_table]
    kinds.append(_code(small=not split_code))
    if long_lines:
        kinds.append(_long_line)
    markup: list[str] = []
    visible: list[str] = []
    details: list[str] = []
    for _ in range(draw(st.integers(1, 10))):
        if blocks and draw(st.integers(0, 5)) == 0:
            inner = draw(_prose)
            if draw(st.booleans()):
                name = draw(st.sampled_from(_TAG_NAMES))
                markup.append(f"<{name}>{inner}</{name}>")
            else:
                summary = draw(st.sampled_from(("", "<summary>Memory</summary>")))
                markup.append(f"<details>{summary}{inner}</details>")
                if inner.strip():
                    details.append(inner.strip())
            continue
        part = draw(st.one_of(*kinds))
        markup.append(part)
        visible.append(part)
    if split_code and draw(st.integers(0, 4)) == 0:  # a code block the model never closed (E8)
        unclosed = draw(_code())[: -len("```\n")]
        markup.append(unclosed)
        visible.append(unclosed)
    return Answer("".join(markup), "".join(visible), tuple(details))


@st.composite
def chunkings(draw: st.DrawFn, text: str) -> list[str]:
    """`text` cut at arbitrary positions (tags, clusters and fences included)."""
    if not text:
        return []
    cuts = draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=min(60, len(text))))
    small = draw(st.integers(1, 8))
    points = sorted({*cuts, *range(0, len(text), small * 37 + 1)} - {0})
    chunks, start = [], 0
    for point in points:
        chunks.append(text[start:point])
        start = point
    chunks.append(text[start:])
    return [c for c in chunks if c]


_FENCE_LINE = re.compile(r"^[ \t]*`{3,}[^`\n]*$", re.MULTILINE)
_WHITESPACE = re.compile(r"\s+")
AUTO_CLOSERS = set('*~`)"')


def oracle_key(text: str) -> str:
    """Text with fence lines and all whitespace removed: what must survive delivery exactly."""
    return _WHITESPACE.sub("", _FENCE_LINE.sub("", text))


def fences_balanced(message: str) -> bool:
    """Every code fence a message opens, it closes (E3): an even number of fence lines."""
    return len(_FENCE_LINE.findall(message)) % 2 == 0


def same_text(delivered: str, visible: str) -> bool:
    """Nothing lost, nothing duplicated; the end may carry auto-closed markers (E8)."""
    got, want = oracle_key(delivered), oracle_key(visible)
    return got == want or (got.startswith(want) and set(got[len(want) :]) <= AUTO_CLOSERS)


def without_closers(text: str) -> str:
    """The oracle key with auto-closed markers (E8) removed from its end."""
    return oracle_key(text).rstrip("".join(AUTO_CLOSERS))


def shown(content: str) -> str:
    """What Discord displays of a message's content: leading and trailing whitespace of the
    whole message trimmed (Discord does it), everything inside — blank lines, indentation —
    exactly as sent. The only normalization `as_written` allows."""
    return content.strip()


_LEADING_WHITESPACE = re.compile(r"\s*")


def as_written(
    messages: Sequence[str], text: str, *, closers: bool = False
) -> list[tuple[int, int]]:
    """Where each message sits in `text`; asserts that the messages, as Discord shows them
    (`shown`), are `text` in order with only whitespace left out between them and at both
    ends: no character lost, added, duplicated or moved, and no blank line lost between two
    pieces that share a message. With `closers`, the last message may end with the inline
    markers a final flush closes (E8). Linear in the text."""
    spans: list[tuple[int, int]] = []
    position = 0
    for index, content in enumerate(messages):
        message = shown(content)
        match = _LEADING_WHITESPACE.match(text, position)
        assert match is not None
        start = match.end()
        if closers and index == len(messages) - 1:
            # The longest prefix the text holds, once only added closers are taken off.
            while message and message[-1] in AUTO_CLOSERS and not text.startswith(message, start):
                message = message[:-1]
        assert text.startswith(message, start), (
            f"message {index} is not the text at {start}: {message[:60]!r} vs "
            f"{text[start : start + 60]!r}"
        )
        position = start + len(message)
        spans.append((start, position))
    assert not text[position:].strip(), f"lost at the end: {text[position : position + 60]!r}"
    return spans
