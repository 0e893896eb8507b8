"""The contract's ids resolve: every rule the repository cites is defined in docs/contract.md.

Docstrings, comments and test names cite rules by id (B3, E7, `test_F2_...`, a range such as
C1–C8). The contract defines each rule once, as a list item that starts with the id in bold:
`- **B3.** ...`, in the section of its family (`## B. ...`). A citation of an id the contract
does not define is a dangling reference for anyone reading the code without it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"
# Where the repository cites rules: the Python of these folders, and these documents.
CODE_FOLDERS = ("domain", "shell", "tests", "bench", "examples")
DOCUMENTS = ("README.md", "BENCHMARKS.md")
# This file's examples exercise the pattern; they are not citations.
THIS_FILE = Path(__file__).resolve()

# A rule id: a family letter A-L and a one- or two-digit number, standing on its own. Nothing
# alphanumeric or a dot may touch it in front (0xE74C3C, UAX #29's GB11, a token's `.J9.`), and
# nothing alphanumeric behind (E501, F401, PLR2004, E731). An underscore may touch it on either
# side, so the id in a test name `test_B3_a_stop_...` is a citation.
_BEFORE = r"(?<![A-Za-z0-9.])"
_AFTER = r"(?![A-Za-z0-9])"
CITATION = re.compile(_BEFORE + r"([A-L])([0-9]{1,2})" + _AFTER)
# A range of one family, `C1–C8` or `E6-E10`: it cites every rule from the first to the last.
RANGE = re.compile(_BEFORE + r"([A-L])([0-9]{1,2})\s*[–-]\s*\1([0-9]{1,2})" + _AFTER)
DEFINITION = re.compile(r"^- \*\*([A-L][0-9]{1,2})\.\*\*", re.MULTILINE)
SECTION = re.compile(r"^## ([A-Z])\. ", re.MULTILINE)
TEST_NAME = re.compile(r"\bdef (test_([A-L][0-9]{1,2})_\w*)")
PLANNED = "planned, not yet implemented"


def cited_ids(text: str) -> set[str]:
    """The rule ids `text` cites, ranges expanded."""
    ids = {letter + number for letter, number in CITATION.findall(text)}
    for letter, first, last in RANGE.findall(text):
        ids.update(f"{letter}{number}" for number in range(int(first), int(last) + 1))
    return ids


def citing_files() -> Iterator[Path]:
    """Every file of the repository that may cite a rule, the contract itself excluded."""
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.resolve() != THIS_FILE:
                yield path
    for name in DOCUMENTS:
        path = ROOT / name
        if path.exists():
            yield path


def citations() -> dict[str, list[str]]:
    """Each cited id and where it is cited (`path:line`)."""
    found: dict[str, list[str]] = {}
    for path in citing_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            for rule in cited_ids(line):
                found.setdefault(rule, []).append(f"{path.relative_to(ROOT)}:{number}")
    return found


def contract_text() -> str:
    return CONTRACT.read_text(encoding="utf-8")


def definitions() -> list[str]:
    """The ids the contract defines, in order, repeats kept."""
    return DEFINITION.findall(contract_text())


def rule_texts() -> dict[str, str]:
    """Each defined rule's text: its list item, up to the next item, heading or blank line."""
    lines = contract_text().splitlines()
    texts: dict[str, str] = {}
    for index, line in enumerate(lines):
        match = DEFINITION.match(line)
        if match is None:
            continue
        item = [line]
        for following in lines[index + 1 :]:
            if not following.strip() or following.startswith(("- ", "#")):
                break
            item.append(following)
        texts[match.group(1)] = " ".join(part.strip() for part in item)
    return texts


def _where(places: list[str]) -> str:
    shown = ", ".join(places[:3])
    return shown + (f" and {len(places) - 3} more" if len(places) > 3 else "")


# -- the citation pattern ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("a stop takes effect at once (B3)", {"B3"}),
        ("def test_B2_B13_a_fault_in_the_timer_callback() -> None:", {"B2", "B13"}),
        ("the registry (SPEC C1–C8).", {f"C{n}" for n in range(1, 9)}),
        ("segments (E6-E10, F2)", {"E6", "E7", "E8", "E9", "E10", "F2"}),
        ("E7/E8; G1, G2.", {"E7", "E8", "G1", "G2"}),
    ],
)
def test_the_pattern_finds_ids_names_and_ranges(text: str, ids: set[str]) -> None:
    assert cited_ids(text) == ids


@pytest.mark.parametrize(
    "text",
    [
        "x = 1  # noqa: E731",
        'select = ["E501", "F401", "PLR2004"]',
        "colour = 0xE74C3C; css: #E74C3C",
        "the extended grapheme cluster rules GB9c, GB11 and GB12/GB13",
        "Authorization: Bearer eyJhbGciOi.J9.eyJzdWIiOiIx",
        "SPEC §A; section B; the B-side",
    ],
)
def test_the_pattern_skips_lint_codes_colours_and_tokens(text: str) -> None:
    assert cited_ids(text) == set()


def test_the_scan_reads_the_code_tests_and_readme() -> None:
    files = {path.relative_to(ROOT).as_posix() for path in citing_files()}
    assert {"domain/machine.py", "shell/orchestrator.py", "README.md"} <= files
    assert "tests/test_contract.py" not in files
    assert {"B1", "C5", "E7", "F2", "G4"} <= set(citations())


# -- the repository against the contract -------------------------------------------------------


def test_every_rule_id_cited_in_the_repository_is_defined_in_the_contract() -> None:
    defined = set(definitions())
    undefined = {rule: places for rule, places in citations().items() if rule not in defined}
    assert not undefined, "cited but not defined in docs/contract.md: " + "; ".join(
        f"{rule} ({_where(places)})" for rule, places in sorted(undefined.items())
    )


def test_every_rule_id_the_contract_cites_is_defined_in_it() -> None:
    assert cited_ids(contract_text()) - set(definitions()) == set()


def test_every_rule_is_defined_exactly_once() -> None:
    ids = definitions()
    assert ids, "docs/contract.md defines no rule"
    assert sorted(rule for rule in set(ids) if ids.count(rule) > 1) == []


def test_every_rule_is_defined_in_the_section_of_its_family() -> None:
    text = contract_text()
    sections = [(match.start(), match.group(1)) for match in SECTION.finditer(text)]
    misplaced: list[str] = []
    for match in DEFINITION.finditer(text):
        family = [letter for start, letter in sections if start < match.start()]
        if not family or family[-1] != match.group(1)[0]:
            misplaced.append(match.group(1))
    assert misplaced == []


def test_a_rule_with_a_test_named_after_it_is_not_marked_planned() -> None:
    planned = {rule for rule, text in rule_texts().items() if PLANNED in text.lower()}
    tested: dict[str, str] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for name, rule in TEST_NAME.findall(path.read_text(encoding="utf-8")):
            tested.setdefault(rule, name)
    assert {rule: tested[rule] for rule in sorted(planned & tested.keys())} == {}
