"""bench/hops.py follows one text chunk there and back: both stretches are found and end where
its docstring says (a renamed function in the path must not leave a stretch empty)."""

from __future__ import annotations

from bench.hops import measure


def test_both_stretches_of_the_chunks_path_are_traced() -> None:
    figures = measure()
    there, back = figures["hops_there_files"], figures["hops_back_files"]
    assert isinstance(there, list)
    assert isinstance(back, list)
    assert there[0] == "shell/providers/openai.py"
    assert there[-1] == "shell/delivery.py"  # the request that sends the message
    assert back[:2] == ["shell/delivery.py", "shell/orchestrator.py"]  # the answer, as an event
    assert "domain/machine.py" in there
    assert "domain/machine.py" in back
    there_frames, back_frames = figures["hops_there_frames"], figures["hops_back_frames"]
    assert isinstance(there_frames, int)
    assert isinstance(back_frames, int)
    assert there_frames > 0
    assert back_frames > 0
    assert figures["hops_frames"] == there_frames + back_frames
