"""E7: a message is never cut inside a grapheme cluster (`cordstream.domain.graphemes`)."""

from __future__ import annotations

from itertools import accumulate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cordstream.domain.graphemes import (
    _CONTEXT_LIMIT,
    _EXT_PICT,
    _RI_LIMIT,
    _Gcb,
    _gcb,
    _is_conjunct_consonant,
    _is_conjunct_extend,
    _is_conjunct_linker,
    _is_ext_pict,
    cut_before,
    is_boundary,
    sendable,
)

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # 👨‍👩‍👧‍👦
FRANCE = "\U0001f1eb\U0001f1f7"  # 🇫🇷
GERMANY = "\U0001f1e9\U0001f1ea"  # 🇩🇪
JAPAN = "\U0001f1ef\U0001f1f5"  # 🇯🇵
THUMBS_MEDIUM = "\U0001f44d\U0001f3fd"  # 👍🏽
KEYCAP_ONE = "1\ufe0f\u20e3"  # 1️⃣
ENGLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"  # 🏴󠁧󠁢󠁥󠁮󠁧󠁿
RED_HEART = "\u2764\ufe0f"  # ❤️
TECHNOLOGIST = "\U0001f469\U0001f3fd\u200d\U0001f4bb"  # 👩🏽‍💻
RAINBOW_FLAG = "\U0001f3f3\ufe0f\u200d\U0001f308"  # 🏳️‍🌈
E_ACUTE = "e\u0301"  # é, decomposed
SMALL_ZALGO = "a\u0301\u0316\u0357\u035c"
HAN_JAMO = "\u1112\u1161\u11ab"  # 한 as L V T
GAK_LV_T = "\uac00\u11a8"  # 가 + ᆨ = 각
L_L_V = "\u1100\u1100\u1161"
CRLF = "\r\n"
ARABIC_NUMBER_ONE = "\u0600\u0661"  # Prepend + digit
DEVANAGARI_KI = "\u0915\u093f"  # कि: SpacingMark
THAI_KAM = "\u0e01\u0e33"  # กำ: SARA AM is a SpacingMark
THAI_KI = "\u0e01\u0e34"  # กิ
KSSA = "\u0915\u094d\u0937"  # क्ष: GB9c
KSSA_ZWJ = "\u0915\u094d\u200d\u0937"  # क्‍ष: explicit half form
STRA = "\u0938\u094d\u0924\u094d\u0930"  # स्त्र: two linkers
BENGALI_KSSA = "\u0995\u09cd\u09b7"  # ক্ষ
HEBREW_SHIN = "\u05e9\u05c1\u05b8"  # שָׁ
ARABIC_MEEM_FATHA = "\u0645\u064e"  # مَ

MULTI_CODE_POINT_CLUSTERS: tuple[str, ...] = (
    FAMILY,
    FRANCE,
    GERMANY,
    JAPAN,
    THUMBS_MEDIUM,
    KEYCAP_ONE,
    ENGLAND,
    RED_HEART,
    TECHNOLOGIST,
    RAINBOW_FLAG,
    E_ACUTE,
    SMALL_ZALGO,
    HAN_JAMO,
    GAK_LV_T,
    L_L_V,
    CRLF,
    ARABIC_NUMBER_ONE,
    DEVANAGARI_KI,
    THAI_KAM,
    THAI_KI,
    KSSA,
    KSSA_ZWJ,
    STRA,
    BENGALI_KSSA,
    HEBREW_SHIN,
    ARABIC_MEEM_FATHA,
)
SINGLE_CODE_POINT_CLUSTERS: tuple[str, ...] = (
    "a",
    "Z",
    " ",
    ".",
    "\t",
    "\n",
    "漢",
    "字",
    "\u200f",  # RIGHT-TO-LEFT MARK: a control, a cluster of its own
    "\u05d0",  # א
    "\u0627",  # ا
    "\U0001f600",  # 😀
    "\u2764",  # ❤ without a variation selector
    "\uac00",  # 가 (LV)
    "\ud55c",  # 한 (LVT)
    "\u0915",  # क alone
)
# Concatenating any of these never merges two of them: none starts with an extender, a
# spacing mark, a Hangul V or T, a lone RI or LF; none ends with ZWJ, a linker, CR or Prepend.
CLUSTERS = MULTI_CODE_POINT_CLUSTERS + SINGLE_CODE_POINT_CLUSTERS


