"""What an adapter costs over the SDK it wraps: `sdk_overhead_ratio_{openai,anthropic,gemini}`.

For each SDK, one local model server (`cordstream.shell.testing.sse.ModelServer`, aiohttp on
127.0.0.1, in this process and event loop) replays the same answer in the provider's own wire
format, 4,000 small text chunks (`bench.answers`, 1-8 characters each) with the frames the
real API sends around them. Two ways to read it, each on the official SDK's client
(`openai.AsyncOpenAI`, `anthropic.AsyncAnthropic`, `google.genai.Client(...).aio`, built once,
outside the timing, no retries):

- *bare*: what a bot's own loop does with the SDK: one streaming request, and for every
  chunk the text delta read as the SDK documents it (`chunk.choices[0].delta.content`,
  `event.delta.text`, `response.text`) and appended to a list;
- *adapter*: the cordstream adapter on the same client, through
  `StreamOrchestrator().stream_to_discord(provider, StreamConfig(delivery="messages",
  flush_limit=0), StreamContext(InstantSink()))`: the shell and the core included, into a
  channel that accepts every message at once (`bench.shell.InstantSink`, Discord's pacing off).

Both pay for the server, the socket, the SSE parsing and the SDK's models alike. Each path is
run once untimed (warm-up), then in pairs, bare first in one pair and the adapter first in the
next, with a garbage collection before each run. A run is timed in the process's CPU time:
server, client, shell and core all run in this one process, so that is their cost, and a moment
the shared machine gives to other jobs is not. The figure is the median of the pairs' ratios
(adapter time / bare time), so a burst of load hits a pair, not one side. Each run checks
that it read the whole answer (the bare loop's text is the answer; the adapter's stream is
`completed`).

    python -m bench.sdk [--json] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anthropic
import openai
from google import genai
from google.genai import types

from bench import report
from bench.answers import answer, chunked
from bench.shell import InstantSink
from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator, set_global_budget
from cordstream.shell.providers import AnthropicProvider, GeminiProvider, OpenAIChatProvider
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing.sse import ModelServer, Reply, sse, sse_done

CHUNKS: Final = 4000
PAIRS: Final = 11
QUICK_PAIRS: Final = 5
SDKS: Final = ("openai", "anthropic", "gemini")

LABELS: Final = {
    f"sdk_overhead_ratio_{sdk}": f"{name} adapter + shell time / bare SDK loop time, median"
    for sdk, name in (("openai", "OpenAI"), ("anthropic", "Anthropic"), ("gemini", "Gemini"))
}


def pieces(count: int = CHUNKS) -> list[str]:
    """The answer's `count` text chunks: prose, lists, a table, code (no think block: the bare
    loop shows it as text, the core would hold it back)."""
    text = answer(count * 8 + 100).split("</think>", 1)[1].lstrip()
    chunks = chunked(text)[:count]
    assert len(chunks) == count, len(chunks)
    return chunks


# --- the wire formats, as the APIs send them ------------------------------------------------

_USER: Final = "Write an overview."


def openai_frames(texts: Sequence[str]) -> list[bytes]:
    """A chat-completions stream: a role delta, a content delta per piece, the finish chunk,
    the usage chunk `stream_options.include_usage` adds, `[DONE]`."""

    def chunk(delta: dict[str, object], finish: str | None = None, **top: object) -> bytes:
        body: dict[str, object] = {
            "id": "chatcmpl-C3fXk1b9QyV0m2Lw8Jr5sTnAe7HdP",
            "object": "chat.completion.chunk",
            "created": 1755000000,
            "model": "gpt-4.1-mini-2025-04-14",
            "service_tier": "default",
            "system_fingerprint": "fp_6f2eabb9a5",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            "usage": None,
            "obfuscation": "q8XbT",
        }
        return sse(body | top)

    usage = {"prompt_tokens": 12, "completion_tokens": len(texts), "total_tokens": 12 + len(texts)}
    return [
        chunk({"role": "assistant", "content": "", "refusal": None, "annotations": []}),
        *(chunk({"content": text}) for text in texts),
        chunk({}, "stop"),
        chunk({}, choices=[], usage=usage),
        sse_done(),
    ]


def anthropic_frames(texts: Sequence[str]) -> list[bytes]:
    """A Messages stream: `message_start`, one text block of a delta per piece with a `ping`,
    `message_delta` with the stop reason and usage, `message_stop`."""
    usage = {"input_tokens": 12, "output_tokens": 1, "service_tier": "standard"}
    message: dict[str, object] = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-6",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }

    def event(kind: str, **body: object) -> bytes:
        return sse({"type": kind, **body}, event=kind)

    return [
        event("message_start", message=message),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("ping"),
        *(
            event("content_block_delta", index=0, delta={"type": "text_delta", "text": text})
            for text in texts
        ),
        event("content_block_stop", index=0),
        event(
            "message_delta",
            delta={"stop_reason": "end_turn", "stop_sequence": None},
            usage={"output_tokens": len(texts)},
        ),
        event("message_stop"),
    ]


def gemini_frames(texts: Sequence[str]) -> list[bytes]:
    """A `streamGenerateContent?alt=sse` stream: a `GenerateContentResponse` per piece with
    the running usage (the API repeats it, counts so far, on every response), the last one with
    `finishReason`."""

    def response(text: str, index: int) -> bytes:
        candidate: dict[str, object] = {
            "content": {"parts": [{"text": text}], "role": "model"},
            "index": 0,
        }
        if index == len(texts) - 1:
            candidate["finishReason"] = "STOP"
        usage = {
            "promptTokenCount": 12,
            "candidatesTokenCount": index + 1,
            "totalTokenCount": 13 + index,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12}],
        }
        return sse(
            {
                "candidates": [candidate],
                "usageMetadata": usage,
                "modelVersion": "gemini-2.5-flash",
                "responseId": "mR5oaJ2zLdOdz7IPhN2jqAw",
            }
        )

    return [response(text, index) for index, text in enumerate(texts)]


# --- the two paths --------------------------------------------------------------------------


@dataclass
class _Sdk:
    """One SDK's client on the server, its bare loop and its adapter."""

    client: Any
    bare: Callable[[], Awaitable[str]]
    adapter: Callable[[], Any]
    close: Callable[[], Awaitable[object]]


