"""The courier: one call's Discord requests, carried out and answered (SPEC F, K, L2, B11).

Theory of operation
-------------------
The core decides what to send and when; the courier only carries each request out, in a task
of its own, and feeds back the event that answers it (`Delivered` or `Rejected`, `TurnGranted`,
nothing for typing). It keeps handles, never contents: the `discord.Message` the core's message
number `i` names (live delivery edits message `i`), and the Stop button's view that rides on
it (K2). What Discord accepted is the core's to know.

Every request goes through the stream's target (the channel, or an interaction, K1), under the
process's budgets (`ratelimit.deliver`, with Discord's 429 sent again; `ratelimit.turn` for the
channel's lane, L2). A typing indicator is cosmetic: it goes out only when the budget has room
now.

Ending (B11): the requests in flight are awaited, not cancelled, unless the caller cancels, and
then through `ratelimit.cancel_requests`, so that a request sleeping off a global 429 cannot
leave discord.py's global lock closed. The final edits after a cancellation (L4, computed by
`cordstream.domain.final`) and settling an interaction (K1) are shielded from the caller's
cancellation and bounded by `FINAL_EDIT_TIMEOUT`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Final, Protocol

import discord
from returns.io import IOResultE

from cordstream.domain import (
    DiscordFailure,
    EditMessage,
    Event,
    Rejected,
    SendEmbed,
    SendMessage,
    StreamStatus,
    TurnGranted,
)
from cordstream.domain.effects import Route
from cordstream.domain.final import FinalEdit
from cordstream.shell import discord_api, ratelimit, telemetry
from cordstream.shell.buttons import StopControl, StopView
from cordstream.shell.context import StreamContext
from cordstream.shell.target import InteractionTarget, Target

FINAL_EDIT_TIMEOUT: Final = 5.0
"""How long the final edits after a cancellation (L4), or settling an interaction (K1), may
take: shielded from the caller's cancellation, and bounded by this."""


class Sink(Protocol):
    """The stream the courier answers to."""

    def feed(self, event: Event) -> None: ...
    def idle(self) -> None:
        """The last request in flight was answered."""
        ...


