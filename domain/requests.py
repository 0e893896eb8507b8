"""Stop and follow-up requests: the pure rules of the stop registry (SPEC C1–C4, C8–C10).

The registry itself (the entries, the streams reading them, waking a stream) lives in the
shell; what an entry is, which request replaces which, which stream it reaches, what reason it
resolves to, when it is too old and who may stop an answer are decided here, so the shell and
the machine agree without sharing code paths.

Per-answer requests (C9). A stream may name the user it answers (`StreamContext.answering`, a
user id). A requester id and an answered user id name the same user when
`requester_id == str(answering)`. The registry keeps at most one entry per *slot*: the
channel's own slot (`None`, the only one C1–C8 know), and one slot per answered user (their id
as a string). Which stream an entry reaches (`reaches`) does not depend on its slot:

- a stop without `answering` (channel-wide) reaches every stream in its channel;
- a stop with `answering=A` reaches the stream answering A;
- a follow-up reaches the stream answering its requester;
- a stream that names nobody (`answering=None`) is the channel's answer, as in C1–C8: every
  request in its channel reaches it.

So a request aimed at Alice's answer, or a follow-up from Alice, never reaches a stream that
answers Bob. The slot decides only which entries replace which (`admit`): C2 and C3 hold per
answer. Where a follow-up goes is the registry's choice (`cordstream.shell.stops`): Alice's
slot while a stream answering Alice runs, else the channel's slot, as in C1–C8.

Rules chosen where the SPEC is silent:
- A channel-wide stop replaces every entry of its channel (for every answer it is the later
  stop, C2); a stop aimed at Alice replaces Alice's entry and a follow-up from Alice in the
  channel's slot. A follow-up from Alice is refused while a stop reaching her answer is pending
  (channel-wide or aimed at her, C3), not for a stop aimed at someone else; it replaces the
  follow-ups from Alice and, in the channel's slot, the follow-up there (C3).
- Several entries may reach one stream at once (a channel-wide stop and one aimed at it). The
  stream is handed them in `precedence` order: stops before follow-ups, the newest first. The
  first decides the outcome; a later stop is absorbed (C5), so each is consumed.
- Who may stop an answer (C10, `may_stop`): the user it answers, and members who may manage
  messages in the channel. An answer that names nobody has no user of its own: only those who
  manage messages may stop it (fail closed). The bot's own `request_stop` is not checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from cordstream.domain.results import StopReason

RequestKind: TypeAlias = Literal["stop", "follow_up"]
# Where the registry keeps an entry (C9): None, the channel's own slot; or one answered user's
# slot, their id as a string (the way requester ids are written).
Slot: TypeAlias = str | None
# Who decided a stream's outcome: its own course (`completed`, `function_call`, `timeout`,
# `error`: *natural*), a follow-up, a user or system stop, or an internal stop (a limit, a lost
# channel, or a stop registered with an internal id, F3, F4).
Origin: TypeAlias = Literal["natural", "follow_up", "stop", "internal"]
# What a stream does with a registry entry handed to it: it decides the outcome (consumed),
# it is absorbed (consumed, changes nothing), or it is left in the registry.
Resolution: TypeAlias = Literal["decide", "absorb", "leave"]

# C4: the stops the stream's own course raises (a limit, F3; a lost channel, F4). A caller may
# register one too, by its id as requester (`StopRequest.stop`); it does not flush (C6).
InternalStop: TypeAlias = Literal[
    "send_message_limit", "flush_limit", "channel_deleted", "missing_access"
]
_INTERNAL_IDS: Final[Mapping[str, InternalStop]] = {
    "send_message_limit": "send_message_limit",
    "flush_limit": "flush_limit",
    "channel_deleted": "channel_deleted",
    "missing_access": "missing_access",
}
INTERNAL_REQUESTERS: Final[frozenset[str]] = frozenset(_INTERNAL_IDS)
# Entries older than this are swept (C8), in seconds.
MAX_REQUEST_AGE: Final = 300.0


@dataclass(frozen=True, slots=True, eq=False)
class StopRequest:
    """One registry entry (C1). Identity matters: a stream removes exactly the entry it resolved.

    `context` is the caller's (for example the user's stop message); it is handed back in
    `StreamResult.stop_context` and never inspected. `at` is the registry's clock reading.
    `answering` (C9): for a stop, the user whose answer it stops, None for every stream in the
    channel. A follow-up leaves it None: it is aimed at its requester's answer (`reaches`).
    `internal` (C4): the internal stop this is, None for a user or system stop; a caller's
    requester id is read once, where the request enters the registry (`stop`).
    """

    kind: RequestKind
    requester_id: str | None
    context: object = field(default=None)
    at: float = 0.0
    answering: int | None = None
    internal: InternalStop | None = None

    def __post_init__(self) -> None:
        if self.internal is None and self.kind == "stop" and self.requester_id:
            # C4 for a stop built directly: one of the four ids is that internal stop.
            object.__setattr__(self, "internal", _INTERNAL_IDS.get(self.requester_id))
        if self.internal is not None and self.kind != "stop":
            raise ValueError(f"a {self.kind} cannot be the internal stop {self.internal!r}")

    @classmethod
    def stop(
        cls,
        requester_id: str | None = None,
        context: object = None,
        *,
        at: float = 0.0,
        answering: int | None = None,
    ) -> StopRequest:
        """A stop as `request_stop` is asked for it (C2, C4): no (or an empty) requester is a
        system stop, one of the four internal ids that internal stop, anyone else a user."""
        requester = requester_id or None
        internal = None if requester is None else _INTERNAL_IDS.get(requester)
        return cls("stop", requester, context, at, answering, internal)


def stop_reason(request: StopRequest) -> StopReason:
    """C4: an internal stop → its reason; no requester → system; anyone else → the user."""
    if request.internal is not None:
        return request.internal
    return "user_request" if request.requester_id else "system_request"


def is_internal(request: StopRequest) -> bool:
    return request.internal is not None


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
                                          dropped (C2, C6); an internal stop sends nothing
                                          more
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


def slot_of(answering: int | None) -> Slot:
    """C9: the slot of a stop aimed at `answering` (None: the channel's slot)."""
    return None if answering is None else str(answering)


def aims_at(request: StopRequest) -> Slot:
    """C9: the answer `request` is aimed at, as a slot: a stop's `answering`, a follow-up's
    requester. None for a channel-wide stop (and a follow-up without requester)."""
    if request.kind == "stop":
        return slot_of(request.answering)
    return request.requester_id or None


def reaches(request: StopRequest, answering: int | None) -> bool:
    """C9: whether `request` ends a stream that answers `answering`.

    A stream that names nobody is reached by every request in its channel (C1–C8); a stream
    answering A by a channel-wide stop, a stop aimed at A and a follow-up from A.
    """
    if answering is None:
        return True
    if request.kind == "stop" and request.answering is None:
        return True
    return aims_at(request) == str(answering)


def admit(
    pending: Mapping[Slot, StopRequest], slot: Slot, new: StopRequest
) -> tuple[bool, frozenset[Slot]]:
    """C2, C3 per answer (C9): whether `new`, offered for `slot`, is accepted, and the slots of
    the pending entries it replaces (a refused request replaces nothing).

    `slot` is None (the channel's) or the answer `new` is aimed at (`aims_at`). In the
    channel's slot alone this is `register`: a stop replaces, a follow-up is refused while a
    stop is pending and otherwise replaces a follow-up.
    """
    target = aims_at(new)
    if slot != target and (new.kind == "stop" or slot is not None):
        raise ValueError(f"a {new.kind} aimed at {target!r} offered for the slot {slot!r}")
    channel = pending.get(None)
    if new.kind == "stop" and slot is None:
        return True, frozenset(pending)  # a channel-wide stop: the later one for everybody
    own = pending.get(target) if target is not None else None
    if new.kind == "follow_up" and any(e is not None and e.kind == "stop" for e in (channel, own)):
        return False, frozenset()  # a stop reaching the requester's answer is pending
    # The slot's entry, the same answer's entry, and a follow-up aimed at the same answer
    # kept in the channel's slot; for a follow-up in the channel's slot, the follow-up there.
    replaced: set[Slot] = {slot, target} & set(pending)
    if channel is not None and channel.kind == "follow_up" and aims_at(channel) == target:
        replaced.add(None)
    return True, frozenset(replaced)


def precedence(requests: Iterable[StopRequest]) -> list[StopRequest]:
    """C2, C9: the order in which a stream is handed the entries reaching it, given in the
    order they were registered: stops first, then follow-ups, the newest first in each (the
    later stop replaces an earlier one, C2)."""
    newest_first = list(requests)[::-1]
    return [r for r in newest_first if r.kind == "stop"] + [
        r for r in newest_first if r.kind != "stop"
    ]


def may_stop(answering: int | None, requester_id: int, *, manage_messages: bool) -> bool:
    """C10: whether the user `requester_id` may stop an answer to `answering`: the user it
    answers, or anyone who may manage messages in the channel. An answer that names nobody
    (None) is stopped only by those (it has no user of its own: fail closed)."""
    return manage_messages or (answering is not None and requester_id == answering)


def is_expired(request: StopRequest, now: float, max_age: float = MAX_REQUEST_AGE) -> bool:
    """C8: whether the registry should sweep this entry."""
    return now - request.at > max_age
