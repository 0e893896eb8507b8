"""`GeminiProvider` with the real google-genai SDK against a local SSE server
(cordstream.shell.testing.sse).

The replayed streams are the Gemini API's wire format: `POST .../models/{model}:
streamGenerateContent?alt=sse`, each `data:` line one `GenerateContentResponse` in camelCase
(`candidates[].content.parts`, `finishReason`, `usageMetadata`, `modelVersion`,
`responseId`, `promptFeedback`), errors as `{"error": {"code", "message", "status"}}`.
Each case is checked on the chunk sequence the adapter produces (tests/support/adapters.py) and, for
the main ones, end-to-end through `stream_to_discord` with the Discord emulator
(tests/support/stage.py), on looptime's virtual clock. The SDK client is built in each test with
`retry_options` of one attempt (no retries), on aiohttp (the SDK's default async transport when
aiohttp is installed) and, where the transport matters, on an httpx2 client too.
"""

from __future__ import annotations

import asyncio
import base64
import gc
from collections.abc import AsyncGenerator, Mapping
from typing import cast

import pytest
from google import genai
from google.genai import types

from cordstream import domain
from cordstream.shell import StreamConfig
from cordstream.shell.providers import base
from cordstream.shell.providers.base import ToolOutcome
from cordstream.shell.providers.gemini import GeminiItem, GeminiProvider
from cordstream.shell.testing.sse import ModelServer, Reply, sse
from cordstream.shell.turn import run_turn
from tests.support import adapters
from tests.support.adapters import gemini_served as served
from tests.support.stage import stage

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

TRANSPORTS: tuple[adapters.Transport, ...] = ("aiohttp", "httpx2")

MODEL = "gemini-2.5-flash"
RID = "mR5oaJ2zLdOdz7IPhN2jqAw"
SIG_1 = base64.b64encode(b"signature-of-the-first-call").decode()
SIG_2 = base64.b64encode(b"signature-of-the-text").decode()


# -- wire fixtures ---------------------------------------------------------------------------


