"""`run_turn`, the reference tool loop, through the real shell and the Discord emulator.

The provider here is a scripted conversation (`Conversation`): one script per segment, and
`after_tools` records what the loop handed back. `tests/providers/test_provider_gemini.py`
runs a tool round through the same loop against the real Gemini SDK and a local model server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from cordstream.domain import (
    DoneChunk,
    FunctionCall,
    FunctionCallChunk,
    StreamResult,
    TextChunk,
    TokenUsage,
)
from cordstream.shell import StreamConfig, ToolOutcome, TurnResult, run_turn
from cordstream.shell.turn import Tool
from tests.support.stage import Do, Hang, ScriptProvider, Stage, Step, other_tasks, stage

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


@dataclass
class Conversation(ScriptProvider):
    """Segment scripts in order; `after_tools` moves to the next one and logs the outcomes."""

    later: Sequence[Sequence[Step]] = ()
    handed_back: list[list[ToolOutcome]] = field(default_factory=list)

    def after_tools(self, outcomes: Sequence[ToolOutcome]) -> Conversation:
        self.handed_back.append(list(outcomes))
        if not self.later:
            raise ValueError("the script has no further segment")
        return Conversation(list(self.later[0]), later=self.later[1:], handed_back=self.handed_back)


def ask(*calls: FunctionCall, usage: object = None) -> FunctionCallChunk:
    return FunctionCallChunk(list(calls), usage=usage)


def used(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens}


async def dice(arguments: Mapping[str, object]) -> object:
    sides = arguments.get("sides", 6)
    assert isinstance(sides, int)
    return {"rolled": sides}  # deterministic: the "highest" face


MESSAGES = StreamConfig(delivery="messages")  # these tests pin messages delivery (E9)


async def turn(s: Stage, provider: Conversation, **options: Any) -> TurnResult:
    reply = s.api.post_user_message("@bot roll")
    context = s.context(reply_to=s.channel.get_partial_message(reply))
    options.setdefault("config", MESSAGES)
    return await run_turn(s.orchestrator, provider, context, **options)


async def test_a_tool_round_then_the_answer_sums_usage_and_replies_once() -> None:
    call = FunctionCall("dice", {"sides": 20}, id="c1")
    provider = Conversation(
        ["Let me roll.\n", ask(call, usage=used(10, 5))],
        later=[["You rolled 20!", DoneChunk({"finish_reason": "stop"}, usage=used(30, 7))]],
    )
    async with stage() as s:
        reply = s.api.post_user_message("@bot roll a d20")
        context = s.context(reply_to=s.channel.get_partial_message(reply))
        result = await run_turn(
            s.orchestrator, provider, context, tools={"dice": dice}, config=MESSAGES
        )
        assert result.status == "completed"
        assert [seg.status for seg in result.segments] == ["function_call", "completed"]
        assert result.usage == TokenUsage(40, 12)
        assert not result.usage_estimated
        assert provider.handed_back == [[ToolOutcome(call, '{"rolled": 20}')]]
        assert s.contents == ["Let me roll.", "You rolled 20!"]
        references = [m.message_reference for m in s.api.messages()]
        assert references[0] is not None
        assert references[0]["message_id"] == reply
        assert references[1] is None  # one answer: only its first message replies
        assert result.text == "Let me roll.\nYou rolled 20!"  # F2: not glued together
        assert result.messages_sent == 2


async def test_every_parallel_call_runs_and_results_keep_the_call_order() -> None:
    started: list[str] = []
    release = asyncio.Event()

    async def slow(arguments: Mapping[str, object]) -> object:
        started.append("slow")
        await release.wait()
        return "slow done"

    async def fast(arguments: Mapping[str, object]) -> object:
        started.append("fast")
        release.set()  # runs while `slow` waits: the calls of one segment run concurrently
        return "fast done"

    first, second = FunctionCall("slow", id="a"), FunctionCall("fast", id="b")
    provider = Conversation([ask(first, second)], later=[["ok"]])
    async with stage() as s:
        result = await turn(s, provider, tools={"slow": slow, "fast": fast})
    assert result.status == "completed"
    assert started == ["slow", "fast"]
    assert provider.handed_back == [
        [ToolOutcome(first, "slow done"), ToolOutcome(second, "fast done")]
    ]


async def test_tool_failures_unknown_tools_and_timeouts_are_told_to_the_model() -> None:
    async def broken(arguments: Mapping[str, object]) -> object:
        raise RuntimeError("disk on fire")

    async def stuck(arguments: Mapping[str, object]) -> object:
        await asyncio.Event().wait()
        return None

    calls = [FunctionCall("broken", id="1"), FunctionCall("nope", id="2"), FunctionCall("stuck")]
    provider = Conversation([ask(*calls)], later=[["sorry"]])
    async with stage() as s:
        result = await turn(s, provider, tools={"broken": broken, "stuck": stuck}, tool_timeout=5)
    assert result.status == "completed"
    outcomes = provider.handed_back[0]
    assert [o.is_error for o in outcomes] == [True, True, True]
    assert outcomes[0].output == "error: disk on fire"
    assert outcomes[1].output == "error: unknown tool 'nope' (tools: broken, stuck)"
    assert outcomes[2].output == "error: tool 'stuck' timed out"
    runs = result.tool_runs
    assert isinstance(runs[0].exception, RuntimeError)
    assert runs[1].exception is None
    assert isinstance(runs[2].exception, TimeoutError)


async def test_five_tool_errors_in_a_row_end_the_turn() -> None:
    async def broken(arguments: Mapping[str, object]) -> object:
        raise ValueError("no")

    async def fine(arguments: Mapping[str, object]) -> object:
        return "yes"

    bad, good = FunctionCall("broken"), FunctionCall("fine")
    # 3 errors, a success resets, then 2 + 3 errors: the fifth in a row ends it.
    provider = Conversation(
        [ask(bad, bad, bad, good)],
        later=[[ask(bad, bad)], [ask(bad, bad, bad)], ["never streamed"]],
    )
    async with stage() as s:
        result = await turn(s, provider, tools={"broken": broken, "fine": fine})
        assert result.status == "tool_error_limit"
        assert len(result.segments) == 3
        assert "never streamed" not in s.api.text()


async def test_the_round_limit_stops_a_model_that_always_asks_for_tools() -> None:
    call = FunctionCall("fine")
    rounds = 4

    async def fine(arguments: Mapping[str, object]) -> object:
        return "again"

    provider = Conversation([ask(call)], later=[[ask(call)]] * 10)
    async with stage() as s:
        result = await turn(s, provider, tools={"fine": fine}, max_tool_rounds=rounds)
    assert result.status == "tool_round_limit"
    assert len(provider.handed_back) == rounds  # that many rounds ran, the next was refused
    assert len(result.segments) == rounds + 1


async def test_the_default_round_limit_is_100() -> None:
    call = FunctionCall("fine")

    async def fine(arguments: Mapping[str, object]) -> object:
        return "again"

    provider = Conversation([ask(call)], later=[[ask(call)]] * 150)
    async with stage() as s:
        result = await turn(s, provider, tools={"fine": fine})
    assert result.status == "tool_round_limit"
    assert len(provider.handed_back) == 100


async def test_an_empty_response_is_retried_twice_then_returned() -> None:
    provider = Conversation([DoneChunk(usage=used(3, 0))])
    async with stage() as s:
        result = await turn(s, provider, tools={})
    assert result.status == "empty_response"
    assert len(result.segments) == 3
    assert result.usage == TokenUsage(9, 0)  # all three billed
    assert provider.calls.count("start") == 3


async def test_a_retry_that_answers_completes_the_turn() -> None:
    answers = iter([[], [], ["third time lucky"]])

    @dataclass
    class Flaky(Conversation):
        def start_stream(self, config: StreamConfig, context: object) -> object:  # type: ignore[override]
            self.steps = next(answers)
            return super().start_stream(config, context)  # type: ignore[arg-type]

    async with stage() as s:
        result = await turn(s, Flaky([]), tools={})
        assert result.status == "completed"
        assert s.contents == ["third time lucky"]


async def test_without_reported_usage_the_turn_estimates_and_says_so() -> None:
    provider = Conversation([ask(FunctionCall("fine"))], later=[["x" * 40]])

    async def fine(arguments: Mapping[str, object]) -> object:
        return 1

    async with stage() as s:
        result = await turn(s, provider, tools={"fine": fine}, prompt_text="y" * 10)
    assert result.usage_estimated
    assert result.usage == TokenUsage(3, 10)


async def test_a_stop_while_tools_run_ends_the_turn_before_the_next_request() -> None:
    holder: list[Stage] = []

    async def slow(arguments: Mapping[str, object]) -> object:
        holder[0].orchestrator.request_stop(holder[0].channel.id, "user")
        return "done"

    provider = Conversation([ask(FunctionCall("slow"))], later=[["not asked"]])
    async with stage() as s:
        holder.append(s)
        result = await turn(s, provider, tools={"slow": slow})
    assert result.status == "stopped_by_user"
    assert len(provider.handed_back) == 1
    assert result.final.stop_reason == "user_request"


async def test_a_follow_up_mid_answer_ends_the_turn_for_the_bot_to_restart() -> None:
    holder: list[Stage] = []

    def follow_up() -> None:
        holder[0].orchestrator.request_follow_up(holder[0].channel.id, "user")

    provider = Conversation(["Thinking about it\n", Do(follow_up), Hang()])
    async with stage() as s:
        holder.append(s)
        result = await turn(s, provider, tools={})
    assert result.status == "follow_up_interrupt"


async def test_an_adapter_that_cannot_continue_ends_the_turn_as_error() -> None:
    provider = Conversation([ask(FunctionCall("fine"))])  # no later segment: after_tools raises

    async def fine(arguments: Mapping[str, object]) -> object:
        return "ok"

    async with stage() as s:
        result = await turn(s, provider, tools={"fine": fine})
    assert result.status == "error"
    assert isinstance(result.error, ValueError)
    assert result.final.status == "function_call"


async def test_tool_results_that_are_not_json_still_reach_the_model() -> None:
    cycle: list[object] = []
    cycle.append(cycle)

    async def odd(arguments: Mapping[str, object]) -> object:
        return cycle

    provider = Conversation([ask(FunctionCall("odd"))], later=[["fine"]])
    async with stage() as s:
        await turn(s, provider, tools={"odd": odd})
    (outcome,) = provider.handed_back[0]
    assert not outcome.is_error
    assert "not JSON" in outcome.output


async def test_cancelling_the_turn_cancels_its_tools() -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def forever(arguments: Mapping[str, object]) -> object:
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return None

    tools: dict[str, Tool] = {"forever": forever}
    provider = Conversation([ask(FunctionCall("forever"))], later=[["x"]])
    async with stage() as s:
        before = other_tasks()
        task = asyncio.create_task(turn(s, provider, tools=tools, tool_timeout=None))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cancelled.is_set()
        assert other_tasks() <= before


async def test_text_chunks_count_as_an_answer_between_rounds() -> None:
    provider = Conversation([TextChunk("a\n"), ask(FunctionCall("fine"))], later=[["b"]])

    async def fine(arguments: Mapping[str, object]) -> object:
        return "ok"

    async with stage() as s:
        result = await turn(s, provider, tools={"fine": fine})
        assert s.contents == ["a", "b"]
    assert result.text == "a\nb"


def _segment(status: str, *messages: str) -> StreamResult:
    return StreamResult(
        status,  # type: ignore[arg-type]  # a test knob
        accumulated_text="\n".join(messages),
        messages_sent=len(messages),
        messages=messages,
    )


async def test_F2_turn_text_joins_the_segments_with_line_breaks_and_skips_empty_ones() -> None:
    segments = (
        _segment("function_call"),  # a tool round that said nothing
        _segment("function_call", "one\ntwo", "three"),
        _segment("empty_response"),
        _segment("completed", "four"),
    )
    turn = TurnResult("completed", segments, TokenUsage(1, 1), False)
    assert turn.text == "one\ntwo\nthree\nfour"  # no blank line for the empty segments
    assert turn.messages_sent == 3
    assert TurnResult("completed", (_segment("completed"),), TokenUsage(0, 0), False).text == ""


async def test_F2_a_turn_through_the_shell_keeps_every_line_break() -> None:
    provider = Conversation(
        [ask(FunctionCall("fine"))],
        later=[["Let me look.\n", ask(FunctionCall("fine"))], ["one\ntwo\nthr", "ee"]],
    )

    async def fine(arguments: Mapping[str, object]) -> object:
        return "ok"

    async with stage() as s:
        result = await turn(s, provider, tools={"fine": fine}, prompt_text="y" * 8)
        assert s.contents == ["Let me look.", "one\ntwo", "three"]
        assert s.api.text() == "Let me look.\none\ntwo\nthree"
    assert [segment.messages for segment in result.segments] == [
        (),
        ("Let me look.",),
        ("one\ntwo", "three"),
    ]
    assert result.text == "Let me look.\none\ntwo\nthree"
    # No usage reported: the estimate counts the turn's text as `TurnResult.text` has it.
    assert result.usage_estimated
    assert result.usage == TokenUsage(2, 7)  # ceil(26 / 4): 22 characters and 4 line breaks
