"""`domain/` is pure (design card, SPEC §A): it imports only what computes, nothing that acts.

An allowlist rather than a blocklist: a new import has to be added here on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[2] / "domain"
ALLOWED = {
    "__future__",
    "bisect",
    "collections",
    "cordstream.domain",
    "dataclasses",
    "enum",
    "functools",
    "itertools",
    "json",
    "math",
    "re",
    "returns",
    "string",
    "types",
    "typing",
    "unicodedata",
}


def _root(module: str) -> str:
    """The part of a module name the allowlist speaks of: `cordstream.x`, or the top package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "cordstream" else parts[0]


def _imports(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {_root(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(_root(node.module))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            roots.add("a relative import")  # the package is imported by its one name
    return roots


def test_F5_domain_imports_nothing_that_performs_io_or_reads_a_clock() -> None:
    """The core decides what to send; it cannot send (F5): nothing in it reaches Discord."""
    files = sorted(DOMAIN.glob("*.py"))
    assert files
    found = {path.name: _imports(path) - ALLOWED for path in files}
    assert {name: bad for name, bad in found.items() if bad} == {}


def test_the_allowlist_excludes_io_clocks_and_randomness() -> None:
    forbidden = {"asyncio", "discord", "aiohttp", "time", "random", "os", "socket"}
    forbidden |= {"shell", "cordstream.shell", "domain"}
    assert not forbidden & ALLOWED
