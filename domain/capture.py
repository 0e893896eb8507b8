"""Think and details capture: markup the model writes that must not reach the channel (E4, E5).

The scanner sits in front of segmentation. The idea: it turns model text into an ordered list
of operations, in source order: visible text (to be segmented and sent), raw thought text
(`<think>` and the other tags of E4), details text (`<details>` bodies, first `<summary>`
removed, E5), block ends, and a *retract* for a stray closing think tag. What each operation
does to the stream is the machine's business: a retract moves the visible text not yet sent
into the raw thoughts (E4).

A tag split across chunks is held back only while it can still become one of these tags, and
never past `MAX_PENDING` characters (E2); anything else is released as text at once.

Tags inside a fenced code block or an inline code span are the model's text, not markup (E4).
The machine tells `feed` whether the text starts inside a fence and what the current partial
line is; `feed` follows fence lines and backticks from there, and only when it meets a tag.

It never sends, segments or stores anything: it only classifies text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, assert_never

from cordstream.domain.markdown import closes_fence, fence_of

Mode: TypeAlias = Literal["visible", "think", "details"]
OpKind: TypeAlias = Literal["visible", "think", "think_open", "details", "details_end", "retract"]
Op: TypeAlias = tuple[OpKind, str]

# Longest partial tag held back while waiting for its '>'.
MAX_PENDING: Final = 256
_THINK_NAMES: Final = ("think", "thinking", "reasoning")
_ALL_NAMES: Final = (*_THINK_NAMES, "details", "summary")

_TAG = re.compile(
    r"<(/?)(?:[A-Za-z][\w.-]{0,31}:)?(think|thinking|reasoning|details|summary)"
    r"(?=[\s/>])[^<>]{0,200}>",
    re.IGNORECASE,
)
# A '<' that could still grow into one of the tags above.
_PARTIAL = re.compile(r"<(/?)(?:([A-Za-z][\w.-]{0,31}):)?([A-Za-z][\w.-]{0,31})?([\s/][^<>]*)?\Z")


@dataclass(frozen=True, slots=True)
class Capture:
    """Scanner state: the current block kind, and a partial tag held back (starts with '<')."""

    mode: Mode = "visible"
    pending: str = ""
    # Inside a details block: whether its first <summary> was seen, and whether we are in it.
    summary_done: bool = False
    in_summary: bool = False


IDLE: Final = Capture()


def _could_become_tag(text: str) -> bool:
    if len(text) > MAX_PENDING:
        return False
    match = _PARTIAL.match(text)
    if match is None:
        return False
    namespace, name, rest = match.group(2), (match.group(3) or "").lower(), match.group(4)
    if rest is not None:
        return name in _ALL_NAMES
    if any(full.startswith(name) for full in _ALL_NAMES):
        return True
    # "<b" may still become "<b:think>"; a namespace is only possible before the first ':'.
    return namespace is None


def feed(
    capture: Capture, text: str, *, fence: str = "", line: str = ""
) -> tuple[Capture, list[Op]]:
    """Scan `text` (after whatever was held back) and return the new state and operations.

    `fence`: the fence of the code block the text starts inside ("" if none); `line`: the
    visible text of the current line before it (see `cordstream.domain.segments.context`).
    """
    data = capture.pending + text
    ops: list[Op] = []
    mode = capture.mode
    summary_done, in_summary = capture.summary_done, capture.in_summary
    position = tracked = 0
    where = _Where(fence, line)
    for match in _TAG.finditer(data):
        if mode == "visible":
            where.advance(data[tracked : match.start()])
            tracked = match.start()
            if where.literal:
                continue  # inside code: the tag is text, and is tracked with what follows
        closing, name = match.group(1) == "/", match.group(2).lower()
        before = data[position : match.start()]
        kind: _TagKind
        if match.group(0).endswith("/>"):
            kind = "text" if mode != "visible" else "drop"  # an empty <think/>: nothing inside
        else:
            kind = _classify(mode, closing, name, in_summary, summary_done)
        if kind == "text":
            continue  # the tag is ordinary text of the current block; keep scanning
        _emit(ops, mode, in_summary, before)
        position = tracked = match.end()
        match kind:
            case "open_think":
                mode = "think"
                ops.append(("think_open", ""))
            case "open_details":
                mode, summary_done, in_summary = "details", False, False
            case "close_think":
                mode = "visible"
            case "stray_close_think":
                ops.append(("retract", ""))
            case "close_details":
                mode, in_summary = "visible", False
                ops.append(("details_end", ""))
            case "open_summary":
                in_summary = True
            case "close_summary":
                in_summary, summary_done = False, True
            case "drop":
                pass
            case _:
                assert_never(kind)
    rest = data[position:]
    held = ""
    cut = rest.rfind("<")
    if cut != -1 and _could_become_tag(rest[cut:]):
        rest, held = rest[:cut], rest[cut:]
    _emit(ops, mode, in_summary, rest)
    if mode == "visible" and not held:
        return IDLE, ops  # the machine's fast path tests `is IDLE`
    return Capture(mode, held, summary_done, in_summary), ops


def close(capture: Capture) -> tuple[Capture, list[Op]]:
    """End of the text (a flush, E8): release a held partial tag, end an unterminated block."""
    ops: list[Op] = []
    _emit(ops, capture.mode, capture.in_summary, capture.pending)
    if capture.mode == "details":
        ops.append(("details_end", ""))
    return IDLE, ops


class _Where:
    """Whether visible text at a position is code: fence lines and backticks seen so far."""

    def __init__(self, fence: str, line: str) -> None:
        self.fence = fence
        self.line = line

    def advance(self, text: str) -> None:
        newline = text.rfind("\n")
        if newline == -1:
            self.line += text
            return
        # Lines end at "\n" only, as in the segmenter (not at \u2028 or a lone \r).
        for line in (self.line + text[:newline]).split("\n"):
            if self.fence:
                if closes_fence(line, self.fence):
                    self.fence = ""
            else:
                self.fence = fence_of(line) or ""
        self.line = text[newline + 1 :]

    @property
    def literal(self) -> bool:
        if self.fence or fence_of(self.line):
            return True  # in a fenced block, or on its opening line
        return self.line.count("`") % 2 == 1  # in an inline code span


# What a tag does (`_classify`): "text" leaves it in the text of the current block.
_TagKind: TypeAlias = Literal[
    "text",
    "drop",
    "open_think",
    "close_think",
    "stray_close_think",
    "open_details",
    "close_details",
    "open_summary",
    "close_summary",
]


def _classify(
    mode: Mode, closing: bool, name: str, in_summary: bool, summary_done: bool
) -> _TagKind:
    think = name in _THINK_NAMES
    if mode == "visible":
        if think:
            return "stray_close_think" if closing else "open_think"
        if name == "details":
            return "drop" if closing else "open_details"
        return "text"  # <summary> outside details is the model's own text
    if mode == "think":
        return "close_think" if think and closing else "text"
    # details mode
    if name == "details" and closing:
        return "close_details"
    if name == "summary" and not summary_done:
        if not closing and not in_summary:
            return "open_summary"
        if closing and in_summary:
            return "close_summary"
    return "text"


def _emit(ops: list[Op], mode: Mode, in_summary: bool, text: str) -> None:
    if not text or in_summary:
        return  # the first <summary> of a details block is its label: dropped (E5)
    kind: OpKind = "visible" if mode == "visible" else "think" if mode == "think" else "details"
    if ops and ops[-1][0] == kind:
        ops[-1] = (kind, ops[-1][1] + text)
    else:
        ops.append((kind, text))
