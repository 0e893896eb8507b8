"""`StreamOrchestrator.stream_to_discord`: the core's effects, carried out against discord.py.

Theory of operation
-------------------
One `_Stream` runs one call. It owns the loop's clock (`loop.time()`), one timer handle, the
Discord and typing tasks, and the provider's iterator; the decisions are all the core's
(`cordstream.domain.step`). Events reach the core from four places, each fed synchronously, one at a
time (the loop is single-threaded, and `step` is pure and quick):

- the caller's task reads the provider: `await anext(iterator)`, then, per chunk, the
  registry check, `on_stream_progress`, `process_chunk`, `describe_error` for an error, and
  `ChunkArrived` (B5);
- a `loop.call_at` timer feeds `TimerFired` (B2);
- the registry calls back when a stop or follow-up is registered for the channel (B3);
- a task per Discord request feeds `Delivered`/`Rejected`; a timer ends each typing pause
  (`PauseOver`).

A stop, a follow-up or the deadline must take effect while the provider hangs inside
`__anext__`. The mechanism is the cheapest there is: nothing per chunk (no task, no timer
rescheduling); when the core answers an event with `CloseProvider`, the caller's task is
cancelled while — and only while — it waits in `__anext__`, and that cancellation is told
apart from the caller's own with `Task.cancelling()`/`uncancel()`, as `asyncio.timeout` does.

Exit: the iterator is closed with `aclose()` (B10); the timer, the registry listener and every
task are gone before the call returns (B11). The call never raises (B1); only the caller's own
cancellation propagates, after the same cleanup.

Faults (the last resort; `step` is total, so this is for bugs). When `step` raises, or
carrying out its effects or running this module does, the first such fault is fed to the core
as `ProviderCrashed`: the core ends the stream the B13 way, so the requests already in flight
are still waited for and what Discord accepted is counted (F2), and the generic error embed is
sent. If the core faults again, or cannot end the stream that way, it is fed nothing more: the
provider is no longer read (and is closed), and once the requests in flight are answered the
result is made from the state as it stands (`cordstream.domain.machine.abandon`): `error`
with the first fault as data, no embed, and as `messages`/`accumulated_text`/`messages_sent`
the messages Discord accepted, from this module's own ledger of accepted sends (the core may
have missed the `Delivered` it faulted on). The same happens when, after a fault, nothing is
in flight any more and the core has not finished. Every wait is bounded by the requests in
flight (discord.py's own timeouts and retries), which the call awaits before returning anyway
(B11).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import replace
from typing import Any

import discord

from cordstream.domain import (
    DEFAULT_CATALOGUE,
    ArmTimer,
    Catalogue,
    ChunkArrived,
    CloseProvider,
    ConsumeRequest,
    Delivered,
    Effect,
    EmbedSpec,
    ErrorChunk,
    Event,
    Finish,
    PauseOver,
    ProviderCrashed,
    ProviderEnded,
    SendEmbed,
    SendMessage,
    Started,
    StopRequest,
    StopRequested,
    StreamResult,
    TimerFired,
    TypingPause,
    initial_state,
    step,
)
from cordstream.domain.machine import abandon
from cordstream.shell import delivery
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext, StreamProvider
from cordstream.shell.stops import DEFAULT_STOPS, StopRegistry

# How long closing a provider may take before the stream gives up on it.
CLOSE_TIMEOUT = 5.0


class StreamOrchestrator:
    """Streams providers into Discord. One orchestrator serves any number of streams at once.

    `stops`: the stop registry; by default the process-wide `cordstream.shell.stops.DEFAULT_STOPS`,
    which a `/stop` command reaches through `request_stop` on any orchestrator.
    """

    def __init__(
        self, stops: StopRegistry | None = None, *, catalogue: Catalogue = DEFAULT_CATALOGUE
    ) -> None:
        self.stops = stops if stops is not None else DEFAULT_STOPS
        self.catalogue = catalogue

    async def stream_to_discord(
        self, provider: StreamProvider[Any], config: StreamConfig, context: StreamContext
    ) -> StreamResult:
        """Stream one provider response into `context.channel`; one result, never raises."""
        return await _Stream(self, provider, config, context).run()

    def request_stop(
        self, channel_id: int, requester_id: str | None = None, context: object = None
    ) -> bool:
        """Stop the channel's stream (C2); `context` comes back as `result.stop_context`."""
        return self.stops.request_stop(channel_id, requester_id, context)

    def request_follow_up(self, channel_id: int, requester_id: str) -> bool:
        """A new user message: end the stream as `follow_up_interrupt` (C3)."""
        return self.stops.request_follow_up(channel_id, requester_id)

    def has_stop_request(self, channel_id: int) -> bool:
        return self.stops.has_stop_request(channel_id)

    def discard_requests(self, channel_id: int) -> bool:
        """Forget a pending stop or follow-up for the channel; True if there was one.

        Call it when a new turn starts for a new user message, so a request that arrived
        after the previous stream had ended does not end the new stream at once (B4).
        """
        return self.stops.discard(channel_id) is not None


