"""A hypothesis state machine driving the real shell against the Discord emulator (SPEC B, C, F).

Hypothesis cannot run `async def` rules, so each machine owns one `asyncio.Runner` whose loop
is a looptime loop (`looptime.new_event_loop`, time compaction on from creation): the
emulator, a logged-in discord.py client and the orchestrator live in that loop for the whole
machine, and every sync rule runs one coroutine in it. Sleeps, hangs, inactivity timeouts,
429 waits, slow replies and discord.py's 5xx backoff cost no real time, and "within 50 ms"
is exact.

Rules: queue Discord faults for the next requests; run one stream with a random provider
script, config, context, stop/follow-up requests at random moments (one maybe registered
before the stream), and maybe the caller cancelling it. After each run the invariants of
`check_run` hold: one result or (only when the caller cancelled) `CancelledError`; provider
closed; no task, listener or resolved registry entry left; `messages` is the transcript of
accepted messages and `accumulated_text` their join by "\\n" (F2); sizes, mentions, replies;
timeout and stop timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

import looptime
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from cordstream.domain import (
    DoneChunk,
    ErrorChunk,
    FunctionCall,
    FunctionCallChunk,
    ProviderError,
    TextChunk,
    Thought,
)
from cordstream.shell import StreamConfig, StreamResult
from cordstream.shell.testing.emulator import (
    BAD_GATEWAY,
    INTERNAL_SERVER_ERROR,
    MISSING_ACCESS,
    MISSING_PERMISSIONS,
    UNKNOWN_CHANNEL,
    Delay,
    Drop,
    ErrorReply,
    Fault,
    FaultRoute,
    RateLimited,
    RecordedRequest,
    SentMessage,
)
from tests.fuzz import examples
from tests.stage import Hang, ScriptProvider, Sleep, Stage, Step, other_tasks, stage

# A stream in these tests ends well within this (virtual) time, or it is stuck.
RUN_LIMIT: Final = 900.0
# After a run, wait this long (virtual) so that a slow reply the stream gave up on lands now.
SETTLE: Final = 60.0
# How close to the deadline / the request the provider must be closed (B2, B3).
BOUND: Final = 0.05
MAX_PENDING_FAULTS: Final = 4
DISCORD_LIMIT: Final = 2000
USER_ID: Final = 123456789012345678

RequestKind = Literal["stop", "follow_up"]
T = TypeVar("T")


# -- what the test records -----------------------------------------------------------------------


class TimedCalls(list[str]):
    """`ScriptProvider.calls` that also notes the loop time of each call (virtual time)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[tuple[str, float]] = []

    def append(self, item: str) -> None:
        super().append(item)
        self.times.append((item, asyncio.get_running_loop().time()))

    def last(self, *names: str) -> float | None:
        found = [at for name, at in self.times if name in names]
        return found[-1] if found else None


@dataclass(frozen=True)
class Request:
    """A stop or follow-up, `at` seconds after the stream started (None: before it)."""

    kind: RequestKind
    requester: str | None
    at: float | None = None


@dataclass(frozen=True)
class Fired:
    """A request the test made: when, whether the registry accepted it, the context it carried."""

    request: Request
    at: float
    accepted: bool
    context: str


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    raise_in_process: Exception | None
    config: StreamConfig
    requests: tuple[Request, ...]
    before: Request | None  # registered before the stream starts (B4)
    cancel_at: float | None  # the caller cancels its task then
    reply: bool
    suppress: bool


@dataclass
class Run:
    """Everything one run produced, for the checks."""

    plan: Plan
    provider: ScriptProvider
    calls: TimedCalls
    done_at: float  # loop time when stream_to_discord returned or raised
    result: StreamResult | None
    escaped: BaseException | None
    cancel_requested_at: float | None
    fired: list[Fired]
    leftover_tasks: list[str]
    listening: int
    faults_at_start: bool
    messages: list[SentMessage]
    requests: list[RecordedRequest]
    left_entry: tuple[str, float] | None  # (kind, at) of the registry entry after the run
    reply_id: int


