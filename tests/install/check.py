"""The install a user does, proven: build the wheel, install it apart from the repo, use it.

`make test` runs this (`python -m tests.install.check`). `make test`'s other checks run on an
editable install inside the repository, which cannot see what a user's `pip install` gets:
a subpackage missing from the wheel, a bare `domain`/`shell` import that only works from the
repo's root, types a user's mypy cannot find. So, from the files git knows (a clean clone's
view of the work tree, never a stale `build/`):

1. The wheel is built twice: with the setuptools floor that `pyproject.toml` declares,
   exactly (`--no-build-isolation`), which proves the floor; and as `pip wheel` builds it for
   a user (isolated, the newest setuptools). Both hold only `cordstream/` and the metadata:
   the top-level package's own files (`cordstream/`: `__version__`, the command's entry
   point), every package folder under `domain/` and `shell/`, `py.typed` in all three, the
   LICENSE.
2. A fresh virtual environment gets that wheel (not editable) with the `openai` and `testing`
   extras, and mypy, at the versions in `constraints.txt`. Working from a folder outside the
   repo:
   - `cordstream.__version__` is the wheel's version, and `cordstream --version` prints it;
   - every public name of `cordstream.domain`, `cordstream.shell`, `cordstream.shell.bot`,
     `cordstream.shell.providers` and `cordstream.shell.testing` imports (an adapter whose SDK
     is absent raises the ImportError that names its extra);
   - `cordstream demo` runs and completes, and so does `cordstream demo --bot` (the bot kit's
     `ChatBot` on a scripted model);
   - `mypy --strict` passes on `typed_bot.py` (a typed tool loop using `run_turn`,
     `StreamOrchestrator` and a provider) and on the README's Python examples, so the
     library's types reach a user's type checker and the README's code is right;
   - the README's quick start, `bot.py` and `test_bot.py` as written, passes its test under
     pytest (cordstream's plugin, the local Discord) and `mypy --strict`;
   - OpenTelemetry is not installed (so the demos above ran without it); then, with the
     `otel` extra and the SDK added, the README's `observe.py` prints cordstream's spans and
     passes `mypy --strict`.
3. Next to a bot with its own `domain` package and `shell.py` module (`collide/`), run from
   the bot's folder so its modules come first on `sys.path`: the bot's script works, the
   demo works (`python -m cordstream.shell.cli demo`), and mypy passes on the bot.

It prints one line per step and exits 1 with the failing command's output on the first
failure. `--keep` leaves the temporary folder for a look.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PACKAGES = {"domain": "cordstream/domain", "shell": "cordstream/shell"}
# The top-level package's own folder: its files, not subpackages, go into the wheel.
TOP = "cordstream"

VERSION = """
import importlib.metadata
import sys

import cordstream

assert cordstream.__file__ and "site-packages" in cordstream.__file__, cordstream.__file__
assert cordstream.__version__ == importlib.metadata.version("cordstream") == sys.argv[1], (
    cordstream.__version__, sys.argv[1]
)
print("cordstream", cordstream.__version__)
"""

PUBLIC_NAMES = """
import importlib

PACKAGES = (
    "cordstream.domain",
    "cordstream.shell",
    "cordstream.shell.bot",
    "cordstream.shell.providers",
    "cordstream.shell.testing",
)
for name in PACKAGES:
    module = importlib.import_module(name)
    assert module.__file__ and "site-packages" in module.__file__, module.__file__
    for public in module.__all__:
        try:
            getattr(module, public)
        except ImportError as missing:  # a name whose extra is not installed
            extras = {"AnthropicProvider": "anthropic", "GeminiProvider": "gemini"}
            extra = (extras | {"RedisStopRegistry": "redis"})[public]
            assert f"cordstream[{extra}]" in str(missing), missing
