"""What a user sees when the connection to the model fails: each adapter with its real SDK, its
embed in the local Discord (title, headline, detail).

Rules these tests pin (`cordstream.shell.providers.connection`): a connection that cannot be
made is "could not connect to the provider: <cause>", the cause read from the exceptions
beneath the SDK's ("connection refused", "name not resolved", "TLS handshake failed"); one cut
after the answer began is "the connection to the provider was lost", never the other way
round. Both are `api_error`, code `connection_error`, retryable, the SDK's exception kept in
`original`. No message holds a Python repr or a memory address, whatever the SDK's text was,
and every adapter failure's message is cleaned the same way (`plain`).

The closed port is one a `ModelServer` listened on and gave up; TLS fails for real, an https
URL against the plain-HTTP model server. Name resolution would need the network, so for
"name not resolved" the event loop resolves numeric hosts only (`offline`): the system's own
`getaddrinfo` with `AI_NUMERICHOST`, which fails with the real `socket.gaierror` at once and
sends nothing; everything above it (the SDK, its HTTP client, their wrapping) is real.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import aiohttp
import anthropic
import httpx2
import openai
import pytest
from google import genai
from google.genai import types

from cordstream import domain
from cordstream.shell import StreamConfig, StreamProvider
from cordstream.shell.providers import AnthropicProvider, GeminiProvider, OpenAIChatProvider
from cordstream.shell.providers.connection import connection_error, plain
from cordstream.shell.testing import ModelServer, Reply, sse, sse_done
from tests.support import adapters
from tests.support.stage import Stage, stage

served = pytest.mark.asyncio  # against local servers, on looptime's virtual clock
virtual_time = pytest.mark.looptime

ADAPTERS: Final = ("openai", "anthropic", "gemini-aiohttp", "gemini-httpx2")
MODEL: Final = "local-model"
# What must never reach a channel: an object repr, an exception repr, a memory address.
REPR: Final = re.compile(r"object at|0x[0-9a-fA-F]{4,}|<[\w.]+[ :>]")


@asynccontextmanager
async def adapter(name: str, url: str) -> AsyncIterator[StreamProvider[Any]]:
    """The adapter `name` on its SDK's client pointed at `url`, one attempt, no retries."""
    if name == "openai":
        chat = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "Hi"}]
        yield OpenAIChatProvider(chat, model=MODEL, messages=messages)
        await chat.close()
    elif name == "anthropic":
        claude = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        question: list[Any] = [{"role": "user", "content": "Hi"}]
        yield AnthropicProvider(claude, model=MODEL, messages=question, max_tokens=64)
        await claude.close()
    else:
        own = httpx2.AsyncClient() if name == "gemini-httpx2" else None
        options = types.HttpOptions(base_url=url, retry_options=types.HttpRetryOptions(attempts=1))
        if own is not None:
            options.httpx_async_client = own
        gemini = genai.Client(api_key="test-key", vertexai=False, http_options=options)
        yield GeminiProvider(gemini, model=MODEL, contents="Hi")
        await gemini.aio.aclose()
        if own is not None:
            await own.aclose()


async def closed_port() -> str:
    """The URL of a port nothing listens on any more."""
    async with ModelServer() as server:
        return server.url


async def shown(s: Stage, provider: StreamProvider[Any]) -> tuple[domain.ProviderError, str]:
    """Stream `provider` into the local Discord: the error, and the one embed's detail (what
    follows "Details:"), after checking the embed's title and that it shows no repr."""
    result = await s.stream(provider, StreamConfig(delivery="messages"))
    error = adapters.result_error(result)
    (embed,) = s.embeds
    assert embed["title"] == "API Error"
    description = str(embed["description"])
    assert not REPR.search(description), description
    headline, _, detail = description.partition("\n\n**Details:**\n")
    assert headline.strip()
    assert (error.kind, error.code, error.retryable) == ("api_error", "connection_error", True)
    return error, detail


@served
@virtual_time
@pytest.mark.parametrize("name", ADAPTERS)
async def test_a_refused_connection_says_so(name: str) -> None:
    url = await closed_port()
    async with stage() as s, adapter(name, url) as provider:
        error, detail = await shown(s, provider)
    assert detail == "could not connect to the provider: connection refused"
    assert isinstance(error.original, Exception)  # the SDK's own, for the bot's logs
    assert s.contents == []


@served
@virtual_time
@pytest.mark.parametrize("name", ADAPTERS)
async def test_a_failed_tls_handshake_says_so(name: str) -> None:
    async with ModelServer([Reply(body={})]) as server:
        url = server.url.replace("http://", "https://")  # TLS to a server that speaks HTTP
        async with stage() as s, adapter(name, url) as provider:
            _, detail = await shown(s, provider)
    assert detail == "could not connect to the provider: TLS handshake failed"


