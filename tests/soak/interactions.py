"""The interactions phase: streams into slash commands' interactions (K1, K2).

A real `commands.Bot` on the emulator's gateway (`local_bot`) receives `/ask` as
INTERACTION_CREATE and hands its `discord.Interaction` to the soak, which streams the plan
into it (`run_interaction`), makes its requests, expires its token and clicks its Stop button
(`click`) when the plan says. `ClickRegistry` keeps the stops the clicks register, so they
are judged like the soak's own requests. A phase of its own because every message then also
goes to the bot as a gateway event, which the other phases need not pay for.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import discord
from discord.ext import commands

from cordstream.shell import (
    StreamContext,
    StreamOrchestrator,
    finish_interaction,
)
from cordstream.shell.buttons import STOP_BUTTON_PREFIX
from cordstream.shell.testing import GuildMember, InteractionRecord, emulator, local_bot
from tests.soak.faults import SoakProvider
from tests.soak.outcome import Click, Outcome, outcome_of
from tests.soak.plans import Asking, Clicker, Plan, asked_plan
from tests.soak.report import Report, tally
from tests.soak.run import (
    MAX_AGE,
    Env,
    _latest_request,
    _raiser,
    close_batch,
    fire,
    judge_registry,
    quiesce,
    run_streams,
)
from tests.support.oracle import (
    Fired,
    Request,
    TimedRegistry,
)


class ClickRegistry(TimedRegistry):
    """The soak's registry for interactions: it also keeps every stop offered to it, with the
    entry it registered (`offers`), so that the stops a Stop button's click registers (their
    context is the click's `discord.Interaction`, `cordstream.shell.buttons`) are judged like
    the soak's own requests."""

    def __init__(self, *, clock: Callable[[], float], max_age: float) -> None:
        super().__init__(clock=clock, max_age=max_age)
        self.offers: list[tuple[int, Fired]] = []  # (channel id, the stop as a request made)

    def request_stop(
        self,
        channel_id: int,
        requester_id: str | None = None,
        context: object = None,
        *,
        answering: int | None = None,
    ) -> bool:
        before = self.entries(channel_id)
        seq = self.tick()
        accepted = super().request_stop(channel_id, requester_id, context, answering=answering)
        after = self.entries(channel_id)
        entry = next((e for e in after if not any(e is b for b in before)), None)
        displaced = tuple(b for b in before if not any(b is a for a in after))
        request = Request("stop", requester_id, "during", answering=answering)
        made = Fired(request, self.clock(), accepted, context, None, entry, displaced, seq)
        self.offers.append((channel_id, made))
        return accepted


@dataclass
class Asked:
    """The interactions phase's world: the emulator, the bot on its gateway, its members by
    role, the interactions the bot received and the soak waits for (by plan index), and the
    clicks under way."""

    env: Env
    bot: commands.Bot
    members: dict[Clicker, GuildMember]
    channel_ids: list[int]
    pending: dict[int, asyncio.Future[discord.Interaction[Any]]]
    clicking: set[asyncio.Task[None]] = field(default_factory=set)


def stop_button_on(
    api: emulator.DiscordEmulator, channel_id: int, first: int
) -> tuple[int, str] | None:
    """The newest message of the channel (from `first` on) showing a Stop button, and the
    button's custom id."""
    for message in reversed(api.messages(channel_id)[first:]):
        for row in message.components:
            for item in row.get("components", ()):
                custom_id = item.get("custom_id")
                if isinstance(custom_id, str) and custom_id.startswith(STOP_BUTTON_PREFIX):
                    return message.id, custom_id
    return None


async def click(asked: Asked, outcome: Outcome, who: Clicker) -> None:
    """`who` clicks the stream's Stop button, if a message of it shows one now."""
    api = asked.env.api
    at = asyncio.get_running_loop().time()
    found = stop_button_on(api, outcome.channel_id, outcome.first_message)
    record: InteractionRecord | None = None
    if found is not None:
        try:
            record = await api.click(asked.members[who], *found)
        except ValueError:  # gone meanwhile (the final edit removed it)
            record = None
    outcome.clicks.append(Click(who, at, record))


