"""`AnthropicProvider` with the real `anthropic` SDK against a local SSE server
(`cordstream.shell.testing.sse`).

The fixtures replay the Messages API's streaming wire format: every frame has its `event:`
line, and the order is the API's: `message_start`, `content_block_start`, `ping`,
`content_block_delta`…, `content_block_stop`, …, `message_delta`, `message_stop`. Errors are
the API's `{"type": "error", "error": {"type", "message"}}` bodies, as an HTTP reply or as a
mid-stream `event: error`.

Two levels: the adapter's own chunk sequence (`start_stream` → `process_chunk`, read to the
end, tests/support/adapters.py), and the same streams end to end through `stream_to_discord`
into the Discord emulator.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx2
import pytest

from cordstream import domain
from cordstream.shell import StreamConfig
from cordstream.shell.providers.anthropic import AnthropicProvider
from cordstream.shell.providers.base import ToolOutcome
from cordstream.shell.testing.sse import ModelServer, Reply, sse
from tests.support import adapters
from tests.support.stage import stage

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

MODEL = "claude-sonnet-4-6"
MESSAGE_ID = "msg_01XFDUDYJgAACzvnptvVoYEL"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"

# --- the wire format -----------------------------------------------------------------------


def usage(
    input_tokens: int = 25, output_tokens: int = 15, cache_read: int = 0, cache_creation: int = 0
) -> dict[str, object]:
    """`message_start`'s usage as the API sends it; what the adapter reports for
    `message_start()` + `message_delta(...)`, as their counts are merged (never added)."""
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": cache_creation,
            "ephemeral_1h_input_tokens": 0,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def message_start(
    input_tokens: int = 25,
    output_tokens: int = 1,
    *,
    cache_read: int = 0,
    cache_creation: int = 0,
) -> bytes:
    return sse(
        {
            "type": "message_start",
            "message": {
                "id": MESSAGE_ID,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": MODEL,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage(input_tokens, output_tokens, cache_read, cache_creation),
            },
        },
        event="message_start",
    )


def ping() -> bytes:
    return sse({"type": "ping"}, event="ping")


def block_start(index: int, block: dict[str, object]) -> bytes:
    return sse(
        {"type": "content_block_start", "index": index, "content_block": block},
        event="content_block_start",
    )


def delta(index: int, body: dict[str, object]) -> bytes:
    return sse(
        {"type": "content_block_delta", "index": index, "delta": body},
        event="content_block_delta",
    )


def block_stop(index: int) -> bytes:
    return sse({"type": "content_block_stop", "index": index}, event="content_block_stop")


def text_block(index: int, *pieces: str) -> list[bytes]:
    return [
        block_start(index, {"type": "text", "text": ""}),
        *(delta(index, {"type": "text_delta", "text": piece}) for piece in pieces),
        block_stop(index),
    ]


def thinking_block(index: int, *pieces: str, signature: str = SIGNATURE) -> list[bytes]:
    return [
        block_start(index, {"type": "thinking", "thinking": "", "signature": ""}),
        *(delta(index, {"type": "thinking_delta", "thinking": piece}) for piece in pieces),
        delta(index, {"type": "signature_delta", "signature": signature}),
        block_stop(index),
    ]


def tool_block(index: int, tool_id: str, name: str, *fragments: str) -> list[bytes]:
    return [
        block_start(index, {"type": "tool_use", "id": tool_id, "name": name, "input": {}}),
        delta(index, {"type": "input_json_delta", "partial_json": ""}),
        *(delta(index, {"type": "input_json_delta", "partial_json": f}) for f in fragments),
        block_stop(index),
    ]


def message_delta(stop_reason: str | None, output_tokens: int, **usage: int | None) -> bytes:
    return sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens, **usage},
        },
        event="message_delta",
    )


def message_stop() -> bytes:
    return sse({"type": "message_stop"}, event="message_stop")


def wire(*parts: bytes | list[bytes]) -> list[bytes]:
    """One stream of frames, with the API's `ping` after the first `content_block_start`."""
    frames = [frame for part in parts for frame in ([part] if isinstance(part, bytes) else part)]
    for index, frame in enumerate(frames):
        if frame.startswith(b"event: content_block_start"):
            frames.insert(index + 1, ping())
            break
    return frames


def answer(*blocks: list[bytes], stop_reason: str = "end_turn", output_tokens: int = 15) -> Reply:
    return Reply(
        frames=wire(
            message_start(), *blocks, message_delta(stop_reason, output_tokens), message_stop()
        )
    )


def error_body(error_type: str, message: str) -> dict[str, object]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }


def error_event(error_type: str, message: str) -> bytes:
    return sse({"type": "error", "error": {"type": error_type, "message": message}}, event="error")


# --- helpers -------------------------------------------------------------------------------

QUESTION: list[anthropic.types.MessageParam] = [{"role": "user", "content": "What's up?"}]
WEATHER_TOOL: anthropic.types.ToolParam = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def claude(
    client: anthropic.AsyncAnthropic,
    *,
    max_tokens: int = 1024,
    system: str | None = None,
    tools: Sequence[anthropic.types.ToolParam] | None = None,
    **params: object,
) -> AnthropicProvider:
    """The adapter on `client`, asking `MODEL` the `QUESTION`."""
    return AnthropicProvider(
        client,
        model=MODEL,
        messages=QUESTION,
        max_tokens=max_tokens,
        system=system,
        tools=tools,
        **params,
    )