def usage(
    prompt: int, candidates: int | None = None, thoughts: int | None = None
) -> dict[str, object]:
    """`usageMetadata` as the API sends it: running totals, absent counts left out."""
    meta: dict[str, object] = {"promptTokenCount": prompt}
    if candidates is not None:
        meta["candidatesTokenCount"] = candidates
    meta["totalTokenCount"] = prompt + (candidates or 0) + (thoughts or 0)
    meta["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
    if thoughts is not None:
        meta["thoughtsTokenCount"] = thoughts
    return meta


def response(
    *parts: dict[str, object],
    finish: str | None = None,
    meta: dict[str, object] | None = None,
    **candidate_fields: object,
) -> dict[str, object]:
    """One `GenerateContentResponse` of a stream (first candidate only, as the API sends)."""
    candidate: dict[str, object] = {}
    if parts:
        candidate["content"] = {"parts": list(parts), "role": "model"}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate.update(candidate_fields)
    candidate["index"] = 0
    body: dict[str, object] = {"candidates": [candidate]}
    if meta is not None:
        body["usageMetadata"] = meta
    body["modelVersion"] = MODEL
    body["responseId"] = RID
    return body


def text(value: str, **fields: object) -> dict[str, object]:
    return {"text": value, **fields}


def thought(value: str) -> dict[str, object]:
    return {"text": value, "thought": True}


def call(name: str, args: dict[str, object], **fields: object) -> dict[str, object]:
    function_call: dict[str, object] = {"name": name, "args": args}
    if "id" in fields:
        function_call["id"] = fields.pop("id")
    return {"functionCall": function_call, **fields}


def api_error(code: int, status: str, message: str, *details: object) -> dict[str, object]:
    error: dict[str, object] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = list(details)
    return {"error": error}


SAFETY_RATINGS = [
    {"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "NEGLIGIBLE"},
    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True},
]


def hello_world() -> Reply:
    """A plain answer in three responses; usage repeated, the last one complete."""
    return Reply(
        frames=[
            sse(response(text("Hello"), meta=usage(8))),
            sse(response(text(", wor"), meta=usage(8))),
            sse(response(text("ld!"), finish="STOP", meta=usage(8, 12, 25))),
        ]
    )


# -- plumbing --------------------------------------------------------------------------------


def provider(
    client: genai.Client,
    contents: object = "Say hello",
    config: types.GenerateContentConfigOrDict | None = None,
) -> GeminiProvider:
    return GeminiProvider(
        client, model=MODEL, contents=cast("types.ContentListUnion", contents), config=config
    )


async def closed_soon(server: ModelServer) -> bool:
    """Whether every connection closes within a few loop turns (the FIN crossing loopback)."""
    for _ in range(20):
        if server.open_connections() == 0:
            return True
        await asyncio.sleep(0)
    return False


# -- text, thoughts, usage -------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_plain_text_across_several_responses(transport: adapters.Transport) -> None:
    async with served(hello_world(), transport=transport) as g:
        chunks = await adapters.collect(provider(g.client))
    assert [type(chunk) for chunk in chunks] == [*[domain.TextChunk] * 3, domain.DoneChunk]
    assert adapters.pieces(chunks) == ["Hello", ", wor", "ld!"]
    assert adapters.finish_of(chunks) == {
        "finish_reason": "stop",
        "raw_finish_reason": "STOP",
        "model": MODEL,
        "id": RID,
    }
    # usageMetadata comes on every response: passed on when it changed (the core reads each
    # change once; the latest wins), and the terminal chunk carries the complete report.
    assert [domain.normalize_usage(chunk.usage) for chunk in chunks] == [
        domain.TokenUsage(8, 0),
        None,
        domain.TokenUsage(8, 37),
        domain.TokenUsage(8, 37),
    ]


async def test_a_usage_report_that_changes_back_is_passed_on_again() -> None:
    # Skipping a repeated report must not skip a change: the latest report wins (B5).
    reply = Reply(
        frames=[
            sse(response(text("a"), meta=usage(8))),
            sse(response(text("b"), meta=usage(8, 5, 5))),
            sse(response(text("c"), meta=usage(8))),
            sse(response(text("d"), finish="STOP", meta=usage(8))),
        ]
    )
    async with served(reply) as g, stage() as s:
        chunks = await adapters.collect(provider(g.client))
        result = await s.stream(provider(g.client))
    assert [domain.normalize_usage(chunk.usage) for chunk in chunks] == [
        domain.TokenUsage(8, 0),
        domain.TokenUsage(8, 10),
        domain.TokenUsage(8, 0),
        None,
        domain.TokenUsage(8, 0),
    ]
    assert result.usage == domain.TokenUsage(8, 0)


async def test_plain_text_end_to_end() -> None:
    async with served(hello_world()) as g, stage() as s:
        result = await s.stream(provider(g.client))
    finish = adapters.completed(result)
    assert result.accumulated_text == "Hello, world!"
    assert s.contents == ["Hello, world!"]
    assert result.usage == domain.TokenUsage(input_tokens=8, output_tokens=12 + 25)
    assert finish["finish_reason"] == "stop"
    assert finish["model"] == MODEL


async def test_the_request_the_sdk_sends() -> None:
    config = types.GenerateContentConfig(temperature=0.2, system_instruction="Be brief.")
    history = [
        types.Content(role="user", parts=[types.Part(text="Hi")]),
        {"role": "model", "parts": [{"text": "Hello!"}]},
        types.Content(role="user", parts=[types.Part(text="Say hello")]),
    ]
    async with served(hello_world()) as g:
        await adapters.collect(provider(g.client, history, config))
        await adapters.collect(provider(g.client, "Just a string"))
    first, second = g.server.seen
    assert first.method == "POST"
    assert first.path.endswith(f"/models/{MODEL}:streamGenerateContent")
    assert first.query == {"alt": "sse"}
    assert first.headers["x-goog-api-key"] == "test-key"
    assert isinstance(first.body, dict)
    assert first.body["contents"] == [
        {"role": "user", "parts": [{"text": "Hi"}]},
        {"role": "model", "parts": [{"text": "Hello!"}]},
        {"role": "user", "parts": [{"text": "Say hello"}]},
    ]
    assert first.body["generationConfig"] == {"temperature": 0.2}
    assert first.body["systemInstruction"] == {"parts": [{"text": "Be brief."}], "role": "user"}
    assert isinstance(second.body, dict)
    assert second.body["contents"] == [{"role": "user", "parts": [{"text": "Just a string"}]}]


def thinking_then_answer() -> Reply:
    return Reply(
        frames=[
            sse(response(thought("**Planning**\n\nThe user wants "), meta=usage(12, None, 40))),
            sse(response(thought("a greeting."), meta=usage(12, None, 61))),
            sse(response(text("Hi there"), meta=usage(12, 2, 61))),
            sse(response(text("!", thoughtSignature=SIG_2), finish="STOP", meta=usage(12, 3, 61))),
        ]
    )


async def test_thought_parts_are_summaries_and_not_text() -> None:
    async with served(thinking_then_answer()) as g:
        chunks = await adapters.collect(provider(g.client))
    assert [chunk.thoughts for chunk in chunks] == [
        (domain.Thought("summary", "**Planning**\n\nThe user wants "),),
        (domain.Thought("summary", "a greeting."),),
        (),
        (),
        (),
    ]
    assert adapters.pieces(chunks) == ["", "", "Hi there", "!"]
    assert isinstance(chunks[-1], domain.DoneChunk)


async def test_thoughts_end_to_end_count_as_output_tokens() -> None:
    async with served(thinking_then_answer()) as g, stage() as s:
        result = await s.stream(provider(g.client))
    assert result.status == "completed"
    assert result.accumulated_text == "Hi there!"
    assert s.contents == ["Hi there!"]
    assert result.thought_log is not None
    assert result.thought_log.summary == "**Planning**\n\nThe user wants a greeting."
    assert result.usage == domain.TokenUsage(input_tokens=12, output_tokens=3 + 61)


async def test_repeated_usage_latest_wins_not_summed() -> None:
    reply = Reply(
        frames=[
            sse(response(text("One "), meta=usage(100, 1))),
            sse(response(text("two "), meta=usage(100, 2))),
            sse(response(text("three"), meta=usage(100, 3))),
            sse(response(finish="STOP", meta=usage(100, 4, 7))),
        ]
    )
    async with served(reply) as g, stage() as s:
        result = await s.stream(provider(g.client))
    assert result.status == "completed"
    assert result.accumulated_text == "One two three"
    assert result.usage == domain.TokenUsage(input_tokens=100, output_tokens=11)


# -- function calls --------------------------------------------------------------------------


def parallel_calls(*, ids: bool) -> Reply:
    """Text, then two parallel calls in one response; the first carries the signature."""
    first: dict[str, object] = {"id": "fc-paris"} if ids else {}
    second: dict[str, object] = {"id": "fc-tokyo"} if ids else {}
    return Reply(
        frames=[
            sse(response(thought("Two cities: call the tool twice."), meta=usage(30, None, 50))),
            sse(response(text("Let me check."), meta=usage(30, 3, 50))),
            sse(
                response(
                    call("get_weather", {"city": "Paris"}, thoughtSignature=SIG_1, **first),
                    call("get_weather", {"city": "Tokyo", "unit": "C"}, **second),
                    finish="STOP",
                    meta=usage(30, 21, 50),
                )
            ),
        ]
    )


@pytest.mark.parametrize("ids", [False, True], ids=["api-sends-no-ids", "api-sends-ids"])
async def test_parallel_function_calls_end_in_one_chunk_with_the_usage(ids: bool) -> None:
    async with served(parallel_calls(ids=ids)) as g:
        chunks = await adapters.collect(provider(g.client))
    assert [type(chunk) for chunk in chunks] == [
        domain.TextChunk,
        domain.TextChunk,
        domain.TextChunk,
        domain.FunctionCallChunk,
    ]
    terminal = chunks[-1]
    assert isinstance(terminal, domain.FunctionCallChunk)
    expected_ids = ("fc-paris", "fc-tokyo") if ids else ("call_0", "call_1")
    assert terminal.calls == (
        domain.FunctionCall("get_weather", {"city": "Paris"}, id=expected_ids[0]),
        domain.FunctionCall("get_weather", {"city": "Tokyo", "unit": "C"}, id=expected_ids[1]),
    )
    assert [call.arguments for call in terminal.calls] == [
        {"city": "Paris"},
        {"city": "Tokyo", "unit": "C"},
    ]
    assert domain.normalize_usage(terminal.usage) == domain.TokenUsage(30, 71)


async def test_function_calls_end_to_end() -> None:
    async with served(parallel_calls(ids=False)) as g, stage() as s:
        result = await s.stream(provider(g.client))
    assert result.status == "function_call"
    assert [call.arguments["city"] for call in result.function_calls] == ["Paris", "Tokyo"]
    assert result.data == result.function_calls[0]
    assert result.accumulated_text == "Let me check."
    assert s.contents == ["Let me check."]
    assert result.usage == domain.TokenUsage(input_tokens=30, output_tokens=71)


@pytest.mark.parametrize("ids", [False, True], ids=["api-sends-no-ids", "api-sends-ids"])
async def test_after_tools_sends_the_answer_as_received_and_the_function_responses(
    ids: bool,
) -> None:
    config: types.GenerateContentConfigDict = {
        "tools": [{"function_declarations": [{"name": "get_weather"}]}]
    }
    async with served(parallel_calls(ids=ids), hello_world()) as g:
        first = provider(g.client, "Weather in Paris and Tokyo?", config)
        chunks = await adapters.collect(first)
        terminal = chunks[-1]
        assert isinstance(terminal, domain.FunctionCallChunk)
        paris, tokyo = terminal.calls
        second = first.after_tools(
            [
                ToolOutcome(tokyo, "error: the weather service is down", is_error=True),
                ToolOutcome(paris, '{"temp": 21}'),
            ]
        )
        assert second is not first
        answer = await adapters.collect(second)  # the same client, still open: it is the caller's
    assert adapters.pieces(answer) == ["Hello", ", wor", "ld!"]
    assert second.config is config
    body = g.server.seen[1].body
    assert isinstance(body, dict)
    paris_id = {"id": "fc-paris"} if ids else {}
    tokyo_id = {"id": "fc-tokyo"} if ids else {}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris and Tokyo?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Two cities: call the tool twice.", "thought": True},
                {"text": "Let me check."},
                {
                    "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, **paris_id},
                    "thoughtSignature": SIG_1,
                },
                {
                    "functionCall": {
                        "name": "get_weather",
                        "args": {"city": "Tokyo", "unit": "C"},
                        **tokyo_id,
                    }
                },
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "response": {"error": "error: the weather service is down"},
                        **tokyo_id,
                    }
                },
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "response": {"result": '{"temp": 21}'},
                        **paris_id,
                    }
                },
            ],
        },
    ]
    assert body["tools"] == [{"functionDeclarations": [{"name": "get_weather"}]}]


