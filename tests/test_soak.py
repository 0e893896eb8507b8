"""The soak (`bench.soak`) in short, inside `make test`, and the honesty of its checker.

- A short soak (300 streams, 8 channels at once, on looptime's virtual clock) through the
  real shell, discord.py and the emulator: every must-be-zero figure is 0, and every provider
  fault, every Discord fault, requests before/during/after a stream and most statuses
  actually occurred, so the soak cannot silently stop injecting.
- The checker is honest: fabricated outcomes that break an invariant (a transcript that is
  not what Discord accepted, a ping, a long message, an unexplained status, a registry entry
  left behind, a leaked task or listener) are counted, and a consistent one is not.
- Findings of the soak in other modules (both fixed), kept as regression tests.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest

from bench.soak import (
    FAULT_LABELS,
    Env,
    Fired,
    Outcome,
    Plan,
    Report,
    Request,
    SoakProvider,
    TimedRegistry,
    check_stream,
    environment,
    judge_registry,
    main,
    make_plan,
    run_batch,
    soak,
    tally,
)
from cordstream.domain import StreamResult, TextChunk
from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator, StreamProvider
from cordstream.shell.emulator import DiscordEmulator, Pings, SentMessage
from cordstream.shell.stops import StopRegistry
from tests.driver import Driver
from tests.stage import ScriptProvider, stage

CHANNEL = 42
REPLY = 7


# -- the short soak ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short() -> Report:
    return soak(streams=300, seed=1, channels=8)


def test_short_soak_every_must_be_zero_figure_is_zero(short: Report) -> None:
    assert short.failures() == {}, "\n".join(short.samples)
    assert short.streams == 300
    assert short.batches == 38  # 8 channels streaming at once
    assert short.wall_seconds < 20


def test_short_soak_injected_every_fault_and_saw_the_statuses(short: Report) -> None:
    provider = {"raise", "process_raise", "hang", "garbage", "error_chunk", "function_call"}
    assert provider <= {k for k, n in short.provider_faults.items() if n}
    assert set(FAULT_LABELS) <= {k for k, n in short.discord_faults.items() if n}
    assert {"before", "during", "after"} <= {k for k, n in short.user_requests.items() if n}
    statuses = {"completed", "empty_response", "error", "timeout", "stopped_by_user"}
    statuses |= {"follow_up_interrupt", "function_call"}
    assert statuses <= {k for k, n in short.statuses.items() if n}
    reasons = {"user_request", "system_request", "channel_deleted", "missing_access"}
    assert reasons <= {k for k, n in short.stop_reasons.items() if n}
    assert short.stale_requests_discarded > 0  # requests after the end: found and cleaned
    assert short.quiet_streams > 100  # streams whose exact status the checker predicted
    assert short.messages_accepted > 100
    assert short.embeds_accepted > 0


def test_the_command_line_prints_json_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--streams", "16", "--channels", "4", "--seed", "3", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"streams": 16' in out
    assert '"failed": []' in out


def test_plans_are_drawn_from_the_seed_alone() -> None:
    def plans(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [repr(make_plan(rng, i)) for i in range(50)]

    assert plans(5) == plans(5)
    assert plans(5) != plans(6)


# -- the checker is honest ---------------------------------------------------------------------


def message(content: str, *, pings: Pings | None = None, embed: bool = False) -> SentMessage:
    return SentMessage(
        id=1,
        channel_id=CHANNEL,
        content=content,
        embeds=({"title": "x"},) if embed else (),
        message_reference=None,
        allowed_mentions={"parse": []},
        pings=pings or Pings(),
        flags=0,
        at=0.0,
    )


def honest_outcome(text: str = "Hello") -> Outcome:
    """A completed stream that sent `text` in one message, as the soak records it."""
    plan = Plan(
        index=0,
        steps=(text,),
        tail="end",
        config=StreamConfig(inactivity_timeout=5.0),
        faults=(),
        requests=(),
        reply=False,
        suppress=False,
        progress_raises=False,
        headline=None,
        call=None,
    )
    provider = SoakProvider(plan.steps, None)
    provider.started_at = provider.closed_at = provider.last_chunk_at = 0.0
    provider.reached = {"end"}
    outcome = Outcome(plan, CHANNEL, REPLY, provider, done_at=1.0, ended_at=1.0)
    outcome.result = StreamResult(
        "completed", accumulated_text=text, messages_sent=1, messages=(text,)
    )
    outcome.messages = [message(text)]
    return outcome


def names(outcome: Outcome) -> set[str]:
    return {name for name, _ in check_stream(outcome)}


def test_a_consistent_outcome_has_no_violation() -> None:
    outcome = honest_outcome()
    assert check_stream(outcome) == []
    report = Report()
    tally(report, outcome)
    assert report.failures() == {}
    assert report.quiet_streams == 1


def test_a_fabricated_mismatched_transcript_is_detected_and_fails_the_soak() -> None:
    outcome = honest_outcome()
    outcome.messages = [message("Hullo")]  # Discord accepted something else
    assert "transcript" in names(outcome)
    report = Report()
    tally(report, outcome)
    assert report.transcript_mismatches == 1
    assert "transcript_mismatches" in report.failures()
    assert "invariant_violations" in report.failures()


def test_F2_a_text_glued_from_two_messages_is_a_transcript_mismatch() -> None:
    outcome = honest_outcome("one")
    outcome.messages = [message("one"), message("two")]
    outcome.result = StreamResult(
        "completed", accumulated_text="onetwo", messages_sent=2, messages=("one", "two")
    )
    violations = dict(check_stream(outcome))
    assert "transcript" in violations  # the line break between the messages is missing
    outcome.result = replace(outcome.result, accumulated_text="one\ntwo")
    assert check_stream(outcome) == []


def test_F2_result_messages_that_are_not_the_channels_are_a_transcript_mismatch() -> None:
    outcome = honest_outcome("one\ntwo")
    assert outcome.result is not None
    for messages in [(), ("one", "two"), ("one\ntwo", "three")]:
        outcome.result = replace(outcome.result, messages=messages)
        assert "transcript" in names(outcome), messages


def test_a_message_count_off_by_one_is_detected() -> None:
    outcome = honest_outcome()
    assert outcome.result is not None
    outcome.result = replace(outcome.result, messages_sent=2)
    assert "messages_sent" in names(outcome)


def test_a_ping_is_counted() -> None:
    outcome = honest_outcome("@everyone")
    outcome.messages = [message("@everyone", pings=Pings(everyone=True))]
    assert "ping" in names(outcome)
    report = Report()
    tally(report, outcome)
    assert report.pings == 1
    assert "pings" in report.failures()


def test_a_message_over_the_limit_is_detected() -> None:
    outcome = honest_outcome("y" * 2001)
    assert "too_long" in names(outcome)


def test_a_thought_that_reached_the_channel_is_detected() -> None:
    outcome = honest_outcome("THINK-SECRET")
    assert "hidden_text_sent" in names(outcome)


def test_a_status_nothing_explains_is_detected() -> None:
    outcome = honest_outcome()
    assert outcome.result is not None
    outcome.result = replace(outcome.result, status="timeout")  # but the provider never hung
    assert {"unexplained_status", "quiet_status"} <= names(outcome)


def test_a_quiet_stream_that_raised_must_be_an_error() -> None:
    outcome = honest_outcome()
    outcome.plan = replace(outcome.plan, tail="raise")
    outcome.provider.reached = {"raise"}
    assert "quiet_status" in names(outcome)


def test_a_missing_error_embed_is_detected() -> None:
    outcome = honest_outcome("")
    outcome.plan = replace(outcome.plan, tail="raise")
    outcome.provider.reached = {"raise"}
    outcome.messages = []
    outcome.result = StreamResult("error", data=ValueError("x"))
    assert names(outcome) == {"embeds"}
    outcome.messages = [message("", embed=True)]
    assert check_stream(outcome) == []


def test_an_ignored_request_is_detected() -> None:
    outcome = honest_outcome()
    stop = Request("stop", "user-1", "during", 0.5)
    outcome.fired = [Fired(stop, 0.5, True, "context-0-0")]
    assert "request_ignored" in names(outcome)


def test_an_escaped_exception_is_counted() -> None:
    outcome = honest_outcome()
    outcome.result, outcome.escaped = None, RuntimeError("escaped")
    report = Report()
    tally(report, outcome)
    assert report.exceptions_escaped == 1
    assert "exceptions_escaped" in report.failures()


def judge(kind: str, at: float, status: str) -> Report:
    """Leave a `kind` entry registered at `at` after a stream that ended at 10 with
    `status`, and judge the registry as the soak does."""
    now = [at]
    stops = TimedRegistry(lambda: now[0])
    env = Env(DiscordEmulator(), StreamOrchestrator(stops), stops, [], {})
    if kind == "stop":
        stops.request_stop(CHANNEL, "user-1")
    else:
        stops.request_follow_up(CHANNEL, "user-2")
    now[0] = 20.0
    outcome = honest_outcome()
    outcome.ended_at = 10.0
    outcome.result = StreamResult(status)  # type: ignore[arg-type]  # test knob
    report = Report()
    judge_registry(env, outcome, report)
    assert stops.peek(CHANNEL) is None  # cleaned either way
    return report


def test_an_entry_registered_before_the_end_is_unexplained() -> None:
    report = judge("stop", 5.0, "completed")
    assert report.unexplained_registry_entries == 1
    assert "unexplained_registry_entries" in report.failures()


def test_an_entry_registered_after_the_end_is_stale_not_a_leak() -> None:
    report = judge("stop", 12.0, "completed")
    assert (report.stale_requests_discarded, report.unexplained_registry_entries) == (1, 0)


def test_a_follow_up_waiting_behind_a_stop_is_stale_not_a_leak() -> None:
    report = judge("follow_up", 5.0, "stopped_by_user")
    assert (report.stale_requests_discarded, report.unexplained_registry_entries) == (1, 0)


class LeakyOrchestrator(StreamOrchestrator):
    """Leaves a task and a registry listener behind on every stream."""

    def __init__(self, stops: StopRegistry) -> None:
        super().__init__(stops)
        self.leaked: list[asyncio.Task[Any]] = []

    async def stream_to_discord(
        self, provider: StreamProvider[Any], config: StreamConfig, context: StreamContext
    ) -> StreamResult:
        self.leaked.append(asyncio.get_running_loop().create_task(asyncio.Event().wait()))
        self.stops.listen(getattr(context.channel, "id", 0), lambda: None)
        return await super().stream_to_discord(provider, config, context)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_leaked_tasks_and_listeners_are_counted() -> None:
    report = Report()
    async with environment(3, LeakyOrchestrator) as env:
        rng = random.Random(0)
        outcomes = await run_batch(env, [make_plan(rng, i) for i in range(3)], report)
        assert len(outcomes) == 3
        leaky = env.orchestrator
        assert isinstance(leaky, LeakyOrchestrator)
        for task in leaky.leaked:
            task.cancel()
        await asyncio.gather(*leaky.leaked, return_exceptions=True)
    assert report.leaked_tasks == 3
    assert report.leaked_listeners == 3
    assert all("Event.wait" in name for name in report.leaked_task_names)


# -- findings, pinned --------------------------------------------------------------------------


def _smuggled_text_chunk() -> TextChunk:
    """A chunk whose content was set to None after validation (a broken adapter): `step`
    raises TypeError on it, inside the shell's reading loop."""
    chunk = TextChunk("x")
    object.__setattr__(chunk, "content", None)
    return chunk


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_F2_a_message_in_flight_when_the_core_fails_is_in_the_result() -> None:
    async with stage() as s:
        provider = ScriptProvider(["Hello\n", "World", _smuggled_text_chunk()])
        result = await s.stream(provider)
        assert result.status == "error"
        assert s.contents == ["Hello"]  # Discord accepted the first line
        assert result.accumulated_text == "Hello"  # F2
        assert result.messages_sent == 1
        assert len(s.embeds) == 1  # B13: the generic error embed


def test_E4_a_think_block_after_an_overflow_cut_through_inline_code_is_not_sent() -> None:
    driver = Driver(config=StreamConfig(humanizer_degree=1))
    driver.start()
    driver.text("y" * 1001 + "`x`", "<think>SECRET</think>z")
    result = driver.end()
    assert not any("SECRET" in m for m in driver.messages), driver.messages
    assert result.thought_log is not None
    assert result.thought_log.raw == "SECRET"