class Courier:
    """One call's Discord requests (see the module docstring)."""

    def __init__(
        self,
        sink: Sink,
        target: Target,
        context: StreamContext,
        channel_id: int,
        stop_control: StopControl | None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.target = target
        self.context = context
        self.channel_id = channel_id
        self.feed = sink.feed
        self.idle = sink.idle
        self.stop_control = stop_control
        self.tasks: set[asyncio.Task[None]] = set()
        self.pauses: list[asyncio.TimerHandle] = []
        self.turn_task: asyncio.Task[None] | None = None
        # The turn of the next request: its route and when it was given (L2).
        self.turn_at: tuple[Route, float] | None = None
        self.messages: list[discord.Message] = []  # the core's message i is messages[i]
        self.views: list[StopView] = []  # every Stop button made (K2)
        self.buttons: dict[int, StopView] = {}  # message number -> the view it shows

    # -- carrying effects out ----------------------------------------------------------------

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.done)

    def done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not self.tasks:
            self.idle()

    def send(self, effect: SendMessage) -> None:
        self.spawn(self.send_message(effect))

    def edit(self, effect: EditMessage) -> None:
        self.spawn(self.edit_message(effect))

    def embed(self, effect: SendEmbed) -> None:
        self.spawn(self.send_embed(effect))

    def wait_turn(self, token: int, *, prompt: bool, route: Route) -> None:
        """L2: a turn for the core's request `token`; one asked for again replaces the one
        awaited (a spaced turn the core now wants prompt, when the model ended)."""
        if self.turn_task is not None:
            self.turn_task.cancel()
        self.unused_turn()
        self.turn_task = self.loop.create_task(self.await_turn(token, prompt, route))

    def pause(self, seconds: float, over: Callable[[], None]) -> None:
        """E9: the indicator is a request, the pause a timer. Only the timer is cancelled if
        the stream ends first (a request cancelled while discord.py sleeps off a global rate
        limit would leak discord.py's global lock)."""
        self.spawn(self.typing())
        self.pauses.append(self.loop.call_later(seconds, over))

    def halt(self) -> None:
        """No more turns or pauses: the stream is over (its requests in flight go on)."""
        for pause in self.pauses:
            pause.cancel()
        if self.turn_task is not None:
            self.turn_task.cancel()

    def unused_turn(self) -> None:
        """A turn given with no request made in it (the core asks for another: it asked again,
        or had nothing to send after all) is given back: Discord never counted it. (At the
        end of a stream, a turn's request may still be in flight: nothing is given back.)"""
        if self.turn_at is not None:
            ratelimit.give_back(self.channel_id, *self.turn_at)
            self.turn_at = None

    async def send_message(self, effect: SendMessage) -> None:
        target = self.target
        content = effect.content
        reply_to = self.context.reply_to if effect.reply else None
        view = self.new_view() if effect.streaming else None  # K2: a button while it streams
        sent = await ratelimit.deliver(
            lambda: target.send(content, reply_to=reply_to, view=view), "send"
        )
        self.answered()
        event = discord_api.outcome(effect.seq, self.loop.time(), sent)
        message = discord_api.message_of(sent)
        if message is not None:
            self.messages.append(message)  # live delivery edits it by its number
            if view is not None:
                self.buttons[len(self.messages) - 1] = view
        elif view is not None:
            view.stop()
        self.feed(event)
        watch = telemetry.current()
        if message is not None and watch is not None:
            watch.shown()  # the first text a user sees, for the stream's telemetry

    async def edit_message(self, effect: EditMessage) -> None:
        index = effect.message
        if not 0 <= index < len(self.messages):  # pragma: no cover - the core's own
            error = RuntimeError(f"an edit of message {index}, which the stream did not create")
            self.feed(Rejected(self.loop.time(), effect.seq, DiscordFailure(None, None, error)))
            return
        edited = await self.edit_now(index, effect.content, streaming=effect.streaming)
        self.feed(discord_api.outcome(effect.seq, self.loop.time(), edited))

    async def edit_now(
        self, index: int, content: str, *, streaming: bool
    ) -> IOResultE[discord.Message]:
        """Edit message `index`; its final edit (`streaming` False) removes its Stop button."""
        target, message = self.target, self.messages[index]
        view = None if not streaming and index in self.buttons else discord_api.KEEP
        edited = await ratelimit.deliver(lambda: target.edit(message, content, view=view), "edit")
        self.answered()
        if view is None and discord_api.message_of(edited) is not None:
            self.buttons.pop(index).stop()
        return edited

    async def send_embed(self, effect: SendEmbed) -> None:
        target, spec = self.target, effect.embed
        sent = await ratelimit.deliver(lambda: target.embed(spec), "embed")
        self.answered()
        self.feed(discord_api.outcome(effect.seq, self.loop.time(), sent))

    async def typing(self) -> None:
        # Cosmetic: only when the budget has room now, never late (a failure changes nothing).
        if await ratelimit.typing_turn(self.channel_id):
            await self.target.typing()

    async def await_turn(self, token: int, prompt: bool, route: Route) -> None:
        """L2: wait for the channel's turn, then let the core decide what the request carries."""
        await self.take_turn(prompt, route)
        self.turn_task = None
        self.feed(TurnGranted(self.loop.time(), token))

    def answered(self) -> None:
        """Discord answered the request made in the latest turn: the channel's window counts
        from now (`pacing.Bucket.answered`)."""
        if self.turn_at is not None:
            ratelimit.answered(self.channel_id, *self.turn_at)
            self.turn_at = None

    async def take_turn(self, prompt: bool, route: Route) -> None:
        granted_at = await ratelimit.turn(self.channel_id, prompt=prompt, route=route)
        self.turn_at = None if granted_at is None else (route, granted_at)

    def new_view(self) -> StopView | None:
        if self.stop_control is None:
            return None
        view = self.stop_control.view()
        self.views.append(view)
        return view

    def stop_views(self) -> None:
        """B11, K2: discord.py forgets the stream's views (a click then reaches nothing)."""
        for view in self.views:
            view.stop()

    # -- the end of the call -----------------------------------------------------------------

    async def settle(self, *, cancel: bool) -> None:
        """B11: no request outlives the call. Awaited, not cancelled, unless the caller cancels
        (`cancel`, or a cancellation while waiting); then through `ratelimit.cancel_requests`,
        which hands a request it cannot safely cancel to the background."""
        interrupted = False
        while self.tasks:
            pending = set(self.tasks)
            if cancel or interrupted:
                cancelled = ratelimit.cancel_requests(self.context.channel, pending)
                self.tasks -= pending - cancelled  # handed over: no longer this call's
                pending = cancelled
            try:
                # `wait`, not `gather`: a cancelled `gather` cancels what it waits for.
                if pending:
                    await asyncio.wait(pending)
            except asyncio.CancelledError:
                interrupted = True
                continue
            self.tasks -= pending
        if interrupted:
            raise asyncio.CancelledError

    async def final_edits(self, edits: Iterable[FinalEdit]) -> bool:
        """L4, K2: after the caller's cancellation, the edits the core says its messages still
        need (the cursor removed, the Stop button with it), each in its turn. True if the
        caller cancelled meanwhile."""
        wanted = [edit for edit in edits if edit.message < len(self.messages)]
        if not wanted:
            return False

        async def edit() -> None:
            for final in wanted:
                await self.take_turn(True, "edit")
                await self.edit_now(final.message, final.content, streaming=False)

        return await self.shielded(edit())

    async def settle_target(self, status: StreamStatus | None) -> bool:
        """K1: nothing is left "thinking" (`Target.settle`), shielded and bounded as the final
        edit is. True if the caller cancelled meanwhile."""
        if not isinstance(self.target, InteractionTarget):
            return False
        return await self.shielded(self.target.settle(status))

    async def shielded(self, work: Coroutine[Any, Any, None]) -> bool:
        task = self.loop.create_task(work)
        hurried = False
        try:
            await asyncio.wait((task,), timeout=FINAL_EDIT_TIMEOUT)
        except asyncio.CancelledError:
            hurried = True
        if not task.done():
            ratelimit.cancel_requests(self.context.channel, {task})
        return hurried
