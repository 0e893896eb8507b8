"""`RedisStopRegistry` against a real `redis-server` on 127.0.0.1 (SPEC N1, N3).

Two registries on one Redis are two processes' views of one registry: most tests here run
them in one event loop (each with its own orchestrator and its own local Discord), and the
last ones in real OS processes. Everything waits on real conditions (a message in a channel,
a line a process printed), each bounded so that a fault fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import textwrap
from asyncio.subprocess import Process
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final

import pytest

from cordstream.domain.requests import StopRequest
from cordstream.shell import (
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    StreamResult,
    TurnResult,
)
from cordstream.shell.redis_stops import RedisStopRegistry
from cordstream.shell.stops import StopReader, StopRegistry
from cordstream.shell.testing import DiscordEmulator, Hang, ScriptProvider, local_discord
from cordstream.shell.testing.redis import RedisServer, free_port, redis_server

pytestmark = pytest.mark.asyncio

BOUND: Final = 10.0  # seconds: a step that takes longer is stuck
LIVE: Final = StreamConfig()  # live: the first text shows at once


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as found:
        yield found


@asynccontextmanager
async def registries(server: RedisServer, count: int = 2) -> AsyncIterator[list[RedisStopRegistry]]:
    """`count` registries on one namespace of their own: `count` processes' views."""
    namespace = f"test-{free_port()}-{id(server)}"
    opened = [RedisStopRegistry(server.url, namespace=namespace) for _ in range(count)]
    for registry in opened:
        await registry.__aenter__()
    try:
        yield opened
    finally:
        for registry in opened:
            await registry.__aexit__(None, None, None)


async def shown(api: DiscordEmulator, text: str) -> None:
    """Until the channel shows `text`."""
    async with asyncio.timeout(BOUND):
        while text not in api.text():
            await asyncio.sleep(0.005)


async def until(condition: object, what: str) -> None:
    async with asyncio.timeout(BOUND):
        while not callable(condition) or not condition():
            await asyncio.sleep(0.005)


async def test_N1_a_stop_in_one_process_stops_a_stream_in_another(server: RedisServer) -> None:
    async with registries(server) as (here, there), local_discord() as (api, _, channel):
        streaming = asyncio.ensure_future(
            StreamOrchestrator(here).stream_to_discord(
                ScriptProvider(["First line.\n", Hang()]), LIVE, StreamContext(channel)
            )
        )
        await shown(api, "First line.")
        assert await there.request_stop(channel.id, "42", {"why": "enough"})
        async with asyncio.timeout(BOUND):
            result = await streaming
        assert result.status == "stopped_by_user"
        assert result.stop_context == {"why": "enough"}  # it crossed as JSON
        assert len(here) == len(there) == 0  # consumed in both views


async def test_N1_the_requesting_process_gets_its_own_context_object(server: RedisServer) -> None:
    marker = object()  # not JSON: only its own process can hand it back
    async with registries(server, 1) as (only,), local_discord() as (api, _, channel):
        orchestrator = StreamOrchestrator(only)
        streaming = asyncio.ensure_future(
            orchestrator.stream_to_discord(
                ScriptProvider(["Hi\n", Hang()]), LIVE, StreamContext(channel)
            )
        )
        await shown(api, "Hi")
        assert await only.request_stop(channel.id, "7", marker)
        async with asyncio.timeout(BOUND):
            result = await streaming
        assert result.stop_context is marker


async def test_B4_C5_a_waiting_stop_is_taken_by_one_stream_of_two_started_at_once(
    server: RedisServer,
) -> None:
    async with (
        registries(server) as (here, there),
        local_discord() as (api, _, channel),
    ):
        assert await here.request_stop(channel.id, "42")
        await until(lambda: there.has_stop_request(channel.id), "seen in the other view too")
        first = here.reader(channel.id)
        second = there.reader(channel.id)
        taken = await asyncio.gather(first.start(), second.start())
        assert sorted(len(pending) for pending in taken) == [0, 1]
        first.close()
        second.close()
        del api


