"""bench/hops.py follows one text chunk there and back: both stretches are found and end where
its docstring says (a renamed function in the path must not leave a stretch empty).

The script runs as a user runs it (`python -m bench.hops`, from the tree this file is in), and
the test reads what it prints: `name: value`, a list of files as `a -> b -> c`."""

from __future__ import annotations

from tests.bench import run


def _printed() -> dict[str, str]:
    printed = run("bench.hops")
    return dict(line.split(": ", 1) for line in printed.splitlines())


def test_both_stretches_of_the_chunks_path_are_traced() -> None:
    figures = _printed()
    there = figures["hops_there_files"].split(" -> ")
    back = figures["hops_back_files"].split(" -> ")
    assert there[0] == "shell/providers/openai.py"
    assert there[-1] == "shell/discord_api.py"  # the request that sends the message
    assert back[:2] == ["shell/discord_api.py", "shell/orchestrator.py"]  # the answer, as an event
    assert "domain/machine.py" in there
    assert "domain/machine.py" in back
    there_frames, back_frames = int(figures["hops_there_frames"]), int(figures["hops_back_frames"])
    assert there_frames > 0
    assert back_frames > 0
    assert int(figures["hops_frames"]) == there_frames + back_frames