async def test_after_tools_refuses_what_is_not_an_answer_to_the_last_calls() -> None:
    async with served(parallel_calls(ids=False), hello_world()) as g:
        gemini = provider(g.client)
        with pytest.raises(ValueError, match="did not end in function calls"):
            gemini.after_tools([])  # no stream yet
        chunks = await adapters.collect(gemini)
        terminal = chunks[-1]
        assert isinstance(terminal, domain.FunctionCallChunk)
        paris, tokyo = terminal.calls
        with pytest.raises(ValueError, match="do not answer"):
            gemini.after_tools([ToolOutcome(paris, "21")])  # Tokyo unanswered
        with pytest.raises(ValueError, match="do not answer"):
            gemini.after_tools(
                [ToolOutcome(paris, "21"), ToolOutcome(domain.FunctionCall("x", id="z"), "")]
            )
        assert gemini.after_tools([ToolOutcome(tokyo, "18"), ToolOutcome(paris, "21")]) is not None
        await adapters.collect(gemini)  # a new stream (a retry) that ends in text forgets the calls
        with pytest.raises(ValueError, match="did not end in function calls"):
            gemini.after_tools([ToolOutcome(tokyo, "18"), ToolOutcome(paris, "21")])


async def test_a_tool_round_through_run_turn() -> None:
    weather_calls: list[Mapping[str, object]] = []

    async def get_weather(arguments: Mapping[str, object]) -> object:
        weather_calls.append(arguments)
        return {"temp": 21 if arguments["city"] == "Paris" else 18}

    async with served(parallel_calls(ids=False), hello_world()) as g, stage() as s:
        turn = await run_turn(
            s.orchestrator,
            provider(g.client, "Weather in Paris and Tokyo?"),
            s.context(),
            tools={"get_weather": get_weather},
        )
    assert turn.status == "completed"
    assert [segment.status for segment in turn.segments] == ["function_call", "completed"]
    assert weather_calls == [{"city": "Paris"}, {"city": "Tokyo", "unit": "C"}]
    assert turn.text == "Let me check.\nHello, world!"  # F2: segments joined by a line break
    assert turn.usage == domain.TokenUsage(input_tokens=30 + 8, output_tokens=71 + 37)
    body = g.server.seen[1].body
    assert isinstance(body, dict)
    contents = body["contents"]
    assert isinstance(contents, list)
    assert [content["role"] for content in contents] == ["user", "model", "user"]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"result": '{"temp": 21}'}}},
        {"functionResponse": {"name": "get_weather", "response": {"result": '{"temp": 18}'}}},
    ]