async def run_interaction(asked: Asked, plan: Plan, channel_id: int) -> Outcome:
    """The asker runs `/ask` in the channel; the bot hands the interaction it receives over
    the gateway to the soak, which streams the plan into it (`StreamContext(interaction,
    answering=asker, stop_button=..., ephemeral_errors=...)`), makes the plan's requests,
    expires the token and clicks the Stop button when the plan says; a stream ending on a
    function call is settled with `finish_interaction` (K1). Never raises (but for the soak's
    own cancellation of a stuck stream)."""
    loop = asyncio.get_running_loop()
    env, asking = asked.env, cast(Asking, plan.asking)
    api, asker = env.api, asked.members["asker"]
    provider = SoakProvider(
        plan.steps, headline=plan.headline, cleanup=plan.cleanup, reaction=plan.reaction
    )
    outcome = outcome_of(plan, channel_id, 0, provider)
    outcome.first_message = len(api.messages(channel_id))
    received = loop.create_future()
    asked.pending[plan.index] = received
    try:
        record = await api.slash(asker, "ask", {"question": str(plan.index)}, channel_id=channel_id)
        outcome.record = record
        interaction = await received
    except asyncio.CancelledError:
        if env.killing:
            raise
        outcome.escaped = asyncio.CancelledError("the interaction never reached the bot")
        return outcome

    def make(request: Request) -> None:
        fire(env, channel_id, plan, request, outcome.fired)

    def expire() -> None:
        if outcome.done_at == 0.0:  # not once the call returned: nothing to see
            api.expire_interaction(record)
            outcome.expired_at = loop.time()

    def press(who: Clicker) -> None:
        task = loop.create_task(click(asked, outcome, who))
        asked.clicking.add(task)
        task.add_done_callback(asked.clicking.discard)

    for request in plan.requests:
        if request.when == "before":
            make(request)
        elif request.when == "during":
            loop.call_later(request.at, make, request)
    if asking.expire_at == 0.0:
        expire()  # before the stream starts: its deferral fails (K1)
    elif asking.expire_at is not None:
        loop.call_later(asking.expire_at, expire)
    for who, at in asking.clicks:
        loop.call_later(at, press, who)
    context = StreamContext(
        interaction,
        suppress_user_errors=plan.suppress,
        on_stream_progress=_raiser if plan.progress_raises else None,
        answering=asker.id,
        stop_button=asking.stop_button,
        ephemeral_errors=asking.ephemeral_errors,
    )
    try:
        try:
            outcome.result = await env.orchestrator.stream_to_discord(
                provider, plan.config, context
            )
        finally:
            outcome.done_at = loop.time()
            outcome.provider_running = provider.running
        if outcome.result.status == "function_call":
            await finish_interaction(interaction)  # the bot gives up its tool loop
    except asyncio.CancelledError as error:
        if env.killing:
            raise
        outcome.escaped = error
    except Exception as error:
        outcome.escaped = error
    for request in plan.requests:
        if request.when == "after":
            loop.call_later(request.at, make, request)
    return outcome


def _latest_asking(plans: Sequence[Plan]) -> float:
    """How long after a batch started its last request, expiry or click happens, at most."""
    moments = [_latest_request(plans)]
    for plan in plans:
        if plan.asking is not None:
            moments += [at for _, at in plan.asking.clicks]
            moments.append(plan.asking.expire_at or 0.0)
    return max(moments)


def thinking_only(history: Sequence[emulator.Change]) -> set[int]:
    """The messages that only ever showed "thinking" (a deferral's response: no content, no
    embed): cordstream's, not the answer's; they are not part of its transcript (F2)."""
    shown = {c.message_id for c in history if c.kind != "delete" and (c.content or c.embeds)}
    return {c.message_id for c in history} - shown