def server_side(task: asyncio.Task[object]) -> bool:
    """The emulator's own connection handlers (aiohttp's server): Discord's side, not ours."""
    name: str = getattr(task.get_coro(), "__qualname__", "")
    return name.startswith("RequestHandler.")


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
    "(an open paren ",
    'a "quote ',
    "**bold ",
    "https://example.com/a_(b) ",
    "1. item\n",
    "| a | b |\n|---|---|\n",
    "Dr. Smith paid $3.50. Then left! ",
)

long_texts = st.builds(
    lambda word, n: (word + " ") * n,
    st.sampled_from(["word", "émoji😀", "@everyone", "longwordwithoutanyspaces" * 4]),
    st.integers(20, 250),
) | st.builds(lambda n: "y" * n, st.integers(500, 2600))

texts = st.one_of(
    st.sampled_from(TEXTS),
    st.sampled_from(TEXTS),
    st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), max_size=30),
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
    TextChunk("", usage={"prompt_tokens": 3, "completion_tokens": 4}),
    TextChunk("thinking", thoughts=(Thought("summary", "a summary"),)),
    DoneChunk({"finish_reason": "stop"}),
    DoneChunk(),
    FunctionCallChunk(None),
    ErrorChunk(None),
)
# ... and these end it (B6).
ENDING: Final[tuple[object, ...]] = (
    FunctionCallChunk(FunctionCall("lookup", {"q": "x"}, id="call-1")),
    ErrorChunk(ProviderError("rate_limit", "slow down", retryable=True)),
    ErrorChunk(ProviderError("model_error", "model not found", code=404)),
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
    inactivity_timeout=st.integers(5, 30).map(float),
    send_message_limit=st.sampled_from([0, 0, 0, 0, 0, 1, 3]),
    flush_limit=st.sampled_from([40, 40, 40, 40, 40, 0, 2]),
    max_message_length=st.one_of(st.integers(200, 2000), st.sampled_from([200, 1950, 2000])),
    humanizer_degree=st.integers(0, 3),
)

# A stop's requester: users, the system (none or empty), internal ids (C4). A follow-up is a
# user's new message.
stop_requesters = st.sampled_from(["user-1", "user-2", None, "", "flush_limit", "channel_deleted"])
user_ids = st.sampled_from(["user-1", "user-3"])
# Microseconds: the moments are unlikely to coincide exactly with the stream's own events.
moments = st.integers(0, 60_000_000).map(lambda us: us / 1_000_000)


def requests_at(at: st.SearchStrategy[float | None]) -> st.SearchStrategy[Request]:
    return st.one_of(
        st.builds(Request, st.just("stop"), stop_requesters, at),
        st.builds(Request, st.just("follow_up"), user_ids, at),
    )


plans = st.builds(
    Plan,
    steps=scripts,
    raise_in_process=sometimes(st.builds(ValueError, st.just("cannot parse chunk")), 10),
    config=configs,
    requests=st.one_of(st.just(()), st.lists(requests_at(moments), max_size=2).map(tuple)),
    before=sometimes(requests_at(st.none()), 10),
    cancel_at=sometimes(moments, 8),
    reply=st.booleans(),
    suppress=st.booleans(),
)

half_seconds = st.integers(1, 16).map(lambda n: n / 2)
# No global 429 here: discord.py 2.7.1 leaves its global lock cleared forever when a request is
# cancelled during the global wait, and the shell cancels its typing pause at the end of a
# stream and its sends when the caller cancels: every later request would wait forever (see
# test_a_stream_cut_short_during_a_global_429_... below).
plain_faults: st.SearchStrategy[RateLimited | ErrorReply | Drop] = st.one_of(
    st.builds(RateLimited, retry_after=st.sampled_from([0.5, 1.0, 2.5])),
    st.just(RateLimited(retry_after=1.0, via=False)),  # a Cloudflare-style 429: not retried
    st.sampled_from(
        [MISSING_ACCESS, MISSING_PERMISSIONS, UNKNOWN_CHANNEL, INTERNAL_SERVER_ERROR, BAD_GATEWAY]
    ),
    st.just(Drop()),
)
faults: st.SearchStrategy[Fault] = st.one_of(
    plain_faults,
    st.builds(Delay, half_seconds, st.one_of(st.none(), st.none(), plain_faults)),
)
routes: st.SearchStrategy[FaultRoute] = st.sampled_from(["send", "send", "send", "typing", "any"])


