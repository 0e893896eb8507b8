"""The faults a plan injects: a misbehaving provider and the Discord faults of its channel.

`SoakProvider` is the test kit's `ScriptProvider` misbehaving as its plan says: a *tail* (how
its script ends: exhausted, a `DoneChunk`, raising, `process_chunk` raising, hanging,
garbage, an error chunk, a function call), a *cleanup* once cordstream stops it (normal, a
`finally` or an `aclose()` that hangs, an `aclose()` that raises CancelledError) and a
*reaction* to the cancellation cordstream interrupts a pending `__anext__` with (let through,
swallowed, turned into the end of the stream or into an error of its own). It swallows at
most one cancellation, so no provider is abandoned. `FAULTS` are the Discord faults a plan
queues for its channel, by label (`fault_label` names one the emulator answered with).
docs/soak.md ("Rules chosen") says why each is there.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, NoReturn, TypeAlias, cast, get_args

from cordstream import domain
from cordstream.shell import (
    StreamConfig,
    StreamContext,
)
from cordstream.shell.testing import emulator
from cordstream.shell.testing.script import ScriptProvider, ScriptStream
from cordstream.shell.testing.script import Step as ScriptStep

THINK_MARKER: Final = "THINK-SECRET"
DETAILS_MARKER: Final = "DETAILS-SECRET"

Tail: TypeAlias = Literal[
    "end", "done", "raise", "process_raise", "hang", "garbage", "error_chunk", "function_call"
]
TAILS: Final[tuple[Tail, ...]] = get_args(Tail)
# A Discord fault a plan queues for its stream's channel: (label, fault, route, times).
PlannedFault: TypeAlias = tuple[str, emulator.Fault, emulator.FaultRoute, int]
FAULT_TAILS: Final = frozenset({"raise", "process_raise", "hang", "garbage", "error_chunk"})
# How the provider's cleanup behaves once cordstream stops it (B2, B10): as it should; an
# async generator whose `finally` awaits forever when it is cancelled or closed; an `aclose()`
# that hangs; an `aclose()` that raises CancelledError although nobody cancelled anything.
Cleanup: TypeAlias = Literal["normal", "finally_hang", "aclose_hang", "aclose_cancelled"]
CLEANUPS: Final[tuple[Cleanup, ...]] = get_args(Cleanup)
# What the provider does with the cancellation cordstream uses to interrupt a pending
# `__anext__` (§A, B11), the first time it gets one (the next one goes through): lets it
# through; swallows it and keeps waiting; swallows it and yields more text; turns it into
# the end of the stream (StopAsyncIteration); turns it into an exception of its own.
Reaction: TypeAlias = Literal[
    "normal", "swallow_wait", "swallow_yield", "convert_return", "convert_raise"
]
REACTIONS: Final[tuple[Reaction, ...]] = get_args(Reaction)
AFTER_STOP_MARKER: Final = "YIELDED-AFTER-STOP"  # text a provider yields once stopped
HIDDEN_MARKERS: Final = (THINK_MARKER, DETAILS_MARKER, AFTER_STOP_MARKER)


@dataclass(frozen=True)
class Poison:
    """Yielded; `process_chunk` raises (or builds a chunk that fails its own validation)."""

    error: Exception | None  # None: `process_chunk` builds `TextChunk(42)` (a TypeError)


Step: TypeAlias = ScriptStep | Poison


@dataclass(eq=False)
class SoakProvider(ScriptProvider):
    """The test kit's `ScriptProvider` (which notes when it was started, given chunks, told to
    stop and closed with `aclose()`, its calls under way, and what of its script it reached),
    misbehaving as the plan says: `Poison` items, a `cleanup` and a `reaction` to
    cordstream's cancellation (`SoakStream`). It also notes the cancellations its code
    received (`cancels`), the usage it expects in the result (`expected_usage`: the latest
    valid one processed, D2), and labels what it reached for the report ("done", cleanups,
    reactions)."""

    name: str = "soak"
    cleanup: Cleanup = "normal"
    reaction: Reaction = "normal"
    cancels: int = field(default=0, init=False)
    expected_usage: domain.TokenUsage | None = field(default=None, init=False)

    def start_stream(self, config: StreamConfig, context: StreamContext) -> AsyncIterator[object]:
        self.note_start()
        return SoakStream(self)

    def process(self, raw: object) -> domain.ProcessedChunk:
        match raw:
            case Poison(error=error):
                self.reached.add("process_raise")
                if error is None:  # a wrong type: TextChunk raises TypeError
                    return domain.TextChunk(cast(str, 42))
                raise error
            case domain.DoneChunk(usage=usage) if usage is not None:
                self.reached.add("done")
        usage = getattr(raw, "usage", None)
        if isinstance(usage, Mapping):  # D2: a side without a valid count counts 0
            prompt, completion = (
                _count(usage.get(k)) for k in ("prompt_tokens", "completion_tokens")
            )
            if prompt or completion:
                self.expected_usage = domain.TokenUsage(prompt, completion)
        return super().process(raw)


class SoakStream(ScriptStream):
    """The provider's stream with the plan's reaction to cordstream's cancellation of a pending
    `__anext__`, and its cleanup: `finally_hang` hangs where the script's own cleanup runs (in
    the interrupted `__anext__`, or in `aclose()` while it is suspended at a chunk),
    `aclose_hang` and `aclose_cancelled` in `aclose()`."""

    def __init__(self, provider: SoakProvider) -> None:
        super().__init__(provider)
        self.soak = provider
        self.begun = False  # `__anext__` was called
        self.over = False  # the script ended (ran out, raised, or was cancelled)

    async def __anext__(self) -> object:
        provider = self.soak
        provider.running += 1
        self.begun = True
        try:
            return await super().__anext__()
        except asyncio.CancelledError as error:
            self.over = True
            if error is provider.raised:
                raise  # the provider's own CancelledError (the `raise` tail), no cancellation
            provider.cancels += 1
            provider.stopped()
            if provider.cleanup == "finally_hang" and provider.cancels == 1:
                # Defect 2's provider: its cleanup itself hangs, inside the interrupted
                # `__anext__`, until it is cancelled again.
                provider.reached.add("finally_hang")
                await self._hang()
            if provider.cancels > 1 or provider.reaction == "normal":
                raise
            provider.reached.add(provider.reaction)
            match provider.reaction:
                case "swallow_wait":  # keeps waiting, until the next cancellation
                    await self._hang()
                case "swallow_yield":
                    return domain.TextChunk(AFTER_STOP_MARKER + "\n")
                case "convert_return":
                    raise StopAsyncIteration from None
                case _:
                    raise ValueError("the provider turned the cancellation into this") from None
        except BaseException:
            self.over = True
            raise
        finally:
            provider.running -= 1

    async def aclose(self) -> None:
        provider = self.soak
        provider.running += 1
        suspended = self.begun and not self.over  # at a chunk: closing runs its cleanup
        try:
            try:
                await super().aclose()
                if provider.cleanup == "finally_hang" and suspended:
                    provider.reached.add("finally_hang")
                    await self._hang()
            except asyncio.CancelledError:
                provider.cancels += 1
                raise
            match provider.cleanup:
                case "aclose_hang":
                    provider.reached.add("aclose_hang")
                    await self._hang()
                case "aclose_cancelled":  # defect 1: nobody cancelled anything
                    provider.reached.add("aclose_cancelled")
                    raise asyncio.CancelledError
        finally:
            provider.running -= 1

    async def _hang(self) -> NoReturn:
        """Wait until cancelled (counted)."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.soak.cancels += 1
            raise
        raise AssertionError("unreachable")  # pragma: no cover