@asynccontextmanager
async def model(
    *replies: Reply, max_retries: int = 0, **options: Any
) -> AsyncIterator[tuple[ModelServer, AnthropicProvider]]:
    """A local server playing `replies`, and an adapter whose SDK client points at it."""
    async with adapters.anthropic_served(*replies, max_retries=max_retries) as served:
        yield served.server, claude(served.client, **options)


def shown(sequence: Sequence[domain.ProcessedChunk]) -> list[domain.ProcessedChunk]:
    """The chunks that carry something (not the empty keep-alives)."""
    return [
        chunk
        for chunk in sequence
        if not (
            isinstance(chunk, domain.TextChunk)
            and not chunk.content
            and not chunk.thoughts
            and chunk.usage is None
        )
    ]


# --- text ----------------------------------------------------------------------------------


async def test_plain_text_streams_deltas_and_ends_with_done_and_merged_usage() -> None:
    reply = answer(text_block(0, "Hello", " there!"))
    async with model(reply) as (_, provider):
        sequence = await adapters.collect(provider)
    assert shown(sequence) == [
        domain.TextChunk("", usage=usage(output_tokens=1)),  # message_start: the input side at once
        domain.TextChunk("Hello"),
        domain.TextChunk(" there!"),
        domain.TextChunk("", usage=usage()),  # message_delta
        domain.DoneChunk(
            {
                "finish_reason": "stop",
                "raw_finish_reason": "end_turn",
                "model": MODEL,
                "id": MESSAGE_ID,
            },
            usage=usage(),
        ),
    ]
    # Every event but the ping (the SDK drops it) yields one chunk, so each re-arms B2.
    assert len(sequence) == len(reply.frames) - 1
    assert isinstance(sequence[-1], domain.DoneChunk)
    assert sequence[-1].usage == usage()


async def test_plain_text_end_to_end_lands_in_the_channel_with_both_sides_of_usage() -> None:
    reply = answer(text_block(0, "Hello there!\n", "How are", " you?"))
    async with stage() as s, model(reply) as (_, provider):
        result = await s.stream(provider)
    assert result.status == "completed"
    assert result.accumulated_text == s.api.text() == "Hello there!\nHow are you?"  # F2
    assert s.contents == ["Hello there!", "How are you?"]
    assert result.usage == domain.TokenUsage(input_tokens=25, output_tokens=15)
    assert result.data == {
        "finish_reason": "stop",
        "raw_finish_reason": "end_turn",
        "model": MODEL,
        "id": MESSAGE_ID,
    }


async def test_text_blocks_are_joined_as_sent_without_a_separator() -> None:
    # A citation splits an answer into consecutive text blocks; the model writes the spaces.
    reply = answer(text_block(0, "The sky is "), text_block(1, "blue", "."))
    async with model(reply) as (_, provider):
        sequence = await adapters.collect(provider)
    assert adapters.text_of(sequence) == "The sky is blue."


async def test_cached_input_counts_on_the_input_side() -> None:
    frames = wire(
        message_start(input_tokens=10, cache_read=2000, cache_creation=300),
        *text_block(0, "Hi"),
        message_delta("end_turn", 7),
        message_stop(),
    )
    async with stage() as s, model(Reply(frames=frames)) as (_, provider):
        result = await s.stream(provider)
    assert result.status == "completed"
    assert result.usage == domain.TokenUsage(input_tokens=2310, output_tokens=7)


# --- usage ---------------------------------------------------------------------------------


async def test_usage_is_the_latest_running_total_never_a_sum() -> None:
    # Running totals: 1 (message_start), then 40, then 95. A sum would say 136.
    frames = wire(
        message_start(input_tokens=30, output_tokens=1),
        *text_block(0, "One", " two"),
        message_delta(None, 40),
        message_delta("end_turn", 95),
        message_stop(),
    )
    async with model(Reply(frames=frames)) as (_, provider):
        sequence = await adapters.collect(provider)
    reported = [chunk.usage for chunk in sequence if chunk.usage is not None]
    assert [u["output_tokens"] for u in reported] == [1, 40, 95, 95]  # type: ignore[index]
    assert all(u["input_tokens"] == 30 for u in reported)  # type: ignore[index]
    # The stop reason of the later delta.
    assert adapters.finish_of(sequence)["finish_reason"] == "stop"

    async with stage() as s, model(Reply(frames=frames)) as (_, provider):
        result = await s.stream(provider)
    assert result.usage == domain.TokenUsage(input_tokens=30, output_tokens=95)


async def test_message_delta_input_fields_overlay_message_start() -> None:
    # Newer API versions repeat (cumulative) input counts in message_delta: they win.
    frames = wire(
        message_start(input_tokens=30, cache_read=0),
        *text_block(0, "Hi"),
        message_delta("end_turn", 12, input_tokens=31, cache_read_input_tokens=5),
        message_stop(),
    )
    async with model(Reply(frames=frames)) as (_, provider):
        sequence = await adapters.collect(provider)
    assert sequence[-1].usage == usage(input_tokens=31, output_tokens=12, cache_read=5)


