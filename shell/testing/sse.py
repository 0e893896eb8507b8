"""A local model server for tests of provider adapters and the bots that use them: aiohttp on
127.0.0.1 replaying scripted replies, to the real provider SDKs.

Each request to any path takes the next `Reply` from the queue (the last one repeats when the
queue runs dry) and records the request (`Seen`: method, path, query, headers, JSON body), so
a test can assert what the SDK sent as well as what the adapter made of the answer.

A `Reply` is either a JSON body with a status (an HTTP error, or a non-streaming answer) or a
list of SSE frames built with `sse(...)`. `cut_after=n` aborts the TCP connection after `n`
frames (a connection cut mid-stream, without the chunked terminator); `hang_after=n` sends
`n` frames and then nothing, until the server stops or, with `resume=event`, until the test
sets the event, and then the rest of the frames (a slow model, paced by the test). `hanging` is
set when a reply starts to hold, `disconnected` when a client goes away while its reply is
being served (aiohttp cancels the handler then): the client really closed the HTTP response.
`route` (optional) picks a request's reply from its JSON body (None: the queue's next), for
concurrent requests whose order a test does not fix; `wait_seen(n)` waits until `n` requests
have arrived.

    async with ModelServer() as server:
        server.replies.append(Reply(frames=[sse({"x": 1}), sse_done()]))
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aiohttp import web


def sse(data: object, event: str | None = None) -> bytes:
    """One SSE frame: an optional `event:` line and a JSON (or verbatim string) `data:` line."""
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {payload}\n\n".encode()


def sse_done() -> bytes:
    """OpenAI's end-of-stream frame."""
    return b"data: [DONE]\n\n"


@dataclass(frozen=True)
class Reply:
    """One scripted answer. `frames` → an SSE stream; otherwise `body` as JSON."""

    status: int = 200
    frames: Sequence[bytes] = ()
    body: object = None
    headers: Mapping[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    hang_after: int | None = None
    resume: asyncio.Event | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: object


class ModelServer:
    """An aiohttp server on 127.0.0.1 with a random port; use as an async context manager."""

    def __init__(
        self,
        replies: Sequence[Reply] = (),
        *,
        route: Callable[[object], Reply | None] | None = None,
    ) -> None:
        self.replies: list[Reply] = list(replies)
        self.route = route
        self.seen: list[Seen] = []
        self._arrived = asyncio.Event()
        self.hanging = asyncio.Event()
        self.disconnected = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self.url = ""

    async def __aenter__(self) -> ModelServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=0, handler_cancellation=True
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stopping.set()  # a reply still holding (a client that never closed) returns
        if self._runner is not None:
            await self._runner.cleanup()

    def open_connections(self) -> int:
        """Client connections whose socket is still open (0 once every stream was closed)."""
        runner = self._runner
        if runner is None or runner.server is None:
            return 0
        return sum(1 for handler in runner.server.connections if handler.transport is not None)

    async def _hold(self, resume: asyncio.Event | None) -> bool:
        """Wait until `resume` is set (True) or the server stops (False)."""
        self.hanging.set()
        if resume is None:  # no task of its own: tests count the tasks left running
            await self._stopping.wait()
            return False
        waits = [asyncio.ensure_future(self._stopping.wait()), asyncio.ensure_future(resume.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return not self._stopping.is_set()

    async def wait_seen(self, count: int, *, timeout: float = 30.0) -> list[Seen]:
        """Wait (at most `timeout` seconds, loop time) until `count` requests have arrived;
        returns the first `count`."""
        async with asyncio.timeout(timeout):
            while len(self.seen) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.seen[:count]

    def _next(self, body: object) -> Reply:
        routed = self.route(body) if self.route is not None else None
        if routed is not None:
            return routed
        if not self.replies:
            return Reply(status=500, body={"error": {"message": "no reply scripted"}})
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._reply(request)
        except asyncio.CancelledError:
            self.disconnected.set()  # aiohttp cancels a handler whose client went away
            raise

    async def _reply(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: object = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        self.seen.append(
            Seen(request.method, request.path, dict(request.query), dict(request.headers), body)
        )
        self._arrived.set()
        reply = self._next(body)
        if not reply.frames:
            return web.Response(
                status=reply.status,
                body=json.dumps(reply.body).encode(),
                headers={"Content-Type": "application/json", **reply.headers},
            )
        response = web.StreamResponse(
            status=reply.status,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                **reply.headers,
            },
        )
        await response.prepare(request)
        for index, frame in enumerate(reply.frames):
            if reply.cut_after is not None and index == reply.cut_after:
                assert request.transport is not None
                request.transport.abort()  # no chunked terminator: the client sees a cut
                return response
            holding = reply.hang_after is not None and index == reply.hang_after
            if holding and not await self._hold(reply.resume):
                return response  # the server stops: the stream is left unfinished
            await response.write(frame)
        if reply.cut_after is not None:
            assert request.transport is not None
            request.transport.abort()
            return response
        if reply.hang_after is not None and reply.hang_after >= len(reply.frames):
            await self._hold(None)
            return response
        await response.write_eof()
        return response
