"""The README's Python examples run as written (the README must stay true).

A block whose first line names a file (`# bot.py`) is that file of the quick start: they are
written to a folder of their own and its tests run there with pytest, as a user runs them.
The other blocks run top to bottom in one namespace, as a reader meets them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
_FILE = re.compile(r"# (\w+\.py)\n")


def blocks() -> tuple[dict[str, str], list[str]]:
    """The README's Python blocks: the named files, and the rest in order."""
    found = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    files = {m.group(1): block for block in found if (m := _FILE.match(block))}
    return files, [block for block in found if not _FILE.match(block)]


def test_readme_python_examples_run() -> None:
    """Top to bottom in one namespace (later blocks use earlier names)."""
    _, rest = blocks()
    assert len(rest) >= 3, "the README lost its Python examples"
    namespace: dict[str, object] = {}
    for block in rest:
        # dont_inherit: the blocks run without this module's `from __future__` imports.
        exec(compile(block, str(README), "exec", dont_inherit=True), namespace)


def test_readme_quick_start_bot_passes_its_own_test(tmp_path: Path) -> None:
    files, _ = blocks()
    assert set(files) == {"bot.py", "test_bot.py"}, sorted(files)
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_bot.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout, ran.stdout