def boundaries(text: str) -> list[int]:
    return [index for index in range(len(text) + 1) if is_boundary(text, index)]


def joins(clusters: list[str]) -> list[int]:
    return [0, *accumulate(len(cluster) for cluster in clusters)]


# --- the cluster kinds of E7, one by one --------------------------------------------------------


def test_E7_plain_ascii_may_be_cut_anywhere() -> None:
    assert boundaries("hello, world") == list(range(13))


@pytest.mark.parametrize("cluster", MULTI_CODE_POINT_CLUSTERS)
def test_E7_hand_made_clusters_are_not_split(cluster: str) -> None:
    assert boundaries(cluster) == [0, len(cluster)]


def test_E7_zwj_family_not_split() -> None:
    text = f"a{FAMILY}b"
    assert boundaries(text) == [0, 1, 1 + len(FAMILY), len(text)]


def test_E7_zwj_after_a_letter_does_not_glue_the_next_pictograph() -> None:
    text = "a\u200d\U0001f600"
    assert boundaries(text) == [0, 2, 3]  # GB9 keeps the ZWJ on "a", GB11 needs a pictograph


def test_E7_flag_pairs_split_between_flags() -> None:
    text = FRANCE + GERMANY + JAPAN
    assert boundaries(text) == [0, 2, 4, 6]


def test_E7_flag_pairs_count_from_the_start_of_their_run() -> None:
    text = "x" + FRANCE + GERMANY + "\U0001f1eb"  # an odd run: the last indicator stands alone
    assert boundaries(text) == [0, 1, 3, 5, 6]


def test_E7_skin_tone_modifier_not_split() -> None:
    assert boundaries(THUMBS_MEDIUM + "!") == [0, 2, 3]


def test_E7_keycap_not_split() -> None:
    assert boundaries("#" + KEYCAP_ONE) == [0, 1, 4]


def test_E7_tag_sequence_not_split() -> None:
    assert boundaries(ENGLAND + ENGLAND) == [0, 7, 14]


def test_E7_variation_selector_not_split() -> None:
    assert boundaries(RED_HEART * 2) == [0, 2, 4]


def test_E7_combining_marks_not_split() -> None:
    text = "caf" + E_ACUTE
    assert boundaries(text) == [0, 1, 2, 3, 5]


def test_E7_hangul_syllables_from_jamo_not_split() -> None:
    assert boundaries(HAN_JAMO + GAK_LV_T + L_L_V) == [0, 3, 5, 8]
    assert boundaries("\ud55c\u11a8") == [0, 2]  # LVT + T
    assert boundaries("\ud55c\u1161") == [0, 1, 2]  # LVT + V: GB8 allows only T


def test_E7_crlf_not_split_but_other_controls_stand_alone() -> None:
    assert boundaries("a\r\nb") == [0, 1, 3, 4]
    assert boundaries("a\n\rb") == [0, 1, 2, 3, 4]
    assert boundaries("a\t\u0301") == [0, 1, 2, 3]  # GB4: a mark does not attach to a control


def test_E7_rtl_marks_are_clusters_of_their_own() -> None:
    text = "\u05e9\u05dc\u05d5\u05dd\u200f"  # שלום + RLM
    assert boundaries(text) == [0, 1, 2, 3, 4, 5]


def test_E7_prepend_joins_the_following_character() -> None:
    assert boundaries("x" + ARABIC_NUMBER_ONE) == [0, 1, 3]
    assert boundaries("\u0600\n") == [0, 1, 2]  # GB5 wins over GB9b


