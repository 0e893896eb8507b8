"""`RedisStopRegistry`: one stop registry for every process of a bot, through Redis (SPEC N1,
N3). Needs the `redis` extra (`redis.asyncio`).

    async with RedisStopRegistry("redis://127.0.0.1:6379/0") as stops:
        orchestrator = StreamOrchestrator(stops)
        ...
        await stops.request_stop(channel_id, "42")  # from any process

Theory of operation
-------------------
Every process keeps a replica of the registry: this class *is* a `StopRegistry`, and its rules
(C1-C10: which request replaces which, which streams an entry is owed to, when it is gone) are
that class's, unchanged. What is shared is the order of the changes. Each change (a request, a
stream opening its reader, consuming an entry, closing its reader, a discard) is appended to one
Redis stream, `{namespace}:stops` (XADD), and every process reads that stream (XREAD) and
applies the changes to its replica in the stream's order. The same changes in the same order
under the same deterministic rules make the same registry in every process; an entry's time is
its change's stream id (Redis's clock), so every replica sweeps it (C8) at the same moment.

So a request made in one process reaches a stream in another as soon as that process reads the
change (B3: one XREAD away), and a request's outcome (accepted, or refused while a stop is
pending) is known once its own process has applied it: the request methods are coroutines
that append, then wait for that. A stream's reader opens the same way (`start` is a
coroutine), so when two processes start a stream at once, the one whose opening came first
takes a waiting entry and the other does not (B4, C5: consumed once). Consuming and closing
only ever remove things: they apply to the local replica at once and are appended for the
others.

Processes die. Each one keeps a key `{namespace}:alive:{process}` alive (a heartbeat with a
TTL); the readers of a process whose key is gone are closed by whichever process notices first
(an appended `gone`), so an entry owed to its streams waits for the next stream and
`is_answering` forgets them. Changes older than the entries' lifetime are trimmed.

Faults (N3): no Redis error reaches a stream or the caller. A request that cannot be appended
returns False and is logged; a reader that cannot open through Redis opens on the local
replica alone; the reading task reconnects by itself (redis-py reconnects on the next call).

A request's `context` crosses processes as JSON when it can (anything else arrives as None);
in the process that made the request, the stream gets the object itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Final, Self

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from cordstream.domain.requests import MAX_REQUEST_AGE, StopRequest
from cordstream.shell.stops import StopReader, StopRegistry

log = logging.getLogger("cordstream.redis")

OPEN_TIMEOUT: Final = 1.0
"""How long a request or a reader's opening waits for its change to come back before it is
given up on (a request that Redis took counts as made: every process applies it as it reads
it; a reader opens on the local replica)."""
SOCKET_TIMEOUT: Final = 1.0
"""A Redis that does not answer within this is a failed call (a slow or hung Redis, N3): no
request, and no stream's start, waits on it for longer."""
FOLLOW_BLOCK: Final = 0.25
"""How long one read of the changes waits for the next (a change ends the wait at once)."""
HEARTBEAT: Final = 2.0
"""How often a process says it is alive (`heartbeat`); its key lives three times as long, so a
process killed is noticed within about four heartbeats."""

Fields = dict[str, str]
Apply = Callable[[object, dict[Any, Any]], None]


def _context_out(context: object) -> str:
    try:
        return json.dumps(context)
    except (TypeError, ValueError):  # not JSON: the other processes see None
        return "null"


def _optional(text: str) -> str | None:
    return text or None


def _answering(text: str) -> int | None:
    return int(text) if text else None


class SharedStopReader(StopReader):
    """A stream's reader on the shared registry: it opens through the stream of changes."""

    _registry: RedisStopRegistry

    def __init__(self, registry: RedisStopRegistry, channel_id: int, answering: int | None):
        super().__init__(registry, channel_id, answering)
        self.id = f"{registry.process}:{uuid.uuid4().hex[:12]}"

    async def start(self) -> list[StopRequest]:  # type: ignore[override]  # a coroutine here
        return await self._registry._open(self)

    def consume(self, request: StopRequest) -> None:
        super().consume(request)
        self._registry._publish(
            {"op": "consume", "reader": self.id, **self._registry._ref(request)}
        )

    def close(self) -> None:
        if not self.closed:
            super().close()
            self._registry._publish({"op": "close", "reader": self.id})