# --- thinking ------------------------------------------------------------------------------


async def test_thinking_deltas_are_raw_thoughts_and_never_text() -> None:
    reply = answer(
        thinking_block(0, "Let me think", " about it."), text_block(1, "The answer is 4.")
    )
    async with model(reply) as (_, provider):
        sequence = await adapters.collect(provider)
    thoughts = [thought for chunk in sequence for thought in chunk.thoughts]
    assert thoughts == [domain.Thought("raw", "Let me think"), domain.Thought("raw", " about it.")]
    assert adapters.text_of(sequence) == "The answer is 4."
    assert SIGNATURE not in repr([c for c in sequence if not isinstance(c, domain.DoneChunk)])


async def test_thinking_end_to_end_goes_to_the_thought_log_not_the_channel() -> None:
    reply = answer(
        thinking_block(0, "Let me think", " about it."), text_block(1, "The answer is 4.")
    )
    async with stage() as s, model(reply) as (_, provider):
        result = await s.stream(provider)
    assert result.status == "completed"
    assert s.contents == ["The answer is 4."]
    assert result.thought_log is not None
    assert result.thought_log.raw == "Let me think about it."
    assert result.usage == domain.TokenUsage(25, 15)


async def test_redacted_thinking_shows_nothing() -> None:
    redacted = [
        block_start(0, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}),
        block_stop(0),
    ]
    async with model(answer(redacted, text_block(1, "Done."))) as (_, provider):
        sequence = await adapters.collect(provider)
    assert adapters.text_of(sequence) == "Done."
    assert not any(chunk.thoughts for chunk in sequence)


# --- tool calls ----------------------------------------------------------------------------


def two_tool_calls(output_tokens: int = 89) -> Reply:
    return answer(
        text_block(0, "Let me check both cities."),
        tool_block(1, "toolu_01A", "get_weather", '{"city": ', '"Paris"}'),
        tool_block(2, "toolu_01B", "get_weather", '{"ci', 'ty": "Tokyo", "unit": "c"}'),
        stop_reason="tool_use",
        output_tokens=output_tokens,
    )


PARIS = domain.FunctionCall("get_weather", {"city": "Paris"}, id="toolu_01A")
TOKYO = domain.FunctionCall("get_weather", {"city": "Tokyo", "unit": "c"}, id="toolu_01B")


async def test_parallel_tool_calls_come_last_in_one_chunk_with_the_usage() -> None:
    async with model(two_tool_calls(), tools=[WEATHER_TOOL]) as (_, provider):
        sequence = await adapters.collect(provider)
    last = sequence[-1]
    assert last == domain.FunctionCallChunk((PARIS, TOKYO), usage=usage(output_tokens=89))
    assert last.usage == usage(output_tokens=89)
    assert sum(isinstance(chunk, domain.FunctionCallChunk) for chunk in sequence) == 1
    assert not any(isinstance(chunk, domain.DoneChunk) for chunk in sequence)
    assert adapters.text_of(sequence) == "Let me check both cities."


async def test_parallel_tool_calls_end_to_end_are_a_function_call_result() -> None:
    async with stage() as s, model(two_tool_calls(), tools=[WEATHER_TOOL]) as (_, provider):
        result = await s.stream(provider)
    assert result.status == "function_call"
    assert result.function_calls == (PARIS, TOKYO)
    assert result.data == PARIS
    assert result.usage == domain.TokenUsage(input_tokens=25, output_tokens=89)
    assert s.contents == ["Let me check both cities."]  # E8: flushed before the call


async def test_a_tool_call_without_input_has_empty_arguments() -> None:
    reply = answer(tool_block(0, "toolu_01C", "get_time"), stop_reason="tool_use")
    async with model(reply) as (_, provider):
        sequence = await adapters.collect(provider)
    last = sequence[-1]
    assert isinstance(last, domain.FunctionCallChunk)
    assert last.calls == (domain.FunctionCall("get_time", {}, id="toolu_01C"),)


@pytest.mark.parametrize(
    ("fragments", "problem"),
    [(('{"city": "Par',), "not JSON"), (("[1, 2]",), "a JSON list, not an object")],
    ids=["truncated-json", "not-an-object"],
)
async def test_tool_input_that_is_not_a_json_object_is_a_retryable_error(
    fragments: tuple[str, ...], problem: str
) -> None:
    reply = answer(tool_block(0, "toolu_01D", "get_weather", *fragments), stop_reason="tool_use")
    async with model(reply) as (_, provider):
        sequence = await adapters.collect(provider)
    error = adapters.last_error(sequence)
    assert error.kind == "api_error"
    assert error.code == "invalid_tool_arguments"
    assert error.retryable
    assert problem in error.message
    assert "get_weather" in error.message
    assert not any(isinstance(chunk, domain.FunctionCallChunk) for chunk in sequence)
    with pytest.raises(ValueError, match="did not end in tool calls"):
        provider.after_tools([])


