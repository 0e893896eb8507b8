"""The pytest plugin as a bot's author meets it: pytest, run in a folder outside the repository
with no configuration and no conftest.py, loads it by itself (the installed package's `pytest11`
entry point) and a test file written with its fixtures passes as written (`plugin_user.py`:
a bot's tool turn scripted with `ScriptedTurn`, under looptime).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

UNMARKED = """
from cordstream.shell.testing import LocalBot


async def test_forgot_the_marker(local_bot: LocalBot) -> None:
    assert local_bot
"""


def test_a_users_test_passes_as_written_outside_the_repository(tmp_path: Path) -> None:
    assert not tmp_path.is_relative_to(REPO)  # no configuration, no conftest.py of the repo's
    shutil.copy(HERE / "plugin_user.py", tmp_path / "test_dice_bot.py")
    (tmp_path / "test_unmarked.py").write_text(UNMARKED, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    outcomes = {
        (line.split()[0], line.split()[1])
        for line in output.splitlines()
        if line.startswith(("PASSED ", "ERROR ", "FAILED ", "SKIPPED "))
    }
    assert outcomes == {
        ("PASSED", "test_dice_bot.py::test_the_bot_rolls_a_die"),
        ("PASSED", "test_dice_bot.py::test_a_tool_turn_completes"),
        # An async test without pytest-asyncio's marker is an error that says so, not a skip.
        ("ERROR", "test_unmarked.py::test_forgot_the_marker"),
    }, output
    assert (
        "test_forgot_the_marker uses the local_bot fixture but is not run by pytest-asyncio: "
        "mark it `@pytest.mark.asyncio`" in output
    ), output
    assert done.returncode == 1, output
