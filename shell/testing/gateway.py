"""A local Discord gateway for `DiscordEmulator`: a real `discord.Client` or `commands.Bot`
connects to it and receives what Discord would send, so a test drives a whole bot through real
events.

    bot = commands.Bot(command_prefix="!", intents=discord.Intents.default())
    ...  # the bot's commands, its views, its listeners
    async with local_bot(bot) as api:
        alice = api.add_member("alice")
        asked = await api.slash(alice, "ask", {"question": "why?"})
        await asked.wait_until(lambda i: i.state == "responded" and not i.thinking)
        assert asked.original is not None and asked.original.content == "because"

The one idea: a test plays Discord's side of the websocket. `Gateway` speaks gateway v10
(HELLO, IDENTIFY/READY, GUILD_CREATE, heartbeats, RESUME with replay, zlib-stream or
zstd-stream), turns what a test does (`user_says`, `slash`, `click`) into the dispatches a bot
would receive, and serves the interaction routes (the callback, the original response,
follow-ups, command sync) with Discord's deadlines and token lifetime, recording each
interaction as an `InteractionRecord` a test waits on. It reaches the emulator's state through
the `Emulator` protocol (`cordstream.shell.testing.wire`), so the two modules form no import
cycle; `local_bot` (in `emulator.py`) wires a bot to both. Everything runs on the event loop's
clock, so looptime applies. What it matches of Discord, and what it leaves out, is in
`docs/testing.md`.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import json
import re
import secrets
import zlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeVar

import discord
import discord.http
from aiohttp import WSMessage, WSMsgType, web

from cordstream.shell.testing.wire import (
    Change,
    Emulator,
    JSONObject,
    Pings,
    RouteKind,
    SentMessage,
    _Call,
    _Channel,
    _form_error,
    _Handler,
    _int,
    _json_response,
    _loop_time,
    _Reply,
    would_ping,
)

__all__ = [
    "EPHEMERAL",
    "LOADING",
    "Gateway",
    "GatewayFrame",
    "GuildMember",
    "InteractionKind",
    "InteractionRecord",
    "InteractionState",
]

# Opcodes
_DISPATCH: Final = 0
_HEARTBEAT: Final = 1
_IDENTIFY: Final = 2
_PRESENCE_UPDATE: Final = 3
_VOICE_STATE_UPDATE: Final = 4
_RESUME: Final = 6
_REQUEST_GUILD_MEMBERS: Final = 8
_INVALID_SESSION: Final = 9
_HELLO: Final = 10
_HEARTBEAT_ACK: Final = 11

# Intents
_GUILDS: Final = 1 << 0
_GUILD_MEMBERS: Final = 1 << 1
_GUILD_PRESENCES: Final = 1 << 8
_GUILD_MESSAGES: Final = 1 << 9
_MESSAGE_CONTENT: Final = 1 << 15

# Message flags
_SUPPRESS_EMBEDS: Final = 1 << 2
EPHEMERAL: Final = 1 << 6
"""The flag of an ephemeral message (64)."""
LOADING: Final = 1 << 7
"""The flag of a deferred interaction's "thinking" message (128)."""

_API_VERSION: Final = "10"
_ATTACHMENT_LIMIT: Final = 10 * 1024 * 1024
_MAX_COMMANDS: Final = 100
_COMMAND_NAME: Final = re.compile(r"^[-_'\w]{1,32}$")
_MAX_DESCRIPTION: Final = 100
_SELECTS: Final = frozenset({3, 5, 6, 7, 8})
_LINK_STYLE: Final = 5
_TRUE: Final = frozenset({"1", "true", "True"})

InteractionKind = Literal["command", "component"]
"""What an interaction is: a slash command (`slash`) or a component click (`click`)."""

InteractionState = Literal["pending", "deferred", "responded"]
"""Where an interaction stands: not acknowledged yet (`pending`), acknowledged without a message
yet (`deferred`: type 5, "thinking", or type 6), or answered with a message (`responded`)."""


@dataclass(frozen=True)
class GuildMember:
    """A member of the emulator's guild: `manage_messages` when they hold the Moderators role
    (Manage Messages in every channel); `owner` for the guild's owner (every permission, the
    application's owner `owner_id`); `bot` for the bot itself."""

    id: int
    name: str
    manage_messages: bool = False
    owner: bool = False
    bot: bool = False


@dataclass(frozen=True)
class GatewayFrame:
    """One payload on a gateway connection: `at` (loop time), `connection` (1 for the first
    connection, counting up), `sent` (True: the gateway sent it, False: the client did) and
    `payload` (decoded)."""

    at: float
    connection: int
    sent: bool
    payload: JSONObject


