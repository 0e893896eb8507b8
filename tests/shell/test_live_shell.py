"""Live delivery through the real shell (SPEC L): a real discord.py client against the local
emulator with Discord's rate limits on, on looptime's virtual clock.

The emulator's history (`DiscordEmulator.history`) is what a user saw: every create, edit and
deletion with its time. The channel budget (`cordstream.shell.ratelimit`, L2) is at its
default, Discord's 5 requests per 5 s per channel.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Sequence
from typing import Final

import pytest

from cordstream.shell import StreamConfig, StreamResult, ratelimit
from cordstream.shell.testing.emulator import Change, ErrorReply, RateLimited, RateLimits
from tests.support.answers import as_written
from tests.support.stage import Do, Hang, ScriptProvider, Sleep, Step, other_tasks, stage

CURSOR: Final = "\u258c"
LIVE: Final = StreamConfig(delivery="live")


@pytest.fixture(autouse=True)
def channel_budget() -> Iterator[None]:
    previous = ratelimit.set_channel_budget(ratelimit.DISCORD_CHANNEL)
    try:
        yield
    finally:
        ratelimit.set_channel_budget(previous)


def paced(text: str, *, size: int = 4, rate: float = 50.0) -> list[Step]:
    """`text` in `size`-character chunks, `rate` chunks per second."""
    steps: list[Step] = []
    for start in range(0, len(text), size):
        steps += [text[start : start + size], Sleep(1 / rate)]
    return steps


def shown_text(change: Change) -> str:
    return change.content.rstrip(CURSOR).rstrip()


def longest_wait(history: Sequence[Change], start: float, end: float) -> float:
    """The longest time without new text in the channel between `start` and `end`."""
    moments = [start]
    seen: dict[int, str] = {}
    for change in history:
        text = shown_text(change)
        if len(text) > len(seen.get(change.message_id, "")) and start <= change.at <= end:
            moments.append(change.at)
        seen[change.message_id] = text
    moments.append(end)
    return max(b - a for a, b in itertools.pairwise(moments))


ANSWER: Final = (
    "Live delivery shows the answer as it grows.\n\n"
    + "".join(f"- point {i}: a line of the answer with some words in it\n" for i in range(30))
    + "\n```python\n"
    + "".join(f"print({i})  # code line {i}\n" for i in range(40))
    + "```\nThat is all.\n"
) * 3


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_L1_L2_at_50_chunks_a_second_text_shows_at_once_and_never_waits_long() -> None:
    async with stage() as s:
        s.api.rate_limits = RateLimits()
        provider = ScriptProvider(paced(ANSWER))
        started = asyncio.get_running_loop().time()
        result = await s.stream(provider, LIVE)
        assert result.status == "completed"
        history = s.api.history()
        last_chunk = provider.last_chunk_at
        assert last_chunk is not None
        # L1: the first characters are in the channel at once, as a reply.
        assert history[0].kind == "create"
        assert history[0].at - started <= 0.3
        # L2: about one edit a second, so text never waits long, and no 429.
        assert longest_wait(history, history[0].at, last_chunk) <= 1.5
        assert history[-1].at - last_chunk <= 1.5
        assert s.api.rate_limit_hits == {}
        # L5: rolled over into few, full messages; the answer arrives whole.
        assert result.messages_sent <= -(-len(ANSWER) // 1950) + 2
        assert [m.content for m in s.api.messages()] == list(result.messages)
        as_written(result.messages, ANSWER, closers=True, fences=True)
        assert not any(CURSOR in m for m in result.messages)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_L2_three_live_streams_in_one_channel_share_its_budget_without_a_429() -> None:
    async with stage() as s:
        s.api.rate_limits = RateLimits()
        answers = [f"Stream {n} says: " + "word " * 400 for n in range(3)]
        providers = [ScriptProvider(paced(a)) for a in answers]
        started = asyncio.get_running_loop().time()
        results = await asyncio.gather(*(s.stream(p, LIVE) for p in providers))
        assert all(r.status == "completed" for r in results)
        assert s.api.rate_limit_hits == {}
        history = s.api.history()
        for result, provider in zip(results, providers, strict=True):
            ids = {c.message_id for c in history if c.content and shown_text(c) in result.messages}
            mine = [c for c in history if c.message_id in ids]
            assert provider.last_chunk_at is not None
            assert longest_wait(mine, mine[0].at, provider.last_chunk_at) <= 4.0
            assert mine[0].at - started <= 4.0


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(
    ("answer", "rate"),
    [
        ("word " * 600, 50.0),  # prose: one message after another
        # A code block over several messages at 50 characters a second: each rollover closes
        # the block in one message and reopens it in the next, a create and an edit.
        ("```python\n" + "".join(f"x_{n} = {n} * 7  # step\n" for n in range(200)) + "```\n",
         12.5),
    ],
)  # fmt: skip
async def test_L2_one_stream_spends_the_window_whole_and_ends_at_once(
    answer: str, rate: float
) -> None:
    # The model outruns Discord. The requests are spaced while the model writes (at most a
    # spacing apart, the window spent whole), never meet a full bucket, and the final edit
    # goes the moment the model ends.
    async with stage() as s:
        s.api.rate_limits = RateLimits()
        provider = ScriptProvider(paced(answer, rate=rate))
        result = await s.stream(provider, LIVE)
        assert result.status == "completed"
        assert s.api.rate_limit_hits == {}
        times = [r.at for r in s.api.requests if r.kind in ("send", "edit")]
        assert (
            max(b - a for a, b in itertools.pairwise(times))
            <= ratelimit.spacing(ratelimit.DISCORD_CHANNEL) + 0.01
        )
        assert provider.last_chunk_at is not None  # the model ends one pause after it
        assert times[-1] - provider.last_chunk_at <= 1 / rate + 0.01


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_L1_typing_shows_while_the_model_thinks_before_any_text() -> None:
    async with stage() as s:
        result = await s.stream(ScriptProvider([Sleep(20.0), "Finally."]), LIVE)
        assert result.messages == ("Finally.",)
        typing = [r for r in s.api.requests if r.kind == "typing"]
        assert len(typing) >= 3  # at the start, then renewed while nothing was shown


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_L9_a_moderator_deleting_the_live_message_ends_the_stream_quietly() -> None:
    async with stage() as s:
        deleted: list[int] = []

        def delete() -> None:
            message = s.api.messages()[0]
            s.api.delete_message(message.id)
            deleted.append(message.id)

        steps: list[Step] = ["The answer begins", Sleep(2.0), Do(delete), " and goes on"]
        provider = ScriptProvider([*steps, Sleep(2.0), " and on", Hang()])
        result = await s.stream(provider, LIVE)
        assert result.status == "stopped_by_user"
        assert result.stop_reason == "message_deleted"
        assert result.messages == ()
        assert result.accumulated_text == ""
        assert provider.closed_at is not None
        assert s.api.messages() == []
        assert s.embeds == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_L4_the_callers_cancellation_still_takes_the_cursor_away() -> None:
    async with stage() as s:
        provider = ScriptProvider(["Some text that is shown", Hang()])
        task = asyncio.ensure_future(s.stream(provider, LIVE))
        while not s.api.messages() or CURSOR not in s.api.messages()[0].content:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [m.content for m in s.api.messages()] == ["Some text that is shown"]
        assert not other_tasks() - {t for t in other_tasks() if "aiohttp" in repr(t)}


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_L4_L7_a_timeout_leaves_no_cursor_and_the_embed_follows() -> None:
    async with stage() as s:
        provider = ScriptProvider(["Half an answer", Hang()])
        result = await s.stream(provider, StreamConfig(delivery="live", inactivity_timeout=5.0))
        assert result.status == "timeout"
        assert s.contents == ["Half an answer"]
        assert len(s.embeds) == 1
        assert result.messages == ("Half an answer",)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_L3_what_a_message_shows_only_grows() -> None:
    async with stage() as s:
        s.api.rate_limits = RateLimits()
        text = "Some **bold** words, `code` and (a remark) " * 30 + "\n```js\nlet x = 1;\n```\nEnd."
        result: StreamResult = await s.stream(ScriptProvider(paced(text, size=3)), LIVE)
        by_message: dict[int, list[str]] = {}
        for change in s.api.history():
            by_message.setdefault(change.message_id, []).append(shown_text(change))
        for contents in by_message.values():
            for before, after in itertools.pairwise(contents):
                common = len(before)
                while not after.startswith(before[:common]):
                    common -= 1
                assert all(c in '*~`)"\n' for c in before[common:]), (before[-30:], after[-30:])
        assert result.status == "completed"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_B11_a_timeout_while_typing_sleeps_off_a_global_429_leaves_the_client_usable() -> (
    None
):
    """Found by the soak once live delivery made every stream show typing: the stream had
    ended, the call waited for its typing request (asleep in discord.py's global 429), and
    the caller's timeout cancelled that wait. Cancelling the wait must not cancel the request
    behind `cancel_requests`' back, or discord.py's global lock stays closed for good."""
    async with stage() as s:
        s.api.inject(RateLimited(retry_after=1.0, is_global=True), route="typing", times=2)
        s.api.inject(ErrorReply(403, 50013, "Missing Permissions"), route="send")
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() + 0.01, s.stops.request_stop, s.channel.id, "user-1")
        provider = ScriptProvider(["Hello there", Sleep(0.2), " more", Hang()])
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.0):
                await s.stream(provider, LIVE)
        await ratelimit.drain_background()
        async with asyncio.timeout(30.0):
            await s.channel.send("probe")  # the client is not wedged
        assert s.api.messages()[-1].content == "probe"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_L9_a_message_deleted_before_its_final_edit_leaves_the_result_too() -> None:
    """At a rollover that would show nothing new, the next message is created first and the
    finished one gets its final edit a turn later; a moderator deleting it in between ends
    the stream as L9 says, and only the message still in the channel is in the result."""
    async with stage() as s:
        s.api.rate_limits = RateLimits()
        shown: dict[int, str] = {}
        deleted: list[int] = []

        def watch(change: Change) -> None:
            if change.kind == "create" and shown and not deleted:
                first = next(iter(shown))
                if shown[first].endswith(CURSOR):  # its final edit has not come yet
                    s.api.delete_message(first)
                    deleted.append(first)
            if change.kind != "delete":
                shown[change.message_id] = change.content

        s.api.on_change(watch)
        # A paragraph that ends near the message's end, then a code block that outgrows the
        # room left: it is held back (L5), and the message ends where it already ends.
        prose = ("alpha beta gamma delta " * 80)[:1689].rstrip() + "\n"
        code = "".join(f"print({i})  # code line {i}\n" for i in range(40))
        text = prose + "```python\n" + code + "```\nDone.\n"
        result = await s.stream(ScriptProvider(paced(text)), LIVE)
        assert deleted, "no rollover created the next message before the final edit"
        assert result.status == "stopped_by_user"
        assert result.stop_reason == "message_deleted"
        assert list(result.messages) == [m.content for m in s.api.messages()]
        assert deleted[0] not in {m.id for m in s.api.messages()}