async def run_asked_batch(asked: Asked, plans: Sequence[Plan], report: Report) -> list[Outcome]:
    """One batch of the interactions phase, judged as `run_batch` judges its own: every
    request, expiry and click has happened, the clicks are answered, what cancelled calls
    handed over has ended, leaked tasks and listeners are counted, the registry is judged;
    each stream's record is its channel's public messages (the "thinking" ones aside) and
    the ephemeral ones it showed its user, its requests (its interaction's too), and the
    stops its Stop button's clicks registered (`ClickRegistry.offers`)."""
    env = asked.env
    api, stops = env.api, cast(ClickRegistry, env.stops)
    tasks_before = set(asyncio.all_tasks())
    first_request = len(api.requests)
    channels = asked.channel_ids[: len(plans)]
    first_change = {c: len(api.history(c)) for c in channels}
    stops.offers.clear()
    outcomes = await run_streams(
        env,
        plans,
        channels,
        lambda plan, channel_id: run_interaction(asked, plan, channel_id),
        lambda _channel_id: 0,
    )

    async def clicks_answered() -> None:
        while asked.clicking:
            await asyncio.gather(*asked.clicking, return_exceptions=True)

    await quiesce(env, report, outcomes, _latest_asking(plans), tasks_before, then=clicks_answered)
    report.entries_leaked += len(stops.leaks())
    requests = api.requests[first_request:]
    for outcome in outcomes:
        channel_id, record = outcome.channel_id, outcome.record
        history = api.history(channel_id)[first_change[channel_id] :]
        hidden = thinking_only(history)
        outcome.history = [c for c in history if c.message_id not in hidden]
        public = api.messages(channel_id)[outcome.first_message :]
        mine = [m for m in public if m.id not in hidden]
        if record is not None:
            mine += record.ephemeral  # what only the asker sees (K1: error embeds)
            outcome.thinking_left = record.thinking
        outcome.messages = sorted(mine, key=lambda m: m.id)
        outcome.requests = [r for r in requests if r.channel_id == channel_id]
        outcome.ended_at = stops.unlistened.get(channel_id)
        outcome.registry_entry = stops.peek(channel_id)
        outcome.registry_entries = tuple(stops.entries(channel_id))  # the asker's slot's too
        outcome.misadmitted = env.misadmitted.get(outcome.plan.index, [])
        clicked = {c.record.id for c in outcome.clicks if c.record is not None}
        outcome.fired += [
            made
            for offered, made in stops.offers
            if offered == channel_id
            and isinstance(made.context, discord.Interaction)
            and made.context.id in clicked
        ]
        outcome.fired.sort(key=lambda f: f.at)
        judge_registry(env, outcome, report)
    env.misadmitted = {}
    await close_batch(env, report)
    return outcomes


async def interactions_phase(
    report: Report, rng: random.Random, streams: int, channels: int
) -> None:
    """`streams` streams into slash commands' interactions, `channels` at once (one per
    channel), through a real `commands.Bot` on the emulator's gateway (`local_bot`): its
    `/ask` command hands each interaction it receives to the soak (`run_interaction`)."""
    loop = asyncio.get_running_loop()
    api = emulator.DiscordEmulator()
    # discord.py reconnects when no gateway event came for `heartbeat_timeout` seconds of the
    # loop's clock, while it heartbeats on the real one: on looptime, a quiet minute would
    # make it reconnect (and resume), which is not what the soak is after.
    bot = commands.Bot(command_prefix="!", intents=discord.Intents.default(), heartbeat_timeout=1e9)
    stops = ClickRegistry(clock=loop.time, max_age=MAX_AGE)
    pending: dict[int, asyncio.Future[discord.Interaction[Any]]] = {}

    @bot.tree.command(description="Ask the model")
    async def ask(interaction: discord.Interaction[Any], question: str) -> None:
        received = pending.pop(int(question), None)
        if received is not None and not received.done():
            received.set_result(interaction)

    async with local_bot(bot, api):
        members: dict[Clicker, GuildMember] = {
            "asker": api.add_member("asker"),
            "third": api.add_member("carol"),
            "moderator": api.add_member("moderator", manage_messages=True),
        }
        ids = [api.channel_id, *(api.add_channel(f"ask-{n}") for n in range(1, channels))]
        probe = bot.get_partial_messageable(api.add_channel("ask-probe"))
        env = Env(api, StreamOrchestrator(stops), stops, [], {}, probe)
        asked = Asked(env, bot, members, ids, pending)
        index, last = report.streams, report.streams + streams
        while index < last:
            count = min(channels, last - index)
            plans = [asked_plan(rng, index + k, members["asker"].id) for k in range(count)]
            index += count
            for outcome in await run_asked_batch(asked, plans, report):
                tally(report, outcome)
            report.batches += 1
