"""`StreamOrchestrator.stream_to_discord`: the core's effects, carried out against discord.py.

Theory of operation
-------------------
One `_Stream` runs one call. It owns the loop's clock (`loop.time()`), one timer handle, the
Discord and typing tasks, and the provider's task; the decisions are all the core's
(`cordstream.domain.step`). Events reach the core from four places, each fed synchronously, one at a
time (the loop is single-threaded, and `step` is pure and quick):

- the provider's task reads the provider: `await anext(iterator)`, then, per chunk, the
  registry check, `on_stream_progress`, `process_chunk`, `describe_error` for an error, and
  `ChunkArrived` (B5);
- a `loop.call_at` timer feeds `TimerFired` (B2);
- the registry calls back when a stop or follow-up is registered for the channel (B3);
- a task per Discord request feeds `Delivered`/`Rejected`; a timer ends each typing pause
  (`PauseOver`).

Discord requests go through the stream's target (`cordstream.shell.target`): the channel, or
an interaction (K1), which is deferred in a task of the call when the stream starts, and
settled when it ends (nothing left "thinking", shielded and bounded as the final edit is).
With `StreamContext.stop_button`, each live message created while it streams carries a Stop
button (`cordstream.shell.buttons`, K2), one view per message, removed by its final edit;
every view is stopped once the result exists, so no click reaches the stream after it.

A stop, a follow-up or the deadline must take effect while the provider hangs inside
`__anext__`, and how the provider reacts to being stopped must neither hang the call nor touch
the caller's task. So the provider gets a task of its own, one per call, created once no
pending request has ended the stream first (B4): it calls `start_stream`, runs the chunk loop
and closes the iterator, so all the provider's code runs in that one task. Nothing is added
per chunk (no task, no timer rescheduling, no hand-over: it is the same loop, in another
task). When the core answers an event with `CloseProvider`, the provider's task is cancelled
while — and only while — it waits in `__anext__`. The caller's task only waits: for the
result, then for the provider's task and the Discord requests. cordstream never cancels it,
so it leaves the call with the cancellation state (`Task.cancelling()`) it came in with, and an
`asyncio.timeout` around the call works as it does around any await.

Exit: the iterator is closed with `aclose()` (B10); the timer, the registry listener, the
provider's task and every Discord task are gone before the call returns (B11). The call never
raises (B1); only the caller's own cancellation propagates, after the same cleanup (and a
KeyboardInterrupt or SystemExit, see below).

Rules chosen where the SPEC is silent:
- The provider's cleanup has one budget, `CLOSE_TIMEOUT`, counted from the moment the stream
  stops wanting its chunks (the core's `CloseProvider`, a result, a fault, or the caller's
  cancellation). It covers all the provider does from then on: the interrupted `__anext__`
  (an async generator's `finally` runs there, and a provider may swallow the cancellation and
  go on waiting) and then `aclose()`, which gets what is left. When the budget is spent the
  provider's task is cancelled once more and waited for at most `CLOSE_GRACE` longer. A
  provider that ignores that too (it swallows every cancellation) is abandoned: the call
  returns without it, and its task is left running the provider's code, cancelled twice.
  Nothing it does afterwards reaches the core, the registry or Discord (the core is fed
  nothing once the call is over); if it ever gets out of `__anext__`, the task calls
  `aclose()` with no budget left (cancelled at its first wait) and ends. That task is the one
  thing a call can leave behind (B11), and only for such a provider. So a call returns at most
  `CLOSE_TIMEOUT + CLOSE_GRACE` after the stream stopped reading, besides waiting for the
  Discord requests in flight.
- The caller's cancellation hurries the provider: its task is cancelled at once, wherever it
  is (in `__anext__`, in its `finally`, in `aclose()`), and what is left of the budget shrinks
  to `CLOSE_GRACE`; each further cancellation of the caller does the same again. So a
  cancelled call propagates its `CancelledError` within `2 * CLOSE_GRACE` (besides the
  requests in flight, which it cancels), and a provider whose cleanup waits on anything that
  can be cancelled (a hung `await` in a `finally`) ends with it, leaving nothing behind.
- The cancellations sent to the provider's task are taken back (`Task.uncancel`) once its
  `__anext__` is over, as `asyncio.timeout` does: `aclose()` runs in a task that is not being
  cancelled, so a `TaskGroup`, `asyncio.timeout` or anyio cancel scope inside it works.
- What the provider does once it is being stopped changes nothing: returning, yielding again
  or raising from the interrupted `__anext__` reaches a core that no longer reads, and
  whatever `aclose()` raises or returns is ignored (a `CancelledError` included; a plain
  function or one returning something that cannot be awaited is simply called). An iterator
  without `aclose` is not closed; a coroutine returned by an `async def start_stream` that
  returns instead of yielding is an error (B13) and is closed, so it does not warn.
- Any exception the provider raises (in `start_stream`, `__anext__`, `process_chunk`,
  `describe_error`, `on_stream_progress`) is the provider's failure, handled as B13 or B5 say:
  a `CancelledError` it raises itself, `GeneratorExit` and its own `BaseException` subclasses
  included. KeyboardInterrupt and SystemExit are not: they ask the program to end. Raised by
  the provider while the call runs, they end it like the caller's cancellation (the provider
  is closed, the requests in flight are cancelled, nothing is left) and are raised to the
  caller instead of a result. One raised by an abandoned provider after the call returned is
  raised from its task, out of the event loop, as asyncio does for any task.

Faults (the last resort; `step` is total, so this is for bugs). When `step` raises, or
carrying out its effects or running this module does, the first such fault is fed to the core
as `ProviderCrashed`: the core ends the stream the B13 way, so the requests already in flight
are still waited for and what Discord accepted is counted (F2), and the generic error embed is
sent. If the core faults again, or cannot end the stream that way, it is fed nothing more: the
provider is no longer read (and is closed), and once the requests in flight are answered the
result is made from the state as it stands (`cordstream.domain.machine.abandon`): `error`
with the first fault as data, no embed, and as `messages`/`accumulated_text`/`messages_sent`
the messages Discord accepted. What Discord accepted is defined once, by the core (its
delivery policy's `messages`, `cordstream.domain.delivery`); this module keeps a ledger of
its own (`accepted`) only for this last resort, because the core may have missed the
`Delivered` it faulted on. The ledger is written where `Delivered` is made, from the content
of the `SendMessage` (or `EditMessage`) it answers, and is
handed to `abandon`, which builds the result exactly as a finished stream's is built; so the
two agree by construction. The same happens when, after a fault, nothing is in flight any more
and the core has not finished. Every wait is bounded by the requests in flight (discord.py's
own timeouts and retries), which the call awaits before returning anyway (B11).

Anomalies: events the core was fed that a correct shell never feeds are listed in
`StreamResult.anomalies` (see `cordstream.domain.machine`); a result that has any is logged as
a warning on the `cordstream` logger, so a bug in this module is never silent.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Coroutine, Iterable
from typing import Any

import discord

from cordstream.domain import (
    DEFAULT_CATALOGUE,
    ArmTimer,
    AwaitTurn,
    Catalogue,
    ChunkArrived,
    CloseProvider,
    ConsumeRequest,
    Delivered,
    DiscordFailure,
    EditMessage,
    Effect,
    EmbedSpec,
    ErrorChunk,
    Event,
    Finish,
    PauseOver,
    ProviderCrashed,
    ProviderEnded,
    Rejected,
    SendEmbed,
    SendMessage,
    Started,
    StopRequest,
    StopRequested,
    StreamResult,
    TimerFired,
    TurnGranted,
    TypingPause,
    initial_state,
    step,
)
from cordstream.domain.machine import abandon
from cordstream.domain.redact import Secrets
from cordstream.domain.requests import resolve
from cordstream.shell import delivery, ratelimit
from cordstream.shell.buttons import StopControl, StopView
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext, StreamProvider
from cordstream.shell.secrets import stream_secrets
from cordstream.shell.stops import DEFAULT_STOPS, StopRegistry
from cordstream.shell.target import InteractionTarget, channel_id_of, target_for

_log = logging.getLogger("cordstream")

# The provider's cleanup budget: from the moment the stream stops reading it, how long its
# interrupted `__anext__` and `aclose()` may take together (see "Rules chosen" above).
CLOSE_TIMEOUT = 5.0
# How long the provider's task is waited for once more after the budget, cancelled again,
# before it is abandoned.
CLOSE_GRACE = 0.1
# How long the final edit of a live message may take when the call is cancelled or breaks
# off (L4): shielded from the cancellation, and bounded by this.
FINAL_EDIT_TIMEOUT = 5.0
# Not a failure of the provider: the program is asked to end (see "Rules chosen" above).
_FATAL = (KeyboardInterrupt, SystemExit)


class StreamOrchestrator:
    """Streams providers into Discord. One orchestrator serves any number of streams at once.

    `stops`: the stop registry; by default the process-wide `cordstream.shell.stops.DEFAULT_STOPS`,
    which a `/stop` command reaches through `request_stop` on any orchestrator.
    `secrets`: values no embed may show (G4), on top of the bot's own Discord token and the
    provider's API key, which every stream removes anyway (see `cordstream.shell.secrets`).
    """

    def __init__(
        self,
        stops: StopRegistry | None = None,
        *,
        catalogue: Catalogue = DEFAULT_CATALOGUE,
        secrets: Iterable[str] = (),
    ) -> None:
        self.stops = stops if stops is not None else DEFAULT_STOPS
        self.catalogue = catalogue
        self._secrets = Secrets.of(secrets)

    def register_secret(self, *values: str) -> None:
        """Never show `values` in an embed (G4), from the next stream on: a database password,
        a user's own API key. Values shorter than 8 characters are ignored."""
        self._secrets = self._secrets + Secrets.of(values)

    async def stream_to_discord(
        self, provider: StreamProvider[Any], config: StreamConfig, context: StreamContext
    ) -> StreamResult:
        """Stream one provider response into `context.channel` (a channel, or an interaction to
        answer, K1); one result, never raises."""
        return await _Stream(self, provider, config, context).run()

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
        return bool(self.stops.discard(channel_id, answering=answering))


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
        # Where the messages go: the channel, or an interaction (K1; `cordstream.shell.target`).
        self.target = target_for(context)
        found = channel_id_of(context.channel)
        self.channel_id: int = found if isinstance(found, int) else 0
        self.state = initial_state(
            config,
            locale=context.locale,
            suppress_user_errors=context.suppress_user_errors,
            catalogue=orchestrator.catalogue,
            secrets=stream_secrets(orchestrator._secrets, provider, context.channel),
        )
        self.result: StreamResult | None = None
        self.registry_changed = False  # set by the listener until `check_registry` runs
        self.finished = asyncio.Event()
        self.timer: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task[None]] = set()  # Discord requests
        self.pauses: list[asyncio.TimerHandle] = []
        self.provider_task: asyncio.Task[None] | None = None  # reads and closes the provider
        self.reading = False  # the provider's task waits in `__anext__`
        self.close_by: float | None = None  # the end of the provider's cleanup budget
        self.close_timer: asyncio.TimerHandle | None = None  # cancels the provider's task then
        self.expired = False  # the budget is spent: the provider's task was cancelled again
        self.cancels = 0  # cancellations of the provider's task not yet taken back (`read`)
        self.abandoned = False  # the call returned without the provider's task
        self.fatal: BaseException | None = None  # a KeyboardInterrupt/SystemExit to re-raise
        self.fed: set[StopRequest] = set()  # the entries handed to the core
        self.fault_error: Exception | None = None  # the first fault (see the docstring)
        self.accepted: list[str] = []  # contents Discord accepted, for the last resort (F2)
        self.live_messages: list[discord.Message] = []  # the messages live delivery edits (L)
        self.latest: dict[int, str] = {}  # the latest content sent to each of them
        # K2: the Stop buttons, one view per live message; `buttons` maps a message's index to
        # the view it shows (until its final edit is accepted).
        self.stop_control: StopControl | None = None
        if context.stop_button:
            self.stop_control = StopControl(
                orchestrator.stops, self.channel_id, context.answering, self.running
            )
        self.views: list[StopView] = []
        self.buttons: dict[int, StopView] = {}
        self.turn_task: asyncio.Task[None] | None = None  # waits for the channel's turn (L2)
        # The core is fed nothing more: it faulted beyond recovery, or the call is over.
        self.broken = False
        # This stream's view of the registry (C9), opened last: `run` closes it.
        self.reader = orchestrator.stops.reader(self.channel_id, context.answering)

    # -- the caller's task ---------------------------------------------------------------

    async def run(self) -> StreamResult:
        unlisten = self.stops.listen(self.channel_id, self.on_registry)
        cancel = False
        try:
            try:
                try:
                    await self.stream()
                except Exception as error:  # a fault in this module (see the docstring)
                    self.fault(error)
                    await self.finished.wait()  # the requests in flight are counted (F2)
            except BaseException:
                # The caller's own cancellation, or a KeyboardInterrupt/SystemExit from the
                # provider: clean up (below) and let it through.
                cancel = True
                raise
            if self.result is None:  # pragma: no cover - `finished` is set with a result
                self.give_up(RuntimeError("the stream ended without a result"))
            assert self.result is not None
            return self.result
        finally:
            self.broken = True  # the call is over: nothing reaches the core any more
            unlisten()
            self.reader.close()
            if self.timer is not None:
                self.timer.cancel()
            for pause in self.pauses:
                pause.cancel()
            if self.turn_task is not None:
                self.turn_task.cancel()
            hurried = await self.end_provider(hurry=cancel)
            if self.close_timer is not None:
                self.close_timer.cancel()
            cancel = cancel or hurried or self.fatal is not None
            await self.settle_requests(cancel=cancel)
            if cancel and self.result is None:  # no result reports what was shown: tidy up
                hurried = await self.final_edit() or hurried
            self.stop_views()
            hurried = await self.settle_target() or hurried
            if self.fatal is not None:
                raise self.fatal
            if hurried:
                raise asyncio.CancelledError  # the caller cancelled while the provider closed

    async def end_provider(self, *, hurry: bool) -> bool:
        """B10, B11: wait for the provider's task, at most until its cleanup budget and the
        grace after it are spent (see "Rules chosen"); `hurry`: the caller was cancelled, so
        the budget shrinks to `CLOSE_GRACE`. True if the caller was cancelled meanwhile."""
        task = self.provider_task
        if task is None or task.done():
            return False
        if hurry:
            self.hurry()
        else:
            self.interrupt()  # usually done already (a result, a fault); idempotent
        hurried = False
        while not task.done():
            assert self.close_by is not None
            left = self.close_by + CLOSE_GRACE - self.loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait((task,), timeout=left)
            except asyncio.CancelledError:
                hurried = True
                self.hurry()  # passed on to the provider; the wait only gets shorter
                continue
            break  # done, or the time is up (not the clock again: it may round short)
        if not task.done():
            self.abandoned = True  # it ignores cancellation: left behind (see "Rules chosen")
        return hurried

    async def settle_requests(self, *, cancel: bool) -> None:
        """B11: no request outlives the call. They are awaited, not cancelled; only when the
        caller cancels are they cancelled too, so that the caller is not kept waiting, and
        then through `ratelimit.cancel_requests`: a request that sleeps off a global 429 is
        cancelled with a keeper that reopens discord.py's global lock when that wait ends
        (cancelling it alone would leave the lock closed for good); one whose state cannot be
        read while the lock is closed is handed over to the background, and cancelled once
        the lock opens. A handed-over request feeds nothing back: the call is over
        (`broken`)."""
        interrupted = False
        while self.tasks:
            pending = set(self.tasks)
            if cancel or interrupted:
                cancelled = ratelimit.cancel_requests(self.context.channel, pending)
                self.tasks -= pending - cancelled  # handed over: no longer this call's
                pending = cancelled
            try:
                # `wait`, not `gather`: a cancelled `gather` cancels what it waits for, and a
                # request cancelled while discord.py sleeps off a global 429 must go through
                # `cancel_requests`, or discord.py's global lock stays closed (B11).
                if pending:
                    await asyncio.wait(pending)
            except asyncio.CancelledError:
                interrupted = True  # the caller cancelled while we waited: stop waiting
                continue
            self.tasks -= pending
        if interrupted:
            raise asyncio.CancelledError

    async def stream(self) -> None:
        if not isinstance(channel_id_of(self.context.channel), int):
            raise TypeError("StreamContext.channel must have an int `id` (a channel's `id`)")
        if isinstance(self.target, InteractionTarget):
            self.spawn(self.target.begin())  # deferred at once, while the provider starts (K1)
        self.start(self.reader.start())
        if self.wants_chunks():  # B4: a pending request resolves before the provider
            self.provider_task = self.loop.create_task(self.provide())
        await self.finished.wait()
        if self.fatal is not None:
            raise self.fatal

    def start(self, pending: list[StopRequest]) -> None:
        """B4, C9: the stream starts with the entries already reaching it, the one that wins
        first (`precedence`), which decides. The others were pending at the start too: each
        is handed to the core, and one it can no longer take, because the stream ended at
        once, is resolved by the same rule (`resolve`: a second stop is absorbed, C5), so it
        is not left for a later stream."""
        self.fed.update(pending)
        self.feed(Started(self.loop.time(), pending[0] if pending else None))
        for request in pending[1:]:
            ending = self.state.core.ending
            if self.result is None:
                self.feed(StopRequested(self.loop.time(), request))
            elif ending is not None and resolve(request, ending.origin) == "absorb":
                self.reader.consume(request)

    async def provide(self) -> None:
        """The provider's task: start the provider, read it, close it (B5–B7, B10, B13)."""
        try:
            if self.registry_changed:  # a request registered before this task ran
                self.check_registry()
            if not self.wants_chunks():
                return  # the stream ended before this task ran: the provider never starts
            try:
                iterator = self.provider.start_stream(self.config, self.context)
            except _FATAL:
                raise
            except BaseException as error:  # B13, as in `read`
                self.feed(ProviderCrashed(self.loop.time(), error))
                return
            try:
                await self.read(iterator)
            finally:
                await self.close(iterator)
        except _FATAL as error:
            if self.abandoned:
                raise  # nobody waits for this task any more: out of the event loop it goes
            self.fatal = error
            self.broken = True
            self.finished.set()  # the caller raises it after the cleanup
        except Exception as error:  # a fault in this module (see the docstring)
            self.fault(error)
        except BaseException as error:  # pragma: no cover - `read` and `close` catch the rest
            self.fault(RuntimeError(f"the provider's task ended with {error!r}"))

    async def read(self, iterator: Any) -> None:
        """Pull chunks until the core wants no more (B5, B6, B7, B13); in the provider's task."""
        provider, context = self.provider, self.context
        progress = context.on_stream_progress
        feed, now = self.feed, self.loop.time  # once per chunk each
        while self.wants_chunks():
            self.reading = True
            try:
                raw = await anext(iterator)
            except StopAsyncIteration:
                feed(ProviderEnded(now()))
                return
            except _FATAL:
                raise
            except BaseException as error:
                # B13: whatever the provider raises, a CancelledError of its own included.
                # After `interrupt` the core no longer reads, and ignores it.
                feed(ProviderCrashed(now(), error))
                return
            finally:
                self.reading = False
                if self.cancels:
                    self.take_back_cancels()
            if self.registry_changed:  # B5: a stop registered while the chunk was on its way
                self.check_registry()
            if not self.wants_chunks():
                return  # ended meanwhile (or the provider yielded after being stopped)
            if progress is not None:
                try:
                    progress()
                except _FATAL:
                    raise
                except BaseException:  # B5: ignored
                    pass
            try:
                chunk = provider.process_chunk(raw)
                headline = None
                if isinstance(chunk, ErrorChunk) and chunk.error is not None:
                    headline = self.headline(chunk)
            except _FATAL:
                raise
            except BaseException as error:
                # B13. Synchronous code cannot be cancelled: a CancelledError here is a fault.
                feed(ProviderCrashed(now(), error))
                return
            feed(ChunkArrived(now(), chunk, headline))
            if self.registry_changed:  # B5: a stop raised while this chunk was handled
                self.check_registry()

    def wants_chunks(self) -> bool:
        # A call, not a value kept: feeding events changes it between two reads. The phase is
        # read directly (what `StreamState.wants_chunks` says): twice per chunk, one frame less.
        return self.result is None and not self.broken and self.state.core.phase == "streaming"

    def headline(self, chunk: ErrorChunk) -> str | None:
        assert chunk.error is not None
        try:
            headline = self.provider.describe_error(chunk.error, self.context.locale)
        except _FATAL:
            raise
        except BaseException:  # G1: no headline means the generic one
            return None
        return headline if isinstance(headline, str) else None

    async def close(self, iterator: object) -> None:
        """B10: close the provider's iterator on every path, so the model stops billing; within
        what is left of the cleanup budget. Whatever it raises or returns changes nothing."""
        if self.close_by is None:  # pragma: no cover - the core stopped reading: `interrupt`
            self.interrupt()
        assert self.close_by is not None
        try:
            aclose = getattr(iterator, "aclose", None)
            if aclose is None:
                if inspect.iscoroutine(iterator):
                    iterator.close()  # an `async def start_stream` that returned: no warning
                return
            async with asyncio.timeout_at(self.close_by):
                closing = aclose()
                if inspect.isawaitable(closing):
                    await closing
        except _FATAL:
            raise
        except BaseException:
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
        accepted = tuple(self.accepted)  # F2: what Discord accepted, whatever the core saw
        try:
            result = abandon(self.state, error, self.loop.time(), accepted)
        except Exception:  # pragma: no cover - the state itself is beyond use: a new one's
            result = abandon(initial_state(self.config), error, self.loop.time(), accepted)
        self.conclude(result)

    def conclude(self, result: StreamResult) -> None:
        if result.anomalies:
            _log.warning(
                "stream in channel %s was fed impossible events: %s",
                self.channel_id,
                "; ".join(result.anomalies),
            )
        self.result = result
        self.stop_views()  # K2: a click from now on stops nothing (B11)
        self.interrupt()
        if self.timer is not None:
            self.timer.cancel()
        if self.turn_task is not None:
            self.turn_task.cancel()  # a turn the result no longer needs
        self.finished.set()

    def apply(self, effect: Effect) -> None:
        match effect:
            case ArmTimer(at=at):
                if self.timer is not None:
                    self.timer.cancel()
                self.timer = self.loop.call_at(at, self.on_timer, at)
            case CloseProvider():
                self.interrupt()
            case SendMessage(seq=seq, content=content, reply=reply, streaming=streaming):
                reply_to = self.context.reply_to if reply else None
                self.spawn(self.send_message(seq, content, reply_to, streaming=streaming))
            case EditMessage(seq=seq, content=content, message=index, streaming=streaming):
                self.spawn(self.edit_message(seq, content, index, streaming=streaming))
            case AwaitTurn(token=token):
                self.turn_task = self.loop.create_task(self.await_turn(token))
            case SendEmbed(seq=seq, embed=embed):
                self.spawn(self.send_embed(seq, embed))
            case TypingPause(token=token, seconds=seconds):
                # E9: the indicator is a Discord request, the pause a timer. Only the timer is
                # cancelled if the stream ends first: a request cancelled while discord.py
                # sleeps off a global rate limit would leak discord.py's global lock.
                self.spawn(self.typing())
                self.pauses.append(self.loop.call_later(seconds, self.on_pause, token))
            case ConsumeRequest(request=request):
                self.reader.consume(request)
            case Finish(result=result):
                self.conclude(result)

    def interrupt(self) -> None:
        """The stream stops reading the provider: its cleanup budget starts, and its task is
        cancelled if — and only if — it waits in `__anext__`. Never the caller's task."""
        if self.close_by is None:
            self.close_by = self.loop.time() + CLOSE_TIMEOUT
        self.arm_expiry()
        if self.reading:
            self.cancel_provider()

    def hurry(self) -> None:
        """The caller is cancelled: what is left of the budget shrinks to `CLOSE_GRACE`, and
        the provider's task is cancelled now, wherever it is (see "Rules chosen")."""
        soon = self.loop.time() + CLOSE_GRACE
        if self.close_by is None or self.close_by > soon:
            self.close_by = soon
            if self.close_timer is not None:
                self.close_timer.cancel()
                self.close_timer = None
        self.arm_expiry()
        self.cancel_provider()

    def arm_expiry(self) -> None:
        task = self.provider_task
        if self.close_timer is not None or self.expired or task is None or task.done():
            return
        assert self.close_by is not None
        self.close_timer = self.loop.call_at(self.close_by, self.expire)

    def expire(self) -> None:
        """The cleanup budget is spent: the provider's task is cancelled again, wherever it is."""
        self.close_timer = None
        self.expired = True
        self.cancel_provider()

    def cancel_provider(self) -> None:
        task = self.provider_task
        if task is None or task.done() or task is asyncio.current_task():
            return
        self.reading = False
        self.cancels += 1
        task.cancel()

    def take_back_cancels(self) -> None:
        """In the provider's task, once `__anext__` is over: the cancellations this module
        sent it have landed (or were swallowed), so they are taken back, as `asyncio.timeout`
        does, and `aclose()` runs in a task that is not being cancelled."""
        task = asyncio.current_task()
        while self.cancels and task is not None:
            self.cancels -= 1
            task.uncancel()

    def on_timer(self, armed_for: float) -> None:
        self.timer = None
        self.feed(TimerFired(self.loop.time(), armed_for))

    def on_registry(self) -> None:
        self.registry_changed = True
        self.loop.call_soon(self.check_registry)

    def check_registry(self) -> None:
        self.registry_changed = False
        for request in self.reader.pending():  # those reaching this stream (C9), in order
            if request not in self.fed:
                self.fed.add(request)
                self.feed(StopRequested(self.loop.time(), request))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.task_done)

    # -- Discord and typing ------------------------------------------------------------------

    # Sends wait for their turn under the process-wide budget and go again after Discord's
    # 429 (F4, `cordstream.shell.ratelimit`); the one message in flight is retried in place, so
    # the order holds.

    async def send_message(
        self,
        seq: int,
        content: str,
        reply_to: delivery.ReplyTo,
        *,
        streaming: bool = False,
    ) -> None:
        target = self.target
        view = self.new_view() if streaming else None  # K2: a button while it streams
        sent = await ratelimit.deliver(lambda: target.send(content, reply_to=reply_to, view=view))
        event = delivery.outcome(seq, self.loop.time(), sent)
        if isinstance(event, Delivered):
            self.accepted.append(content)
            message = delivery.message_of(sent)
            if message is not None:
                self.live_messages.append(message)  # live delivery edits it by its index
                if view is not None:
                    self.buttons[len(self.live_messages) - 1] = view
        elif view is not None:
            view.stop()
        self.feed(event)

    async def edit_message(
        self, seq: int, content: str, index: int, *, streaming: bool = False
    ) -> None:
        target = self.target
        if not 0 <= index < len(self.live_messages):  # pragma: no cover - the core's own
            error = RuntimeError(f"an edit of message {index}, which the stream did not create")
            self.feed(Rejected(self.loop.time(), seq, DiscordFailure(None, None, error)))
            return
        message = self.live_messages[index]
        self.latest[index] = content
        # K2: the message's final edit removes its Stop button; the others leave it.
        view = None if not streaming and index in self.buttons else delivery.KEEP
        edited = await ratelimit.deliver(lambda: target.edit(message, content, view=view))
        event = delivery.outcome(seq, self.loop.time(), edited)
        if isinstance(event, Delivered):
            if index < len(self.accepted):
                self.accepted[index] = content  # an edit replaces that message's content (F2)
            if view is None:
                self.buttons.pop(index).stop()
        self.feed(event)

    def new_view(self) -> StopView | None:
        """K2: a Stop button for a new live message, when the context asks for one."""
        if self.stop_control is None:
            return None
        view = self.stop_control.view()
        self.views.append(view)
        return view

    def running(self) -> bool:
        """K2: whether a stop may still decide this stream (it has no result yet)."""
        return self.result is None and not self.broken

    def stop_views(self) -> None:
        """B11, K2: discord.py forgets the stream's views (a click then reaches nothing)."""
        for view in self.views:
            view.stop()

    async def settle_target(self) -> bool:
        """K1: nothing is left "thinking" (`Target.settle`), shielded from the caller's
        cancellation and bounded by `FINAL_EDIT_TIMEOUT`, as the final edit is. True if the
        caller cancelled meanwhile."""
        if not isinstance(self.target, InteractionTarget):
            return False
        status = None if self.result is None else self.result.status
        return await self.shielded(self.target.settle(status))

    async def shielded(self, work: Coroutine[Any, Any, None]) -> bool:
        """L4, K1: run `work` (the final edits, or settling the interaction) in a task of its
        own, shielded from the caller's cancellation and bounded by `FINAL_EDIT_TIMEOUT`, after
        which its requests are cancelled. True if the caller cancelled meanwhile."""
        task = self.loop.create_task(work)
        hurried = False
        try:
            await asyncio.wait((task,), timeout=FINAL_EDIT_TIMEOUT)
        except asyncio.CancelledError:
            hurried = True
        if not task.done():
            ratelimit.cancel_requests(self.context.channel, {task})
        return hurried

    async def await_turn(self, token: int) -> None:
        """L2: wait for the channel's turn (shared by the process's live streams), then let
        the core decide what the request carries."""
        await ratelimit.turn(self.channel_id)
        self.turn_task = None
        self.feed(TurnGranted(self.loop.time(), token))

    async def final_edit(self) -> bool:
        """L4: when the caller cancels the call, the core makes no final edit, and a live
        message may still show the cursor: the one being edited, or one whose finishing edit
        never reached Discord, or one Discord created after the core stopped being fed. Each
        message of the stream whose content, as Discord last accepted it, ends with the cursor
        is edited to that content without it, in its turn under the budgets; so is each one
        still showing a Stop button (K2), which the edit removes. Shielded from the caller's
        cancellation and bounded by `FINAL_EDIT_TIMEOUT` in all. True if the caller cancelled
        meanwhile. (A result, even the last resort's after a fault, reports what Discord
        accepted, so nothing is edited after it.)"""
        cursor = self.config.cursor
        if self.state.core.live is None or not (cursor or self.buttons):
            return False
        edits: list[tuple[discord.Message, str, discord.ui.View | None]] = []
        for index, (message, content) in enumerate(
            zip(self.live_messages, self.accepted, strict=False)
        ):
            # The latest content sent holds all that Discord may have accepted (an edit the
            # cancellation cut off may have reached it): never less (L3).
            target = self.latest.get(index, content)
            for shown in (cursor, "\n" + cursor.strip()) if cursor else ():
                if target.endswith(shown) and target[: -len(shown)].strip():
                    target = target[: -len(shown)]
                    break
            button = index in self.buttons
            if target != content or button:
                edits.append((message, target, None if button else delivery.KEEP))
        if not edits:
            return False
        send = self.target

        async def edit() -> None:
            for message, content, view in edits:
                await ratelimit.turn(self.channel_id)
                await ratelimit.deliver(
                    lambda message=message, content=content, view=view: send.edit(  # type: ignore[misc]
                        message, content, view=view
                    )
                )

        return await self.shielded(edit())

    async def send_embed(self, seq: int, embed: EmbedSpec) -> None:
        target = self.target
        sent = await ratelimit.deliver(lambda: target.embed(embed))
        self.feed(delivery.outcome(seq, self.loop.time(), sent))

    async def typing(self) -> None:
        # Cosmetic: only when the budget has room now, never late (a failure changes nothing).
        if ratelimit.pacer().try_acquire():
            await self.target.typing()

    def on_pause(self, token: int) -> None:
        self.feed(PauseOver(self.loop.time(), token))
