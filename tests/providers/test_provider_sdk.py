"""What the adapters rely on inside the installed SDKs, pinned by name (B10, B11, G4).

An adapter closes the SDK's own generators under its stream, so none is left to the garbage
collector, which would close it in a task of its own after the call (B11), and so the HTTP
response is released at once (B10). For that it reads one private attribute
(`cordstream.shell.providers.base.stream_iterator`: openai's `AsyncStream._iterator`) and
follows what `base.sdk_generators` follows (google-genai's `HttpResponse.segment_iterator`);
the Gemini adapter finds the API key on the client's private `_api_client` (G4). And the
OpenAI adapter reads each chunk's fields where pydantic v2 keeps them (`base.fields_of`: the
instance's `__dict__` and `model_extra`), not through `getattr`, whose miss costs pydantic's
`__getattr__` exception. These tests read them on the real SDK objects, so an SDK release that
renames or restructures them fails here, saying what changed, instead of an end-to-end test
failing with a task left behind or a field read as missing.
"""

from __future__ import annotations

import gc
import inspect
from importlib.metadata import version

import pytest
from google import genai
from google.genai._api_client import HttpResponse

from cordstream.shell.providers import base
from cordstream.shell.providers.anthropic import AnthropicProvider
from cordstream.shell.providers.gemini import GeminiProvider
from cordstream.shell.providers.openai import OpenAIChatProvider
from cordstream.shell.testing import openai_wire
from cordstream.shell.testing.sse import Reply, sse, sse_done
from tests.support import adapters

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def _name(generator: object) -> str:
    """`module.function` of a suspended async generator."""
    assert inspect.isasyncgen(generator)
    assert generator.ag_frame is not None
    return f"{generator.ag_frame.f_globals['__name__']}.{generator.ag_code.co_name}"


async def test_B11_openai_keeps_the_generator_under_its_stream_in_a_private_iterator() -> None:
    sdk = f"openai {version('openai')}"
    async with adapters.openai_served(openai_wire.answer("Hello there")) as served:
        stream = await served.client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        try:
            await anext(stream)
            assert base.STREAM_ITERATOR in vars(stream), (
                f"{sdk}: AsyncStream has no {base.STREAM_ITERATOR!r}: follow it in "
                "base.stream_iterator"
            )
            iterator = base.stream_iterator(stream)
            assert _name(iterator) == "openai._streaming.__stream__", sdk
            found = base.sdk_generators(iterator, OpenAIChatProvider._sdk_packages)
            names = [_name(generator) for generator in found]
            # What the SDK leaves unclosed when it reads `[DONE]`: the event generator and
            # httpx2's byte generators under it.
            assert names[:2] == ["openai._streaming.__stream__", "openai._streaming._iter_events"]
            assert any(name.startswith("httpx2.") for name in names), (sdk, names)
        finally:
            await stream.close()


# What the OpenAI adapter reads, per kind of model: every name, present or not.
OPENAI_FIELDS = {
    "chunk": ("choices", "model", "id", "provider", "usage", "error"),
    "choice": ("index", "delta", "finish_reason"),
    "delta": ("content", "refusal", "reasoning_content", "reasoning", "tool_calls"),
    "tool call": ("index", "id", "function"),
    "function": ("name", "arguments"),
}


async def test_openai_chunks_keep_their_fields_where_fields_of_reads_them() -> None:
    sdk = f"openai {version('openai')}"
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}}
    frames = [
        # OpenRouter's extras: `provider` on the chunk, `reasoning` on the delta.
        sse(
            openai_wire.frame({"role": "assistant", "reasoning": "Hm.", "tool_calls": [call]})
            | {"provider": "Groq", "error": None}
        ),
        sse({"choices": [{"delta": {"content": "Hi"}}]}),  # most fields missing
        sse(openai_wire.frame({}, "stop")),
        sse_done(),
    ]
    async with adapters.openai_served(Reply(frames=frames)) as served:
        stream = await served.client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        chunks = [chunk async for chunk in stream]
    models: list[tuple[str, object]] = []
    for chunk in chunks:
        models.append(("chunk", chunk))
        for choice in chunk.choices:
            models += [("choice", choice), ("delta", choice.delta)]
            for tool_call in choice.delta.tool_calls or ():
                models += [("tool call", tool_call), ("function", tool_call.function)]
    assert len(models) == 11, (sdk, models)
    for kind, model in models:
        fields = base.fields_of(model)
        for name in OPENAI_FIELDS[kind]:
            assert fields.get(name) is getattr(model, name, None), (sdk, kind, name)
    first = chunks[0]
    assert first.model_extra == {"provider": "Groq", "error": None}, sdk
    assert base.fields_of(first)["provider"] == "Groq", f"{sdk}: extras not in model_extra"
    assert base.fields_of(first.choices[0].delta)["reasoning"] == "Hm.", sdk
    assert base.fields_of(None) == {}