# -- the machine -------------------------------------------------------------------------------


class ShellMachine(RuleBasedStateMachine):
    """Streams, one after another, through one orchestrator, client and emulator."""

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner(loop_factory=looptime.new_event_loop)
        self.exits = AsyncExitStack()
        try:
            self.stage: Stage = self.runner.run(self.exits.enter_async_context(stage()))
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
    def prepare_fault(self, fault: Fault, route: FaultRoute, times: int) -> None:
        """Discord misbehaves for the next `times` requests of `route`, in a later run."""
        if len(self.stage.api.pending_faults) >= MAX_PENDING_FAULTS:
            return  # bounded: a few faults at a time
        if isinstance(fault, ErrorReply) and fault.status >= 500 and times == 3:
            times = 5  # sometimes beyond discord.py's retries: a DiscordServerError
        self.stage.api.inject(fault, route=route, times=times)

    @rule(plan=plans)
    def run_stream(self, plan: Plan) -> None:
        self.runs += 1
        run = self.runner.run(self.play(plan))
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
        first_message, first_request = len(api.messages()), len(api.requests)
        faults_at_start = bool(api.pending_faults)
        before = other_tasks()
        calls = TimedCalls()
        provider = ScriptProvider(plan.steps, calls=calls, raise_in_process=plan.raise_in_process)
        fired: list[Fired] = []

        def fire(request: Request) -> None:
            context = f"context-{self.runs}-{len(fired)}"
            if request.kind == "stop":
                accepted = s.orchestrator.request_stop(channel_id, request.requester, context)
            else:
                accepted = s.orchestrator.request_follow_up(channel_id, request.requester or "")
            fired.append(Fired(request, loop.time(), accepted, context))

        if plan.before is not None:
            fire(plan.before)
        context: dict[str, object] = {"suppress_user_errors": plan.suppress}
        if plan.reply:
            context["reply_to"] = s.channel.get_partial_message(self.reply_id)
        done_at: list[float] = []

        async def call() -> StreamResult:
            try:
                return await s.stream(provider, plan.config, **context)
            finally:
                done_at.append(loop.time())

        task = loop.create_task(call())
        handles = [loop.call_later(r.at, fire, r) for r in plan.requests if r.at is not None]
        cancel_requested: list[float] = []

        def cancel() -> None:
            if task.cancel():
                cancel_requested.append(loop.time())

        if plan.cancel_at is not None:
            handles.append(loop.call_later(plan.cancel_at, cancel))
        await asyncio.wait({task}, timeout=RUN_LIMIT)
        for handle in handles:
            handle.cancel()
        assert task.done(), f"the stream did not end within {RUN_LIMIT} virtual seconds"

        result: StreamResult | None = None
        escaped: BaseException | None = None
        try:
            result = task.result()
        except BaseException as error:  # whatever escaped is the finding
            escaped = error
        leftover = sorted(
            getattr(t.get_coro(), "__qualname__", repr(t))
            for t in other_tasks() - before
            if not server_side(t)
        )
        listening = stops.listening()
        entry = stops.peek(channel_id)
        left_entry = (entry.kind, entry.at) if entry is not None else None
        # Clear what this run registered, so that the next run starts with an empty registry.
        if entry is not None:
            stops.consume(channel_id, entry)
        await asyncio.sleep(SETTLE)
        return Run(
            plan=plan,
            provider=provider,
            calls=calls,
            done_at=done_at[0],
            result=result,
            escaped=escaped,
            cancel_requested_at=cancel_requested[0] if cancel_requested else None,
            fired=fired,
            leftover_tasks=leftover,
            listening=listening,
            faults_at_start=faults_at_start,
            messages=api.messages()[first_message:],
            requests=api.requests[first_request:],
            left_entry=left_entry,
            reply_id=self.reply_id,
        )


