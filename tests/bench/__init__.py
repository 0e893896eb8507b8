"""Tests of the bench scripts, each run as a user runs it: `python -m bench.NAME ...` from the
tree this package is in (`run`), its printed output read back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(module: str, *args: str) -> str:
    """What `python -m module args...` prints, once it exits 0 (its stderr otherwise)."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
