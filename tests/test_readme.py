"""The README's Python examples run as written (the README must stay true)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_examples_run() -> None:
    """Top to bottom in one namespace, as a reader meets them (later blocks use earlier names)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 3, "the README lost its Python examples"
    namespace: dict[str, object] = {}
    for block in blocks:
        # dont_inherit: the blocks run without this module's `from __future__` imports.
        exec(compile(block, str(README), "exec", dont_inherit=True), namespace)
