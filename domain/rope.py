"""A persistent list of strings, newest first, so that appending never copies (E10).

`(rope, item)` appends in O(1); the state keeps ropes where a stream collects text piece by
piece (the messages Discord accepted, the thought log, `<details>` bodies) and reads them once,
when the result is built.
"""

from __future__ import annotations

from typing import TypeAlias

Rope: TypeAlias = "tuple[Rope, str] | None"


def items(rope: Rope) -> list[str]:
    """The items in the order they were appended."""
    found: list[str] = []
    while rope is not None:
        rope, item = rope
        found.append(item)
    found.reverse()
    return found


def join(rope: Rope) -> str:
    return "".join(items(rope))