async def test_C9_is_answering_and_a_follow_up_see_every_process(server: RedisServer) -> None:
    async with registries(server) as (here, there), local_discord() as (api, _, channel):
        streaming = asyncio.ensure_future(
            StreamOrchestrator(here).stream_to_discord(
                ScriptProvider(["Answering bob.\n", Hang()]),
                LIVE,
                StreamContext(channel, answering=99),
            )
        )
        await shown(api, "Answering bob.")
        await until(lambda: there.is_answering(channel.id, 99), "bob's answer seen")
        assert not there.is_answering(channel.id, 98)
        assert await there.request_follow_up(channel.id, "99")
        async with asyncio.timeout(BOUND):
            result = await streaming
        assert result.status == "follow_up_interrupt"
        await until(lambda: not there.is_answering(channel.id, 99), "the stream's end seen")


async def test_C1_discard_forgets_a_pending_request_in_every_process(server: RedisServer) -> None:
    async with registries(server) as (here, there):
        assert await here.request_stop(5, "42")
        await until(lambda: there.has_stop_request(5), "seen there")
        dropped = await there.discard(5)
        assert [request.requester_id for request in dropped] == ["42"]
        await until(lambda: not here.has_stop_request(5), "gone here too")


async def test_C5_a_request_consumed_through_the_registry_is_gone_in_every_process(
    server: RedisServer,
) -> None:
    async with registries(server) as (here, there):
        assert await here.request_stop(7, "42")
        await until(lambda: there.has_stop_request(7), "seen there")
        request = there.peek(7)
        assert request is not None
        assert request.requester_id == "42"
        there.consume(7, request)
        assert not there.has_stop_request(7)  # at once where it was consumed
        await until(lambda: not here.has_stop_request(7), "gone here too")


