"""The skeleton the three adapters share (`cordstream.shell.providers.base`, SPEC §A): one
attribute style, the same error for the same failure, `process_chunk` handing chunks on.

The per-adapter files check each wire format; this one checks that the three agree where the
wire formats do not differ.
"""

from __future__ import annotations

from typing import cast

import anthropic
import openai
import pytest
from google import genai

from cordstream.domain import ErrorChunk, FunctionCall, FunctionCallChunk, TextChunk
from cordstream.shell.providers import base
from cordstream.shell.providers.anthropic import AnthropicProvider
from cordstream.shell.providers.gemini import GeminiProvider
from cordstream.shell.providers.openai import OpenAIChatProvider
from cordstream.shell.testing.sse import Reply, sse
from tests.support import adapters

served = pytest.mark.asyncio  # against a local model server, on looptime's virtual clock
virtual_time = pytest.mark.looptime

Adapter = OpenAIChatProvider | AnthropicProvider | GeminiProvider


def _adapters() -> dict[str, tuple[Adapter, tuple[str, ...]]]:
    """Each adapter, unconnected, with the attributes it documents."""
    return {
        "openai": (
            OpenAIChatProvider(openai.AsyncOpenAI(api_key="k"), model="m", messages=[]),
            ("client", "model", "messages", "tools", "params"),
        ),
        "anthropic": (
            AnthropicProvider(
                anthropic.AsyncAnthropic(api_key="k"), model="m", messages=[], max_tokens=5
            ),
            ("client", "model", "messages", "max_tokens", "system", "tools", "params"),
        ),
        "gemini": (
            GeminiProvider(cast("genai.Client", None), model="m", contents="x"),
            ("client", "model", "contents", "config"),
        ),
    }


@pytest.mark.parametrize("name", ["openai", "anthropic", "gemini"])
def test_A_every_adapter_has_read_only_attributes(name: str) -> None:
    provider, attributes = _adapters()[name]
    assert provider.name == name
    assert provider.model == "m"
    for attribute in attributes:
        before = getattr(provider, attribute)
        with pytest.raises(AttributeError):
            setattr(provider, attribute, before)
        assert getattr(provider, attribute) == before


@pytest.mark.parametrize("name", ["openai", "anthropic", "gemini"])
def test_A_process_chunk_hands_the_generators_chunks_on(name: str) -> None:
    provider, _ = _adapters()[name]
    chunk = TextChunk("as yielded")
    assert provider.process_chunk(chunk) is chunk


def test_A_tool_arguments_are_a_json_object_or_say_what_they_are() -> None:
    assert base.tool_arguments('{"city": "Paris"}') == {"city": "Paris"}
    assert base.tool_arguments("  ") == {}
    with pytest.raises(ValueError, match=r"^not JSON \("):
        base.tool_arguments('{"city": "Par')
    with pytest.raises(ValueError, match=r"^a JSON list, not an object$"):
        base.tool_arguments("[1, 2]")


def test_A_a_nameless_call_ends_the_answer_with_invalid_tool_call() -> None:
    named = FunctionCall("get_weather", {}, id="call_1")
    assert base.calls_end([named], usage={"n": 1}) == FunctionCallChunk((named,), usage={"n": 1})
    ended = base.calls_end([named, FunctionCall("", {}, id="call_2")])
    assert isinstance(ended, ErrorChunk)
    assert ended.error is not None
    assert (ended.error.code, ended.error.retryable) == ("invalid_tool_call", True)
    assert "call_2" in ended.error.message


@served
@virtual_time
async def test_A_an_anthropic_event_that_is_not_json_is_a_malformed_event() -> None:
    # The same code as the OpenAI and Gemini adapters give (their own files check theirs).
    start = {"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {}}}
    frames = [sse(start, event="message_start"), b"event: content_block_delta\ndata: {oops\n\n"]
    async with adapters.anthropic_served(Reply(frames=frames)) as served:
        provider = AnthropicProvider(served.client, model="m", messages=[], max_tokens=5)
        error = adapters.last_error(await adapters.collect(provider))
    assert (error.kind, error.code, error.retryable) == ("api_error", "malformed_event", True)


@served
@virtual_time
async def test_A_a_nameless_gemini_function_call_is_an_invalid_tool_call() -> None:
    nameless = {
        "candidates": [
            {
                "content": {"parts": [{"functionCall": {"args": {}}}], "role": "model"},
                "finishReason": "STOP",
            }
        ]
    }
    async with adapters.gemini_served(Reply(frames=[sse(nameless)])) as served:
        provider = GeminiProvider(served.client, model="gemini-2.5-flash", contents="x")
        error = adapters.last_error(await adapters.collect(provider))
        with pytest.raises(ValueError, match="did not end in function calls"):
            provider.after_tools([])
    assert (error.code, error.retryable) == ("invalid_tool_call", True)


@pytest.mark.parametrize("content", ["", "Hello", "😀 e\u0301\n"])
def test_E10_an_adapters_text_chunk_is_the_chunk_its_constructor_builds(content: str) -> None:
    built = base.text_chunk(content)
    made = TextChunk(content)
    assert type(built) is TextChunk
    assert built == made
    assert hash(built) == hash(made)
    assert repr(built) == repr(made)
    assert (built.usage, built.thoughts, built.serving_provider) == (None, (), None)