def test_E7_spacing_marks_join_their_base() -> None:
    assert boundaries(DEVANAGARI_KI + THAI_KAM) == [0, 2, 4]
    assert boundaries("\u1000\u102b") == [0, 1, 2]  # an Mc that UAX #29 excludes from SpacingMark


def test_E7_indic_conjuncts_not_split() -> None:
    assert boundaries(KSSA + STRA) == [0, 3, 8]
    assert boundaries(KSSA_ZWJ) == [0, 4]
    assert boundaries(BENGALI_KSSA) == [0, 3]
    assert boundaries("\u0915\u094d\u200c\u0937") == [0, 3, 4]  # ZWNJ asks for no conjunct
    assert boundaries("a\u094d\u0937") == [0, 2, 3]  # a linker needs a consonant before it
    assert boundaries("\u0b95\u0bcd\u0b95") == [0, 2, 3]  # Tamil is not among GB9c's scripts


def test_E7_outside_the_text_is_a_boundary() -> None:
    text = E_ACUTE
    assert [is_boundary(text, index) for index in (-5, 0, 2, 3, 99)] == [True] * 5
    assert is_boundary("", 0)


# --- cut_before ---------------------------------------------------------------------------------


def test_E7_cut_before_keeps_the_index_when_it_is_a_boundary() -> None:
    assert cut_before("hello world", 5) == 5


def test_E7_cut_before_backs_off_to_the_start_of_a_cluster() -> None:
    text = "hi " + FAMILY + " there"
    for index in range(4, 3 + len(FAMILY)):
        assert cut_before(text, index) == 3


def test_E7_cut_before_stays_above_lowest() -> None:
    text = "ab" + FAMILY
    assert cut_before(text, 5) == 2
    assert cut_before(text, 5, lowest=2) == 5  # no boundary in (2, 5]: hard cut


def test_E7_zalgo_cluster_longer_than_the_window_hard_cuts() -> None:
    text = "b" + "a" + "\u0301" * 10_000 + "c"  # boundaries at 0, 1, 10_002, 10_003
    assert cut_before(text, 2000, lowest=1) == 2000  # no boundary in (1, 2000]: the limit wins
    assert cut_before(text, 2000, lowest=1990) == 2000
    # Within the window, however far back, the cluster's start is found.
    assert cut_before(text, 2000) == 1
    assert cut_before(text, 2000, lowest=0) == 1
    assert cut_before(text, 129) == 1  # one past the look-back the splitter once had (128)
    assert cut_before(text, 10_002, lowest=5) == 10_002  # the cluster ends: a boundary


def test_E7_a_cluster_that_fits_is_not_cut_however_far_back_it_starts() -> None:
    """The issue's example: the cluster starts 150 code points before the limit."""
    text = "x" * 1800 + "e" + "\u0301" * 200 + "y" * 400
    assert cut_before(text, 1950, 0, anchor=0) == 1800
    assert cut_before(text, 2000, 0) == 1800  # before the cluster's last mark: still its start
    assert cut_before(text, 2001, 0) == 2001  # the cluster ends there: a boundary


def test_E7_cut_before_clamps_out_of_range_arguments() -> None:
    text = "abc"
    assert cut_before(text, 99) == 3
    assert cut_before(text, -4) == 0
    assert cut_before(text, 2, lowest=-7) == 2
    assert cut_before(text, 2, lowest=5) == 2  # empty window: the index itself
    assert cut_before("", 10) == 0


# --- bounded look-back --------------------------------------------------------------------------


def _property_lookups() -> int:
    info = _gcb.cache_info()
    return info.hits + info.misses


def test_E7_is_boundary_on_a_million_regional_indicators_is_bounded() -> None:
    text = "\U0001f1eb\U0001f1f7" * 500_000  # 1,000,000 code points, pairs at even offsets
    for index in range(0, len(text) + 1, 9_973):
        before = _property_lookups()
        assert is_boundary(text, index) == (index % 2 == 0)
        assert is_boundary(text, index + 1) == ((index + 1) % 2 == 0)
        assert _property_lookups() - before <= 2 * (_RI_LIMIT + 3)
    assert cut_before(text, 999_999) == 999_998