class RedisStopRegistry(StopRegistry):
    """The stop registry of every process of one bot, kept in Redis at `url` under
    `namespace` (see the module docstring). Use it as `async with RedisStopRegistry(url) as
    stops:`; its request methods and `discard` are coroutines."""

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "cordstream",
        max_age: float = MAX_REQUEST_AGE,
        client: aioredis.Redis | None = None,
        heartbeat: float = HEARTBEAT,
    ) -> None:
        super().__init__(clock=self._now, max_age=max_age)
        self.url = url
        self.namespace = namespace
        self.process = uuid.uuid4().hex[:16]
        self.log = _Log(
            url, namespace, self.process, heartbeat=heartbeat, max_age=max_age, client=client
        )
        self._at: float | None = None  # the time of the change being applied
        self._mine: dict[str, tuple[asyncio.Future[Any], object]] = {}  # nonce -> (answer, context)
        self._remote: dict[str, StopReader] = {}  # reader id -> a stream of another process
        self._owners: dict[str, set[str]] = {}  # process -> its readers' ids, as seen
        self._names = _Names(self._entries)
        self._tasks: set[asyncio.Task[None]] = set()  # changes being appended
        self._running: list[asyncio.Task[None]] = []  # following the log; the heartbeat

    def _now(self) -> float:
        """The registry's clock: a change's time while it is applied, else the wall clock."""
        return time.time() if self._at is None else self._at

    # -- entering and leaving ----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        try:
            await self.log.say_alive()  # before any reader of this process can be seen
            await self.log.catch_up(self._apply)
        except (RedisError, OSError) as error:
            log.warning("stop registry: Redis at %s is unreachable (%s); retrying", self.url, error)
        self._running = [
            asyncio.create_task(self.log.follow(self._apply), name="cordstream stops: follow"),
            asyncio.create_task(self.log.heartbeat(self._watched), name="cordstream stops: alive"),
        ]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Not cancelled: a blocking read that is cancelled can leave redis-py waiting. The
        # tasks see the log closing within one block (FOLLOW_BLOCK) or one heartbeat's wait.
        self.log.closing.set()
        for task in [*self._running, *self._tasks]:
            with contextlib.suppress(BaseException):
                await task
        await self.log.close()

    def _watched(self) -> list[str]:
        """The other processes whose streams this view knows."""
        return [process for process, readers in self._owners.items() if readers]

    # -- what a bot asks (coroutines: the answer is the shared registry's) -------------------

    async def request_stop(  # type: ignore[override]
        self,
        channel_id: int,
        requester_id: str | None = None,
        context: object = None,
        *,
        answering: int | None = None,
    ) -> bool:
        """`StopRegistry.request_stop`, for every process: True once registered (in Redis,
        for every process to apply); False if it could not be (Redis unreachable: logged, N3)."""
        fields = {"requester": requester_id or "", "answering": str(answering or "")}
        fields["context"] = _context_out(context)
        return bool(await self._ask("stop", channel_id, fields, context))

    async def request_follow_up(self, channel_id: int, requester_id: str) -> bool:  # type: ignore[override]
        """`StopRegistry.request_follow_up`, for every process (False: refused, or Redis
        unreachable)."""
        answered = await self._ask("follow_up", channel_id, {"requester": requester_id}, None)
        return bool(answered)

    async def discard(  # type: ignore[override]
        self, channel_id: int, *, answering: int | None = None
    ) -> tuple[StopRequest, ...]:
        """`StopRegistry.discard`, for every process (nothing, when Redis is unreachable)."""
        fields = {"answering": str(answering or "")}
        found = await self._ask("discard", channel_id, fields, None, no=())
        return tuple(found)

    def consume(self, channel_id: int, request: StopRequest) -> None:
        """`StopRegistry.consume`, here at once and for every process (in the background)."""
        fields = {"op": "take", "channel": str(channel_id), **self._ref(request)}
        super().consume(channel_id, request)
        self._publish(fields)

    def reader(self, channel_id: int, answering: int | None = None) -> SharedStopReader:
        """A stream's reader: opened (and registered) by its `start`, through Redis."""
        return SharedStopReader(self, channel_id, answering)

    # -- appending changes -------------------------------------------------------------------

    async def _ask(
        self, op: str, channel_id: int, fields: Fields, context: object, *, no: object = False
    ) -> Any:
        """Append a change, then wait until this process has applied it: its outcome. Not
        appended: `no` (logged). Appended but not read back within `OPEN_TIMEOUT` (this
        process's reading lags): every process applies it as it reads it, so it counts as
        made: True, or `no` for a discard (nothing known to be dropped); logged."""
        nonce, what = uuid.uuid4().hex, f"a {op} in channel {channel_id}"
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._mine[nonce] = (answer, context)
        change = {"op": op, "channel": str(channel_id), "proc": self.process, "nonce": nonce}
        try:
            try:
                await self.log.append(change | fields)
            except (RedisError, OSError, TimeoutError) as error:
                log.warning("stop registry: %s was not registered: %r", what, error)
                return no
            try:
                return await asyncio.wait_for(answer, OPEN_TIMEOUT)
            except TimeoutError:
                log.warning("stop registry: %s is in Redis, not yet read back here", what)
                return True if no is False else no
        finally:
            self._mine.pop(nonce, None)

    def _publish(self, fields: Fields) -> None:
        """Append a change this process already applied (in the background)."""

        async def append() -> None:
            try:
                await self.log.append(fields | {"proc": self.process})
            except (RedisError, OSError) as error:
                log.warning("stop registry: a %s could not reach Redis: %r", fields["op"], error)

        task = asyncio.get_running_loop().create_task(append())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _ref(self, request: StopRequest) -> Fields:
        return {"entry": self._names.change_of(request)}

    async def _open(self, reader: SharedStopReader) -> list[StopRequest]:
        nonce = uuid.uuid4().hex
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._mine[nonce] = (answer, reader)
        change = {"op": "open", "channel": str(reader.channel_id), "proc": self.process}
        change |= {"nonce": nonce, "reader": reader.id, "answering": str(reader.answering or "")}
        try:
            await self.log.append(change)
            return list(await asyncio.wait_for(answer, OPEN_TIMEOUT))
        except (RedisError, OSError, TimeoutError) as error:
            log.warning("stop registry: a stream's reader opened locally only: %r", error)
            if not answer.done():
                self._register(reader)
            return self._pending(reader)
        finally:
            self._mine.pop(nonce, None)

    def _register(self, reader: StopReader) -> None:
        self._readers.setdefault(reader.channel_id, []).append(reader)
        self._claim(reader)

    def _apply(self, raw_entry: object, raw_fields: dict[Any, Any]) -> None:
        entry = raw_entry.decode() if isinstance(raw_entry, bytes) else str(raw_entry)
        fields = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw_fields.items()
        }
        mine = self._mine.get(fields.get("nonce", ""))
        self._at = int(entry.split("-")[0]) / 1000
        try:
            answer = self._change(entry, fields, mine)
        except Exception:  # a change this version cannot read: skipped, never fatal
            log.warning(
                "stop registry: change %s could not be applied: %r", entry, fields, exc_info=True
            )
            return
        finally:
            self._at = None
        if mine is not None and not mine[0].done():
            mine[0].set_result(answer)

    def _change(
        self, entry: str, fields: Fields, mine: tuple[asyncio.Future[Any], object] | None
    ) -> object:
        op, proc = fields.get("op", ""), fields.get("proc", "")
        channel_id = int(fields.get("channel") or 0)
        own = proc == self.process
        if op == "stop":
            context = mine[1] if mine is not None else json.loads(fields.get("context") or "null")
            before = self._names.ids(channel_id)
            accepted = StopRegistry.request_stop(
                self,
                channel_id,
                _optional(fields["requester"]),
                context,
                answering=_answering(fields["answering"]),
            )
            self._names.name_new(channel_id, before, entry)
            return accepted
        if op == "follow_up":
            before = self._names.ids(channel_id)
            accepted = StopRegistry.request_follow_up(self, channel_id, fields["requester"])
            self._names.name_new(channel_id, before, entry)
            return accepted
        if op == "discard":
            return StopRegistry.discard(self, channel_id, answering=_answering(fields["answering"]))
        if op == "open":
            reader = mine[1] if mine is not None else None
            if not isinstance(reader, StopReader):
                if own:
                    return ()  # a reader this process gave up on waiting for: opened locally
                reader = StopReader(self, channel_id, _answering(fields["answering"]))
                self._remote[fields["reader"]] = reader
                self._owners.setdefault(proc, set()).add(fields["reader"])
            self._register(reader)
            return self._pending(reader)
        if op == "gone":  # whoever noticed: every process forgets the dead one's streams
            for reader_id in list(self._owners.get(fields.get("target", ""), ())):
                self._forget(fields["target"], reader_id)
            return None
        if own:  # consume, take, close: applied when they were made
            return None
        request = self._names.request(fields.get("entry", ""))
        if op == "take" and request is not None:
            StopRegistry.consume(self, channel_id, request)
        reader = self._remote.get(fields.get("reader", ""))
        if op == "consume" and reader is not None:
            if request is not None:
                self._consume(reader, request)
        elif op == "close" and reader is not None:
            self._forget(proc, fields["reader"])
        return None

    def _forget(self, proc: str, reader_id: str) -> None:
        reader = self._remote.pop(reader_id, None)
        self._owners.get(proc, set()).discard(reader_id)
        if reader is not None:
            self._close(reader)