def _openai(url: str) -> _Sdk:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-bench", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": _USER}]

    async def bare() -> str:
        parts: list[str] = []
        stream = await client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.choices:
                content = chunk.choices[0].delta.content
                if content:
                    parts.append(content)
        return "".join(parts)

    def adapter() -> OpenAIChatProvider:
        return OpenAIChatProvider(client, model="gpt-4.1-mini", messages=messages)

    return _Sdk(client, bare, adapter, client.close)


def _anthropic(url: str) -> _Sdk:
    client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-bench", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": _USER}]

    async def bare() -> str:
        parts: list[str] = []
        stream = await client.messages.create(
            model="claude-sonnet-4-6", messages=messages, max_tokens=8192, stream=True
        )
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                parts.append(event.delta.text)  # noqa: PERF401  # a bot's own loop
        return "".join(parts)

    def adapter() -> AnthropicProvider:
        return AnthropicProvider(
            client, model="claude-sonnet-4-6", messages=messages, max_tokens=8192
        )

    return _Sdk(client, bare, adapter, client.close)


def _gemini(url: str) -> _Sdk:
    options = types.HttpOptions(base_url=url, retry_options=types.HttpRetryOptions(attempts=1))
    client = genai.Client(api_key="bench-key", vertexai=False, http_options=options)

    async def bare() -> str:
        parts: list[str] = []
        stream = await client.aio.models.generate_content_stream(
            model="gemini-2.5-flash", contents=_USER
        )
        async for response in stream:
            text = response.text
            if text:
                parts.append(text)
        return "".join(parts)

    def adapter() -> GeminiProvider:
        return GeminiProvider(client, model="gemini-2.5-flash", contents=_USER)

    return _Sdk(client, bare, adapter, client.aio.aclose)


_WIRE: Final = {
    "openai": (openai_frames, _openai),
    "anthropic": (anthropic_frames, _anthropic),
    "gemini": (gemini_frames, _gemini),
}


async def _timed(run: Callable[[], Awaitable[object]]) -> tuple[float, object]:
    gc.collect()
    start = time.process_time()
    value = await run()
    return time.process_time() - start, value


async def _pairs(sdk: str, pairs: int, chunks: int) -> list[tuple[float, float]]:
    frames, build = _WIRE[sdk]
    texts = pieces(chunks)
    whole = "".join(texts)
    orchestrator = StreamOrchestrator(StopRegistry())
    config = StreamConfig(delivery="messages", flush_limit=0)
    context = StreamContext(InstantSink())  # type: ignore[arg-type]  # duck-typed sink
    async with ModelServer([Reply(frames=frames(texts))]) as server:
        paths = build(server.url)

        async def adapted() -> object:
            return await orchestrator.stream_to_discord(paths.adapter(), config, context)

        try:
            times: list[tuple[float, float]] = []
            for index in range(pairs + 1):
                if index % 2:  # every other pair the other way round: no side always goes first
                    adapter_s, result = await _timed(adapted)
                    bare_s, text = await _timed(paths.bare)
                else:
                    bare_s, text = await _timed(paths.bare)
                    adapter_s, result = await _timed(adapted)
                assert text == whole, f"{sdk}: the bare loop read {len(str(text))} characters"
                status = getattr(result, "status", None)
                assert status == "completed", f"{sdk}: {result}"
                if index:  # the first pair warms both paths up
                    times.append((bare_s, adapter_s))
            return times
        finally:
            await paths.close()


def pairs_of(sdk: str, pairs: int, chunks: int = CHUNKS) -> list[tuple[float, float]]:
    """`pairs` (bare seconds, adapter seconds) for an answer of `chunks` chunks, after one
    untimed run of each, on an event loop of their own."""
    previous = set_global_budget(None)  # an instant sink, not Discord: nothing to pace
    try:
        return asyncio.run(_pairs(sdk, pairs, chunks))
    finally:
        set_global_budget(previous)


def measure_times(quick: bool = False) -> dict[str, list[tuple[float, float]]]:
    """Each SDK's timed pairs (bare seconds, adapter seconds)."""
    return {sdk: pairs_of(sdk, QUICK_PAIRS if quick else PAIRS) for sdk in SDKS}


def measure(quick: bool = False) -> dict[str, float]:
    return {
        f"sdk_overhead_ratio_{sdk}": statistics.median(adapter / bare for bare, adapter in times)
        for sdk, times in measure_times(quick).items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sdk", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_PAIRS} pairs, not {PAIRS}")
    parser.add_argument("--times", action="store_true", help="each pair's times, in ms")
    args = parser.parse_args()
    if args.times:
        for sdk, times in measure_times(args.quick).items():
            shown = ", ".join(f"{b * 1000:.0f}/{a * 1000:.0f}" for b, a in times)
            print(f"{sdk}: bare/adapter ms: {shown}")
        return
    report(measure(args.quick), LABELS.__getitem__, width=60, as_json=args.json)


if __name__ == "__main__":
    main()
