"""The stream machine's state: one value, one sub-record per concern (see `machine`).

`StreamState` holds the two fields a plain text chunk changes on the hot path (E10), the
inactivity `deadline` and the partial line `tail`; the delivery state, which changes with
nearly every other event (one value: messages delivery's or live delivery's,
`delivery.DeliveryState`); and `Core`, which holds the rest by name: the phase, the settings,
the capture, the record, the decided ending and the anomalies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, TypeAlias

from cordstream.domain import capture
from cordstream.domain import delivery as deliveries
from cordstream.domain import live as lives
from cordstream.domain import record as records
from cordstream.domain.catalogue import DEFAULT_CATALOGUE, Catalogue
from cordstream.domain.config import StreamConfig
from cordstream.domain.outcome import Ending, Settings
from cordstream.domain.redact import NO_SECRETS, Secrets

Phase: TypeAlias = Literal["ready", "streaming", "ending", "finished"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Core:
    """Everything but the tail, the deadline and the delivery, one sub-record per concern."""

    phase: Phase
    settings: Settings
    started_at: float = 0.0
    armed_at: float = math.nan  # what the shell's timer is armed for; nan when not armed
    capture: capture.Capture = capture.IDLE
    record: records.Record = records.EMPTY
    ending: Ending | None = None
    anomalies: tuple[str, ...] = ()  # events a correct shell never feeds (see `_Run.handle`)


@dataclass(frozen=True, slots=True)
class StreamState:
    """The machine's state. `deadline`: when the stream times out; `tail`: the partial line
    (messages delivery), or the text of the open message and after it (live delivery);
    `delivery`: messages delivery's state (`delivery.Messages`) or live delivery's."""

    deadline: float
    tail: str
    delivery: deliveries.DeliveryState
    core: Core

    @property
    def live(self) -> lives.Live | None:
        """Live delivery's state (SPEC L), None under messages delivery: for a shell that
        makes the final edits itself (L4)."""
        delivery = self.delivery
        return delivery if isinstance(delivery, lives.Live) else None

    @property
    def phase(self) -> Phase:
        return self.core.phase

    @property
    def wants_chunks(self) -> bool:
        """Whether the shell should keep reading the provider."""
        return self.core.phase == "streaming"


def initial_state(
    config: StreamConfig,
    *,
    locale: str = "en",
    suppress_user_errors: bool = False,
    catalogue: Catalogue = DEFAULT_CATALOGUE,
    secrets: Secrets = NO_SECRETS,
) -> StreamState:
    """A machine in phase `ready`, waiting for `Started`; `secrets` are removed from every
    embed it composes (G4)."""
    settings = Settings(
        config=config,
        locale=locale,
        suppress_user_errors=suppress_user_errors,
        catalogue=catalogue,
        secrets=secrets,
    )
    return StreamState(
        math.inf, "", deliveries.initial(config), Core(phase="ready", settings=settings)
    )
