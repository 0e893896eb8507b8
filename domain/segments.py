"""Segmentation: when visible text leaves the buffer, and in what pieces (SPEC E1–E3, E6–E8, E10).

Visible text (think and details already removed by `cordstream.domain.capture`) arrives in
arbitrary chunks, and leaves in pieces when a boundary of E1–E3 is reached. The idea: keep the
text after the last complete line, the *tail*, apart from everything else, and route only
complete lines. The tail lives at the top of the machine's state, since it is the only thing
most chunks change; a newline is a boundary once a character follows it (E1), so `feed` first
cuts the tail into complete lines, and each line goes to one place:

- a prose line joins `held`, which leaves as a piece once it is balanced (E2); net counts are
  kept per line, so no line is scanned twice;
- a table row joins the run of rows held whole until a non-row line arrives (E2);
- a code line joins the fenced block held until its closing fence, which is one piece if it
  fits a message, else leaves line by line in fenced pieces (E3);
- at degree 3 the tail is also cut at sentence ends (E1).

Holding is bounded: held text past `overflow` is cut at the best boundary (`_best_cut`, E2).

Every finished piece leaves through `emit`, whatever made it (a line, a sentence, an overflow
cut, code), and so passes the two stages that keep punctuation from standing alone (E6): the
*lookahead*, where a finished piece waits for the first character after it so that a following
line of punctuation can join it (`_steal` makes room when both do not fit), and the *glue*,
where punctuation with no piece before it waits to start the next piece (`_attach`; a code
block takes it as its `lead`). `flush` (E8) empties all of it: tail, held text, an open fence,
lookahead and glue (`end_glue`).

Pieces are contiguous slices of the visible text (prose, tables) or code blocks whose closing
fence lost only its newline (restored by `_separator` when text follows), so nothing is
dropped, whitespace included; trimming it is the outbox's job (`outbox.take`, E6). Every cut
counts regional indicators from where its piece starts (`graphemes.cut_before`'s `anchor`, E7).

Cost (E10): each character is looked at a constant number of times. The tail is searched for
newlines only in new text, held prose keeps running counts, cuts walk with an index instead of
re-slicing the remainder; degree 3 re-counts the unfinished sentence once per sentence-end
candidate, bounded by `overflow`.

It never packs pieces into messages, never counts messages and never decides when anything is
sent: the outbox and the delivery policy do.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, replace
from typing import Final

from cordstream.domain.graphemes import cut_before, is_boundary
from cordstream.domain.markdown import closers, closes_fence, fence_of, language_of

OVERFLOW: Final = 1000
_TABLE_ROW = re.compile(r"[ \t]*\|")
_WORD_CHARACTER = re.compile(r"[^\W_]")  # a letter or digit, in any script
_TERMINATORS: Final = ".!?…。！？"
# A sentence end: Latin terminators need whitespace after them; CJK ones do not (E1).
_SENTENCE_END = re.compile(r"[.!?…]+[\"”’)\]]*\s+|[。！？]+[」』\"”’)）\]]*\s*")
_CLOSERS_AFTER_TERMINATOR: Final = '"”’)]」』）'
_ABBREVIATIONS: Final = frozenset(
    {
        "e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "no",
        "fig", "approx", "cf", "al", "inc", "ltd", "co", "mt", "ca", "ph.d", "u.s", "a.m", "p.m",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Piece:
    """One unit of outgoing text: the model's `body` and the markup cordstream added around it.

    `prefix` is a reopened code fence, `suffix` a closing fence or auto-closed markers (E3, E8).
    `code` marks a piece of a fenced block, which must start on a line of its own when packed.
    `lead`: the start of `prefix` that the model wrote, the punctuation a block's first piece
    took along (E6); `stands`: the model's text that the rest of `prefix` stands for, an opening
    fence line longer than a message (E3); the model's own text of the piece is `raw`.
    """

    body: str
    prefix: str = ""
    suffix: str = ""
    code: bool = False
    lead: str = ""
    stands: str = ""

    @property
    def raw(self) -> str:
        """What the model wrote of this piece: for a stray `</think>` that retracts it (E4)."""
        return self.lead + self.stands + self.body

    def extended(self, text: str) -> Piece:
        """This piece with `text` after its body: no suffix, as nothing follows a suffix."""
        return Piece(
            self.body + text, prefix=self.prefix, code=self.code, lead=self.lead, stands=self.stands
        )

    @property
    def text(self) -> str:
        return self.prefix + self.body + self.suffix

    @property
    def size(self) -> int:
        return len(self.prefix) + len(self.body) + len(self.suffix)


@dataclass(frozen=True, slots=True)
class Balance:
    """Net counts of the constructs that hold prose back (E2)."""

    quotes: int = 0
    curly: int = 0
    parens: int = 0
    brackets: int = 0

    @property
    def closed(self) -> bool:
        return self.quotes % 2 == 0 and self.curly <= 0 and self.parens <= 0 and self.brackets <= 0

    def plus(self, text: str) -> Balance:
        if not any(c in text for c in '"“”()[]'):
            return self
        emoticons = text.count(":(") + text.count(";(") + text.count(":-(") + text.count("=(")
        return Balance(
            self.quotes + text.count('"'),
            self.curly + text.count("“") - text.count("”"),
            self.parens + text.count("(") - emoticons - text.count(")"),
            self.brackets + text.count("[") - text.count("]"),
        )


EVEN: Final = Balance()


@dataclass(frozen=True, slots=True, kw_only=True)
class Code:
    """An open fenced block: its fence, how to reopen it, and the raw text of the current piece."""

    fence: str  # the backtick run that opened it, e.g. "```"
    reopen: str  # fence plus language word, the first line of a continuation piece
    body: str  # raw text of the current piece (starts with the opening line unless continued)
    continued: bool
    # Punctuation-only text just before the block, starting its first piece (E6); "" after it.
    lead: str = ""
    # An opening fence line too long for a message, which `reopen` stands for in the current
    # piece (`Piece.stands`); "" after it.
    stands: str = ""

    def with_body(self, body: str) -> Code:
        """The same block with another current piece (by keyword: four fields are strings)."""
        return Code(
            fence=self.fence,
            reopen=self.reopen,
            body=body,
            continued=self.continued,
            lead=self.lead,
            stands=self.stands,
        )

    @property
    def prefix(self) -> str:
        return self.lead + (self.reopen + "\n" if self.continued else "")

    @property
    def suffix(self) -> str:
        return "\n" + self.fence

    def piece(self) -> Piece:
        """The current piece as a message of its own, its fence closed (E3, E7)."""
        body = self.body.rstrip("\r\n")
        return Piece(
            body,
            prefix=self.prefix,
            suffix=self.suffix,
            code=True,
            lead=self.lead,
            stands=self.stands,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Segmenter:
    """Everything the segmenter holds except the tail (which the machine keeps on top)."""

    max_len: int
    overflow: int
    sentences: bool  # humanizer degree 3: sentence ends are boundaries too
    held: str = ""
    balance: Balance = EVEN
    table: bool = False
    code: Code | None = None
    lookahead: Piece | None = None
    # Punctuation-only text (and the whitespace after it) that found no piece before it to
    # join: it starts the next piece (E6).
    glue: Piece | None = None
    # How long the tail may grow before `feed` has to look at it; -1 = always look.
    tail_room: int = -1
    # Whether the part of the current line already cut off by the overflow (E2) left an inline
    # code span open (an odd number of backticks): capture must still see the rest as code.
    cut_in_code: bool = False

    @property
    def buffered(self) -> str:
        """Raw text held here (not the tail): for a stray `</think>` that retracts it (E4)."""
        parts = [
            self.glue.body if self.glue is not None else "",
            self.lookahead.raw if self.lookahead is not None else "",
            self.held,
        ]
        if self.code is not None:
            parts += [self.code.lead, self.code.stands, self.code.body]
        return "".join(parts)


def context(seg: Segmenter, tail: str) -> tuple[str, str]:
    """For capture: the fence the next text starts inside ("" if none), and its partial line."""
    fence = seg.code.fence if seg.code is not None else ""
    if tail.endswith("\n"):  # a complete line the segmenter has not routed yet (E1)
        if fence:
            return ("" if closes_fence(tail, fence) else fence), ""
        return fence_of(tail) or "", ""
    # After an overflow cut inside an inline code span, the rest of the line is still code.
    return fence, ("`" + tail if seg.cut_in_code else tail)


def new_segmenter(max_len: int, *, sentences: bool) -> Segmenter:
    """A segmenter with the fast path off until the first `feed` (`tail_room`)."""
    return Segmenter(max_len=max_len, overflow=min(OVERFLOW, max_len), sentences=sentences)


def hold(seg: Segmenter) -> Segmenter:
    """`seg` with the fast path off until the next `feed`: for a caller that routes text
    elsewhere for now (a `<think>` block being captured). A new segmenter starts that way."""
    return seg if seg.tail_room < 0 else replace(seg, tail_room=-1)


def feed(seg: Segmenter, tail: str, text: str) -> tuple[Segmenter, str, list[Piece]]:
    """Add visible `text` after `tail`; return the new state, the new tail and finished pieces."""
    work = _Work(seg)
    old_len = len(tail)
    data = tail + text
    last = data.rfind("\n", 0, len(data) - 1)  # a newline that is the last character waits
    if last != -1:
        start = 0
        # Only the new text can hold new newlines; the old tail had none (or one at its end).
        nl = data.find("\n", max(0, old_len - 1))
        while nl != -1 and nl <= last:
            work.line(data[start : nl + 1])
            work.cut_in_code = False  # a new line starts outside any inline code span
            start = nl + 1
            nl = data.find("\n", start)
        tail = data[start:]
        old_len = 0
    else:
        tail = data
    if seg.sentences:
        tail = work.sentences(tail, old_len)
    tail = work.overflow(tail)
    return work.freeze(tail)


def flush(seg: Segmenter, tail: str, *, close_markers: bool) -> list[Piece]:
    """Everything still buffered as pieces (E8); the caller starts over with a new segmenter."""
    work = _Work(seg)
    if tail.endswith("\n") or (work.code is None and fence_of(tail) is not None):
        # The last line is complete, or ends the answer as an opening fence line (E3: a fence
        # line is one whether or not its newline came): route it like any other.
        work.line(tail)
        tail = ""
    if work.code is not None:
        if tail.strip() and closes_fence(tail, work.code.fence):
            work.line(tail)
        else:
            work.code_line(tail)
            work.end_code(natural=False)
        tail = ""
    elif tail:
        joined = not work.held and _punctuation_only(tail) and work.join_lookahead(tail)
        if not joined:
            work.release_lookahead()
            work.held += tail
            work.table = False
    work.release_lookahead()
    for piece in _cut(work.held, seg.max_len):
        work.emit(piece)
    work.end_glue()
    pieces = work.out
    while pieces and not pieces[-1].text.strip():
        pieces.pop()  # whitespace at the very end ends a message: Discord would trim it
    if close_markers and pieces and not pieces[-1].code:
        last = pieces[-1]
        suffix = closers(last.body)
        body = last.body.rstrip()
        if suffix and len(body) + len(suffix) <= seg.max_len:
            pieces[-1] = Piece(body, suffix=suffix)
    return pieces


class _Work:
    """A mutable scratch copy of a `Segmenter` for the length of one call (never escapes it)."""

    def __init__(self, seg: Segmenter) -> None:
        self.seg = seg
        self.held = seg.held
        self.balance = seg.balance
        self.table = seg.table
        self.code = seg.code
        self.lookahead = seg.lookahead
        self.glue = seg.glue
        self.cut_in_code = seg.cut_in_code
        self.out: list[Piece] = []

    # -- lines ---------------------------------------------------------------------------

    def line(self, line: str) -> None:
        code = self.code
        if code is not None:
            if closes_fence(line, code.fence):
                closer = line.rstrip("\r\n")
                if code.continued and not code.body.strip():
                    # Nothing since the last piece, which ended with a closing fence of ours:
                    # it stands for this one (a block as long as a message is not followed by
                    # an empty one, E3).
                    self.end_code(natural=False)
                elif len(code.prefix) + len(code.body) + len(closer) <= self.seg.max_len:
                    self.code = code.with_body(code.body + closer)
                    self.end_code(natural=True)
                else:
                    self.end_code(natural=False)  # our own closing fence stands for it
            else:
                self.code_line(line)
            return
        row = _TABLE_ROW.match(line) is not None
        if self.table and not row:
            # The table ends before this line, which is then routed like any line after a
            # finished piece: a blank or punctuation-only line joins the table's piece (E6).
            self.release_held()
        if self.lookahead is not None:
            if not self.held:
                if not line.strip():
                    self.blank(line)  # a blank line keeps it waiting for the next one
                    return
                if _punctuation_only(line) and self.join_lookahead(line):
                    return
            self.release_lookahead()
        fence = fence_of(line)
        if fence is not None:
            self.release_held()
            self.open_code(fence, language_of(line))
            self.code_line(line)
            return
        if self.held and row != self.table:
            self.release_held()
        self.table = row
        self.held += line
        if row:
            return  # a table still growing is held until its last row is known (E2)
        self.balance = self.balance.plus(line)
        if self.balance.closed:
            self.release_held()

    def release_held(self) -> None:
        if self.held:
            for piece in _cut(self.held, self.seg.max_len):
                self.finish(piece)
        self.held, self.balance, self.table = "", EVEN, False

    # -- code ----------------------------------------------------------------------------

    def code_line(self, line: str) -> None:
        code = self.code
        assert code is not None
        max_len = self.seg.max_len
        body = code.body
        if code.stands[-1:] not in ("", "\n"):
            # The rest of an opening fence line too long for a message, which arrived cut: the
            # reopening line stands for all of it.
            self.code = replace(code, stands=code.stands + line)
            return
        if len(code.prefix) + len(body) + len(line) + len(code.suffix) <= max_len:
            self.code = code.with_body(body + line)
            return
        lead, stands = code.lead, code.stands
        if not code.continued and not body:
            # The opening fence line itself, longer than a message: the reopening line, its
            # fence and language word, stands for it; the rest of its info string is markup
            # Markdown does not show (E3).
            self.code = replace(code, continued=True, stands=line)
            return
        blank = ""  # blank lines the piece holds after its opening line (E6: kept as written)
        if _shows_code(code):
            self.emit_code(code.piece())
            lead = ""
        else:
            blank = body if code.continued else body.partition("\n")[2]
        # The opening line alone is not worth a message: the reopen prefix stands for it, and
        # the blank lines after it start the next piece (unless they would crowd it: then they
        # fall at the cut).
        reopen, suffix = code.reopen + "\n", code.suffix
        if 2 * (len(lead) + len(reopen) + len(blank) + len(suffix)) > max_len:
            blank = ""
        start = 0
        while len(line) - start > max(
            1, max_len - len(lead) - len(reopen) - len(blank) - len(suffix)
        ):
            room = max(1, max_len - len(lead) - len(reopen) - len(blank) - len(suffix))
            end = cut_before(line, start + room, start, anchor=start)
            self.emit_code(
                Piece(
                    blank + line[start:end],
                    prefix=lead + reopen,
                    suffix=suffix,
                    code=True,
                    lead=lead,
                    stands=stands,
                )
            )
            lead = blank = stands = ""
            start = end
        self.code = replace(
            code, body=blank + line[start:], continued=True, lead=lead, stands=stands
        )

    def end_code(self, *, natural: bool) -> None:
        code = self.code
        assert code is not None
        self.code = None
        body = code.body
        if natural:
            self.finish(
                Piece(body, prefix=code.prefix, code=True, lead=code.lead, stands=code.stands)
            )
        elif _shows_code(code):
            self.finish(code.piece())
        elif code.lead:
            # An opening fence with nothing after it is markup alone, nothing to show; the
            # punctuation before it waits for the next piece again (E6).
            self.emit(Piece(code.lead))

    def open_code(self, fence: str, language: str) -> Code:
        """A block opens. Punctuation waiting for the next piece starts its first piece (E6):
        it is at most half a message (`emit`), so the block keeps room."""
        lead = ""
        glue = self.glue
        if glue is not None:
            self.glue = None
            lead = glue.body
            if not lead.endswith("\n"):
                # Degree 3 cut a sentence ("... ") off the line the fence then starts: the fence
                # goes on a line of its own, as the outbox packs code after text anyway.
                lead += "\n"
        code = Code(fence=fence, reopen=fence + language, body="", continued=False, lead=lead)
        self.code = code
        return code

    def emit_code(self, piece: Piece) -> None:
        self.release_lookahead()
        self.emit(piece)

    # -- finished pieces and E6 ----------------------------------------------------------

    def finish(self, piece: Piece) -> None:
        if not piece.text.strip():
            self.blank(piece.body)
            return
        if self.lookahead is not None and lone(piece) and self.join_lookahead(piece.body):
            return  # E6: punctuation joins the piece before it (a sentence at degree 3)
        self.release_lookahead()
        if piece.suffix:  # a split code piece: nothing may be appended after its fence
            self.emit(piece)
            return
        glue = self.glue
        if glue is not None:  # punctuation waiting for the next piece: this one (E6)
            self.glue = None
            *ready, piece = _attach(glue, piece, self.seg.max_len)
            self.out.extend(ready)
        self.lookahead = piece

    def release_lookahead(self) -> None:
        if self.lookahead is not None:
            self.emit(self.lookahead)
            self.lookahead = None

    def emit(self, piece: Piece) -> None:
        """Every finished piece leaves through here (E6): a punctuation-only piece that gets
        here found no piece before it to join, so it becomes the *glue* and starts the next
        piece instead, with the whitespace that follows it (E6)."""
        glue = self.glue
        cap = self.seg.max_len // 2
        if glue is None:
            if piece.size <= cap and lone(piece):
                self.glue = piece
            else:
                self.out.append(piece)
            return
        if lone(piece) or not piece.text.strip():
            if glue.size + piece.size <= cap:
                self.glue = Piece(glue.body + piece.body)
                return
            self.out.append(glue)  # half a message of punctuation is no lone line (E7)
            self.glue = None
            self.emit(piece)
            return
        self.glue = None
        self.out.extend(_attach(glue, piece, self.seg.max_len))

    def end_glue(self) -> None:
        """The end of the text (E8) with punctuation still waiting for a next piece that never
        came: it joins the last piece of this flush when that one can take it, else it goes as
        it is (E6: nothing disappears; the outbox still packs it with a piece before it)."""
        glue = self.glue
        if glue is None:
            return
        self.glue = None
        out = self.out
        index = len(out) - 1
        while index >= 0 and not out[index].text.strip():
            index -= 1  # whitespace after the piece stays between it and the punctuation
        if index >= 0 and not out[index].suffix:
            last = out[index]
            between = "".join(piece.body for piece in out[index + 1 :])
            separator = _separator(last) if not between else ""
            text = separator + between + glue.body
            if last.size + len(text) <= self.seg.max_len:
                out[index:] = [last.extended(text)]
                return
            stolen = None if last.prefix or last.code else _steal(last.body, text, self.seg.max_len)
            if stolen is not None:
                out[index:] = [Piece(stolen[0]), Piece(stolen[1])]
                return
        out.append(glue)

    def blank(self, text: str) -> None:
        """Whitespace between pieces (blank lines) is kept, so pieces that share a message show
        it as written (E6). It waits with the finished piece before it or, when there is none
        or it does not fit there, as the lookahead on its own; either way it waits for what
        follows. It is never a message alone (the outbox trims whitespace where a message
        starts or ends, as Discord does) and never a piece punctuation joins.

        A run of whitespace is kept up to a message's length: pieces on either side of a
        longer run cannot share a message, so all of it falls at message edges anyway. After a
        full prose piece it stays with that piece, past the message length: whitespace at a
        message's end does not count (the outbox trims it, `outbox.take`).
        """
        max_len = self.seg.max_len
        ahead = self.lookahead
        if ahead is not None:
            if not ahead.text.strip():  # whitespace already waiting: the run grows
                if ahead.size < max_len:
                    self.lookahead = Piece((ahead.body + text)[:max_len])
                return
            separator = _separator(ahead)
            if ahead.size + len(separator) + len(text) <= max_len:
                self.lookahead = ahead.extended(separator + text)
                return
            if not (ahead.prefix or ahead.code):
                # A full prose piece keeps the whitespace after it (a run of at most a message;
                # trimmed where its message ends, so it never makes one longer, E7) and keeps
                # waiting: punctuation after the blank line can still take its end along (E6).
                body = ahead.body
                trailing = len(body) - len(body.rstrip())
                if trailing < max_len:
                    self.lookahead = Piece(body + text[: max_len - trailing])
                return
            self.release_lookahead()
        self.lookahead = Piece(text[:max_len])

    def join_lookahead(self, text: str) -> bool:
        """E6: punctuation-only `text` joins the finished piece waiting before it, when there
        is one (whitespace waiting is none) and both fit a message; when that piece is prose
        too full to take it, the end of that piece moves over to it (`_steal`). False when it
        did not join."""
        ahead = self.lookahead
        if ahead is None or not ahead.text.strip():
            return False
        separator = _separator(ahead)
        max_len = self.seg.max_len
        if ahead.size + len(separator) + len(text) <= max_len:
            self.lookahead = ahead.extended(separator + text)
            return True
        if ahead.prefix or ahead.suffix or ahead.code:
            return False  # routed as a line of its own, cut to size like any other (E7)
        stolen = _steal(ahead.body, text, max_len)
        if stolen is None:
            return False
        self.lookahead = None
        self.emit(Piece(stolen[0]))
        self.lookahead = Piece(stolen[1])
        return True

    # -- the tail ------------------------------------------------------------------------

    def sentences(self, tail: str, old_len: int) -> str:
        """Degree 3: cut sentence-sized pieces off the tail (E1)."""
        if self.code is not None or self.held or self.table or fence_of(tail) is not None:
            return tail  # not prose (a fence line still arriving is code, E3)
        # Sentence ends that can be new: from the run of terminators, closers and spaces
        # that ended the old tail.
        begin = old_len
        while begin > 0 and tail[begin - 1].isspace():
            begin -= 1
        while begin > 0 and tail[begin - 1] in _CLOSERS_AFTER_TERMINATOR:
            begin -= 1
        while begin > 0 and tail[begin - 1] in _TERMINATORS:
            begin -= 1
        start = 0
        for match in _SENTENCE_END.finditer(tail, begin):
            end = match.end()
            if end >= len(tail) or not _is_sentence_end(tail, match.start(), end):
                continue
            if not is_boundary(tail, end):
                continue  # a mark on the space after it (E7): not a place to cut
            if EVEN.plus(tail[start:end]).closed:
                # What waited (up to the overflow size) and the chunk that ended the sentence
                # can make it longer than a message: cut it to size first (E7).
                while end - start > self.seg.max_len:
                    cut = _best_cut(tail, start, self.seg.max_len)
                    self.finish(Piece(tail[start:cut]))
                    start = cut
                self.finish(Piece(tail[start:end]))
                start = end
        return tail[start:]

    def overflow(self, tail: str) -> str:
        """Bounded holding (E2, E7): cut what has waited past the overflow size."""
        seg = self.seg
        if self.code is None:
            if len(self.held) + len(tail) <= seg.overflow:
                return tail
            if self.held:
                self.release_held()  # complete lines: the newline is the best boundary there is
            if len(tail) <= seg.overflow:
                return tail
            self.release_lookahead()
            fence = fence_of(tail)
            if fence is None:
                return self.overflow_prose(tail)
            # E3: an opening fence line longer than the overflow size, still arriving: open
            # the block now, as `line` does for the complete line, and cut the line as code.
            code = self.open_code(fence, language_of(tail))
        else:
            code = self.code
        room = seg.max_len - len(code.prefix) - len(code.suffix) - len(code.body)
        if len(tail) > room:
            self.code_line(tail)  # emits whole pieces; keeps the rest as the piece body
            rest = self.code
            assert rest is not None
            self.code = rest.with_body("")
            return rest.body
        return tail

    def overflow_prose(self, tail: str) -> str:
        seg = self.seg
        start = 0
        while len(tail) - start > seg.overflow:
            # Never cut at the end of what has arrived: the next chunk may extend that
            # character's cluster (a skin tone after its emoji, E7).
            end = _best_cut(tail, start, min(seg.max_len, len(tail) - start - 1))
            # Through the lookahead like any finished piece: a line of punctuation after
            # the last cut can still join it (E6).
            self.finish(Piece(tail[start:end]))
            if tail.count("`", start, end) % 2:
                self.cut_in_code = not self.cut_in_code
            start = end
        return tail[start:]

    def freeze(self, tail: str) -> tuple[Segmenter, str, list[Piece]]:
        seg = self.seg
        if self.lookahead is not None and (
            self.held or (tail.strip() and not _punctuation_only(tail))
        ):
            self.release_lookahead()  # the next line is not a lone punctuation line (E6)
        code = self.code
        if seg.sentences or self.lookahead is not None or tail.endswith("\n"):
            room = -1  # the next character must be looked at (E1: it makes "\n" a boundary)
        elif code is not None:
            room = seg.max_len - len(code.prefix) - len(code.suffix) - len(code.body)
        else:
            room = seg.overflow - len(self.held)
        new = Segmenter(
            max_len=seg.max_len,
            overflow=seg.overflow,
            sentences=seg.sentences,
            held=self.held,
            balance=self.balance,
            table=self.table,
            code=code,
            lookahead=self.lookahead,
            glue=self.glue,
            tail_room=room,
            cut_in_code=self.cut_in_code,
        )
        return new, tail, self.out


# -- helpers ---------------------------------------------------------------------------------


def _separator(piece: Piece) -> str:
    """What goes between `piece` and the text that follows it in the model's answer.

    Prose and table pieces are contiguous slices of the answer: nothing. A finished code block
    ends with its closing fence, the newline after it taken off (so the outbox can pack the
    block): that newline, so the next text is never glued onto the fence.
    """
    return "\n" if ends_in_fence(piece) else ""


def ends_in_fence(piece: Piece) -> bool:
    """Whether `piece` ends with a code block's closing fence, its newline taken off: text
    after it must start on a new line. Not once text joined it after its fence (E6: `...` after
    a block, then `!` at degree 3: "...!" is not cut by a line break)."""
    if not piece.code:
        return False
    if piece.suffix:
        return True  # the closing fence cordstream added
    body = piece.body
    last = body[body.rfind("\n") + 1 :].strip()
    return bool(last) and not last.strip("`")


def _shows_code(code: Code) -> bool:
    """Whether the block's current piece holds code to show: more than whitespace, and, in a
    first piece, more than the opening fence line and blank lines (an empty block, E3)."""
    body = code.body
    if code.continued:
        return bool(body.strip())
    return bool(body.partition("\n")[2].strip())


def lone(piece: Piece) -> bool:
    """A punctuation-only piece of prose (E6): never a message of its own."""
    return not piece.code and not piece.suffix and _punctuation_only(piece.body)


def _attach(glue: Piece, piece: Piece, max_len: int) -> list[Piece]:
    """The punctuation `glue` (at most half a message) starting the prose `piece` (E6), as
    pieces that fit a message: one when both fit, else the glue and the start of the piece cut
    at its best boundary, then the rest.

    `piece` is never code: glue waits only outside a block (a block's first piece takes it as
    its `lead` when the block opens, `open_code`; inside a block nothing is finished before
    its end, and the lookahead was released before it opened). Nor has it a suffix: prose gets
    one only from `flush`, after the last piece left."""
    body = piece.body
    if glue.size + len(body) <= max_len:
        return [Piece(glue.body + body)]
    end = _best_cut(body, 0, max_len - glue.size)
    first = Piece(glue.body + body[:end])
    return [first, Piece(body[end:])] if end < len(body) else [first]


def _steal(body: str, text: str, max_len: int) -> tuple[str, str] | None:
    """E6 when a full prose piece `body` cannot take the punctuation `text` after it: cut the
    end of `body` off to go with `text`, as little as makes them fit, at the best boundary
    (newline, whitespace, grapheme, E7), and never only punctuation lines that joined `body`
    earlier (the punctuation would be alone again). None when `text` is over half a message,
    or `body` has no room to give. Costs one message's length, once per such line."""
    if 2 * len(text) > max_len:
        return None
    last = len(body.rstrip())  # what moves over must show something besides whitespace
    while True:  # and besides punctuation: lines of it that joined `body` before stay behind
        start = body.rfind("\n", 0, last) + 1
        if start == 0 or not _punctuation_only(body[start:last]):
            break
        last = len(body[:start].rstrip())
    lowest = len(body) + len(text) - max_len  # the least that must move for both to fit
    if lowest < 1 or lowest >= last:
        return None
    cut = body.rfind("\n", lowest, last)
    if cut != -1 and is_boundary(body, cut + 1):
        cut += 1
    else:
        cut = next(
            (i + 1 for i in range(last - 1, lowest - 1, -1) if body[i].isspace()),
            -1,
        )
        if cut == -1 or not is_boundary(body, cut):
            cut = cut_before(body, last - 1, lowest - 1) if last - 1 > lowest - 1 else lowest
    if cut < lowest or cut >= last:
        return None
    return body[:cut], body[cut:] + text