async def test_N3_a_request_redis_took_counts_as_made_while_this_process_lags_behind(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Appended, but this process does not read its change back within `OPEN_TIMEOUT` (its
    reading of Redis lags): every other process applies it, so it is not reported refused."""
    caplog.set_level(logging.WARNING, logger="cordstream")
    async with registries(server) as (here, there):
        following = here._running[0]  # this process's reading of the changes: stalled
        following.cancel()
        await asyncio.wait([following])
        assert await here.request_stop(6, "42") is True
        await until(lambda: there.has_stop_request(6), "applied by the other process")
    assert any("not yet read back here" in record.getMessage() for record in caplog.records)


async def test_N3_an_unreachable_redis_refuses_requests_and_streams_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="cordstream")
    closed = f"redis://127.0.0.1:{free_port()}/0"
    async with RedisStopRegistry(closed) as stops, local_discord() as (api, _, channel):
        assert await stops.request_stop(channel.id, "42") is False
        result: StreamResult = await StreamOrchestrator(stops).stream_to_discord(
            ScriptProvider(["Still answered."]), LIVE, StreamContext(channel)
        )
        assert result.status == "completed"
        assert api.text() == "Still answered."
    assert any("not registered" in r.getMessage() for r in caplog.records)


CHILD: Final = textwrap.dedent(
    """
    import asyncio, sys
    from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator
    from cordstream.shell.redis_stops import RedisStopRegistry
    from cordstream.shell.testing import Hang, ScriptProvider, local_discord

    async def main(url: str, namespace: str) -> None:
        async with RedisStopRegistry(url, namespace=namespace, heartbeat=0.2) as stops:
            async with local_discord() as (api, _, channel):
                provider = ScriptProvider(["Streaming in the child.\\n", Hang()])
                context = StreamContext(channel, answering=77)
                streaming = asyncio.ensure_future(
                    StreamOrchestrator(stops).stream_to_discord(provider, StreamConfig(), context)
                )
                while "Streaming in the child." not in api.text():
                    await asyncio.sleep(0.005)
                print("channel", channel.id, flush=True)
                result = await streaming
                print("result", result.status, result.stop_context, flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_N1_a_stream_in_another_os_process_is_stopped_from_this_one(
    server: RedisServer,
) -> None:
    namespace = f"os-{free_port()}"
    child, channel_id = await child_streaming(server, namespace)
    try:
        assert child.stdout is not None
        async with RedisStopRegistry(server.url, namespace=namespace) as stops:
            assert await stops.request_stop(channel_id, "42", "from the parent")
            async with asyncio.timeout(BOUND):
                said = (await child.stdout.readline()).decode().strip().split(maxsplit=2)
        assert said == ["result", "stopped_by_user", "from the parent"]
        async with asyncio.timeout(BOUND):
            assert await child.wait() == 0
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


async def child_streaming(server: RedisServer, namespace: str) -> tuple[Process, int]:
    """A child process streaming (hanging) an answer to user 77; its channel's id."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        server.url,
        namespace,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    async with asyncio.timeout(60):
        line = (await child.stdout.readline()).decode().split()
    assert line[0] == "channel", line
    return child, int(line[1])


async def test_N3_a_worker_killed_mid_stream_is_forgotten_and_leaves_nothing_owed(
    server: RedisServer,
) -> None:
    namespace = f"kill-{free_port()}"
    child, channel_id = await child_streaming(server, namespace)
    try:
        async with RedisStopRegistry(server.url, namespace=namespace, heartbeat=0.2) as stops:
            await until(lambda: stops.is_answering(channel_id, 77), "the child's stream seen")
            child.send_signal(signal.SIGKILL)
            await child.wait()
            await until(lambda: not stops.is_answering(channel_id, 77), "the dead stream gone")
            # A stop for the dead stream's answer now waits for the next stream to that user.
            assert await stops.request_stop(channel_id, "42", answering=77)
            reader = stops.reader(channel_id, 77)
            assert [r.requester_id for r in await reader.start()] == ["42"]
            reader.close()
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


async def test_N3_after_redis_restarts_a_stop_still_reaches_a_stream(server: RedisServer) -> None:
    async with registries(server) as (here, there), local_discord() as (api, _, channel):
        streaming = asyncio.ensure_future(
            StreamOrchestrator(here).stream_to_discord(
                ScriptProvider(["Before the restart.\n", Hang()]), LIVE, StreamContext(channel)
            )
        )
        await shown(api, "Before the restart.")
        await asyncio.to_thread(server.restart)  # every change in Redis is lost with it
        async with asyncio.timeout(BOUND):
            while not await there.request_stop(channel.id, "42"):  # reconnected by itself
                await asyncio.sleep(0.05)
        async with asyncio.timeout(BOUND):
            result = await streaming
        assert result.status == "stopped_by_user"


async def test_N3_a_redis_that_never_answers_delays_nothing_for_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hung Redis (it accepts connections, then says nothing): requests are refused after
    the socket timeout, and a stream opens on its own view and answers."""
    caplog.set_level(logging.WARNING, logger="cordstream")

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    hung = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = hung.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(BOUND):
            async with (
                RedisStopRegistry(f"redis://127.0.0.1:{port}/0") as stops,
                local_discord() as (api, _, channel),
            ):
                assert await stops.request_stop(channel.id, "42") is False
                result = await StreamOrchestrator(stops).stream_to_discord(
                    ScriptProvider(["Answered anyway."]), LIVE, StreamContext(channel)
                )
                assert result.status == "completed"
                assert api.text() == "Answered anyway."
    finally:
        hung.close()
        await hung.wait_closed()
    assert any("opened locally only" in r.getMessage() for r in caplog.records)


async def test_K2_C9_the_bot_kit_on_a_shared_registry_a_click_here_a_stop_there(
    server: RedisServer,
) -> None:
    """`ChatBot` with a `RedisStopRegistry`: alice's Stop click is registered (in the
    background: a click waits for nothing) and stops her answer; a stop made through another
    process's view stops bob's."""
    from cordstream.shell.bot import ChatBot  # noqa: PLC0415
    from cordstream.shell.cli.botdemo import ScriptedAnswer  # noqa: PLC0415
    from cordstream.shell.testing import local_bot  # noqa: PLC0415

    def model(messages: Sequence[Mapping[str, object]]) -> ScriptedAnswer:
        return ScriptedAnswer([f"Answering: {messages[-1]['content']}\n", Hang()])

    turns: asyncio.Queue[TurnResult] = asyncio.Queue()
    async with registries(server) as (here, there):
        bot = ChatBot(
            model,
            orchestrator=StreamOrchestrator(here),
            on_turn=lambda _, turn: turns.put_nowait(turn),
            guild_ready_timeout=0.05,
        )
        async with asyncio.timeout(60), local_bot(bot) as api:
            alice, bob = api.add_member("alice"), api.add_member("bob")
            await api.user_says(alice, f"<@{api.user_id}> first")
            shown_alice = await api.wait_for_message(lambda m: "Answering: " in m.content)
            ((button,),) = [row["components"] for row in shown_alice.components]
            pressed = await api.click(alice, shown_alice.id, str(button["custom_id"]))
            turn = await turns.get()
            assert turn.status == "stopped_by_user"
            assert turn.final.stop_context is not None
            assert getattr(turn.final.stop_context, "id", None) == pressed.id  # the click (C7)

            await api.user_says(bob, f"<@{api.user_id}> second")
            await until(lambda: there.is_answering(api.channel_id, bob.id), "bob's answer")
            assert await there.request_stop(api.channel_id, "mod", answering=bob.id)
            turn = await turns.get()
            assert turn.status == "stopped_by_user"


class _LateReader(StopReader):
    """A reader that opens asynchronously, as a shared registry's does, and a stop that lands
    while it opens: after its pending entries were read, before the stream has started."""

    async def start(self) -> list[StopRequest]:  # type: ignore[override]
        pending = super().start()
        self._registry.request_stop(self.channel_id, "in the gap")
        await asyncio.sleep(0)  # the registry's listener runs now, before the stream started
        return pending


class _LateRegistry(StopRegistry):
    def reader(self, channel_id: int, answering: int | None = None) -> StopReader:
        opened = _LateReader(self, channel_id, answering)
        self._readers.setdefault(channel_id, []).append(opened)
        return opened


async def test_B4_a_stop_that_lands_while_a_reader_opens_ends_the_stream_and_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="cordstream")
    stops = _LateRegistry()
    async with local_discord() as (api, _, channel):
        provider = ScriptProvider(["never said", Hang()])
        async with asyncio.timeout(BOUND):
            result = await StreamOrchestrator(stops).stream_to_discord(
                provider, LIVE, StreamContext(channel)
            )
    assert (result.status, result.stop_context, result.anomalies) == ("stopped_by_user", None, ())
    assert provider.calls == []  # B4: resolved before the provider started
    assert api.text() == ""
    assert len(stops) == 0  # consumed
    assert not [r for r in caplog.records if r.name.startswith("cordstream")]


async def test_C9_N1_a_slash_stop_in_the_gateway_stops_an_answer_a_worker_streams(
    server: RedisServer,
) -> None:
    """The bot's `/stop` (its process: registry `here`) reaches an answer that another
    process streams (registry `there`, the same channel), which no turn of the bot's holds."""
    from cordstream.shell.bot import ChatBot  # noqa: PLC0415
    from cordstream.shell.cli.botdemo import ScriptedAnswer  # noqa: PLC0415
    from cordstream.shell.testing import local_bot  # noqa: PLC0415

    def model(messages: Sequence[Mapping[str, object]]) -> ScriptedAnswer:
        return ScriptedAnswer(["Not asked here."])

    async with registries(server) as (here, there):
        bot = ChatBot(model, orchestrator=StreamOrchestrator(here), guild_ready_timeout=0.05)
        async with asyncio.timeout(60), local_bot(bot) as api:
            alice = api.add_member("alice")
            channel = bot.get_partial_messageable(api.channel_id)
            worker = asyncio.ensure_future(
                StreamOrchestrator(there).stream_to_discord(
                    ScriptProvider(["From the worker.\n", Hang()]),
                    LIVE,
                    StreamContext(channel, answering=alice.id),
                )
            )
            await api.wait_for_message(lambda m: "From the worker." in m.content)
            await until(lambda: here.is_answering(api.channel_id, alice.id), "seen here")
            stopped = await api.slash(alice, "stop")
            await stopped.wait_until(lambda record: record.state == "responded")
            assert [m.content for m in stopped.ephemeral] == ["Stopping your answer."]
            result = await worker
            assert result.status == "stopped_by_user"
