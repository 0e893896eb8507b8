"""The four phases, in order, from one seeded Random, on one looptime loop (`soak`).

*faults* (the emulator's rate limits off), *real limits* (the same kind of plans under
Discord's real rate limits), *answers* (clean 3-line answers all at once at the global limit,
`answers_phase`: every one must arrive whole, F4) and *interactions* (`interactions_phase`).
Each phase has its own emulator and client; a phase of 0 streams is skipped. Wall time is
`time.perf_counter()` around the whole run; each phase's real and virtual seconds are kept.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

import discord
import looptime

from cordstream.shell import (
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
)
from cordstream.shell.testing import emulator
from tests.soak.checks import STREAM_LIMIT, check_answer
from tests.soak.faults import SoakProvider, Step
from tests.soak.interactions import interactions_phase
from tests.soak.plans import LIVE_SHARE, TIMEOUT, make_answer, make_plans
from tests.soak.report import Report, tally
from tests.soak.run import MAX_AGE, Env, environment, probe_client, run_batch
from tests.support.oracle import (
    TimedRegistry,
    leftover_tasks,
)


async def run_phase(
    report: Report,
    rng: random.Random,
    streams: int,
    channels: int,
    limits: emulator.RateLimits | None,
) -> None:
    """`streams` streams in batches of `channels`, their plans drawn from `rng`."""
    async with environment(channels, rate_limits=limits) as env:
        index = report.streams
        last = index + streams
        while index < last:
            count = min(channels, last - index)
            plans = make_plans(rng, index, count)
            index += count
            for outcome in await run_batch(env, plans, report):
                tally(report, outcome)
            report.batches += 1
        report.rate_limit_hits.update(env.api.rate_limit_hits)


async def answers_phase(report: Report, rng: random.Random, streams: int) -> None:
    """`streams` 3-line answers at once, each into its own channel, under Discord's real rate
    limits (50 requests per second for the bot), live (60%) or as messages: every one must end
    `completed`, with its three lines in order in its channel and in `accumulated_text` (F4),
    and no live answer's message request may be answered 429 by its channel's limit (L2)."""
    loop = asyncio.get_running_loop()
    tasks_before = set(asyncio.all_tasks())
    async with emulator.local_discord() as (api, client, _):
        ids = [api.channel_id, *(api.add_channel(f"answers-{n}") for n in range(1, streams))]
        channels = [client.get_partial_messageable(c, type=discord.ChannelType.text) for c in ids]
        probe = client.get_partial_messageable(api.add_channel("answers-probe"))
        stops = TimedRegistry(clock=loop.time, max_age=MAX_AGE)
        orchestrator = StreamOrchestrator(stops)
        plans = [make_answer(rng, n) for n in range(streams)]
        configs = [
            StreamConfig(
                delivery="live" if rng.random() < LIVE_SHARE else "messages",
                inactivity_timeout=TIMEOUT,
            )
            for _ in plans
        ]
        api.rate_limits = emulator.RateLimits()

        async def answer(
            steps: tuple[Step, ...], config: StreamConfig, channel: discord.PartialMessageable
        ) -> object:
            try:
                return await orchestrator.stream_to_discord(
                    SoakProvider(steps), config, StreamContext(channel)
                )
            except Exception as error:
                return error

        tasks = [
            loop.create_task(answer(steps, config, channel))
            for (_, steps), config, channel in zip(plans, configs, channels, strict=True)
        ]
        done, stuck = await asyncio.wait(tasks, timeout=STREAM_LIMIT) if tasks else (set(), set())
        for task in stuck:
            task.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)
        report.stuck_streams += len(stuck)
        requests: dict[int, list[emulator.RecordedRequest]] = {}
        for request in api.requests:
            if request.channel_id is not None:
                requests.setdefault(request.channel_id, []).append(request)
        for (lines, _), config, channel_id, task in zip(plans, configs, ids, tasks, strict=True):
            report.answers += 1
            got = task.result() if task in done else None
            sent = api.messages(channel_id)
            if isinstance(got, BaseException):
                report.exceptions_escaped += 1
            problem = check_answer(lines, got, sent)
            if config.delivery == "live":
                report.live_answers += 1
                limited = [r for r in requests.get(channel_id, []) if r.rate_limited == "route"]
                report.live_429s += len(limited)
                if limited and problem is None:
                    problem = f"{len(limited)} requests answered 429 by the channel's limit"
            if problem is not None:
                report.answers_lost += 1
                if len(report.samples) < 20:
                    report.samples.append(f"answer in channel {channel_id}: {problem}")
            report.messages_accepted += sum(1 for m in sent if not m.embeds)
            report.embeds_accepted += sum(1 for m in sent if m.embeds)
        report.leaked_listeners += stops.listening()
        report.rate_limit_hits.update(f"answers {k}" for k in api.rate_limit_hits.elements())
        env = Env(api, orchestrator, stops, [], {}, probe)
        if not await probe_client(env):
            report.wedged_clients += 1
            report.samples.append("answers: a probe send did not complete (B11)")
    leftover = leftover_tasks(tasks_before)
    report.leaked_tasks += len(leftover)
    report.leaked_task_names.extend(leftover)


async def soak_async(
    streams: int,
    seed: int,
    channels: int,
    *,
    limited: int = 0,
    limited_channels: int = 200,
    answers: int = 0,
    interactions: int = 0,
    interaction_channels: int = 20,
) -> Report:
    """The four phases: `streams` streams under faults, `channels` at once, with Discord's
    limits off; `limited` streams under the same faults, `limited_channels` at once, with
    Discord's real rate limits on; `answers` clean 3-line answers all at once under them;
    `interactions` streams into slash commands' interactions, `interaction_channels` at
    once, through a bot on the emulator's gateway."""
    report = Report(seed=seed, channels=channels)
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    started = loop.time()
    phases: list[tuple[str, int, Callable[[], Awaitable[None]]]] = [
        ("faults", streams, lambda: run_phase(report, rng, streams, channels, None)),
        (
            "real limits",
            limited,
            lambda: run_phase(report, rng, limited, limited_channels, emulator.RateLimits()),
        ),
        ("answers", answers, lambda: answers_phase(report, rng, answers)),
        (
            "interactions",
            interactions,
            lambda: interactions_phase(report, rng, interactions, interaction_channels),
        ),
    ]
    for name, count, run in phases:
        if not count:
            continue
        wall, virtual, before = time.perf_counter(), loop.time(), report.streams
        await run()
        if name == "real limits":
            report.limited_streams += report.streams - before
        report.phases[name] = (
            f"{count} streams, {time.perf_counter() - wall:.1f} s real, "
            f"{loop.time() - virtual:,.1f} s virtual"
        )
    report.virtual_seconds = loop.time() - started
    return report


def soak(
    streams: int = 5000,
    seed: int = 0,
    channels: int = 8,
    *,
    limited: int = 0,
    limited_channels: int = 200,
    answers: int = 0,
    interactions: int = 0,
    interaction_channels: int = 20,
) -> Report:
    """Run the soak on a looptime loop; the report has the real seconds it took."""
    counts = (streams, limited, answers, interactions)
    if min(counts) < 0 or min(channels, limited_channels, interaction_channels) < 1:
        raise ValueError("stream counts must be >= 0 and channel counts >= 1")
    wall = time.perf_counter()
    with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        report = runner.run(
            soak_async(
                streams,
                seed,
                channels,
                limited=limited,
                limited_channels=limited_channels,
                answers=answers,
                interactions=interactions,
                interaction_channels=interaction_channels,
            )
        )
    report.wall_seconds = time.perf_counter() - wall
    return report