class _Stream:
    """One `stream_to_discord` call (see the module docstring)."""

    def __init__(
        self,
        orchestrator: StreamOrchestrator,
        provider: StreamProvider[Any],
        config: StreamConfig,
        context: StreamContext,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.stops = orchestrator.stops
        self.provider = provider
        self.config = config
        self.context = context
        self.channel_id: int = getattr(context.channel, "id", 0)
        self.state = initial_state(
            config,
            locale=context.locale,
            suppress_user_errors=context.suppress_user_errors,
            catalogue=orchestrator.catalogue,
        )
        self.result: StreamResult | None = None
        self.registry_changed = False  # set by the listener until `check_registry` runs
        self.finished = asyncio.Event()
        self.timer: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task[None]] = set()  # Discord requests
        self.pauses: list[asyncio.TimerHandle] = []
        self.reader: asyncio.Task[Any] | None = None  # the caller's task, while in __anext__
        self.interrupts = 0  # cancellations of the reader that are ours
        self.fed_request: StopRequest | None = None
        self.fault_error: Exception | None = None  # the first fault (see the docstring)
        self.accepted: list[str] = []  # contents Discord accepted, for the last resort (F2)
        self.broken = False  # the core faulted beyond recovery: it is fed nothing more

    # -- the caller's task ---------------------------------------------------------------

    async def run(self) -> StreamResult:
        unlisten = self.stops.listen(self.channel_id, self.on_registry)
        cancelled = False
        try:
            try:
                try:
                    await self.stream()
                except Exception as error:  # a fault in this module (see the docstring)
                    self.fault(error)
                    await self.finished.wait()  # the requests in flight are counted (F2)
            except asyncio.CancelledError:
                cancelled = True
                raise  # the caller's own cancellation: clean up (below) and let it through
            if self.result is None:  # pragma: no cover - `finished` is set with a result
                self.give_up(RuntimeError("the stream ended without a result"))
            assert self.result is not None
            return self.result
        finally:
            unlisten()
            if self.timer is not None:
                self.timer.cancel()
            for pause in self.pauses:
                pause.cancel()
            await self.settle_requests(cancel=cancelled)

    async def settle_requests(self, *, cancel: bool) -> None:
        """B11: no request outlives the call. They are awaited, not cancelled (a request
        cancelled during discord.py's global rate-limit wait leaks its global lock); only when
        the caller cancels are they cancelled too, so that the caller is not kept waiting."""
        interrupted = False
        while self.tasks:
            pending = set(self.tasks)
            if cancel or interrupted:
                for task in pending:
                    task.cancel()
            try:
                await asyncio.gather(*pending, return_exceptions=True)
            except asyncio.CancelledError:
                interrupted = True  # the caller cancelled while we waited: stop waiting
                continue
            self.tasks -= pending
        if interrupted:
            raise asyncio.CancelledError

    async def stream(self) -> None:
        if not isinstance(getattr(self.context.channel, "id", None), int):
            raise TypeError("StreamContext.channel must have an int `id`")
        self.feed(Started(self.loop.time(), self.stops.peek(self.channel_id)))
        if self.state.wants_chunks:  # B4: a pending request resolves before the provider
            try:
                iterator = self.provider.start_stream(self.config, self.context)
            except (Exception, asyncio.CancelledError) as error:  # B13, as in `read`
                self.feed(ProviderCrashed(self.loop.time(), error))
            else:
                try:
                    await self.read(iterator)
                finally:
                    await self.close(iterator)
        await self.finished.wait()

    async def read(self, iterator: AsyncIterator[Any]) -> None:
        """Pull chunks until the core wants no more (B5, B6, B7, B13)."""
        task = asyncio.current_task()
        provider, context = self.provider, self.context
        progress = context.on_stream_progress
        while self.wants_chunks():
            self.reader = task
            try:
                raw = await anext(iterator)
            except StopAsyncIteration:
                self.feed(ProviderEnded(self.loop.time()))
                return
            except asyncio.CancelledError as error:
                if self.ours(task):
                    return  # CloseProvider interrupted the read: the core is ending the stream
                if task is not None and task.cancelling() == 0:
                    # Nobody cancelled this task: the provider raised it itself (B13).
                    self.feed(ProviderCrashed(self.loop.time(), error))
                    return
                raise  # the caller's own cancellation
            except Exception as error:
                self.feed(ProviderCrashed(self.loop.time(), error))
                return
            finally:
                self.reader = None
            if self.interrupts and task is not None:
                # The provider swallowed our cancellation and yielded anyway: take it back.
                self.interrupts = 0
                task.uncancel()
            if self.registry_changed:  # B5: a stop registered while the chunk was on its way
                self.check_registry()
            if not self.wants_chunks():
                return
            if progress is not None:
                with contextlib.suppress(Exception):
                    progress()
            try:
                chunk = provider.process_chunk(raw)
                headline = None
                if isinstance(chunk, ErrorChunk) and chunk.error is not None:
                    headline = self.headline(chunk)
            except (Exception, asyncio.CancelledError) as error:
                # B13. Synchronous code cannot be cancelled: a CancelledError here is a fault.
                self.feed(ProviderCrashed(self.loop.time(), error))
                return
            self.feed(ChunkArrived(self.loop.time(), chunk, headline))
            if self.registry_changed:  # B5: a stop raised while this chunk was handled
                self.check_registry()

    def wants_chunks(self) -> bool:
        # A call, not the property inline: feeding events changes it between two reads.
        return self.result is None and not self.broken and self.state.wants_chunks

    def headline(self, chunk: ErrorChunk) -> str | None:
        assert chunk.error is not None
        try:
            headline = self.provider.describe_error(chunk.error, self.context.locale)
        except (Exception, asyncio.CancelledError):  # G1: no headline means the generic one
            return None
        return headline if isinstance(headline, str) else None

    def ours(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether a CancelledError in the reader came from `interrupt` only."""
        if task is None or not self.interrupts:
            return False
        self.interrupts -= 1
        return task.uncancel() == 0

    async def close(self, iterator: AsyncIterator[Any]) -> None:
        """B10: close the provider's iterator on every path, so the model stops billing."""
        aclose = getattr(iterator, "aclose", None)
        if aclose is None:
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await aclose()
        except Exception:
            pass

    # -- events and effects ----------------------------------------------------------------

    def feed(self, event: Event) -> None:
        if self.result is not None or self.broken:
            return
        try:
            self.state, effects = step(self.state, event)
            for effect in effects:
                self.apply(effect)
        except Exception as error:  # `step` is total (B1): this is the last resort
            self.fault(error)

    def fault(self, error: Exception) -> None:
        """A fault in `step` or in this module: end the stream as B13 (see the docstring)."""
        if self.result is not None or self.broken:
            return
        if self.fault_error is None:
            self.fault_error = error
            try:
                self.state, effects = step(self.state, ProviderCrashed(self.loop.time(), error))
                for effect in effects:
                    self.apply(effect)
            except Exception:  # the core cannot even end the stream
                pass
            else:
                if self.finished.is_set() or self.tasks:
                    return  # finished, or it finishes once the requests in flight are answered
        self.break_off()

    def break_off(self) -> None:
        """The core cannot finish: feed it nothing more, stop reading the provider, and make
        the result once the requests in flight are answered (`task_done`)."""
        self.broken = True
        self.interrupt()  # a reader waiting in `__anext__` stops; the provider is closed (B10)
        if self.timer is not None:
            self.timer.cancel()
        for pause in self.pauses:
            pause.cancel()
        if not self.tasks:
            self.give_up(self.fault_error or RuntimeError("the stream broke off"))

    def task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if self.fault_error is not None and not self.tasks:
            # After a fault, nothing is in flight and there is no result: the core will not
            # finish now (it missed an event, or it is broken).
            self.give_up(self.fault_error)

    def give_up(self, error: BaseException) -> None:
        """The result from the state as it stands: `error`, with what Discord accepted."""
        if self.result is not None:
            return
        try:
            result = abandon(self.state, error, self.loop.time())
        except Exception:  # pragma: no cover - the state itself is beyond use
            result = StreamResult(status="error", data=error)
        accepted = tuple(self.accepted)  # F2: what Discord accepted, whatever the core saw
        result = replace(
            result,
            accumulated_text="\n".join(accepted),
            messages_sent=len(accepted),
            messages=accepted,
        )
        self.conclude(result)

    def conclude(self, result: StreamResult) -> None:
        self.result = result
        self.interrupt()
        if self.timer is not None:
            self.timer.cancel()
        self.finished.set()

    def apply(self, effect: Effect) -> None:
        match effect:
            case ArmTimer(at=at):
                if self.timer is not None:
                    self.timer.cancel()
                self.timer = self.loop.call_at(at, self.on_timer, at)
            case CloseProvider():
                self.interrupt()
            case SendMessage(seq=seq, content=content, reply=reply):
                reply_to = self.context.reply_to if reply else None
                self.spawn(self.send_message(seq, content, reply_to))
            case SendEmbed(seq=seq, embed=embed):
                self.spawn(self.send_embed(seq, embed))
            case TypingPause(token=token, seconds=seconds):
                # E9: the indicator is a Discord request, the pause a timer. Only the timer is
                # cancelled if the stream ends first: a request cancelled while discord.py
                # sleeps off a global rate limit would leak discord.py's global lock.
                self.spawn(self.typing())
                self.pauses.append(self.loop.call_later(seconds, self.on_pause, token))
            case ConsumeRequest(request=request):
                self.stops.consume(self.channel_id, request)
            case Finish(result=result):
                self.conclude(result)

    def interrupt(self) -> None:
        """Cancel the caller's task if — and only if — it is waiting in `__anext__`."""
        reader = self.reader
        if reader is not None and reader is not asyncio.current_task():
            self.reader = None
            self.interrupts += 1
            reader.cancel()

    def on_timer(self, armed_for: float) -> None:
        self.timer = None
        self.feed(TimerFired(self.loop.time(), armed_for))

    def on_registry(self) -> None:
        self.registry_changed = True
        self.loop.call_soon(self.check_registry)

    def check_registry(self) -> None:
        self.registry_changed = False
        request = self.stops.peek(self.channel_id)
        if request is not None and request is not self.fed_request:
            self.fed_request = request
            self.feed(StopRequested(self.loop.time(), request))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.task_done)

    # -- Discord and typing ------------------------------------------------------------------

    async def send_message(
        self, seq: int, content: str, reply_to: discord.Message | discord.PartialMessage | None
    ) -> None:
        sent = await delivery.send_message(
            self.context.channel,
            content,
            reply_to=reply_to,
            allowed_mentions=self.context.allowed_mentions,
        )
        event = delivery.outcome(seq, self.loop.time(), sent)
        if isinstance(event, Delivered):
            self.accepted.append(content)
        self.feed(event)

    async def send_embed(self, seq: int, embed: EmbedSpec) -> None:
        sent = await delivery.send_embed(
            self.context.channel, embed, allowed_mentions=self.context.allowed_mentions
        )
        self.feed(delivery.outcome(seq, self.loop.time(), sent))

    async def typing(self) -> None:
        await delivery.trigger_typing(self.context.channel)  # a failure here changes nothing

    def on_pause(self, token: int) -> None:
        self.feed(PauseOver(self.loop.time(), token))