async def test_a_tool_call_cut_by_max_tokens_is_not_a_call() -> None:
    reply = answer(
        text_block(0, "Checking"),
        tool_block(1, "toolu_01E", "get_weather", '{"ci'),
        stop_reason="max_tokens",
    )
    async with model(reply) as (_, provider):
        sequence = await adapters.collect(provider)
    assert not any(
        isinstance(chunk, domain.FunctionCallChunk | domain.ErrorChunk) for chunk in sequence
    )
    assert adapters.finish_of(sequence)["finish_reason"] == "length"


# --- finish reasons ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("pause_turn", "other"),
        ("model_context_window_exceeded", "length"),
    ],
)
async def test_stop_reasons_are_unified(stop_reason: str, finish_reason: str) -> None:
    reply = answer(text_block(0, "Partial answer"), stop_reason=stop_reason)
    async with model(reply) as (_, provider):
        sequence = await adapters.collect(provider)
    metadata = adapters.finish_of(sequence)
    assert metadata["finish_reason"] == finish_reason
    assert metadata["raw_finish_reason"] == stop_reason
    assert sequence[-1].usage == usage()


async def test_max_tokens_end_to_end_completes_with_what_was_written() -> None:
    reply = answer(text_block(0, "A long answer that was cu"), stop_reason="max_tokens")
    async with stage() as s, model(reply) as (_, provider):
        result = await s.stream(provider)
    finish = adapters.completed(result)
    assert finish["finish_reason"] == "length"
    assert s.contents == ["A long answer that was cu"]
    assert result.usage == domain.TokenUsage(25, 15)


async def test_a_matched_stop_sequence_is_in_the_metadata() -> None:
    frames = wire(
        message_start(),
        *text_block(0, "Counting: 1, 2, "),
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "stop_sequence", "stop_sequence": "3"},
                "usage": {"output_tokens": 9},
            },
            event="message_delta",
        ),
        message_stop(),
    )
    async with model(Reply(frames=frames), stop_sequences=["3"]) as (server, provider):
        sequence = await adapters.collect(provider)
    metadata = adapters.finish_of(sequence)
    assert metadata["stop_sequence"] == "3"
    assert metadata["finish_reason"] == "stop"
    assert server.seen[0].body["stop_sequences"] == ["3"]  # type: ignore[index]


def refusal(*pieces: str) -> Reply:
    blocks = [text_block(0, *pieces)] if pieces else []
    refused = [
        sse(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "refusal",
                    "stop_sequence": None,
                    "stop_details": {"type": "refusal", "category": "cyber", "explanation": None},
                },
                "usage": {"output_tokens": 3},
            },
            event="message_delta",
        ),
        message_stop(),
    ]
    return Reply(frames=wire(message_start(), *blocks, refused))


async def test_a_refusal_after_text_is_done_with_content_filter() -> None:
    async with model(refusal("I can help with part of", " that")) as (_, provider):
        sequence = await adapters.collect(provider)
    metadata = adapters.finish_of(sequence)
    assert metadata["finish_reason"] == "content_filter"
    assert metadata["raw_finish_reason"] == "refusal"


async def test_a_refusal_without_text_is_content_blocked() -> None:
    async with model(refusal()) as (_, provider):
        sequence = await adapters.collect(provider)
    error = adapters.last_error(sequence)
    assert error.kind == "content_blocked"
    assert error.code == "refusal"
    assert not error.retryable
    assert sequence[-1].usage == usage(output_tokens=3)


async def test_a_refusal_end_to_end_with_and_without_text() -> None:
    async with stage() as s, model(refusal("I can't go", " further.")) as (_, provider):
        result = await s.stream(provider)
        assert result.status == "completed"
        assert s.contents == ["I can't go further."]
    async with stage() as s, model(refusal()) as (_, provider):
        result = await s.stream(provider)
        assert adapters.result_error(result).kind == "content_blocked"
        assert result.usage == domain.TokenUsage(25, 3)
        assert s.contents == []
        assert len(s.embeds) == 1


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type", "message", "kind", "retryable"),
    [
        (
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your limit",
            "rate_limit",
            True,
        ),
        (500, "api_error", "Internal server error", "api_error", True),
        (529, "overloaded_error", "Overloaded", "provider_overloaded", True),
        (404, "not_found_error", f"model: {MODEL}-nope", "model_error", False),
        (400, "invalid_request_error", "max_tokens: Field required", "api_error", False),
        (401, "authentication_error", "invalid x-api-key", "api_error", False),
    ],
    ids=["429", "500", "529", "404-model", "400", "401"],
)
async def test_http_errors_map_to_provider_errors(
    status: int, error_type: str, message: str, kind: str, retryable: bool
) -> None:
    reply = Reply(status=status, body=error_body(error_type, message))
    async with model(reply) as (server, provider):
        sequence = await adapters.collect(provider)
    assert len(sequence) == 1
    error = adapters.last_error(sequence)
    assert (error.kind, error.retryable, error.code) == (kind, retryable, status)
    assert error.message == message
    assert isinstance(error.original, anthropic.APIStatusError)
    assert len(server.seen) == 1  # max_retries=0: the SDK did not retry


