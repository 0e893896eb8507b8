"""`OpenAIChatProvider` against the real openai SDK and a local model server
(`cordstream.shell.testing.sse`).

The replayed streams are the wire format OpenAI and the compatible servers send: OpenAI's
chunks (a role delta first, `obfuscation`, `usage: null` on every chunk, the trailing
`choices: []` usage chunk, `[DONE]`), DeepSeek's `reasoning_content`, OpenRouter's
`reasoning`, chunk-level `provider`, `: OPENROUTER PROCESSING` comments and in-chunk errors,
llama.cpp's usage inside the finish chunk, vLLM's usage on every chunk, Azure's
`prompt_filter_results` chunk, and OpenAI's error bodies. Each case is checked on the chunks the
adapter yields (`start_stream` + `process_chunk`, tests/support/adapters.py), and the main ones
end to end through `stream_to_discord`, a real discord.py client and the Discord emulator.

Everything runs on looptime's virtual clock: the SDK's retry pause and read timeout, and the
orchestrator's timers, cost no real time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from cordstream import domain
from cordstream.domain.catalogue import DEFAULT_CATALOGUE
from cordstream.shell import StreamConfig, StreamOrchestrator, StreamResult
from cordstream.shell.providers import base
from cordstream.shell.providers.base import ToolOutcome
from cordstream.shell.providers.openai import OpenAIChatProvider, _Answer
from cordstream.shell.testing.sse import Reply, sse, sse_done
from tests.support import adapters
from tests.support.adapters import openai_served as served
from tests.support.stage import other_tasks, stage

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

ID = "chatcmpl-C3fXk1b9QyV0m2Lw8Jr5sTnAe7HdP"
MODEL = "gpt-4.1-mini-2025-04-14"
USER: list[dict[str, object]] = [{"role": "user", "content": "Hi"}]
WEATHER_TOOL: dict[str, object] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


# -- the wire format ---------------------------------------------------------------------------


def chunk(
    delta: dict[str, object] | None = None, finish: str | None = None, /, **top: object
) -> bytes:
    """One OpenAI `chat.completion.chunk` frame; `top` overrides or adds top-level fields."""
    body: dict[str, object] = {
        "id": ID,
        "object": "chat.completion.chunk",
        "created": 1755000000,
        "model": MODEL,
        "service_tier": "default",
        "system_fingerprint": "fp_6f2eabb9a5",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
        "usage": None,
        "obfuscation": "q8XbT",
    }
    body.update(top)
    return sse(body)


def openai_usage(prompt: int, completion: int) -> dict[str, object]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def usage_chunk(prompt: int, completion: int) -> bytes:
    """The trailing chunk `stream_options.include_usage` adds: no choices, the whole usage."""
    return chunk(choices=[], usage=openai_usage(prompt, completion), obfuscation="Zr")


ROLE = chunk({"role": "assistant", "content": "", "refusal": None, "annotations": []})


def text_answer(
    *pieces: str, finish: str = "stop", usage: tuple[int, int] | None = (12, 5)
) -> list[bytes]:
    frames = [ROLE, *(chunk({"content": piece}) for piece in pieces), chunk({}, finish)]
    if usage is not None:
        frames.append(usage_chunk(*usage))
    return [*frames, sse_done()]


def tool_start(index: int, call_id: str | None, name: str) -> dict[str, object]:
    call: dict[str, object] = {
        "index": index,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    if call_id is not None:
        call["id"] = call_id
    return call


def tool_args(index: int, fragment: str) -> dict[str, object]:
    return {"index": index, "function": {"arguments": fragment}}


def status_reply(status: int, message: str, kind: str, code: str | None) -> Reply:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Reply(status=status, body=body, headers={"x-request-id": "req_8d0f3c"})


RATE_LIMITED = status_reply(
    429,
    "Rate limit reached for gpt-4.1-mini in organization org-Xy on tokens per min (TPM): "
    "Limit 200000, Used 199500, Requested 900. Please try again in 120ms.",
    "tokens",
    "rate_limit_exceeded",
)


# -- running the adapter -----------------------------------------------------------------------


def chat(client: openai.AsyncOpenAI, **changes: object) -> OpenAIChatProvider:
    """The adapter on `client`, asking `gpt-4.1-mini` "Hi", with `changes` to its arguments."""
    options: dict[str, object] = {"model": "gpt-4.1-mini", "messages": USER}
    options.update(changes)
    return OpenAIChatProvider(client, **options)  # type: ignore[arg-type]


async def run(
    frames: Sequence[bytes], **changes: object
) -> tuple[list[domain.ProcessedChunk], adapters.Served[openai.AsyncOpenAI]]:
    async with served(Reply(frames=frames)) as server:
        chunks = await adapters.collect(chat(server.client, **changes))
    return chunks, server


async def failure(reply: Reply) -> domain.ProviderError:
    """The error of a stream that fails with `reply`: exactly one chunk, an `ErrorChunk`."""
    async with served(reply) as server:
        chunks = await adapters.collect(chat(server.client))
    assert len(chunks) == 1, chunks
    return adapters.last_error(chunks)


async def thought_end_to_end(frames: Sequence[bytes], text: str, raw: str) -> StreamResult:
    """Through Discord: the answer completes, `text` is the channel's one message and `raw` the
    thought log's reasoning; the result, for more checks."""
    async with stage() as s, served(Reply(frames=frames)) as server:
        result = await s.stream(chat(server.client))
        assert result.status == "completed"
        assert result.accumulated_text == text
        assert s.contents == [text]
        assert result.thought_log is not None
        assert result.thought_log.raw == raw
        return result


