"""`RedisBudgets`: Discord's budgets shared by every process of one bot, in Redis (SPEC N2, N3).

What it is: while `async with RedisBudgets(url, bot_id=...)` is open, every Discord request
cordstream makes in this process takes a turn in Redis as well as in the process's own pacer
(`cordstream.shell.ratelimit`): a message or an embed counts in the bot's global budget
(`set_global_budget`, 50 per second), a live stream's message request in its channel's budget
for its route (`set_channel_budget`, L2), a typing indicator in its channel's typing bucket
(only when there is room, never late). The keys are the bot's (`{namespace}:{budget:BOT}:...`),
so every process of one bot shares them, whatever it runs.

The one idea: each budget is a sliding log of the bot's grants in a Redis sorted set, checked
and taken in one Lua script on Redis's clock (`TIME`), so processes neither race nor need
synchronised clocks. A grant is counted when it is given, before its request reaches Discord;
Discord counts a request when it receives it, in a fixed window opened by the first one. So the
log's window is the budget's `per` plus `MARGIN`: any window of Discord's holds only requests
granted within `per + MARGIN` of each other, as long as a request reaches Discord within
`MARGIN` of its grant. A spaced live request (not the final edit) leaves one request of its
channel's budget in hand (`keep`), so the final edit of any stream goes at once (L2).

What it never does: block a stream on Redis (N3). A call that fails or takes longer than
`SOCKET_TIMEOUT` falls back, for `COOL_DOWN` seconds, to a pace of this process's own: each
budget divided by the number of the bot's processes Redis last reported (a conservative share,
at least one request per window). It does not order waiting requests across processes: they
try again when their budget has room, and the first to ask gets it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from cordstream.domain.effects import Route
from cordstream.domain.pacing import Budget, Window
from cordstream.shell import budgets

__all__ = ["MARGIN", "RedisBudgets"]

log = logging.getLogger("cordstream.redis")

MARGIN: Final = 0.25
"""Seconds a request may take from its grant to Discord (see the module docstring)."""
SOCKET_TIMEOUT: Final = 1.0
COOL_DOWN: Final = 2.0
"""Seconds of the local pace after Redis failed, before it is asked again."""
ACTIVE: Final = 10.0
"""A process that took a turn within this many seconds counts as one of the bot's."""

# KEYS: the lanes' sorted sets, then the set of the bot's processes.
# ARGV: now-less: the process, a unique member, whether to take at all ("try" or "wait"), then
# per lane: its limit, its window in ms and how many requests it keeps in hand.
# Returns {0, processes} when the turn is taken, {ms to wait, processes} when it is not.
_TAKE: Final = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lanes = #KEYS - 1
local procs = KEYS[#KEYS]
redis.call('ZADD', procs, now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', procs, '-inf', now - tonumber(ARGV[3]))
redis.call('PEXPIRE', procs, tonumber(ARGV[3]) * 2)
local active = redis.call('ZCARD', procs)
local wait = 0
for i = 1, lanes do
  local limit = tonumber(ARGV[3 + 3 * i - 2])
  local window = tonumber(ARGV[3 + 3 * i - 1])
  local keep = tonumber(ARGV[3 + 3 * i])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - window)
  local count = redis.call('ZCARD', KEYS[i])
  if count + keep >= limit then
    local first = count + keep - limit
    local oldest = redis.call('ZRANGE', KEYS[i], first, first, 'WITHSCORES')
    local ready = tonumber(oldest[2]) + window - now + 1
    if ready > wait then wait = ready end
  end
end
if wait > 0 then return {wait, active} end
for i = 1, lanes do
  redis.call('ZADD', KEYS[i], now, ARGV[2])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[3 + 3 * i - 1]) * 2)
