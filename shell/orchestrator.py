"""`StreamOrchestrator.stream_to_discord`: a loop that feeds the core events and carries its
effects out against discord.py.

Theory of operation
-------------------
One `_Stream` runs one call. It owns the call's clock (`loop.time()`), the inactivity timer
and the registry listener; everything else it hands on. The decisions are all the core's:
`cordstream.domain.step` decides what the stream does, `cordstream.domain.lifecycle` when the
provider's task is cancelled and given up, `cordstream.domain.final` the final edits after a
cancellation, and `cordstream.domain.interaction` where an interaction's messages go.

Events reach the core one at a time, synchronously (the loop is single-threaded, `step` is
pure and quick), from four places: the provider's task (`cordstream.shell.provider_task`:
`ChunkArrived`, `ProviderEnded`, `ProviderCrashed`), the timer (`TimerFired`, B2), the registry
(`StopRequested`, B3: a stop wakes the stream while the provider hangs), and the courier
(`cordstream.shell.courier`: Discord's answers, the channel's turns, the end of a pause).
Effects go back out the same way: `CloseProvider` to the provider's task, requests to the
courier, `ConsumeRequest` to the registry, `Finish` ends the call.

The caller's task only waits: for the result, then for the provider's task and the requests in
flight (B10, B11). cordstream never cancels it, so an `asyncio.timeout` around the call works as
around any await, and the caller's own cancellation propagates after the same cleanup (the
final edits that remove the cursor included, L4). The call never raises (B1); KeyboardInterrupt
and SystemExit raised by the provider end it like a cancellation and reach the caller.

Faults (the last resort: `step` is total, so this is for bugs). The first fault, in `step` or
in the shell, is fed to the core as `ProviderCrashed`, which ends the stream the B13 way. If the
core cannot even do that, or never started (a fault before `Started`: nothing to end, and no
event may come first), it is fed nothing more; once the requests in flight are answered,
`cordstream.domain.machine.abandon` makes the result from the state as it stands and the
answers it missed. Events a correct shell never feeds are listed in `StreamResult.anomalies`
and logged as a warning on the `cordstream.stream` logger, so a bug here is never silent.

What the stream tells its operator (the log line at its end, its span and metrics) is its
`StreamWatch`'s (`cordstream.shell.telemetry`): told the result, when the provider's task
ended, and (through `telemetry.current()`) each Discord request.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable
from functools import partial
from typing import Any, Final, assert_never, cast

from cordstream.domain import DEFAULT_CATALOGUE, Catalogue, StreamResult, initial_state, step
from cordstream.domain import effects as fx
from cordstream.domain import events as ev
from cordstream.domain.final import cancel_edits
from cordstream.domain.machine import abandon
from cordstream.domain.redact import Secrets
from cordstream.domain.requests import StopRequest, resolve
from cordstream.shell.arguments import stream_argument_error
from cordstream.shell.buttons import StopControl
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext, StreamProvider
from cordstream.shell.courier import FINAL_EDIT_TIMEOUT, Courier
from cordstream.shell.provider_task import CLOSE_GRACE, CLOSE_TIMEOUT, ProviderTask
from cordstream.shell.secrets import stream_secrets
from cordstream.shell.stops import DEFAULT_STOPS, StopRegistry, StopRequests
from cordstream.shell.target import InteractionTarget, channel_id_of, target_for
from cordstream.shell.telemetry import StreamWatch

__all__ = ["CLOSE_GRACE", "CLOSE_TIMEOUT", "FINAL_EDIT_TIMEOUT", "StreamOrchestrator"]


class StreamOrchestrator(StopRequests):
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
        answer, K1); one result, never raises. A wrong argument is an `error` result whose
        `data` is a TypeError naming it (`cordstream.shell.arguments`); nothing is sent."""
        wrong = stream_argument_error(provider, config, context)
        if wrong is not None:
            return StreamResult("error", data=wrong)
        stream = _Stream(self, provider, config, context)
        with stream.watch:  # its logs, spans and metrics (`cordstream.shell.telemetry`)
            return await stream.run()


_REQUEST_KINDS: Final = {"stopped_by_user": "stop", "follow_up_interrupt": "follow_up"}