async def test_http_429_end_to_end_is_an_error_result_with_the_rate_limit_headline() -> None:
    reply = Reply(status=429, body=error_body("rate_limit_error", "Slow down"))
    async with stage() as s, model(reply) as (_, provider):
        result = await s.stream(provider)
    assert adapters.result_error(result).kind == "rate_limit"
    (embed,) = s.embeds
    assert "rate limiting" in str(embed["description"])
    assert "Slow down" in str(embed["description"])


async def test_http_404_unknown_model_end_to_end_is_a_model_error() -> None:
    reply = Reply(status=404, body=error_body("not_found_error", "model: claude-x"))
    async with stage() as s, model(reply) as (_, provider):
        result = await s.stream(provider)
    assert adapters.result_error(result).kind == "model_error"
    assert [embed["title"] for embed in s.embeds] == ["Model Configuration Error"]


async def test_a_mid_stream_overloaded_event_is_provider_overloaded() -> None:
    frames = wire(
        message_start(),
        *text_block(0, "Half an ans")[:-1],
        error_event("overloaded_error", "Overloaded"),
    )
    async with model(Reply(frames=frames)) as (_, provider):
        sequence = await adapters.collect(provider)
    error = adapters.last_error(sequence)
    assert error.kind == "provider_overloaded"
    assert error.retryable
    assert error.code == "overloaded_error"
    assert error.message == "Overloaded"
    # The SDK raises the event as an APIStatusError on the stream's own 200 response.
    assert isinstance(error.original, anthropic.APIStatusError)
    assert error.original.status_code == 200
    assert adapters.text_of(sequence) == "Half an ans"


async def test_a_mid_stream_error_end_to_end_keeps_the_text_and_the_input_usage() -> None:
    frames = wire(
        message_start(input_tokens=40),
        *text_block(0, "First line\n", "Half an ans")[:-1],
        error_event("overloaded_error", "Overloaded"),
    )
    async with stage() as s, model(Reply(frames=frames)) as (_, provider):
        result = await s.stream(provider)
    assert adapters.result_error(result).kind == "provider_overloaded"
    assert result.accumulated_text.startswith("First line")
    assert s.contents[0] == "First line"
    assert result.usage == domain.TokenUsage(input_tokens=40, output_tokens=1)  # from message_start
    (embed,) = s.embeds
    assert "overloaded" in str(embed["description"])


async def test_a_mid_stream_error_of_another_type_is_retryable_api_error() -> None:
    frames = [message_start(), error_event("api_error", "Internal server error")]
    async with model(Reply(frames=frames)) as (_, provider):
        sequence = await adapters.collect(provider)
    error = adapters.last_error(sequence)
    assert (error.kind, error.retryable, error.code) == ("api_error", True, "api_error")


async def test_a_connection_cut_mid_stream_is_a_connection_error() -> None:
    frames = answer(text_block(0, "Hello", " there")).frames
    async with model(Reply(frames=frames, cut_after=4)) as (_, provider):  # after "Hello"
        sequence = await adapters.collect(provider)
    error = adapters.last_error(sequence)
    assert (error.kind, error.code, error.retryable) == ("api_error", "connection_error", True)
    assert isinstance(error.original, httpx2.TransportError)  # the SDK does not wrap it
    assert adapters.text_of(sequence) == "Hello"


async def test_a_connection_cut_end_to_end_is_an_error_with_what_was_written() -> None:
    frames = answer(text_block(0, "Hello\n", "there")).frames
    async with stage() as s, model(Reply(frames=frames, cut_after=5)) as (_, provider):
        result = await s.stream(provider)
    assert adapters.result_error(result).code == "connection_error"
    assert s.contents[0] == "Hello"
    assert result.usage == domain.TokenUsage(25, 1)


async def test_a_refused_connection_is_a_connection_error() -> None:
    async with ModelServer() as server:
        url = server.url  # the server stops: nothing listens on this port any more
    client = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)
    sequence = await adapters.collect(claude(client, max_tokens=64))
    await client.close()
    error = adapters.last_error(sequence)
    assert (error.kind, error.code, error.retryable) == ("api_error", "connection_error", True)
    assert isinstance(error.original, anthropic.APIConnectionError)


async def test_the_clients_read_timeout_mid_stream_is_a_timeout() -> None:
    frames = wire(message_start(), *text_block(0, "Slow")[:-1])
    async with adapters.anthropic_served(
        Reply(frames=frames, hang_after=len(frames)), timeout=5.0
    ) as served:
        loop = asyncio.get_running_loop()
        start = loop.time()
        sequence = await adapters.collect(claude(served.client, max_tokens=64))
        elapsed = loop.time() - start
    error = adapters.last_error(sequence)
    assert (error.kind, error.retryable) == ("timeout", True)
    assert isinstance(error.original, httpx2.TimeoutException)  # the SDK does not wrap it
    assert 5.0 <= elapsed <= 5.1
    assert adapters.text_of(sequence) == "Slow"


