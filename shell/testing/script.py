"""A model in a test: `ScriptProvider` plays a script, and records what cordstream did to it.

    provider = ScriptProvider(["Hello ", Sleep(0.5), "there.\\n", Hang()])
    result = await orchestrator.stream_to_discord(provider, StreamConfig(), context)
    assert result.status == "timeout" and provider.closed

A script is a sequence of steps, played in order:

- a `str`: yielded as a `TextChunk`;
- any other value (a chunk, or garbage such as `42`): yielded as it is, and `process_chunk`
  returns it unchanged; `Raw(value)` does the same for a value that is itself a step (a str,
  an exception);
- `Sleep(seconds)`: the model is slow; `Hang()`: the model stops answering;
- `Do(action)`: call `action` between two chunks, and await what it returns when that is
  awaitable (a user's /stop at an exact point of the answer, a gate that holds the stream);
- an exception: the stream raises it.

It is the one scripted provider of cordstream's own tests, benchmarks, soak and demo.

`ScriptedTurn` is a `ScriptProvider` that is also a `ToolProvider`, for `run_turn`: a script
per segment of the turn, each later one a list of steps or a function of the tool outcomes the
loop handed back (so the answer can say what the tool returned). A `FunctionCall` step ends a
segment in that call; `outcomes` records every round's outcomes:

    model = ScriptedTurn(
        ["Let me roll.\\n", FunctionCall("roll", {"sides": 6}, id="call_1")],
        lambda outcomes: [f"You rolled {outcomes[0].output}."],
    )
    turn = await run_turn(orchestrator, model, context, tools={"roll": roll})
    assert turn.status == "completed" and model.outcomes[0][0].output == "4"
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Self, TypeAlias

from cordstream.domain import (
    ErrorChunk,
    FunctionCall,
    FunctionCallChunk,
    ProcessedChunk,
    ProviderError,
    TextChunk,
)
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext
from cordstream.shell.providers.base import ToolOutcome

__all__ = [
    "Do",
    "Hang",
    "Raw",
    "Round",
    "ScriptProvider",
    "ScriptStream",
    "ScriptedTurn",
    "Sleep",
    "Step",
]


@dataclass(frozen=True)
class Sleep:
    """The model pauses `seconds` before the next step."""

    seconds: float


@dataclass(frozen=True)
class Hang:
    """The model stops answering: the stream's next item never comes."""


@dataclass(frozen=True)
class Do:
    """Call `action` between two chunks; await what it returns if that is awaitable."""

    action: Callable[[], object]


@dataclass(frozen=True)
class Raw:
    """Yield `value` as the raw item; `process_chunk` returns it unchanged (a broken adapter)."""

    value: object


Step: TypeAlias = str | Sleep | Hang | Do | Raw | BaseException | object

Round: TypeAlias = Sequence[Step] | Callable[[Sequence[ToolOutcome]], Sequence[Step]]
"""A later segment of a `ScriptedTurn`: its steps, or a function of the tool outcomes."""


