"""`run_turn`: the reference tool loop, one user turn from question to final answer.

A turn is one or more *segments*, each one `stream_to_discord` call. When a segment ends in
`function_call`, `run_turn` runs the caller's tools for every call of that segment, hands the
results to the provider (`ToolProvider.after_tools`, in the provider's own message format) and
streams the next segment. It stops at the first segment that ends any other way. What it
promises (how tools are run and their results sent, tool errors and limits, empty answers,
replies, usage, text, interactions) is stated in §A, "The reference tool loop".

The idea: the loop keeps nothing of a stream. Each segment is a whole `stream_to_discord`
call with its own `StreamResult`, and the turn is what those results add up to (`TurnResult`:
the segments, the tool runs, the summed usage, the joined text). So every rule of B to L holds
per segment as it does for a single stream, and a stop or follow-up registered while tools run
ends the turn through B4, with no check of its own.

`run_turn` never raises for what the provider, Discord or a tool does; only the caller's own
cancellation propagates (a cancelled turn cancels the tools it is running).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, TypeAlias

import discord

from cordstream.domain import (
    FunctionCall,
    StreamResult,
    TokenUsage,
    estimate_tokens,
    sum_turn_usage,
)
from cordstream.domain.outcome import accumulated_text
from cordstream.domain.redact import Secrets
from cordstream.shell.arguments import turn_argument_error
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext
from cordstream.shell.orchestrator import FINAL_EDIT_TIMEOUT, StreamOrchestrator
from cordstream.shell.providers.base import ToolOutcome, ToolProvider
from cordstream.shell.secrets import stream_secrets
from cordstream.shell.target import finish_interaction
from cordstream.shell.telemetry import ToolWatch, TurnFigures, TurnWatch

Tool: TypeAlias = Callable[[Mapping[str, object]], Awaitable[object]]

TurnStatus: TypeAlias = Literal[
    "completed",
    "error",
    "timeout",
    "stopped_by_user",
    "empty_response",
    "follow_up_interrupt",
    "tool_round_limit",
    "tool_error_limit",
]

MAX_TOOL_ROUNDS: Final = 100
MAX_TOOL_ERRORS: Final = 5
EMPTY_RETRIES: Final = 2


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool call of a turn: what was asked, what the model was told, what was raised."""

    call: FunctionCall
    outcome: ToolOutcome
    exception: BaseException | None = None


@dataclass(frozen=True, slots=True)
class TurnResult:
    """How a turn ended.

    - `status`: the last segment's status, or `tool_round_limit` / `tool_error_limit`.
    - `segments`: every segment's `StreamResult`, in order (empty retries included).
    - `usage`: the turn's bill (`sum_turn_usage`), or the estimate when `usage_estimated`.
    - `tool_runs`: every tool call run, in order.
    - `error`: what ended the turn outside a stream (status `error`): what `after_tools`
      raised, when a broken adapter ended the turn (the last segment a `function_call`), or
      the TypeError for a wrong argument (also its one segment's `data`; nothing was sent).
    """

    status: TurnStatus
    segments: tuple[StreamResult, ...]
    usage: TokenUsage
    usage_estimated: bool
    tool_runs: tuple[ToolRun, ...] = ()
    error: Exception | None = None

    @property
    def final(self) -> StreamResult:
        """The last segment's result."""
        return self.segments[-1]

    @property
    def text(self) -> str:
        """Everything the turn delivered to Discord: the segments' `accumulated_text`, empty
        ones skipped, joined by "\\n" as a segment's messages are (F2). What a bot stores as the
        assistant's turn, an interrupted one included (what the user saw)."""
        return _joined(self.segments)

    @property
    def messages_sent(self) -> int:
        return sum(segment.messages_sent for segment in self.segments)


def _joined(segments: Sequence[StreamResult]) -> str:
    """F2: the segments' texts joined as one stream's messages are, empty ones skipped."""
    return accumulated_text(tuple(s.accumulated_text for s in segments if s.accumulated_text))


def _render(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError) as error:  # a cycle, or NaN keys: still tell the model
        return f"{value!r:.2000} (not JSON: {error})"


async def _run_tool(
    call: FunctionCall, tools: Mapping[str, Tool], tool_timeout: float | None, secrets: Secrets
) -> ToolRun:
    with ToolWatch(call, secrets) as watch:  # its span and log records
        run = await _tool_run(call, tools, tool_timeout)
        outcome = run.outcome
        watch.ran(outcome.output, is_error=outcome.is_error, exception=run.exception)
        return run


