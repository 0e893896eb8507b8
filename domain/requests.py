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


def is_expired(request: StopRequest, now: float, max_age: float = MAX_REQUEST_AGE) -> bool:
    """C8: whether the registry should sweep this entry."""
    return now - request.at > max_age