# -- finish reasons --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "raw", "unified", "shown", "bill"),
    [
        (
            [
                sse(response(text("A long story that"), meta=usage(5, 4, 10))),
                sse(response(text(" goes on"), finish="MAX_TOKENS", meta=usage(5, 6, 10))),
            ],
            "MAX_TOKENS",
            "length",
            "A long story that goes on",
            domain.TokenUsage(5, 16),
        ),
        (
            [
                sse(response(text("Here is how you"), meta=usage(9, 4))),
                sse(
                    response(
                        text(""), finish="SAFETY", meta=usage(9, 4), safetyRatings=SAFETY_RATINGS
                    )
                ),
            ],
            "SAFETY",
            "content_filter",
            "Here is how you",
            domain.TokenUsage(9, 4),
        ),
    ],
    ids=["max-tokens-is-length", "safety-after-text-keeps-the-text-and-says-content-filter"],
)
async def test_a_finish_after_text_keeps_the_text_and_says_its_reason(
    frames: list[bytes], raw: str, unified: str, shown: str, bill: domain.TokenUsage
) -> None:
    async with served(Reply(frames=frames)) as g, stage() as s:
        chunks = await adapters.collect(provider(g.client))
        result = await s.stream(provider(g.client))
    metadata = adapters.finish_of(chunks)
    assert (metadata["finish_reason"], metadata["raw_finish_reason"]) == (unified, raw)
    finish = adapters.completed(result)
    assert result.accumulated_text == shown
    assert s.contents == [shown]
    assert finish["finish_reason"] == unified
    assert result.usage == bill


