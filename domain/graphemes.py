"""Where an outgoing message may be cut: grapheme cluster boundaries (SPEC E7).

Discord counts a message's length in code points (Python's `len`), and E7 caps every message
at `max_message_length` of them. A cut that respects the cap can still split what a reader sees
as one character: a ZWJ family 👨‍👩‍👧‍👦, a flag 🇫🇷, 👍🏽, a keycap 1️⃣, an ``e`` and its combining
acute, a Hangul syllable spelled in jamo, CR LF, an Indic conjunct such as क्ष. This module
answers one question for the splitter: *may the text be cut between ``text[i - 1]`` and
``text[i]``?*

The idea: `is_boundary` applies the extended grapheme cluster rules of UAX #29 (GB3–GB13, with
the optional GB9c for Indic conjuncts) to the two characters around the index, and the three
rules that need context to the left (GB9c, GB11, GB12/GB13) look back a bounded distance
(``_CONTEXT_LIMIT``, ``_RI_LIMIT``, or back to a known boundary, the ``anchor``). So one test
costs the same on a 10 MB text as on a short one, and where the bound is reached the answer
errs on the side of a shorter message, never of a split cluster (E7 says how).

`cut_before` is what the splitter calls: the last boundary at or before an index (the most
text that fits), found by stepping back no lower than ``lowest`` (where the message being cut
starts). Cost (E10): a step back costs O(1), and the steps a cut takes are at most the length
of the message it ends plus that of the cluster it stepped over, which the next message starts
with, so every code point is stepped over a bounded number of times.

`sendable` makes a text JSON-safe: Python's `str` can hold surrogates, Discord cannot. The
machine applies it to every text it sends and the embeds to every text they show (E7); it
costs one flag test for ASCII text and one C-level scan otherwise.

Unicode data: general categories come from `unicodedata` (Unicode 14 on Python 3.11, newer on
later Pythons). What it does not provide is tabulated here from the Unicode 14 UCD (Prepend,
Other_Grapheme_Extend, the SpacingMark exceptions, Extended_Pictographic), and the GB9c classes
from Indic_Conjunct_Break (Unicode 15.1/16: Devanagari, Bengali, Gujarati, Oriya, Telugu,
Malayalam), whose Extend is taken as Unicode 16 defines it: every Extend character and ZWJ,
except ZWNJ and the linkers.

It never looks further back than its bounds, never analyses the clusters that the characters a
surrogate pair encodes would form, and never decides a message's length: the splitter does.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from enum import IntEnum
from functools import lru_cache
from typing import Final

__all__ = ["cut_before", "is_boundary", "sendable"]

_CONTEXT_LIMIT: Final = 32
"""GB9c and GB11: how many extenders (and linkers) a look-back skips at most."""

_RI_LIMIT: Final = 64
"""GB12/GB13: how many regional indicators before the index are counted at most."""


class _Gcb(IntEnum):
    """Grapheme_Cluster_Break property values (UAX #29, table 2)."""

    OTHER = 0
    CR = 1
    LF = 2
    CONTROL = 3
    EXTEND = 4
    ZWJ = 5
    REGIONAL_INDICATOR = 6
    PREPEND = 7
    SPACING_MARK = 8
    L = 9
    V = 10
    T = 11
    LV = 12
    LVT = 13


def _ranges(*spans: tuple[int, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Sorted, disjoint inclusive ranges as (starts, ends), for `_in_ranges`."""
    return tuple(low for low, _ in spans), tuple(high for _, high in spans)


def _in_ranges(code: int, table: tuple[tuple[int, ...], tuple[int, ...]]) -> bool:
    starts, ends = table
    position = bisect_right(starts, code) - 1
    return position >= 0 and code <= ends[position]


# Prepend (Unicode 14): Prepended_Concatenation_Mark and Indic consonants written before the base.
_PREPEND: Final = _ranges(
    (0x0600, 0x0605),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x0D4E, 0x0D4E),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x111C2, 0x111C3),
    (0x1193F, 0x1193F),
    (0x11941, 0x11941),
    (0x11A3A, 0x11A3A),
    (0x11A84, 0x11A89),
    (0x11D46, 0x11D46),
)

# Extend beyond Mn/Me: Other_Grapheme_Extend (Unicode 14; spacing vowel parts that canonical
# equivalence needs, ZWNJ, halfwidth sound marks, tag characters) and the emoji modifiers.
_EXTEND_EXTRA: Final = _ranges(
    (0x09BE, 0x09BE),
    (0x09D7, 0x09D7),
    (0x0B3E, 0x0B3E),
    (0x0B57, 0x0B57),
    (0x0BBE, 0x0BBE),
    (0x0BD7, 0x0BD7),
    (0x0CC2, 0x0CC2),
    (0x0CD5, 0x0CD6),
    (0x0D3E, 0x0D3E),
    (0x0D57, 0x0D57),
    (0x0DCF, 0x0DCF),
    (0x0DDF, 0x0DDF),
    (0x1B35, 0x1B35),
    (0x200C, 0x200C),
    (0x302E, 0x302F),
    (0xFF9E, 0xFF9F),
    (0x1133E, 0x1133E),
    (0x11357, 0x11357),
    (0x114B0, 0x114B0),
    (0x114BD, 0x114BD),
    (0x115AF, 0x115AF),
    (0x1D165, 0x1D165),
    (0x1D16E, 0x1D172),
    (0x1F3FB, 0x1F3FF),
    (0xE0020, 0xE007F),
)

# Spacing marks (Mc) that UAX #29 does not count as SpacingMark: they start a cluster.
_NOT_SPACING_MARK: Final = _ranges(
    (0x102B, 0x102C),
    (0x1038, 0x1038),
    (0x1062, 0x1064),
    (0x1067, 0x106D),
    (0x1083, 0x1083),
    (0x1087, 0x108C),
    (0x108F, 0x108F),
    (0x109A, 0x109C),
    (0x1A61, 0x1A61),
    (0x1A63, 0x1A64),
    (0xAA7B, 0xAA7B),
    (0xAA7D, 0xAA7D),
    (0x11720, 0x11721),
)

# Unassigned code points that are Default_Ignorable: Control, like the format characters.
_IGNORABLE_UNASSIGNED: Final = _ranges(
    (0x2065, 0x2065),
    (0xFFF0, 0xFFF8),
    (0xE0000, 0xE0000),
    (0xE0002, 0xE001F),
    (0xE0080, 0xE00FF),
    (0xE01F0, 0xE0FFF),
)

# Extended_Pictographic (emoji-data.txt, Unicode 14), including the unassigned code points that
# are reserved for future emoji.
_EXT_PICT: Final = _ranges(
    (0x00A9, 0x00A9),
    (0x00AE, 0x00AE),
    (0x203C, 0x203C),
    (0x2049, 0x2049),
    (0x2122, 0x2122),
    (0x2139, 0x2139),
    (0x2194, 0x2199),
    (0x21A9, 0x21AA),
    (0x231A, 0x231B),
    (0x2328, 0x2328),
    (0x2388, 0x2388),
    (0x23CF, 0x23CF),
    (0x23E9, 0x23F3),
    (0x23F8, 0x23FA),
    (0x24C2, 0x24C2),
    (0x25AA, 0x25AB),
    (0x25B6, 0x25B6),
    (0x25C0, 0x25C0),
    (0x25FB, 0x25FE),
    (0x2600, 0x2605),
    (0x2607, 0x2612),
    (0x2614, 0x2685),
    (0x2690, 0x2705),
    (0x2708, 0x2712),
    (0x2714, 0x2714),
    (0x2716, 0x2716),
    (0x271D, 0x271D),
    (0x2721, 0x2721),
    (0x2728, 0x2728),
    (0x2733, 0x2734),
    (0x2744, 0x2744),
    (0x2747, 0x2747),
    (0x274C, 0x274C),
    (0x274E, 0x274E),
    (0x2753, 0x2755),
    (0x2757, 0x2757),
    (0x2763, 0x2767),
    (0x2795, 0x2797),
    (0x27A1, 0x27A1),
    (0x27B0, 0x27B0),
    (0x27BF, 0x27BF),
    (0x2934, 0x2935),
    (0x2B05, 0x2B07),
    (0x2B1B, 0x2B1C),
    (0x2B50, 0x2B50),
    (0x2B55, 0x2B55),
    (0x3030, 0x3030),
    (0x303D, 0x303D),
    (0x3297, 0x3297),
    (0x3299, 0x3299),
    (0x1F000, 0x1F0FF),
    (0x1F10D, 0x1F10F),
    (0x1F12F, 0x1F12F),
    (0x1F16C, 0x1F171),
    (0x1F17E, 0x1F17F),
    (0x1F18E, 0x1F18E),
    (0x1F191, 0x1F19A),
    (0x1F1AD, 0x1F1E5),
    (0x1F201, 0x1F20F),
    (0x1F21A, 0x1F21A),
    (0x1F22F, 0x1F22F),
    (0x1F232, 0x1F23A),
    (0x1F23C, 0x1F23F),
    (0x1F249, 0x1F3FA),
    (0x1F400, 0x1F53D),
    (0x1F546, 0x1F64F),
    (0x1F680, 0x1F6FF),
    (0x1F774, 0x1F77F),
    (0x1F7D5, 0x1F7FF),
    (0x1F80C, 0x1F80F),
    (0x1F848, 0x1F84F),
    (0x1F85A, 0x1F85F),
    (0x1F888, 0x1F88F),
    (0x1F8AE, 0x1F8FF),
    (0x1F90C, 0x1F93A),
    (0x1F93C, 0x1F945),
    (0x1F947, 0x1FAFF),
    (0x1FC00, 0x1FFFD),
)

# GB9c (Unicode 15.1): Indic_Conjunct_Break=Linker (the viramas) and =Consonant of the six
# scripts that write conjuncts this way.
_CONJUNCT_LINKERS: Final = frozenset("\u094d\u09cd\u0acd\u0b4d\u0c4d\u0d4d")
_CONJUNCT_CONSONANTS: Final = _ranges(
    (0x0915, 0x0939),
    (0x0958, 0x095F),
    (0x0978, 0x097F),
    (0x0995, 0x09A8),
    (0x09AA, 0x09B0),
    (0x09B2, 0x09B2),
    (0x09B6, 0x09B9),
    (0x09DC, 0x09DD),
    (0x09DF, 0x09DF),
    (0x09F0, 0x09F1),
    (0x0A95, 0x0AA8),
    (0x0AAA, 0x0AB0),
    (0x0AB2, 0x0AB3),
    (0x0AB5, 0x0AB9),
    (0x0AF9, 0x0AF9),
    (0x0B15, 0x0B28),
    (0x0B2A, 0x0B30),
    (0x0B32, 0x0B33),
    (0x0B35, 0x0B39),
    (0x0B5C, 0x0B5D),
    (0x0B5F, 0x0B5F),
    (0x0B71, 0x0B71),
    (0x0C15, 0x0C28),
    (0x0C2A, 0x0C39),
    (0x0C58, 0x0C5A),
    (0x0D15, 0x0D3A),
)

# Hangul: conjoining jamo by range, precomposed syllables by arithmetic (Unicode ch. 3.12).
_L_JAMO: Final = _ranges((0x1100, 0x115F), (0xA960, 0xA97C))
_V_JAMO: Final = _ranges((0x1160, 0x11A7), (0xD7B0, 0xD7C6))
_T_JAMO: Final = _ranges((0x11A8, 0x11FF), (0xD7CB, 0xD7FB))
_S_BASE: Final = 0xAC00
_T_COUNT: Final = 28
_S_COUNT: Final = 19 * 21 * _T_COUNT

_ZWJ: Final = "\u200d"
_RI_FIRST: Final = "\U0001f1e6"
_RI_LAST: Final = "\U0001f1ff"
_HIGH_SURROGATES: Final = ("\ud800", "\udbff")
_LOW_SURROGATES: Final = ("\udc00", "\udfff")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_ZWNJ: Final = "\u200c"
_CONTROL_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})

_HANGUL_JOINS: Final = {
    _Gcb.L: frozenset({_Gcb.L, _Gcb.V, _Gcb.LV, _Gcb.LVT}),  # GB6
    _Gcb.LV: frozenset({_Gcb.V, _Gcb.T}),  # GB7
    _Gcb.V: frozenset({_Gcb.V, _Gcb.T}),  # GB7
    _Gcb.LVT: frozenset({_Gcb.T}),  # GB8
    _Gcb.T: frozenset({_Gcb.T}),  # GB8
}
_BREAKS_AROUND: Final = frozenset({_Gcb.CONTROL, _Gcb.CR, _Gcb.LF})
_ALWAYS_JOINED: Final = frozenset({_Gcb.EXTEND, _Gcb.ZWJ, _Gcb.SPACING_MARK})


@lru_cache(maxsize=4096)
def _gcb(char: str) -> _Gcb:
    """The Grapheme_Cluster_Break value of one character (cached: texts reuse few characters)."""
    code = ord(char)
    if code < 0x7F:  # ASCII: the common case, decided without a table
        if code == 0x0D:
            return _Gcb.CR
        if code == 0x0A:
            return _Gcb.LF
        return _Gcb.CONTROL if code < 0x20 else _Gcb.OTHER
    if char == _ZWJ:
        return _Gcb.ZWJ
    if 0x1F1E6 <= code <= 0x1F1FF:
        return _Gcb.REGIONAL_INDICATOR
    if _S_BASE <= code < _S_BASE + _S_COUNT:
        return _Gcb.LV if (code - _S_BASE) % _T_COUNT == 0 else _Gcb.LVT
    if _in_ranges(code, _L_JAMO):
        return _Gcb.L
    if _in_ranges(code, _V_JAMO):
        return _Gcb.V
    if _in_ranges(code, _T_JAMO):
        return _Gcb.T
    if _in_ranges(code, _PREPEND):
        return _Gcb.PREPEND
    category = unicodedata.category(char)
    if category in ("Mn", "Me") or _in_ranges(code, _EXTEND_EXTRA):
        return _Gcb.EXTEND
    if category in _CONTROL_CATEGORIES:
        return _Gcb.CONTROL
    if category == "Cn" and _in_ranges(code, _IGNORABLE_UNASSIGNED):
        return _Gcb.CONTROL
    if category == "Mc":
        return _Gcb.OTHER if _in_ranges(code, _NOT_SPACING_MARK) else _Gcb.SPACING_MARK
    if code in (0x0E33, 0x0EB3):  # THAI CHARACTER SARA AM, LAO VOWEL SIGN AM (Lo)
        return _Gcb.SPACING_MARK
    return _Gcb.OTHER


def _is_ext_pict(char: str) -> bool:
    return _in_ranges(ord(char), _EXT_PICT)


def _is_conjunct_consonant(char: str) -> bool:
    return _in_ranges(ord(char), _CONJUNCT_CONSONANTS)


def _is_conjunct_linker(char: str) -> bool:
    return char in _CONJUNCT_LINKERS


def _is_conjunct_extend(char: str) -> bool:
    """Indic_Conjunct_Break=Extend: may stand between a consonant and a linker, or after it."""
    if char == _ZWJ:
        return True
    return char != _ZWNJ and char not in _CONJUNCT_LINKERS and _gcb(char) is _Gcb.EXTEND


def _conjunct_continues(text: str, index: int) -> bool:
    """GB9c: does ``text[:index]`` end with consonant [extend|linker]* linker [extend|linker]*?"""
    linked = False
    position = index - 1
    while position >= 0:
        char = text[position]
        if _is_conjunct_linker(char):
            linked = True
        elif not _is_conjunct_extend(char):
            return linked and _is_conjunct_consonant(char)
        if index - position > _CONTEXT_LIMIT:
            return linked  # past the bound: assume the run starts with a consonant
        position -= 1
    return False  # reached the start of the text: no consonant


def _emoji_sequence_continues(text: str, index: int) -> bool:
    """GB11: does ``text[:index]`` end with pictograph extend* ZWJ (the ZWJ being known)?"""
    position = index - 2
    while position >= 0 and _gcb(text[position]) is _Gcb.EXTEND:
        if index - 1 - position > _CONTEXT_LIMIT:
            return True  # past the bound: assume the pictograph is there
        position -= 1
    return position >= 0 and _is_ext_pict(text[position])


def _regional_indicator_pairs_up(text: str, index: int, anchor: int | None) -> bool:
    """GB12/GB13: is ``text[index - 1]`` the first indicator of a pair (an odd run before index)?

    With an `anchor` (a known boundary at or before `index`) the run is counted exactly, back
    to the anchor at most; without one, at most `_RI_LIMIT` indicators are counted.
    """
    position = index - 1
    if anchor is not None:
        floor = max(anchor, 0)
        while position >= floor and _RI_FIRST <= text[position] <= _RI_LAST:
            position -= 1
        return (index - 1 - position) % 2 == 1
    while position >= 0 and _gcb(text[position]) is _Gcb.REGIONAL_INDICATOR:
        if index - position > _RI_LIMIT:
            # The run is longer than the bound: assume its pairs start at even offsets.
            return index % 2 == 1
        position -= 1
    return (index - 1 - position) % 2 == 1


def is_boundary(text: str, index: int, anchor: int | None = None) -> bool:
    """Whether ``text`` may be cut before ``text[index]`` without splitting a grapheme cluster.

    True at both ends of the text and outside it (``index <= 0`` or ``index >= len(text)``).
    Follows UAX #29 (GB3–GB13 with GB9c) within the bounds E7 states; the work
    per call does not depend on ``len(text)``. `anchor`, a position known to be a boundary at
    or before `index`, makes regional indicator pairing exact at a cost of ``index - anchor``.
    Never between the two halves of a surrogate pair (E7).
    """
    if index <= 0 or index >= len(text):
        return True  # GB1, GB2
    before, after = text[index - 1], text[index]
    left, right = _gcb(before), _gcb(after)
    if left is _Gcb.CR and right is _Gcb.LF:
        return False  # GB3
    if left in _BREAKS_AROUND or right in _BREAKS_AROUND:
        # GB4, GB5; a surrogate is a control, but a pair is one character to Discord
        return not _is_surrogate_pair(before, after)
    if right in _HANGUL_JOINS.get(left, ()):
        return False  # GB6, GB7, GB8
    if right in _ALWAYS_JOINED or left is _Gcb.PREPEND:
        return False  # GB9, GB9a, GB9b
    if _is_conjunct_consonant(after) and (
        _is_conjunct_linker(before) or _is_conjunct_extend(before)
    ):
        return not _conjunct_continues(text, index)  # GB9c
    if left is _Gcb.ZWJ and _is_ext_pict(after):
        return not _emoji_sequence_continues(text, index)  # GB11
    if left is _Gcb.REGIONAL_INDICATOR and right is _Gcb.REGIONAL_INDICATOR:
        return not _regional_indicator_pairs_up(text, index, anchor)  # GB12, GB13
    return True  # GB999


def cut_before(text: str, index: int, lowest: int = 0, *, anchor: int | None = None) -> int:
    """The largest ``b`` with ``lowest < b <= index`` where `is_boundary` holds: a safe cut.

    Meant for ``0 <= lowest < index <= len(text)``: the result is then always greater than
    ``lowest`` (a splitting loop makes progress) and at most ``index`` (the message fits).
    Every position down to ``lowest + 1`` may be tried, from ``index`` down; when none of them
    is a boundary (one cluster longer than ``index - lowest``) the result is ``index`` itself, a
    hard cut through that cluster: the message limit wins. A cluster that fits between
    ``lowest`` and ``index`` is never cut (E7).

    `anchor` (passed on to `is_boundary`): a position known to be a boundary, e.g. where the
    piece being cut starts. With it, regional indicators are paired exactly, however long their
    run; at most two candidates count them, so a cut costs ``O(index - anchor)``.

    Out-of-range arguments are clamped, never rejected: ``index`` into ``[0, len(text)]`` and
    ``lowest`` up to 0; when nothing is left between them the (clamped) ``index`` is returned.
    """
    index = min(max(index, 0), len(text))
    floor = max(lowest, 0)
    for candidate in range(index, floor, -1):
        if is_boundary(text, candidate, anchor):
            return candidate
    return index


def sendable(text: str) -> str:
    """`text` as Discord will show it: each surrogate pair becomes the character it encodes,
    each lone surrogate U+FFFD; any other text is returned as it is (the same object).

    Never longer than `text`. Costs a flag test for ASCII text, one C-level scan otherwise.
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _is_surrogate_pair(before: str, after: str) -> bool:
    return (
        _HIGH_SURROGATES[0] <= before <= _HIGH_SURROGATES[1]
        and _LOW_SURROGATES[0] <= after <= _LOW_SURROGATES[1]
    )
