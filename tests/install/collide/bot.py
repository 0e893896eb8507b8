"""A bot with its own `domain` package and `shell.py` beside cordstream.

Run from this folder (so its own modules come first on `sys.path`), it imports both its
modules and cordstream's, and drives cordstream's core through one stream. Had cordstream
imported a bare `domain` or `shell`, it would get the bot's and fail here.
"""

from __future__ import annotations

import domain
import shell
from cordstream.domain import (
    AwaitTurn,
    ChunkArrived,
    Delivered,
    EditMessage,
    Finish,
    ProviderEnded,
    SendMessage,
    Started,
    StreamConfig,
    TextChunk,
    TurnGranted,
    initial_state,
    step,
)
from cordstream.shell import StreamOrchestrator


def main() -> None:
    assert domain.BOT_DOMAIN == "the bot's own domain package"
    assert shell.BOT_SHELL == "the bot's own shell module"
    assert StreamOrchestrator().has_stop_request(1) is False
    state = initial_state(StreamConfig())
    state, _ = step(state, Started(now=0.0))
    state, effects = step(state, ChunkArrived(0.1, TextChunk(domain.greet("world") + "\n")))
    state, ended = step(state, ProviderEnded(0.2))
    # What the shell would do: every turn is granted, Discord accepts every request.
    todo = [*effects, *ended]
    finish: Finish | None = None
    while todo:
        effect = todo.pop(0)
        if isinstance(effect, AwaitTurn):
            state, answers = step(state, TurnGranted(0.3, token=effect.token))
            todo.extend(answers)
        elif isinstance(effect, SendMessage | EditMessage):
            state, answers = step(state, Delivered(0.3, seq=effect.seq))
            todo.extend(answers)
        elif isinstance(effect, Finish):
            finish = effect
    assert finish is not None, "the stream did not finish"
    assert finish.result.status == "completed", finish.result
    print(shell.run("bot"), "|", finish.result.accumulated_text)


if __name__ == "__main__":
    main()