class _Names:
    """Which change made which entry: an entry is known by that change's id in every process
    (a consume or a take names it so)."""

    def __init__(self, entries: Mapping[int, Mapping[Any, Any]]) -> None:
        self._entries = entries  # the registry's own, read only
        self._ids: dict[int, tuple[str, StopRequest]] = {}  # id(request) -> (its change, it)
        self._by_change: dict[str, StopRequest] = {}

    def ids(self, channel_id: int) -> set[int]:
        return {id(e.request) for e in self._entries.get(channel_id, {}).values()}

    def name_new(self, channel_id: int, before: set[int], change: str) -> None:
        """The entry `change` made (not among `before`) is known by the change's id."""
        for stored in self._entries.get(channel_id, {}).values():
            if id(stored.request) not in before:
                self._ids[id(stored.request)] = (change, stored.request)
                self._by_change[change] = stored.request
        live = {id(e.request) for slots in self._entries.values() for e in slots.values()}
        for key in [key for key in self._ids if key not in live]:
            gone, _ = self._ids.pop(key)
            self._by_change.pop(gone, None)

    def change_of(self, request: StopRequest) -> str:
        known = self._ids.get(id(request))
        return known[0] if known is not None and known[1] is request else ""

    def request(self, change: str) -> StopRequest | None:
        return self._by_change.get(change)


