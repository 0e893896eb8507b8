"""The local Discord's wire: what the emulator and its gateway both speak (the test kit).

The JSON shapes, the routes' kinds, the faults a test injects, the rate limits, the record of
each request and of each message sent, and the helpers that turn a refusal into Discord's
error body. `emulator.py` (the REST side) and `gateway.py` (the websocket side and
interactions) both build on this module, and neither on the other's internals through an
import cycle: the gateway reaches the emulator through the `Emulator` protocol below.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, cast

from aiohttp import web

JSONObject = dict[str, Any]

RouteKind = Literal[
    "login",
    "fetch",
    "send",
    "edit",
    "delete",
    "typing",
    "gateway",
    "interaction",
    "commands",
    "other",
]
"""What a request was for: `login` (users/@me, applications/@me), `fetch` (a channel or a
message), `send`, `edit`, `delete` (the bot deleting one of its messages), `typing`, `gateway`
(`/gateway`, `/gateway/bot`), `interaction` (an
interaction's callback and its webhook: the original response and follow-ups), `commands`
(application commands), or `other` (a route the emulator does not serve)."""

FaultRoute = RouteKind | Literal["any"]
"""Where `inject` aims a fault: requests of one `RouteKind`, or `"any"` request."""

ChangeKind = Literal["create", "edit", "delete"]
"""What a `Change` did to a channel: a message created, edited, or deleted by a moderator."""

API_PREFIX: Final = "/api/v10"
DISCORD_EPOCH_MS: Final = 1_420_070_400_000
MAX_CONTENT: Final = 2000
MAX_EMBEDS: Final = 10
MAX_EMBED_TOTAL: Final = 6000
MAX_ALLOWED_IDS: Final = 100
# (path inside an embed, limit) for the text fields Discord bounds individually.
_EMBED_LIMITS: Final[tuple[tuple[tuple[str, ...], int], ...]] = (
    (("title",), 256),
    (("description",), 4096),
    (("footer", "text"), 2048),
    (("author", "name"), 256),
)
_MAX_FIELDS: Final = 25
_FIELD_NAME: Final = 256
_FIELD_VALUE: Final = 1024

_USER_MENTION: Final = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION: Final = re.compile(r"<@&(\d+)>")


# --------------------------------------------------------------------------------------------
# Faults


@dataclass(frozen=True)
class RateLimited:
    """A 429. With `via` (the default) the reply carries a `Via` header and a JSON body with
    `retry_after`, so discord.py sleeps `retry_after` seconds and retries; without it, the reply
    looks like a Cloudflare ban and discord.py raises `discord.HTTPException` (status 429) at
    once. `is_global` marks a global limit (discord.py holds every request during the wait)."""

    retry_after: float = 1.0
    is_global: bool = False
    via: bool = True


@dataclass(frozen=True)
class ErrorReply:
    """An error status with Discord's JSON error body `{"message", "code"}`; with `text` the
    body is `message` as `text/html` instead (as Cloudflare answers a 502)."""

    status: int
    code: int = 0
    message: str = ""
    text: bool = False


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering. discord.py then raises
    `aiohttp.ServerDisconnectedError` from a send or an edit (it retries only connection resets
    with the Windows/macOS errnos); aiohttp itself silently retries an idempotent request (a
    GET) once when the dropped connection was a reused keep-alive one."""


@dataclass(frozen=True)
class Delay:
    """A slow reply: wait `seconds` (an `asyncio.sleep`), then answer normally (the request is
    accepted then) or with the fault `then`."""

    seconds: float
    then: RateLimited | ErrorReply | Drop | None = None


Fault = RateLimited | ErrorReply | Drop | Delay

MISSING_ACCESS: Final = ErrorReply(403, 50001, "Missing Access")
MISSING_PERMISSIONS: Final = ErrorReply(403, 50013, "Missing Permissions")
UNKNOWN_CHANNEL: Final = ErrorReply(404, 10003, "Unknown Channel")
INTERNAL_SERVER_ERROR: Final = ErrorReply(500, 0, "500: Internal Server Error")
BAD_GATEWAY: Final = ErrorReply(
    502, 0, "<html><head><title>502 Bad Gateway</title></head></html>", text=True
)


# --------------------------------------------------------------------------------------------
# Rate limits


@dataclass(frozen=True)
class Limit:
    """At most `requests` requests in a window of `per` seconds. A window opens with the first
    request after the previous one ended, as a Discord bucket does."""

    requests: int
    per: float

    def __post_init__(self) -> None:
        if isinstance(self.requests, bool) or not isinstance(self.requests, int):
            raise TypeError("Limit.requests must be an int")
        if self.requests < 1:
            raise ValueError("Limit.requests must be at least 1")
        if not math.isfinite(self.per) or self.per <= 0:
            raise ValueError("Limit.per must be a positive number of seconds")


@dataclass(frozen=True)
class RateLimits:
    """Discord's rate limits (see the module docstring); None turns one off. The defaults
    follow Discord: about 5 message creates, 5 edits and 5 typing requests per 5 s per channel,
    and 50 requests per second for the whole bot."""

    send: Limit | None = Limit(5, 5.0)
    edit: Limit | None = Limit(5, 5.0)
    typing: Limit | None = Limit(5, 5.0)
    global_limit: Limit | None = Limit(50, 1.0)

    def route(self, kind: RouteKind) -> Limit | None:
        """The bucket of a route kind; None for a route without one."""
        match kind:
            case "send":
                return self.send
            case "edit":
                return self.edit
            case "typing":
                return self.typing
        return None


@dataclass
class _Window:
    limit: Limit
    reset_at: float
    remaining: int


def _seconds(value: float) -> float:
    """Seconds rounded up to the millisecond, as Discord writes them: a client that waits this
    long never comes back before the window ended."""
    return math.ceil(round(value * 1000, 6)) / 1000


def _rate_limit_reply(
    retry_after: float, headers: Mapping[str, str], *, is_global: bool
) -> web.Response:
    body = {
        "message": "You are being rate limited.",
        "retry_after": retry_after,
        "global": is_global,
        "code": 0,
    }
    all_headers = {
        **headers,
        "Retry-After": str(max(1, math.ceil(retry_after))),
        "X-RateLimit-Scope": "global" if is_global else "user",
        "Via": "1.1 google",
    }
    if is_global:
        all_headers["X-RateLimit-Global"] = "true"
    return _json_response(429, body, all_headers)


# --------------------------------------------------------------------------------------------
# Records


@dataclass
class RecordedRequest:
    """One request as the emulator received it. `status` is the status answered (None while the
    request is pending, and for a dropped connection); `fault` the injected fault it consumed;
    `rate_limited` whether the emulator's rate limits refused it (a 429), and which one."""

    method: str
    path: str
    kind: RouteKind
    channel_id: int | None
    json: Any
    headers: Mapping[str, str]
    at: float
    status: int | None = None
    fault: Fault | None = None
    rate_limited: Literal["global", "route"] | None = None


@dataclass(frozen=True)
class Pings:
    """Who a message notifies under Discord's rules. `everyone`: an `@everyone`/`@here` that
    pings; `users`/`roles`: ids from `<@id>`, `<@!id>`, `<@&id>` that ping; `replied_user`: the
    author of the replied-to message when the reply pings them."""

    everyone: bool = False
    users: frozenset[int] = frozenset()
    roles: frozenset[int] = frozenset()
    replied_user: int | None = None

    @property
    def anyone(self) -> bool:
        """Whether the message pings anybody at all."""
        return (
            self.everyone or bool(self.users) or bool(self.roles) or self.replied_user is not None
        )

    def __or__(self, other: Pings) -> Pings:
        return Pings(
            everyone=self.everyone or other.everyone,
            users=self.users | other.users,
            roles=self.roles | other.roles,
            replied_user=self.replied_user if self.replied_user is not None else other.replied_user,
        )


@dataclass(frozen=True)
class SentMessage:
    """A message the emulator accepted, as sent: `content` (`""` for none), `embeds`,
    `message_reference` and `allowed_mentions` (None when absent from the request), `pings`
    (accumulated over the message's edits: a ping cannot be taken back), `edits` (how many
    edits were accepted; content, embeds, components and allowed_mentions are the latest), `at`
    (loop time when it was accepted), `components` (the message's components, as sent) and
    `interaction_id` (the interaction whose response or follow-up it is, else None)."""

    id: int
    channel_id: int
    content: str
    embeds: tuple[JSONObject, ...]
    message_reference: JSONObject | None
    allowed_mentions: JSONObject | None
    pings: Pings
    flags: int
    at: float
    edits: int = 0
    components: tuple[JSONObject, ...] = ()
    interaction_id: int | None = None

    @property
    def custom_ids(self) -> tuple[str, ...]:
        """The custom ids of the message's components (its buttons, menus), in order."""
        return tuple(
            str(component["custom_id"])
            for row in self.components
            for component in cast("list[JSONObject]", row.get("components") or ())
            if "custom_id" in component
        )


@dataclass(frozen=True)
class Change:
    """One change to what a channel shows, stamped `at` (the event loop's time) when the
    emulator accepted it: message `message_id` created (`kind="create"`), edited (`"edit"`) or
    deleted by a moderator (`"delete"`, `delete_message`). `content` and `embeds` are the
    message's after the change (`""` for a message without content), for a delete what it
    showed until then. `channel_id` is the channel it happened in."""

    at: float
    kind: ChangeKind
    message_id: int
    content: str
    channel_id: int
    embeds: tuple[JSONObject, ...] = ()


def would_ping(
    content: str,
    allowed_mentions: Mapping[str, Any] | None,
    replied_author: int | None = None,
) -> Pings:
    """The mentions in `content` that notify under `allowed_mentions` (Discord's defaults when
    None: parse everything and ping the replied-to author). Embeds never ping."""
    if allowed_mentions is None:
        parse = {"everyone", "users", "roles"}
        users: set[int] = set()
        roles: set[int] = set()
        replied = True
    else:
        parse = {str(kind) for kind in allowed_mentions.get("parse") or ()}
        users = {int(x) for x in allowed_mentions.get("users") or ()}
        roles = {int(x) for x in allowed_mentions.get("roles") or ()}
        replied = bool(allowed_mentions.get("replied_user", False))
    everyone = "everyone" in parse and ("@everyone" in content or "@here" in content)
    user_ids = {int(x) for x in _USER_MENTION.findall(content)}
    role_ids = {int(x) for x in _ROLE_MENTION.findall(content)}
    return Pings(
        everyone=everyone,
        users=frozenset(u for u in user_ids if "users" in parse or u in users),
        roles=frozenset(r for r in role_ids if "roles" in parse or r in roles),
        replied_user=replied_author if replied else None,
    )


# --------------------------------------------------------------------------------------------
# Server state


@dataclass
class _Channel:
    id: int
    name: str
    deleted: bool = False
    wire: dict[int, JSONObject] = field(default_factory=dict)  # every message, by id
    transcript: list[SentMessage] = field(default_factory=list)  # accepted through the API
    history: list[Change] = field(default_factory=list)  # every change to the transcript


@dataclass
class _Injected:
    route: FaultRoute
    fault: Fault
    remaining: int | None
    channel_id: int | None


class _Reply(Exception):
    """Raised inside a handler to answer with a Discord error body."""

    def __init__(self, status: int, code: int, message: str, errors: JSONObject | None = None):
        super().__init__(message)
        self.status = status
        self.body: JSONObject = {"message": message, "code": code}
        if errors is not None:
            self.body["errors"] = errors


def _form_error(path: Sequence[str | int], code: str, message: str) -> _Reply:
    """Discord's 50035 Invalid Form Body with one error at `path`."""
    errors: JSONObject = {"_errors": [{"code": code, "message": message}]}
    for key in reversed(path):
        errors = {str(key): errors}
    return _Reply(400, 50035, "Invalid Form Body", errors)


def _encodable(payload: object) -> None:
    """Raise UnicodeEncodeError when `payload` holds a lone surrogate (JSON can escape one,
    `"\\ud800"`, but it has no UTF-8 form): such a body is answered 400 like malformed JSON,
    before anything is recorded, so a reply is never built from text it cannot encode."""
    json.dumps(payload, ensure_ascii=False).encode()


def _json_response(
    status: int, body: object, headers: Mapping[str, str] | None = None
) -> web.Response:
    # `Content-Type` set by hand: aiohttp's `json_response` appends `; charset=utf-8`, which
    # discord.py does not recognise as JSON.
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(
        status=status,
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
        headers=all_headers,
    )


_Handler = Callable[["_Call"], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class _Call:
    request: web.Request
    record: RecordedRequest
    ids: tuple[int, ...]
    token: str | None = None  # an interaction's token, for the routes that carry one


def _loop_time() -> float:
    """The running event loop's time; `time.monotonic()` (the default loop's clock) outside
    one."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


def _int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _form_error([name], "NUMBER_TYPE_COERCE", f"Value {value!r} is not int.")
    return value


class Emulator(Protocol):
    """What the gateway (`gateway.py`) uses of the emulator (`emulator.DiscordEmulator`): its
    ids, its channels and messages, and the helpers that build Discord's JSON."""

    token: str
    bot_name: str
    user_id: int
    owner_id: int
    guild_id: int
    channel_id: int
    _channels: dict[int, _Channel]

    @property
    def gateway_url(self) -> str: ...
    def _snowflake(self) -> int: ...
    def _channel(self, channel_id: int) -> _Channel: ...
    def _live_channel(self, channel_id: int) -> _Channel: ...
    def _channel_json(self, channel: _Channel) -> JSONObject: ...
    def _user(self, user_id: int, *, name: str | None = None, bot: bool = False) -> JSONObject: ...
    @staticmethod
    def _body(call: _Call) -> JSONObject: ...
    def _accept(self, channel: _Channel, wire: JSONObject, sent: SentMessage) -> None: ...
    def _apply_edit(self, channel: _Channel, message_id: int, body: JSONObject) -> JSONObject: ...
    def _revise(self, wire: JSONObject, old: SentMessage, body: JSONObject) -> SentMessage: ...
    def _new_message(
        self, channel: _Channel, body: JSONObject, *, interaction_id: int | None = None
    ) -> tuple[JSONObject, SentMessage]: ...
    def _thinking_message(self, message_id: int, channel_id: int, flags: int) -> JSONObject: ...
    def delete_message(
        self, message_id: int, *, channel_id: int | None = None
    ) -> SentMessage | None: ...
    def post_user_message(
        self, content: str, *, channel_id: int | None = None, author_id: int | None = None
    ) -> int: ...
