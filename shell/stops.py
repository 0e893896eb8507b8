"""The stop registry: `/stop` and follow-up requests per channel and per answer (SPEC C1–C10).

What a request is, which one replaces which, which stream it reaches and what reason it
resolves to are decided in `cordstream.domain.requests`; this module keeps the entries, knows
the streams reading them and wakes those streams. A stream listening on a channel is woken at
once when an entry appears (B3); it consumes the entry it resolves (C5), comparing identity, so
an entry registered after its result stays for the next stream. What a stream does with an
entry that arrives while its outcome is already decided (a stop after a follow-up wins; a stop
during an internal stop stays here for the bot to see) is the core's decision: see
`cordstream.domain.requests.resolve`. Entries older than five minutes are swept by the
registry itself (C8).

Per-answer requests (C9). Each running stream holds a `StopReader` for its channel, naming the
user it answers (`StreamContext.answering`, or None). An entry is kept in a slot (the
channel's, or one answered user's) and is fixed, when registered, to the streams then running
that it reaches; each of them is handed it until it consumes it or ends, and an entry none of
them consumed waits for the next stream it reaches (B4). The rules in full are C9's, in
`docs/contract.md`.

The registry is in-memory and belongs to one event loop: call it from that loop's thread
(a discord.py command handler is). `DEFAULT_STOPS` is shared by a `/stop` command and every
`StreamOrchestrator()` created without a registry, so they meet without wiring.

Who may stop an answer (C10) is the bot's question, answered by `member_may_stop` and
`interaction_may_stop` from discord.py's permissions (`cordstream.domain.requests.may_stop`);
the registry takes every request it is given (the bot's own code is trusted).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import discord

from cordstream.domain.requests import (
    MAX_REQUEST_AGE,
    Slot,
    StopRequest,
    admit,
    is_expired,
    may_stop,
    precedence,
    reaches,
    slot_of,
)

Listener = Callable[[], None]


@dataclass(eq=False)
class _Entry:
    request: StopRequest
    seq: int  # registration order, for `precedence`
    owed: set[StopReader] = field(default_factory=set)  # the streams still to resolve it
    taken: bool = False  # a stream consumed it


class StopReader:
    """One stream's view of its channel's entries (C9): the entries that reach the user it
    answers (`answering`; None: every entry of the channel), from when it opens until it
    closes. Opened by `StopRegistry.reader`; the orchestrator holds one per stream."""

    def __init__(self, registry: StopRegistry, channel_id: int, answering: int | None) -> None:
        self._registry = registry
        self.channel_id = channel_id
        self.answering = answering
        self.closed = False

    def start(self) -> list[StopRequest]:
        """The stream starts (B4): it takes the waiting entries that reach it (registered
        when no stream they reach was running, or left by those that were); `pending`."""
        self._registry._claim(self)
        return self.pending()

    def pending(self) -> list[StopRequest]:
        """The entries this stream is still to resolve, in `precedence` order."""
        return self._registry._pending(self)

    def consume(self, request: StopRequest) -> None:
        """The stream resolved `request` (C5): it is removed once no other stream it was
        registered for is still to resolve it."""
        self._registry._consume(self, request)

    def close(self) -> None:
        """The stream is over. An entry it was still to resolve is removed if another stream
        consumed it, else it waits for the next stream (C5)."""
        if not self.closed:
            self.closed = True
            self._registry._close(self)


class StopRegistry:
    """Pending stop and follow-up requests: per channel, one per answer (C1, C9)."""

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, max_age: float = MAX_REQUEST_AGE
    ) -> None:
        self._clock = clock
        self._max_age = max_age
        self._entries: dict[int, dict[Slot, _Entry]] = {}
        self._listeners: dict[int, list[Listener]] = {}
        self._readers: dict[int, list[StopReader]] = {}
        self._seq = itertools.count()

    def now(self) -> float:
        """The registry's clock: `StopRequest.at` is read on it."""
        return self._clock()

    def __len__(self) -> int:
        self._sweep()
        return sum(len(slots) for slots in self._entries.values())

    def request_stop(
        self,
        channel_id: int,
        requester_id: str | None = None,
        context: object = None,
        *,
        answering: int | None = None,
    ) -> bool:
        """Ask the channel's streams to stop (C2): with `answering`, only the stream answering
        that user (C9). No requester means a system stop; one of C4's internal ids that
        internal stop, read here once (`StopRequest.stop`). True."""
        request = StopRequest.stop(requester_id, context, answering=answering)
        return self._offer(channel_id, slot_of(answering), request)

    def request_follow_up(self, channel_id: int, requester_id: str) -> bool:
        """A new message arrived: end the stream so the turn restarts (C3). It ends the
        requester's own answer and streams that name nobody, no other (C9).

        False, and nothing changes, while a stop reaching the requester's answer is pending.
        """
        readers = self._readers.get(channel_id, ())
        answered = {str(r.answering) for r in readers if r.answering is not None}
        slot = requester_id if requester_id in answered else None
        return self._offer(channel_id, slot, StopRequest("follow_up", requester_id))

    def has_stop_request(self, channel_id: int, *, answering: int | None = None) -> bool:
        """Whether a stop or follow-up is pending for the channel; with `answering`, one that
        would reach the stream answering that user (C9)."""
        return any(reaches(e.request, answering) for e in self._channel(channel_id).values())

    def peek(self, channel_id: int, *, answering: int | None = None) -> StopRequest | None:
        """The entry in a slot, if it is not too old: the channel's own (C1), or with
        `answering` that user's (C9)."""
        entry = self._channel(channel_id).get(slot_of(answering))
        return None if entry is None else entry.request

    def consume(self, channel_id: int, request: StopRequest) -> None:
        """Remove `request` if it is still one of the channel's entries (C5)."""
        slots = self._entries.get(channel_id, {})
        for slot, entry in list(slots.items()):
            if entry.request is request:
                self._remove(channel_id, slot)

    def discard(self, channel_id: int, *, answering: int | None = None) -> tuple[StopRequest, ...]:
        """Drop pending entries and return them (oldest first).

        For a bot starting a fresh turn on a new message: a stop or follow-up that arrived
        after the previous stream ended must not end the new one before it starts (B4).
        Without `answering`, every entry of the channel (C1–C8). With it, the entries the
        answer to that user would take when it starts (C9): those that reach it and that no
        running stream is still to resolve; other users' requests stay.
        """
        slots = self._channel(channel_id)
        dropped = [
            (slot, entry)
            for slot, entry in slots.items()
            if answering is None or (not entry.owed and reaches(entry.request, answering))
        ]
        for slot, _ in dropped:
            self._remove(channel_id, slot)
        return tuple(entry.request for _, entry in sorted(dropped, key=lambda d: d[1].seq))

    def reader(self, channel_id: int, answering: int | None = None) -> StopReader:
        """Open a stream's reader (C9); the stream closes it when it is over."""
        reader = StopReader(self, channel_id, answering)
        self._readers.setdefault(channel_id, []).append(reader)
        return reader

    def is_answering(self, channel_id: int, user_id: int) -> bool:
        """Whether a stream answering `user_id` runs in the channel (C9)."""
        return self.streaming(channel_id, user_id)

    def streaming(self, channel_id: int, answering: int | None) -> bool:
        """Whether the answer to `answering` (None: the channel's answer) streams in the
        channel (on a shared registry: in any process)."""
        return any(r.answering == answering for r in self._readers.get(channel_id, ()))

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
        """How many listeners and readers are open (0 when no stream runs: nothing left
        behind)."""
        return sum(len(group) for group in self._listeners.values()) + sum(
            len(group) for group in self._readers.values()
        )

    # -- inside ------------------------------------------------------------------------------

    def _channel(self, channel_id: int) -> dict[Slot, _Entry]:
        """The channel's entries, swept (C8)."""
        self._sweep()
        return self._entries.get(channel_id, {})

    def _offer(self, channel_id: int, slot: Slot, request: StopRequest) -> bool:
        slots = self._channel(channel_id)
        stamped = replace(request, at=self._clock())
        accepted, replaced = admit({s: e.request for s, e in slots.items()}, slot, stamped)
        if not accepted:
            return False
        for old in replaced:
            self._remove(channel_id, old)
        owed = {r for r in self._readers.get(channel_id, ()) if reaches(stamped, r.answering)}
        self._entries.setdefault(channel_id, {})[slot] = _Entry(stamped, next(self._seq), owed)
        for listener in tuple(self._listeners.get(channel_id, ())):
            listener()
        return True

    def _remove(self, channel_id: int, slot: Slot) -> None:
        slots = self._entries.get(channel_id)
        if slots is not None:
            slots.pop(slot, None)
            if not slots:
                del self._entries[channel_id]

    def _claim(self, reader: StopReader) -> None:
        for entry in self._channel(reader.channel_id).values():
            if not entry.owed and reaches(entry.request, reader.answering):
                entry.owed.add(reader)

    def _pending(self, reader: StopReader) -> list[StopRequest]:
        mine = [e for e in self._channel(reader.channel_id).values() if reader in e.owed]
        return precedence(e.request for e in sorted(mine, key=lambda e: e.seq))

    def _consume(self, reader: StopReader, request: StopRequest) -> None:
        self._settle(reader, request, consumed=True)

    def _close(self, reader: StopReader) -> None:
        readers = self._readers.get(reader.channel_id, [])
        if reader in readers:
            readers.remove(reader)
        if not readers:
            self._readers.pop(reader.channel_id, None)
        for entry in list(self._entries.get(reader.channel_id, {}).values()):
            if reader in entry.owed:
                self._settle(reader, entry.request, consumed=False)

    def _settle(self, reader: StopReader, request: StopRequest, *, consumed: bool) -> None:
        slots = self._entries.get(reader.channel_id, {})
        for slot, entry in list(slots.items()):
            if entry.request is request:
                entry.owed.discard(reader)
                entry.taken = entry.taken or consumed
                if entry.taken and not entry.owed:
                    self._remove(reader.channel_id, slot)

    def _sweep(self) -> None:
        now = self._clock()
        for channel_id, slots in list(self._entries.items()):
            for slot, entry in list(slots.items()):
                if is_expired(entry.request, now, self._max_age):
                    self._remove(channel_id, slot)