# -- the invariants ----------------------------------------------------------------------------

INTERNAL_IDS: Final = frozenset(
    {"send_message_limit", "flush_limit", "channel_deleted", "missing_access"}
)


def check_run(run: Run) -> None:
    """Everything that must hold after one run, whatever the script, faults and requests."""
    provider, plan = run.provider, run.plan
    # B1: one result, nothing escaped; only the caller's own cancellation propagates.
    if run.cancel_requested_at is not None:
        assert isinstance(run.escaped, asyncio.CancelledError), (
            f"the caller cancelled, but the stream gave {run.result or run.escaped!r}"
        )
    else:
        assert run.escaped is None, f"escaped from stream_to_discord: {run.escaped!r}"
        assert isinstance(run.result, StreamResult)
    # B10, B11, C5: provider closed, nothing left running or listening.
    if provider.started:
        assert provider.closed, "the provider's iterator was not closed"
    assert run.leftover_tasks == [], f"tasks left behind: {run.leftover_tasks}"
    assert run.listening == 0, "a registry listener was left behind"
    sends = [r for r in run.requests if r.kind == "send"]
    for request in sends:
        body = request.json if isinstance(request.json, Mapping) else {}
        content = body.get("content") or ""
        assert len(content) <= min(DISCORD_LIMIT, plan.config.max_message_length), (
            f"a {len(content)}-character message was sent (E7)"
        )
        mentions = body.get("allowed_mentions")
        assert isinstance(mentions, Mapping), "a send without allowed_mentions (F1)"
        assert mentions.get("parse") == [], f"a send allowing mentions: {mentions} (F1)"
    for message in run.messages:
        assert not message.pings.anyone, f"a message pinged: {message.content!r} (F1)"
    if plan.suppress:
        assert not any(m.embeds for m in run.messages), "an embed despite suppress (G7)"
    # B3: a request closes the provider at once (even while it hangs), and so does the caller.
    close_at = run.calls.last("close")
    moments = [f.at for f in run.fired if f.accepted and f.at <= run.done_at]
    if run.cancel_requested_at is not None:
        moments.append(run.cancel_requested_at)
    if provider.started and close_at is not None and moments:
        assert close_at <= min(moments) + BOUND, (
            f"provider closed at {close_at}, {close_at - min(moments):.3f} s after a request (B3)"
        )
    if run.result is not None:
        check_result(run, run.result)


def check_result(run: Run, result: StreamResult) -> None:
    plan, provider = run.plan, run.provider
    texts = [m for m in run.messages if not m.embeds]
    # F2: the result is exactly what Discord accepted, in order, and its text is those
    # contents joined by "\n". SETTLE makes a message Discord accepted after the result show
    # up here too.
    accepted_contents = tuple(m.content for m in texts)
    assert result.messages == accepted_contents, (
        f"messages {result.messages!r} != transcript {accepted_contents!r} (F2)"
    )
    transcript = "\n".join(accepted_contents)
    assert result.accumulated_text == transcript, (
        f"accumulated_text {result.accumulated_text!r} != transcript {transcript!r} (F2)"
    )
    assert result.messages_sent == len(texts), f"{result.messages_sent} != {len(texts)} (F2)"
    # F1: the first message replies (without pinging), later ones do not.
    if plan.reply and texts:
        reference = texts[0].message_reference
        assert reference is not None, "the first message is not a reply (F1)"
        assert int(reference["message_id"]) == run.reply_id, f"replies to {reference}"
        assert all(m.message_reference is None for m in texts[1:]), "a later reply (F1)"

    # B4: a request registered before the stream resolves it before the provider starts.
    accepted = [f for f in run.fired if f.accepted]
    if plan.before is not None:
        assert not provider.started, "the provider was started despite a pending request (B4)"
        assert result.status in ("stopped_by_user", "follow_up_interrupt"), result.status
        assert not any(r.kind == "send" and not _is_embed(r) for r in run.requests), (
            "text was sent despite a request registered before the stream (B4)"
        )
    # C4, C7: a request outcome comes from a request the test made, with its context.
    before_result = [f for f in accepted if f.at <= run.done_at]
    if result.status == "follow_up_interrupt":
        assert any(f.request.kind == "follow_up" for f in before_result), "no follow-up came"
        assert result.stop_reason == "user_request", result.stop_reason
    if result.status == "stopped_by_user" and result.stop_reason in (
        "user_request",
        "system_request",
    ):
        user = result.stop_reason == "user_request"
        contexts = {
            f.context
            for f in before_result
            if f.request.kind == "stop"
            and bool(f.request.requester) == user
            and f.request.requester not in INTERNAL_IDS
        }
        assert result.stop_context in contexts, f"stop_context {result.stop_context!r} (C7)"
    # C5: no entry the stream resolved is left; entries registered after the result may stay,
    # and so may a follow-up that arrived while a request or internal stop was already ending
    # the stream (it is for the next stream).
    if run.left_entry is not None:
        kind, at = run.left_entry
        after_result = at >= run.done_at
        waiting_follow_up = kind == "follow_up" and result.status in (
            "stopped_by_user",
            "follow_up_interrupt",
        )
        # A stop that arrives once an internal stop fixed the outcome stays for the bot (C5).
        fixed = kind == "stop" and result.stop_reason in INTERNAL_IDS
        assert after_result or waiting_follow_up or fixed, (
            f"a {kind} registered at {at} is left after a {result.status} result at "
            f"{run.done_at} (C5)"
        )
    check_timing(run, result)