@asynccontextmanager
async def offline() -> AsyncIterator[None]:
    """The running loop resolves numeric hosts only (see the module docstring)."""
    loop = asyncio.get_running_loop()

    async def numeric_only(
        host: Any, port: Any, *, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[Any]:
        return socket.getaddrinfo(host, port, family, type, proto, flags | socket.AI_NUMERICHOST)

    loop.getaddrinfo = numeric_only  # type: ignore[method-assign]
    try:
        yield
    finally:
        del loop.getaddrinfo  # the class's own again


@served
@virtual_time
@pytest.mark.parametrize("name", ADAPTERS)
async def test_a_name_that_does_not_resolve_says_so(name: str) -> None:
    async with offline(), stage() as s, adapter(name, "http://model.invalid:9") as provider:
        error, detail = await shown(s, provider)
    assert detail == "could not connect to the provider: name not resolved"
    chain, below = [], error.original
    while isinstance(below, BaseException):  # the real gaierror sits beneath the SDK's
        chain.append(below)
        below = below.__cause__ or below.__context__
    assert any(isinstance(e, socket.gaierror) for e in chain)


def _gemini(text: str) -> bytes:
    candidate = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
    return sse({"candidates": [candidate], "modelVersion": MODEL})


def _anthropic(text: str) -> list[bytes]:
    message: dict[str, object] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    return [
        sse({"type": "message_start", "message": message}, event="message_start"),
        sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            event="content_block_start",
        ),
        sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            },
            event="content_block_delta",
        ),
    ]


def _openai(text: str) -> list[bytes]:
    def frame(delta: dict[str, object]) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        return sse(
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": MODEL,
                "choices": [choice],
            }
        )

    return [frame({"role": "assistant", "content": ""}), frame({"content": text})]


# The frames of an answer that begins "Half an answer" and would go on; the server cuts the
# TCP connection after them.
BEGUN: Final[dict[str, Callable[[str], list[bytes]]]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "gemini-aiohttp": lambda text: [_gemini(text)],
    "gemini-httpx2": lambda text: [_gemini(text)],
}


@served
@virtual_time
@pytest.mark.parametrize("name", ADAPTERS)
async def test_a_connection_cut_mid_answer_is_lost_not_refused(name: str) -> None:
    frames = [*BEGUN[name]("Half an answer\n"), *BEGUN[name]("that never came"), sse_done()]
    cut = len(BEGUN[name]("x"))
    reply = Reply(frames=frames, cut_after=cut)
    async with ModelServer([reply]) as server, stage() as s, adapter(name, server.url) as provider:
        _, detail = await shown(s, provider)
    assert detail == "the connection to the provider was lost"
    assert s.contents == ["Half an answer"]


@served
@virtual_time
async def test_every_adapter_failure_is_shown_without_python_reprs() -> None:
    """A provider whose own error text holds a repr (a proxy's Python stack in the body):
    the embed keeps its words and drops the repr."""
    body = {"error": {"message": "upstream <pool.Conn object at 0x7f3a1c2b9d60> went away"}}
    reply = Reply(status=502, body=body)
    async with ModelServer([reply]) as server, stage() as s, adapter("openai", server.url) as p:
        result = await s.stream(p, StreamConfig(delivery="messages"))
    assert adapters.result_error(result).message == "upstream went away"
    (embed,) = s.embeds
    assert str(embed["description"]).endswith("\nupstream went away")


def test_plain_drops_what_the_sdks_put_in_their_texts() -> None:
    """The texts aiohttp writes for a refused connection and for a body cut short."""
    refused = (
        "Cannot connect to host 127.0.0.1:42721 ssl:<ssl.SSLContext object at 0x7f2604f35880>"
        " [Connect call failed ('127.0.0.1', 42721)]"
    )
    assert plain(refused) == (
        "Cannot connect to host 127.0.0.1:42721 [Connect call failed ('127.0.0.1', 42721)]"
    )
    cut = (
        "Response payload is not completed: <TransferEncodingError: 400, message='Not enough"
        " data to satisfy transfer length header.'>"
    )
    assert plain(cut) == "Response payload is not completed"
    assert plain("callback <function f at 0x7f00aa11bb22> failed") == "callback failed"
    assert plain("id 0x1f is fine, <b>bold</b> too") == "id 0x1f is fine, <b>bold</b> too"


@served
@virtual_time
async def test_the_cause_is_found_beneath_any_wrapping() -> None:
    """aiohttp's own connect error, as its connector raises it for a refused port."""
    url = await closed_port()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorError) as raised:
            await session.get(url)
    lost = connection_error(raised.value)  # a connect-phase cause says so by itself
    assert lost.message == "could not connect to the provider: connection refused"
    reset = connection_error(ConnectionResetError(104, "Connection reset by peer"))
    assert reset.message == "the connection to the provider was lost: connection reset"
    nothing = connection_error(RuntimeError("?"), connecting=(RuntimeError,))
    assert nothing.message == "could not connect to the provider"