end
return {0, active}
"""


@dataclass(frozen=True, slots=True)
class Lane:
    """One shared budget: its Redis key, the budget, and how many requests it keeps in hand."""

    key: str
    budget: Budget
    keep: int = 0

    @property
    def kept(self) -> int:
        """The requests kept in hand: none when the budget has no room for them."""
        return self.keep if self.budget.requests > self.keep else 0

    def args(self) -> list[int]:
        return [self.budget.requests, math.ceil((self.budget.per + MARGIN) * 1000), self.kept]


class RedisBudgets:
    """The bot's Discord budgets in Redis, for this process while open (see the module)."""

    def __init__(
        self,
        url: str,
        *,
        bot_id: int,
        namespace: str = "cordstream",
        client: aioredis.Redis | None = None,
    ) -> None:
        self.prefix = f"{namespace}:{{budget:{bot_id}}}"
        self.process = f"{os.getpid()}-{id(self):x}"
        self._client = client or aioredis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT / 2
        )
        self._script: Any = self._client.register_script(_TAKE)
        self._members = itertools.count()
        self._down_until = -math.inf  # the local pace until then (monotonic clock)
        self._processes = 1  # the bot's processes, as Redis last said
        self._local: dict[str, Window] = {}
        self.taken = 0  # turns taken in Redis
        self.fallbacks = 0  # turns taken on the local pace

    async def __aenter__(self) -> Self:
        budgets.share(self)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        budgets.unshare(self)
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection to Redis (a `RedisBudgets` used without `async with`)."""
        await self._client.aclose()

    # -- what `cordstream.shell.ratelimit` asks (`budgets.Shared`) -----------------------------

    async def request_turn(self) -> float:
        """A message or an embed's turn in the bot's global budget; the seconds waited."""
        return await self.take([self.global_lane()])

    async def channel_turn(self, channel_id: int, route: Route, *, prompt: bool) -> float:
        """A live stream's turn on `route` in its channel's budget (L2); the seconds waited."""
        return await self.take([self.channel_lane(channel_id, route, prompt=prompt)])

    async def typing_turn(self, channel_id: int) -> bool:
        """Whether a typing indicator fits now in the global budget and its channel's."""
        return await self.try_take([self.global_lane(), self.typing_lane(channel_id)])

    # -- the lanes -----------------------------------------------------------------------------

    def global_lane(self) -> Lane | None:
        budget = budgets.global_budget()
        return None if budget is None else Lane(f"{self.prefix}:global", budget)

    def channel_lane(self, channel_id: int, route: Route, *, prompt: bool) -> Lane | None:
        budget = budgets.channel_budget()
        key = f"{self.prefix}:channel:{channel_id}:{route}"
        return None if budget is None else Lane(key, budget, 0 if prompt else 1)

    def typing_lane(self, channel_id: int) -> Lane | None:
        budget = budgets.channel_budget()
        key = f"{self.prefix}:channel:{channel_id}:typing"
        return None if budget is None else Lane(key, budget)

    # -- taking a turn -------------------------------------------------------------------------

    async def take(self, lanes: Sequence[Lane | None]) -> float:
        """Wait until every lane has room, and count one request in each; returns the seconds
        waited. Never raises for Redis: it paces locally instead (N3)."""
        chosen = [lane for lane in lanes if lane is not None]
        waited = 0.0
        while chosen:
            wait = await self._try(chosen)
            if wait <= 0:
                break
            await asyncio.sleep(wait)
            waited += wait
        return waited

    async def try_take(self, lanes: Sequence[Lane | None]) -> bool:
        """Count one request in every lane if each has room now; never waits for room."""
        chosen = [lane for lane in lanes if lane is not None]
        return not chosen or await self._try(chosen) <= 0

    async def _try(self, lanes: Sequence[Lane]) -> float:
        """0 when the turn is taken, else the seconds until it may be."""
        if time.monotonic() >= self._down_until:
            try:
                keys = [*(lane.key for lane in lanes), f"{self.prefix}:processes"]
                member = f"{self.process}:{next(self._members)}"
                args = [self.process, member, int(ACTIVE * 1000)]
                args += [value for lane in lanes for value in lane.args()]
                answer: Any = await self._script(keys=keys, args=args)
                wait_ms, self._processes = int(answer[0]), max(1, int(answer[1]))
            except (TimeoutError, RedisError, OSError) as error:
                self._down_until = time.monotonic() + COOL_DOWN
                log.warning(
                    "shared Discord budgets: Redis failed (%r); pacing this process alone "
                    "(1/%d of each budget) for %.0f s",
                    error,
                    self._processes,
                    COOL_DOWN,
                )
            else:
                if wait_ms <= 0:
                    self.taken += 1
                return wait_ms / 1000
        return self._local_try(lanes)

    def _local_try(self, lanes: Sequence[Lane]) -> float:
        """The conservative local pace: each budget shared evenly by the bot's processes."""
        now = time.monotonic()
        share = [(self._share(lane), self._local.setdefault(lane.key, Window())) for lane in lanes]
        ready = max(window.next_send_time(budget, now) for budget, window in share)
        if ready > now:
            return ready - now
        for budget, window in share:
            window.update_after_send(budget, now)
        self.fallbacks += 1
        return 0.0

    def _share(self, lane: Lane) -> Budget:
        budget = lane.budget
        requests = max(1, (budget.requests - lane.kept) // self._processes)
        return Budget(requests, budget.per + MARGIN)
