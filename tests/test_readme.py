"""The README's Python examples run as written (the README must stay true).

A block whose first line names a file (`# bot.py`) is that file: `bot.py` and `test_bot.py`
(the quick start) are written to a folder of their own and its tests run there with pytest,
as a user runs them; `observe.py` ("Observe it in production") runs as a script of its own,
in a process of its own (it sets OpenTelemetry's global providers). The other blocks run top
to bottom in one namespace, as a reader meets them."""

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
    assert set(files) == {"bot.py", "test_bot.py", "observe.py"}, sorted(files)
    for name in ("bot.py", "test_bot.py"):
        (tmp_path / name).write_text(files[name], encoding="utf-8")
    ran = _run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_bot.py")
    assert "1 passed" in ran.stdout, ran.stdout


def test_readme_observe_prints_cordstreams_spans_metrics_and_log_line(tmp_path: Path) -> None:
    files, _ = blocks()
    (tmp_path / "observe.py").write_text(files["observe.py"], encoding="utf-8")
    ran = _run(tmp_path, "observe.py")
    assert '"name": "chat"' in ran.stdout  # the demo's scripted model has no model name
    assert '"cordstream.discord.requests": ' in ran.stdout
    assert '"gen_ai.operation.name": "chat"' in ran.stdout
    assert '"name": "gen_ai.client.operation.duration"' in ran.stdout  # the metrics, at exit
    assert "INFO cordstream.stream: stream 1 in channel" in ran.stderr
    assert "completed after" in ran.stderr


def _run(folder: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """This Python with `arguments`, in `folder`; it must succeed."""
    ran = subprocess.run(
        [sys.executable, *arguments],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return ran