def test_E7_is_boundary_on_a_million_combining_marks_is_bounded() -> None:
    text = "a" + "\u0301" * 999_999
    for index in range(1, len(text), 9_973):
        before = _property_lookups()
        assert not is_boundary(text, index)
        assert _property_lookups() - before <= _CONTEXT_LIMIT + 3
        assert cut_before(text, index) == index  # one cluster: every cut is a hard cut


def test_E7_long_emoji_zwj_run_is_bounded() -> None:
    extenders = "\U0001f3fd" * 999_990
    text = "\U0001f600" + extenders + "\u200d\U0001f600"
    before = _property_lookups()
    assert not is_boundary(text, len(text) - 1)  # past the bound the sequence is kept together
    assert _property_lookups() - before <= _CONTEXT_LIMIT + 3


def test_E7_regional_indicator_run_beyond_the_bound_pairs_at_even_offsets() -> None:
    # The run starts at offset 1: exact for its first _RI_LIMIT indicators, then pairs are
    # assumed to start at even offsets (the documented approximation).
    text = "x" + "\U0001f1eb" * (_RI_LIMIT + 10)
    exact = [index for index in range(2, _RI_LIMIT + 2) if is_boundary(text, index)]
    assert exact == list(range(3, _RI_LIMIT + 2, 2))
    beyond = [index for index in range(_RI_LIMIT + 2, len(text)) if is_boundary(text, index)]
    assert beyond == [index for index in range(_RI_LIMIT + 2, len(text)) if index % 2 == 0]


def test_E7_extenders_within_the_bound_are_looked_through() -> None:
    pictograph = "\U0001f600" + "\U0001f3fd" * _CONTEXT_LIMIT + "\u200d\U0001f600"
    assert boundaries(pictograph) == [0, len(pictograph)]
    letter = "a" + "\u0301" * _CONTEXT_LIMIT + "\u200d\U0001f600"
    assert boundaries(letter) == [0, len(letter) - 1, len(letter)]
    conjunct = "\u0915" + "\u094d" * _CONTEXT_LIMIT + "\u0937"
    assert boundaries(conjunct) == [0, len(conjunct)]


# --- property tables ----------------------------------------------------------------------------


def test_E7_pictographic_table_is_sorted_and_disjoint() -> None:
    starts, ends = _EXT_PICT
    assert all(start <= end for start, end in zip(starts, ends, strict=True))
    assert all(end < start for end, start in zip(ends, starts[1:], strict=False))


def test_E7_property_values_of_representative_characters() -> None:
    expected = {
        "\r": _Gcb.CR,
        "\n": _Gcb.LF,
        "\x00": _Gcb.CONTROL,
        "\u200f": _Gcb.CONTROL,
        "\u00ad": _Gcb.CONTROL,
        "\u0301": _Gcb.EXTEND,
        "\u200c": _Gcb.EXTEND,
        "\ufe0f": _Gcb.EXTEND,
        "\U0001f3fb": _Gcb.EXTEND,
        "\U000e0067": _Gcb.EXTEND,
        "\u09be": _Gcb.EXTEND,
        "\u200d": _Gcb.ZWJ,
        "\U0001f1e6": _Gcb.REGIONAL_INDICATOR,
        "\u0600": _Gcb.PREPEND,
        "\u0903": _Gcb.SPACING_MARK,
        "\u0e33": _Gcb.SPACING_MARK,
        "\u102b": _Gcb.OTHER,
        "\u1100": _Gcb.L,
        "\ua960": _Gcb.L,
        "\u1160": _Gcb.V,
        "\u11a8": _Gcb.T,
        "\uac00": _Gcb.LV,
        "\uac01": _Gcb.LVT,
        "\ud7a3": _Gcb.LVT,
        "\ud7a4": _Gcb.OTHER,
        "\U0001f600": _Gcb.OTHER,
        "\ud800": _Gcb.CONTROL,
    }
    assert {char: _gcb(char) for char in expected} == expected
    assert _is_ext_pict("\u00a9")
    assert _is_ext_pict("\U0001f600")
    assert not _is_ext_pict("\U0001f3fb")
    assert not _is_ext_pict("\U0001f1e6")