def _punctuation_only(text: str) -> bool:
    """True for text like `...`, `:)`, `!` (E6); False for empty text and for emoji."""
    stripped = text.strip()
    if not stripped or _WORD_CHARACTER.search(stripped) is not None:
        return False  # a letter or digit anywhere: decided in C, for most lines at once
    return all(c.isspace() or unicodedata.category(c).startswith("P") for c in stripped)


def _is_sentence_end(text: str, start: int, end: int) -> bool:
    """Whether the terminators at `start` (whitespace follows up to `end`) end a sentence."""
    following = text[end]
    if text[start] in "。！？":
        return True
    if text[start] == "." and following.islower():
        return False  # "e.g. this", "3. item", "..." mid-sentence
    word_start = start
    while word_start > 0 and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start:start].lower().lstrip("(\"'“‘")
    if text[start] == "." and (word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())):
        return False  # "Dr. Smith", "J. R. R. Tolkien"
    return not (text[start] == "." and word.isdigit() and word_start == 0)  # "1. item"


def _best_cut(text: str, start: int, limit: int) -> int:
    """Where to cut `text[start:start+limit]`: newline, sentence end, whitespace, grapheme (E2)."""
    end = start + limit
    if end >= len(text):
        return len(text)
    floor = start + limit // 4
    newline = text.rfind("\n", floor, end)
    if newline != -1:
        return newline + 1
    # A space can carry a combining mark (E7: " \u0301" is one cluster): each cut is checked.
    best = -1
    for match in _SENTENCE_END.finditer(text, floor, end):
        if is_boundary(text, match.end()):
            best = match.end()
    if best != -1:
        return best
    for index in range(end - 1, floor - 1, -1):
        if text[index].isspace() and is_boundary(text, index + 1):
            return index + 1
    return cut_before(text, end, start, anchor=start)  # `start` is a boundary (E7)


def _cut_fence(text: str, start: int, end: int) -> str:
    """The fence that the last line of `text[start:end]` reads as, cut at `end` ("" if none):
    only a line that starts in the piece can."""
    line = text.rfind("\n", start, end) + 1
    if not line and start and text[start - 1] != "\n":
        return ""  # the piece starts inside a line
    return fence_of(text[max(line, start) : end]) or ""


def _cut(text: str, max_len: int) -> list[Piece]:
    """Cut held prose or table text into pieces of at most `max_len` (E7)."""
    pieces: list[Piece] = []
    start = 0
    while len(text) - start > max_len:
        end = _best_cut(text, start, max_len)
        fence = _cut_fence(text, start, end)
        if fence:
            # A line cut before the backtick that makes it prose reads as a fence line where
            # it is cut: the piece closes it, so the message has balanced fences (E3).
            end = _best_cut(text, start, max_len - len(fence) - 1)
            fence = _cut_fence(text, start, end)
        pieces.append(Piece(text[start:end], suffix="\n" + fence if fence else ""))
        start = end
    if start < len(text):
        pieces.append(Piece(text[start:]))
    return pieces