def thoughts(chunks: Sequence[domain.ProcessedChunk]) -> str:
    return "".join(t.content for c in chunks for t in c.thoughts if t.kind == "raw")


# -- text, reasoning, usage --------------------------------------------------------------------


async def test_plain_text_yields_a_chunk_per_sdk_chunk_and_ends_with_done_carrying_usage() -> None:
    chunks, server = await run(text_answer("Hello", " world"))
    assert chunks[:5] == [
        domain.TextChunk(""),
        domain.TextChunk("Hello"),
        domain.TextChunk(" world"),
        domain.TextChunk(""),  # the finish chunk
        domain.TextChunk(""),  # the usage chunk
    ]
    assert all(c.usage is None for c in chunks[:5])  # usage comes once, complete, at the end
    assert adapters.finish_of(chunks) == {
        "finish_reason": "stop",
        "raw_finish_reason": "stop",
        "model": MODEL,
        "id": ID,
    }
    assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(12, 5)
    assert len(chunks) == 6
    assert len(server.seen) == 1


async def test_plain_text_end_to_end_completes_with_usage_and_lands_in_the_channel() -> None:
    async with (
        stage() as s,
        served(Reply(frames=text_answer("Hello there!\n", "Bye"))) as server,
    ):
        before = other_tasks()
        result = await s.stream(chat(server.client))
        # B11: the SDK's generators were closed, not left to the garbage collector.
        assert adapters.tasks_left(before) == set()
        finish = adapters.completed(result)
        assert result.accumulated_text == "Hello there!\nBye"  # F2: joined by a line break
        assert s.contents == ["Hello there!", "Bye"]
        assert result.usage == domain.TokenUsage(12, 5)
        assert finish["finish_reason"] == "stop"
        assert finish["model"] == MODEL