def check_timing(run: Run, result: StreamResult) -> None:
    """B2: the deadline is the last chunk plus the timeout, and it fires while hanging."""
    plan = run.plan
    timeout = plan.config.inactivity_timeout
    last_chunk = run.calls.last("start", "process")
    close_at = run.calls.last("close")
    if result.status == "timeout":
        assert last_chunk is not None, "a timeout without starting the provider"
        assert close_at is not None, "a timeout without closing the provider (B10)"
        deadline = last_chunk + timeout
        assert abs(close_at - deadline) <= BOUND, (
            f"timed out at {close_at}, the deadline was {deadline} (B2)"
        )
    hangs = _reaches_hang(plan.steps) and plan.raise_in_process is None
    quiet = (
        plan.before is None
        and not any(f.accepted and f.at <= run.done_at for f in run.fired)
        and run.cancel_requested_at is None
        and not run.faults_at_start
    )
    if hangs and quiet:
        limits = {
            "send_message_limit": plan.config.send_message_limit,
            "flush_limit": plan.config.flush_limit,
        }
        limited = result.status == "stopped_by_user" and result.stop_reason in limits
        if limited:
            assert result.stop_reason is not None
            assert result.messages_sent == limits[result.stop_reason], (
                f"{result.stop_reason} after {result.messages_sent} messages (F3)"
            )
        else:
            assert result.status == "timeout", (
                f"a hanging provider with no stop ended as {result.status} (B2)"
            )


def _reaches_hang(steps: tuple[Step, ...]) -> bool:
    """Whether the provider gets to a `Hang` with nothing that ends the stream before it."""
    for step in steps:
        if isinstance(step, Hang):
            return True
        if not isinstance(step, str | Sleep) and not any(step is c for c in GOING_ON):
            return False
    return False


def _is_embed(request: RecordedRequest) -> bool:
    body = request.json
    return isinstance(body, Mapping) and bool(body.get("embeds"))


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
    s.api.inject(RateLimited(retry_after=5.0, is_global=True), route="send")
    first = asyncio.create_task(s.stream(ScriptProvider(["Hello"])))
    await asyncio.sleep(1.0)  # the send got its global 429 and sleeps it off
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first


async def _stop_internally_during_a_typing_pause_with_a_global_429(s: Stage) -> None:
    s.api.inject(RateLimited(retry_after=5.0, is_global=True), route="typing")
    loop = asyncio.get_running_loop()
    loop.call_later(1.0, s.orchestrator.request_stop, s.channel.id, "channel_deleted")
    provider = ScriptProvider(["first line\n", "second line\n", "third\n", Hang()])
    result = await s.stream(provider, StreamConfig(humanizer_degree=2))
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