async def test_a_stream_without_message_stop_is_truncated() -> None:
    frames = wire(message_start(), *text_block(0, "All of it?"), message_delta("end_turn", 15))
    async with model(Reply(frames=frames)) as (_, provider):
        sequence = await adapters.collect(provider)
    error = adapters.last_error(sequence)
    assert error.code == "truncated"
    assert error.retryable
    assert not any(isinstance(chunk, domain.DoneChunk) for chunk in sequence)

    async with stage() as s, model(Reply(frames=frames)) as (_, provider):
        result = await s.stream(provider)
    assert result.status == "error"
    assert s.contents == ["All of it?"]
    assert result.usage == domain.TokenUsage(25, 15)
    (embed,) = s.embeds
    assert "cut off" in str(embed["description"])


async def test_the_sdk_retry_on_429_still_works_through_the_adapter() -> None:
    limited = Reply(
        status=429,
        body=error_body("rate_limit_error", "Slow down"),
        headers={"retry-after": "2"},
    )
    async with (
        stage() as s,
        model(limited, answer(text_block(0, "Worth the wait.")), max_retries=1) as (
            server,
            provider,
        ),
    ):
        result = await s.stream(provider, StreamConfig(delivery="messages", inactivity_timeout=30))
    assert result.status == "completed"
    assert s.contents == ["Worth the wait."]
    assert [seen.headers["x-stainless-retry-count"] for seen in server.seen] == ["0", "1"]


async def test_unknown_events_blocks_and_deltas_are_keep_alives() -> None:
    # A future API may add any of these; the SDK builds them as the first class of its union
    # with every field None, so the adapter must go by the wire `type`.
    frames = wire(
        message_start(),
        sse({"type": "future_event", "data": 1}, event="future_event"),
        block_start(0, {"type": "future_block", "payload": "x"}),
        delta(0, {"type": "future_delta", "payload": "y"}),
        block_stop(0),
        *text_block(1, "Still fine."),
        message_delta("end_turn", 15),
        message_stop(),
    )
    async with model(Reply(frames=frames)) as (_, provider):
        sequence = await adapters.collect(provider)
    assert adapters.text_of(sequence) == "Still fine."
    assert isinstance(sequence[-1], domain.DoneChunk)
    assert len(sequence) == len(frames) - 1  # every event but the ping


async def test_text_deltas_of_a_malformed_shape_still_count_or_are_keep_alives() -> None:
    """The SDK builds events without validating them: an index that is not an int (even one
    that cannot be a dict key) means block 0, as a delta without its block start opens one;
    a text that is not a string, or a delta that is not an object, shows nothing."""
    frames = wire(
        message_start(),
        *text_block(0, "One"),
        sse(
            {
                "type": "content_block_delta",
                "index": [0],
                "delta": {"type": "text_delta", "text": ", two"},
            },
            event="content_block_delta",
        ),
        sse(
            {
                "type": "content_block_delta",
                "index": "0",
                "delta": {"type": "text_delta", "text": ", three"},
            },
            event="content_block_delta",
        ),
        sse(
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": ", four"}},
            event="content_block_delta",
        ),
        delta(0, {"type": "text_delta", "text": 5}),
        sse(
            {"type": "content_block_delta", "index": 0, "delta": "text_delta"},
            event="content_block_delta",
        ),
        delta(2, {"type": "text_delta", "text": "."}),
        message_delta("end_turn", 15),
        message_stop(),
    )
    async with model(Reply(frames=frames)) as (_, provider):
        sequence = await adapters.collect(provider)
    assert adapters.text_of(sequence) == "One, two, three, four."
    assert isinstance(sequence[-1], domain.DoneChunk)
    assert len(sequence) == len(frames) - 1  # every event but the ping


# --- the request ---------------------------------------------------------------------------


async def test_the_request_streams_and_sends_system_and_tools_only_when_given() -> None:
    reply = answer(text_block(0, "ok"))
    async with model(reply) as (server, provider):
        await adapters.collect(provider)
    assert server.seen[0].path == "/v1/messages"
    assert server.seen[0].body == {
        "model": MODEL,
        "messages": QUESTION,
        "max_tokens": 1024,
        "stream": True,
    }

    async with model(
        reply,
        system="You are terse.",
        tools=[WEATHER_TOOL],
        metadata={"user_id": "user-42"},
        extra_body={"temperature": 0.2},
        thinking={"type": "enabled", "budget_tokens": 512},
    ) as (server, provider):
        await adapters.collect(provider)
    assert server.seen[0].body == {
        "model": MODEL,
        "messages": QUESTION,
        "max_tokens": 1024,
        "stream": True,
        "system": "You are terse.",
        "tools": [WEATHER_TOOL],
        "metadata": {"user_id": "user-42"},
        "temperature": 0.2,
        "thinking": {"type": "enabled", "budget_tokens": 512},
    }


async def test_each_start_stream_is_a_fresh_request() -> None:
    async with model(answer(text_block(0, "again"))) as (server, provider):
        first = await adapters.collect(provider)
        second = await adapters.collect(provider)
    assert first == second
    assert len(server.seen) == 2


async def test_stream_is_not_a_parameter() -> None:
    client = anthropic.AsyncAnthropic(api_key="k")
    with pytest.raises(TypeError, match="always streams"):
        AnthropicProvider(client, model=MODEL, messages=QUESTION, max_tokens=1, stream=False)
    await client.close()