class Shouting(OpenAIChatProvider):
    """A host's subclass that rewrites chunks (`process_chunk`): it gets plain text as a
    `TextChunk`, as ever, not as the `str` the adapter hands the provider's task."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.raws: list[type] = []  # the type of each item it was given

    def process_chunk(self, raw: base.Item) -> domain.ProcessedChunk:
        self.raws.append(type(raw))
        chunk = super().process_chunk(raw)
        if isinstance(chunk, domain.TextChunk):
            return dataclasses.replace(chunk, content=chunk.content.upper())
        return chunk


async def test_B5_plain_text_skips_process_chunk_unless_a_subclass_rewrites_chunks() -> None:
    frames = text_answer("Hello there!\n", "Bye")
    async with stage() as s, served(Reply(frames=frames)) as server:
        plain = chat(server.client)
        given: list[type] = []  # what the provider's task hands `process_chunk`
        process = plain.process_chunk

        def counted(raw: base.Item) -> domain.ProcessedChunk:
            given.append(type(raw))
            return process(raw)

        plain.process_chunk = counted  # type: ignore[method-assign]  # the instance's: still plain
        assert plain.plain_text_items  # text goes to the task as the str itself
        result = await s.stream(plain)
        assert result.accumulated_text == "Hello there!\nBye"
        # The role, finish and usage chunks' keep-alives and the end; not the two texts.
        assert given == [domain.TextChunk] * 3 + [domain.DoneChunk]
    async with stage() as s, served(Reply(frames=frames)) as server:
        shouting = Shouting(server.client, model="gpt-4.1-mini", messages=USER)
        assert not shouting.plain_text_items
        result = await s.stream(shouting)
        assert result.accumulated_text == "HELLO THERE!\nBYE"  # each text went through it
        assert str not in shouting.raws
        assert shouting.raws.count(domain.TextChunk) == 5  # role, 2 texts, finish, usage


async def test_the_request_asks_for_a_stream_with_usage_and_omits_tools_when_none_given() -> None:
    _, server = await run(text_answer("ok"), temperature=0.3)
    assert len(server.seen) == 1
    seen = server.seen[0]
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["Authorization"] == "Bearer sk-test"
    assert seen.body == {
        "model": "gpt-4.1-mini",
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.3,
    }


async def test_the_request_carries_tools_when_given_and_merges_stream_options() -> None:
    _, server = await run(
        text_answer("ok"),
        tools=[WEATHER_TOOL],
        stream_options={"include_obfuscation": False},
        tool_choice="auto",
    )
    body = server.seen[0].body
    assert isinstance(body, dict)
    assert body["tools"] == [WEATHER_TOOL]
    assert body["tool_choice"] == "auto"
    assert body["stream_options"] == {"include_obfuscation": False, "include_usage": True}


async def test_an_empty_tool_list_and_stream_options_none_are_left_out() -> None:
    _, server = await run(text_answer("ok"), tools=[], stream_options=None)
    body = server.seen[0].body
    assert isinstance(body, dict)
    assert "tools" not in body
    assert "stream_options" not in body


async def test_parameters_the_adapter_sets_itself_are_refused() -> None:
    async with served() as server:
        with pytest.raises(TypeError, match="always streams"):
            OpenAIChatProvider(server.client, model="m", messages=USER, stream=False)
        provider = chat(server.client)
        assert server.seen == []  # building a provider sends nothing
    assert provider.name == "openai"
    error = domain.ProviderError("rate_limit", "slow down", retryable=True)
    assert provider.describe_error(error, "en") == base.describe_error(error, "en")


async def test_deepseek_reasoning_content_becomes_raw_thoughts_not_text() -> None:
    deepseek = {"model": "deepseek-reasoner", "system_fingerprint": "fp_ffc7281d48_prod0820"}
    frames = [
        chunk({"role": "assistant", "content": None, "reasoning_content": ""}, **deepseek),
        chunk({"content": None, "reasoning_content": "The user"}, **deepseek),
        chunk({"content": None, "reasoning_content": " greets me."}, **deepseek),
        chunk({"content": "Hello!", "reasoning_content": None}, **deepseek),
        chunk({"content": "", "reasoning_content": None}, "stop", **deepseek),
        chunk(
            choices=[],
            usage={
                "prompt_tokens": 10,
                "completion_tokens": 9,
                "total_tokens": 19,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 6},
                "prompt_cache_hit_tokens": 0,
                "prompt_cache_miss_tokens": 10,
            },
            **deepseek,
        ),
        sse_done(),
    ]
    chunks, _ = await run(frames)
    assert adapters.text_of(chunks) == "Hello!"
    assert [t for c in chunks for t in c.thoughts] == [
        domain.Thought("raw", "The user"),
        domain.Thought("raw", " greets me."),
    ]
    assert adapters.finish_of(chunks)["model"] == "deepseek-reasoner"
    assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(10, 9)

    await thought_end_to_end(frames, "Hello!", "The user greets me.")


OPENROUTER_USAGE = {
    "prompt_tokens": 14,
    "completion_tokens": 30,
    "total_tokens": 44,
    "cost": 0.000492,
    "is_byok": False,
    "prompt_tokens_details": {"cached_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 22},
}


def openrouter(delta: dict[str, object], finish: str | None = None, **top: object) -> bytes:
    fields: dict[str, object] = {
        "id": "gen-1755000000-Xq7ZkP2mB9vN4cL1sT8w",
        "provider": "Anthropic",
        "model": "anthropic/claude-sonnet-4",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": finish,
                "native_finish_reason": finish and "end_turn",
                "logprobs": None,
            }
        ],
    }
    fields.update(top)
    body = {"object": "chat.completion.chunk", "created": 1755000000, **fields}
    return sse(body)


async def test_openrouter_reasoning_and_serving_provider_through_the_adapter_and_discord() -> None:
    frames = [
        b": OPENROUTER PROCESSING\n\n",
        openrouter(
            {"role": "assistant", "content": "", "reasoning": "Short", "reasoning_details": []}
        ),
        openrouter({"role": "assistant", "content": "", "reasoning": " answer."}),
        openrouter({"role": "assistant", "content": "Sure, ", "reasoning": None}),
        openrouter({"role": "assistant", "content": "here it is."}),
        openrouter({"role": "assistant", "content": ""}, "stop"),
        openrouter({"role": "assistant", "content": ""}, choices=[], usage=OPENROUTER_USAGE),
        sse_done(),
    ]
    chunks, _ = await run(frames)
    assert adapters.text_of(chunks) == "Sure, here it is."
    assert thoughts(chunks) == "Short answer."
    assert all(c.serving_provider == "Anthropic" for c in chunks)
    done = chunks[-1]
    assert isinstance(done, domain.DoneChunk)
    assert domain.normalize_usage(done.usage) == domain.TokenUsage(14, 30)

    result = await thought_end_to_end(frames, "Sure, here it is.", "Short answer.")
    assert result.thought_log is not None
    assert result.thought_log.serving_provider == "Anthropic"
    assert result.usage == domain.TokenUsage(14, 30)


async def test_a_delta_with_both_reasoning_fields_shows_the_thought_once() -> None:
    # vLLM sends the same reasoning under both names.
    frames = [
        ROLE,
        chunk({"reasoning_content": "think", "reasoning": "think"}),
        chunk({"content": "done"}, "stop"),
        sse_done(),
    ]
    chunks, _ = await run(frames)
    assert thoughts(chunks) == "think"


async def test_inline_think_passes_through_for_the_core_to_capture() -> None:
    frames = text_answer("<think>The user", " says hi.</think>", "Hi!")
    chunks, _ = await run(frames)
    assert adapters.text_of(chunks) == "<think>The user says hi.</think>Hi!"
    assert thoughts(chunks) == ""

    await thought_end_to_end(frames, "Hi!", "The user says hi.")


async def test_usage_latest_wins_on_every_chunk_inside_the_finish_chunk_or_never() -> None:
    # vLLM `continuous_usage_stats`: a running usage on every chunk.
    def running(completion: int) -> dict[str, object]:
        return {"prompt_tokens": 7, "total_tokens": 7 + completion, "completion_tokens": completion}

    vllm = [
        chunk({"role": "assistant", "content": ""}, usage=running(0)),
        chunk({"content": "a"}, usage=running(1)),
        chunk({"content": "b"}, "stop", usage=running(2)),
        chunk(choices=[], usage=running(2)),
        sse_done(),
    ]
    chunks, _ = await run(vllm)
    assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(7, 2)

    # llama.cpp: the usage (and its timings) ride on the finish chunk; no usage chunk after.
    llama = [
        chunk({"content": "Hi"}),
        chunk(
            {},
            "stop",
            usage={"completion_tokens": 3, "prompt_tokens": 11, "total_tokens": 14},
            timings={"prompt_n": 11, "predicted_n": 3, "predicted_ms": 40.1},
        ),
        sse_done(),
    ]
    chunks, _ = await run(llama)
    assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(11, 3)

    # A later usage that reports nothing (a proxy's zeros, or `null`) does not erase it.
    zeros = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    chunks, _ = await run(
        [*llama[:2], chunk(choices=[], usage=zeros), chunk(choices=[]), sse_done()]
    )
    assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(11, 3)

    # A server that ignores stream_options: a result without usage.
    chunks, _ = await run(text_answer("Hi", usage=None))
    assert isinstance(chunks[-1], domain.DoneChunk)
    assert chunks[-1].usage is None


async def test_missing_fields_empty_choices_and_unknown_fields_are_tolerated() -> None:
    frames = [
        # Azure OpenAI's first chunk: no choices, empty id and model, the prompt filter results.
        sse(
            {
                "choices": [],
                "created": 0,
                "id": "",
                "model": "",
                "object": "",
                "prompt_filter_results": [
                    {"prompt_index": 0, "content_filter_results": {"hate": {"filtered": False}}}
                ],
            }
        ),
        sse({"choices": [{"delta": {"content": "bare"}}]}),  # no id, model, index, finish_reason
        # two choices (n=2): the one with index 0 is the answer, wherever it is listed
        sse(
            {
                "choices": [
                    {"index": 1, "delta": {"content": "other"}},
                    {"index": 0, "delta": {"content": " main"}},
                ]
            }
        ),
        sse({"choices": [{"index": 0, "delta": None, "finish_reason": None}], "usage": "n/a"}),
        sse(
            {
                "id": "resp-1",
                "model": "local-model",
                "choices": [{"delta": {}, "finish_reason": "stop"}],
            }
        ),
        sse_done(),
    ]
    chunks, _ = await run(frames)
    assert adapters.text_of(chunks) == "bare main"
    assert adapters.finish_of(chunks) == {
        "finish_reason": "stop",
        "raw_finish_reason": "stop",
        "model": "local-model",
        "id": "resp-1",
    }
    assert chunks[-1].usage is None


async def test_a_refusal_is_shown_as_the_answer() -> None:
    frames = [
        chunk({"role": "assistant", "content": None, "refusal": ""}),
        chunk({"refusal": "I'm sorry, I can't help with that."}),
        chunk({}, "stop"),
        usage_chunk(20, 9),
        sse_done(),
    ]
    chunks, _ = await run(frames)
    assert adapters.text_of(chunks) == "I'm sorry, I can't help with that."
    assert isinstance(chunks[-1], domain.DoneChunk)


# -- finish reasons ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finish", "unified"), [("length", "length"), ("content_filter", "content_filter")]
)
async def test_length_and_content_filter_with_text_end_with_done(finish: str, unified: str) -> None:
    chunks, _ = await run(text_answer("Part of the answer", finish=finish))
    metadata = adapters.finish_of(chunks)
    assert metadata["finish_reason"] == unified
    assert metadata["raw_finish_reason"] == finish
    assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(12, 5)


async def test_content_filter_with_text_completes_through_discord_with_its_finish_reason() -> None:
    frames = text_answer("Here is some", finish="content_filter")
    async with stage() as s, served(Reply(frames=frames)) as server:
        result = await s.stream(chat(server.client))
        finish = adapters.completed(result)
        assert finish["finish_reason"] == "content_filter"
        assert s.contents == ["Here is some"]


async def test_content_filter_without_text_is_content_blocked() -> None:
    frames = [ROLE, chunk({}, "content_filter"), usage_chunk(30, 0), sse_done()]
    chunks, _ = await run(frames)
    error = adapters.last_error(chunks)
    assert error.kind == "content_blocked"
    assert error.retryable is False
    assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(30, 0)

    async with stage() as s, served(Reply(frames=frames)) as server:
        result = await s.stream(chat(server.client))
        assert adapters.result_error(result).kind == "content_blocked"
        assert result.usage == domain.TokenUsage(30, 0)
        assert s.contents == []
        assert [e["title"] for e in s.embeds] == ["Content Blocked"]


async def test_a_stream_without_finish_reason_or_done_is_truncated() -> None:
    frames = [ROLE, chunk({"content": "The answer is"})]  # then the server closes cleanly
    chunks, _ = await run(frames)
    assert adapters.text_of(chunks) == "The answer is"
    last = chunks[-1]
    assert isinstance(last, domain.ErrorChunk)
    assert last.error == base.truncated_error()

    async with stage() as s, served(Reply(frames=frames)) as server:
        result = await s.stream(chat(server.client))
        assert adapters.result_error(result).code == "truncated"
        assert result.accumulated_text == "The answer is"  # what was written is not lost
        assert s.contents == ["The answer is"]
        assert len(s.embeds) == 1


async def test_finish_reason_error_without_an_error_object_is_an_error() -> None:
    frames = [
        openrouter({"role": "assistant", "content": "Hal"}),
        openrouter({"content": ""}, "error"),
    ]
    chunks, _ = await run([*frames, sse_done()])
    error = adapters.last_error(chunks)
    assert (error.kind, error.code, error.retryable) == ("api_error", "error", True)
    assert chunks[-1].serving_provider == "Anthropic"


# -- tool calls --------------------------------------------------------------------------------


def parallel_calls() -> list[bytes]:
    """Two calls whose argument fragments interleave by index; usage on the trailing chunk."""
    return [
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_start(0, "call_Paris0aB1", "get_weather")],
                "refusal": None,
                "annotations": [],
            }
        ),
        chunk({"tool_calls": [tool_start(1, "call_Tokyo2cD3", "get_weather")]}),
        chunk({"tool_calls": [tool_args(0, '{"ci')]}),
        chunk({"tool_calls": [tool_args(1, '{"city": ')]}),
        chunk({"tool_calls": [tool_args(0, 'ty": "Par')]}),
        chunk({"tool_calls": [tool_args(1, '"Tokyo"}')]}),
        chunk({"tool_calls": [tool_args(0, 'is"}')]}),
        chunk({}, "tool_calls"),
        usage_chunk(85, 40),
        sse_done(),
    ]


PARIS = domain.FunctionCall("get_weather", {"city": "Paris"}, id="call_Paris0aB1")
TOKYO = domain.FunctionCall("get_weather", {"city": "Tokyo"}, id="call_Tokyo2cD3")


async def test_parallel_tool_calls_are_assembled_by_index_into_one_last_chunk_with_usage() -> None:
    chunks, _ = await run(parallel_calls(), tools=[WEATHER_TOOL])
    keep_alive = domain.TextChunk("")
    assert all(c == keep_alive for c in chunks[:-1])  # each SDK chunk re-arms the deadline
    assert len(chunks) == 10
    last = chunks[-1]
    assert isinstance(last, domain.FunctionCallChunk)
    assert last.calls == (PARIS, TOKYO)
    assert domain.normalize_usage(last.usage) == domain.TokenUsage(85, 40)


async def test_parallel_tool_calls_end_to_end_return_both_calls_and_the_usage() -> None:
    async with stage() as s, served(Reply(frames=parallel_calls())) as server:
        before = other_tasks()
        result = await s.stream(chat(server.client, tools=[WEATHER_TOOL]))
        assert adapters.tasks_left(before) == set()
        assert result.status == "function_call"
        assert result.function_calls == (PARIS, TOKYO)
        assert result.data == PARIS
        assert result.usage == domain.TokenUsage(85, 40)
        assert s.api.messages() == []


async def test_after_tools_appends_the_answer_as_received_and_one_tool_message_per_outcome() -> (
    None
):
    frames = [
        ROLE,
        chunk({"content": "Checking both."}),
        chunk({"tool_calls": [tool_start(0, "call_Paris0aB1", "get_weather")]}),
        *parallel_calls()[1:],
    ]
    async with served(Reply(frames=frames)) as server:
        provider = chat(server.client, tools=[WEATHER_TOOL], temperature=0)
        chunks = await adapters.collect(provider)
        assert isinstance(chunks[-1], domain.FunctionCallChunk)
        outcomes = [
            ToolOutcome(TOKYO, '{"temp_c": 24}'),
            ToolOutcome(PARIS, "error: service down", is_error=True),
        ]
        following = provider.after_tools(outcomes)
    assert following.messages == (
        *USER,
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "call_Paris0aB1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_Tokyo2cD3",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_Tokyo2cD3", "content": '{"temp_c": 24}'},
        {"role": "tool", "tool_call_id": "call_Paris0aB1", "content": "error: service down"},
    )
    assert following.tools == (WEATHER_TOOL,)
    assert following.params == {"temperature": 0}
    assert following.model == provider.model
    assert following.client is provider.client
    assert provider.messages == tuple(USER)  # the original is unchanged

    # The next request sends exactly that conversation.
    async with served(Reply(frames=text_answer("Paris is down, Tokyo 24 °C."))) as server:
        following = chat(server.client, messages=following.messages)
        await adapters.collect(following)
    body = server.seen[0].body
    assert isinstance(body, dict)
    assert body["messages"] == json.loads(json.dumps(list(following.messages)))


async def test_after_tools_raises_unless_the_last_stream_ended_in_tool_calls() -> None:
    replies = [
        Reply(frames=parallel_calls()),
        Reply(frames=text_answer("x")),
        Reply(frames=parallel_calls()),
        RATE_LIMITED,
    ]
    async with served(*replies) as server:
        provider = chat(server.client)
        with pytest.raises(ValueError, match="did not end in tool calls"):
            provider.after_tools([])
        await adapters.collect(provider)
        with pytest.raises(ValueError, match="do not answer"):
            provider.after_tools([ToolOutcome(PARIS, "only one")])
        with pytest.raises(ValueError, match="do not answer"):
            provider.after_tools(
                [
                    ToolOutcome(PARIS, "a"),
                    ToolOutcome(domain.FunctionCall("get_weather", id="x"), "b"),
                ]
            )
        provider.after_tools([ToolOutcome(PARIS, "a"), ToolOutcome(TOKYO, "b")])  # fine
        await adapters.collect(provider)  # a second stream on the same object: a text answer
        assert len(server.seen) == 2
        with pytest.raises(ValueError, match="did not end in tool calls"):
            provider.after_tools([ToolOutcome(PARIS, "a"), ToolOutcome(TOKYO, "b")])
        await adapters.collect(provider)  # tool calls again, then a stream that fails
        provider.after_tools([ToolOutcome(PARIS, "a"), ToolOutcome(TOKYO, "b")])
        assert isinstance((await adapters.collect(provider))[-1], domain.ErrorChunk)
        with pytest.raises(ValueError, match="did not end in tool calls"):
            provider.after_tools([ToolOutcome(PARIS, "a"), ToolOutcome(TOKYO, "b")])


async def test_a_call_without_id_gets_a_stable_synthetic_one_used_everywhere() -> None:
    # Ollama-style: the whole call in one delta, here without an id; finish_reason `stop`.
    frames = [
        chunk(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "index": 0,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            model="qwen3:8b",
            system_fingerprint="fp_ollama",
        ),
        chunk({"role": "assistant", "content": ""}, "stop", model="qwen3:8b"),
        chunk(
            choices=[],
            usage={"prompt_tokens": 150, "completion_tokens": 20, "total_tokens": 170},
        ),
        sse_done(),
    ]
    async with served(Reply(frames=frames)) as server:
        provider = chat(server.client)
        chunks = await adapters.collect(provider)
        last = chunks[-1]
        assert isinstance(last, domain.FunctionCallChunk)
        assert last.calls == (domain.FunctionCall("get_weather", {"city": "Oslo"}, id="call_0"),)
        following = provider.after_tools([ToolOutcome(last.calls[0], "sunny")])
    assistant, tool = following.messages[-2:]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            }
        ],
    }
    assert tool == {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}


async def test_calls_without_index_or_sharing_index_zero_are_kept_apart() -> None:
    frames = [
        ROLE,
        # no index at all: a new id starts a new call; a delta without id continues it
        chunk({"tool_calls": [{"id": "a1", "function": {"name": "first", "arguments": "{"}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
        chunk({"tool_calls": [{"id": "c3", "function": {"name": "third", "arguments": "{}"}}]}),
        # every call numbered 0, with its own id; the name repeated in every delta
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "b2", "function": {"name": "second", "arguments": "{"}}
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "", "arguments": "}"}}]}),
        chunk({}, "tool_calls"),
        sse_done(),
    ]
    chunks, _ = await run(frames)
    last = chunks[-1]
    assert isinstance(last, domain.FunctionCallChunk)
    assert [(c.name, c.id, dict(c.arguments)) for c in last.calls] == [
        ("first", "a1", {}),
        ("third", "c3", {}),
        ("second", "b2", {}),
    ]


async def test_empty_arguments_are_an_empty_object_and_are_handed_back_as_such() -> None:
    frames = [
        chunk(
            {"role": "assistant", "content": None, "tool_calls": [tool_start(0, "call_t", "now")]}
        ),
        chunk({}, "tool_calls"),
        sse_done(),
    ]
    async with served(Reply(frames=frames)) as server:
        provider = chat(server.client)
        chunks = await adapters.collect(provider)
        assert isinstance(chunks[-1], domain.FunctionCallChunk)
        assert chunks[-1].calls == (domain.FunctionCall("now", {}, id="call_t"),)
        assert chunks[-1].usage is None
        following = provider.after_tools([ToolOutcome(chunks[-1].calls[0], "12:00")])
    assistant: Any = following.messages[-2]  # a plain dict, with what the server sent
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize(
    ("arguments", "finish"),
    [('{"city": "Par', "length"), ('["Paris"]', "tool_calls"), ("city=Paris", "tool_calls")],
    ids=["cut-by-length", "json-array", "not-json"],
)
async def test_arguments_that_are_not_a_json_object_end_the_stream_with_an_error(
    arguments: str, finish: str
) -> None:
    frames = [
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_start(0, "call_x", "get_weather")],
            }
        ),
        chunk({"tool_calls": [tool_args(0, arguments)]}),
        chunk({}, finish),
        usage_chunk(50, 16),
        sse_done(),
    ]
    async with served(Reply(frames=frames)) as server:
        provider = chat(server.client)
        chunks = await adapters.collect(provider)
        error = adapters.last_error(chunks)
        assert error.kind == "api_error"
        assert error.code == "invalid_tool_arguments"
        assert error.retryable is True
        assert "'get_weather'" in error.message
        assert arguments in error.message
        assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(50, 16)
        with pytest.raises(ValueError, match="did not end in tool calls"):
            provider.after_tools([])


async def test_a_call_without_a_name_ends_the_stream_with_an_error() -> None:
    nameless = {"index": 0, "id": "call_q", "type": "function", "function": {"arguments": "{}"}}
    frames = [chunk({"role": "assistant", "tool_calls": [nameless]}), chunk({}, "tool_calls")]
    chunks, _ = await run([*frames, sse_done()])
    error = adapters.last_error(chunks)
    assert (error.code, error.retryable) == ("invalid_tool_call", True)
    assert "call_q" in error.message


async def test_deepseek_reasoning_is_handed_back_with_the_tool_calls() -> None:
    frames = [
        chunk(
            {"role": "assistant", "content": None, "reasoning_content": "Need"},
            model="deepseek-chat",
        ),
        chunk({"reasoning_content": " weather."}, model="deepseek-chat"),
        chunk({"tool_calls": [tool_start(0, "call_00_kT", "get_weather")]}, model="deepseek-chat"),
        chunk({"tool_calls": [tool_args(0, '{"city":"Rome"}')]}, model="deepseek-chat"),
        chunk({"content": ""}, "tool_calls", model="deepseek-chat"),
        sse_done(),
    ]
    async with served(Reply(frames=frames)) as server:
        provider = chat(server.client)
        chunks = await adapters.collect(provider)
        assert isinstance(chunks[-1], domain.FunctionCallChunk)
        following = provider.after_tools([ToolOutcome(chunks[-1].calls[0], "rainy")])
    assistant: Any = following.messages[-2]
    assert assistant["reasoning_content"] == "Need weather."
    assert assistant["content"] is None
    assert "reasoning" not in assistant


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "kind", "retryable", "code"),
    [
        (RATE_LIMITED, "rate_limit", True, "rate_limit_exceeded"),
        (
            status_reply(
                429,
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                "insufficient_quota",
            ),
            "rate_limit",
            False,
            "insufficient_quota",
        ),
        (
            status_reply(
                500,
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
            ),
            "api_error",
            True,
            500,
        ),
        (
            status_reply(
                503,
                "The engine is currently overloaded, please try again later.",
                "server_error",
                None,
            ),
            "provider_overloaded",
            True,
            503,
        ),
        (
            status_reply(
                404,
                "The model `gpt-9-turbo` does not exist or you do not have access to it.",
                "invalid_request_error",
                "model_not_found",
            ),
            "model_error",
            False,
            "model_not_found",
        ),
        (
            status_reply(
                401,
                "Incorrect API key provided: sk-test. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                "invalid_api_key",
            ),
            "api_error",
            False,
            "invalid_api_key",
        ),
        (
            status_reply(
                400,
                "Your request was rejected as a result of our safety system.",
                "invalid_request_error",
                "content_policy_violation",
            ),
            "content_blocked",
            False,
            "content_policy_violation",
        ),
    ],
    ids=["429", "insufficient-quota", "500", "503-overloaded", "404-model", "401", "400-policy"],
)
async def test_http_errors_map_to_provider_errors(
    reply: Reply, kind: str, retryable: bool, code: object
) -> None:
    error = await failure(reply)
    assert (error.kind, error.retryable, error.code) == (kind, retryable, code)
    body = reply.body
    assert isinstance(body, dict)
    assert error.message == body["error"]["message"]  # the provider's words, not "Error code"
    assert isinstance(error.original, openai.APIStatusError)


async def test_http_errors_end_to_end_are_error_results_with_the_provider_embed() -> None:
    async with stage() as s, served(RATE_LIMITED) as server:
        result = await s.stream(chat(server.client))
        assert adapters.result_error(result).kind == "rate_limit"
        assert result.usage is None
        assert [e["title"] for e in s.embeds] == ["Rate Limited"]
        description = s.embeds[0]["description"]
        assert isinstance(description, str)
        assert description.startswith(base.HEADLINES["rate_limit"])
        assert "Please try again in 120ms." in description


async def test_G1_the_embed_says_the_adapters_headline_in_the_streams_locale() -> None:
    german = DEFAULT_CATALOGUE.with_locale(
        "de",
        {
            "title.rate_limit": "Ratenbegrenzung",
            "headline.rate_limit": "Der Modellanbieter bremst diesen Bot. Gleich noch einmal.",
        },
    )
    async with stage() as s, served(RATE_LIMITED) as server:
        orchestrator = StreamOrchestrator(s.stops, catalogue=german)
        context = s.context(locale="de-AT")
        result = await orchestrator.stream_to_discord(
            chat(server.client), StreamConfig(delivery="messages"), context
        )
        assert result.status == "error"
        (embed,) = s.embeds
        assert embed["title"] == "Ratenbegrenzung"
        description = str(embed["description"])
        assert description.startswith("Der Modellanbieter bremst diesen Bot. Gleich noch einmal.")
        assert "Please try again in 120ms." in description


async def test_an_unknown_model_end_to_end_is_a_model_error() -> None:
    reply = status_reply(
        404,
        "The model `gpt-9-turbo` does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
    )
    async with stage() as s, served(reply) as server:
        result = await s.stream(chat(server.client, model="gpt-9-turbo"))
        assert adapters.result_error(result).kind == "model_error"
        assert [e["title"] for e in s.embeds] == ["Model Configuration Error"]


async def test_the_sdks_own_retry_after_a_429_still_ends_in_the_answer() -> None:
    retry_soon = Reply(status=429, body=RATE_LIMITED.body, headers={"retry-after-ms": "120"})
    async with (
        stage() as s,
        served(retry_soon, Reply(frames=text_answer("Second try")), max_retries=1) as server,
    ):
        result = await s.stream(chat(server.client))
        assert result.status == "completed"
        assert s.contents == ["Second try"]
        assert len(server.seen) == 2
        assert server.seen[1].headers["x-stainless-retry-count"] == "1"


async def test_a_mid_stream_error_event_ends_the_stream_with_that_error() -> None:
    error_event = {
        "error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    frames = [ROLE, chunk({"content": "Partial\n"}), chunk({"content": "answer"}), sse(error_event)]
    chunks, _ = await run(frames)
    assert adapters.text_of(chunks) == "Partial\nanswer"
    error = adapters.last_error(chunks)
    assert (error.kind, error.retryable) == ("api_error", True)
    assert error.message == error_event["error"]["message"]
    assert type(error.original) is openai.APIError  # what the SDK raises for the event

    async with stage() as s, served(Reply(frames=frames)) as server:
        result = await s.stream(chat(server.client))
        assert result.status == "error"
        assert result.accumulated_text == "Partial\nanswer"  # F2: the messages, line by line
        assert s.contents == ["Partial", "answer"]
        assert len(s.embeds) == 1


async def test_openrouter_error_chunk_with_choices_is_raised_by_the_sdk_and_mapped() -> None:
    frames = [
        openrouter({"role": "assistant", "content": "Once upon"}),
        openrouter(
            {"content": ""},
            "error",
            error={"code": "server_error", "message": "Provider disconnected unexpectedly"},
        ),
        sse_done(),
    ]
    chunks, _ = await run(frames)
    assert adapters.text_of(chunks) == "Once upon"
    error = adapters.last_error(chunks)
    assert (error.kind, error.code, error.retryable) == ("api_error", "server_error", True)
    assert error.message == "Provider disconnected unexpectedly"


async def test_an_error_inside_a_chunk_the_sdk_let_through_still_ends_the_answer() -> None:
    # The SDK raises for every chunk whose `error` is truthy (the test above); should one get
    # through (another stream mode, a later SDK), the adapter reports it all the same, even
    # after a tool call.
    answer = _Answer()
    call = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}
    answer.take(
        ChatCompletionChunk.construct(choices=[{"index": 0, "delta": {"tool_calls": [call]}}])
    )
    shown = answer.take(
        ChatCompletionChunk.construct(
            id="gen-1",
            provider="Google",
            error={"code": 502, "message": "Provider returned error"},
            choices=[{"index": 0, "delta": {"content": ""}, "finish_reason": None}],
        )
    )
    assert shown == domain.TextChunk("", serving_provider="Google")
    item, turn = answer.terminal()
    assert turn is None
    assert isinstance(item, domain.ErrorChunk)
    assert item.error is not None
    assert (item.error.kind, item.error.code, item.error.message) == (
        "api_error",
        502,
        "Provider returned error",
    )
    assert item.serving_provider == "Google"


async def test_a_mid_stream_overloaded_error_with_a_numeric_code_is_overloaded() -> None:
    frames = [
        openrouter({"role": "assistant", "content": "Hi"}),
        sse({"error": {"code": 502, "message": "Upstream overloaded", "metadata": {"raw": "{}"}}}),
    ]
    chunks, _ = await run(frames)
    error = adapters.last_error(chunks)
    assert (error.kind, error.code) == ("provider_overloaded", 502)


async def test_an_event_that_is_not_json_is_a_retryable_error() -> None:
    chunks, _ = await run([ROLE, b"data: {not json\n\n"])
    error = adapters.last_error(chunks)
    assert (error.kind, error.code, error.retryable) == ("api_error", "malformed_event", True)


async def test_a_connection_cut_mid_stream_is_a_connection_error() -> None:
    frames = text_answer("Half an", " answer", "that never came")
    reply = Reply(frames=frames, cut_after=3)  # the TCP connection aborts after " answer"
    async with served(reply) as server:
        chunks = await adapters.collect(chat(server.client))
    assert adapters.text_of(chunks) == "Half an answer"
    error = adapters.last_error(chunks)
    assert (error.kind, error.code, error.retryable) == ("api_error", "connection_error", True)
    assert isinstance(error.original, openai.APIConnectionError)

    async with stage() as s, served(reply) as server:
        result = await s.stream(chat(server.client))
        assert adapters.result_error(result).code == "connection_error"
        assert result.accumulated_text == "Half an answer"


async def test_a_cut_after_the_finish_signal_keeps_the_whole_answer() -> None:
    frames = text_answer("All", " of it")  # role, 2 texts, finish, usage, [DONE]
    async with served(Reply(frames=frames, cut_after=4)) as server:
        chunks = await adapters.collect(chat(server.client))
    assert adapters.text_of(chunks) == "All of it"
    done = chunks[-1]
    assert isinstance(done, domain.DoneChunk)
    assert done.usage is None  # the usage chunk never came


async def test_the_sdks_read_timeout_is_a_timeout_error() -> None:
    hanging = Reply(frames=[ROLE, chunk({"content": "Hm"})], hang_after=2)
    async with served(hanging, timeout=5.0) as server:
        provider = chat(server.client)
        loop = asyncio.get_running_loop()
        started = loop.time()
        chunks = await adapters.collect(provider)
        assert loop.time() - started == pytest.approx(5.0, abs=0.1)
    assert adapters.text_of(chunks) == "Hm"
    error = adapters.last_error(chunks)
    assert (error.kind, error.retryable) == ("timeout", True)


# -- closing the HTTP stream (B10) -------------------------------------------------------------


def hanging(
    frames: Sequence[bytes],
) -> AbstractAsyncContextManager[adapters.Served[openai.AsyncOpenAI]]:
    """A server that sends `frames`, then nothing: its `hanging` is set then, `disconnected`
    once the client is gone (aiohttp cancels the handler when its connection is lost), which
    shows that the client really closed the HTTP response."""
    return served(Reply(frames=frames, hang_after=len(frames)))


async def test_aclose_mid_stream_closes_the_http_response() -> None:
    async with hanging([ROLE, chunk({"content": "Hello"})]) as server:
        provider = chat(server.client)
        stream = provider.start_stream(StreamConfig(delivery="messages"), adapters.ADAPTER_ONLY)
        assert isinstance(stream, AsyncIterator)
        first = provider.process_chunk(await anext(stream))
        second = provider.process_chunk(await anext(stream))
        assert [first, second] == [domain.TextChunk(""), domain.TextChunk("Hello")]
        await server.server.hanging.wait()
        assert not server.server.disconnected.is_set()
        await stream.aclose()  # type: ignore[attr-defined]  # an async generator
        await asyncio.wait_for(server.server.disconnected.wait(), 1.0)


async def test_closing_mid_answer_leaves_no_sdk_generator_to_the_event_loop() -> None:
    # B11: the adapter's `async for` generator of the SDK's and those under it, closed by the
    # adapter, not handed to the event loop's finalizer.
    with adapters.finalized_generators() as handed:
        async with hanging([ROLE, chunk({"content": "Hello"})]) as server:
            provider = chat(server.client)
            stream = provider.start_stream(StreamConfig(delivery="messages"), adapters.ADAPTER_ONLY)
            await anext(stream)
            assert provider.process_chunk(await anext(stream)) == domain.TextChunk("Hello")
            await stream.aclose()  # type: ignore[attr-defined]  # an async generator
            del stream
    assert handed == []


async def test_a_stop_while_the_model_hangs_closes_the_http_response() -> None:
    frames = [ROLE, chunk({"content": "Hello\n"})]
    async with stage() as s, hanging(frames) as server:
        processed = asyncio.Event()
        progress: list[int] = []

        def on_progress() -> None:
            progress.append(1)
            if len(progress) == len(frames):  # the last frame is processed right after this
                processed.set()

        async def stop_when_hanging() -> None:
            await server.server.hanging.wait()
            await processed.wait()
            assert s.orchestrator.request_stop(s.channel.id, "user-1")

        before = other_tasks()
        stopper = asyncio.create_task(stop_when_hanging())
        result = await s.stream(chat(server.client), on_stream_progress=on_progress)
        await stopper
        assert adapters.tasks_left(before) == set()
        assert result.status == "stopped_by_user"
        assert result.accumulated_text == "Hello"
        assert s.contents == ["Hello"]
        await asyncio.wait_for(server.server.disconnected.wait(), 1.0)


async def test_each_start_stream_is_a_fresh_request() -> None:
    async with served(Reply(frames=text_answer("one")), Reply(frames=text_answer("two"))) as server:
        provider = chat(server.client)
        assert adapters.text_of(await adapters.collect(provider)) == "one"
        assert adapters.text_of(await adapters.collect(provider)) == "two"
        assert len(server.seen) == 2
        assert server.seen[0].body == server.seen[1].body