def _stop_latency(result: StreamResult, fed: set[StopRequest], stops: StopRegistry) -> float | None:
    """For telemetry: from the first request of the kind that ended the stream to now, on the
    registry's clock; None when no request ended it."""
    kind = _REQUEST_KINDS.get(result.status)
    asked = [request.at for request in fed if request.kind == kind]
    return stops.now() - min(asked) if asked else None


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
        self.config = config
        self.context = context
        found = channel_id_of(context.channel)
        self.channel_id: int = found if isinstance(found, int) else 0
        secrets = stream_secrets(orchestrator._secrets, provider, context.channel)
        self.state = initial_state(
            config,
            locale=context.locale,
            suppress_user_errors=context.suppress_user_errors,
            catalogue=orchestrator.catalogue,
            secrets=secrets,
        )
        self.watch = StreamWatch(
            provider, config.delivery, context.channel, self.channel_id, secrets
        )
        self.result: StreamResult | None = None
        self.finished = asyncio.Event()
        self.timer: asyncio.TimerHandle | None = None
        self.registry_changed = False  # set by the listener until `poll` runs
        self.fed: set[StopRequest] = set()  # the entries handed to the core
        self.fault_error: Exception | None = None  # the first fault (see the docstring)
        self.fatal_error: BaseException | None = None  # a KeyboardInterrupt/SystemExit
        self.broken = False  # the core faulted beyond recovery: it is fed nothing more
        self.over = False  # the call is over: the core is fed nothing more
        self.late: list[ev.Delivered | ev.Rejected] = []  # Discord's answers the core was not fed
        control = None
        if context.stop_button:
            control = StopControl(self.stops, self.channel_id, context.answering, self.running)
        self.courier = Courier(self, target_for(context), context, self.channel_id, control)
        self.provider = ProviderTask(self, provider, config, context)
        # This stream's view of the registry (C9), opened last: `run` closes it.
        self.reader = orchestrator.stops.reader(self.channel_id, context.answering)

    # -- the caller's task -----------------------------------------------------------------

    async def run(self) -> StreamResult:
        unlisten = self.stops.listen(self.channel_id, self.on_registry)
        cancel = False
        try:
            try:
                try:
                    await self.stream()
                except Exception as error:  # a fault of the shell's (see the docstring)
                    self.fault(error)
                    await self.finished.wait()  # the requests in flight are counted (F2)
            except BaseException:
                cancel = True  # the caller's cancellation, or a KeyboardInterrupt/SystemExit
                raise
            if self.result is None:  # pragma: no cover - `finished` is set with a result
                self.give_up(RuntimeError("the stream ended without a result"))
            assert self.result is not None
            return self.result
        finally:
            self.over = True
            unlisten()
            self.reader.close()
            if self.timer is not None:
                self.timer.cancel()
            self.courier.halt()
            hurried = await self.provider.end(hurry=cancel)
            self.watch.provider_closed(*self.provider.timings())
            cancel = cancel or hurried or self.fatal_error is not None
            await self.courier.settle(cancel=cancel)
            if cancel and self.result is None:  # L4: no result reports what was shown
                hurried = await self.final_edits() or hurried
            self.courier.stop_views()
            status = None if self.result is None else self.result.status
            hurried = await self.courier.settle_target(status) or hurried
            if self.fatal_error is not None:
                raise self.fatal_error
            if hurried:
                raise asyncio.CancelledError  # the caller cancelled while the provider closed

    async def stream(self) -> None:
        target = self.courier.target
        if isinstance(target, InteractionTarget):
            self.courier.spawn(target.begin())  # deferred at once, while the provider starts
        started: object = self.reader.start()  # a coroutine for a shared registry (N1)
        pending = await started if inspect.isawaitable(started) else started
        self.start(cast("list[StopRequest]", pending))
        self.check_registry()  # what reached the stream while its reader opened (N1)
        if self.wants_chunks():  # B4: a pending request resolves before the provider
            self.provider.start()
        await self.finished.wait()
        if self.fatal_error is not None:
            raise self.fatal_error

    def start(self, pending: list[StopRequest]) -> None:
        """B4, C9: the entry that wins first (`precedence`) decides; the others pending at the
        start are handed to the core too, and one it can no longer take, because the stream
        ended at once, is resolved by the same rule (`resolve`), so none is left behind."""
        self.fed.update(pending)
        self.feed(ev.Started(self.loop.time(), pending[0] if pending else None))
        for request in pending[1:]:
            ending = self.state.core.ending
            if self.result is None:
                self.feed(ev.StopRequested(self.loop.time(), request))
            elif ending is not None and resolve(request, ending.origin) == "absorb":
                self.reader.consume(request)

    async def final_edits(self) -> bool:
        """L4: the final edits the core says its messages need. True if the caller cancelled
        meanwhile."""
        try:
            edits = cancel_edits(self.state, tuple(self.late), buttons=self.context.stop_button)
        except Exception:  # pragma: no cover - a broken core: its messages keep the cursor
            return False
        return await self.courier.final_edits(edits)

    # -- what the provider's task asks (`provider_task.Reader`) ------------------------------

    def wants_chunks(self) -> bool:
        # A call, not a value kept: feeding events changes it between two reads.
        return self.result is None and not self.broken and self.state.core.phase == "streaming"

    def poll(self) -> None:
        if self.registry_changed:
            self.check_registry()

    def fatal(self, error: BaseException) -> None:
        self.fatal_error = error
        self.broken = True
        self.finished.set()  # the caller raises it after the cleanup

    def running(self) -> bool:
        """K2: whether a stop may still decide this stream."""
        return self.result is None and not self.broken

    # -- events and effects ----------------------------------------------------------------

    def feed(self, event: ev.Event) -> None:
        if self.result is None and not self.broken and not self.over:
            try:
                self.state, effects = step(self.state, event)
                for effect in effects:
                    self.apply(effect)
                return
            except Exception as error:  # `step` is total (B1): this is the last resort
                self.fault(error)
        if self.result is None and isinstance(event, ev.Delivered | ev.Rejected):
            self.late.append(event)  # Discord's answer the core missed: `abandon`, final edits

    def apply(self, effect: fx.Effect) -> None:
        match effect:
            case fx.ArmTimer(at=at):
                if self.timer is not None:
                    self.timer.cancel()
                self.timer = self.loop.call_at(at, self.on_timer, at)
            case fx.CloseProvider():
                self.provider.stop()
            case fx.SendMessage():
                self.courier.send(effect)
            case fx.EditMessage():
                self.courier.edit(effect)
            case fx.AwaitTurn(token=token, prompt=prompt, route=route):
                self.courier.wait_turn(token, prompt=prompt, route=route)
            case fx.SendEmbed():
                self.courier.embed(effect)
            case fx.TypingPause(token=token, seconds=seconds):
                self.courier.pause(seconds, partial(self.on_pause, token))
            case fx.ConsumeRequest(request=request):
                self.reader.consume(request)
            case fx.Finish(result=result):
                self.conclude(result)
            case _:  # pragma: no cover - the union is closed
                assert_never(effect)

    def conclude(self, result: StreamResult) -> None:
        self.watch.concluded(result, _stop_latency(result, self.fed, self.stops))
        self.result = result
        self.courier.stop_views()  # K2: a click from now on stops nothing (B11)
        self.provider.stop()
        if self.timer is not None:
            self.timer.cancel()
        self.courier.halt()
        self.finished.set()

    def fault(self, error: Exception) -> None:
        """A fault in `step` or in the shell: end the stream as B13 (see the docstring)."""
        if self.result is not None or self.broken:
            return
        first, self.fault_error = self.fault_error is None, self.fault_error or error
        if first and self.state.phase != "ready":  # a core never started is fed nothing
            try:
                self.state, effects = step(self.state, ev.ProviderCrashed(self.loop.time(), error))
                for effect in effects:
                    self.apply(effect)
            except Exception:  # the core cannot even end the stream
                pass
            else:
                if self.finished.is_set() or self.courier.tasks:
                    return  # finished, or it finishes once the requests in flight are answered
        self.broken = True  # feed the core nothing more; stop reading the provider (B10)
        self.provider.stop()
        if self.timer is not None:
            self.timer.cancel()
        self.courier.halt()
        if not self.courier.tasks:
            self.give_up(self.fault_error)

    def idle(self) -> None:
        """The last request in flight was answered."""
        if self.fault_error is not None:  # after a fault, the core will not finish now
            self.give_up(self.fault_error)

    def give_up(self, error: BaseException) -> None:
        """The result from the state as it stands and the answers it missed (F2)."""
        if self.result is not None:
            return
        now, late = self.loop.time(), tuple(self.late)
        if self.state.phase == "ready":  # it never started: it ran for no time
            now = self.state.core.started_at
        try:
            result = abandon(self.state, error, now, late)
        except Exception:  # pragma: no cover - the state itself is beyond use
            result = abandon(initial_state(self.config), error, now)
        self.conclude(result)

    def on_timer(self, armed_for: float) -> None:
        self.timer = None
        self.feed(ev.TimerFired(self.loop.time(), armed_for))

    def on_pause(self, token: int) -> None:
        self.feed(ev.PauseOver(self.loop.time(), token))

    def on_registry(self) -> None:
        self.registry_changed = True
        self.loop.call_soon(self.poll)

    def check_registry(self) -> None:
        self.registry_changed = False
        if self.state.phase == "ready":  # not started: `stream` reads the registry after it
            return
        for request in self.reader.pending():  # those reaching this stream (C9), in order
            if request not in self.fed:
                self.fed.add(request)
                self.feed(ev.StopRequested(self.loop.time(), request))
