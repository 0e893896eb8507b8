"""A workaround for discord.py's global rate-limit lock, which a cancelled request can leave
closed forever (SPEC B11). The one place cordstream reads discord.py's private state.

Checked against discord.py 2.7.1 (`CHECKED_VERSIONS`), on CPython 3.11, by reading its
`discord/http.py`; `tests/shell/test_discordpy_global_lock.py` fails, naming what to re-verify, when
the installed discord.py is another version or differs from what is read here:
- `channel._state.http._global_over`: the client's lock, an `asyncio.Event` made by
  `HTTPClient.static_login`, set while no request of the client sleeps off a global 429;
- in a task's coroutine chain (`cr_await`, looked through `returns`' awaitable wrappers with
  `gc.get_referents`), the frame of `discord.http`'s `HTTPClient.request` and its locals
  `is_global` and `retry_after`, and the frame of `asyncio.sleep` it awaits, with its locals
  `delay` and `h` (the sleep's `TimerHandle`).

The fault: on a global 429, `HTTPClient.request` clears the lock, sleeps `retry_after`, and sets
it again, but not when it is cancelled during that sleep; every later request of the client
then waits on the lock forever. That sleep is the only unsafe state: a request waiting on the
lock or on its bucket, in flight, or sleeping off a route 429 or a 5xx can be cancelled at any
moment, and while the lock is open nothing can be left closed.

The one idea: do what discord.py would have done. `cancel_requests` cancels a stream's requests
at once; for one sleeping off a global 429 (`global_wait_end`), a keeper task opens the lock the
moment that sleep would have ended, unless something opened it earlier. Where the sleep cannot
be read, such a request is handed over to the background and cancelled the moment the lock is
open again; where the lock cannot be read (`discord_global_gate` says "unknown"), the requests
are left to finish on their own, which wedges nothing. A channel without a discord.py client
has no lock: its requests are cancelled at once. The keepers and the handed-over requests run
in the background (`background_requests`, `drain_background`), each at most `retry_after` long.

What it never does: write to discord.py's state other than `set()` on the lock at the moment
discord.py itself would have, guess a state it cannot read, or hold the caller after it cancels.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
from collections.abc import Iterable
from types import FrameType
from typing import Any, Final, Literal

import discord
import discord.http

__all__ = [
    "CHECKED_VERSIONS",
    "background_requests",
    "cancel_requests",
    "discord_global_gate",
    "drain_background",
    "global_wait_end",
    "problems",
]

CHECKED_VERSIONS: Final = ("2.7.1",)
"""The discord.py versions whose `discord/http.py` was read against this module."""

REQUEST_LOCALS: Final = frozenset({"is_global", "retry_after"})
"""The locals of `HTTPClient.request` read here."""

SLEEP_LOCALS: Final = frozenset({"delay", "h"})
"""The locals of `asyncio.sleep` read here."""

NoClient = Literal["no client"]
Unknown = Literal["unknown"]

_SLEEP_CODE: Final = asyncio.sleep.__code__


def discord_global_gate(channel: object) -> asyncio.Event | NoClient | Unknown:
    """discord.py's global rate-limit lock for the client behind `channel`: an `asyncio.Event`,
    set while no request of the client sleeps off a global 429. `"no client"` when `channel`
    has no discord.py HTTP client (nothing to leak); `"unknown"` when it has one whose lock
    cannot be read."""
    state = getattr(channel, "_state", None)
    http = getattr(state, "http", None)
    if http is None:
        return "no client"
    gate = getattr(http, "_global_over", None)
    return gate if isinstance(gate, asyncio.Event) else "unknown"


def _frames(task: asyncio.Task[Any]) -> list[FrameType]:
    """The frames of the coroutines `task` is suspended in, outermost first. An awaitable that
    hides the coroutine it drives (`coro.__await__()`'s wrapper, as `returns` awaits) is looked
    through with `gc.get_referents`."""
    frames: list[FrameType] = []
    awaited: object = task.get_coro()
    while awaited is not None and len(frames) < 200:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if not isinstance(frame, FrameType):
            inner = [r for r in gc.get_referents(awaited) if inspect.iscoroutine(r)]
            if len(inner) != 1:
                break
            awaited = inner[0]
            continue
        frames.append(frame)
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return frames


def _is_request(frame: FrameType) -> bool:
    """Whether `frame` runs discord.py's `HTTPClient.request`."""
    return frame.f_code.co_name == "request" and frame.f_globals.get("__name__") == "discord.http"


def global_wait_end(task: asyncio.Task[Any]) -> float | Unknown | None:
    """When the global 429 wait that `task` sleeps off in discord.py ends (a loop time); None
    when it sleeps off none (cancelling it leaks nothing); `"unknown"` when that cannot be
    told."""
    frames = _frames(task)
    if not frames or frames[-1].f_code is not _SLEEP_CODE:
        return None  # not sleeping: waiting on a lock or a bucket, in flight, or done
    request = next((f for f in reversed(frames) if _is_request(f)), None)
    if request is None:
        return None  # a sleep outside discord.py's requests: not its lock's
    if not REQUEST_LOCALS.issubset(request.f_code.co_varnames):
        return "unknown"
    names = request.f_locals
    sleep = frames[-1].f_locals
    if names.get("is_global") is not True or sleep.get("delay") != names.get("retry_after"):
        return None  # a route 429's sleep, or a 5xx backoff
    timer = sleep.get("h")
    return timer.when() if isinstance(timer, asyncio.TimerHandle) else "unknown"


# -- the background --------------------------------------------------------------------------


_background: set[asyncio.Task[Any]] = set()


def _keep(task: asyncio.Task[Any]) -> None:
    _background.add(task)
    task.add_done_callback(_background.discard)


def background_requests() -> int:
    """How many tasks cancelled streams left in the background (lock keepers, and requests
    handed over) still run, in the whole process."""
    return sum(1 for task in _background if not task.done())


async def drain_background() -> None:
    """Wait until every task cancelled streams left in the background on this loop has ended."""
    loop = asyncio.get_running_loop()
    while pending := {t for t in _background if t.get_loop() is loop and not t.done()}:
        await asyncio.wait(pending)


def cancel_requests(channel: object, tasks: Iterable[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Cancel a cancelled stream's requests without wedging discord.py. Returns the requests
    cancelled now, for the caller to await; the others are handed over to the background."""
    live = {task for task in tasks if not task.done()}
    if not live:
        return set()
    gate = discord_global_gate(channel)
    if gate == "no client" or (isinstance(gate, asyncio.Event) and gate.is_set()):
        for task in live:
            task.cancel()
        return live
    loop = next(iter(live)).get_loop()
    if not isinstance(gate, asyncio.Event):
        for task in live:
            _keep(task)  # cannot tell: left to finish on their own, which wedges nothing
        return set()
    cancelled: set[asyncio.Task[Any]] = set()
    handed: set[asyncio.Task[Any]] = set()
    for task in live:
        end = global_wait_end(task)
        if end == "unknown":
            handed.add(task)
            continue
        if end is not None:
            _keep(loop.create_task(_reopen(gate, end)))
        task.cancel()
        cancelled.add(task)
    if handed:
        for task in handed:
            _keep(task)
        _keep(loop.create_task(_reap(handed, gate)))
    return cancelled


async def _reopen(gate: asyncio.Event, at: float) -> None:
    """Open discord.py's global lock at `at`, as the cancelled request sleeping until then
    would have (unless something opened it before)."""
    loop = asyncio.get_running_loop()
    while not gate.is_set() and (left := at - loop.time()) > 0:
        opened = asyncio.ensure_future(gate.wait())
        try:
            await asyncio.wait({opened}, timeout=left)
        finally:
            opened.cancel()
    gate.set()


async def _reap(tasks: set[asyncio.Task[Any]], gate: asyncio.Event) -> None:
    """Cancel `tasks` the moment `gate` is open (never while it is closed)."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        if gate.is_set():
            for task in pending:
                task.cancel()  # no await between the check and the cancel
            break
        opened = asyncio.ensure_future(gate.wait())
        try:
            await asyncio.wait({opened, *pending}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
        pending = {task for task in pending if not task.done()}
    if pending:
        await asyncio.wait(pending)


# -- what to re-verify ---------------------------------------------------------------------------


def problems() -> tuple[str, ...]:
    """What differs, in the installed discord.py and Python, from what this module was checked
    against: one sentence each, naming what to re-verify (empty when nothing does). Read from
    the code, without a client; `tests/shell/test_discordpy_global_lock.py` runs it, and checks the
    same against a live client."""
    found: list[str] = []
    if discord.__version__ not in CHECKED_VERSIONS:
        found.append(
            f"discord.py {discord.__version__} is not among CHECKED_VERSIONS "
            f"{CHECKED_VERSIONS}: read its discord/http.py (HTTPClient.request and "
            "static_login) against this module's docstring, then add the version"
        )
    request = getattr(discord.http.HTTPClient, "request", None)
    code = getattr(request, "__code__", None)
    if code is None or not inspect.iscoroutinefunction(request):
        found.append("HTTPClient.request is no longer a coroutine function: re-verify _frames")
    else:
        missing = REQUEST_LOCALS - set(code.co_varnames)
        if missing:
            found.append(
                f"HTTPClient.request has no local {sorted(missing)}: re-verify global_wait_end"
            )
        source = inspect.getsource(request)
        found.extend(
            f"HTTPClient.request no longer has `{line}`: re-verify how it closes and opens "
            "its global lock, and whether the workaround is still needed"
            for line in (
                "await self._global_over.wait()",
                "self._global_over.clear()",
                "await asyncio.sleep(retry_after)",
                "self._global_over.set()",
            )
            if line not in source
        )
    login = getattr(discord.http.HTTPClient, "static_login", None)
    if login is None or "self._global_over = asyncio.Event()" not in inspect.getsource(login):
        found.append(
            "HTTPClient.static_login no longer makes _global_over an asyncio.Event: "
            "re-verify discord_global_gate"
        )
    missing_sleep = SLEEP_LOCALS - set(_SLEEP_CODE.co_varnames)
    if missing_sleep:
        found.append(
            f"asyncio.sleep has no local {sorted(missing_sleep)} on this Python: "
            "re-verify global_wait_end"
        )
    return tuple(found)