@dataclass(eq=False)
class ScriptProvider:
    """A `StreamProvider` that plays `steps` (see the module docstring).

    `headline` is what `describe_error` returns (an exception: it raises it);
    `raise_in_process`, when set, is raised by every `process_chunk` call. What cordstream
    did to it, on the event loop's clock:

    - `calls`: "start", then "process" once per item, then "close" once its stream's
      cleanup ran (whatever ended it), in order;
    - `started_at`; `last_chunk_at`, the start or the latest `process_chunk` call (an
      inactivity timeout is due `inactivity_timeout` after it); `closed_at`, the first moment
      it was told to stop or ran out (its cleanup ran, or `aclose()` was called);
      `aclose_at`, when `aclose()` was first called (B10);
    - `running`: its calls (`__anext__`, `aclose()`) under way; 0 once `stream_to_discord`
      has returned, or provider code outlived the call (B11);
    - `reached`: what of the script the stream got to: "end" (every step played), "hang",
      "raise" (a step's exception, also in `raised`), and what `process_chunk` saw:
      "process_raise", "garbage" (not a chunk, or a `Raw` item), "error_chunk" (one with an
      error), "function_call" (one with calls).
    """

    steps: Sequence[Step]
    name: str = "script"
    headline: str | BaseException | None = None
    raise_in_process: BaseException | None = None
    calls: list[str] = field(default_factory=list)
    started_at: float | None = field(default=None, init=False)
    last_chunk_at: float | None = field(default=None, init=False)
    closed_at: float | None = field(default=None, init=False)
    aclose_at: float | None = field(default=None, init=False)
    running: int = field(default=0, init=False)
    reached: set[str] = field(default_factory=set, init=False)
    raised: BaseException | None = field(default=None, init=False)

    @property
    def started(self) -> bool:
        return self.started_at is not None

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    def start_stream(self, config: StreamConfig, context: StreamContext) -> AsyncIterator[object]:
        self.note_start()
        return ScriptStream(self)

    def note_start(self) -> None:
        """Record a start: for a subclass whose `start_stream` builds a stream of its own."""
        self.started_at = self.last_chunk_at = _now()
        self.calls.append("start")

    def process_chunk(self, raw: object) -> ProcessedChunk:
        self.calls.append("process")
        self.last_chunk_at = _now()
        return self.process(raw)

    def process(self, raw: object) -> ProcessedChunk:
        """`process_chunk`'s work, once the call is noted (for a subclass to extend)."""
        if self.raise_in_process is not None:
            self.reached.add("process_raise")
            raise self.raise_in_process
        if isinstance(raw, Raw):
            self.reached.add("garbage")
            return raw.value  # type: ignore[return-value]  # garbage passes through on purpose
        match raw:
            case ErrorChunk(error=error) if error is not None:
                self.reached.add("error_chunk")
            case FunctionCallChunk() if raw.calls:
                self.reached.add("function_call")
            case _ if not isinstance(raw, ProcessedChunk):
                self.reached.add("garbage")
        return raw  # type: ignore[return-value]  # garbage passes through on purpose

    def describe_error(self, error: ProviderError, locale: str) -> str | None:
        if isinstance(self.headline, BaseException):
            raise self.headline
        return self.headline

    def stopped(self) -> None:
        """Note the first moment the provider was told to stop (or ran out)."""
        if self.closed_at is None:
            self.closed_at = _now()

    async def play(self) -> AsyncGenerator[object, None]:
        """The script, as an async generator (what a model SDK's stream is)."""
        try:
            for step in self.steps:
                match step:
                    case str():
                        yield TextChunk(step)
                    case Sleep(seconds=seconds):
                        await asyncio.sleep(seconds)
                    case Hang():
                        self.reached.add("hang")
                        await asyncio.Event().wait()
                    case Do(action=action):
                        outcome = action()
                        if inspect.isawaitable(outcome):
                            await outcome
                    case BaseException():
                        self.reached.add("raise")
                        self.raised = step
                        raise step
                    case _:
                        yield step
            self.reached.add("end")
        finally:
            self.stopped()
            self.calls.append("close")


class ScriptedTurn(ScriptProvider):
    """A `ScriptProvider` for `run_turn` (a `ToolProvider`): `steps` is the first segment's
    script, `then` the scripts of the segments after each tool round, in order (see the
    module docstring). A `FunctionCall` step is played as `FunctionCallChunk(call)`; parallel
    calls are one step, `FunctionCallChunk([first, second])`.

    `after_tools(outcomes)` notes the outcomes and returns the provider of the next segment, a
    new `ScriptedTurn` that shares this one's records: `outcomes`, what each tool round handed
    back (a list per round), and `segments`, the provider of each segment, this one first (each
    with its own `calls`, `closed`, ...). With no segment left it raises `ValueError`, which
    `run_turn` reports as an `error` turn (`TurnResult.error`), as it does for an adapter.
    """

    outcomes: list[list[ToolOutcome]]
    segments: list[ScriptedTurn]

    def __init__(
        self,
        steps: Sequence[Step],
        *then: Round,
        name: str = "script",
        headline: str | BaseException | None = None,
        raise_in_process: BaseException | None = None,
    ) -> None:
        super().__init__(
            [_played(step) for step in steps],
            name=name,
            headline=headline,
            raise_in_process=raise_in_process,
        )
        self.then: tuple[Round, ...] = then
        self.outcomes = []
        self.segments = [self]

    def after_tools(self, outcomes: Sequence[ToolOutcome]) -> Self:
        handed_back = list(outcomes)
        self.outcomes.append(handed_back)
        if not self.then:
            raise ValueError(
                f"the scripted turn has no segment after tool round {len(self.outcomes)}"
            )
        following, *later = self.then
        steps = following(handed_back) if callable(following) else following
        segment = type(self)(
            steps,
            *later,
            name=self.name,
            headline=self.headline,
            raise_in_process=self.raise_in_process,
        )
        segment.outcomes, segment.segments = self.outcomes, self.segments
        self.segments.append(segment)
        return segment


def _played(step: Step) -> Step:
    return FunctionCallChunk(step) if isinstance(step, FunctionCall) else step


class ScriptStream:
    """The stream `ScriptProvider.start_stream` returns: `play()`, with the calls under way
    counted and `aclose()` noted."""

    __slots__ = ("provider", "steps")

    def __init__(self, provider: ScriptProvider) -> None:
        self.provider = provider
        self.steps = provider.play()

    def __aiter__(self) -> ScriptStream:
        return self

    async def __anext__(self) -> object:
        self.provider.running += 1
        try:
            return await anext(self.steps)
        finally:
            self.provider.running -= 1

    async def aclose(self) -> None:
        provider = self.provider
        provider.running += 1
        provider.stopped()
        if provider.aclose_at is None:
            provider.aclose_at = _now()
        try:
            await self.steps.aclose()
        finally:
            provider.running -= 1


def _now() -> float:
    return asyncio.get_running_loop().time()
