"""A hypothesis state machine driving the real shell against the Discord emulator (SPEC B, C, F).

Hypothesis cannot run `async def` rules, so each machine owns one `asyncio.Runner` whose loop
is a looptime loop (`looptime.new_event_loop`, time compaction on from creation): the
emulator, a logged-in discord.py client and the orchestrator live in that loop for the whole
machine, and every sync rule runs one coroutine in it. Sleeps, hangs, inactivity timeouts,
429 waits, slow replies and discord.py's 5xx backoff cost no real time, and "within 50 ms"
is exact.

Rules: queue Discord faults for the next requests; run one stream with a random provider
script, config (live delivery, SPEC L, or messages delivery, each with its own knobs),
context, stop/follow-up requests at random moments (one maybe registered before the stream),
maybe a moderator deleting the stream's newest message (live delivery, L9), and maybe the
caller cancelling it. After each run, `check_run` holds:
the invariants the soak checks too, from their one home, `tests/support/oracle.py` (one result or,
only when the caller cancelled, `CancelledError`; the result's `anomalies` empty; the
provider closed at once on a request, a cancel or the deadline; `messages` the transcript of
the accepted messages and `accumulated_text` their join by "\\n" (F2); sizes, mentions,
replies, embeds; stops never lost; every status explained, and a quiet stream's status the
one its script predicts, `expected_ending`; and for live delivery, from the channel's history,
what each message shows only grows, no cursor is left behind, fences are balanced, a deletion
the stream finds ends it as `message_deleted`), and no task, listener or resolved registry
entry left. The oracle's known defects (`oracle.KNOWN_DEFECTS`, fix pending) are noted as
events, not failures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar

import looptime
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from cordstream import domain
from cordstream.shell import StreamConfig, StreamResult
from cordstream.shell.testing import emulator
from tests.support import oracle
from tests.support.fuzz import examples
from tests.support.stage import Hang, ScriptProvider, Sleep, Stage, Step, stage

# A stream in these tests ends well within this (virtual) time, or it is stuck.
RUN_LIMIT: Final = 900.0
# After a run, wait this long (virtual) so that a slow reply the stream gave up on lands now.
SETTLE: Final = 60.0
MAX_PENDING_FAULTS: Final = 4
USER_ID: Final = 123456789012345678

T = TypeVar("T")


# -- what the test records -----------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    raise_in_process: Exception | None
    config: StreamConfig
    requests: tuple[oracle.Request, ...]  # at moments after the stream started
    before: oracle.Request | None  # registered before the stream starts (B4)
    cancel_at: float | None  # the caller cancels its task then
    reply: bool
    suppress: bool
    delete_at: float | None = None  # live delivery: a moderator deletes the newest message


@dataclass(kw_only=True)
class Run(oracle.Observed):
    """Everything one run produced: what the oracle judges
    (`tests.support.oracle.Observed`), and the tasks and registry listeners it left."""

    plan: Plan
    leftover: list[str]  # tasks left running
    listening: int
    stuck: bool = False  # not done within RUN_LIMIT: the test cancelled it


def expected_ending(plan: Plan) -> frozenset[str] | None:
    """The statuses the script ends in when nothing intervenes (`Observed.expected`); None
    when that depends on timing (a pause within BOUND of the inactivity timeout)."""
    timeout = plan.config.inactivity_timeout
    silence = 0.0
    for step in plan.steps:
        if isinstance(step, Sleep):
            silence += step.seconds
            if silence > timeout + oracle.BOUND:
                return oracle.ENDING_STATUSES["hang"]
            if silence >= timeout - oracle.BOUND:
                return None
            continue
        silence = 0.0  # anything else ends the silence, or the stream
        match step:
            case Hang():
                return oracle.ENDING_STATUSES["hang"]
            case BaseException() | domain.ErrorChunk(error=domain.ProviderError()):
                return oracle.ENDING_STATUSES["error"]
            case _ if plan.raise_in_process is not None:
                return oracle.ENDING_STATUSES["error"]
            case domain.FunctionCallChunk() if step.calls:
                return oracle.ENDING_STATUSES["function_call"]
            case str() | domain.TextChunk() | domain.DoneChunk():
                pass  # text, or a chunk the stream goes on after
            case domain.ErrorChunk() | domain.FunctionCallChunk():
                pass  # without an error or a call: the stream goes on
            case _:  # garbage: not a chunk (B13)
                return oracle.ENDING_STATUSES["error"]
    return oracle.ENDING_STATUSES["end"]


# -- strategies --------------------------------------------------------------------------------

TEXTS: Final = (
    "Hello ",
    "world. ",
    "A whole line.\n",
    "\n",
    "",
    "```python\n",
    "print('hi')\n",
    "x = [1, 2, 3]\n",
    "```\n",
    "```",
    "<think>",
    "private reasoning ",
    "</think>",
    "<thinking>a plan</thinking>\n",
    "<details><summary>Sources</summary>a, b</details>",
    "@everyone look at this\n",
    "@here ",
    f"<@{USER_ID}> hi\n",
    "<@&987654321098765432> ",
    "😀",
    "👨‍👩‍👧 family\n",
    "🇫🇷🇯🇵",
    "e\u0301",
    "嗯\n",
    *oracle.PROSE_TRAPS,
    "| a | b |\n|---|---|\n",
    "Dr. Smith paid $3.50. Then left! ",
)

long_texts = st.builds(
    lambda word, n: (word + " ") * n,
    st.sampled_from(["word", "émoji😀", "@everyone", "longwordwithoutanyspaces" * 4]),
    st.integers(20, 250),
) | st.builds(lambda n: "y" * n, st.integers(500, 2600))

# Live delivery's cursors (`configs`): the default, one glued to the text, an emoji, none.
CURSORS: Final = (" \u258c", "\u258c", " \u23f3", "")

texts = st.one_of(
    st.sampled_from(TEXTS),
    st.sampled_from(TEXTS),
    st.text(
        st.characters(
            codec="utf-8",
            categories=("L", "N", "P", "S", "Zs"),
            exclude_characters="\u258c\u23f3",  # text ending like a cursor is not one
        ),
        max_size=30,
    ),
    long_texts,
)

sleeps = st.integers(1, 16).map(lambda n: Sleep(n / 2))


def sometimes(strategy: st.SearchStrategy[T], one_in: int) -> st.SearchStrategy[T | None]:
    """`strategy` about once in `one_in` draws, else None."""
    draws = st.sampled_from(range(one_in))  # the simplest draw, 0, is the common case
    return draws.flatmap(lambda n: strategy if n == one_in - 1 else st.none())


# Raw items that are chunks already: `process_chunk` returns them unchanged. These let the
# stream go on (keep-alive with usage, thoughts, metadata, empty calls and errors: ignored) ...
GOING_ON: Final[tuple[object, ...]] = (
    domain.TextChunk("", usage={"prompt_tokens": 3, "completion_tokens": 4}),
    domain.TextChunk("thinking", thoughts=(domain.Thought("summary", "a summary"),)),
    domain.DoneChunk({"finish_reason": "stop"}),
    domain.DoneChunk(),
    domain.FunctionCallChunk(None),
    domain.ErrorChunk(None),
)
# ... and these end it (B6).
ENDING: Final[tuple[object, ...]] = (
    domain.FunctionCallChunk(domain.FunctionCall("lookup", {"q": "x"}, id="call-1")),
    domain.ErrorChunk(domain.ProviderError("rate_limit", "slow down", retryable=True)),
    domain.ErrorChunk(domain.ProviderError("model_error", "model not found", code=404)),
)

# Not a `ProcessedChunk`: the stream must end as `error` (B13).
garbage = st.sampled_from([42, None, b"bytes", {"not": "a chunk"}, 3.5, ("tuple",)])

exceptions: st.SearchStrategy[Exception] = st.one_of(
    st.builds(ValueError, st.just("provider broke")),
    st.builds(RuntimeError, st.just("auth failed for sk-abcdefghijklmnopqrstuvwx")),
    st.builds(ConnectionResetError),
    st.builds(TimeoutError),
    st.builds(KeyError, st.just("choices")),
    st.builds(StopAsyncIteration),  # raised in an async generator: a RuntimeError (PEP 479)
)

TAILS: Final[dict[str, st.SearchStrategy[tuple[Step, ...]]]] = {
    "end": st.just(()),
    "hang": st.just((Hang(),)),
    "raise": exceptions.map(lambda e: (e,)),
    "garbage": garbage.map(lambda g: (g, "never read")),
    "chunk": st.sampled_from(ENDING).map(lambda c: (c,)),
}
tails = st.sampled_from(["end"] * 3 + ["hang"] * 3 + ["raise", "garbage", "chunk"]).flatmap(
    TAILS.__getitem__
)

bodies: st.SearchStrategy[list[Step]] = st.lists(
    st.one_of(texts, texts, texts, texts, sleeps, sleeps, st.sampled_from(GOING_ON)),
    min_size=1,
    max_size=12,
)

scripts: st.SearchStrategy[tuple[Step, ...]] = st.builds(
    lambda body, tail: (*body, *tail), bodies, tails
)

configs = st.builds(
    StreamConfig,
    delivery=st.sampled_from(["live", "live", "live", "messages", "messages"]),
    cursor=st.sampled_from([CURSORS[0], *CURSORS]),
    inactivity_timeout=st.integers(5, 30).map(float),
    send_message_limit=st.sampled_from([0, 0, 0, 0, 0, 1, 3]),
    flush_limit=st.sampled_from([40, 40, 40, 40, 40, 0, 2]),
    max_message_length=st.one_of(st.integers(200, 2000), st.sampled_from([200, 1950, 2000])),
    humanizer_degree=st.integers(0, 3),  # messages delivery only (L11)
)

# A stop's requester: users, the system (none or empty), internal ids (C4). A follow-up is a
# user's new message.
stop_requesters = st.sampled_from(["user-1", "user-2", None, "", "flush_limit", "channel_deleted"])
user_ids = st.sampled_from(["user-1", "user-3"])
# Microseconds: the moments are unlikely to coincide exactly with the stream's own events.
moments = st.integers(0, 60_000_000).map(lambda us: us / 1_000_000)


def requests_at(
    when: oracle.When, at: st.SearchStrategy[float]
) -> st.SearchStrategy[oracle.Request]:
    return st.one_of(
        st.builds(oracle.Request, st.just("stop"), stop_requesters, st.just(when), at),
        st.builds(oracle.Request, st.just("follow_up"), user_ids, st.just(when), at),
    )


plans = st.builds(
    Plan,
    steps=scripts,
    raise_in_process=sometimes(st.builds(ValueError, st.just("cannot parse chunk")), 10),
    config=configs,
    requests=st.one_of(
        st.just(()), st.lists(requests_at("during", moments), max_size=2).map(tuple)
    ),
    before=sometimes(requests_at("before", st.just(0.0)), 10),
    cancel_at=sometimes(moments, 8),
    reply=st.booleans(),
    suppress=st.booleans(),
    delete_at=sometimes(moments.map(lambda at: at / 10), 6),  # live delivery only
)

half_seconds = st.integers(1, 16).map(lambda n: n / 2)
# No global 429 here: discord.py 2.7.1 leaves its global lock cleared forever when a request is
# cancelled during the global wait, and the shell cancels its typing pause at the end of a
# stream and its sends when the caller cancels: every later request would wait forever (see
# test_a_stream_cut_short_during_a_global_429_... below).
PlainFault: TypeAlias = emulator.RateLimited | emulator.ErrorReply | emulator.Drop
REFUSALS: Final = (
    emulator.MISSING_ACCESS,
    emulator.MISSING_PERMISSIONS,
    emulator.UNKNOWN_CHANNEL,
    emulator.INTERNAL_SERVER_ERROR,
    emulator.BAD_GATEWAY,
)
plain_faults: st.SearchStrategy[PlainFault] = st.one_of(
    st.builds(emulator.RateLimited, retry_after=st.sampled_from([0.5, 1.0, 2.5])),
    # A Cloudflare-style 429: not retried.
    st.just(emulator.RateLimited(retry_after=1.0, via=False)),
    st.sampled_from(REFUSALS),
    st.just(emulator.Drop()),
)
faults: st.SearchStrategy[emulator.Fault] = st.one_of(
    plain_faults,
    st.builds(emulator.Delay, half_seconds, st.one_of(st.none(), st.none(), plain_faults)),
)
routes: st.SearchStrategy[emulator.FaultRoute] = st.sampled_from(
    ["send", "send", "send", "edit", "edit", "typing", "any"]  # edits: live delivery's
)


# -- the machine -------------------------------------------------------------------------------


class ShellMachine(RuleBasedStateMachine):
    """Streams, one after another, through one orchestrator, client and emulator."""

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner(loop_factory=looptime.new_event_loop)
        self.exits = AsyncExitStack()
        try:
            self.stage: Stage = self.runner.run(
                self.exits.enter_async_context(stage(oracle.TimedRegistry))
            )
            self.reply_id = self.stage.api.post_user_message("a question for the bot")
        except BaseException:
            self.runner.close()
            raise
        self.runs = 0

    def teardown(self) -> None:
        try:
            self.runner.run(self.exits.aclose())
        finally:
            self.runner.close()

    @rule(fault=faults, route=routes, times=st.integers(1, 3))
    def prepare_fault(self, fault: emulator.Fault, route: emulator.FaultRoute, times: int) -> None:
        """Discord misbehaves for the next `times` requests of `route`, in a later run."""
        if len(self.stage.api.pending_faults) >= MAX_PENDING_FAULTS:
            return  # bounded: a few faults at a time
        if isinstance(fault, emulator.ErrorReply) and fault.status >= 500 and times == 3:
            times = 5  # sometimes beyond discord.py's retries: a DiscordServerError
        self.stage.api.inject(fault, route=route, times=times)

    @rule(plan=plans)
    def run_stream(self, plan: Plan) -> None:
        self.runs += 1
        run = self.runner.run(self.play(plan))
        event(f"delivery: {plan.config.delivery}")
        if run.result is not None:
            event(f"status: {run.result.status} {run.result.stop_reason or ''}".strip())
        else:
            event(f"escaped: {type(run.escaped).__name__}")
        check_run(run)

    async def play(self, plan: Plan) -> Run:
        """One `stream_to_discord` call with its requests, faults and maybe a cancellation."""
        loop = asyncio.get_running_loop()
        s = self.stage
        api, stops, channel_id = s.api, s.stops, s.channel.id
        assert isinstance(stops, oracle.TimedRegistry)
        first_message, first_request = len(api.messages()), len(api.requests)
        first_change = len(api.history())
        before = set(asyncio.all_tasks())
        provider = ScriptProvider(plan.steps, raise_in_process=plan.raise_in_process)
        run = Run(
            plan=plan,
            config=plan.config,
            provider=provider,
            reply_to=self.reply_id if plan.reply else None,
            suppress=plan.suppress,
            expected=expected_ending(plan),
            leftover=[],
            listening=0,
        )

        def fire(request: oracle.Request) -> None:
            context = f"context-{self.runs}-{len(run.fired)}"
            replaced = stops.peek(channel_id)
            if request.kind == "stop":
                accepted = s.orchestrator.request_stop(channel_id, request.requester, context)
            else:
                accepted = s.orchestrator.request_follow_up(channel_id, request.requester or "")
            entry = stops.peek(channel_id)
            run.fired.append(oracle.Fired(request, loop.time(), accepted, context, replaced, entry))

        if plan.before is not None:
            fire(plan.before)
        context: dict[str, object] = {"suppress_user_errors": plan.suppress}
        if plan.reply:
            context["reply_to"] = s.channel.get_partial_message(self.reply_id)

        async def call() -> StreamResult:
            try:
                return await s.stream(provider, plan.config, **context)
            finally:
                run.done_at = loop.time()
                run.provider_running = provider.running

        task = loop.create_task(call())
        handles = [loop.call_later(r.at, fire, r) for r in plan.requests]

        def cancel() -> None:
            if task.cancel():
                run.cancel_delivered, run.interrupted_at = True, loop.time()

        if plan.cancel_at is not None:
            handles.append(loop.call_later(plan.cancel_at, cancel))

        def delete() -> None:
            """A moderator deletes the stream's newest message (L9)."""
            mine = [m for m in api.messages()[first_message:] if not m.embeds]
            if mine:
                api.delete_message(mine[-1].id)

        if plan.delete_at is not None and plan.config.delivery == "live":
            handles.append(loop.call_later(plan.delete_at, delete))
        await asyncio.wait({task}, timeout=RUN_LIMIT)
        for handle in handles:
            handle.cancel()
        if not task.done():  # judged by `check_run`: a failure, unless a known defect
            run.stuck = True
            task.cancel()
            await asyncio.wait({task})
        try:
            run.result = task.result()
        except asyncio.CancelledError as error:
            run.caller_cancelled = run.cancel_delivered
            run.escaped = None if run.cancel_delivered else error
        except BaseException as error:  # whatever escaped is the finding
            run.escaped = error
        run.leftover = oracle.leftover_tasks(before)
        run.listening = stops.listening()
        run.ended_at = stops.unlistened.pop(channel_id, None)
        run.registry_entry = stops.peek(channel_id)
        # Clear what this run registered, so that the next run starts with an empty registry.
        if run.registry_entry is not None:
            stops.consume(channel_id, run.registry_entry)
        # A slow reply the stream gave up on lands now, in this run's transcript.
        await asyncio.sleep(SETTLE)
        run.messages = api.messages()[first_message:]
        run.history = api.history()[first_change:]
        run.requests = api.requests[first_request:]
        return run