async def test_B10_google_genai_holds_its_response_generators_in_its_http_response() -> None:
    sdk = f"google-genai {version('google-genai')}"
    response = {"candidates": [{"content": {"parts": [{"text": "Hi"}], "role": "model"}}]}
    async with adapters.gemini_served(Reply(frames=[sse(response), sse(response)])) as served:
        stream = await served.client.aio.models.generate_content_stream(
            model="gemini-2.5-flash", contents="Hi"
        )
        await anext(stream)
        found = base.sdk_generators(stream, GeminiProvider._sdk_packages)
        holders = [
            held
            for generator in found
            for held in gc.get_referents(generator)
            if isinstance(held, HttpResponse)
        ]
        assert holders, f"{sdk}: no HttpResponse under the stream's generators"
        assert all(
            inspect.isasyncgen(vars(holder).get("segment_iterator")) for holder in holders
        ), f"{sdk}: HttpResponse keeps no `segment_iterator` generator"
        names = [_name(generator) for generator in found]
        # The innermost one holds the aiohttp response: found only through `segment_iterator`.
        assert "google.genai._api_client._aiter_aiohttp_lines" in names, (sdk, names)
        await base.close_generators(found)
        assert all(inspect.isasyncgen(g) and g.ag_frame is None for g in found)  # closed


async def test_B11_anthropic_keeps_the_generator_under_its_stream_in_a_private_iterator() -> None:
    # The same Stainless layout as openai's: suspended mid-answer, the generators under the
    # stream are what the adapter closes itself; read out, the SDK has finished them.
    sdk = f"anthropic {version('anthropic')}"
    frames = [
        sse({"type": "content_block_stop", "index": 0}, event="content_block_stop"),
        sse({"type": "message_stop"}, event="message_stop"),
    ]
    async with adapters.anthropic_served(Reply(frames=frames)) as served:
        stream = await served.client.messages.create(
            model="claude", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, stream=True
        )
        try:
            assert (await anext(stream)).type == "content_block_stop"
            iterator = base.stream_iterator(stream)
            assert inspect.isasyncgen(iterator), (
                f"{sdk}: AsyncStream has no {base.STREAM_ITERATOR!r}"
            )
            assert _name(iterator) == "anthropic._streaming.__stream__", sdk
            found = base.sdk_generators(iterator, AnthropicProvider._sdk_packages)
            names = [_name(generator) for generator in found]
            assert names[0] == "anthropic._streaming.__stream__", (sdk, names)
            assert any(name.startswith("httpx2.") for name in names), (sdk, names)
            assert [event.type async for event in stream] == ["message_stop"]
            assert base.sdk_generators(iterator, AnthropicProvider._sdk_packages) == [], sdk
        finally:
            await stream.close()


async def test_G4_google_genai_keeps_the_api_key_on_its_private_api_client() -> None:
    key = "AIzaSyPinnedKey-0123456789abcdefghijklm"
    client = genai.Client(api_key=key)
    api_client = base.genai_api_client(client)
    assert getattr(api_client, "api_key", None) == key, (
        f"google-genai {version('google-genai')}: Client.{base.GENAI_API_CLIENT} holds no "
        "api_key: follow it in base.genai_api_client"
    )
    assert key in GeminiProvider(client, model="m", contents="x").secrets()
