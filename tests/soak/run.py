"""Running plans: streams in batches on one emulator and client, and what each batch leaves.

`environment` sets up the emulator's channels, a logged-in client and an orchestrator on a
registry on the loop's virtual clock. `run_stream` makes one `stream_to_discord` call with its
plan's faults, requests (`fire`), deletion and caller, and records its `Outcome`; it never
raises. `run_batch` runs one batch (one stream per channel, or a group sharing one), waits
until every request has fired and what cancelled calls handed over has ended (`quiesce`),
counts leaked tasks and listeners, attributes a shared channel's messages (`attribute`),
judges the registry's entries (`judge_registry`, `judge_answers`, `distribute`) and probes
the client (`probe_client`: a wedged client is a must-be-zero figure).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Final, cast

import discord

from cordstream.shell import (
    StreamContext,
    StreamOrchestrator,
    ratelimit,
)
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing import emulator
from tests.soak.checks import STREAM_LIMIT, admissible, holders
from tests.soak.faults import SoakProvider
from tests.soak.outcome import Outcome, outcome_of
from tests.soak.plans import Plan
from tests.soak.report import Report, _sample, target_label
from tests.support.oracle import (
    Fired,
    Request,
    TimedRegistry,
    entry_explained,
    leftover_tasks,
    request_reaches,
)

PROBE_LIMIT: Final = 120.0  # a probe send after a batch not done within this: a wedged client
BACKGROUND_LIMIT: Final = 120.0  # requests handed over to the background end within this
# No registry entry ages out (C8) before its batch is judged, however long the batch lasts (a
# stuck one lasts STREAM_LIMIT): C8 has tests of its own.
MAX_AGE: Final = 10 * (STREAM_LIMIT + PROBE_LIMIT)


@dataclass
class Env:
    api: emulator.DiscordEmulator
    orchestrator: StreamOrchestrator
    stops: TimedRegistry
    channels: list[discord.TextChannel]
    reply_ids: dict[int, int]
    probe: discord.abc.Messageable | None = None  # a channel of its own, for `probe_client`
    killing: bool = False  # the soak cancels the stuck streams of a batch
    # The batch's `answer_group` requests, by group (`Plan.group`), as made; the requests
    # whose acceptance was not C3's and C9's, by the index of the plan that made them.
    made: dict[int, list[Fired]] = field(default_factory=dict)
    misadmitted: dict[int, list[str]] = field(default_factory=dict)


def _raiser() -> None:
    raise RuntimeError("heartbeat failed")


def fire(env: Env, channel_id: int, plan: Plan, request: Request, made: list[Fired]) -> None:
    """Make `request` in `plan`'s name, as a bot does (C2, C3, C9): a stop (aimed at an
    answer or channel-wide), a follow-up, or `interrupt_own_answer`; note it in `made`, with
    the entry it registered and those it removed, and whether its acceptance is what C3 and
    C9 say (`admissible`; else `Env.misadmitted`)."""
    orchestrator, stops = env.orchestrator, env.stops
    context = f"context-{plan.index}-{len(made)}"
    before = stops.entries(channel_id)
    replaced = stops.peek(channel_id)
    expected = admissible(stops, channel_id, request, before)
    seq = stops.tick()
    if request.kind == "stop":
        accepted = orchestrator.request_stop(
            channel_id, request.requester, context, answering=request.answering
        )
    elif request.own:
        accepted = orchestrator.interrupt_own_answer(channel_id, int(request.requester or 0))
    else:
        accepted = orchestrator.request_follow_up(channel_id, request.requester or "user-2")
    after = stops.entries(channel_id)
    entry = next((e for e in after if not any(e is b for b in before)), None)
    displaced = tuple(b for b in before if not any(b is a for a in after))
    at = asyncio.get_running_loop().time()
    made.append(Fired(request, at, accepted, context, replaced, entry, displaced, seq))
    if accepted != expected:
        verdict = "accepted" if accepted else "refused"
        env.misadmitted.setdefault(plan.index, []).append(f"{request} {verdict} at {at:.4f}")


async def run_stream(env: Env, plan: Plan, channel: discord.TextChannel) -> Outcome:
    """One `stream_to_discord` call with its faults and requests, made the way `plan.caller`
    says; never raises (but for the soak's own cancellation of a stuck stream)."""
    loop = asyncio.get_running_loop()
    api, orchestrator = env.api, env.orchestrator
    provider = SoakProvider(
        plan.steps, headline=plan.headline, cleanup=plan.cleanup, reaction=plan.reaction
    )
    outcome = outcome_of(plan, channel.id, env.reply_ids[channel.id], provider)
    # An answer group's requests are the group's: `distribute` gives each stream its own.
    group = plan.group if plan.per_answer else None
    made = env.made.setdefault(group, []) if group is not None else outcome.fired

    def make(request: Request) -> None:
        fire(env, channel.id, plan, request, made)

    for _, fault, route, times in plan.faults:
        api.inject(fault, route=route, times=times, channel_id=channel.id)
    for request in plan.requests:
        if request.when == "before" and not plan.per_answer:  # a group's: made by run_batch
            make(request)
        elif request.when == "during":
            loop.call_later(request.at, make, request)
    first_message = len(api.messages(channel.id))

    def delete() -> None:
        """A moderator deletes the stream's newest message (L9)."""
        outcome.deleter = None
        mine = [m for m in api.messages(channel.id)[first_message:] if not m.embeds]
        if not mine:
            outcome.nothing_to_delete = True
            return
        api.delete_message(mine[-1].id, channel_id=channel.id)
        outcome.deleted_at = loop.time()

    def created(change: emulator.Change) -> None:
        """The stream's first message exists: the moderator deletes `delete_at` later."""
        if change.channel_id == channel.id and change.kind == "create" and not change.embeds:
            unlisten()
            if plan.delete_at is not None:
                outcome.deleter = loop.call_later(plan.delete_at, delete)

    listeners: list[Callable[[], None]] = []

    def unlisten() -> None:
        while listeners:
            listeners.pop()()

    if plan.delete_at is not None:
        listeners.append(api.on_change(created))
    context = StreamContext(
        channel,
        reply_to=channel.get_partial_message(outcome.reply_id) if plan.reply else None,
        suppress_user_errors=plan.suppress,
        on_stream_progress=_raiser if plan.progress_raises else None,
        answering=plan.answering,
    )

    async def call() -> None:
        """The bot's await; in a task of its own for a `cancel` caller."""
        task = asyncio.current_task()
        assert task is not None
        outcome.cancelling_before = task.cancelling()
        try:
            if plan.caller == "timeout":
                timeout = asyncio.timeout(plan.caller_at)
                try:
                    async with timeout:
                        outcome.result = await orchestrator.stream_to_discord(
                            provider, plan.config, context
                        )
                except TimeoutError:
                    outcome.timed_out = True
                finally:
                    outcome.timeout_expired = outcome.cancel_delivered = timeout.expired()
                    outcome.interrupted_at = timeout.when()
            else:
                outcome.result = await orchestrator.stream_to_discord(
                    provider, plan.config, context
                )
        except asyncio.CancelledError:
            outcome.caller_cancelled = True
            outcome.handed_over = ratelimit.background_requests() > 0
            raise
        finally:
            outcome.cancelling_after = task.cancelling()
            outcome.done_at = loop.time()
            outcome.provider_running = provider.running

    try:
        if plan.start_at:
            await asyncio.sleep(plan.start_at)  # an answer group's latecomer
        if plan.caller == "cancel":
            await cancelled_call(outcome, loop.create_task(call()), channel)
        else:
            await call()
    except asyncio.CancelledError as error:
        if env.killing:
            unlisten()
            if outcome.deleter is not None:
                outcome.deleter.cancel()
            raise  # the soak's own stuck-stream cancellation
        if not (plan.caller == "timeout" and outcome.timeout_expired):
            outcome.escaped = error  # (a timeout's, instead of TimeoutError: `check_caller`)
    except Exception as error:
        outcome.escaped = error
    for request in plan.requests:
        if request.when == "after":
            loop.call_later(request.at, make, request)
    if listeners:  # no message when the call returned: the moderator has nothing to delete
        unlisten()
        outcome.nothing_to_delete = True
    return outcome


async def cancelled_call(
    outcome: Outcome, task: asyncio.Task[None], channel: discord.abc.Messageable
) -> None:
    """Cancel the call's `task` `plan.caller_at` seconds after it started, unless it is done
    by then; note whether discord.py was waiting out a global 429 at that moment."""
    loop = asyncio.get_running_loop()

    def cancel() -> None:
        if task.done():
            return
        gate = ratelimit.discord_global_gate(channel)
        outcome.in_global_wait = isinstance(gate, asyncio.Event) and not gate.is_set()
        outcome.interrupted_at = loop.time()
        outcome.cancel_delivered = task.cancel()

    handle = loop.call_later(outcome.plan.caller_at, cancel)
    try:
        await asyncio.wait((task,))
    except asyncio.CancelledError:  # the soak's stuck-stream cancellation: pass it on
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    finally:
        handle.cancel()
    if task.cancelled():
        if outcome.done_at == 0.0:  # cancelled before its first step: the call was not made
            outcome.caller_cancelled = True
            outcome.cancelling_after = outcome.cancelling_before + 1
            outcome.done_at = loop.time()
        if not outcome.cancel_delivered:
            outcome.escaped = asyncio.CancelledError("out of the call, but nobody cancelled")
        return
    error = task.exception()
    if error is not None:
        outcome.escaped = error


def _latest_request(plans: Sequence[Plan]) -> float:
    """How long after a batch started its last scheduled request or deletion happens, at most."""
    moments = [r.at for p in plans for r in p.requests]
    moments += [p.delete_at for p in plans if p.delete_at is not None]
    return max(moments, default=0.0)


def attribute(members: Sequence[Outcome]) -> None:
    """Give each stream of a group sharing a channel its own messages and their history, as
    the oracle judges one stream: the channel's messages, in order, each claimed by the one
    stream whose `messages` list it (F2), in the order listed. The channel's messages no
    stream claims (and any embed: the group's streams suppress them) go to the first stream,
    whose transcript then differs from its result (a violation). Every stream keeps all the
    channel's requests (its checks are the same for the group: one config, no fault)."""
    channel = list(members[0].messages)
    claims: list[list[emulator.SentMessage]] | None = None
    for order in itertools.permutations(range(len(members))):
        claimed = _claim(channel, [members[i] for i in order])
        if claimed is not None:
            claims = [[] for _ in members]
            for position, i in enumerate(order):
                claims[i] = claimed[position]
            break
    if claims is None:  # no consistent reading: the greedy one, the rest to the first
        claims = _claim(channel, list(members), partial=True) or [[] for _ in members]
    taken = {m.id for claim in claims for m in claim}
    claims[0] += [m for m in channel if m.id not in taken]
    claims[0].sort(key=lambda m: m.id)
    history = members[0].history
    for outcome, claim in zip(members, claims, strict=True):
        ids = {m.id for m in claim}
        outcome.messages = claim
        outcome.history = [c for c in history if c.message_id in ids]


def _claim(
    channel: Sequence[emulator.SentMessage], members: Sequence[Outcome], *, partial: bool = False
) -> list[list[emulator.SentMessage]] | None:
    """Each stream's messages, claimed in `members`' order: each stream's `messages`, in
    order, the first unclaimed channel messages with those contents after its previous one.
    None when one cannot be found (unless `partial`), or when some message is left over."""
    taken: set[int] = set()
    claims: list[list[emulator.SentMessage]] = []
    for outcome in members:
        wanted = outcome.result.messages if outcome.result is not None else ()
        claim: list[emulator.SentMessage] = []
        after = -1
        for content in wanted:
            found = next(
                (
                    m
                    for m in channel
                    if m.id > after and m.id not in taken and not m.embeds and m.content == content
                ),
                None,
            )
            if found is None:
                if partial:
                    continue
                return None
            claim.append(found)
            taken.add(found.id)
            after = found.id
        claims.append(claim)
    if not partial and len(taken) != len(channel):
        return None
    return claims


def assign_channels(
    plans: Sequence[Plan], channels: Sequence[discord.TextChannel]
) -> list[discord.TextChannel]:
    """A channel for each plan: one of its own, or its group's (`Plan.group`)."""
    free = iter(channels)
    shared: dict[int, discord.TextChannel] = {}
    assigned: list[discord.TextChannel] = []
    for plan in plans:
        if plan.group is None:
            assigned.append(next(free))
        else:
            if plan.group not in shared:
                shared[plan.group] = next(free)
            assigned.append(shared[plan.group])
    return assigned


async def run_batch(env: Env, plans: Sequence[Plan], report: Report) -> list[Outcome]:
    api, stops = env.api, env.stops
    tasks_before = set(asyncio.all_tasks())
    first_request = len(api.requests)
    first_message = {c.id: len(api.messages(c.id)) for c in env.channels}
    first_change = {c.id: len(api.history(c.id)) for c in env.channels}
    channels = assign_channels(plans, env.channels)
    env.made, env.misadmitted = {}, {}
    for plan, channel in zip(plans, channels, strict=True):  # before any stream starts (B4)
        if plan.per_answer and plan.group is not None:
            made = env.made.setdefault(plan.group, [])
            for request in plan.requests:
                if request.when == "before":
                    fire(env, channel.id, plan, request, made)
    by_channel = {c.id: c for c in channels}
    outcomes = await run_streams(
        env,
        plans,
        [c.id for c in channels],
        lambda plan, channel_id: run_stream(env, plan, by_channel[channel_id]),
        lambda channel_id: env.reply_ids[channel_id],
    )
    await quiesce(env, report, outcomes, _latest_request(plans), tasks_before)
    requests = api.requests[first_request:]
    groups: dict[int, list[Outcome]] = {}
    for outcome in outcomes:
        plan, channel_id = outcome.plan, outcome.channel_id
        outcome.ended_at = stops.unlistened.get(channel_id)
        outcome.messages = api.messages(channel_id)[first_message[channel_id] :]
        outcome.history = api.history(channel_id)[first_change[channel_id] :]
        outcome.requests = [r for r in requests if r.channel_id == channel_id]
        outcome.registry_entry = stops.peek(channel_id)
        outcome.misadmitted = env.misadmitted.get(plan.index, [])
        if plan.group is not None:
            outcome.ended_at = None  # the channel's, not this stream's: its return stands in
            groups.setdefault(plan.group, []).append(outcome)
        if plan.per_answer:  # its own reader's (C9)
            outcome.opened = stops.opened.get((channel_id, plan.answering))
            closed = stops.closed.get((channel_id, plan.answering))
            if closed is not None:
                outcome.closed, outcome.ended_at = closed
            outcome.registry_entry = None
    leaks = stops.leaks()  # owed to, or consumed by, a stream although none runs
    report.entries_leaked += len(leaks)
    if leaks and len(report.samples) < 20:
        report.samples.append(f"batch {report.batches}: registry entries leaked: {leaks}")
    for outcome in outcomes:
        if not outcome.plan.per_answer:
            judge_registry(env, outcome, report)
    for members in groups.values():
        if members[0].plan.per_answer:
            distribute(env, members)
            judge_answers(env, members, report)
        attribute(members)
    api.clear_faults()
    await close_batch(env, report)
    return outcomes


async def run_streams(
    env: Env,
    plans: Sequence[Plan],
    channel_ids: Sequence[int],
    run: Callable[[Plan, int], Coroutine[Any, Any, Outcome]],
    reply_id: Callable[[int], int],
) -> list[Outcome]:
    """Each plan's stream (`run(plan, channel_id)`) in a task of its own, all at once; those
    still running after STREAM_LIMIT are cancelled, and their outcomes say `stuck`."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(run(p, c)) for p, c in zip(plans, channel_ids, strict=True)]
    done, stuck = await asyncio.wait(tasks, timeout=STREAM_LIMIT)
    env.killing = True
    for task in stuck:
        task.cancel()
    await asyncio.gather(*stuck, return_exceptions=True)
    env.killing = False
    outcomes: list[Outcome] = []
    for plan, channel_id, task in zip(plans, channel_ids, tasks, strict=True):
        if task in done:
            outcomes.append(task.result())
        else:
            outcome = outcome_of(plan, channel_id, reply_id(channel_id), SoakProvider(()))
            outcome.stuck = True
            outcomes.append(outcome)
    return outcomes


async def quiesce(
    env: Env,
    report: Report,
    outcomes: Sequence[Outcome],
    latest: float,
    tasks_before: set[asyncio.Task[Any]],
    *,
    then: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Before a batch is judged: every request scheduled during or after a stream fires
    (`latest` seconds after the last result at most), then what `then` waits for; requests a
    cancelled call handed over (discord.py was waiting out a global 429) end once its lock
    opens, and any still running after BACKGROUND_LIMIT is counted as leaked. Then a request a
    cancelled call had already sent, which Discord still answers (here: one the emulator
    delays) and may accept after the call, lands in this batch's window, not in the next
    stream's on that channel. Leaked tasks and registry listeners are counted."""
    loop = asyncio.get_running_loop()
    last = max(o.done_at for o in outcomes) + latest + 0.001
    if last > loop.time():
        await asyncio.sleep(last - loop.time())
    if then is not None:
        await then()
    try:
        async with asyncio.timeout(BACKGROUND_LIMIT):
            await ratelimit.drain_background()
            await env.api.idle()
    except TimeoutError:
        pass
    leftover = leftover_tasks(tasks_before)
    report.leaked_tasks += len(leftover)
    report.leaked_task_names.extend(leftover)
    report.leaked_listeners += env.stops.listening()


async def close_batch(env: Env, report: Report) -> None:
    """The registry forgets the batch, and a probe send checks the client still works (B11)."""
    env.stops.forget()
    if not await probe_client(env):
        report.wedged_clients += 1
        report.samples.append(f"batch {report.batches}: a probe send did not complete (B11)")


async def probe_client(env: Env) -> bool:
    """Whether a send through the batch's `discord.Client`, on a channel no stream used,
    completes within PROBE_LIMIT (virtual) seconds: a caller's cancellation during a global
    429 wait must not have wedged the client (B11). The probe waits for its turn under
    cordstream's pacing, as the bot's own requests should (`cordstream.shell.ratelimit`): sent
    at once, it would be a 51st request in the second the next batch's streams start in."""
    if env.probe is None:
        return True
    try:
        async with asyncio.timeout(PROBE_LIMIT):
            await ratelimit.pacer().acquire()
            await env.probe.send("probe")
    except TimeoutError:
        return False
    return True


def judge_registry(env: Env, outcome: Outcome, report: Report) -> None:
    """Count each entry left for the channel as stale (explained) or unexplained; clean them."""
    for entry in env.stops.entries(outcome.channel_id):
        # A stuck stream (cancelled by the soak, counted as such) resolved nothing.
        if entry_explained(outcome, entry) or outcome.stuck:
            report.stale_requests_discarded += 1
        else:
            report.unexplained_registry_entries += 1
            _sample(report, outcome, f"registry entry {entry.kind} at {entry.at} left (C5)")
    env.orchestrator.discard_requests(outcome.channel_id)


def distribute(env: Env, members: Sequence[Outcome]) -> None:
    """Give each stream of an answer group the group's requests meant for it (`holders`;
    those it took when it started count as made before it, B4), the contexts of the group's
    other accepted requests (`Outcome.foreign`), the entries left that reach it, the stops
    that decided the others' results, and label what each request did (`target_label`)."""
    stops = env.stops
    made = env.made.get(cast(int, members[0].plan.group), [])
    left = stops.entries(members[0].channel_id)
    for member in members:
        member.fired = []
    for fired in made:
        held, took = holders(stops, fired, members)
        for member in held:
            before = replace(fired.request, when="before")
            member.fired.append(replace(fired, request=before) if member in took else fired)
        members[0].targets.append(target_label(fired, held, took, members))
    by_entry = {id(f.entry): f.request for f in made if f.entry is not None}
    for member in members:
        mine = {f.context for f in member.fired}
        member.foreign = {f.context: f for f in made if f.accepted and f.context not in mine}
        member.registry_entries = tuple(
            e
            for e in left
            if id(e) in by_entry and request_reaches(by_entry[id(e)], member.plan.answering)
        )
        member.decided_elsewhere = frozenset(
            other.result.stop_context
            for other in members
            if other is not member
            and other.result is not None
            and other.result.status == "stopped_by_user"
        )


def judge_answers(env: Env, members: Sequence[Outcome], report: Report) -> None:
    """C5 per answer (C9): each entry left in an answer group's channel is stale when every
    stream it was for (`holders`) explains it (`entry_explained`: a follow-up waiting behind
    a stop, a stop after an internal one, one registered as the stream ended), or when it was
    for none (it waits for a later stream, aimed at an answer that is not streaming);
    otherwise unexplained. Then the channel is cleaned."""
    stops = env.stops
    made = env.made.get(cast(int, members[0].plan.group), [])
    for entry in stops.entries(members[0].channel_id):
        fired = next((f for f in made if f.entry is entry), None)
        if fired is None:
            report.unexplained_registry_entries += 1
            _sample(report, members[0], f"registry entry {entry} nobody made (C9)")
            continue
        held, _ = holders(stops, fired, members)
        unexplained = [m for m in held if not (m.stuck or entry_explained(m, entry))]
        if unexplained:
            report.unexplained_registry_entries += 1
            detail = f"{fired.request} at {fired.at:.4f} left in the registry (C5, C9)"
            _sample(report, unexplained[0], detail)
        else:
            report.stale_requests_discarded += 1
    env.orchestrator.discard_requests(members[0].channel_id)


@asynccontextmanager
async def environment(
    channels: int,
    orchestrator: Callable[[StopRegistry], StreamOrchestrator] = StreamOrchestrator,
    *,
    rate_limits: emulator.RateLimits | None = None,
) -> AsyncIterator[Env]:
    """The emulator with `channels` channels (a user's question in each) and a probe channel,
    a logged-in client, and an orchestrator on a registry that runs on the loop's (virtual)
    clock. `rate_limits` are switched on once the channels are set up."""
    loop = asyncio.get_running_loop()
    async with emulator.local_discord() as local:
        api = local.api
        fetched = [local.channel]
        fetched += [await local.add_channel(f"soak-{n}") for n in range(1, channels)]
        probe = await local.add_channel("soak-probe")
        reply_ids = {c.id: api.post_user_message("a question", channel_id=c.id) for c in fetched}
        stops = TimedRegistry(clock=loop.time, max_age=MAX_AGE)
        api.rate_limits = rate_limits
        yield Env(api, orchestrator(stops), stops, fetched, reply_ids, probe)
