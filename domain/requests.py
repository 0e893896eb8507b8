"""Stop and follow-up requests: the pure rules of the stop registry (SPEC C1–C4, C8).

The registry itself (one entry per channel, waking the stream) lives in the shell; what an
entry is, which request replaces which, what reason it resolves to and when it is too old are
decided here, so the shell and the machine agree without sharing code paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from cordstream.domain.results import StopReason

RequestKind: TypeAlias = Literal["stop", "follow_up"]
# Who decided a stream's outcome: its own course (`completed`, `function_call`, `timeout`,
# `error`: *natural*), a follow-up, a user or system stop, or an internal stop (a limit, a lost
# channel, or a stop registered with an internal id, F3, F4).
Origin: TypeAlias = Literal["natural", "follow_up", "stop", "internal"]
# What a stream does with a registry entry handed to it: it decides the outcome (consumed),
# it is absorbed (consumed, changes nothing), or it is left in the registry.
Resolution: TypeAlias = Literal["decide", "absorb", "leave"]

# Requester ids that mean "the stream stopped itself" (C4): they do not flush (C6).
_INTERNAL_REASONS: Final[dict[str, StopReason]] = {
    "send_message_limit": "send_message_limit",
    "flush_limit": "flush_limit",
    "channel_deleted": "channel_deleted",
    "missing_access": "missing_access",
}
INTERNAL_REQUESTERS: Final[frozenset[str]] = frozenset(_INTERNAL_REASONS)
# Entries older than this are swept (C8), in seconds.
MAX_REQUEST_AGE: Final = 300.0


@dataclass(frozen=True, slots=True, eq=False)
class StopRequest:
    """One registry entry (C1). Identity matters: a stream removes exactly the entry it resolved.

    `context` is the caller's (for example the user's stop message); it is handed back in
    `StreamResult.stop_context` and never inspected. `at` is the registry's clock reading.
    """

    kind: RequestKind
    requester_id: str | None
    context: object = field(default=None)
    at: float = 0.0


def stop_reason(request: StopRequest) -> StopReason:
    """C4: no requester → system; an internal id → that reason; anyone else → the user."""
    requester = request.requester_id
    if not requester:
        return "system_request"
    return _INTERNAL_REASONS.get(requester, "user_request")


def is_internal(request: StopRequest) -> bool:
    return request.kind == "stop" and (request.requester_id or "") in _INTERNAL_REASONS


def register(current: StopRequest | None, new: StopRequest) -> tuple[StopRequest | None, bool]:
    """C2, C3: the entry after `new` is offered, and whether it was accepted.

    A stop always wins and replaces an earlier stop or follow-up. A follow-up is refused
    while a stop is pending and otherwise replaces an earlier follow-up.
    """
    if new.kind == "stop":
        return new, True
    if current is not None and current.kind == "stop":
        return current, False
    return new, True


def resolve(request: StopRequest, origin: Origin | None) -> Resolution:
    """C2, C5–C7: what a stream does with `request`, given who decided its outcome so far
    (None: nobody, it is still streaming). Until the result exists, first match wins:

        arriving    outcome so far        resolution
        follow-up   none or natural       decide: follow_up_interrupt, the undelivered text
                                          is dropped (C6)
        follow-up   anything else         leave: for the stream that will answer it
        stop        none, natural or      decide: stopped_by_user with its reason and context
                    follow-up             (C4, C7); a user or system stop delivers the text
                                          still undelivered, including what a follow-up had
                                          dropped (C2, C6); an internal id sends nothing more
        stop        user or system stop   absorb: the stream already does what it asks (the
                                          first stop's reason and context stay)
        stop        internal stop         leave: the outcome is fixed (nothing more can be
                                          sent, the status cannot change), so the entry stays
                                          for the bot to see (`has_stop_request`)

    So a stop is never silently lost: it decides the result, or the stream already stops for a
    stop, or it stays in the registry. After the result an entry stays for the next stream.
    """
    if origin is None or origin == "natural":
        return "decide"
    if request.kind == "follow_up":
        return "leave"
    if origin == "follow_up":
        return "decide"
    return "absorb" if origin == "stop" else "leave"


def is_expired(request: StopRequest, now: float, max_age: float = MAX_REQUEST_AGE) -> bool:
    """C8: whether the registry should sweep this entry."""
    return now - request.at > max_age
