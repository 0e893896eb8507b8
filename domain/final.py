"""The final edits a shell makes itself, when the caller cancels a live stream (L4, K2).

Theory of operation
-------------------
On every exit path the core makes the final edits itself, as requests like any other, except
one: the caller's cancellation of the awaiting task, after which the core gives no result and
is asked for nothing more. Then a live message may still show the cursor (and the Stop button,
K2): the open one, or a finished one whose final edit was still waiting. `cancel_edits` says,
from the state alone, which of the stream's messages still need a final edit and what each
must show: what the open message shows, or is being edited to show (never less, L3), without
the cursor (`live.final_content`), and a finished message's final content. The shell makes
them, shielded and bounded, and feeds nothing back.

The state is the core's own, with Discord's answers to the requests that were in flight when
the call ended: a message Discord created meanwhile is known here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from cordstream.domain import live as lives
from cordstream.domain.events import Delivered, Rejected
from cordstream.domain.machine import step
from cordstream.domain.state import StreamState

__all__ = ["FinalEdit", "cancel_edits"]


@dataclass(frozen=True, slots=True)
class FinalEdit:
    """Edit the stream's message number `message` to `content`, its last edit (no cursor, no
    Stop button)."""

    message: int
    content: str


def cancel_edits(
    state: StreamState, late: tuple[Delivered | Rejected, ...] = (), *, buttons: bool
) -> tuple[FinalEdit, ...]:
    """L4: the final edits after the caller's cancellation, once Discord's `late` answers
    (those the core was not fed, the call being over) are taken into account; `buttons`: the
    messages carry a Stop button (K2), so an edit goes even where the content is the same."""
    for answer in late:
        state, _ = step(state, answer)  # what it would do next is not done: the call is over
    live = state.live
    if live is None:
        return ()  # messages delivery never edits
    edits: list[FinalEdit] = []
    if live.closing is not None and (buttons or live.closing != live.previous):
        edits.append(FinalEdit(live.closing_index, live.closing))
    flight = live.flight
    if flight is not None and flight.kind == "edit" and flight.seals:
        # The edit that finishes the open message was cut off: it is that message's final
        # content (the tail now belongs to the next message, which does not exist yet).
        edits.append(FinalEdit(live.created - 1, flight.content))
        return tuple(edits)
    content = lives.final_content(live, state.tail, state.core.settings.config)
    if content and (buttons or content != live.current):
        edits.append(FinalEdit(live.created - 1, content))
    return tuple(edits)
