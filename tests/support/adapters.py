"""The one harness of the adapter tests: a local model server, an SDK client pointed at it, and
what an adapter makes of a stream.

`openai_served`, `anthropic_served` and `gemini_served` start a
`cordstream.shell.testing.sse.ModelServer` playing the replies and build the SDK's own client
against it, without retries unless asked (a test that wants the SDK's retry says so); the
client is closed on exit, as a bot would close its own. Each test file builds its adapter on
`served.client` with its own defaults.

`collect` reads one stream to the end as the orchestrator does (`start_stream`, then
`process_chunk` per item) with a context the adapters never read, so an adapter runs without
Discord; `stage()` (tests/support/stage.py) is there for the same streams end to end.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar, cast

import anthropic
import discord
import httpx2
import openai
from google import genai
from google.genai import types

from cordstream.domain import DoneChunk, ErrorChunk, ProcessedChunk, ProviderError, TextChunk
from cordstream.shell import StreamConfig, StreamContext, StreamProvider, StreamResult
from cordstream.shell.testing.sse import ModelServer, Reply, Seen
from tests.support.stage import other_tasks

Client = TypeVar("Client")
Transport = Literal["aiohttp", "httpx2"]

# The adapters never read the stream's context: a channel-less one for adapter-only runs.
ADAPTER_ONLY: Final = StreamContext(cast("discord.abc.Messageable", None))
OPENAI_KEY: Final = "sk-test"
ANTHROPIC_KEY: Final = "sk-ant-test"
GEMINI_KEY: Final = "test-key"


@dataclass
class Served(Generic[Client]):
    """A model server and an SDK client pointed at it."""

    server: ModelServer
    client: Client

    @property
    def seen(self) -> list[Seen]:
        """The requests the server received, in order."""
        return self.server.seen


@asynccontextmanager
async def _served(
    replies: Sequence[Reply],
    connect: Callable[[str], Client],
    close: Callable[[Client], Awaitable[object]],
) -> AsyncIterator[Served[Client]]:
    async with ModelServer(replies) as server:
        client = connect(server.url)
        try:
            yield Served(server, client)
        finally:
            await close(client)


def openai_served(
    *replies: Reply, max_retries: int = 0, timeout: float = 600.0
) -> AbstractAsyncContextManager[Served[openai.AsyncOpenAI]]:
    def connect(url: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=url + "/v1", api_key=OPENAI_KEY, max_retries=max_retries, timeout=timeout
        )

    return _served(replies, connect, openai.AsyncOpenAI.close)


def anthropic_served(
    *replies: Reply,
    max_retries: int = 0,
    timeout: float | None = None,
    http_client: httpx2.AsyncClient | None = None,
) -> AbstractAsyncContextManager[Served[anthropic.AsyncAnthropic]]:
    def connect(url: str) -> anthropic.AsyncAnthropic:
        options: dict[str, object] = {"timeout": timeout} if timeout is not None else {}
        return anthropic.AsyncAnthropic(
            base_url=url,
            api_key=ANTHROPIC_KEY,
            max_retries=max_retries,
            http_client=http_client,
            **options,  # type: ignore[arg-type]  # the SDK's own default when not given
        )

    return _served(replies, connect, anthropic.AsyncAnthropic.close)


def gemini_served(
    *replies: Reply,
    transport: Transport = "aiohttp",
    retry: types.HttpRetryOptions | None = None,
    default_retries: bool = False,
    timeout_ms: int | None = None,
) -> AbstractAsyncContextManager[Served[genai.Client]]:
    """On aiohttp (the SDK's default async transport when it is installed) or on an httpx2
    client; one attempt (no retries) unless `retry` or the SDK's `default_retries`."""
    own = httpx2.AsyncClient() if transport == "httpx2" else None

    def connect(url: str) -> genai.Client:
        options = types.HttpOptions(base_url=url, timeout=timeout_ms)
        if not default_retries:
            options.retry_options = retry or types.HttpRetryOptions(attempts=1)
        if own is not None:
            options.httpx_async_client = own
        return genai.Client(api_key=GEMINI_KEY, vertexai=False, http_options=options)

    async def close(client: genai.Client) -> None:
        await client.aio.aclose()
        if own is not None:
            await own.aclose()

    return _served(replies, connect, close)


# -- what an adapter makes of a stream ---------------------------------------------------------


async def collect(provider: StreamProvider[Any]) -> list[ProcessedChunk]:
    """Every chunk of one stream, read to the end as the orchestrator sees them."""
    stream = provider.start_stream(StreamConfig(delivery="messages"), ADAPTER_ONLY)
    try:
        return [provider.process_chunk(raw) async for raw in stream]
    finally:
        await stream.aclose()  # type: ignore[attr-defined]  # an async generator


def text_of(chunks: Sequence[ProcessedChunk]) -> str:
    """The text the chunks show, joined."""
    return "".join(pieces(chunks))


def pieces(chunks: Sequence[ProcessedChunk]) -> list[str]:
    """The text of each text chunk, in order (empty keep-alives included)."""
    return [chunk.content for chunk in chunks if isinstance(chunk, TextChunk)]


def finish_of(chunks: Sequence[ProcessedChunk]) -> Mapping[str, object]:
    """The metadata of the `DoneChunk` the stream ended with (`finish_reason` …)."""
    last = chunks[-1]
    assert isinstance(last, DoneChunk), last
    assert last.metadata is not None
    return last.metadata


def completed(result: StreamResult) -> Mapping[str, object]:
    """The finish metadata a `completed` result carries (`data`)."""
    assert result.status == "completed", result
    assert isinstance(result.data, Mapping), result.data
    return result.data


def result_error(result: StreamResult) -> ProviderError:
    """The provider's error an `error` result carries (`data`)."""
    assert result.status == "error", result
    assert isinstance(result.data, ProviderError), result.data
    return result.data


def last_error(chunks: Sequence[ProcessedChunk]) -> ProviderError:
    """The error the stream ended with: its last chunk is an `ErrorChunk`."""
    last = chunks[-1]
    assert isinstance(last, ErrorChunk), last
    assert last.error is not None
    return last.error


def tasks_left(before: set[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    """Tasks started since `before` and still running, but for the servers' own connection
    handlers (aiohttp keeps a keep-alive connection's handler task)."""
    return {
        task
        for task in other_tasks() - before
        if "RequestHandler" not in getattr(task.get_coro(), "__qualname__", "")
    }


@contextmanager
def finalized_generators() -> Iterator[list[AsyncGenerator[Any, Any]]]:
    """The async generators handed to the event loop's finalizer while inside: those nobody
    closed, which the loop would close in a task of its own, after the call (B11). For
    generators first iterated inside the block."""
    handed: list[AsyncGenerator[Any, Any]] = []
    hooks = sys.get_asyncgen_hooks()

    def finalizer(generator: AsyncGenerator[Any, Any]) -> None:
        handed.append(generator)
        if hooks.finalizer is not None:
            hooks.finalizer(generator)

    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
    try:
        yield handed
        gc.collect()  # a generator only the collector frees is finalized now
    finally:
        sys.set_asyncgen_hooks(*hooks)