# --- after_tools ---------------------------------------------------------------------------


async def test_after_tools_appends_the_answer_as_received_and_the_tool_results() -> None:
    reply = answer(
        thinking_block(0, "Two cities", ", two calls."),
        [
            block_start(1, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}),
            block_stop(1),
        ],
        text_block(2, "Let me check ", "both."),
        tool_block(3, "toolu_01A", "get_weather", '{"city": ', '"Paris"}'),
        tool_block(4, "toolu_01B", "get_weather", '{"ci', 'ty": "Tokyo", "unit": "c"}'),
        stop_reason="tool_use",
    )
    async with model(reply, system="Be brief.", tools=[WEATHER_TOOL]) as (server, provider):
        sequence = await adapters.collect(provider)
        assert sequence[-1] == domain.FunctionCallChunk((PARIS, TOKYO), usage=usage())
        following = provider.after_tools(
            [ToolOutcome(PARIS, '{"temp": 18}'), ToolOutcome(TOKYO, "timeout", is_error=True)]
        )
        server.replies[:] = [answer(text_block(0, "Paris is mild."))]
        assert adapters.text_of(await adapters.collect(following)) == "Paris is mild."
    assert following is not provider
    assert following.messages[: len(QUESTION)] == tuple(QUESTION)
    sent = server.seen[1].body
    assert isinstance(sent, dict)
    assert sent["system"] == "Be brief."
    assert sent["tools"] == [WEATHER_TOOL]
    assert sent["max_tokens"] == 1024
    assert sent["messages"] == [
        *QUESTION,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Two cities, two calls.", "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
                {"type": "text", "text": "Let me check both."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_01B",
                    "name": "get_weather",
                    "input": {"city": "Tokyo", "unit": "c"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": '{"temp": 18}'},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01B",
                    "content": "timeout",
                    "is_error": True,
                },
            ],
        },
    ]
    # The first provider's request is unchanged: after_tools builds a new one.
    assert provider.messages == tuple(QUESTION)


async def test_each_text_delta_goes_to_its_own_block_whichever_is_open() -> None:
    """Text deltas go to the block they name: the open text block, one that already stopped, or
    none after `message_stop` (nothing after it counts); what `after_tools` sends back has each
    block's text as it came."""
    frames = wire(
        message_start(),
        *text_block(0, "First", " part."),
        *tool_block(1, "toolu_01A", "get_weather", '{"city": "Paris"}'),
        delta(0, {"type": "text_delta", "text": " Late."}),
        *text_block(2, "Then", " more."),
        message_delta("tool_use", 15),
        message_stop(),
        delta(2, {"type": "text_delta", "text": " Ignored."}),
    )
    async with model(Reply(frames=frames), tools=[WEATHER_TOOL]) as (server, provider):
        sequence = await adapters.collect(provider)
        assert adapters.text_of(sequence) == "First part. Late.Then more."
        assert sequence[-1] == domain.FunctionCallChunk((PARIS,), usage=usage())
        server.replies[:] = [answer(text_block(0, "Mild."))]
        await adapters.collect(provider.after_tools([ToolOutcome(PARIS, "18")]))
    sent = server.seen[1].body
    assert isinstance(sent, dict)
    content = sent["messages"][1]["content"]
    assert [block.get("text") for block in content] == ["First part. Late.", None, "Then more."]


async def test_after_tools_passes_cited_text_back_with_its_citations() -> None:
    citation = {
        "type": "char_location",
        "cited_text": "The grass is green.",
        "document_index": 0,
        "document_title": "My Document",
        "start_char_index": 0,
        "end_char_index": 20,
    }
    cited = [
        block_start(0, {"type": "text", "text": "", "citations": []}),
        delta(0, {"type": "citations_delta", "citation": citation}),
        delta(0, {"type": "text_delta", "text": "the grass is green"}),
        block_stop(0),
    ]
    reply = answer(
        cited,
        tool_block(1, "toolu_01A", "get_weather", '{"city": "Paris"}'),
        stop_reason="tool_use",
    )
    async with model(reply) as (_, provider):
        sequence = await adapters.collect(provider)
        assert adapters.text_of(sequence) == "the grass is green"
        following = provider.after_tools([ToolOutcome(PARIS, "sunny")])
    assistant = following.messages[-2]
    assert assistant["content"][0] == {  # type: ignore[index]
        "type": "text",
        "text": "the grass is green",
        "citations": [citation],
    }


async def test_after_tools_refuses_when_the_last_stream_was_not_a_tool_call() -> None:
    async with model(answer(text_block(0, "No tools needed."))) as (_, provider):
        with pytest.raises(ValueError, match="did not end in tool calls"):
            provider.after_tools([ToolOutcome(PARIS, "x")])
        await adapters.collect(provider)
        with pytest.raises(ValueError, match="did not end in tool calls"):
            provider.after_tools([ToolOutcome(PARIS, "x")])