class _Log:
    """The Redis side: the stream of changes (append, read from the start, follow) and the
    processes' heartbeats (see the module docstring)."""

    def __init__(
        self,
        url: str,
        namespace: str,
        process: str,
        *,
        heartbeat: float,
        max_age: float,
        client: aioredis.Redis | None,
    ) -> None:
        self.namespace = namespace
        self.process = process
        self.heartbeat_every = heartbeat
        self.max_age = max_age
        self.key = f"{namespace}:stops"
        self.client = client or aioredis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT / 2
        )
        self.last = "0-0"  # the last change read
        self.closing = asyncio.Event()

    def _kept_since(self) -> int:
        """Changes older than this (ms) concern only expired entries (C8): trimmed."""
        return int((time.time() - self.max_age - 60.0) * 1000)

    async def append(self, fields: Fields) -> str:
        sent: Any = fields
        entry = await self.client.xadd(self.key, sent, minid=self._kept_since(), approximate=True)
        return entry.decode() if isinstance(entry, bytes) else str(entry)

    async def catch_up(self, apply: Apply) -> None:
        """The changes still in Redis, applied; from then on, `follow`."""
        found: Any = await self.client.xrange(self.key, min=str(self._kept_since()))
        for entry, fields in found:
            self._read(entry, fields, apply)

    async def follow(self, apply: Apply) -> None:
        delay = 0.05
        while not self.closing.is_set():
            try:
                block = int(FOLLOW_BLOCK * 1000)
                got: Any = await self.client.xread({self.key: self.last}, count=500, block=block)
                delay = 0.05
            except (RedisError, OSError) as error:
                log.warning("stop registry: reading Redis failed (%r); retrying", error)
                await self._pause(delay)
                delay = min(delay * 2, 2.0)
                continue
            for _, entries in got or ():
                for entry, fields in entries:
                    self._read(entry, fields, apply)

    def _read(self, entry: object, fields: dict[Any, Any], apply: Apply) -> None:
        self.last = entry.decode() if isinstance(entry, bytes) else str(entry)
        apply(entry, fields)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.closing.wait(), seconds)

    def alive_key(self, process: str) -> str:
        return f"{self.namespace}:alive:{process}"

    async def say_alive(self) -> None:
        alive = round(3 * self.heartbeat_every * 1000)  # ms
        await self.client.set(self.alive_key(self.process), "1", px=alive)

    async def heartbeat(self, watched: Callable[[], list[str]]) -> None:
        """This process is alive; a watched process whose key is gone is `gone` for all."""
        while not self.closing.is_set():
            try:
                await self.say_alive()
                for process in watched():
                    if not await self.client.exists(self.alive_key(process)):
                        await self.append({"op": "gone", "target": process, "proc": self.process})
            except (RedisError, OSError) as error:
                log.warning("stop registry: heartbeat failed: %r", error)
            await self._pause(self.heartbeat_every)

    async def close(self) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self.client.delete(self.alive_key(self.process))
        await self.client.aclose()
