"""A local Discord REST emulator that a real `discord.Client` can talk to.

An aiohttp server on 127.0.0.1 (random port) serving the part of Discord's REST API v10 that
cordstream and a bot use, with replies shaped the way discord.py parses them
(`Content-Type: application/json` exactly, complete message objects, Discord's error codes):

    async with DiscordEmulator() as discord_api, discord_client(discord_api) as client:
        channel = await client.fetch_channel(discord_api.channel_id)
        discord_api.inject(RateLimited(retry_after=2.0), route="send")
        await channel.send("hi")                    # discord.py waits 2 s, then retries
        assert discord_api.text() == "hi"

The one idea: the emulator is Discord's state as data, changed only by requests it accepts.
It records every request (`requests`), each channel's transcript (`messages()`) and history
(`history()`, every change stamped with the loop's time), and a refused request (a 429, an
error, an injected fault) changes nothing. Every wait is an `asyncio.sleep`, so virtual time
(looptime) applies to it as to discord.py's retries. Discord's rate limits are an option
(`RateLimits`); faults are injected first in first out (`inject`). The gateway
(`cordstream.shell.testing.gateway`) makes it a Discord a whole bot runs against; the wire
both speak is `cordstream.shell.testing.wire`. It never talks to the network beyond
127.0.0.1. What it matches of Discord, and what it leaves out, is in `docs/testing.md`.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, NamedTuple, Self

import discord
import discord.http
import yarl
from aiohttp import web
from discord.gateway import DiscordWebSocket
from multidict import CIMultiDict, CIMultiDictProxy

from cordstream.shell.testing.gateway import Gateway, GuildMember, InteractionRecord
from cordstream.shell.testing.wire import (
    _EMBED_LIMITS,
    _FIELD_NAME,
    _FIELD_VALUE,
    _MAX_FIELDS,
    API_PREFIX,
    BAD_GATEWAY,
    DISCORD_EPOCH_MS,
    INTERNAL_SERVER_ERROR,
    MAX_ALLOWED_IDS,
    MAX_CONTENT,
    MAX_EMBED_TOTAL,
    MAX_EMBEDS,
    MISSING_ACCESS,
    MISSING_PERMISSIONS,
    UNKNOWN_CHANNEL,
    Change,
    ChangeKind,
    Delay,
    Drop,
    ErrorReply,
    Fault,
    FaultRoute,
    JSONObject,
    Limit,
    Pings,
    RateLimited,
    RateLimits,
    RecordedRequest,
    RouteKind,
    SentMessage,
    _Call,
    _Channel,
    _encodable,
    _form_error,
    _Handler,
    _Injected,
    _int,
    _json_response,
    _loop_time,
    _rate_limit_reply,
    _Reply,
    _seconds,
    _Window,
    would_ping,
)

__all__ = [
    "BAD_GATEWAY",
    "INTERNAL_SERVER_ERROR",
    "MISSING_ACCESS",
    "MISSING_PERMISSIONS",
    "UNKNOWN_CHANNEL",
    "Change",
    "ChangeKind",
    "Delay",
    "DiscordEmulator",
    "Drop",
    "ErrorReply",
    "Fault",
    "FaultRoute",
    "Limit",
    "LocalBot",
    "LocalDiscord",
    "Pings",
    "RateLimited",
    "RateLimits",
    "RecordedRequest",
    "RouteKind",
    "SentMessage",
    "discord_client",
    "local_bot",
    "local_discord",
    "would_ping",
]


@dataclass(frozen=True)
class _Route:
    """Where a request goes: its handler (None: not served), its kind, the ids in its path (the
    token apart: the path's group named `token`), and whether the path is served at all (with
    another method: 405)."""

    handler: _Handler | None
    kind: RouteKind
    ids: tuple[int, ...] = ()
    path_known: bool = False
    token: str | None = None


class DiscordEmulator:
    """A local Discord REST API for one bot in one guild. Use as `async with DiscordEmulator()
    as discord_api:`; a real client reaches it through `discord_client(discord_api)`.

    `base_url` is `http://127.0.0.1:PORT/api/v10` (set once started); `token` the bot token it
    accepts (anything else gets 401, so `login()` raises `discord.LoginFailure`); `user_id` the
    bot's user id, `guild_id` its guild, `channel_id` the text channel created by default.
    `rate_limits` turns Discord's rate limits on (see the module docstring); it may be assigned
    at any time, and `rate_limit_hits` counts the 429s they answered.

    `gateway` is the local gateway (`cordstream.shell.testing.gateway.Gateway`; `gateway_url` its
    address): `heartbeat_interval` is the interval HELLO asks for (seconds), `interaction_ttl`
    how long an interaction's token is valid (15 minutes, loop time), `interaction_deadline` how
    long a bot has to acknowledge an interaction (3 s; None: no deadline). The methods a test
    drives a bot with (`add_member`, `user_says`, `slash`, `click`, `wait_connected`,
    `drop_gateway`, `expire_interaction`, `ephemeral_messages`) are the gateway's, here for
    convenience.
    """

    def __init__(
        self,
        *,
        token: str = "emulator-token",
        bot_name: str = "cordstream",
        rate_limits: RateLimits | None = None,
        heartbeat_interval: float = 41.25,
        interaction_ttl: float = 15 * 60.0,
        interaction_deadline: float | None = 3.0,
    ) -> None:
        self.token: str = token
        self.bot_name: str = bot_name
        self.rate_limits: RateLimits | None = rate_limits
        self.rate_limit_hits: Counter[str] = Counter()
        self._global_window: _Window | None = None
        self._route_windows: dict[tuple[RouteKind, int], _Window] = {}
        self.requests: list[RecordedRequest] = []
        self._last_snowflake = 0
        self.user_id: int = self._snowflake()
        self.owner_id: int = self._snowflake()
        self.guild_id: int = self._snowflake()
        self._channels: dict[int, _Channel] = {}
        self.gateway: Gateway = Gateway(
            self,
            heartbeat_interval=heartbeat_interval,
            interaction_ttl=interaction_ttl,
            interaction_deadline=interaction_deadline,
        )
        self.channel_id: int = self.add_channel("general")
        self._faults: list[_Injected] = []
        self._in_flight: set[asyncio.Task[Any]] = set()
        self._listeners: list[Callable[[SentMessage], None]] = []
        self._change_listeners: list[Callable[[Change], None]] = []
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._routes: tuple[tuple[str, re.Pattern[str], RouteKind, _Handler], ...] = (
            ("GET", re.compile(r"/users/@me"), "login", self._get_me),
            ("GET", re.compile(r"/oauth2/applications/@me"), "login", self._get_application),
            ("GET", re.compile(r"/channels/(\d+)"), "fetch", self._get_channel),
            ("GET", re.compile(r"/channels/(\d+)/messages/(\d+)"), "fetch", self._get_message),
            ("POST", re.compile(r"/channels/(\d+)/messages"), "send", self._send),
            ("PATCH", re.compile(r"/channels/(\d+)/messages/(\d+)"), "edit", self._edit),
            ("DELETE", re.compile(r"/channels/(\d+)/messages/(\d+)"), "delete", self._delete),
            ("POST", re.compile(r"/channels/(\d+)/typing"), "typing", self._typing),
            *self.gateway.routes(),
        )

    # ---- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Listen on 127.0.0.1 on a free port."""
        if self._runner is not None:
            raise RuntimeError("the emulator is already started")
        app = web.Application()
        self.gateway.install(app)  # the websocket's paths, before the catch-all
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        try:
            # A deep backlog: thousands of streams may connect at once (the kernel caps it).
            site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
            await site.start()
        except BaseException:  # it cannot listen (or was cancelled): leave nothing running
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])

    async def close(self) -> None:
        """Stop answering: gateway connections are closed (1001), pending (delayed) requests are
        cancelled, the server is shut down."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        await self.gateway.close()
        for task in list(self._in_flight):
            task.cancel()
        await runner.cleanup()

    async def idle(self) -> None:
        """Wait until no request is being answered: a delayed request (`Delay`) whose client
        gave up waiting is still answered, and accepted, when its delay is over, as Discord
        answers a request that was already sent."""
        while pending := {task for task in self._in_flight if not task.done()}:
            await asyncio.wait(pending)

    @property
    def started(self) -> bool:
        """Whether it is listening (between `start()` and `close()`)."""
        return self._runner is not None

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/api/v10`, the value for `discord.http.Route.BASE`."""
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        return f"http://127.0.0.1:{self._port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        """`ws://127.0.0.1:PORT/gateway`, what `GET /gateway/bot` answers (and the value
        `local_bot` gives `discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`)."""
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        return f"ws://127.0.0.1:{self._port}/gateway"

    # ---- channels and messages --------------------------------------------------------------

    def add_channel(self, name: str = "general") -> int:
        """Create another text channel in the guild; returns its id."""
        channel_id = self._snowflake()
        self._channels[channel_id] = _Channel(channel_id, name)
        self.gateway.channel_changed("CHANNEL_CREATE", channel_id)
        return channel_id

    def delete_channel(self, channel_id: int) -> None:
        """Delete a channel: from now on every request about it gets 404 Unknown Channel
        (10003). Its transcript stays readable."""
        self._channel(channel_id).deleted = True
        self.gateway.channel_changed("CHANNEL_DELETE", channel_id)

    def delete_message(
        self, message_id: int, *, channel_id: int | None = None
    ) -> SentMessage | None:
        """A moderator deletes a message: it leaves the channel (its transcript, and so
        `text()`; the history records a `"delete"`), and every later request about it gets 404
        Unknown Message (10008), as an edit of a deleted live message does (SPEC L9). Returns
        the transcript entry it was, or None for a message that was not in the transcript (a
        user's). KeyError if unknown."""
        channel = self._channel(self.channel_id if channel_id is None else channel_id)
        if channel.wire.pop(message_id, None) is None:
            raise KeyError(f"no message {message_id} in channel {channel.id}")
        for index, sent in enumerate(channel.transcript):
            if sent.id == message_id:
                del channel.transcript[index]
                self._record(channel, "delete", sent, _loop_time())
                return sent
        return None

    def post_user_message(
        self, content: str, *, channel_id: int | None = None, author_id: int | None = None
    ) -> int:
        """A message written by a (human) user, e.g. one for the bot to reply to; returns its id.
        It is not part of the transcript. `author_id` defaults to the application's owner."""
        channel = self._channel(self.channel_id if channel_id is None else channel_id)
        message_id = self._snowflake()
        channel.wire[message_id] = self._wire_message(
            message_id,
            channel.id,
            author=self._user(self.owner_id if author_id is None else author_id),
            content=content,
            embeds=[],
            flags=0,
            pings=Pings(),
        )
        return message_id

    def messages(self, channel_id: int | None = None) -> list[SentMessage]:
        """The transcript of a channel (default: `channel_id`): accepted messages, in order."""
        return list(self._channel(self.channel_id if channel_id is None else channel_id).transcript)

    def text(self, channel_id: int | None = None) -> str:
        """The channel's text as a user copies it: the transcript's contents joined by "\\n",
        messages without content (a bare embed) skipped — what cordstream reports as
        `accumulated_text` (SPEC F2)."""
        return "\n".join(m.content for m in self.messages(channel_id) if m.content)

    def history(self, channel_id: int | None = None) -> list[Change]:
        """Every change to what a channel (default: `channel_id`) showed, in the order the
        emulator accepted them: creates, edits (each with the content it set) and moderators'
        deletions, each stamped with the loop time (see the module docstring)."""
        return list(self._channel(self.channel_id if channel_id is None else channel_id).history)

    def on_change(self, listener: Callable[[Change], None]) -> Callable[[], None]:
        """Call `listener` with each `Change` the moment it is recorded (in any channel: a send
        or an edit accepted, before the sender gets its answer; a `delete_message`). Returns the
        function that removes it. Like `on_message`'s, a listener must neither block nor raise
        (the change would be recorded, the request answered 500)."""
        self._change_listeners.append(listener)
        return lambda: self._change_listeners.remove(listener)

    def on_message(self, listener: Callable[[SentMessage], None]) -> Callable[[], None]:
        """Call `listener` with each message the moment a channel accepts it (a send, in any
        channel; not an edit), before the sender gets its answer. Returns the function that
        removes it. A listener runs inside the emulator's request handler: it must neither block
        nor raise (the message would be in the transcript, the send answered 500)."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    async def wait_for_message(
        self,
        pick: Callable[[SentMessage], bool],
        *,
        channel_id: int | None = None,
        timeout: float = 30.0,
    ) -> SentMessage:
        """Wait (at most `timeout` seconds of loop time, then TimeoutError) until a message of a
        channel (default: `channel_id`) satisfies `pick`: the first one that does, as it was
        then. Checked now and on each change (`on_change`)."""
        found: asyncio.Future[SentMessage] = asyncio.get_running_loop().create_future()

        def check(_: object = None) -> None:
            picked = next((m for m in self.messages(channel_id) if pick(m)), None)
            if picked is not None and not found.done():
                found.set_result(picked)

        check()
        remove = self.on_change(check)
        try:
            return await asyncio.wait_for(found, timeout)
        finally:
            remove()

    async def wait_for_text(
        self,
        expected: str | Callable[[str], bool],
        *,
        channel_id: int | None = None,
        timeout: float = 30.0,
    ) -> list[SentMessage]:
        """Wait until a channel (default: `channel_id`) shows `expected`: its `text()` equals
        it, or, for a function, satisfies it. Returns the channel's messages then.

        The way a test waits for a bot's answer after `user_says` or `slash`: while a live
        answer streams, its message ends in the cursor, so the channel shows the text a test
        expects only once the answer is written to the end. Checked now and on each change
        (`on_change`); after `timeout` seconds of loop time, TimeoutError saying what the
        channel showed instead."""
        wanted = expected if callable(expected) else lambda text: text == expected
        changed = asyncio.Event()
        remove = self.on_change(lambda _: changed.set())
        try:
            async with asyncio.timeout(timeout):
                while not wanted(self.text(channel_id)):
                    changed.clear()
                    await changed.wait()
        except TimeoutError:
            what = repr(expected) if isinstance(expected, str) else "what was expected"
            shown = self.text(channel_id)
            raise TimeoutError(
                f"the channel did not show {what} within {timeout} s; it shows {shown!r}"
            ) from None
        finally:
            remove()
        return self.messages(channel_id)

    # ---- a bot's users, through the gateway (cordstream.shell.testing.gateway) ---------------

    def add_member(self, name: str, *, manage_messages: bool = False) -> GuildMember:
        """A new member of the guild, with the Moderators role (Manage Messages) or not
        (`Gateway.add_member`)."""
        return self.gateway.add_member(name, manage_messages=manage_messages)

    async def user_says(
        self, user: GuildMember | int, content: str, *, channel_id: int | None = None
    ) -> int:
        """`user` posts `content` in a channel (default: `channel_id`): the bot receives
        MESSAGE_CREATE. Returns the message's id (`Gateway.user_says`)."""
        return await self.gateway.user_says(user, content, channel_id=channel_id)

    async def slash(
        self,
        user: GuildMember | int,
        command: str,
        options: Mapping[str, object] | None = None,
        *,
        channel_id: int | None = None,
    ) -> InteractionRecord:
        """`user` runs the slash command `command` ("ask", or "group sub") with `options`: the bot
        receives INTERACTION_CREATE. Returns the interaction's record (`Gateway.slash`)."""
        return await self.gateway.slash(user, command, options, channel_id=channel_id)

    async def click(
        self,
        user: GuildMember | int,
        message_id: int,
        custom_id: str,
        *,
        values: Sequence[str] | None = None,
    ) -> InteractionRecord:
        """`user` clicks the component `custom_id` on message `message_id` (`Gateway.click`)."""
        return await self.gateway.click(user, message_id, custom_id, values=values)

    async def wait_connected(self) -> None:
        """Wait until a bot's gateway session is connected (identified or resumed) and what it
        was sent is on the wire (`Gateway.wait_connected`)."""
        await self.gateway.wait_connected()

    def drop_gateway(self, *, resumable: bool = True) -> int:
        """Drop every gateway connection (`Gateway.drop`); returns how many were dropped."""
        return self.gateway.drop(resumable=resumable)

    def expire_interaction(self, interaction: InteractionRecord | int) -> None:
        """An interaction's token expires now (`Gateway.expire`)."""
        self.gateway.expire(interaction)

    def ephemeral_messages(self, user: GuildMember | int) -> list[SentMessage]:
        """The ephemeral messages `user` was shown, oldest first (`Gateway.ephemeral_messages`)."""
        return self.gateway.ephemeral_messages(user)

    # ---- faults ------------------------------------------------------------------------------

    def inject(
        self,
        fault: Fault,
        *,
        route: FaultRoute = "any",
        times: int | None = 1,
        channel_id: int | None = None,
    ) -> None:
        """Answer the next `times` requests of kind `route` (for `channel_id` only, if given) with
        `fault`; `times=None` until `clear_faults()`. Faults queue first in first out: a request
        takes the oldest queued fault whose route is its kind or `"any"`."""
        if times is not None and times < 1:
            raise ValueError("times must be at least 1 (or None for every request)")
        self._faults.append(_Injected(route, fault, times, channel_id))

    def clear_faults(self) -> None:
        """Forget every fault not yet consumed."""
        self._faults.clear()

    @property
    def pending_faults(self) -> list[tuple[FaultRoute, Fault]]:
        """The faults still queued, oldest first (a fault with `times=n` is listed once)."""
        return [(entry.route, entry.fault) for entry in self._faults]

    def _take_fault(self, kind: RouteKind, channel_id: int | None) -> Fault | None:
        for index, entry in enumerate(self._faults):
            if entry.route not in (kind, "any"):
                continue
            if entry.channel_id is not None and entry.channel_id != channel_id:
                continue
            if entry.remaining is not None:
                entry.remaining -= 1
                if entry.remaining == 0:
                    del self._faults[index]
            return entry.fault
        return None

    # ---- request handling --------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
        try:
            return await self._answer(request)
        finally:
            if task is not None:
                self._in_flight.discard(task)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        payload: Any = None
        bad_json = False
        if body and request.content_type == "application/json":
            try:
                payload = json.loads(body)
                _encodable(payload)
            except ValueError:  # UnicodeEncodeError included
                payload, bad_json = None, True
        path = request.rel_url.path
        route = self._resolve(request.method, path)
        if route.kind == "interaction":
            channel_id = self.gateway.interaction_channel(route.token)
        elif route.kind in ("fetch", "send", "edit", "typing") and route.ids:
            channel_id = route.ids[0]
        else:
            channel_id = None
        record = RecordedRequest(
            method=request.method,
            path=path,
            kind=route.kind,
            channel_id=channel_id,
            json=payload,
            headers=CIMultiDictProxy(CIMultiDict(request.headers)),
            at=asyncio.get_running_loop().time(),
        )
        self.requests.append(record)
        # None: the connection was dropped; aiohttp quietly fails to write the placeholder.
        call = _Call(request, record, route.ids, route.token)
        response = await self._respond(call, route, bad_json)
        if response is not None:
            record.status = response.status
        return response if response is not None else web.Response(status=204)

    def _resolve(self, method: str, path: str) -> _Route:
        if not path.startswith(API_PREFIX):
            return _Route(None, "other")
        local = path[len(API_PREFIX) :]
        path_known = False
        for route_method, pattern, kind, handler in self._routes:
            match = pattern.fullmatch(local)
            if match is None:
                continue
            path_known = True
            if route_method == method:
                named = set(pattern.groupindex.values())
                ids = tuple(
                    int(match.group(index))
                    for index in range(1, pattern.groups + 1)
                    if index not in named
                )
                return _Route(handler, kind, ids, True, match.groupdict().get("token"))
        return _Route(None, "other", path_known=path_known)

    async def _respond(
        self, call: _Call, route: _Route, bad_json: bool
    ) -> web.StreamResponse | None:
        """The response, or None when the connection was dropped."""
        # An interaction's routes are authorized by the token in their path, as `GET /gateway`
        # needs none; every other route wants the bot's token.
        public = route.kind == "interaction" or call.record.path == f"{API_PREFIX}/gateway"
        if not public and call.request.headers.get("Authorization") != f"Bot {self.token}":
            return _json_response(401, {"message": "401: Unauthorized", "code": 0})
        limited, headers = self._rate_limit(call.record)
        if limited is not None:
            return limited
        response = await self._respond_within_limits(call, route, bad_json)
        if response is not None:
            response.headers.update(headers)
        return response

    async def _respond_within_limits(
        self, call: _Call, route: _Route, bad_json: bool
    ) -> web.StreamResponse | None:
        record = call.record
        fault = self._take_fault(record.kind, record.channel_id)
        record.fault = fault
        if isinstance(fault, Delay):
            await asyncio.sleep(fault.seconds)
            fault = fault.then
        if fault is not None:
            return self._faulted(call.request, fault)
        if route.handler is None:
            if route.path_known:
                return _json_response(405, {"message": "405: Method Not Allowed", "code": 0})
            return _json_response(404, {"message": "404: Not Found", "code": 0})
        try:
            if bad_json:
                raise _Reply(400, 50109, "The request body contains invalid JSON.")
            return await route.handler(call)
        except _Reply as reply:
            return _json_response(reply.status, reply.body)

    def _rate_limit(self, record: RecordedRequest) -> tuple[web.Response | None, dict[str, str]]:
        """Count `record` against the rate limits: a 429 when it is over one, else None and
        the bucket headers for its answer."""
        limits = self.rate_limits
        if limits is None:
            return None, {}
        now = asyncio.get_running_loop().time()
        # Interaction routes are not bound by the global limit (as on Discord).
        if limits.global_limit is not None and record.kind != "interaction":
            window = self._global_window = _open(self._global_window, limits.global_limit, now)
            if window.remaining <= 0:
                record.rate_limited = "global"
                self.rate_limit_hits["global"] += 1
                return _rate_limit_reply(_seconds(window.reset_at - now), {}, is_global=True), {}
            window.remaining -= 1
        limit = limits.route(record.kind)
        if limit is None or record.channel_id is None:
            return None, {}
        key = (record.kind, record.channel_id)
        window = self._route_windows[key] = _open(self._route_windows.get(key), limit, now)
        reset_after = _seconds(window.reset_at - now)
        headers = {
            "X-RateLimit-Limit": str(limit.requests),
            "X-RateLimit-Remaining": str(max(0, window.remaining - 1)),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": f"emulator-{record.kind}",
        }
        if window.remaining <= 0:
            record.rate_limited = "route"
            self.rate_limit_hits[record.kind] += 1
            return _rate_limit_reply(reset_after, headers, is_global=False), {}
        window.remaining -= 1
        return None, headers

    @staticmethod
    def _faulted(
        request: web.Request, fault: RateLimited | ErrorReply | Drop
    ) -> web.StreamResponse | None:
        match fault:
            case RateLimited(retry_after=retry_after, is_global=is_global, via=via):
                headers = {
                    "Retry-After": str(max(1, round(retry_after))),
                    "X-RateLimit-Scope": "global" if is_global else "user",
                }
                if is_global:
                    headers["X-RateLimit-Global"] = "true"
                if via:
                    headers["Via"] = "1.1 google"
                body = {
                    "message": "You are being rate limited.",
                    "retry_after": retry_after,
                    "global": is_global,
                    "code": 0,
                }
                return _json_response(429, body, headers)
            case ErrorReply(status=status, message=message, text=True):
                return web.Response(
                    status=status, body=message.encode(), headers={"Content-Type": "text/html"}
                )
            case ErrorReply(status=status, code=code, message=message):
                return _json_response(status, {"message": message, "code": code})
            case Drop():
                if request.transport is not None:
                    request.transport.close()
                return None

    # ---- routes --------------------------------------------------------------------------------

    async def _get_me(self, call: _Call) -> web.StreamResponse:
        me = self._user(self.user_id, name=self.bot_name, bot=True)
        me.update({"verified": True, "mfa_enabled": False, "flags": 0, "locale": "en-US"})
        return _json_response(200, me)

    async def _get_application(self, call: _Call) -> web.StreamResponse:
        return _json_response(
            200,
            {
                "id": str(self.user_id),
                "name": self.bot_name,
                "description": "",
                "icon": None,
                "rpc_origins": [],
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": self._user(self.owner_id),
                "verify_key": "0" * 64,
                "team": None,
                "flags": 0,
                "summary": "",
                "redirect_uris": [],
                "interactions_endpoint_url": None,
                "approximate_guild_count": 1,
            },
        )

    async def _get_channel(self, call: _Call) -> web.StreamResponse:
        return _json_response(200, self._channel_json(self._live_channel(call.ids[0])))

    def _channel_json(self, channel: _Channel) -> JSONObject:
        last = max(channel.wire, default=None)
        return {
            "id": str(channel.id),
            "type": 0,
            "guild_id": str(self.guild_id),
            "name": channel.name,
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "rate_limit_per_user": 0,
            "last_message_id": None if last is None else str(last),
            "flags": 0,
        }

    async def _get_message(self, call: _Call) -> web.StreamResponse:
        channel = self._live_channel(call.ids[0])
        return _json_response(200, self._known_message(channel, call.ids[1]))

    async def _typing(self, call: _Call) -> web.StreamResponse:
        return web.Response(status=204)

    async def _send(self, call: _Call) -> web.StreamResponse:
        channel = self._live_channel(call.ids[0])
        wire, sent = self._new_message(channel, self._body(call))
        self._accept(channel, wire, sent)
        return _json_response(200, wire)

    def _new_message(
        self, channel: _Channel, body: JSONObject, *, interaction_id: int | None = None
    ) -> tuple[JSONObject, SentMessage]:
        """The message a create's `body` makes in `channel`, checked as Discord checks it (a
        `_Reply` when it is refused), the bot its author; not stored yet (`_accept`)."""
        content = _content(body.get("content"))
        embeds = _embeds(body.get("embeds"))
        components = _components(body.get("components"))
        allowed = _allowed_mentions(body)
        if not content.strip() and not embeds:
            raise _Reply(400, 50006, "Cannot send an empty message")
        reference, replied = self._reference(channel, body.get("message_reference"))
        replied_author = None
        if replied is not None and int(replied["author"]["id"]) != self.user_id:
            replied_author = int(replied["author"]["id"])
        pings = would_ping(content, allowed, replied_author)
        flags = _int(body.get("flags", 0), "flags")
        message_id = self._snowflake()
        wire = self._wire_message(
            message_id,
            channel.id,
            author=self._user(self.user_id, name=self.bot_name, bot=True),
            content=content,
            embeds=list(embeds),
            flags=flags,
            pings=pings,
        )
        wire["components"] = list(components)
        if "nonce" in body:
            wire["nonce"] = body["nonce"]
        if reference is not None and replied is not None:
            wire["type"] = 19
            wire["message_reference"] = {
                "type": 0,
                "message_id": replied["id"],
                "channel_id": str(channel.id),
                "guild_id": str(self.guild_id),
            }
            wire["referenced_message"] = replied
        sent = SentMessage(
            id=message_id,
            channel_id=channel.id,
            content=content,
            embeds=embeds,
            message_reference=reference,
            allowed_mentions=allowed,
            pings=pings,
            flags=flags,
            at=asyncio.get_running_loop().time(),
            components=components,
            interaction_id=interaction_id,
        )
        return wire, sent

    def _accept(self, channel: _Channel, wire: JSONObject, sent: SentMessage) -> None:
        """`channel` shows a new message: in its transcript, its history, to the listeners."""
        channel.wire[sent.id] = wire
        channel.transcript.append(sent)
        self._record(channel, "create", sent, sent.at)
        for listener in list(self._listeners):
            listener(sent)

    async def _edit(self, call: _Call) -> web.StreamResponse:
        channel = self._live_channel(call.ids[0])
        wire = self._known_message(channel, call.ids[1])
        if int(wire["author"]["id"]) != self.user_id:
            raise _Reply(403, 50005, "Cannot edit a message authored by another user")
        return _json_response(200, self._apply_edit(channel, call.ids[1], self._body(call)))

    async def _delete(self, call: _Call) -> web.StreamResponse:
        """The bot deletes one of its own messages (an interaction's response included)."""
        channel = self._live_channel(call.ids[0])
        wire = self._known_message(channel, call.ids[1])
        if int(wire["author"]["id"]) != self.user_id:
            raise _Reply(403, 50013, "Missing Permissions")
        self.delete_message(call.ids[1], channel_id=channel.id)
        self.gateway.message_deleted(call.ids[1])
        return web.Response(status=204)

    def _apply_edit(self, channel: _Channel, message_id: int, body: JSONObject) -> JSONObject:
        """Edit a message of the transcript with `body` (a `_Reply` when refused); its wire."""
        wire = self._known_message(channel, message_id)
        index = next(i for i, m in enumerate(channel.transcript) if m.id == message_id)
        edited = channel.transcript[index] = self._revise(wire, channel.transcript[index], body)
        self._record(channel, "edit", edited, asyncio.get_running_loop().time())
        return wire

    def _revise(self, wire: JSONObject, old: SentMessage, body: JSONObject) -> SentMessage:
        """`old` edited with `body`, checked as Discord checks an edit (a `_Reply` when refused,
        before anything changes); `wire` is updated in place."""
        content = _content(body["content"]) if "content" in body else old.content
        embeds = _embeds(body["embeds"]) if "embeds" in body else old.embeds
        components = _components(body["components"]) if "components" in body else old.components
        allowed = _allowed_mentions(body) if "content" in body else old.allowed_mentions
        if not content.strip() and not embeds:
            raise _Reply(400, 50006, "Cannot send an empty message")
        flags = _int(body["flags"], "flags") if "flags" in body else old.flags
        pings = old.pings
        if "content" in body:
            # Discord rebuilds the mentions from the new content, with the edit's
            # allowed_mentions or, when absent, the defaults.
            replied = wire.get("referenced_message")
            replied_author = None
            if isinstance(replied, dict) and int(replied["author"]["id"]) != self.user_id:
                replied_author = int(replied["author"]["id"])
            new_pings = would_ping(content, allowed, replied_author)
            _set_mentions(wire, new_pings)
            pings = old.pings | new_pings
        wire.update(
            content=content,
            embeds=list(embeds),
            components=list(components),
            flags=flags,
            edited_timestamp=datetime.now(UTC).isoformat(),
        )
        return replace(
            old,
            content=content,
            embeds=embeds,
            components=components,
            allowed_mentions=allowed,
            pings=pings,
            flags=flags,
            edits=old.edits + 1,
        )

    # ---- helpers -------------------------------------------------------------------------------

    def _record(self, channel: _Channel, kind: ChangeKind, message: SentMessage, at: float) -> None:
        change = Change(at, kind, message.id, message.content, channel.id, message.embeds)
        channel.history.append(change)
        self.gateway.message_changed(change)
        for listener in list(self._change_listeners):
            listener(change)

    def _snowflake(self) -> int:
        now = ((int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22) | (1 << 17)
        self._last_snowflake = max(now, self._last_snowflake + 1)
        return self._last_snowflake

    def _channel(self, channel_id: int) -> _Channel:
        try:
            return self._channels[channel_id]
        except KeyError:
            raise KeyError(f"no channel {channel_id} in the emulator") from None

    def _live_channel(self, channel_id: int) -> _Channel:
        channel = self._channels.get(channel_id)
        if channel is None or channel.deleted:
            raise _Reply(404, 10003, "Unknown Channel")
        return channel

    @staticmethod
    def _known_message(channel: _Channel, message_id: int) -> JSONObject:
        wire = channel.wire.get(message_id)
        if wire is None:
            raise _Reply(404, 10008, "Unknown Message")
        return wire

    @staticmethod
    def _body(call: _Call) -> JSONObject:
        if call.request.content_type.startswith("multipart/"):
            raise _Reply(400, 0, "emulator: attachments (multipart bodies) are not implemented")
        payload = call.record.json
        if not isinstance(payload, dict):
            raise _Reply(400, 50109, "The request body contains invalid JSON.")
        return payload

    def _reference(
        self, channel: _Channel, reference: object
    ) -> tuple[JSONObject | None, JSONObject | None]:
        """The message_reference as sent and the message it resolves to (None if it does not
        resolve and the reference allows that)."""
        if reference is None:
            return None, None
        if not isinstance(reference, dict):
            raise _form_error(["message_reference"], "MODEL_TYPE_CONVERT", "Invalid reference.")
        if reference.get("type", 0) != 0:
            raise _Reply(400, 0, "emulator: only replies (reference type 0) are implemented")
        target_channel = reference.get("channel_id")
        message_id = reference.get("message_id")
        replied = None
        if message_id is not None and (target_channel is None or int(target_channel) == channel.id):
            replied = channel.wire.get(int(message_id))
        if replied is None and reference.get("fail_if_not_exists", True):
            raise _form_error(
                ["message_reference"], "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message"
            )
        if replied is None:
            return dict(reference), None
        resolved = {k: v for k, v in replied.items() if k != "referenced_message"}
        return dict(reference), resolved

    def _user(self, user_id: int, *, name: str | None = None, bot: bool = False) -> JSONObject:
        user: JSONObject = {
            "id": str(user_id),
            "username": name if name is not None else f"user{user_id % 10_000}",
            "discriminator": "0",
            "global_name": None,
            "avatar": None,
            "public_flags": 0,
        }
        if bot:
            user["bot"] = True
        return user

    def _thinking_message(self, message_id: int, channel_id: int, flags: int) -> JSONObject:
        """A deferral's "thinking" message: the bot's, empty, with `flags` (the gateway's)."""
        author = self._user(self.user_id, name=self.bot_name, bot=True)
        return self._wire_message(
            message_id, channel_id, author=author, content="", embeds=[], flags=flags, pings=Pings()
        )

    def _wire_message(
        self,
        message_id: int,
        channel_id: int,
        *,
        author: JSONObject,
        content: str,
        embeds: list[JSONObject],
        flags: int,
        pings: Pings,
    ) -> JSONObject:
        timestamp = datetime.fromtimestamp(
            ((message_id >> 22) + DISCORD_EPOCH_MS) / 1000, UTC
        ).isoformat()
        wire: JSONObject = {
            "id": str(message_id),
            "channel_id": str(channel_id),
            "type": 0,
            "author": author,
            "content": content,
            "timestamp": timestamp,
            "edited_timestamp": None,
            "tts": False,
            "attachments": [],
            "embeds": embeds,
            "components": [],
            "pinned": False,
            "flags": flags,
        }
        _set_mentions(wire, pings)
        return wire


def _open(window: _Window | None, limit: Limit, now: float) -> _Window:
    """The window that counts a request arriving `now`: the current one, or a fresh one when
    there is none, it has ended, or the limit changed."""
    if window is None or now >= window.reset_at or window.limit != limit:
        return _Window(limit, now + limit.per, limit.requests)
    return window


def _set_mentions(wire: JSONObject, pings: Pings) -> None:
    users = sorted(pings.users | ({pings.replied_user} if pings.replied_user else set()))
    wire["mention_everyone"] = pings.everyone
    wire["mentions"] = [
        {"id": str(u), "username": f"user{u % 10_000}", "discriminator": "0", "avatar": None}
        for u in users
    ]
    wire["mention_roles"] = [str(r) for r in sorted(pings.roles)]


def _content(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _form_error(["content"], "STRING_TYPE_CONVERT", "Could not interpret as string.")
    if len(value) > MAX_CONTENT:
        raise _form_error(
            ["content"], "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_CONTENT} or fewer in length."
        )
    return value


def _embeds(value: object) -> tuple[JSONObject, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise _form_error(["embeds"], "LIST_TYPE_CONVERT", "Must be a list of objects.")
    if len(value) > MAX_EMBEDS:
        raise _form_error(
            ["embeds"], "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_EMBEDS} or fewer in length."
        )
    total = 0
    for index, embed in enumerate(value):
        for path, limit in _EMBED_LIMITS:
            text = _dig(embed, path)
            total += len(text)
            if len(text) > limit:
                raise _form_error(
                    ["embeds", index, *path],
                    "BASE_TYPE_MAX_LENGTH",
                    f"Must be {limit} or fewer in length.",
                )
        fields = embed.get("fields") or []
        if len(fields) > _MAX_FIELDS:
            raise _form_error(
                ["embeds", index, "fields"],
                "BASE_TYPE_MAX_LENGTH",
                f"Must be {_MAX_FIELDS} or fewer in length.",
            )
        for number, item in enumerate(fields):
            for key, limit in (("name", _FIELD_NAME), ("value", _FIELD_VALUE)):
                text = str(item.get(key) or "")
                total += len(text)
                if len(text) > limit:
                    raise _form_error(
                        ["embeds", index, "fields", number, key],
                        "BASE_TYPE_MAX_LENGTH",
                        f"Must be {limit} or fewer in length.",
                    )
    if total > MAX_EMBED_TOTAL:
        raise _form_error(
            ["embeds"],
            "MAX_EMBED_SIZE_EXCEEDED",
            f"Embed size exceeds maximum size of {MAX_EMBED_TOTAL}",
        )
    return tuple({"type": "rich", **embed} for embed in value)


_MAX_ROWS: Final = 5
_MAX_ROW_ITEMS: Final = 5
_MAX_CUSTOM_ID: Final = 100
_LINK_STYLE: Final = 5


def _components(value: object) -> tuple[JSONObject, ...]:
    """A message's components, checked lightly: a list of objects; action rows (type 1), at most
    5, of 1 to 5 items; a button (type 2) has a `custom_id` of 1 to 100 characters, or a `url`
    for a link (style 5); `custom_id`s are unique in the message. Other component types (a
    select, the layout components) pass as sent."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise _form_error(["components"], "LIST_TYPE_CONVERT", "Must be a list of objects.")
    if all(row.get("type") == 1 for row in value) and len(value) > _MAX_ROWS:
        raise _form_error(
            ["components"], "BASE_TYPE_MAX_LENGTH", f"Must be {_MAX_ROWS} or fewer in length."
        )
    seen: set[str] = set()
    for index, row in enumerate(value):
        if row.get("type") != 1:
            continue
        items = row.get("components")
        if not isinstance(items, list) or not 1 <= len(items) <= _MAX_ROW_ITEMS:
            raise _form_error(
                ["components", index, "components"],
                "BASE_TYPE_BAD_LENGTH",
                f"Must be between 1 and {_MAX_ROW_ITEMS} in length.",
            )
        for number, item in enumerate(items):
            path: list[str | int] = ["components", index, "components", number]
            if not isinstance(item, dict):
                raise _form_error(path, "DICT_TYPE_CONVERT", "Only dictionaries allowed.")
            if item.get("type") == 2 and item.get("style") == _LINK_STYLE:
                if not isinstance(item.get("url"), str):
                    raise _form_error(
                        [*path, "url"], "BASE_TYPE_REQUIRED", "This field is required"
                    )
                continue
            custom_id = item.get("custom_id")
            if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= _MAX_CUSTOM_ID:
                raise _form_error(
                    [*path, "custom_id"],
                    "BASE_TYPE_BAD_LENGTH",
                    f"Must be between 1 and {_MAX_CUSTOM_ID} in length.",
                )
            if custom_id in seen:
                raise _form_error(
                    [*path, "custom_id"],
                    "COMPONENT_CUSTOM_ID_DUPLICATED",
                    "Component custom id cannot be duplicated",
                )
            seen.add(custom_id)
    return tuple(dict(component) for component in value)


def _dig(embed: Mapping[str, Any], path: tuple[str, ...]) -> str:
    node: Any = embed
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, str) else ""


def _allowed_mentions(body: Mapping[str, Any]) -> JSONObject | None:
    allowed = body.get("allowed_mentions")
    if allowed is None:
        return None
    if not isinstance(allowed, dict):
        raise _form_error(["allowed_mentions"], "DICT_TYPE_CONVERT", "Only dictionaries allowed.")
    parse = allowed.get("parse") or []
    for kind in ("users", "roles"):
        listed = allowed.get(kind) or []
        if kind in parse and listed:
            raise _form_error(
                ["allowed_mentions"],
                "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
                f'parse:["{kind}"] and {kind}: [ids...] are mutually exclusive.',
            )
        if len(listed) > MAX_ALLOWED_IDS:
            raise _form_error(
                ["allowed_mentions", kind],
                "BASE_TYPE_MAX_LENGTH",
                f"Must be {MAX_ALLOWED_IDS} or fewer in length.",
            )
    return dict(allowed)


@asynccontextmanager
async def discord_client(emulator: DiscordEmulator) -> AsyncIterator[discord.Client]:
    """A logged-in `discord.Client` (no gateway connection) talking to `emulator`.

    Points `discord.http.Route.BASE` at the emulator for the duration (a process-wide setting:
    one emulator-backed client at a time) and restores the previous value on exit, after
    closing the client.
    """
    async with discord_client_at(emulator.base_url, emulator.token) as client:
        yield client


@asynccontextmanager
async def discord_client_at(base_url: str, token: str) -> AsyncIterator[discord.Client]:
    """`discord_client` for an emulator known by its `base_url` and `token` only: one that
    another process runs, as each worker of a bot of several processes reaches one Discord.

        async with discord_client_at(sys.argv[1], sys.argv[2]) as client:
            channel = await client.fetch_channel(int(sys.argv[3]))
    """
    previous = discord.http.Route.BASE
    discord.http.Route.BASE = base_url
    client = discord.Client(intents=discord.Intents.none())
    try:
        await client.login(token)
        yield client
    finally:
        try:
            await client.close()
        finally:
            discord.http.Route.BASE = previous


class LocalDiscord(NamedTuple):
    """What `local_discord` yields: the emulator, the client logged into it, and the
    emulator's channel (`channel_id`) as the client sees it."""

    api: DiscordEmulator
    client: discord.Client
    channel: discord.TextChannel

    async def add_channel(self, name: str) -> discord.TextChannel:
        """A new text channel in the emulator, fetched through the client."""
        return await _text_channel(self.client, self.api.add_channel(name))


@asynccontextmanager
async def local_discord(emulator: DiscordEmulator | None = None) -> AsyncIterator[LocalDiscord]:
    """A Discord of one's own: `emulator` (a new `DiscordEmulator()` by default), started
    unless it is already, a client logged into it (`discord_client`) and its channel fetched.

        async with local_discord() as (api, client, channel):
            await channel.send("hi")
            assert api.text() == "hi"

    On exit the client is closed, and the emulator too when it was started here."""
    api = DiscordEmulator() if emulator is None else emulator
    async with AsyncExitStack() as stack:
        if not api.started:
            await stack.enter_async_context(api)
        client = await stack.enter_async_context(discord_client(api))
        yield LocalDiscord(api, client, await _text_channel(client, api.channel_id))


async def _text_channel(client: discord.Client, channel_id: int) -> discord.TextChannel:
    channel = await client.fetch_channel(channel_id)
    if not isinstance(channel, discord.TextChannel):  # the emulator serves text channels only
        raise TypeError(f"channel {channel_id} is a {type(channel).__name__}")
    return channel


@asynccontextmanager
async def local_bot(
    bot: discord.Client, emulator: DiscordEmulator | None = None, *, timeout: float = 30.0
) -> AsyncIterator[DiscordEmulator]:
    """Run `bot` against `emulator` (a new `DiscordEmulator()` by default, started unless it
    is): discord.py's REST base and default gateway point at it for the duration (process-wide:
    every bot in the process talks to this emulator then), the bot logs in, `bot.connect()` runs
    in a task, and the block begins once the bot is ready (`on_ready`, within `timeout` seconds
    of loop time, else TimeoutError; a bot that fails to log in or connect raises its error).
    On exit the bot is closed and its task awaited, then the emulator is closed if it was
    started here. Several bots may run on one emulator, each in its own `local_bot`.

        async with local_bot(bot) as api:
            await api.user_says(api.add_member("alice"), "hello")

    discord.py waits `guild_ready_timeout` (2 s by default) after the last GUILD_CREATE before
    `on_ready`: instant on looptime's clock, or pass `guild_ready_timeout=` to the bot."""
    api = DiscordEmulator() if emulator is None else emulator
    async with AsyncExitStack() as stack:
        if not api.started:
            await stack.enter_async_context(api)
        previous_base, previous_gateway = discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
        discord.http.Route.BASE = api.base_url
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(api.gateway_url)
        running: asyncio.Task[None] | None = None
        try:
            await bot.login(api.token)
            running = asyncio.create_task(bot.connect(), name="cordstream local_bot")
            await _until_ready(bot, running, timeout)
            yield api
        finally:
            try:
                await bot.close()
                if running is not None:
                    await running
            finally:
                discord.http.Route.BASE = previous_base
                DiscordWebSocket.DEFAULT_GATEWAY = previous_gateway


class LocalBot:
    """Bots running on the local Discord until `aclose()`: `await local_bot(bot)` enters
    `local_bot(bot, emulator, timeout=...)` and returns its emulator; `aclose()` closes every
    bot it started, the last first (and the emulators they started). What the pytest plugin's
    `local_bot` fixture gives a test (`cordstream.shell.testing.pytest_plugin`)."""

    def __init__(self) -> None:
        self._running = AsyncExitStack()

    async def __call__(
        self, bot: discord.Client, emulator: DiscordEmulator | None = None, *, timeout: float = 30.0
    ) -> DiscordEmulator:
        return await self._running.enter_async_context(local_bot(bot, emulator, timeout=timeout))

    async def aclose(self) -> None:
        await self._running.aclose()


async def _until_ready(bot: discord.Client, running: asyncio.Task[None], timeout: float) -> None:
    waiting = asyncio.create_task(bot.wait_until_ready())
    try:
        done, _ = await asyncio.wait(
            {waiting, running}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        if not waiting.done():
            waiting.cancel()
            with suppress(asyncio.CancelledError):
                await waiting
    if waiting in done:
        return
    if running in done:
        running.result()  # its error, if it failed
        raise RuntimeError("the bot stopped before it was ready")
    raise TimeoutError(f"the bot was not ready within {timeout} s")
