"""Inputs of the machine: everything that happens to a stream, as data (SPEC B, C, F).

Every event carries `now`, the shell's clock reading in seconds (any monotonic origin). The
machine never reads a clock: deadlines are compared with `now`, so a test can replay any
timing exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from cordstream.domain.requests import StopRequest


@dataclass(frozen=True, slots=True)
class Started:
    """The stream begins. `pending` is the registry's entry for the channel, if any (B4)."""

    now: float
    pending: StopRequest | None = None


@dataclass(frozen=True, slots=True)
class ChunkArrived:
    """`process_chunk` returned `chunk`.

    Typed `object` on purpose: an adapter may return anything, and the machine turns a
    non-chunk into an `error` result (B13). For an `ErrorChunk`, `headline` is what the
    provider's `describe_error` said (G1), or None.
    """

    now: float
    chunk: object
    headline: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderEnded:
    """The provider's iterator is exhausted (B7)."""

    now: float


@dataclass(frozen=True, slots=True)
class ProviderCrashed:
    """The provider's iterator or `process_chunk` raised (B13)."""

    now: float
    error: BaseException = field(hash=False)


@dataclass(frozen=True, slots=True)
class StopRequested:
    """A stop or follow-up entry appeared in the registry for this channel (B3, C)."""

    now: float
    request: StopRequest


@dataclass(frozen=True, slots=True)
class TimerFired:
    """The inactivity timer armed by `ArmTimer(at=armed_for)` went off (B2)."""

    now: float
    armed_for: float


@dataclass(frozen=True, slots=True)
class PauseOver:
    """The humanizer pause `token` is over (E9)."""

    now: float
    token: int


@dataclass(frozen=True, slots=True)
class TurnGranted:
    """Live delivery (L2): the channel's budget allows the request `AwaitTurn(token)` waited
    for."""

    now: float
    token: int


@dataclass(frozen=True, slots=True)
class DiscordFailure:
    """Why Discord refused a send: its JSON error `code`, the HTTP `status`, the exception."""

    code: int | None = None
    status: int | None = None
    error: BaseException | None = field(default=None, hash=False, compare=False)


@dataclass(frozen=True, slots=True)
class Delivered:
    """Discord accepted send `seq` (a message or an embed); `url` is the message's jump URL."""

    now: float
    seq: int
    url: str | None = None


@dataclass(frozen=True, slots=True)
class Rejected:
    """Discord refused send `seq`, after discord.py's own retries (F4)."""

    now: float
    seq: int
    failure: DiscordFailure


Event: TypeAlias = (
    Started
    | ChunkArrived
    | ProviderEnded
    | ProviderCrashed
    | StopRequested
    | TimerFired
    | PauseOver
    | TurnGranted
    | Delivered
    | Rejected
)
