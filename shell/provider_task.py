"""The provider's task: start the provider, read its chunks into the stream, close it (B5-B7,
B10, B13).

Theory of operation
-------------------
A stop, a follow-up or the deadline must take effect while the provider hangs inside
`__anext__`, and how the provider reacts to being stopped must neither hang the call nor touch
the caller's task. So each call reads its provider in a task of its own: `start_stream`, the
chunk loop and `aclose()` all run there, and nothing is added per chunk (no task, no timer).
Per chunk (B5): the registry is polled if it changed, `on_stream_progress`, `process_chunk`,
`describe_error` for an error, then `ChunkArrived` is fed to the stream. Text (a `TextChunk`
with no thoughts and no serving provider, or an adapter's plain text as the `str` itself,
which needs no `process_chunk` call: `providers.base.Item`) waits in a `TextRun` instead, and
all the text read without the task waiting in between is fed as one chunk (`flush`), with the
latest valid usage report among them (as the core keeps it, D3): before anything else is
fed (a stop the registry holds, another chunk, the provider's end), and, scheduled with
`call_soon` at the first of it, as soon as the task waits, ahead of any timer or answer that
comes meanwhile. So the core steps once per run of text an SDK parsed from one read, not once
per event (E10), and no text waits longer than the loop's next turn. Whether the stream still
wants chunks is read per chunk from the `Lifecycle` (its stage), not asked of the stream: every
way a stream stops wanting them (the core's `CloseProvider`, its result, a fault) stops the
lifecycle first.

When the task is cancelled, cancelled again or given up is not decided here but by the
provider's `Lifecycle` (`cordstream.domain.lifecycle`): this module tells it what happened and
carries out its `Cancel`, `ArmExpiry` and `TakeBack`. So a stop cancels the task only while it
waits in `__anext__`; `aclose()` gets what is left of the budget; the caller's cancellation
hurries it; a provider that swallows every cancellation is abandoned once the budget and its
grace are spent (its task is the one thing a call can leave behind, B11).

Whatever the provider raises is its failure (B13), a `CancelledError` of its own included, and
so is what `process_chunk` returns or raises; what `aclose()` raises or returns is ignored.
KeyboardInterrupt and SystemExit are not failures: they ask the program to end, and reach the
caller after the same cleanup (an abandoned task raises them out of the event loop).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Final, Protocol

from cordstream.domain import (
    ChunkArrived,
    ErrorChunk,
    Event,
    ProviderCrashed,
    ProviderEnded,
    ProviderError,
    TextChunk,
)
from cordstream.domain.lifecycle import Actions, ArmExpiry, Budgets, Cancel, Lifecycle, TakeBack
from cordstream.domain.record import merged
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext, StreamProvider

CLOSE_TIMEOUT: Final = 5.0
"""The provider's cleanup budget: from the moment the stream stops reading it, how long its
interrupted `__anext__` and `aclose()` may take together."""
CLOSE_GRACE: Final = 0.1
"""How long the task is waited for once more after the budget, cancelled again, before it is
abandoned."""
FATAL: Final = (KeyboardInterrupt, SystemExit)
"""Not a failure of the provider: the program is asked to end."""


class Reader(Protocol):
    """The stream the task reads for."""

    def wants_chunks(self) -> bool: ...
    def feed(self, event: Event) -> None: ...

    registry_changed: bool
    """B5: a stop may have been registered since `check_registry` last ran."""

    def check_registry(self) -> None:
        """B5: hand the core the stops registered since it last looked."""
        ...

    def poll(self) -> None:
        """`check_registry` if the registry changed."""
        ...

    def fault(self, error: Exception) -> None: ...
    def fatal(self, error: BaseException) -> None: ...


class ProviderTask:
    """One call's provider task (see the module docstring)."""

    def __init__(
        self,
        reader: Reader,
        provider: StreamProvider[Any],
        config: StreamConfig,
        context: StreamContext,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.reader = reader
        self.provider = provider
        self.config = config
        self.context = context
        self.lifecycle = Lifecycle(Budgets(CLOSE_TIMEOUT, CLOSE_GRACE))
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.reading = False  # the task is in `read`'s loop
        self.text = TextRun()
        self.first_at: float | None = None  # when the first chunk came (telemetry)

    def start(self) -> None:
        self.task = self.loop.create_task(self.run())
        self.task.add_done_callback(self.ended)
        self.lifecycle = self.lifecycle.started()

    def ended(self, _task: object) -> None:
        self.lifecycle = self.lifecycle.ended()
        if self.timer is not None:
            self.timer.cancel()

    def stop(self) -> None:
        """The stream reads no more (idempotent): the budget starts."""
        # In `read`'s loop the task's one await is `__anext__`: seen from outside, it waits there.
        reading = self.reading and asyncio.current_task() is not self.task
        self.act(self.lifecycle.stop(self.loop.time(), reading=reading))

    def hurry(self) -> None:
        """The caller was cancelled: the provider is cancelled now, the budget shrinks."""
        self.act(self.lifecycle.hurry(self.loop.time()))

    def expire(self) -> None:
        self.timer = None
        self.act(self.lifecycle.expire())

    def act(self, decided: tuple[Lifecycle, Actions]) -> None:
        self.lifecycle, actions = decided
        task = self.task
        for action in actions:
            match action:
                case Cancel():
                    self.reading = False
                    if task is not None and task is not asyncio.current_task():
                        task.cancel()
                case ArmExpiry(at=at):
                    if self.timer is not None:
                        self.timer.cancel()
                    self.timer = self.loop.call_at(at, self.expire)
                case TakeBack(count=count):
                    current = asyncio.current_task()
                    if current is not None:
                        for _ in range(count):
                            current.uncancel()

    async def end(self, *, hurry: bool) -> bool:
        """B10, B11: wait for the task, at most until the budget and the grace after it are
        spent; `hurry`: the caller was cancelled. True if the caller was cancelled meanwhile."""
        task = self.task
        if task is None or task.done():
            if self.timer is not None:  # B11: its done callback may not have run yet
                self.timer.cancel()
            return False
        if hurry:
            self.hurry()
        else:
            self.stop()
        hurried = False
        while not task.done():
            left = self.lifecycle.wait_until - self.loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait((task,), timeout=left)
            except asyncio.CancelledError:
                hurried = True
                self.hurry()  # passed on to the provider; the wait only gets shorter
                continue
            break  # done, or the time is up (not the clock again: it may round short)
        if self.timer is not None:
            self.timer.cancel()
        self.lifecycle = self.lifecycle.give_up()
        return hurried

    def timings(self) -> tuple[float | None, float, float | None]:
        """For the stream's telemetry, once `end` returned: when the first chunk came, the end
        of the cleanup budget, and now if the task is over (None: it was abandoned)."""
        over = self.task is None or self.task.done()
        return self.first_at, self.lifecycle.close_by, self.loop.time() if over else None

    async def run(self) -> None:
        reader = self.reader
        try:
            reader.poll()  # a request registered before this task ran
            if not reader.wants_chunks():
                return  # the stream ended before this task ran: the provider never starts
            try:
                iterator = self.provider.start_stream(self.config, self.context)
            except FATAL:
                raise
            except BaseException as error:  # B13, as in `read`
                reader.feed(ProviderCrashed(self.loop.time(), error))
                return
            try:
                await self.read(iterator)
            finally:
                await self.close(iterator)
        except FATAL as error:
            if self.lifecycle.task == "abandoned":
                raise  # nobody waits for this task any more: out of the event loop it goes
            reader.fatal(error)
        except Exception as error:  # a fault of the shell's
            reader.fault(error)
        except BaseException as error:  # pragma: no cover - `read` and `close` catch the rest
            reader.fault(RuntimeError(f"the provider's task ended with {error!r}"))

    async def read(self, iterator: Any) -> None:
        """Pull chunks until the stream wants no more (B5, B6, B7, B13)."""
        reader, provider = self.reader, self.provider
        progress = self.context.on_stream_progress
        # Read into locals once; per chunk, the registry flag is read without a call (E10).
        feed, now = reader.feed, self.loop.time
        run, flush = self.text, self.flush
        pending = run.items
        plain = getattr(provider, "plain_text_items", False) is True
        if not reader.wants_chunks():
            return
        # Every way the stream stops wanting chunks calls `stop` (the module docstring): per
        # chunk, the loop reads the lifecycle (`stopped`) instead of asking the stream.
        self.reading = True
        try:
            while True:
                try:
                    raw = await anext(iterator)
                except FATAL:
                    raise
                except BaseException as error:  # the end (StopAsyncIteration), or B13:
                    # whatever the provider raises, a CancelledError of its own included. Once
                    # the stream stopped reading, the core ignores it.
                    flush()
                    ended = isinstance(error, StopAsyncIteration)
                    feed(ProviderEnded(now()) if ended else ProviderCrashed(now(), error))
                    return
                if self.first_at is None:
                    self.first_at = now()
                if reader.registry_changed:  # B5: a stop registered while the chunk came
                    flush()
                    reader.check_registry()
                if self.lifecycle.stage != "wanted":  # `stopped`, without the call
                    return  # ended meanwhile (or the provider yielded after being stopped)
                if progress is not None:
                    try:
                        progress()
                    except FATAL:
                        raise
                    except BaseException:  # B5: ignored
                        pass
                if not plain or type(raw) is not str:
                    held = self.process(raw)
                    if held is None:  # fed, or failed
                        if self.stopped():
                            return
                        continue
                    raw = held
                # Text (an adapter's plain text as the `str` itself, `plain_text_items`, with
                # no call made): it waits to be fed with the text read after it.
                pending.append(raw)
                if not run.due:
                    run.due = True
                    self.loop.call_soon(flush)
                if reader.registry_changed:  # B5: a stop raised while it was handled
                    flush()
                    reader.check_registry()
                    if self.stopped():
                        return
        finally:
            self.reading = False
            if self.lifecycle.cancels:  # sent while it waited in `__anext__`: taken back
                self.act(self.lifecycle.read_ends())

    def process(self, raw: object) -> TextChunk | None:
        """Not plain text: `process_chunk`; text is returned (to wait), anything else fed."""
        reader, provider = self.reader, self.provider
        try:
            chunk = provider.process_chunk(raw)
            if (
                type(chunk) is TextChunk
                and not chunk.thoughts
                and chunk.serving_provider is None
                and type(chunk.content) is str
            ):
                return chunk  # text and its usage
            headline = None
            if isinstance(chunk, ErrorChunk) and chunk.error is not None:
                headline = _headline(provider, chunk.error, self.context.locale)
        except FATAL:
            raise
        except BaseException as error:
            # B13. Synchronous code cannot be cancelled: a CancelledError here is a fault.
            self.flush()
            reader.feed(ProviderCrashed(self.loop.time(), error))
            return None
        self.flush()
        reader.feed(ChunkArrived(self.loop.time(), chunk, headline))
        if reader.registry_changed:  # B5: a stop raised while this chunk was handled
            reader.check_registry()
        return None

    def stopped(self) -> bool:
        """The stream wants no more chunks: it stopped this lifecycle."""
        return self.lifecycle.stage != "wanted"

    def flush(self) -> None:
        """Feed the plain text read since the last chunk fed, as one chunk: before anything
        else is fed, and (scheduled at the first of it) as soon as the task waits, so the core
        sees it before any timer or answer that comes meanwhile (E10: a step per run of text
        the provider gave at once, not per chunk)."""
        chunk = self.text.take()
        if chunk is not None and self.reader.wants_chunks():
            self.reader.feed(ChunkArrived(self.loop.time(), chunk, None))

    async def close(self, iterator: object) -> None:
        """B10: close the iterator on every path, within what is left of the budget. Whatever
        it raises or returns changes nothing."""
        self.stop()  # usually stopped already: the core stopped reading
        try:
            aclose = getattr(iterator, "aclose", None)
            if aclose is None:
                if inspect.iscoroutine(iterator):
                    iterator.close()  # an `async def start_stream` that returned: no warning
                return
            async with asyncio.timeout_at(self.lifecycle.close_by):
                closing = aclose()
                if inspect.isawaitable(closing):
                    await closing
        except FATAL:
            raise
        except BaseException:
            pass


class TextRun:
    """The plain text read since the last chunk fed (`items`: `TextChunk`s, or an adapter's
    `str`s), to be fed as one chunk; `due`: a flush is scheduled for when the task waits."""

    __slots__ = ("due", "items")

    def __init__(self) -> None:
        self.items: list[TextChunk | str] = []
        self.due = False

    def take(self) -> TextChunk | None:
        """The run as one chunk (`record.merged`), None if empty; the run is empty after it."""
        self.due = False
        items = self.items
        if not items:
            return None
        chunk = merged(items)
        items.clear()
        return chunk


def _headline(provider: StreamProvider[Any], error: ProviderError, locale: str) -> str | None:
    """The provider's headline for an error embed (G1), or None: none, or it failed."""
    try:
        headline = provider.describe_error(error, locale)
    except FATAL:
        raise
    except BaseException:  # G1: no headline means the generic one
        return None
    return headline if isinstance(headline, str) else None