def _count(value: object) -> int:
    """A valid positive token count (an int, not a bool), else 0 (D2)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


GARBAGE: Final[tuple[Callable[[], object], ...]] = (
    lambda: 42,
    lambda: None,
    lambda: b"bytes",
    lambda: {"not": "a chunk"},
    lambda: "a raw string",
    lambda: ("tuple",),
)
# Chunks whose field was set to a wrong type after validation (a broken adapter): the core
# checks them off the hot path and ends the stream as `error` (B13), what was sent counted.
SMUGGLED: Final[tuple[Callable[[], object], ...]] = (
    lambda: _smuggled(domain.TextChunk("x"), "content", None),
    lambda: _smuggled(domain.ErrorChunk(None), "error", "not an error"),
    lambda: _smuggled(domain.FunctionCallChunk(None), "call", 7),
)
EXCEPTIONS: Final[tuple[Callable[[], BaseException], ...]] = (
    lambda: ValueError("provider broke"),
    lambda: RuntimeError("auth failed for sk-abcdefghijklmnopqrstuvwx"),
    ConnectionResetError,
    TimeoutError,
    lambda: KeyError("choices"),
    StopAsyncIteration,  # raised in an async generator: a RuntimeError (PEP 479)
    asyncio.CancelledError,  # raised by the provider itself, not a cancellation
)
PROVIDER_ERRORS: Final = (
    domain.ProviderError("rate_limit", "slow down", retryable=True),
    domain.ProviderError("model_error", "model not found", code=404),
    domain.ProviderError("content_blocked", "", user_message="blocked", original={"message": "no"}),
    domain.ProviderError("api_error", "Bearer abc.def.ghi rejected", code="401"),
)


def _smuggled(chunk: object, name: str, value: object) -> object:
    """A chunk whose field was set to a wrong type after validation (a broken adapter)."""
    object.__setattr__(chunk, name, value)
    return chunk


def _delay_then_fault(rng: random.Random) -> emulator.Fault:
    thens: list[emulator.ErrorReply | emulator.Drop | emulator.RateLimited] = [
        emulator.MISSING_PERMISSIONS,
        emulator.UNKNOWN_CHANNEL,
        emulator.Drop(),
        emulator.RateLimited(1.0),
    ]
    then = rng.choice(thens)
    return emulator.Delay(rng.choice([0.3, 1.0]), then)


# The Discord faults a plan draws from, by label (`fault_label` names a consumed one).
FAULTS: Final[Mapping[str, Callable[[random.Random], emulator.Fault]]] = {
    "429": lambda rng: emulator.RateLimited(retry_after=rng.choice([0.5, 1.0, 2.5])),
    "429-global": lambda rng: emulator.RateLimited(
        retry_after=rng.choice([1.0, 2.0]), is_global=True
    ),
    "429-cloudflare": lambda rng: emulator.RateLimited(retry_after=1.0, via=False),
    "403-missing-access": lambda rng: emulator.MISSING_ACCESS,
    "403-missing-permissions": lambda rng: emulator.MISSING_PERMISSIONS,
    "404-unknown-channel": lambda rng: emulator.UNKNOWN_CHANNEL,
    "500": lambda rng: emulator.INTERNAL_SERVER_ERROR,
    "502": lambda rng: emulator.BAD_GATEWAY,
    "500-x6": lambda rng: emulator.INTERNAL_SERVER_ERROR,  # six sends in a row (`_fault`)
    "drop": lambda rng: emulator.Drop(),
    "delay": lambda rng: emulator.Delay(rng.choice([0.3, 1.0, 3.0])),
    "delay-then-fault": _delay_then_fault,
}
FAULT_LABELS: Final = tuple(FAULTS)


def _fault(rng: random.Random, live: bool) -> PlannedFault:
    """A Discord fault: on message creates mostly, and for a live stream on its edits too."""
    label = rng.choice(FAULT_LABELS)
    routes: list[emulator.FaultRoute] = ["send", "typing", "any", "edit"]
    route = rng.choices(routes, [45, 15, 15, 25] if live else [70, 15, 15, 0])[0]
    times = rng.choice([1, 1, 1, 2])
    if label == "500-x6":
        route, times = rng.choice(["send", "edit"]) if live else "send", 6
    return label, FAULTS[label](rng), route, times


def fault_label(fault: emulator.Fault) -> str:
    """The soak's name for a fault the emulator answered with."""
    match fault:
        case emulator.RateLimited(via=False):
            return "429-cloudflare"
        case emulator.RateLimited(is_global=True):
            return "429-global"
        case emulator.RateLimited():
            return "429"
        case emulator.ErrorReply(status=403, code=50001):
            return "403-missing-access"
        case emulator.ErrorReply(status=403):
            return "403-missing-permissions"
        case emulator.ErrorReply(status=404):
            return "404-unknown-channel"
        case emulator.ErrorReply(status=status):
            return str(status)
        case emulator.Drop():
            return "drop"
        case emulator.Delay(then=None):
            return "delay"
        case emulator.Delay():
            return "delay-then-fault"
    raise AssertionError(f"unknown fault {fault!r}")  # pragma: no cover