async def test_safety_with_no_text_is_content_blocked() -> None:
    reply = Reply(
        frames=[
            sse(response(finish="SAFETY", meta=usage(9, 0), safetyRatings=SAFETY_RATINGS)),
        ]
    )
    async with served(reply) as g, stage() as s:
        chunks = await adapters.collect(provider(g.client))
        result = await s.stream(provider(g.client))
    error = adapters.last_error(chunks)
    assert (error.kind, error.code, error.retryable) == ("content_blocked", "SAFETY", False)
    assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(9, 0)
    assert adapters.result_error(result).kind == "content_blocked"
    assert s.contents == []
    assert s.embeds[0]["title"] == "Content Blocked"
    assert result.usage == domain.TokenUsage(9, 0)


async def test_a_filtered_answer_with_only_function_calls_is_blocked_not_run() -> None:
    reply = Reply(
        frames=[
            sse(
                response(
                    call("delete_everything", {}), finish="PROHIBITED_CONTENT", meta=usage(9, 2)
                )
            )
        ]
    )
    async with served(reply) as g:
        chunks = await adapters.collect(provider(g.client))
    error = adapters.last_error(chunks)
    assert (error.kind, error.code) == ("content_blocked", "PROHIBITED_CONTENT")


async def test_a_blocked_prompt_is_content_blocked() -> None:
    blocked = {
        "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 14, "totalTokenCount": 14},
        "modelVersion": MODEL,
        "responseId": RID,
    }
    async with served(Reply(frames=[sse(blocked)])) as g, stage() as s:
        chunks = await adapters.collect(provider(g.client))
        result = await s.stream(provider(g.client))
    error = adapters.last_error(chunks)
    assert (error.kind, error.code, error.retryable) == (
        "content_blocked",
        "PROHIBITED_CONTENT",
        False,
    )
    assert adapters.result_error(result).kind == "content_blocked"
    assert result.usage == domain.TokenUsage(14, 0)
    assert s.embeds[0]["title"] == "Content Blocked"