def check_run(run: Run) -> None:
    """Everything that must hold after one run, whatever the script, faults and requests: the
    oracle's invariants (`tests.support.oracle.check`), nothing left running or listening (B11, C5),
    and no registry entry the stream should have resolved (C5). A stream that did not end is a
    failure, unless it is the oracle's known defect `limit_loop` (noted as an event)."""
    if run.stuck:
        assert oracle.limit_loop(run), f"the stream did not end within {RUN_LIMIT} virtual seconds"
        event("known defect: limit_loop")
        return
    violations = []
    for name, detail in oracle.check(run):
        if name in oracle.KNOWN_DEFECTS:
            event(f"known defect: {name}")  # fix pending (see `oracle.KNOWN_DEFECTS`)
        else:
            violations.append((name, detail))
    if run.leftover:
        violations.append(("leaked_tasks", f"tasks left behind: {run.leftover}"))
    if run.listening:
        violations.append(("leaked_listener", "a registry listener was left behind"))
    entry = run.registry_entry
    if entry is not None and not oracle.entry_explained(run, entry):
        violations.append(("registry_entry", f"a {entry.kind} at {entry.at} was left (C5)"))
    assert violations == [], oracle.describe(violations)


TestShellMachine = ShellMachine.TestCase
TestShellMachine.settings = settings(
    max_examples=examples(50),
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- findings, pinned --------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B1_a_provider_raising_cancelled_error_gives_a_result() -> None:
    async with stage() as s:
        provider = ScriptProvider(["Hello\n", asyncio.CancelledError()])
        result = await s.stream(provider)
        assert result.status == "error"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B1_process_chunk_raising_cancelled_error_gives_a_result() -> None:
    async with stage() as s:
        provider = ScriptProvider(["Hello"], raise_in_process=asyncio.CancelledError())
        result = await s.stream(provider)
        assert result.status == "error"


async def _cancel_the_caller_during_a_global_429(s: Stage) -> None:
    s.api.inject(emulator.RateLimited(retry_after=5.0, is_global=True), route="send")
    first = asyncio.create_task(s.stream(ScriptProvider(["Hello"])))
    await asyncio.sleep(1.0)  # the send got its global 429 and sleeps it off
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first


async def _stop_internally_during_a_typing_pause_with_a_global_429(s: Stage) -> None:
    s.api.inject(emulator.RateLimited(retry_after=5.0, is_global=True), route="typing")
    loop = asyncio.get_running_loop()
    loop.call_later(1.0, s.orchestrator.request_stop, s.channel.id, "channel_deleted")
    provider = ScriptProvider(["first line\n", "second line\n", "third\n", Hang()])
    result = await s.stream(provider, StreamConfig(delivery="messages", humanizer_degree=2))
    # The typing pause before "second line" was cancelled in its global 429 wait.
    assert (result.status, result.stop_reason) == ("stopped_by_user", "channel_deleted")


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(
    "scenario",
    [
        # discord.py 2.7.1 never sets HTTPClient._global_over again when a request is
        # cancelled while sleeping off a global 429 (same code as DisnakeDev/disnake#1585);
        # the shell opens it itself when that wait ends (`cordstream.shell.ratelimit`).
        pytest.param(_cancel_the_caller_during_a_global_429, id="caller-cancels"),
        # The shell no longer cancels a typing request when a stream ends during its pause.
        pytest.param(
            _stop_internally_during_a_typing_pause_with_a_global_429,
            id="internal-stop-in-typing-pause",
        ),
    ],
)
async def test_a_stream_cut_short_during_a_global_429_leaves_discord_py_able_to_send(
    scenario: Callable[[Stage], Awaitable[None]],
) -> None:
    async with stage() as s:
        await scenario(s)
        result = await asyncio.wait_for(s.stream(ScriptProvider(["again"])), 600.0)
        assert result.status == "completed"
