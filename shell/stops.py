"""The stop registry: `/stop` and follow-up requests per channel (SPEC C1–C8).

One entry per channel. A stop always wins over a follow-up (C2, C3); which request replaces
which, and what reason it resolves to, is decided in `cordstream.domain.requests`. A stream
listening on a channel is woken at once when an entry appears (B3); it consumes the entry it
resolves (C5), comparing identity, so an entry registered after its result stays for the next
stream. What a stream does with an entry that arrives while its outcome is already decided (a
stop after a follow-up wins; a stop during an internal stop stays here for the bot to see) is
the core's decision: see `cordstream.domain.requests.resolve`.
Entries older than five minutes are swept by the registry itself (C8).

The registry is in-memory and belongs to one event loop: call it from that loop's thread
(a discord.py command handler is). `DEFAULT_STOPS` is shared by a `/stop` command and every
`StreamOrchestrator()` created without a registry, so they meet without wiring.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cordstream.domain.requests import MAX_REQUEST_AGE, StopRequest, is_expired, register

Listener = Callable[[], None]


class StopRegistry:
    """Pending stop and follow-up requests, one per channel."""

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, max_age: float = MAX_REQUEST_AGE
    ) -> None:
        self._clock = clock
        self._max_age = max_age
        self._entries: dict[int, StopRequest] = {}
        self._listeners: dict[int, list[Listener]] = {}

    def __len__(self) -> int:
        self._sweep()
        return len(self._entries)

    def request_stop(
        self, channel_id: int, requester_id: str | None = None, context: object = None
    ) -> bool:
        """Ask the channel's stream to stop (C2). No requester means a system stop. True."""
        return self._offer(channel_id, StopRequest("stop", requester_id or None, context))

    def request_follow_up(self, channel_id: int, requester_id: str) -> bool:
        """A new message arrived: end the stream so the turn restarts (C3).

        False, and nothing changes, while a stop is pending.
        """
        return self._offer(channel_id, StopRequest("follow_up", requester_id))

    def has_stop_request(self, channel_id: int) -> bool:
        """Whether a stop or follow-up is pending for the channel."""
        return self.peek(channel_id) is not None

    def peek(self, channel_id: int) -> StopRequest | None:
        """The channel's pending entry, if it is not too old."""
        entry = self._entries.get(channel_id)
        if entry is not None and is_expired(entry, self._clock(), self._max_age):
            del self._entries[channel_id]
            return None
        return entry

    def consume(self, channel_id: int, request: StopRequest) -> None:
        """Remove `request` if it is still the channel's entry (C5)."""
        if self._entries.get(channel_id) is request:
            del self._entries[channel_id]

    def discard(self, channel_id: int) -> StopRequest | None:
        """Drop the channel's pending entry and return it (None if there was none).

        For a bot starting a fresh turn on a new message: a stop or follow-up that arrived
        after the previous stream ended must not end the new one before it starts (B4).
        """
        return self._entries.pop(channel_id, None)

    def listen(self, channel_id: int, listener: Listener) -> Callable[[], None]:
        """Call `listener` whenever an entry is registered for the channel; returns unlisten."""
        listeners = self._listeners.setdefault(channel_id, [])
        listeners.append(listener)

        def unlisten() -> None:
            listeners.remove(listener)
            if not listeners and self._listeners.get(channel_id) is listeners:
                del self._listeners[channel_id]

        return unlisten

    def listening(self) -> int:
        """How many streams are listening (0 when no stream runs: nothing left behind)."""
        return sum(len(group) for group in self._listeners.values())

    def _offer(self, channel_id: int, request: StopRequest) -> bool:
        self._sweep()
        stamped = StopRequest(request.kind, request.requester_id, request.context, self._clock())
        entry, accepted = register(self._entries.get(channel_id), stamped)
        if not accepted:
            return False
        assert entry is not None
        self._entries[channel_id] = entry
        for listener in tuple(self._listeners.get(channel_id, ())):
            listener()
        return True

    def _sweep(self) -> None:
        now = self._clock()
        for channel_id in [
            c for c, e in self._entries.items() if is_expired(e, now, self._max_age)
        ]:
            del self._entries[channel_id]


DEFAULT_STOPS = StopRegistry()