async def test_after_tools_refuses_results_that_do_not_match_the_calls() -> None:
    async with model(two_tool_calls()) as (_, provider):
        await adapters.collect(provider)
        with pytest.raises(ValueError, match="do not answer"):
            provider.after_tools([ToolOutcome(PARIS, "only one")])
        with pytest.raises(ValueError, match="do not answer"):
            provider.after_tools(
                [ToolOutcome(PARIS, "a"), ToolOutcome(domain.FunctionCall("x", id="toolu_zz"), "b")]
            )
        following = provider.after_tools([ToolOutcome(TOKYO, "b"), ToolOutcome(PARIS, "a")])
        assert isinstance(following, AnthropicProvider)


async def test_a_retry_that_fails_forgets_the_earlier_tool_calls() -> None:
    async with model(
        two_tool_calls(), Reply(status=529, body=error_body("overloaded_error", "Overloaded"))
    ) as (_, provider):
        await adapters.collect(provider)
        await adapters.collect(provider)
        with pytest.raises(ValueError, match="did not end in tool calls"):
            provider.after_tools([ToolOutcome(PARIS, "a"), ToolOutcome(TOKYO, "b")])


# --- stopping and closing ------------------------------------------------------------------


async def test_a_stop_while_the_model_hangs_ends_the_stream_and_closes_the_http_stream() -> None:
    open_at_stop: list[bool] = []
    frames = wire(message_start(), *text_block(0, "Some text\n", "pending")[:-1])
    async with stage() as s, recorded(frames) as (served, responses):
        provider = claude(served.client, max_tokens=64)
        loop = asyncio.get_running_loop()

        def stop() -> None:
            open_at_stop.append(not responses[0].is_closed)
            s.orchestrator.request_stop(s.channel.id, "user-1")

        loop.call_later(5, stop)
        start = loop.time()
        result = await s.stream(provider)
        elapsed = loop.time() - start
        assert result.status == "stopped_by_user"
        assert elapsed <= 5.05
        assert s.contents == ["Some text", "pending"]  # C6: a user stop flushes
        assert result.usage == domain.TokenUsage(25, 1)
        assert open_at_stop == [True]
        assert len(responses) == 1
        assert responses[0].is_closed  # B10: the HTTP stream to the model is closed


@asynccontextmanager
async def recorded(
    frames: list[bytes],
) -> AsyncIterator[tuple[adapters.Served[anthropic.AsyncAnthropic], list[httpx2.Response]]]:
    """A server that sends `frames`, then nothing, and a client whose HTTP responses the test
    can inspect (`is_closed`)."""
    responses: list[httpx2.Response] = []

    async def record(response: httpx2.Response) -> None:
        responses.append(response)

    http = anthropic.DefaultAsyncHttpxClient(event_hooks={"response": [record]})
    try:
        reply = Reply(frames=frames, hang_after=len(frames))
        async with adapters.anthropic_served(reply, http_client=http) as served:
            yield served, responses
    finally:
        await http.aclose()


async def test_closing_the_adapter_between_chunks_closes_the_http_stream() -> None:
    # B10: the shell closes the iterator between chunks too (a stop noticed after delivery).
    frames = wire(message_start(), *text_block(0, "Some", " text")[:-1])
    async with recorded(frames) as (served, responses):
        provider = claude(served.client, max_tokens=64)
        iterator = provider.start_stream(StreamConfig(delivery="messages"), adapters.ADAPTER_ONLY)
        seen = [provider.process_chunk(await anext(iterator)) for _ in range(3)]
        assert adapters.text_of(seen) == "Some"
        assert not responses[0].is_closed
        await iterator.aclose()  # type: ignore[attr-defined]  # an async generator
        assert responses[0].is_closed


async def test_closing_mid_answer_leaves_no_sdk_generator_to_the_event_loop() -> None:
    # B11: closed mid-answer, the adapter closes the SDK's suspended generators itself (its
    # `async for` generator and those under it), so none is handed to the event loop's
    # finalizer, which would close it in a task of its own, after the call.
    frames = wire(message_start(), *text_block(0, "Some", " text")[:-1])
    with adapters.finalized_generators() as handed:
        async with recorded(frames) as (served, responses):
            provider = claude(served.client, max_tokens=64)
            iterator = provider.start_stream(
                StreamConfig(delivery="messages"), adapters.ADAPTER_ONLY
            )
            seen = [provider.process_chunk(await anext(iterator)) for _ in range(3)]
            assert adapters.text_of(seen) == "Some"
            await iterator.aclose()  # type: ignore[attr-defined]  # an async generator
            del iterator
            assert responses[0].is_closed
    assert handed == []


async def test_closing_early_leaves_no_task_behind() -> None:
    # The core closes the adapter right after a FunctionCallChunk, before the SDK's generator
    # is exhausted; the adapter closes it then, not the garbage collector in a task of its own.
    async with model(two_tool_calls()) as (_, provider):
        iterator = provider.start_stream(StreamConfig(delivery="messages"), adapters.ADAPTER_ONLY)
        async for raw in iterator:
            if isinstance(raw, domain.FunctionCallChunk):
                break
        before = asyncio.all_tasks()
        await iterator.aclose()  # type: ignore[attr-defined]  # an async generator
        del iterator
        for _ in range(5):
            await asyncio.sleep(0)
        assert asyncio.all_tasks() <= before