async def _tool_run(
    call: FunctionCall, tools: Mapping[str, Tool], tool_timeout: float | None
) -> ToolRun:
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        outcome = ToolOutcome(call, f"error: unknown tool {call.name!r} (tools: {known})", True)
        return ToolRun(call, outcome)
    try:
        async with asyncio.timeout(tool_timeout):
            value = await tool(call.arguments)
    except TimeoutError as error:
        outcome = ToolOutcome(call, f"error: tool {call.name!r} timed out", is_error=True)
        return ToolRun(call, outcome, error)
    except Exception as error:  # the tool's failure is the model's to handle, not ours
        message = str(error) or type(error).__name__
        return ToolRun(call, ToolOutcome(call, f"error: {message}", is_error=True), error)
    return ToolRun(call, ToolOutcome(call, _render(value)))


async def _run_round(
    calls: Sequence[FunctionCall],
    tools: Mapping[str, Tool],
    tool_timeout: float | None,
    secrets: Secrets,
) -> list[ToolRun]:
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_run_tool(call, tools, tool_timeout, secrets)) for call in calls]
    return [task.result() for task in tasks]


async def run_turn(
    orchestrator: StreamOrchestrator,
    provider: ToolProvider[Any],
    context: StreamContext,
    *,
    tools: Mapping[str, Tool],
    config: StreamConfig | None = None,
    max_tool_rounds: int = MAX_TOOL_ROUNDS,
    max_tool_errors: int = MAX_TOOL_ERRORS,
    empty_retries: int = EMPTY_RETRIES,
    tool_timeout: float | None = 60.0,
    prompt_text: str = "",
) -> TurnResult:
    """Stream one user turn into Discord, running tools until the model answers. A wrong
    argument ends the turn as `error` at once, its `error` (and its one segment's `data`) a
    TypeError naming it (`cordstream.shell.arguments`); nothing is sent."""
    wrong = turn_argument_error(orchestrator, provider, context, tools, config)
    if wrong is not None:
        return _turn("error", [StreamResult("error", data=wrong)], [], "", wrong)
    secrets = stream_secrets(orchestrator._secrets, provider, context.channel)
    try:
        with TurnWatch(provider, context.channel, secrets) as watch:  # its span and log line
            turn = await _run_turn(
                orchestrator,
                provider,
                context,
                tools=tools,
                config=config if config is not None else StreamConfig(),
                max_tool_rounds=max_tool_rounds,
                max_tool_errors=max_tool_errors,
                empty_retries=empty_retries,
                tool_timeout=tool_timeout,
                prompt_text=prompt_text,
                secrets=secrets,
            )
            watch.ended(
                TurnFigures(
                    turn.status,
                    len(turn.segments),
                    tuple(run.outcome.is_error for run in turn.tool_runs),
                    turn.usage.input_tokens,
                    turn.usage.output_tokens,
                    turn.usage_estimated,
                    turn.error,
                )
            )
            return turn
    finally:
        if isinstance(context.channel, discord.Interaction):  # K1: nothing left "thinking"
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FINAL_EDIT_TIMEOUT):
                    await finish_interaction(context.channel)


async def _run_turn(
    orchestrator: StreamOrchestrator,
    provider: ToolProvider[Any],
    context: StreamContext,
    *,
    tools: Mapping[str, Tool],
    config: StreamConfig,
    max_tool_rounds: int,
    max_tool_errors: int,
    empty_retries: int,
    tool_timeout: float | None,
    prompt_text: str,
    secrets: Secrets,
) -> TurnResult:
    segments: list[StreamResult] = []
    runs: list[ToolRun] = []
    rounds = failures = empties = 0
    status: TurnStatus
    while True:
        result = await orchestrator.stream_to_discord(provider, config, context)
        segments.append(result)
        if result.messages_sent and context.reply_to is not None:
            context = replace(context, reply_to=None)
        if result.status == "empty_response" and empties < empty_retries:
            empties += 1
            continue
        if result.status != "function_call":
            status = result.status
            break
        if rounds >= max_tool_rounds:
            status = "tool_round_limit"
            break
        rounds += 1
        round_runs = await _run_round(result.function_calls, tools, tool_timeout, secrets)
        runs.extend(round_runs)
        for run in round_runs:
            failures = failures + 1 if run.outcome.is_error else 0
        if failures >= max_tool_errors:
            status = "tool_error_limit"
            break
        try:
            provider = provider.after_tools([run.outcome for run in round_runs])
        except Exception as error:  # a broken adapter ends the turn, it does not raise
            return _turn("error", segments, runs, prompt_text, error)
        empties = 0
    return _turn(status, segments, runs, prompt_text)


def _turn(
    status: TurnStatus,
    segments: list[StreamResult],
    runs: list[ToolRun],
    prompt_text: str,
    error: Exception | None = None,
) -> TurnResult:
    usage = sum_turn_usage(segments)
    estimated = usage is None
    if usage is None:  # estimated from the text the turn delivered, as `TurnResult.text`
        usage = TokenUsage(estimate_tokens(prompt_text), estimate_tokens(_joined(segments)))
    return TurnResult(status, tuple(segments), usage, estimated, tuple(runs), error)
