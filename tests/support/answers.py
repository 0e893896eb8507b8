"""Generated model answers for property tests, with what the channel should end up showing.

An `Answer` is markup a model might write (prose, quotes, parentheses, emoji and CJK, tables,
code fences, think and details blocks, punctuation-only lines, very long lines) together with
the *visible* text (think/details removed) and the details bodies, computed independently of
the code under test.

Whitespace, written down once. `shown` is the one normalization of whitespace the oracles
allow: Discord trims the leading and trailing whitespace of a whole message, nothing else.
`as_written` checks that messages show the visible text exactly as the model wrote it, blank
lines and indentation included, apart from that trimming at message edges (E6: content reaches
Discord as written) and, with `fences=True`, the fences cordstream adds to a code block it
splits (E3). `oracle_key` (all whitespace removed) is only for text still in the buffers, whose
message edges are not known yet.

Fences. `fences_balanced` pairs fences as Markdown does: a closing fence is backticks alone on
their line, so "```After" closes nothing.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from cordstream.domain.markdown import fence_of, language_of

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
    # An info string longer than a message, shorter than the overflow size (E3), in a block
    # with code: an empty one shows nothing at all, which its own tests pin (`test_segments`).
    long_info = not small and draw(st.integers(0, 7)) == 0
    if long_info:
        language += draw(st.sampled_from((" ", "  title "))) + "word " * draw(st.integers(40, 180))
    lines = draw(st.lists(_code_line, min_size=0, max_size=4 if small else 30))
    if long_info and not "".join(lines).strip():
        lines.append("x = 1")
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
# Markdown's fences, as Discord renders them (E3): a line of three or more backticks, after
# indentation, opens a block, with an info string that holds no backtick; only a line of at
# least as many backticks and nothing else (spaces aside) closes it. "```After" closes nothing.
_OPENING_FENCE = re.compile(r"[ \t]*(`{3,})[^`\n]*\Z")
_CLOSING_FENCE = re.compile(r"[ \t]*(`{3,})[ \t]*\r?\Z")
_WHITESPACE = re.compile(r"\s+")
AUTO_CLOSERS = set('*~`)"')


def oracle_key(text: str) -> str:
    """Text with fence lines and all whitespace removed. Coarse: for text still in the buffers
    (`tests/domain/test_machine_properties.py`), where message edges are not known yet. What reached
    the channel is compared whitespace-exactly, with `as_written`."""
    return _WHITESPACE.sub("", _FENCE_LINE.sub("", text))


def open_fence(text: str) -> str | None:
    """The fence of the block still open at the end of `text`, or None (E3)."""
    fence: str | None = None
    for line in text.split("\n"):
        if fence is None:
            opening = _OPENING_FENCE.match(line)
            if opening is not None:
                fence = opening.group(1)
        else:
            closing = _CLOSING_FENCE.match(line)
            if closing is not None and len(closing.group(1)) >= len(fence):
                fence = None
    return fence


def fences_balanced(message: str) -> bool:
    """Every code block a message opens, it closes (E3), as Markdown pairs fences: a closing
    fence is backticks alone on their line, so prose glued to it ("```After") leaves the block
    open, and a shorter run inside a longer fence is code."""
    return open_fence(message) is None


def without_closers(text: str) -> str:
    """The oracle key with auto-closed markers (E8) removed from its end."""
    return oracle_key(text).rstrip("".join(AUTO_CLOSERS))


def punctuation_only(content: str) -> bool:
    """A message made only of punctuation (`...`, `:)`, `!`), which E6 never sends alone."""
    text = shown(content)
    return bool(text) and all(c.isspace() or unicodedata.category(c)[0] == "P" for c in text)


def no_lone_punctuation(messages: Sequence[str], visible: str) -> None:
    """E6: no message is punctuation alone, unless the whole answer is (nothing disappears;
    fence lines aside: one with nothing after it is not sent, E3)."""
    if punctuation_only(_FENCE_LINE.sub("", visible)):
        return
    lone = [m for m in messages if punctuation_only(m)]
    assert not lone, (lone, [m[:40] for m in messages])


def shown(content: str) -> str:
    """What Discord displays of a message's content: leading and trailing whitespace of the
    whole message trimmed (Discord does it), everything inside — blank lines, indentation —
    exactly as sent. The only normalization of whitespace any oracle here allows."""
    return content.strip()


_LEADING_WHITESPACE = re.compile(r"\s*")
# Markup cordstream adds around a piece of a code block it had to split (E3, E8): a fence line
# that reopens the block at a message's start, a fence that closes it at a message's end.
_ADDED_OPENING = re.compile(r"[ \t]*`{3,}[^`\s]*\n")  # a fence and a language word
_ADDED_CLOSING = re.compile(r"\n[ \t]*`{3,}\Z")
_BLANK_LINES = re.compile(r"(?:[ \t]*\n)*")
_FENCE_RUN = re.compile(r"(?:[ \t]*`{3,}[^`\n]*\n)*")
_FENCE_LINES = re.compile(r"^[ \t]*`{3,}[^`\n]*(?:\n|\Z)", re.MULTILINE)
_TEXT_FENCE_LINE = re.compile(r"[ \t]*`{3,}[^`\n]*(\n|\Z)")


def as_written(
    messages: Sequence[str], text: str, *, closers: bool = False, fences: bool = False
) -> list[tuple[int, int]]:
    """Where each message sits in `text`; asserts that the messages, as Discord shows them
    (`shown`), are `text` in order with only whitespace left out between them and at both
    ends: no character lost, added, duplicated or moved, and no blank line lost between two
    pieces that share a message. With `closers`, the last message may end with the inline
    markers a final flush closes (E8). With `fences`, a message may also carry the fences
    cordstream adds to a code block it splits or closes (E3, E8): a reopening fence line at its
    start (standing for the model's opening line when that one was too long to send) and a
    closing fence at its end (standing for the model's own when that one did not fit, or for
    none at all at the end of the answer); an opening fence line with nothing after it is
    markup alone and may be missing (E3). Everything else, whitespace included, is exact.
    Linear in the text."""
    spans: list[tuple[int, int]] = []
    position = 0
    ours_closed = False  # the previous message ended with a fence cordstream added
    for index, content in enumerate(messages):
        message = shown(content)
        match = _LEADING_WHITESPACE.match(text, position)
        assert match is not None
        start = match.end()
        last = closers and index == len(messages) - 1
        if fences and not _holds(text, message, start, last):
            start, message, ours_closed = _without_added_fences(
                message, text, position, start, ours_closed=ours_closed, closers=last
            )
        else:
            ours_closed = False
        if last:
            # The longest prefix the text holds, once only added closers are taken off.
            while message and message[-1] in AUTO_CLOSERS and not text.startswith(message, start):
                message = message[:-1]
        assert text.startswith(message, start), (
            f"message {index} is not the text at {start}: {message[:60]!r} vs "
            f"{text[start : start + 60]!r}"
        )
        position = start + len(message)
        spans.append((start, position))
    rest = text[position:]
    if fences:  # the model's closing fence our own stood for, or fence lines alone (E3)
        rest = _FENCE_LINES.sub("", rest.lstrip())
    assert not rest.strip(), f"lost at the end: {rest[:60]!r}"
    return spans


def _holds(text: str, message: str, start: int, closers: bool) -> bool:
    """Whether `text` holds `message` at `start`, but for added closers when `closers`."""
    if closers:
        message = message.rstrip("".join(AUTO_CLOSERS))
    return text.startswith(message, start)


def _without_added_fences(
    message: str, text: str, position: int, start: int, *, ours_closed: bool, closers: bool
) -> tuple[int, str, bool]:
    """`as_written` with fences: where `message` starts in `text` once the fence markup
    cordstream added is taken off it, the message without it, and whether it ended with an
    added closing fence. Each reading also with the model's opening lines in place of added
    ones that stand for them (`_stood_for`). The first reading that fits wins; none fits: the
    message as it is."""
    closing = _ADDED_CLOSING.search(message)
    shapes = [(message, False)]
    if closing is not None:
        shapes.append((message[: closing.start()], True))
    for shape, closed in shapes:
        for begin, body in _starts(shape, text, position, start, ours_closed):
            for reading in (body, _stood_for(body, text, begin)):
                if reading is not None and _holds(text, reading, begin, closers):
                    return begin, reading, closed
    return start, message, False


def _starts(
    message: str, text: str, position: int, start: int, ours_closed: bool
) -> list[tuple[int, str]]:
    """Where `message` may start: at `start`; after the model's closing fence that an added
    one stood for; or, without an added reopening fence line, after the model's own opening
    line (which it replaced) or anywhere in the whitespace before `start` (a continued block's
    first line keeps its indentation)."""
    starts = [(start, message)]
    markup = _FENCE_RUN.match(text, start)  # fence lines alone, empty blocks: nothing to show
    assert markup is not None
    if markup.end() > start:
        starts.append((_skip_space(text, markup.end()), message))
    own = _TEXT_FENCE_LINE.match(text, start)
    if ours_closed and own is not None:
        starts.append((_skip_space(text, own.end()), message))
    added = _ADDED_OPENING.match(message)
    if added is not None:
        body = message[added.end() :]
        if own is not None:  # blank lines after it fall at the split (E3)
            blank = _BLANK_LINES.match(text, own.end())
            assert blank is not None
            starts += [(own.end(), body), (blank.end(), body)]
            if markup.end() > own.end():  # empty blocks before it
                starts.append((markup.end(), body))
        starts += [(candidate, body) for candidate in range(position, start + 1)]
    return starts


def _stood_for(message: str, text: str, start: int) -> str | None:
    """A message holding a block's first piece that starts with an added fence line standing
    for the model's opening line (too long for a message, E3): the message with the model's
    lines in place of each such added line (and the empty blocks before it), as far as the
    text holds the message; None when it holds none."""
    rebuilt, position, done, line = [], start, 0, 0
    while line < len(message):
        added = _ADDED_OPENING.match(message, line)
        if added is not None and text.startswith(added.group(), position + line - done):
            added = None  # the model's own line
        run = _FENCE_RUN.match(text, position + line - done)
        assert run is not None
        own = (run.group().splitlines()[-1:] or [""])[0]
        if added is not None and f"{fence_of(own)}{language_of(own)}" == added.group().strip():
            if not text.startswith(message[done:line], position):
                return None
            rebuilt += [message[done:line], run.group()]
            position, done = run.end(), added.end()
            line = done
            continue
        line = message.find("\n", line) + 1 or len(message)
    return "".join([*rebuilt, message[done:]]) if rebuilt else None


def _skip_space(text: str, position: int) -> int:
    match = _LEADING_WHITESPACE.match(text, position)
    assert match is not None
    return match.end()
