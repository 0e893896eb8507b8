"""discord.py is still what `cordstream.shell.discordpy_global_lock` was checked against (B11).

The workaround reads discord.py's private state. These tests fail when discord.py (or Python)
changes underneath it, each with a message naming what to re-verify: first from the code
(`problems()`), then from a live client in the middle of a global 429.
"""

from __future__ import annotations

import asyncio
from types import FrameType
from typing import Any

import discord
import discord.http
import pytest

from cordstream.shell import discordpy_global_lock as lock
from cordstream.shell.testing.emulator import RateLimited
from tests.support.stage import stage

RE_VERIFY = "re-verify cordstream/shell/discordpy_global_lock.py against the installed discord.py: "


def test_B11_the_installed_discord_py_is_what_the_workaround_was_checked_against() -> None:
    found = lock.problems()
    assert not found, RE_VERIFY + "\n".join(found)


def test_B11_an_unchecked_discord_py_version_is_named() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(discord, "__version__", "9.0.0")
        (found,) = lock.problems()
    assert "9.0.0" in found
    assert "CHECKED_VERSIONS" in found


def test_B11_a_request_without_the_locals_read_is_named() -> None:
    async def request(self: object, route: object) -> None:
        await asyncio.sleep(0)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(discord.http.HTTPClient, "request", request)
        found = lock.problems()
    assert any("'is_global', 'retry_after'" in line for line in found), found
    assert any("_global_over.clear()" in line for line in found), found


def _request_frame(task: asyncio.Task[Any]) -> FrameType:
    frames = lock._frames(task)
    request = [f for f in frames if lock._is_request(f)]
    assert request, RE_VERIFY + (
        "no frame of discord.http's HTTPClient.request in a sending task's coroutine chain "
        f"(found {[f.f_code.co_qualname for f in frames]}): re-verify _frames and _is_request"
    )
    return request[-1]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B11_a_client_in_a_global_429_shows_what_the_workaround_reads() -> None:
    async with stage() as s:
        gate = lock.discord_global_gate(s.channel)
        assert isinstance(gate, asyncio.Event), RE_VERIFY + (
            f"a logged-in client's HTTPClient._global_over is {gate!r}, not an asyncio.Event: "
            "re-verify discord_global_gate"
        )
        assert gate.is_set()
        s.api.inject(RateLimited(retry_after=5.0, is_global=True), route="send")
        sending = asyncio.create_task(s.channel.send("Hello"))
        await asyncio.sleep(1.0)
        assert not gate.is_set(), RE_VERIFY + (
            "a global 429 no longer clears HTTPClient._global_over: re-verify the fault itself"
        )
        request = _request_frame(sending)
        names = request.f_locals
        assert (names.get("is_global"), names.get("retry_after")) == (True, 5.0), RE_VERIFY + (
            f"HTTPClient.request's locals read {names.get('is_global')!r}, "
            f"{names.get('retry_after')!r} for a global 429 of 5 s: re-verify global_wait_end"
        )
        sleep = lock._frames(sending)[-1]
        assert sleep.f_code is asyncio.sleep.__code__, RE_VERIFY + (
            f"the request awaits {sleep.f_code.co_qualname}, not asyncio.sleep: "
            "re-verify global_wait_end"
        )
        timer = sleep.f_locals.get("h")
        assert isinstance(timer, asyncio.TimerHandle), RE_VERIFY + (
            "asyncio.sleep's local `h` is not its TimerHandle: re-verify global_wait_end"
        )
        assert lock.global_wait_end(sending) == timer.when() == pytest.approx(5.0)
        await sending
        assert gate.is_set()