class InteractionRecord:
    """An interaction as the emulator saw it, updated as the bot answers it.

    `id`, `token`, `kind` ("command" or "component"), `user_id`, `channel_id`, `created_at`
    and `expires_at` (loop time); `command` and `options` for a slash command, `custom_id`,
    `values` and `message_id` (the message clicked on) for a component. `responses` lists the
    callback types accepted (at most one); `state` is "pending", "deferred" or "responded";
    `thinking` is True while a deferral (type 5) shows its "thinking" message. `original` is the
    original response (its latest content) and `followups` the follow-up messages (a follow-up
    folded into a deferral is the original, not a follow-up); `ephemeral` those of them only
    the user sees. `wait_until(predicate)` waits for a state of the record.
    """

    def __init__(
        self,
        gateway: Gateway,
        *,
        id: int,
        token: str,
        kind: InteractionKind,
        user_id: int,
        channel_id: int,
        created_at: float,
        expires_at: float,
        deadline: float | None,
        command: str | None = None,
        options: Mapping[str, object] | None = None,
        custom_id: str | None = None,
        values: Sequence[str] = (),
        message_id: int | None = None,
    ) -> None:
        self._gateway = gateway
        self.id: int = id
        self.token: str = token
        self.kind: InteractionKind = kind
        self.user_id: int = user_id
        self.channel_id: int = channel_id
        self.created_at: float = created_at
        self.expires_at: float = expires_at
        self.deadline: float | None = deadline
        self.command: str | None = command
        self.options: Mapping[str, object] = dict(options or {})
        self.custom_id: str | None = custom_id
        self.values: tuple[str, ...] = tuple(values)
        self.message_id: int | None = message_id
        self.responses: list[int] = []
        self.state: InteractionState = "pending"
        self.thinking: bool = False
        self.original_id: int | None = None
        self.followup_ids: list[int] = []
        self._expired = False
        self._waiters: list[tuple[Callable[[InteractionRecord], bool], asyncio.Future[None]]] = []

    def __repr__(self) -> str:
        what = self.command if self.kind == "command" else self.custom_id
        return f"<InteractionRecord {self.id} {self.kind} {what!r} {self.state}>"

    @property
    def expired(self) -> bool:
        """Whether the token expired (`expires_at` passed, or `expire()`)."""
        return self._expired or _now() >= self.expires_at

    @property
    def timed_out(self) -> bool:
        """Whether the bot missed the deadline to acknowledge it (Discord then shows "The
        application did not respond" and refuses a late callback)."""
        return self.state == "pending" and self.deadline is not None and _now() >= self.deadline

    @property
    def original(self) -> SentMessage | None:
        """The original response as it is now; None before there is one (or once a moderator
        deleted it)."""
        if self.original_id is None:
            return None
        return self._gateway.message(self.channel_id, self.original_id)

    @property
    def followups(self) -> list[SentMessage]:
        """The follow-up messages as they are now, oldest first."""
        found = (self._gateway.message(self.channel_id, i) for i in self.followup_ids)
        return [message for message in found if message is not None]

    @property
    def ephemeral(self) -> list[SentMessage]:
        """The original response and follow-ups only the user sees, oldest first."""
        original = self.original
        messages = ([original] if original is not None else []) + self.followups
        return [message for message in messages if message.flags & EPHEMERAL]

    def expire(self) -> None:
        """The token expires now: every callback and webhook route answers 401 50027."""
        self._expired = True
        self.changed()

    async def wait_until(
        self,
        predicate: Callable[[InteractionRecord], bool] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        """Wait (at most `timeout` seconds of loop time) until `predicate(record)` holds; by
        default until the bot acknowledged the interaction. It is checked now and after each
        change to the record or to one of its messages."""
        check = predicate if predicate is not None else _acknowledged
        if check(self):
            return
        waiter = asyncio.get_running_loop().create_future()
        await _wait_listed(self._waiters, (check, waiter), waiter, timeout)

    def changed(self) -> None:
        """Wake the waiters whose predicate now holds (the gateway calls it on each change)."""
        for check, waiter in list(self._waiters):
            if not waiter.done() and check(self):
                waiter.set_result(None)


def _acknowledged(record: InteractionRecord) -> bool:
    return record.state != "pending"


_Entry = TypeVar("_Entry")


async def _wait_listed(
    waiters: list[_Entry], entry: _Entry, waiter: asyncio.Future[None], timeout: float
) -> None:
    """Wait (at most `timeout` seconds of loop time) for `waiter`, listed in `waiters` as
    `entry` (holding it) meanwhile, for whoever sets it."""
    waiters.append(entry)
    try:
        async with asyncio.timeout(timeout):
            await waiter
    finally:
        if entry in waiters:
            waiters.remove(entry)


@dataclass
class _Ephemeral:
    user_id: int
    channel_id: int
    wire: JSONObject
    sent: SentMessage


@dataclass(frozen=True)
class _Close:
    code: int
    message: str = ""


@dataclass(eq=False)
class _Session:
    id: str
    intents: int
    seq: int = 0
    log: list[JSONObject] = field(default_factory=list)
    connection: _Connection | None = None


@dataclass(eq=False)
class _Connection:
    number: int
    ws: web.WebSocketResponse
    transport: asyncio.Transport | None
    encode: Callable[[bytes], bytes] | None
    queue: asyncio.Queue[JSONObject | _Close] = field(default_factory=asyncio.Queue)
    session: _Session | None = None
    closing: bool = False
    dropped: bool = False
    heartbeat_waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def send(self, payload: JSONObject) -> None:
        if not self.closing:
            self.queue.put_nowait(payload)

    def close(self, code: int, message: str = "") -> None:
        if not self.closing:
            self.closing = True
            self.queue.put_nowait(_Close(code, message))


class Gateway:
    """The emulator's gateway and its guild's members; one per `DiscordEmulator` (its
    `gateway`). See the module docstring for what it does.

    Records: `frames` (every payload, both ways, as `GatewayFrame`s; `heartbeats` the clients'
    heartbeats), `urls` (the path and query of each connection, in order), `interactions`
    (every `InteractionRecord`, oldest first), `members`. `connected` counts the sessions with a
    live connection. A test waits with `wait_connected()`, `wait_frames(predicate, count)`,
    `flush()` (every queued payload written) and `InteractionRecord.wait_until(...)`."""

    def __init__(
        self,
        emulator: Emulator,
        *,
        heartbeat_interval: float,
        interaction_ttl: float,
        interaction_deadline: float | None,
    ) -> None:
        if heartbeat_interval <= 0 or interaction_ttl <= 0:
            raise ValueError("heartbeat_interval and interaction_ttl must be positive")
        self._emulator = emulator
        self.heartbeat_interval: float = heartbeat_interval
        self.interaction_ttl: float = interaction_ttl
        self.interaction_deadline: float | None = interaction_deadline
        self.frames: list[GatewayFrame] = []
        self.urls: list[str] = []
        self._frame_waiters: list[
            tuple[Callable[[GatewayFrame], bool], int, asyncio.Future[None]]
        ] = []
        self.interactions: list[InteractionRecord] = []
        self._by_id: dict[int, InteractionRecord] = {}
        self._by_token: dict[str, InteractionRecord] = {}
        self._by_message: dict[int, InteractionRecord] = {}
        self._ephemeral: dict[int, _Ephemeral] = {}
        self._sessions: dict[str, _Session] = {}
        self._connections: list[_Connection] = []
        self._handlers: set[asyncio.Future[None]] = set()
        self._connection_count = 0
        self._closing = False
        self._attached: list[asyncio.Future[None]] = []
        self._commands: dict[int | None, list[JSONObject]] = {None: [], emulator.guild_id: []}
        self._joined = datetime.now(UTC).isoformat()
        self.bot_role_id: int = emulator._snowflake()
        self.moderator_role_id: int = emulator._snowflake()
        self._members: dict[int, GuildMember] = {}
        self._add(GuildMember(emulator.user_id, emulator.bot_name, bot=True))
        self._add(GuildMember(emulator.owner_id, "owner", owner=True))

    # ---- members -------------------------------------------------------------------------------

    @property
    def members(self) -> list[GuildMember]:
        """The guild's members: the bot, the owner, then those `add_member` added."""
        return list(self._members.values())

    def add_member(self, name: str, *, manage_messages: bool = False) -> GuildMember:
        """A new member (a human user named `name`); with `manage_messages` they hold the
        Moderators role. A connected bot with the GUILD_MEMBERS intent gets GUILD_MEMBER_ADD."""
        member = GuildMember(self._emulator._snowflake(), name, manage_messages=manage_messages)
        self._add(member)
        guild = str(self._emulator.guild_id)
        self._dispatch(
            "GUILD_MEMBER_ADD",
            lambda s: (
                {**self._member_json(member), "guild_id": guild}
                if s.intents & _GUILD_MEMBERS
                else None
            ),
        )
        return member

    def permissions(self, user: GuildMember | int) -> discord.Permissions:
        """A member's permissions in every channel (there are no overwrites)."""
        member = self._member(user)
        if member.owner:
            return discord.Permissions.all()
        value = _EVERYONE.value
        if member.bot:
            value |= _BOT.value
        if member.manage_messages:
            value |= _MODERATOR.value
        if value & discord.Permissions(administrator=True).value:
            return discord.Permissions.all()
        return discord.Permissions(value)

    def _add(self, member: GuildMember) -> None:
        self._members[member.id] = member

    def _member(self, user: GuildMember | int) -> GuildMember:
        user_id = user.id if isinstance(user, GuildMember) else user
        try:
            return self._members[user_id]
        except KeyError:
            raise ValueError(f"{user_id} is not a member of the guild (add_member)") from None

    # ---- a bot's users -----------------------------------------------------------------------

    async def user_says(
        self, user: GuildMember | int, content: str, *, channel_id: int | None = None
    ) -> int:
        """`user` posts `content` in a channel (default: the emulator's `channel_id`); the bot
        receives MESSAGE_CREATE (with the GUILD_MESSAGES intent). The message is not part of the
        transcript (it is not the bot's); its id is returned once the event is on the wire."""
        member = self._member(user)
        channel = self._live(channel_id)
        message_id = self._emulator.post_user_message(
            content, channel_id=channel.id, author_id=member.id
        )
        wire = channel.wire[message_id]
        wire["author"] = self._user_json(member)
        pings = would_ping(content, None)
        wire["mention_everyone"] = pings.everyone
        wire["mentions"] = [self._mention(user_id) for user_id in sorted(pings.users)]
        wire["mention_roles"] = [str(role) for role in sorted(pings.roles)]
        snapshot = copy.deepcopy(wire)
        self._dispatch("MESSAGE_CREATE", lambda s: self._message_event(snapshot, s))
        await self.flush()
        return message_id

    async def slash(
        self,
        user: GuildMember | int,
        command: str,
        options: Mapping[str, object] | None = None,
        *,
        channel_id: int | None = None,
    ) -> InteractionRecord:
        """`user` runs `command` in a channel (default: the emulator's `channel_id`), with
        `options` (name → value: str, int, float, bool, or a member for a user option). When the
        command was synced, its id and its options' types are used, and an unknown or missing
        required option is a ValueError (Discord's client would not send it); otherwise the
        types follow the values. "group sub" runs a subcommand. Returns the record once
        INTERACTION_CREATE is on the wire."""
        member = self._member(user)
        channel = self._live(channel_id)
        words = command.split()
        if not 1 <= len(words) <= 3:  # a command, a group, a subcommand
            raise ValueError(f"not a command: {command!r}")
        registered, scope = self._registered(words[0])
        definitions: list[JSONObject] | None = None
        if registered is not None:
            definitions = list(registered.get("options") or [])
            for word in words[1:]:
                sub = next(
                    (o for o in definitions if o.get("name") == word and o.get("type") in (1, 2)),
                    None,
                )
                if sub is None:
                    raise ValueError(f"/{words[0]} has no subcommand {word!r}")
                definitions = list(sub.get("options") or [])
        given = dict(options or {})
        resolved: JSONObject = {}
        leaf = [self._option(name, value, definitions, resolved) for name, value in given.items()]
        for definition in definitions or []:
            if definition.get("required") and definition.get("name") not in given:
                raise ValueError(f"/{command} needs the option {definition.get('name')!r}")
        nested: list[JSONObject] = leaf
        for depth, word in reversed(list(enumerate(words[1:], start=1))):
            is_group = depth < len(words) - 1
            nested = [{"type": 2 if is_group else 1, "name": word, "options": nested}]
        data: JSONObject = {
            "id": str(registered["id"]) if registered is not None else str(self._snowflake()),
            "name": words[0],
            "type": 1,
            "options": nested,
        }
        if scope is not None:
            data["guild_id"] = str(scope)
        if resolved:
            data["resolved"] = resolved
        record = self._interaction(member, channel, "command", command=command, options=given)
        self._dispatch_interaction(record, 2, data, member, channel)
        await self.flush()
        return record

    async def click(
        self,
        user: GuildMember | int,
        message_id: int,
        custom_id: str,
        *,
        values: Sequence[str] | None = None,
    ) -> InteractionRecord:
        """`user` clicks the component `custom_id` (a button; a select with `values`) on the
        message `message_id`. A ValueError when there is no such component, it is disabled or
        a link, or the message is someone else's ephemeral one (what a user cannot click).
        Returns the record once INTERACTION_CREATE is on the wire."""
        member = self._member(user)
        channel, wire = self._clickable(message_id, member)
        component = _find_component(wire.get("components") or [], custom_id)
        if component is None:
            raise ValueError(f"message {message_id} has no component {custom_id!r}")
        kind = component.get("type")
        if component.get("disabled"):
            raise ValueError(f"the component {custom_id!r} is disabled")
        data: JSONObject = {"custom_id": custom_id, "component_type": kind}
        if kind in _SELECTS:
            data["values"] = list(values or [])
        elif values is not None:
            raise ValueError(f"the component {custom_id!r} is not a select")
        record = self._interaction(
            member,
            channel,
            "component",
            custom_id=custom_id,
            values=values or (),
            message_id=message_id,
        )
        self._dispatch_interaction(record, 3, data, member, channel, message=wire)
        await self.flush()
        return record

    def expire(self, interaction: InteractionRecord | int) -> None:
        """The token of `interaction` (a record or an id) expires now."""
        key = interaction.id if isinstance(interaction, InteractionRecord) else interaction
        self._by_id[key].expire()

    def ephemeral_messages(self, user: GuildMember | int) -> list[SentMessage]:
        """The ephemeral messages `user` was shown (by any interaction), as they are now, oldest
        first."""
        member = self._member(user)
        return [entry.sent for entry in self._ephemeral.values() if entry.user_id == member.id]

    def commands(self, guild: bool = False) -> list[JSONObject]:
        """The application commands synced: the global ones, or the guild's."""
        return copy.deepcopy(self._commands[self._emulator.guild_id if guild else None])

    def message(self, channel_id: int, message_id: int) -> SentMessage | None:
        """A message an interaction made or edited, as it is now: an ephemeral one, or one of
        the channel's transcript (None once deleted)."""
        entry = self._ephemeral.get(message_id)
        if entry is not None:
            return entry.sent
        transcript = self._emulator._channels[channel_id].transcript
        return next((m for m in reversed(transcript) if m.id == message_id), None)

    # ---- connections -------------------------------------------------------------------------

    @property
    def heartbeats(self) -> list[GatewayFrame]:
        """The heartbeats clients sent (each was acknowledged), oldest first."""
        return [f for f in self.frames if not f.sent and f.payload.get("op") == _HEARTBEAT]

    async def wait_frames(
        self, predicate: Callable[[GatewayFrame], bool], count: int = 1, *, timeout: float = 30.0
    ) -> list[GatewayFrame]:
        """Wait (at most `timeout` seconds, loop time) until `count` frames of `frames` satisfy
        `predicate`; returns them."""
        matching = [f for f in self.frames if predicate(f)]
        if len(matching) < count:
            waiter = asyncio.get_running_loop().create_future()
            await _wait_listed(self._frame_waiters, (predicate, count, waiter), waiter, timeout)
            matching = [f for f in self.frames if predicate(f)]
        return matching[:count]

    def _frame(self, frame: GatewayFrame) -> None:
        self.frames.append(frame)
        for predicate, count, waiter in list(self._frame_waiters):
            if not waiter.done() and sum(1 for f in self.frames if predicate(f)) >= count:
                waiter.set_result(None)

    @property
    def connected(self) -> int:
        """How many sessions have a live connection."""
        return sum(1 for s in self._sessions.values() if s.connection is not None)

    async def wait_connected(self, *, timeout: float = 30.0) -> None:
        """Wait (loop time) until a session is connected (identified or resumed) and what it was
        sent is on the wire."""
        async with asyncio.timeout(timeout):
            while not self.connected:
                waiter = asyncio.get_running_loop().create_future()
                self._attached.append(waiter)
                try:
                    await waiter
                finally:
                    if waiter in self._attached:
                        self._attached.remove(waiter)
            await self.flush()

    async def flush(self) -> None:
        """Wait until every payload queued on a live connection is written."""
        for connection in list(self._connections):
            await connection.queue.join()

    async def request_heartbeat(self, *, timeout: float = 30.0) -> int:
        """Ask every identified connection for a heartbeat now (op 1) and wait until each sent
        it (and it was acknowledged); returns how many did."""
        waiters: list[asyncio.Future[None]] = []
        for connection in self._connections:
            if connection.session is not None and not connection.closing:
                waiter = asyncio.get_running_loop().create_future()
                connection.heartbeat_waiters.append(waiter)
                waiters.append(waiter)
                connection.send({"op": _HEARTBEAT, "d": None})
        async with asyncio.timeout(timeout):
            for waiter in waiters:
                await waiter
        await self.flush()
        return len(waiters)

    def drop(self, *, resumable: bool = True) -> int:
        """Cut every connection without a close frame, as a network failure does; returns how
        many were cut. Their sessions stay, so a client resumes and gets what it missed; with
        `resumable=False` the sessions are forgotten (RESUME gets INVALID_SESSION, the client
        identifies again, and what was dispatched meanwhile is lost)."""
        dropped = 0
        for connection in list(self._connections):
            if connection.dropped:
                continue
            connection.dropped = connection.closing = True
            if not resumable and connection.session is not None:
                self._sessions.pop(connection.session.id, None)
            if connection.session is not None and connection.session.connection is connection:
                connection.session.connection = None
            if connection.transport is not None:
                connection.transport.abort()
            dropped += 1
        return dropped

    async def close(self) -> None:
        """Close every connection (1001) and forget the sessions (`DiscordEmulator.close`); a
        connection attempted from now on is refused (503)."""
        self._closing = True
        for connection in list(self._connections):
            connection.close(1001, "the emulator is closing")
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=5.0)
        self._sessions.clear()

    # ---- the emulator's hooks ------------------------------------------------------------------

    def install(self, app: web.Application) -> None:
        """Serve the websocket on `app` (`/gateway`, and `/gateway/resume`, the
        `resume_gateway_url`)."""
        self._closing = False
        app.router.add_get("/gateway", self._serve)
        app.router.add_get("/gateway/resume", self._serve)

    def routes(self) -> tuple[tuple[str, re.Pattern[str], RouteKind, _Handler], ...]:
        """The REST routes of the gateway, of interactions and of application commands."""
        hook = r"/webhooks/(\d+)/(?P<token>[^/]+)"
        commands = r"/applications/(\d+)/commands"
        guild_commands = r"/applications/(\d+)/guilds/(\d+)/commands"
        return (
            ("GET", re.compile(r"/gateway"), "gateway", self._get_gateway),
            ("GET", re.compile(r"/gateway/bot"), "gateway", self._get_gateway),
            (
                "POST",
                re.compile(r"/interactions/(\d+)/(?P<token>[^/]+)/callback"),
                "interaction",
                self._callback,
            ),
            ("POST", re.compile(hook), "interaction", self._followup),
            ("GET", re.compile(hook + "/messages/@original"), "interaction", self._get_original),
            ("PATCH", re.compile(hook + "/messages/@original"), "interaction", self._edit_original),
            (
                "DELETE",
                re.compile(hook + "/messages/@original"),
                "interaction",
                self._delete_original,
            ),
            ("GET", re.compile(hook + r"/messages/(\d+)"), "interaction", self._get_hook_message),
            (
                "PATCH",
                re.compile(hook + r"/messages/(\d+)"),
                "interaction",
                self._edit_hook_message,
            ),
            (
                "DELETE",
                re.compile(hook + r"/messages/(\d+)"),
                "interaction",
                self._delete_hook_message,
            ),
            ("GET", re.compile(commands), "commands", self._list_commands),
            ("PUT", re.compile(commands), "commands", self._overwrite_commands),
            ("POST", re.compile(commands), "commands", self._upsert_command),
            ("GET", re.compile(guild_commands), "commands", self._list_commands),
            ("PUT", re.compile(guild_commands), "commands", self._overwrite_commands),
            ("POST", re.compile(guild_commands), "commands", self._upsert_command),
        )

    def interaction_channel(self, token: str | None) -> int | None:
        """The channel of the interaction whose token a request carries (for its record)."""
        record = self._by_token.get(token) if token is not None else None
        return None if record is None else record.channel_id

    def channel_changed(
        self, event: Literal["CHANNEL_CREATE", "CHANNEL_DELETE"], channel_id: int
    ) -> None:
        """A channel was added or deleted: CHANNEL_CREATE or CHANNEL_DELETE (GUILDS intent)."""
        if not self._sessions:
            return
        payload = self._emulator._channel_json(self._emulator._channels[channel_id])
        self._dispatch(event, lambda s: copy.deepcopy(payload) if s.intents & _GUILDS else None)

    def message_changed(self, change: Change) -> None:
        """A message of the transcript was created, edited or deleted: MESSAGE_CREATE,
        MESSAGE_UPDATE or MESSAGE_DELETE (GUILD_MESSAGES intent). Without a session it costs
        nothing but a lookup (streams without a bot send thousands of messages)."""
        record = self._by_message.get(change.message_id)
        if record is not None:
            record.changed()
        if not self._sessions:
            return
        if change.kind == "delete":
            ids = {
                "id": str(change.message_id),
                "channel_id": str(change.channel_id),
                "guild_id": str(self._emulator.guild_id),
            }
            self._dispatch("MESSAGE_DELETE", lambda s: ids if s.intents & _GUILD_MESSAGES else None)
        else:
            wire = self._emulator._channels[change.channel_id].wire[change.message_id]
            snapshot = copy.deepcopy(wire)
            event = "MESSAGE_CREATE" if change.kind == "create" else "MESSAGE_UPDATE"
            self._dispatch(event, lambda s: self._message_event(snapshot, s))

    # ---- the websocket -----------------------------------------------------------------------

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        if self._closing:
            return web.Response(status=503)
        ws = web.WebSocketResponse(timeout=5.0, max_msg_size=0)
        await ws.prepare(request)
        self._connection_count += 1
        self.urls.append(str(request.rel_url))
        done = asyncio.get_running_loop().create_future()
        self._handlers.add(done)
        problem, encode = _transport(request.query)
        connection = _Connection(self._connection_count, ws, request.transport, encode)
        self._connections.append(connection)
        writer = asyncio.create_task(self._write(connection))
        try:
            if problem is not None:
                connection.close(*problem)
            else:
                connection.send(
                    {
                        "op": _HELLO,
                        "d": {"heartbeat_interval": round(self.heartbeat_interval * 1000)},
                    }
                )
            async for message in ws:
                if connection.closing:
                    continue
                payload = _decode(message)
                if payload is None:
                    connection.close(4002, "Decode error")
                    continue
                self._frame(GatewayFrame(_now(), connection.number, False, payload))
                self._receive(connection, payload)
        finally:
            self._connections.remove(connection)
            session = connection.session
            if session is not None and session.connection is connection:
                session.connection = None
                # A client that closes with 1000 or 1001 ends its session, as on Discord.
                if not connection.closing and ws.close_code in (1000, 1001):
                    self._sessions.pop(session.id, None)
            connection.closing = True
            if not writer.done():
                writer.cancel()
            with suppress(asyncio.CancelledError):
                await writer
            self._handlers.discard(done)
            done.set_result(None)
        return ws

    async def _write(self, connection: _Connection) -> None:
        """Write a connection's queue in order: one compression stream needs one writer."""
        try:
            while True:
                item = await connection.queue.get()
                try:
                    if isinstance(item, _Close):
                        await connection.ws.close(code=item.code, message=item.message.encode())
                        return
                    self._frame(GatewayFrame(_now(), connection.number, True, item))
                    data = json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode()
                    if connection.encode is not None:
                        await connection.ws.send_bytes(connection.encode(data))
                    else:
                        await connection.ws.send_str(data.decode())
                finally:
                    connection.queue.task_done()
        except (ConnectionError, RuntimeError):
            return  # the connection is gone: what is left is in the session's log
        finally:
            while not connection.queue.empty():  # `flush` must not wait on a dead connection
                connection.queue.get_nowait()
                connection.queue.task_done()

    def _receive(self, connection: _Connection, payload: JSONObject) -> None:
        op, data = payload.get("op"), payload.get("d")
        if op == _HEARTBEAT:
            connection.send({"op": _HEARTBEAT_ACK})
            for waiter in connection.heartbeat_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            connection.heartbeat_waiters.clear()
        elif op == _IDENTIFY:
            self._identify(connection, data)
        elif op == _RESUME:
            self._resume(connection, data)
        elif connection.session is None:
            connection.close(4003, "Not authenticated")
        elif op == _REQUEST_GUILD_MEMBERS:
            self._request_members(connection.session, data)
        elif op not in (_PRESENCE_UPDATE, _VOICE_STATE_UPDATE):
            connection.close(4001, "Unknown opcode")

    def _identify(self, connection: _Connection, data: object) -> None:
        if connection.session is not None:
            connection.close(4005, "Already authenticated")
            return
        if not isinstance(data, dict) or data.get("token") != self._emulator.token:
            connection.close(4004, "Authentication failed")
            return
        intents = data.get("intents")
        if isinstance(intents, bool) or not isinstance(intents, int) or intents < 0:
            connection.close(4013, "Invalid intent(s)")
            return
        session = _Session(secrets.token_hex(16), intents)
        self._sessions[session.id] = session
        self._attach(session, connection)
        emulator = self._emulator
        ready = {
            "v": int(_API_VERSION),
            "user": {
                **self._user_json(self._members[emulator.user_id]),
                "verified": True,
                "mfa_enabled": False,
                "flags": 0,
            },
            "guilds": [{"id": str(emulator.guild_id), "unavailable": True}],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": f"{emulator.gateway_url}/resume",
            "application": {"id": str(emulator.user_id), "flags": 0},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "geo_ordered_rtc_regions": [],
            "_trace": ["cordstream-emulator"],
        }
        self._send_to(session, "READY", ready)
        self._send_to(session, "GUILD_CREATE", self._guild_json(session))

    def _resume(self, connection: _Connection, data: object) -> None:
        if connection.session is not None:
            connection.close(4005, "Already authenticated")
            return
        session = None
        if isinstance(data, dict) and data.get("token") == self._emulator.token:
            session = self._sessions.get(str(data.get("session_id")))
        seq = data.get("seq") if isinstance(data, dict) else None
        if session is None or not (seq is None or (isinstance(seq, int) and seq <= session.seq)):
            connection.send({"op": _INVALID_SESSION, "d": False})
            return
        previous = session.connection
        if previous is not None:  # a client resuming has given up on its old connection
            previous.session = None
            previous.close(4000, "Resumed elsewhere")
        self._attach(session, connection)
        for payload in session.log:
            if payload["s"] > (seq or 0):
                connection.send(payload)
        self._send_to(session, "RESUMED", {})

    def _attach(self, session: _Session, connection: _Connection) -> None:
        session.connection = connection
        connection.session = session
        for waiter in self._attached:
            if not waiter.done():
                waiter.set_result(None)

    def _request_members(self, session: _Session, data: object) -> None:
        if not isinstance(data, dict):
            return
        query = str(data.get("query") or "")
        user_ids = {int(u) for u in data.get("user_ids") or ()}
        limit = int(data.get("limit") or 0)
        found = [
            m
            for m in self._members.values()
            if (m.id in user_ids if user_ids else m.name.startswith(query))
        ]
        if limit:
            found = found[:limit]
        chunk: JSONObject = {
            "guild_id": str(self._emulator.guild_id),
            "members": [self._member_json(m) for m in found],
            "chunk_index": 0,
            "chunk_count": 1,
        }
        if user_ids:
            chunk["not_found"] = [str(u) for u in sorted(user_ids - set(self._members))]
        if "nonce" in data:
            chunk["nonce"] = data["nonce"]
        self._send_to(session, "GUILD_MEMBERS_CHUNK", chunk)

    def _send_to(self, session: _Session, event: str, data: JSONObject) -> None:
        session.seq += 1
        payload = {"op": _DISPATCH, "t": event, "s": session.seq, "d": data}
        session.log.append(payload)
        if session.connection is not None:
            session.connection.send(payload)

    def _dispatch(self, event: str, build: Callable[[_Session], JSONObject | None]) -> None:
        """Dispatch `event` to every session, with what `build` makes for it (None: not to
        it). A session without a connection logs it for its RESUME."""
        for session in list(self._sessions.values()):
            data = build(session)
            if data is not None:
                self._send_to(session, event, data)

    # ---- payloads ------------------------------------------------------------------------------

    def _user_json(self, member: GuildMember) -> JSONObject:
        return self._emulator._user(member.id, name=member.name, bot=member.bot)

    def _member_json(self, member: GuildMember, *, user: bool = True) -> JSONObject:
        roles = []
        if member.bot:
            roles.append(str(self.bot_role_id))
        if member.manage_messages:
            roles.append(str(self.moderator_role_id))
        data: JSONObject = {
            "roles": roles,
            "nick": None,
            "avatar": None,
            "banner": None,
            "joined_at": self._joined,
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "communication_disabled_until": None,
        }
        if user:
            data["user"] = self._user_json(member)
        return data

    def _mention(self, user_id: int) -> JSONObject:
        member = self._members.get(user_id)
        if member is None:
            return self._emulator._user(user_id)
        return {**self._user_json(member), "member": self._member_json(member, user=False)}

    def _role_json(
        self, role_id: int, name: str, position: int, permissions: discord.Permissions
    ) -> JSONObject:
        role: JSONObject = {
            "id": str(role_id),
            "name": name,
            "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False,
            "icon": None,
            "unicode_emoji": None,
            "position": position,
            "permissions": str(permissions.value),
            "managed": role_id == self.bot_role_id,
            "mentionable": False,
            "flags": 0,
        }
        if role_id == self.bot_role_id:
            role["tags"] = {"bot_id": str(self._emulator.user_id)}
        return role

    def _guild_json(self, session: _Session) -> JSONObject:
        emulator = self._emulator
        everyone_sees = session.intents & _GUILD_PRESENCES
        members = [m for m in self._members.values() if everyone_sees or m.bot]
        channels = [
            {**emulator._channel_json(channel), "position": position}
            for position, channel in enumerate(emulator._channels.values())
            if not channel.deleted
        ]
        return {
            "id": str(emulator.guild_id),
            "name": "cordstream emulator",
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": str(emulator.owner_id),
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [
                self._role_json(emulator.guild_id, "@everyone", 0, _EVERYONE),
                self._role_json(self.bot_role_id, emulator.bot_name, 1, _BOT),
                self._role_json(self.moderator_role_id, "Moderators", 2, _MODERATOR),
            ],
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "nsfw_level": 0,
            "application_id": None,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "vanity_url_code": None,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "preferred_locale": "en-US",
            "max_members": 500_000,
            "joined_at": self._joined,
            "large": False,
            "unavailable": False,
            "member_count": len(self._members),
            "members": [self._member_json(m) for m in members],
            "channels": channels,
            "threads": [],
            "presences": [],
            "voice_states": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    def _message_event(self, wire: JSONObject, session: _Session) -> JSONObject | None:
        if not session.intents & _GUILD_MESSAGES:
            return None
        data = copy.deepcopy(wire)
        data["guild_id"] = str(self._emulator.guild_id)
        author = self._members.get(int(wire["author"]["id"]))
        if author is not None:
            data["member"] = self._member_json(author, user=False)
        bot_id = self._emulator.user_id
        mentioned = any(int(user["id"]) == bot_id for user in wire.get("mentions") or ())
        by_bot = int(wire["author"]["id"]) == bot_id
        if not session.intents & _MESSAGE_CONTENT and not by_bot and not mentioned:
            data.update(content="", embeds=[], attachments=[], components=[])
        return data

    # ---- interactions ------------------------------------------------------------------------

    def _interaction(
        self,
        member: GuildMember,
        channel: _Channel,
        kind: InteractionKind,
        **details: Any,
    ) -> InteractionRecord:
        now = _now()
        deadline = self.interaction_deadline
        record = InteractionRecord(
            self,
            id=self._snowflake(),
            token=f"aW50ZXJhY3Rpb24{secrets.token_urlsafe(48)}",
            kind=kind,
            user_id=member.id,
            channel_id=channel.id,
            created_at=now,
            expires_at=now + self.interaction_ttl,
            deadline=None if deadline is None else now + deadline,
            **details,
        )
        self.interactions.append(record)
        self._by_id[record.id] = record
        self._by_token[record.token] = record
        return record

    def _dispatch_interaction(
        self,
        record: InteractionRecord,
        kind: int,
        data: JSONObject,
        member: GuildMember,
        channel: _Channel,
        *,
        message: JSONObject | None = None,
    ) -> None:
        emulator = self._emulator
        guild = str(emulator.guild_id)
        payload: JSONObject = {
            "id": str(record.id),
            "application_id": str(emulator.user_id),
            "type": kind,
            "data": data,
            "guild_id": guild,
            "guild": {"id": guild, "locale": "en-US", "features": []},
            "channel_id": str(channel.id),
            "channel": emulator._channel_json(channel),
            "member": {
                **self._member_json(member),
                "permissions": str(self.permissions(member).value),
            },
            "token": record.token,
            "version": 1,
            "app_permissions": str(self.permissions(emulator.user_id).value),
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": guild},
            "context": 0,
            "attachment_size_limit": _ATTACHMENT_LIMIT,
        }
        if message is not None:
            payload["message"] = copy.deepcopy(message)
        self._dispatch("INTERACTION_CREATE", lambda s: copy.deepcopy(payload))

    def _option(
        self,
        name: str,
        value: object,
        definitions: list[JSONObject] | None,
        resolved: JSONObject,
    ) -> JSONObject:
        kind: object
        if definitions is None:
            kind = _option_type(value)
        else:
            found = next((d for d in definitions if d.get("name") == name), None)
            if found is None or found.get("type") in (1, 2):
                raise ValueError(f"the command has no option {name!r}")
            kind = found.get("type")
        match kind:
            case 3 if isinstance(value, str):
                return {"type": 3, "name": name, "value": value}
            case 4 if isinstance(value, int) and not isinstance(value, bool):
                return {"type": 4, "name": name, "value": value}
            case 10 if isinstance(value, int | float) and not isinstance(value, bool):
                return {"type": 10, "name": name, "value": value}
            case 5 if isinstance(value, bool):
                return {"type": 5, "name": name, "value": value}
            case 6 if isinstance(value, GuildMember | int) and not isinstance(value, bool):
                member = self._member(value)
                users = resolved.setdefault("users", {})
                members = resolved.setdefault("members", {})
                users[str(member.id)] = self._user_json(member)
                members[str(member.id)] = {
                    **self._member_json(member, user=False),
                    "permissions": str(self.permissions(member).value),
                }
                return {"type": 6, "name": name, "value": str(member.id)}
        raise ValueError(f"option {name!r}: {value!r} does not fit type {kind}")

    def _clickable(self, message_id: int, member: GuildMember) -> tuple[_Channel, JSONObject]:
        entry = self._ephemeral.get(message_id)
        if entry is not None:
            if entry.user_id != member.id:
                raise ValueError(f"message {message_id} is ephemeral: only its user sees it")
            return self._live(entry.channel_id), entry.wire
        for channel in self._emulator._channels.values():
            wire = channel.wire.get(message_id)
            if wire is not None:
                return self._live(channel.id), wire
        raise ValueError(f"no message {message_id} in the emulator")

    def _live(self, channel_id: int | None) -> _Channel:
        emulator = self._emulator
        channel = emulator._channel(emulator.channel_id if channel_id is None else channel_id)
        if channel.deleted:
            raise ValueError(f"channel {channel.id} was deleted")
        return channel

    # ---- REST: the gateway, interactions, commands -----------------------------------------

    async def _get_gateway(self, call: _Call) -> web.StreamResponse:
        body: JSONObject = {"url": self._emulator.gateway_url}
        if call.record.path.endswith("/bot"):
            body["shards"] = 1
            body["session_start_limit"] = {
                "total": 1000,
                "remaining": 1000,
                "reset_after": 0,
                "max_concurrency": 1,
            }
        return _json_response(200, body)

    def _record_of(self, call: _Call) -> InteractionRecord:
        """The interaction whose webhook `call` is for (Discord's errors otherwise)."""
        if call.ids[0] != self._emulator.user_id:
            raise _Reply(404, 10015, "Unknown Webhook")
        record = self._by_token.get(call.token or "")
        if record is None or record.expired:
            raise _Reply(401, 50027, "Invalid Webhook Token")
        if not record.responses:
            raise _Reply(404, 10015, "Unknown Webhook")
        return record

    async def _callback(self, call: _Call) -> web.StreamResponse:
        record = self._by_id.get(call.ids[0])
        if record is None:
            raise _Reply(404, 10062, "Unknown interaction")
        if call.token != record.token or record.expired:
            raise _Reply(401, 50027, "Invalid Webhook Token")
        if record.responses:
            raise _Reply(400, 40060, "Interaction has already been acknowledged.")
        if record.timed_out:
            raise _Reply(404, 10062, "Unknown interaction")
        body = self._emulator._body(call)
        kind = body.get("type")
        data = body.get("data") or {}
        if not isinstance(data, dict):
            raise _form_error(["data"], "DICT_TYPE_CONVERT", "Only dictionaries allowed.")
        resource: JSONObject | None = None
        if kind in (6, 7) and record.kind != "component":
            raise _form_error(
                ["type"], "INTERACTION_RESPONSE_TYPE_INVALID", "Invalid interaction response type"
            )
        match kind:
            case 4:
                resource = self._create(record, data)
                record.original_id = int(resource["id"])
                record.state = "responded"
            case 5:
                resource = self._thinking(record, _int(data.get("flags", 0), "flags"))
                record.original_id = int(resource["id"])
                record.state, record.thinking = "deferred", True
            case 6:
                record.original_id = record.message_id
                record.state = "deferred"
            case 7:
                assert record.message_id is not None  # a component's record has its message
                resource = self._edit(record, record.message_id, data)
                record.original_id = record.message_id
                record.state = "responded"
            case 1:
                raise _Reply(400, 50035, "PONG answers an HTTP ping, not a gateway interaction")
            case _:
                raise _Reply(400, 0, f"emulator: interaction response type {kind!r} is not served")
        record.responses.append(kind)
        record.changed()
        if call.request.query.get("with_response") not in _TRUE:
            return web.Response(status=204)
        original = None if record.original_id is None else self._wire_of(record, record.original_id)
        answer: JSONObject = {
            "interaction": {
                "id": str(record.id),
                "type": 2 if record.kind == "command" else 3,
                "response_message_id": None if resource is None else resource["id"],
                "response_message_loading": record.thinking,
                "response_message_ephemeral": bool(
                    original is not None and int(original.get("flags", 0)) & EPHEMERAL
                ),
            },
            "resource": {"type": kind},
        }
        if resource is not None:
            answer["resource"]["message"] = resource
        return _json_response(200, answer)

    async def _get_original(self, call: _Call) -> web.StreamResponse:
        record = self._record_of(call)
        if record.original_id is None:
            raise _Reply(404, 10008, "Unknown Message")
        return _json_response(200, self._wire_of(record, record.original_id))

    async def _edit_original(self, call: _Call) -> web.StreamResponse:
        record = self._record_of(call)
        if record.original_id is None:
            raise _Reply(404, 10008, "Unknown Message")
        wire = self._edit(record, record.original_id, self._emulator._body(call))
        return _json_response(200, wire)

    async def _followup(self, call: _Call) -> web.StreamResponse:
        record = self._record_of(call)
        body = self._emulator._body(call)
        if record.thinking and record.original_id is not None:
            # Discord folds the first follow-up of a pending deferral into the original.
            wire = self._edit(record, record.original_id, body)
        else:
            wire = self._create(record, body)
            record.followup_ids.append(int(wire["id"]))
            if record.state == "deferred":
                record.state = "responded"
            record.changed()
        if call.request.query.get("wait") in _TRUE:
            return _json_response(200, wire)
        return web.Response(status=204)

    async def _get_hook_message(self, call: _Call) -> web.StreamResponse:
        record = self._record_of(call)
        return _json_response(200, self._wire_of(record, self._own(record, call.ids[1])))

    async def _edit_hook_message(self, call: _Call) -> web.StreamResponse:
        record = self._record_of(call)
        message_id = self._own(record, call.ids[1])
        return _json_response(200, self._edit(record, message_id, self._emulator._body(call)))

    async def _delete_original(self, call: _Call) -> web.StreamResponse:
        record = self._record_of(call)
        if record.original_id is None:
            raise _Reply(404, 10008, "Unknown Message")
        self._delete(record, record.original_id)
        return web.Response(status=204)

    async def _delete_hook_message(self, call: _Call) -> web.StreamResponse:
        record = self._record_of(call)
        self._delete(record, self._own(record, call.ids[1]))
        return web.Response(status=204)

    def message_deleted(self, message_id: int) -> None:
        """The bot deleted one of its messages through the channel's route: an interaction
        whose original response it was no longer shows "thinking"."""
        for record in self._by_id.values():
            if record.original_id == message_id and record.thinking:
                record.thinking = False
                record.changed()

    def _delete(self, record: InteractionRecord, message_id: int) -> None:
        """Delete a message through `record`'s token: it leaves the channel (or the user's
        ephemeral messages); a deleted original response no longer shows "thinking"."""
        if self._ephemeral.pop(message_id, None) is None:
            try:
                self._emulator.delete_message(message_id, channel_id=record.channel_id)
            except KeyError:
                raise _Reply(404, 10008, "Unknown Message") from None
        if message_id == record.original_id:
            record.thinking = False
        record.changed()

    @staticmethod
    def _own(record: InteractionRecord, message_id: int) -> int:
        if message_id != record.original_id and message_id not in record.followup_ids:
            raise _Reply(404, 10008, "Unknown Message")
        return message_id

    def _wire_of(self, record: InteractionRecord, message_id: int) -> JSONObject:
        entry = self._ephemeral.get(message_id)
        if entry is not None:
            return entry.wire
        wire = self._emulator._channels[record.channel_id].wire.get(message_id)
        if wire is None:
            raise _Reply(404, 10008, "Unknown Message")
        return wire

    def _decorate(self, record: InteractionRecord, wire: JSONObject) -> None:
        """What makes a message an interaction's: its webhook, its application, its metadata."""
        emulator = self._emulator
        metadata: JSONObject = {
            "id": str(record.id),
            "type": 2 if record.kind == "command" else 3,
            "user": self._user_json(self._members[record.user_id]),
            "authorizing_integration_owners": {"0": str(emulator.guild_id)},
        }
        if record.command is not None:
            metadata["name"] = record.command
        if record.message_id is not None:
            metadata["interacted_message_id"] = str(record.message_id)
        if record.original_id is not None:
            metadata["original_response_message_id"] = str(record.original_id)
        wire.update(
            type=20 if record.kind == "command" else 0,
            webhook_id=str(emulator.user_id),
            application_id=str(emulator.user_id),
            interaction_metadata=metadata,
        )

    def _store(
        self, record: InteractionRecord, channel: _Channel, wire: JSONObject, sent: SentMessage
    ) -> None:
        if sent.flags & EPHEMERAL:
            self._ephemeral[sent.id] = _Ephemeral(record.user_id, channel.id, wire, sent)
        else:
            self._by_message[sent.id] = record
            self._emulator._accept(channel, wire, sent)

    def _create(self, record: InteractionRecord, body: JSONObject) -> JSONObject:
        """A new message of `record` (its original response or a follow-up)."""
        emulator = self._emulator
        channel = emulator._live_channel(record.channel_id)
        wire, sent = emulator._new_message(channel, body, interaction_id=record.id)
        self._decorate(record, wire)
        self._store(record, channel, wire, sent)
        return wire

    def _thinking(self, record: InteractionRecord, flags: int) -> JSONObject:
        """A deferral's "thinking" message, ephemeral when the deferral is."""
        emulator = self._emulator
        channel = emulator._live_channel(record.channel_id)
        message_id = emulator._snowflake()
        flags = LOADING | (flags & EPHEMERAL)
        wire = emulator._thinking_message(message_id, channel.id, flags)
        self._decorate(record, wire)
        sent = SentMessage(
            id=message_id,
            channel_id=channel.id,
            content="",
            embeds=(),
            message_reference=None,
            allowed_mentions=None,
            pings=Pings(),
            flags=flags,
            at=_now(),
            interaction_id=record.id,
        )
        self._store(record, channel, wire, sent)
        return wire

    def _edit(self, record: InteractionRecord, message_id: int, body: JSONObject) -> JSONObject:
        """Edit a message through `record`'s token: the original response, a follow-up, or (type
        7) the message clicked on. It stops "thinking"; its visibility cannot change."""
        emulator = self._emulator
        entry = self._ephemeral.get(message_id)
        if entry is not None:
            old_flags = entry.sent.flags
        else:
            found = self.message(record.channel_id, message_id)
            if found is None:
                raise _Reply(404, 10008, "Unknown Message")
            old_flags = found.flags
        flags = old_flags & ~LOADING
        if "flags" in body:
            asked = _int(body["flags"], "flags")
            flags = (flags & ~_SUPPRESS_EMBEDS) | (asked & _SUPPRESS_EMBEDS)
        body = {**body, "flags": flags}
        if entry is not None:
            entry.sent = emulator._revise(entry.wire, entry.sent, body)
            wire = entry.wire
        else:
            wire = emulator._apply_edit(emulator._live_channel(record.channel_id), message_id, body)
        if message_id == record.original_id:
            record.thinking = False
        if record.state == "deferred":
            record.state = "responded"
        record.changed()
        return wire

    # ---- REST: application commands --------------------------------------------------------

    def _scope(self, call: _Call) -> int | None:
        if call.ids[0] != self._emulator.user_id:
            raise _Reply(403, 50001, "Missing Access")
        if len(call.ids) > 1:
            if call.ids[1] != self._emulator.guild_id:
                raise _Reply(404, 10004, "Unknown Guild")
            return call.ids[1]
        return None

    async def _list_commands(self, call: _Call) -> web.StreamResponse:
        return _json_response(200, self._commands[self._scope(call)])

    async def _overwrite_commands(self, call: _Call) -> web.StreamResponse:
        scope = self._scope(call)
        body = call.record.json
        if not isinstance(body, list) or not all(isinstance(c, dict) for c in body):
            raise _form_error([], "LIST_TYPE_CONVERT", "Must be a list of objects.")
        if len(body) > _MAX_COMMANDS:
            raise _form_error([], "BASE_TYPE_MAX_LENGTH", f"Must be {_MAX_COMMANDS} or fewer.")
        seen: set[tuple[int, str]] = set()
        stored = []
        for index, command in enumerate(body):
            entry = self._command(command, scope, index)
            key = (entry["type"], entry["name"])
            if key in seen:
                raise _form_error(
                    [index, "name"], "APPLICATION_COMMANDS_DUPLICATE_NAME", "Duplicate name"
                )
            seen.add(key)
            stored.append(entry)
        self._commands[scope] = stored
        return _json_response(200, stored)

    async def _upsert_command(self, call: _Call) -> web.StreamResponse:
        scope = self._scope(call)
        body = call.record.json
        if not isinstance(body, dict):
            raise _form_error([], "DICT_TYPE_CONVERT", "Only dictionaries allowed.")
        entry = self._command(body, scope, None)
        commands = self._commands[scope]
        for index, command in enumerate(commands):
            if (command["type"], command["name"]) == (entry["type"], entry["name"]):
                commands[index] = entry
                return _json_response(200, entry)
        commands.append(entry)
        return _json_response(201, entry)

    def _command(self, command: JSONObject, scope: int | None, index: int | None) -> JSONObject:
        """A command as stored and answered: checked, with its ids (an existing command with
        the same type and name keeps its id)."""
        where: list[str | int] = [] if index is None else [index]
        kind = command.get("type", 1)
        name = command.get("name")
        if not isinstance(name, str) or not _COMMAND_NAME.match(name):
            raise _form_error([*where, "name"], "APPLICATION_COMMAND_INVALID_NAME", "Invalid name")
        if kind == 1 and name != name.lower():
            raise _form_error([*where, "name"], "APPLICATION_COMMAND_INVALID_NAME", "Lowercase")
        description = command.get("description", "")
        if kind == 1 and (
            not isinstance(description, str) or not 1 <= len(description) <= _MAX_DESCRIPTION
        ):
            raise _form_error(
                [*where, "description"],
                "BASE_TYPE_BAD_LENGTH",
                f"Must be between 1 and {_MAX_DESCRIPTION} in length.",
            )
        existing = next(
            (c for c in self._commands[scope] if (c["type"], c["name"]) == (kind, name)), None
        )
        entry: JSONObject = {
            **command,
            "id": existing["id"] if existing is not None else str(self._snowflake()),
            "application_id": str(self._emulator.user_id),
            "version": str(self._snowflake()),
            "type": kind,
            "name": name,
            "description": description,
            "default_member_permissions": command.get("default_member_permissions"),
            "nsfw": bool(command.get("nsfw", False)),
        }
        if scope is not None:
            entry["guild_id"] = str(scope)
        return entry

    def _registered(self, name: str) -> tuple[JSONObject | None, int | None]:
        """The synced chat command `name` (the guild's before the global one) and its guild."""
        guild = self._emulator.guild_id
        for scope in (guild, None):
            for command in self._commands[scope]:
                if command["type"] == 1 and command["name"] == name:
                    return command, scope
        return None, None

    def _snowflake(self) -> int:
        return self._emulator._snowflake()


# The guild's roles: what everyone may do, what the bot's role adds, what Moderators add.
_EVERYONE: Final = discord.Permissions(
    view_channel=True,
    send_messages=True,
    read_message_history=True,
    embed_links=True,
    attach_files=True,
    add_reactions=True,
    use_external_emojis=True,
    use_application_commands=True,
    send_messages_in_threads=True,
    create_public_threads=True,
    create_instant_invite=True,
    change_nickname=True,
    connect=True,
    speak=True,
)
_BOT: Final = discord.Permissions(
    view_channel=True, send_messages=True, embed_links=True, read_message_history=True
)
_MODERATOR: Final = discord.Permissions(manage_messages=True)


def _now() -> float:
    return _loop_time()


def _option_type(value: object) -> int:
    if isinstance(value, bool):
        return 5
    if isinstance(value, int):
        return 4
    if isinstance(value, float):
        return 10
    if isinstance(value, str):
        return 3
    if isinstance(value, GuildMember):
        return 6
    raise ValueError(f"no option type for {value!r}")


def _find_component(components: Sequence[Any], custom_id: str) -> JSONObject | None:
    for component in components:
        if not isinstance(component, dict):
            continue
        if component.get("custom_id") == custom_id and not (
            component.get("type") == 2 and component.get("style") == _LINK_STYLE
        ):
            return component
        inner = [*(component.get("components") or ()), component.get("accessory")]
        found = _find_component([c for c in inner if c is not None], custom_id)
        if found is not None:
            return found
    return None


def _decode(message: WSMessage) -> JSONObject | None:
    if message.type is not WSMsgType.TEXT:
        return None
    try:
        payload = json.loads(message.data)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _transport(
    query: Mapping[str, str],
) -> tuple[tuple[int, str] | None, Callable[[bytes], bytes] | None]:
    """What a connection's query asks for: a close (code, reason) when it cannot be served,
    and the compression of what is sent (None: uncompressed text frames)."""
    if query.get("v", _API_VERSION) != _API_VERSION:
        return (4012, "Invalid API version"), None
    if query.get("encoding", "json") != "json":
        return (4002, "emulator: only encoding=json is served"), None
    compress = query.get("compress", "")
    if compress == "":
        return None, None
    if compress == "zlib-stream":
        compressor = zlib.compressobj()
        return None, lambda data: compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    if compress == "zstd-stream":
        encode = _zstd()
        if encode is not None:
            return None, encode
    return (4000, f"emulator: compress={compress} is not served"), None


def _zstd() -> Callable[[bytes], bytes] | None:
    """A zstd stream, from the module discord.py would decompress it with (None: neither)."""
    module: Any
    try:
        module = importlib.import_module("zstandard")
    except ImportError:
        try:
            module = importlib.import_module("compression.zstd")
        except ImportError:
            return None
        compressor = module.ZstdCompressor()
        flush: Any = module.ZstdCompressor.FLUSH_BLOCK
        return lambda data: bytes(compressor.compress(data, mode=flush))
    stream = module.ZstdCompressor().compressobj()
    block: Any = module.COMPRESSOBJ_FLUSH_BLOCK
    return lambda data: bytes(stream.compress(data) + stream.flush(block))