DEFAULT_STOPS = StopRegistry()


def member_may_stop(
    user: discord.Member | discord.User,
    channel: discord.abc.Messageable | discord.abc.GuildChannel,
    *,
    answering: int | None,
) -> bool:
    """C10: whether `user` may stop an answer to `answering` in `channel`: the user it answers,
    or a member who may manage messages there (`channel.permissions_for(member)`, the
    channel's overwrites included). A `discord.User` (a DM, or a member discord.py has not
    cached) manages nothing; nor does anyone in a channel whose permissions discord.py cannot
    compute (a `PartialMessageable`)."""
    manage = False
    if isinstance(user, discord.Member) and isinstance(
        channel, discord.abc.GuildChannel | discord.Thread
    ):
        manage = channel.permissions_for(user).manage_messages
    return may_stop(answering, user.id, manage_messages=manage)


def interaction_may_stop(interaction: discord.Interaction, *, answering: int | None) -> bool:
    """C10: whether the user of `interaction` (a `/stop` command, a Stop button's click) may
    stop an answer to `answering`: the user it answers, or one whose resolved permissions in
    the interaction's channel (`interaction.permissions`) include managing messages."""
    manage = interaction.permissions.manage_messages
    return may_stop(answering, interaction.user.id, manage_messages=manage)