print("public names:", sum(len(importlib.import_module(n).__all__) for n in PACKAGES))
"""


class CheckFailed(Exception):
    """A step failed; the message says which and shows what the command printed."""


NO_OTEL = """
import importlib.util
assert importlib.util.find_spec("opentelemetry") is None, "OpenTelemetry is installed"
from cordstream.shell import otel
assert not otel.AVAILABLE and otel.tracer() is None and otel.instruments() is None
"""


def run(command: Sequence[str | Path], cwd: Path, expect: str | None = None) -> str:
    """Run a command to completion; its output, or CheckFailed with that output.

    `expect`: a pattern the output must contain (the command's exit status alone can lie).
    """
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    output = done.stdout + done.stderr
    if done.returncode != 0 or (expect is not None and not re.search(expect, output)):
        shown = " ".join(str(part) for part in command)
        want = f" (expected /{expect}/ in its output)" if expect else ""
        raise CheckFailed(f"`{shown}` in {cwd} exited {done.returncode}{want}:\n{output}")
    return output


def source_tree(into: Path) -> Path:
    """The files git knows (tracked, and new ones not ignored), as a clean clone has them."""
    listed = run(["git", "ls-files", "-z", "-co", "--exclude-standard"], REPO)
    src = into / "src"
    for name in filter(None, listed.split("\0")):
        path = REPO / name
        if path.is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    return src


def setuptools_floor(pyproject: Path) -> str:
    """The exact version in `setuptools>=X`, which the floor build installs."""
    requires = tomllib.loads(pyproject.read_text(encoding="utf-8"))["build-system"]["requires"]
    floors = [m.group(1) for r in requires if (m := re.fullmatch(r"setuptools>=([\d.]+)", r))]
    if len(floors) != 1:
        raise CheckFailed(f"build-system requires no `setuptools>=X` floor: {requires}")
    return floors[0]


def check_wheel(wheel: Path, src: Path) -> None:
    """Only `cordstream/` and metadata; every package folder; `py.typed`; the LICENSE."""
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    problems = [f"top-level names {sorted(tops)}, want only cordstream"] * (tops != {"cordstream"})
    # Every module of every package folder (subpackages included), under `cordstream/`.
    modules = {p.relative_to(src).as_posix() for f in PACKAGES for p in (src / f).rglob("*.py")}
    shipped = {n.removeprefix("cordstream/") for n in names if n.endswith(".py")}
    problems += [f"{module} is not in the wheel" for module in sorted(modules - shipped)]
    own = {p.relative_to(src).as_posix() for p in (src / TOP).glob("*.py")}
    problems += [f"{module} is not in the wheel" for module in sorted(own - set(names))]
    typed = {f"{package}/py.typed" for package in [TOP, *PACKAGES.values()]}
    problems += [f"{marker} is missing" for marker in sorted(typed - set(names))]
    if not any(name.endswith(".dist-info/licenses/LICENSE") for name in names):
        problems.append("no LICENSE in the metadata")
    metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
    if "License-Expression: MIT" not in zipfile.ZipFile(wheel).read(metadata).decode():
        problems.append("METADATA has no License-Expression")
    if problems:
        raise CheckFailed(f"{wheel.name}: " + "; ".join(problems))


_FILE = re.compile(r"# (\w+\.py)\n")


def readme_files(readme: Path, into: Path, names: Sequence[str]) -> list[Path]:
    """The README's blocks whose first line names their file (`# bot.py`) as one of `names`,
    written into `into`, in that order."""
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.DOTALL)
    into.mkdir(exist_ok=True)
    found = {m.group(1): block for block in blocks if (m := _FILE.match(block))}
    missing = [name for name in names if name not in found]
    if missing:
        raise CheckFailed(f"the README has no block {', '.join(missing)}: {sorted(found)}")
    paths = [into / name for name in names]
    for path in paths:
        path.write_text(found[path.name], encoding="utf-8")
    return paths


def readme_modules(readme: Path, into: Path) -> list[Path]:
    """The README's other Python blocks as modules: a block that starts with an import starts
    one."""
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.DOTALL)
    modules: list[list[str]] = []
    for block in blocks:
        if _FILE.match(block):
            continue
        first = next(line for line in block.splitlines() if line and not line.startswith("#"))
        if first.startswith(("import ", "from ")) or not modules:
            modules.append([])
        modules[-1].append(block)
    paths = []
    for number, parts in enumerate(modules, 1):
        path = into / f"readme_example_{number}.py"
        path.write_text("\n".join(parts), encoding="utf-8")
        paths.append(path)
    if len(paths) < 2:
        raise CheckFailed(f"the README lost its examples: {len(blocks)} Python blocks")
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cordstream-install-"))
    started = time.monotonic()

    def step(what: str) -> None:
        print(f"install check [{time.monotonic() - started:5.1f} s] {what}", flush=True)

    try:
        src = source_tree(work)
        venv, user, bot = work / "venv", work / "user", work / "bot"
        python = venv / "bin" / "python"
        constraints = REPO / "constraints.txt"
        floor = setuptools_floor(src / "pyproject.toml")
        run([sys.executable, "-m", "venv", venv], work)
        run([python, "-m", "pip", "install", "-q", f"setuptools=={floor}"], work)
        pip_wheel: list[str | Path] = [python, "-m", "pip", "wheel", "-q", "--no-deps", src]
        run([*pip_wheel, "--no-build-isolation", "-w", work / "floor"], work)
        check_wheel(next((work / "floor").glob("*.whl")), src)
        step(f"wheel built with the declared floor, setuptools=={floor}: only cordstream/")
        run([*pip_wheel, "-w", work / "dist"], work)
        wheel = next((work / "dist").glob("*.whl"))
        check_wheel(wheel, src)
        step(f"wheel built as pip builds it for a user: {wheel.name}")
        install: list[str | Path] = [python, "-m", "pip", "install", "-q", "-c", constraints]
        run([*install, f"{wheel}[openai,testing]", "mypy"], work)
        step("installed into a fresh venv, not editable, with [openai,testing] and mypy")

        user.mkdir()
        shutil.copy2(HERE / "typed_bot.py", user)
        version = wheel.name.split("-")[1]
        run([python, "-c", VERSION, version], user)
        said = run([venv / "bin" / "cordstream", "--version"], user)
        if said != f"cordstream {version}\n":
            raise CheckFailed(f"`cordstream --version` printed {said!r}, not the wheel's {version}")
        step(f"cordstream.__version__ and `cordstream --version`: {version}")
        run([python, "-c", PUBLIC_NAMES], user)
        step("every public name of cordstream.domain, .shell, .shell.providers, .shell.testing")
        run([venv / "bin" / "cordstream", "demo"], user, expect=r"status:\s+completed")
        step("`cordstream demo` completes")
        story_ends = r"alice\s+'actually, make it green tea'\s+completed"
        run([venv / "bin" / "cordstream", "demo", "--bot"], user, expect=story_ends)
        step("`cordstream demo --bot` (the example bot, from the wheel) completes")
        examples = readme_modules(src / "README.md", user)
        mypy: list[str | Path] = [python, "-m", "mypy", "--strict", "--no-incremental"]
        run([*mypy, "typed_bot.py", *(p.name for p in examples)], user)
        step(f"mypy --strict: typed_bot.py and the README's {len(examples)} examples")
        quick = readme_files(src / "README.md", user / "quickstart", ["bot.py", "test_bot.py"])
        pytest: list[str | Path] = [
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_bot.py",
        ]
        run(pytest, quick[0].parent, expect=r"1 passed")
        run([*mypy, *(p.name for p in quick)], quick[0].parent)
        step("the README's quick start: its bot passes its test (pytest), mypy --strict passes")
        run([python, "-c", NO_OTEL], user)
        step("without the otel extra: no OpenTelemetry at all (the demos above ran without it)")
        run([*install, f"{wheel}[otel]", "opentelemetry-sdk"], work)
        observe = readme_files(src / "README.md", user / "observe", ["observe.py"])[0]
        run([python, observe.name], observe.parent, expect=r'"cordstream.discord.requests": \d+')
        run([*mypy, observe.name], observe.parent)
        step("with [otel] and the SDK: the README's observe.py prints spans; mypy --strict passes")

        shutil.copytree(HERE / "collide", bot)
        run([python, "bot.py"], bot, expect=r"ran bot \| hello, world")
        run([python, "-m", "cordstream.shell.cli", "demo"], bot, expect=r"status:\s+completed")
        run([*mypy, "bot.py", "shell.py", "domain"], bot)
        step("beside a bot's own `domain` package and `shell.py`: both work, mypy passes")
    except (CheckFailed, subprocess.TimeoutExpired) as failed:
        print(f"install check FAILED: {failed}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"install check: left {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