@pytest.mark.parametrize(
    ("frames", "shown"),
    [
        (
            [
                sse(response(text("Hello"), meta=usage(8))),
                sse(response(text(" wor"), meta=usage(8))),
            ],
            ["Hello", " wor"],
        ),
        ([b"\n"], []),  # a 200 event stream that ends without a single event
    ],
    ids=["text-then-nothing", "no-event"],
)
async def test_a_stream_without_finish_reason_is_truncated(
    frames: list[bytes], shown: list[str]
) -> None:
    async with served(Reply(frames=frames)) as g, stage() as s:
        chunks = await adapters.collect(provider(g.client))
        result = await s.stream(provider(g.client))
    error = adapters.last_error(chunks)
    assert error == base.truncated_error()
    assert adapters.pieces(chunks) == shown
    assert result.status == "error"
    assert result.data == base.truncated_error()
    embed = s.embeds[0]
    assert "cut off" in str(embed["description"])


# -- errors ----------------------------------------------------------------------------------

RETRY_INFO = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "33s"}
QUOTA_FAILURE = {
    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
    "violations": [
        {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
        }
    ],
}
QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)


@pytest.mark.parametrize(
    ("status", "body", "kind", "retryable"),
    [
        (
            429,
            api_error(429, "RESOURCE_EXHAUSTED", QUOTA_MESSAGE, QUOTA_FAILURE, RETRY_INFO),
            "rate_limit",
            True,
        ),
        (429, api_error(429, "RESOURCE_EXHAUSTED", QUOTA_MESSAGE), "rate_limit", False),
        (
            429,
            api_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted."),
            "rate_limit",
            True,
        ),
        (500, api_error(500, "INTERNAL", "An internal error has occurred."), "api_error", True),
        (
            503,
            api_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
            "provider_overloaded",
            True,
        ),
        (
            404,
            api_error(
                404,
                "NOT_FOUND",
                "models/gemini-9-ultra is not found for API version v1beta, or is not supported "
                "for generateContent. Call ListModels to see the list of available models.",
            ),
            "model_error",
            False,
        ),
        (
            400,
            api_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument."),
            "api_error",
            False,
        ),
        (
            403,
            api_error(403, "PERMISSION_DENIED", "The caller does not have permission"),
            "api_error",
            False,
        ),
        (
            504,
            api_error(
                504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."
            ),
            "timeout",
            True,
        ),
    ],
    ids=[
        "429-quota-with-retry-info",
        "429-quota-without-retry-info",
        "429-plain",
        "500",
        "503",
        "404-model",
        "400",
        "403",
        "504",
    ],
)
async def test_http_errors_are_mapped(
    status: int, body: dict[str, object], kind: str, retryable: bool
) -> None:
    async with served(Reply(status=status, body=body)) as g:
        chunks = await adapters.collect(provider(g.client))
    assert len(chunks) == 1
    error = adapters.last_error(chunks)
    inner = body["error"]
    assert isinstance(inner, dict)
    assert (error.kind, error.retryable, error.code) == (kind, retryable, status)
    assert error.message == inner["message"]
    assert len(g.server.seen) == 1  # no retries: the client was built with one attempt


