"""`make mutate`: how many mutants of `domain/` the tests kill, on a seeded sample.

mutmut (3.8) mutates the functions of `domain/`, runs the tests that call each mutated
function, and records whether they failed (the mutant is killed) or passed (it survived).
All of `domain/`'s mutants would take hours on two cores, so this runs a sample: `--sample`
mutants drawn with `random.Random(--seed)` from the sorted list of all of them. It prints the
score (killed / non-equivalent mutants sampled), the count of each outcome and the run time,
every surviving mutant with its diff, and exits 1 below `--min` percent.

Why a staged copy. mutmut names modules after file paths relative to where it runs
(`domain/machine.py` would be `domain.machine`), imports the mutants from its own copy
`mutants/` by those names, and stops when the tests record calls under other names. The
tests import `cordstream.domain.machine`, so mutmut runs in `.mutate/` (gitignored, made anew
each run), laid out under the import names:

    .mutate/cordstream/domain/   domain/, the only source mutated
    .mutate/cordstream/shell/    shell/, not mutated (tests import it; it imports the domain)
    .mutate/tests/               tests/, plus a conftest.py written here (below)
    .mutate/pyproject.toml       the real one, plus a [tool.mutmut] table written here
    .mutate/...                  every other file git knows (README.md, docs/, bench/,
                                 examples/, and domain/ and shell/ again, unmutated, for
                                 the tests that read the repository's files)

mutmut copies it into `.mutate/mutants/` and puts that first on `sys.path`, so `cordstream`
(a namespace package) gets `mutants/cordstream/` as its first portion and the path finder
finds `cordstream.domain` there before the editable install's finder, which is the last
on `sys.meta_path`, is asked. The conftest.py checks this: it fails the run if
`cordstream.domain` or `cordstream.shell` came from anywhere else.

The conftest.py also loads a Hypothesis profile without the example database (each run
stands alone: no failure found by an earlier run, or by `make test`, is replayed), without
deadlines and the too_slow health check (two mutmut workers beside other work must not
"kill" a mutant by being slow), and `--hypothesis-seed` is the sample's seed: the same
`--seed` draws the same mutants and the same examples.

`tests/mutation/equivalent.toml` lists equivalent mutants (no test can kill them: the
mutated code behaves the same), each with the change it makes and the reason. One in the
sample is left out of the score and listed, as long as its change is still the one recorded
(mutants are numbered within a function, so an edit to the function can renumber them).

The stage is left in place: `cd .mutate && ../.venv/bin/mutmut show NAME` shows a mutant,
`../.venv/bin/mutmut browse` browses the results, `mutmut-run.log` has mutmut's output.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / ".mutate"
MUTANTS = STAGE / "mutants"
EQUIVALENT = Path(__file__).resolve().parent / "equivalent.toml"
MUTMUT = Path(sys.executable).parent / "mutmut"
SOURCE = "cordstream/domain"
# The folders that install as cordstream.<name> (pyproject.toml's package-dir).
PACKAGES = ("domain", "shell")

# mutmut's outcomes (mutmut.stats.status_by_exit_code) in which a test caught the mutant.
# "segfault" is how mutmut names a worker ended by SIGKILL: the CPU limit's hard stop, or
# the kernel out of memory.
DETECTED = ("killed", "timeout", "segfault")
# The wall-clock limit per mutant is (its tests' time in the stats run + 1 s) x this
# (mutmut's default is 15). Enough for two workers on a busy machine; less time spent
# waiting on each mutant that loops forever.
TIMEOUT_MULTIPLIER = 8.0

CONFTEST = '''"""Written by tests/mutation/run.py into its staged tests/ (never the repo's)."""

from pathlib import Path

from hypothesis import HealthCheck, settings

import cordstream.domain
import cordstream.shell

_STAGED = Path(__file__).resolve().parents[1] / "cordstream"
for _package in (cordstream.domain, cordstream.shell):
    _file = Path(_package.__file__ or "?").resolve()
    if not _file.is_relative_to(_STAGED):
        raise ImportError(f"{_package.__name__} came from {_file}, not mutmut's copy in {_STAGED}")

settings.register_profile(
    "cordstream-mutate",
    database=None,
    derandomize=False,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("cordstream-mutate")
'''


class Failed(Exception):
    """The tooling failed (not the score): the message says what, and where to look."""


@dataclass(frozen=True)
class Equivalent:
    """An entry of equivalent.toml: the change the mutant makes, and why no test can see it."""

    change: tuple[str, ...]
    reason: str


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Mutation testing of domain/ on a sample.")
    parser.add_argument("--sample", type=int, default=60, help="mutants to run (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="draws the sample (default 0)")
    parser.add_argument("--min", type=float, default=95.0, help="lowest passing score, percent")
    parser.add_argument("--max-children", type=int, default=2, help="mutmut's workers")
    parser.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.generate_only:  # in a child process, in the stage (see generate)
        _generate_here(args.max_children)
        return 0
    if args.sample < 1 or args.max_children < 1:
        parser.error("--sample and --max-children must be at least 1")
    try:
        return run(args.sample, args.seed, args.min, args.max_children)
    except Failed as failure:
        print(f"mutate: {failure}", file=sys.stderr)
        return 2


def run(sample_size: int, seed: int, minimum: float, jobs: int) -> int:
    started = time.monotonic()
    equivalents = load_equivalents(EQUIVALENT)
    stage(seed)
    generate(jobs)
    names = all_mutants()
    sample = sorted(random.Random(seed).sample(names, min(sample_size, len(names))))
    prepared = time.monotonic()
    print(
        f"mutate: {len(names)} mutants of domain/; running {len(sample)} (seed {seed}) "
        f"with {jobs} worker(s)",
        flush=True,
    )
    run_mutmut(sample, jobs)
    finished = time.monotonic()

    status = statuses(sample)
    counts = Counter(status.values())
    diffs = {name: show(name) for name in sample if status[name] not in DETECTED}
    diffs |= {name: show(name) for name in sample if name in equivalents and name not in diffs}
    excluded: dict[str, str] = {}
    stale: list[str] = []
    for name in sorted(equivalents.keys() & set(sample)):
        if status[name] in DETECTED:
            stale.append(f"{name}: listed as equivalent, but the tests {status[name]} it")
        elif changed_lines(diffs[name]) != equivalents[name].change:
            stale.append(f"{name}: listed as equivalent, but its change is not the one listed")
        else:
            excluded[name] = equivalents[name].reason
    unknown = equivalents.keys() - set(names)
    stale += [f"{name}: listed as equivalent, but no such mutant" for name in unknown]
    survivors = [n for n in sample if status[n] not in DETECTED and n not in excluded]
    counted = len(sample) - len(excluded)
    killed = counted - len(survivors)
    score = 100.0 * killed / counted if counted else 100.0

    print()
    print("Outcomes: " + ", ".join(f"{label} {n}" for label, n in sorted(counts.items())))
    if excluded:
        print(f"\nEquivalent, left out of the score ({len(excluded)}):")
        for name, reason in excluded.items():
            print(f"  {name}: {reason}")
    if stale:
        print(f"\nStale entries in {EQUIVALENT.relative_to(ROOT)} (counted as any mutant):")
        for line in sorted(stale):
            print(f"  {line}")
    if survivors:
        print(f"\nSurvivors ({len(survivors)}): write the test that kills each, or, if none can,")
        print(f"add it to {EQUIVALENT.relative_to(ROOT)} with the reason.")
        tests = tests_by_function()
        for name in survivors:
            print_survivor(name, status[name], diffs[name], tests.get(_function(name), []))
    print()
    print(
        f"Score: {killed}/{counted} killed = {score:.1f} % (minimum {minimum:g} %; "
        f"{len(sample)} sampled of {len(names)}, {len(excluded)} equivalent, seed {seed})"
    )
    print(
        f"Time: {_duration(finished - started)} (stage and generate "
        f"{_duration(prepared - started)}, mutmut {_duration(finished - prepared)})"
    )
    print(f"mutmut's output: {(STAGE / 'mutmut-run.log').relative_to(ROOT)}")
    return 0 if score >= minimum else 1


def load_equivalents(path: Path) -> dict[str, Equivalent]:
    """equivalent.toml: one table per mutant name, with `change` and `reason`."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise Failed(f"cannot read {path}: {error}") from error
    found: dict[str, Equivalent] = {}
    for name, entry in data.items():
        fields = entry if isinstance(entry, dict) else {}
        change, reason = fields.get("change"), fields.get("reason")
        if not isinstance(change, str) or not isinstance(reason, str) or not reason.strip():
            raise Failed(f"{path}: [{json.dumps(name)}] needs a `change` and a `reason` (strings)")
        found[name] = Equivalent(_normalized(change.splitlines()), reason.strip())
    return found


def stage(seed: int) -> None:
    """Lay out `.mutate/` anew: the files git knows, domain/ and shell/ under their import names."""
    if STAGE.exists():
        shutil.rmtree(STAGE)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        raise Failed(f"git ls-files failed in {ROOT}: {listed.stderr.decode().strip()}")
    tops: set[str] = set()
    for relative in sorted(set(filter(None, listed.stdout.decode().split("\0")))):
        source = ROOT / relative
        if not source.is_file():  # deleted in the work tree, not yet in the index
            continue
        parts = Path(relative).parts
        tops.add(parts[0])
        targets = [STAGE / relative]
        if parts[0] in PACKAGES:
            targets.append(STAGE / "cordstream" / relative)
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    if not (STAGE / SOURCE).is_dir():
        raise Failed(f"git knows no file in {ROOT / 'domain'}")
    conftest = STAGE / "tests" / "conftest.py"
    existing = conftest.read_text(encoding="utf-8") + "\n\n" if conftest.exists() else ""
    conftest.write_text(existing + CONFTEST, encoding="utf-8")

    config = {
        "source_paths": [SOURCE],
        # mutmut copies tests/ and pyproject.toml itself; everything else the tests read.
        "also_copy": ["cordstream/shell", *sorted(tops - {"tests", "pyproject.toml"})],
        "pytest_add_cli_args": ["-p", "no:cacheprovider", f"--hypothesis-seed={seed}"],
        "timeout_multiplier": TIMEOUT_MULTIPLIER,
        "use_git_change_detection": False,
        "use_setproctitle": False,
    }
    table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in config.items())
    pyproject = STAGE / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8").rstrip("\n") + f"\n\n[tool.mutmut]\n{table}\n"
    try:
        assert tomllib.loads(text)["tool"]["mutmut"]["source_paths"] == [SOURCE]
    except (tomllib.TOMLDecodeError, KeyError, AssertionError) as error:
        raise Failed(f"cannot add [tool.mutmut] to pyproject.toml: {error!r}") from error
    pyproject.write_text(text, encoding="utf-8")


def generate(jobs: int) -> None:
    """Write every mutant into `.mutate/mutants/`, running no test.

    `mutmut run` would also run the whole suite for its stats before it looks at the names it
    was given; here only its first step runs, in a child process in the stage (mutmut reads
    its configuration from the working directory). The `mutmut run` that follows finds the
    mutants written and keeps them.
    """
    done = subprocess.run(
        [sys.executable, __file__, "--generate-only", "--max-children", str(jobs)],
        cwd=STAGE,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise Failed(f"generating mutants failed:\n{done.stdout}{done.stderr}")


def _generate_here(jobs: int) -> None:
    """The first step of mutmut 3.8's `mutmut run` (mutmut.__main__._run), alone."""
    from mutmut.__main__ import create_mutants  # noqa: PLC0415 (needs the stage's config)
    from mutmut.mutation.trampoline import set_mutant_under_test  # noqa: PLC0415
    from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir  # noqa: PLC0415

    set_mutant_under_test("mutant_generation")
    Path("mutants").mkdir()
    copy_src_dir()
    copy_also_copy_files()
    create_mutants(jobs)


def _meta_files() -> list[Path]:
    return sorted((MUTANTS / SOURCE).rglob("*.py.meta"))


def _exit_codes(*, running: bool = False) -> dict[str, int | None]:
    """Every mutant's name and exit code (None: not run), from mutmut's .meta files.
    `running`: mutmut may be rewriting a file as it is read (empty or cut short); such a file
    is skipped, for a progress line, rather than failing the run."""
    codes: dict[str, int | None] = {}
    for meta in _meta_files():
        try:
            codes |= json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        except (OSError, ValueError):
            if not running:
                raise
    return codes


def all_mutants() -> list[str]:
    names = sorted(_exit_codes())
    if not names:
        raise Failed(f"mutmut wrote no mutant of {SOURCE} in {MUTANTS}")
    return names


def run_mutmut(sample: Sequence[str], jobs: int) -> None:
    """`mutmut run NAME...`: the stats run (the whole suite, once), a clean run, a run that
    must fail, then each mutant with the tests that call its function. Progress every minute.
    """
    log_path = STAGE / "mutmut-run.log"
    started = time.monotonic()
    reported = -1
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            [str(MUTMUT), "run", "--max-children", str(jobs), *sample],
            cwd=STAGE,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            while process.poll() is None:
                time.sleep(2)
                minutes = int((time.monotonic() - started) // 60)
                if minutes > reported:
                    reported = minutes
                    codes = _exit_codes(running=True)
                    done = sum(codes.get(name) is not None for name in sample)
                    phase = "mutants" if done else "mutmut runs the whole suite first"
                    print(f"  {minutes:3d} min: {done}/{len(sample)} done ({phase})", flush=True)
        except KeyboardInterrupt:
            process.wait()
            raise
    text = log_path.read_text(encoding="utf-8", errors="replace")
    if process.returncode != 0:
        tail = "\n".join(text.replace("\r", "\n").splitlines()[-60:])
        raise Failed(f"mutmut run exited {process.returncode} (all of it: {log_path}):\n{tail}")


def statuses(sample: Iterable[str]) -> dict[str, str]:
    from mutmut.stats import status_by_exit_code  # noqa: PLC0415 (mutmut is a dev dependency)

    codes = _exit_codes()
    return {name: status_by_exit_code[codes.get(name)] for name in sample}


def show(name: str) -> str:
    """`mutmut show NAME`: the mutated function's diff."""
    done = subprocess.run(
        [str(MUTMUT), "show", name], cwd=STAGE, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise Failed(f"mutmut show {name} failed:\n{done.stdout}{done.stderr}")
    return done.stdout.rstrip("\n")


def changed_lines(diff: str) -> tuple[str, ...]:
    """The lines a mutant removes and adds, from its diff (the part equivalent.toml records)."""
    lines = diff.splitlines()
    hunks = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
    return _normalized(line for line in lines[hunks:] if line[:1] in {"-", "+"})


def _normalized(lines: Iterable[str]) -> tuple[str, ...]:
    """`-` or `+` and the code, without the indentation (which an unrelated edit can change)."""
    return tuple(f"{line[0]} {line[1:].strip()}" for line in lines if line.strip())


def tests_by_function() -> dict[str, list[str]]:
    """The tests the stats run saw calling each function (mutmut-stats.json)."""
    stats = json.loads((MUTANTS / "mutmut-stats.json").read_text(encoding="utf-8"))
    return {name: sorted(tests) for name, tests in stats["tests_by_mangled_function_name"].items()}


def _function(mutant: str) -> str:
    return mutant.partition("__mutmut_")[0]


def print_survivor(name: str, status: str, diff: str, tests: Sequence[str]) -> None:
    files = sorted({test.partition("::")[0] for test in tests})
    ran = f"{len(tests)} tests in {', '.join(files)}" if tests else "no test calls this function"
    print(f"\n--- {name} ({status}; {ran})")
    print(diff)
    change = "\n".join(changed_lines(diff)) + "\n"
    literal = f"'''\n{change}'''" if "'''" not in change else json.dumps(change, ensure_ascii=False)
    print(f"If equivalent:\n[{json.dumps(name, ensure_ascii=False)}]\nchange = {literal}")
    print('reason = "..."')


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


if __name__ == "__main__":
    sys.exit(main())