class StopRequests:
    """What a bot asks of the stop registry (`stops`) through a `StreamOrchestrator`: stops,
    follow-ups and what is pending, by channel and, with `answering`, by answer (C1-C10).

    With a `RedisStopRegistry` (SPEC N1) the registry's request methods are coroutines, and
    these hand them on: await what `request_stop`, `request_follow_up`,
    `interrupt_own_answer` (when it did not return False at once) and `discard_requests`
    return, or call the registry's own methods."""

    stops: StopRegistry

    def request_stop(
        self,
        channel_id: int,
        requester_id: str | None = None,
        context: object = None,
        *,
        answering: int | None = None,
    ) -> bool:
        """Stop the channel's streams (C2); `context` comes back as `result.stop_context`.

        With `answering` (a user id), only the stream answering that user stops (C9); the
        channel's other streams go on. Without it the stop is channel-wide: every stream
        running in the channel stops, each with this stop's reason and context, and the stop
        is gone once they all resolved it; when none runs, it stops the next one (B4). Not
        checked against C10: the bot's own code is trusted (see `member_may_stop`).
        """
        return self.stops.request_stop(channel_id, requester_id, context, answering=answering)

    def request_follow_up(self, channel_id: int, requester_id: str) -> bool:
        """A new user message: end the stream as `follow_up_interrupt` (C3).

        It ends the requester's own answer (a stream with `answering` such that
        `requester_id == str(answering)`) and streams that name nobody; streams answering
        other users go on (C9). False while a stop reaching the requester's answer is pending.
        """
        return self.stops.request_follow_up(channel_id, requester_id)

    def interrupt_own_answer(self, channel_id: int, user_id: int) -> bool:
        """C9: a new message from `user_id` ends that user's own answer streaming in the
        channel (`follow_up_interrupt`), and no other. False, and nothing is registered, when
        no stream answers that user there (nothing to interrupt: answer the message as a new
        turn) or a stop for that answer is pending."""
        if not self.stops.is_answering(channel_id, user_id):
            return False
        return self.stops.request_follow_up(channel_id, str(user_id))

    def is_answering(self, channel_id: int, user_id: int) -> bool:
        """Whether a stream answering `user_id` (`StreamContext.answering`) runs in the
        channel (C9). Between two model requests of a tool loop no stream runs."""
        return self.stops.is_answering(channel_id, user_id)

    def has_stop_request(self, channel_id: int, *, answering: int | None = None) -> bool:
        """Whether a stop or follow-up is pending in the channel; with `answering`, one that
        would reach the answer to that user (C9)."""
        return self.stops.has_stop_request(channel_id, answering=answering)

    def discard_requests(self, channel_id: int, *, answering: int | None = None) -> bool:
        """Forget pending stops and follow-ups; True if there was one.

        Call it when a new turn starts for a new user message, so a request that arrived
        after the previous stream had ended does not end the new stream at once (B4). Without
        `answering`, every request of the channel; with it, only those the new answer to that
        user would take, so other users' pending requests stay (C9).
        """
        discarded: object = self.stops.discard(channel_id, answering=answering)
        if inspect.isawaitable(discarded):  # a shared registry's (N1): awaited by the caller
            return _truth(discarded)  # type: ignore[return-value]
        return bool(discarded)


async def _truth(value: Awaitable[object]) -> bool:
    return bool(await value)


async def answer_of(value: object) -> bool:
    """A registry's answer, from either registry: `await answer_of(stops.request_stop(...))`
    (a `RedisStopRegistry`'s is a coroutine, N1)."""
    return bool(await value) if inspect.isawaitable(value) else bool(value)


_background: set[asyncio.Task[bool]] = set()


def registered(value: object) -> bool:
    """A registry's answer where nothing may wait (a Stop button's click, K2): a shared
    registry's request goes on in the background (its refusal is logged there), and counts
    as made."""
    if not inspect.isawaitable(value):
        return bool(value)
    task = asyncio.get_running_loop().create_task(answer_of(value))
    _background.add(task)
    task.add_done_callback(_background.discard)
    return True