@pytest.mark.parametrize(
    ("status", "body", "title"),
    [
        (503, api_error(503, "UNAVAILABLE", "The model is overloaded."), "Provider Overloaded"),
        (404, api_error(404, "NOT_FOUND", "models/x is not found"), "Model Configuration Error"),
        (429, api_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted."), "Rate Limited"),
    ],
    ids=["503", "404", "429"],
)
async def test_http_errors_end_to_end(status: int, body: dict[str, object], title: str) -> None:
    async with served(Reply(status=status, body=body)) as g, stage() as s:
        result = await s.stream(provider(g.client))
    error = adapters.result_error(result)
    assert error.code == status
    assert s.contents == []
    embed = s.embeds[0]
    assert embed["title"] == title
    headline = base.describe_error(error, "en")
    assert headline is not None
    assert str(embed["description"]).startswith(headline)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_mid_stream_error_event(transport: adapters.Transport) -> None:
    reply = Reply(
        frames=[
            sse(response(text("The answer is"), meta=usage(8))),
            sse(api_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")),
        ]
    )
    async with served(reply, transport=transport) as g, stage() as s:
        chunks = await adapters.collect(provider(g.client))
        result = await s.stream(provider(g.client))
    assert adapters.pieces(chunks) == ["The answer is"]
    error = adapters.last_error(chunks)
    assert (error.kind, error.retryable, error.code) == ("provider_overloaded", True, 503)
    assert error.message == "The model is overloaded. Please try again later."
    assert result.status == "error"
    assert result.accumulated_text == "The answer is"
    assert s.contents == ["The answer is"]  # flushed before the embed (B6)
    assert s.embeds[0]["title"] == "Provider Overloaded"
    assert result.usage == domain.TokenUsage(8, 0)


async def test_a_mid_stream_internal_error_is_retryable_api_error() -> None:
    reply = Reply(
        frames=[
            sse(response(text("Partial"), meta=usage(8))),
            sse(api_error(500, "INTERNAL", "An internal error has occurred.")),
        ]
    )
    async with served(reply) as g:
        chunks = await adapters.collect(provider(g.client))
    error = adapters.last_error(chunks)
    assert (error.kind, error.retryable, error.code) == ("api_error", True, 500)


async def test_a_data_line_that_is_not_json() -> None:
    reply = Reply(frames=[sse(response(text("Hi"), meta=usage(8))), b"data: <html>oops\n\n"])
    async with served(reply) as g:
        chunks = await adapters.collect(provider(g.client))
    error = adapters.last_error(chunks)
    assert (error.kind, error.code, error.retryable) == ("api_error", "malformed_event", True)


async def test_an_error_after_the_finish_signal_is_ignored() -> None:
    reply = Reply(
        frames=[sse(response(text("Done."), finish="STOP", meta=usage(8, 2))), sse(response())],
        cut_after=1,
    )
    async with served(reply) as g:
        chunks = await adapters.collect(provider(g.client))
    assert isinstance(chunks[-1], domain.DoneChunk)
    assert domain.normalize_usage(chunks[-1].usage) == domain.TokenUsage(8, 2)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_connection_cut_mid_stream(transport: adapters.Transport) -> None:
    reply = Reply(
        frames=[
            sse(response(text("Half an "), meta=usage(8))),
            sse(response(text("answer"), meta=usage(8))),
            sse(response(finish="STOP", meta=usage(8, 3))),
        ],
        cut_after=2,
    )
    async with served(reply, transport=transport) as g, stage() as s:
        chunks = await adapters.collect(provider(g.client))
        result = await s.stream(provider(g.client))
    assert adapters.pieces(chunks) == ["Half an ", "answer"]
    error = adapters.last_error(chunks)
    assert (error.kind, error.code, error.retryable) == ("api_error", "connection_error", True)
    assert result.status == "error"
    assert result.accumulated_text == "Half an answer"
    assert s.contents == ["Half an answer"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_clients_own_timeout_is_a_timeout(transport: adapters.Transport) -> None:
    reply = Reply(
        frames=[sse(response(text("Thinking"), meta=usage(8))), sse(response())], hang_after=1
    )
    async with served(reply, transport=transport, timeout_ms=5_000) as g:
        loop = asyncio.get_running_loop()
        start = loop.time()
        chunks = await adapters.collect(provider(g.client))
        elapsed = loop.time() - start
    assert adapters.pieces(chunks) == ["Thinking"]
    error = adapters.last_error(chunks)
    assert (error.kind, error.retryable) == ("timeout", True)
    assert 5.0 <= elapsed <= 5.1


# -- retries belong to the caller's client ---------------------------------------------------


async def test_the_sdk_does_not_retry_by_default() -> None:
    busy = Reply(status=429, body=api_error(429, "RESOURCE_EXHAUSTED", "Resource exhausted."))
    async with served(busy, hello_world(), default_retries=True) as g:
        chunks = await adapters.collect(provider(g.client))
    assert adapters.last_error(chunks).kind == "rate_limit"
    assert len(g.server.seen) == 1


async def test_the_callers_retry_options_are_used_and_left_alone() -> None:
    retry = types.HttpRetryOptions(attempts=2, initial_delay=1.0, jitter=0.0)
    busy = Reply(status=429, body=api_error(429, "RESOURCE_EXHAUSTED", "Resource exhausted."))
    async with served(busy, hello_world(), retry=retry) as g, stage() as s:
        before = g.client._api_client._http_options.model_copy(deep=True)
        result = await s.stream(provider(g.client))
        after = g.client._api_client._http_options
        assert after.retry_options == types.HttpRetryOptions(
            attempts=2, initial_delay=1.0, jitter=0.0
        )
        assert after.model_dump(exclude={"httpx_async_client"}) == before.model_dump(
            exclude={"httpx_async_client"}
        )
    assert len(g.server.seen) == 2  # the SDK retried the 429 once, then streamed
    assert result.status == "completed"
    assert result.accumulated_text == "Hello, world!"


# -- closing the HTTP stream (B10) -----------------------------------------------------------


async def test_a_stop_while_the_model_hangs_ends_the_stream_and_its_connection() -> None:
    reply = Reply(
        frames=[sse(response(text("Some text\n"), meta=usage(8))), sse(response())], hang_after=1
    )
    async with served(reply) as g, stage() as s:
        loop = asyncio.get_running_loop()
        loop.call_later(5, s.orchestrator.request_stop, s.channel.id, "user-1")
        start = loop.time()
        result = await s.stream(provider(g.client))
        assert loop.time() - start <= 5.05
        assert result.status == "stopped_by_user"
        assert result.accumulated_text == "Some text"
        assert s.contents == ["Some text"]
        assert await closed_soon(g.server)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_closing_between_responses_closes_the_http_stream_without_the_gc(
    transport: adapters.Transport,
) -> None:
    reply = Reply(frames=[sse(response(text("One"), meta=usage(8))), sse(response())], hang_after=1)
    gc.disable()  # the SDK's own response chain is only freed by the collector
    try:
        async with served(reply, transport=transport) as g:
            stream = provider(g.client).start_stream(
                StreamConfig(delivery="messages"), adapters.ADAPTER_ONLY
            )
            first = await anext(stream)
            assert isinstance(first, domain.TextChunk)
            assert first.content == "One"
            assert g.server.open_connections() == 1
            assert isinstance(stream, AsyncGenerator)
            await stream.aclose()  # what the orchestrator does on every exit path (B10)
            assert await closed_soon(g.server)
    finally:
        gc.enable()


class BrokenAfterFirst(GeminiProvider):
    """A host's subclass whose `process_chunk` fails: the orchestrator ends the stream (B13)
    and closes the adapter's generator while the SDK's stream is suspended between
    responses, the path where the SDK alone would leave the HTTP response open."""

    def process_chunk(self, raw: GeminiItem) -> domain.ProcessedChunk:
        raise RuntimeError("the host's chunk hook broke")


async def test_an_exception_result_closes_the_http_stream_without_the_gc() -> None:
    reply = Reply(frames=[sse(response(text("One"), meta=usage(8))), sse(response())], hang_after=1)
    gc.disable()
    try:
        async with served(reply) as g, stage() as s:
            broken = BrokenAfterFirst(g.client, model=MODEL, contents="Say hello")
            result = await s.stream(broken)
            assert result.status == "error"
            assert isinstance(result.data, RuntimeError)
            assert await closed_soon(g.server)
    finally:
        gc.enable()


async def test_describe_error_uses_the_shared_headlines() -> None:
    gemini = GeminiProvider(cast("genai.Client", None), model=MODEL, contents="x")
    assert gemini.name == "gemini"
    error = domain.ProviderError("provider_overloaded", "busy")
    assert gemini.describe_error(error, "en") == base.HEADLINES["provider_overloaded"]
    assert gemini.describe_error(base.truncated_error(), "en") == base.describe_error(
        base.truncated_error(), "en"
    )
