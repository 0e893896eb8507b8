"""SPEC C1–C4, C8: the pure rules of the stop registry (`cordstream.domain.requests`), by example.

How a stream resolves an entry (C4–C7 inside the machine) is pinned in `test_machine.py`.
"""

from __future__ import annotations

import pytest

from cordstream.domain import StopReason, StopRequest, register, stop_reason
from cordstream.domain.requests import INTERNAL_REQUESTERS, MAX_REQUEST_AGE, is_expired, is_internal

_INTERNAL_IDS = ("send_message_limit", "flush_limit", "channel_deleted", "missing_access")


def _stop(requester: str | None = "user-1", *, at: float = 0.0) -> StopRequest:
    return StopRequest.stop(requester, at=at)


def _follow_up(requester: str = "user-1", *, at: float = 0.0) -> StopRequest:
    return StopRequest("follow_up", requester, at=at)


# --- C1: one entry, compared by identity ------------------------------------------------------


def test_C1_entries_are_told_apart_by_identity_not_by_value() -> None:
    first = _stop("user-1")
    twin = _stop("user-1")

    assert first != twin
    assert register(None, first)[0] is first


def test_C1_entry_keeps_the_callers_context_and_timestamp() -> None:
    context = object()

    entry = StopRequest("stop", "user-1", context=context, at=12.5)

    assert entry.context is context
    assert entry.at == 12.5


# --- C2: a stop always wins -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "stop"),
    [
        (None, _stop()),
        (_follow_up(), _stop()),
        (_stop("user-1"), _stop("user-2")),
        (_follow_up(), _stop(None)),
    ],
    ids=[
        "on a channel without entry",
        "over a pending follow-up",
        "over an earlier stop",
        "a system stop without requester too",
    ],
)
def test_C2_a_stop_is_accepted_and_becomes_the_entry(
    current: StopRequest | None, stop: StopRequest
) -> None:
    entry, accepted = register(current, stop)

    assert accepted is True
    assert entry is stop


# --- C3: a follow-up yields to a stop ---------------------------------------------------------


@pytest.mark.parametrize("stop", [_stop(), _stop("flush_limit")], ids=["user stop", "internal"])
def test_C3_a_follow_up_is_refused_while_a_stop_is_pending(stop: StopRequest) -> None:
    entry, accepted = register(stop, _follow_up("user-2"))

    assert accepted is False
    assert entry is stop


@pytest.mark.parametrize(
    "current", [None, _follow_up("user-1")], ids=["no entry", "over an earlier follow-up"]
)
def test_C3_a_follow_up_is_accepted_and_becomes_the_entry(current: StopRequest | None) -> None:
    follow_up = _follow_up("user-2")

    entry, accepted = register(current, follow_up)

    assert accepted is True
    assert entry is follow_up


# --- C4: reasons -------------------------------------------------------------------------------


@pytest.mark.parametrize("requester", [None, ""])
def test_C4_missing_or_empty_requester_is_a_system_request(requester: str | None) -> None:
    assert stop_reason(_stop(requester)) == "system_request"


@pytest.mark.parametrize(
    ("requester", "reason"),
    [
        ("send_message_limit", "send_message_limit"),
        ("flush_limit", "flush_limit"),
        ("channel_deleted", "channel_deleted"),
        ("missing_access", "missing_access"),
    ],
)
def test_C4_internal_ids_resolve_to_the_same_named_reason(
    requester: str, reason: StopReason
) -> None:
    assert stop_reason(_stop(requester)) == reason


@pytest.mark.parametrize("requester", ["user-1", "123456789012345678", "system", "unknown"])
def test_C4_any_other_requester_is_a_user_request(requester: str) -> None:
    assert stop_reason(_stop(requester)) == "user_request"


def test_C4_the_internal_ids_are_exactly_the_four_of_the_spec() -> None:
    assert frozenset(_INTERNAL_IDS) == INTERNAL_REQUESTERS


@pytest.mark.parametrize("requester", _INTERNAL_IDS)
def test_C4_a_stop_with_an_internal_id_is_internal(requester: str) -> None:
    assert is_internal(_stop(requester)) is True


@pytest.mark.parametrize(
    "request_",
    [
        _stop("user-1"),
        _stop(None),
        _stop(""),
        _follow_up("flush_limit"),
    ],
    ids=["user stop", "system stop", "empty requester", "follow-up with an internal id"],
)
def test_C4_only_stops_with_an_internal_id_are_internal(request_: StopRequest) -> None:
    assert is_internal(request_) is False


@pytest.mark.parametrize("requester", _INTERNAL_IDS)
def test_C4_internal_stop_is_typed(requester: str) -> None:
    # The requester id is read once, as the request enters (`StopRequest.stop`): the entry
    # says which internal stop it is in a field of its own.
    request_ = StopRequest.stop(requester, "ops")
    assert (request_.internal, request_.requester_id, request_.context) == (
        requester,
        requester,
        "ops",
    )
    assert StopRequest.stop("user-1").internal is None
    assert StopRequest.stop(None).internal is None


def test_C4_the_reason_comes_from_the_typed_field_read_once_at_construction() -> None:
    # An entry built directly reads its id as `StopRequest.stop` does (C4 holds however a stop
    # is made); from then on only the field counts.
    direct = StopRequest("stop", "flush_limit")
    assert (direct.internal, is_internal(direct), stop_reason(direct)) == (
        "flush_limit",
        True,
        "flush_limit",
    )
    marked = StopRequest("stop", None, internal="missing_access")
    assert (is_internal(marked), stop_reason(marked)) == (True, "missing_access")
    user = StopRequest("stop", "user-1")
    assert (user.internal, stop_reason(user)) == (None, "user_request")


def test_C4_a_follow_up_cannot_be_an_internal_stop() -> None:
    with pytest.raises(ValueError, match="follow_up"):
        StopRequest("follow_up", "user-1", internal="flush_limit")


def test_C2_C4_an_empty_requester_enters_as_a_system_stop() -> None:
    request_ = StopRequest.stop("", answering=7, at=3.0)
    assert (request_.requester_id, request_.answering, request_.at) == (None, 7, 3.0)
    assert stop_reason(request_) == "system_request"


# --- C8: sweeping ------------------------------------------------------------------------------


def test_C8_the_default_maximum_age_is_five_minutes() -> None:
    assert MAX_REQUEST_AGE == 300.0


def test_C8_entry_older_than_five_minutes_is_expired() -> None:
    entry = _stop(at=1000.0)

    assert is_expired(entry, now=1000.0 + 300.5) is True


def test_C8_entry_exactly_five_minutes_old_is_kept() -> None:
    entry = _stop(at=1000.0)

    assert is_expired(entry, now=1300.0) is False


def test_C8_fresh_entry_is_kept() -> None:
    entry = _follow_up(at=1000.0)

    assert is_expired(entry, now=1001.0) is False


def test_C8_maximum_age_can_be_chosen() -> None:
    entry = _stop(at=0.0)

    assert is_expired(entry, now=11.0, max_age=10.0) is True
    assert is_expired(entry, now=9.0, max_age=10.0) is False