# --- properties ---------------------------------------------------------------------------------

# At most 30 clusters keep a run of regional indicators (2 per flag) under _RI_LIMIT, where the
# rules are exact.
cluster_lists = st.lists(st.sampled_from(CLUSTERS), max_size=30)


@given(cluster_lists)
def test_E7_boundaries_are_exactly_the_cluster_joins(clusters: list[str]) -> None:
    text = "".join(clusters)
    assert boundaries(text) == sorted(set(joins(clusters)))


@given(st.lists(st.sampled_from(CLUSTERS), min_size=1, max_size=30), st.data())
def test_E7_cut_before_returns_the_last_join_in_the_window(
    clusters: list[str], data: st.DataObject
) -> None:
    text = "".join(clusters)
    index = data.draw(st.integers(1, len(text)), label="index")
    lowest = data.draw(st.integers(0, index - 1), label="lowest")
    in_window = [j for j in joins(clusters) if lowest < j <= index]
    expected = max(in_window) if in_window else index
    assert cut_before(text, index, lowest) == expected
    assert lowest < expected <= index


def _reference_boundaries(text: str) -> list[int]:
    """UAX #29 as a forward state machine with unbounded state: the bounded look-back's model."""
    found = [0]
    ri_run = 0  # regional indicators ending at the previous character
    pictograph_open = False  # text so far ends with ExtPict Extend*
    pictograph_zwj = False  # text so far ends with ExtPict Extend* ZWJ
    conjunct = 0  # 1: ends with Consonant [Extend|Linker]*, 2: and a Linker among them
    for index in range(1, len(text)):
        before, after = text[index - 1], text[index]
        left, right = _gcb(before), _gcb(after)
        ri_run = ri_run + 1 if left is _Gcb.REGIONAL_INDICATOR else 0
        pictograph_zwj = pictograph_open and left is _Gcb.ZWJ
        pictograph_open = _is_ext_pict(before) or (pictograph_open and left is _Gcb.EXTEND)
        if _is_conjunct_consonant(before):
            conjunct = 1
        elif conjunct and _is_conjunct_linker(before):
            conjunct = 2
        elif not (conjunct and _is_conjunct_extend(before)):
            conjunct = 0
        joined = (left is _Gcb.CR and right is _Gcb.LF) or (
            left not in (_Gcb.CONTROL, _Gcb.CR, _Gcb.LF)
            and right not in (_Gcb.CONTROL, _Gcb.CR, _Gcb.LF)
            and (
                (left is _Gcb.L and right in (_Gcb.L, _Gcb.V, _Gcb.LV, _Gcb.LVT))
                or (left in (_Gcb.LV, _Gcb.V) and right in (_Gcb.V, _Gcb.T))
                or (left in (_Gcb.LVT, _Gcb.T) and right is _Gcb.T)
                or right in (_Gcb.EXTEND, _Gcb.ZWJ, _Gcb.SPACING_MARK)
                or left is _Gcb.PREPEND
                or (conjunct == 2 and _is_conjunct_consonant(after))
                or (pictograph_zwj and _is_ext_pict(after))
                or (right is _Gcb.REGIONAL_INDICATOR and ri_run % 2 == 1)
            )
        )
        if not joined:
            found.append(index)
    if text:
        found.append(len(text))
    return found


INTERESTING = (
    "a",
    " ",
    "\r",
    "\n",
    "\t",
    "\u0301",
    "\u200c",
    "\u200d",
    "\ufe0f",
    "\U0001f3fd",
    "\U000e0067",
    "\U0001f1eb",
    "\U0001f1f7",
    "\U0001f600",
    "\u2764",
    "\u1100",
    "\u1161",
    "\u11a8",
    "\uac00",
    "\uac01",
    "\u0600",
    "\u0903",
    "\u093f",
    "\u0915",
    "\u0937",
    "\u094d",
    "\u09cd",
    "\u0941",
    "\u0e33",
    "\u200f",
    "\u102b",
    "漢",
)


# Up to 30 characters: runs stay within _CONTEXT_LIMIT and _RI_LIMIT, where the rules are exact.
@given(st.text(alphabet=st.sampled_from(INTERESTING), max_size=30))
def test_E7_bounded_look_back_agrees_with_unbounded_reference(text: str) -> None:
    assert boundaries(text) == _reference_boundaries(text)


# --- anchored regional indicators (E7: a flag run of any length at any offset) ------------------


@pytest.mark.parametrize("offset", [0, 1, 17])
def test_E7_an_anchor_pairs_a_long_flag_run_exactly_at_any_offset(offset: int) -> None:
    text = "x" * offset + FRANCE * 300  # 600 indicators, far past _RI_LIMIT
    flag_starts = set(range(offset, len(text) + 1, 2))
    for anchor in (0, offset, offset + 2 * 150):  # known boundaries: the start, flag starts
        for index in range(max(anchor, 1), len(text)):
            expected = index in flag_starts or index < offset
            assert is_boundary(text, index, anchor) == expected, (anchor, index)


@pytest.mark.parametrize("offset", [1, 17])
def test_E7_cut_before_with_an_anchor_never_cuts_a_flag(offset: int) -> None:
    text = "x" * offset + FRANCE * 1000
    for index in range(offset + 1, len(text), 37):
        start = max(index - 200, 0)
        start -= (start - offset) % 2 if start > offset else 0  # a flag start: a boundary
        cut = cut_before(text, index, start, anchor=start)
        assert (cut - offset) % 2 == 0
        assert index - 1 <= cut <= index


def test_E7_without_an_anchor_the_approximation_is_unchanged() -> None:
    text = "x" + FRANCE * 100  # pairs at odd offsets: the bounded guess is even offsets
    assert is_boundary(text, 150)
    assert not is_boundary(text, 151)
    assert is_boundary(text, 151, anchor=0)
    assert not is_boundary(text, 150, anchor=0)


# --- surrogates ----------------------------------------------------------------------------------

PAIR = "\ud83d\ude00"  # 😀 as UTF-16 code units in a str


def test_E7_a_surrogate_pair_is_never_cut_and_lone_surrogates_stand_alone() -> None:
    assert boundaries("a" + PAIR + "b") == [0, 1, 3, 4]
    assert boundaries("\ud800\ud800") == [0, 1, 2]  # two lone high surrogates
    assert boundaries("\ude00\ud83d") == [0, 1, 2]  # low then high: no pair
    assert boundaries("\ud800" + PAIR) == [0, 1, 3]
    assert cut_before("ab" + PAIR + "cd", 3) == 2


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain ascii", "plain ascii"),
        ("naïve 漢字 \U0001f600 \ufffd", "naïve 漢字 \U0001f600 \ufffd"),
        ("pair " + PAIR, "pair \U0001f600"),
        ("lone \ud800 high", "lone \ufffd high"),
        ("lone \udfff low", "lone \ufffd low"),
        ("\ude00\ud83d reversed", "\ufffd\ufffd reversed"),
        ("\ud800" + PAIR + "\udc00", "\ufffd\U0001f600\ufffd"),
        ("ends high \ud83d", "ends high \ufffd"),
        ("\ufeffbom kept" + PAIR, "\ufeffbom kept\U0001f600"),
    ],
)
def test_F2_sendable_is_what_discord_shows(text: str, shown: str) -> None:
    result = sendable(text)
    assert result == shown
    assert len(result) <= len(text)
    result.encode("utf-8")  # always encodable


def test_F2_sendable_returns_text_without_surrogates_unchanged() -> None:
    for text in ("ascii", "naïve 漢字 \U0001f600"):
        assert sendable(text) is text
