"""The shell against real parts: discord.py talking to the local Discord emulator (SPEC B, C, F, G).

Every test runs on looptime's virtual clock: timeouts, hangs, discord.py's retries and the
humanizer's pauses cost no real seconds, and "within 50 ms" is measured exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import discord
import pytest

import cordstream.domain as domain_pkg
import cordstream.shell.orchestrator as orchestrator_module
from cordstream.domain import (
    ChunkArrived,
    Delivered,
    DoneChunk,
    Effect,
    ErrorChunk,
    Event,
    FunctionCall,
    FunctionCallChunk,
    ProviderCrashed,
    ProviderError,
    TextChunk,
    Thought,
    TimerFired,
)
from cordstream.domain.machine import StreamState
from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator
from cordstream.shell.testing.emulator import (
    INTERNAL_SERVER_ERROR,
    MISSING_ACCESS,
    MISSING_PERMISSIONS,
    UNKNOWN_CHANNEL,
    Delay,
    Drop,
    RateLimited,
)
from tests.support.stage import (
    Do,
    Hang,
    Raw,
    ScriptProvider,
    Sleep,
    Stage,
    Step,
    other_tasks,
    stage,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


# -- B: the loop --------------------------------------------------------------------------------


async def test_B1_a_plain_answer_completes_and_lands_in_the_channel() -> None:
    async with stage() as s:
        # Paced like a model: each line leaves as soon as it is complete (E9 degree 1).
        provider = ScriptProvider(
            ["Hello there!\n", Sleep(0.5), "Second line\n", Sleep(0.5), "Last"]
        )
        result = await s.stream(provider)
        assert result.status == "completed"
        assert s.contents == ["Hello there!", "Second line", "Last"]


@pytest.mark.parametrize(
    "provider",
    [
        ScriptProvider(["Hi\n", RuntimeError("model exploded")]),
        ScriptProvider(["Hi\n", 42]),
        ScriptProvider(["Hi\n"], raise_in_process=ValueError("bad chunk")),
    ],
    ids=["provider-raises", "garbage-chunk", "process-chunk-raises"],
)
async def test_B1_whatever_the_provider_does_becomes_one_result(provider: ScriptProvider) -> None:
    async with stage() as s:
        result = await s.stream(provider)
        assert result.status == "error"
        assert isinstance(result.data, Exception)
        assert provider.closed


async def test_B10_the_script_provider_notes_what_the_shell_did_to_it() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        gate = asyncio.Event()
        loop.call_later(2, gate.set)
        steps: list[Step] = ["a\n", Do(gate.wait), Raw("as is"), "never"]
        provider = ScriptProvider(steps)
        start = loop.time()
        result = await s.stream(provider)
        assert result.status == "error"  # B13: a str from process_chunk is garbage
        assert provider.calls == ["start", "process", "process", "close"]
        assert provider.started_at == start
        assert provider.last_chunk_at == provider.closed_at == provider.aclose_at == start + 2
        assert provider.reached == {"garbage"}
        assert provider.running == 0


async def test_B1_start_stream_raising_is_a_result() -> None:
    class Broken(ScriptProvider):
        def start_stream(
            self, config: StreamConfig, context: StreamContext
        ) -> AsyncIterator[object]:
            raise ConnectionError("no route to model")

    async with stage() as s:
        result = await s.stream(Broken([]))
        assert result.status == "error"
        assert isinstance(result.data, ConnectionError)


async def test_B1_a_channel_without_an_id_is_an_error_result_not_an_exception() -> None:
    class NoId(discord.abc.Messageable):
        async def _get_channel(self) -> discord.abc.MessageableChannel:
            raise NotImplementedError

    orchestrator = StreamOrchestrator()
    result = await orchestrator.stream_to_discord(
        ScriptProvider(["x"]), StreamConfig(delivery="messages"), StreamContext(NoId())
    )
    assert result.status == "error"
    assert isinstance(result.data, TypeError)


async def test_B2_the_deadline_fires_while_the_provider_hangs() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        provider = ScriptProvider(["Thinking out loud\n", Sleep(2), "more", Hang()])
        start = loop.time()
        result = await s.stream(provider, StreamConfig(delivery="messages", inactivity_timeout=30))
        elapsed = loop.time() - start
        assert result.status == "timeout"
        assert 32.0 <= elapsed <= 32.05  # the last chunk at 2 s, then 30 s of silence
        assert provider.closed


async def test_B2_any_chunk_rearms_the_deadline_even_empty_keep_alives() -> None:
    async with stage() as s:
        steps: list[object] = []
        for _ in range(5):
            steps += [Sleep(20), ""]  # keep-alive text every 20 s, timeout is 30 s
        provider = ScriptProvider([*steps, "done"])
        result = await s.stream(provider, StreamConfig(delivery="messages", inactivity_timeout=30))
        assert result.status == "completed"
        assert s.contents == ["done"]


async def test_B3_a_stop_ends_a_hanging_provider_at_once() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        provider = ScriptProvider(["Some text\n", "pending", Hang()])
        loop.call_later(5, s.orchestrator.request_stop, s.channel.id, "user-1", "the /stop")
        start = loop.time()
        result = await s.stream(provider)
        assert result.status == "stopped_by_user"
        assert loop.time() - start <= 5.05
        assert result.stop_context == "the /stop"
        assert s.contents == ["Some text", "pending"]  # C6: a user stop flushes
        assert provider.closed


async def test_B3_a_follow_up_ends_a_hanging_provider_and_discards_pending_text() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        provider = ScriptProvider(["Some text\n", "pending", Hang()])
        loop.call_later(5, s.orchestrator.request_follow_up, s.channel.id, "user-1")
        start = loop.time()
        result = await s.stream(provider)
        assert result.status == "follow_up_interrupt"
        assert loop.time() - start <= 5.05
        assert s.contents == ["Some text"]  # C6: "pending" is discarded


async def test_B4_a_pending_stop_resolves_without_starting_the_provider() -> None:
    async with stage() as s:
        s.orchestrator.request_stop(s.channel.id, "user-1")
        provider = ScriptProvider(["never"])
        result = await s.stream(provider)
        assert result.status == "stopped_by_user"
        assert not provider.started
        assert s.api.messages() == []
        assert not s.stops.has_stop_request(s.channel.id)  # C5: consumed


async def test_B5_progress_is_reported_before_each_chunk_is_processed() -> None:
    async with stage() as s:
        provider = ScriptProvider(["a", "b", "c"])

        def progress() -> None:
            provider.calls.append("progress")

        await s.stream(provider, on_stream_progress=progress)
        assert provider.calls == ["start", *["progress", "process"] * 3, "close"]


async def test_B5_a_failing_progress_callback_does_not_break_the_stream() -> None:
    async with stage() as s:

        def progress() -> None:
            raise RuntimeError("heartbeat failed")

        result = await s.stream(ScriptProvider(["fine"]), on_stream_progress=progress)
        assert result.status == "completed"


async def test_B5_a_stop_registered_while_a_chunk_is_on_its_way_wins_over_the_chunk() -> None:
    async with stage() as s:

        def stop() -> None:
            s.orchestrator.request_stop(s.channel.id, "user-1")

        # No await between the stop and the next chunk: only the per-chunk check can see it.
        provider = ScriptProvider(["first\n", Sleep(1), Do(stop), "second", "third"])
        result = await s.stream(provider)
        assert result.status == "stopped_by_user"
        assert provider.calls.count("process") == 1  # "second" was never processed
        assert s.contents == ["first"]


async def test_B5_a_stop_raised_while_a_chunk_is_handled_resolves_before_the_next_pull() -> None:
    async with stage() as s:
        pulled: list[str] = []

        def progress() -> None:  # e.g. a bot's heartbeat that notices a /stop of its own
            s.orchestrator.request_stop(s.channel.id, "user-1")

        provider = ScriptProvider(["first\n", Do(lambda: pulled.append("next")), "second"])
        result = await s.stream(provider, on_stream_progress=progress)
        assert result.status == "stopped_by_user"
        assert pulled == []  # the provider was not asked for another chunk
        assert provider.calls == ["start", "process", "close"]


def _text_steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The content of every text chunk the core is stepped with, in order."""
    seen: list[str] = []
    real = domain_pkg.step

    def step(state: StreamState, event: Event) -> tuple[StreamState, tuple[Effect, ...]]:
        if isinstance(event, ChunkArrived) and isinstance(event.chunk, TextChunk):
            seen.append(event.chunk.content)
        return real(state, event)

    monkeypatch.setattr(orchestrator_module, "step", step)
    return seen


async def test_E10_text_the_provider_gives_at_once_is_one_step_of_the_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The provider's task feeds the text it read without waiting as one chunk, as soon as it
    waits: a step per run of text, not per chunk (what an adapter costs over its SDK), with
    the latest valid usage report of the run (D3: a broken later one does not replace it)."""
    seen = _text_steps(monkeypatch)
    usage = TextChunk("", usage={"input_tokens": 3, "output_tokens": 7})
    broken = TextChunk("", usage={"input_tokens": "many"})
    thought = TextChunk("", thoughts=(Thought("raw", "Hmm."),))
    words = [f"w{index} " for index in range(500)]
    async with stage() as s:
        script = [*words, "a", usage, broken, "b", thought, "c", Sleep(0.5), "after.\n"]
        provider = ScriptProvider(script)
        result = await s.stream(provider)
        assert result.status == "completed"
        # A chunk with more than text and usage goes as it is, after the text before it.
        assert seen == ["".join(words) + "ab", "", "c", "after.\n"]
        assert provider.calls.count("process") == 507
        assert " ".join(s.contents).split() == ("".join(words) + "abcafter.").split()
        assert result.usage is not None
        assert (result.usage.input_tokens, result.usage.output_tokens) == (3, 7)
        assert result.thought_log is not None
        assert result.thought_log.raw == "Hmm."


async def test_B5_E10_text_read_at_once_reaches_the_core_before_the_deadline_fires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The text waits for the task to wait, not for the next chunk: a model that then hangs
    past the deadline still has it shown, and `on_stream_progress` ran for each chunk."""
    seen = _text_steps(monkeypatch)
    beats: list[int] = []
    async with stage() as s:
        provider = ScriptProvider(["One ", "two.\n", "Three", Hang()])
        result = await s.stream(
            provider,
            StreamConfig(inactivity_timeout=1.0),
            on_stream_progress=lambda: beats.append(1),
        )
        assert result.status == "timeout"
        assert seen == ["One two.\nThree"]
        assert len(beats) == 3
        assert s.contents[0].startswith("One two.\nThree")


async def test_B6_a_function_call_flushes_text_first_and_keeps_every_call() -> None:
    async with stage() as s:
        calls = [FunctionCall("roll", {"sides": 6}, "c1"), FunctionCall("time", {}, "c2")]
        provider = ScriptProvider(["Let me check", FunctionCallChunk(calls), "never sent"])
        result = await s.stream(provider)
        assert result.status == "function_call"
        assert result.data == calls[0]
        assert result.function_calls == tuple(calls)
        assert s.contents == ["Let me check"]  # E8: all text before the call
        assert provider.closed


async def test_B7_text_after_done_is_still_delivered() -> None:
    async with stage() as s:
        provider = ScriptProvider(["one", DoneChunk({"finish_reason": "stop"}), " two"])
        result = await s.stream(provider)
        assert result.status == "completed"
        assert result.data == {"finish_reason": "stop"}
        assert s.contents == ["one two"]


async def test_B8_an_answer_of_thoughts_only_is_an_empty_response() -> None:
    async with stage() as s:
        result = await s.stream(ScriptProvider(["<think>hmm</think>", "   "]))
        assert result.status == "empty_response"
        assert result.thought_log is not None
        assert result.thought_log.raw == "hmm"
        assert s.api.messages() == []


@pytest.mark.parametrize(
    "steps",
    [
        ["text", "more"],
        ["text\n", Hang()],
        ["text\n", RuntimeError("x")],
        ["text\n", FunctionCallChunk(FunctionCall("f"))],
    ],
    ids=["completed", "timeout", "crash", "function-call"],
)
async def test_B10_B11_every_exit_closes_the_provider_and_leaves_nothing_behind(
    steps: list[object],
) -> None:
    async with stage() as s:
        before = other_tasks()
        provider = ScriptProvider(steps)
        await s.stream(provider, StreamConfig(delivery="messages", inactivity_timeout=5))
        assert provider.closed
        assert other_tasks() <= before
        assert s.stops.listening() == 0
        assert len(s.stops) == 0


async def test_B11_the_callers_cancellation_propagates_after_cleanup() -> None:
    async with stage() as s:
        before = other_tasks()
        provider = ScriptProvider(["Hello\n", Hang()])
        task = asyncio.create_task(s.stream(provider))
        await asyncio.sleep(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert provider.closed
        assert other_tasks() <= before
        assert s.stops.listening() == 0


async def test_B12_timeout_flushes_then_sends_the_timeout_embed() -> None:
    async with stage() as s:
        result = await s.stream(
            ScriptProvider(["Line\n", "half a sentence", Hang()]),
            StreamConfig(delivery="messages", inactivity_timeout=5),
        )
        assert result.status == "timeout"
        messages = s.api.messages()
        assert [m.content for m in messages[:2]] == ["Line", "half a sentence"]
        assert messages[2].embeds[0]["title"] == "Response timed out"


async def test_B13_a_crash_sends_the_generic_error_embed_and_flushes_nothing() -> None:
    async with stage() as s:
        result = await s.stream(ScriptProvider(["Line\n", "unfinished", RuntimeError("boom")]))
        assert result.status == "error"
        assert s.contents == ["Line"]
        assert len(s.embeds) == 1
        assert "boom" in str(s.embeds[0]["description"])


# -- C: the registry in a running stream ----------------------------------------------------------


async def test_C5_a_request_after_the_result_stays_for_the_next_stream() -> None:
    async with stage() as s:
        await s.stream(ScriptProvider(["done"]))
        s.orchestrator.request_follow_up(s.channel.id, "user-1")
        result = await s.stream(ScriptProvider(["never"]))
        assert result.status == "follow_up_interrupt"


async def test_C5_C7_an_internal_stop_id_from_outside_does_not_flush() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        loop.call_later(1, s.orchestrator.request_stop, s.channel.id, "send_message_limit")
        result = await s.stream(ScriptProvider(["Line\n", "pending", Hang()]))
        assert result.status == "stopped_by_user"
        assert result.stop_reason == "send_message_limit"
        assert s.contents == ["Line"]


async def test_C_streams_in_two_channels_stop_independently() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        other_id = s.api.add_channel("other")
        other = await s.client.fetch_channel(other_id)
        assert isinstance(other, discord.TextChannel)
        first = ScriptProvider(["a\n", Hang()])
        second = ScriptProvider(["b\n", Sleep(3), "c"])
        loop.call_later(1, s.orchestrator.request_stop, s.channel.id, "user-1")
        results = await asyncio.gather(
            s.stream(first, StreamConfig(delivery="messages", inactivity_timeout=60)),
            s.orchestrator.stream_to_discord(
                second, StreamConfig(delivery="messages"), StreamContext(other)
            ),
        )
        assert [r.status for r in results] == ["stopped_by_user", "completed"]


# -- F: delivery -----------------------------------------------------------------------------------


async def test_F1_the_first_message_replies_without_pinging_and_nobody_is_pinged() -> None:
    async with stage() as s:
        question = s.api.post_user_message("hey bot")
        reply_to = s.channel.get_partial_message(question)
        text = "@everyone look <@123456789012345678> and <@&123456789012345678>\nsecond"
        await s.stream(ScriptProvider([text]), reply_to=reply_to)
        first, second = s.api.messages()
        assert first.message_reference is not None
        assert second.message_reference is None
        assert not first.pings.anyone
        assert not second.pings.anyone
        for message in (first, second):
            assert message.allowed_mentions is not None
            assert message.allowed_mentions["parse"] == []
            assert not message.allowed_mentions.get("replied_user", False)


async def test_F1_a_deleted_message_to_reply_to_does_not_fail_the_send() -> None:
    async with stage() as s:
        reply_to = s.channel.get_partial_message(123456789012345678)  # never existed
        result = await s.stream(ScriptProvider(["still here"]), reply_to=reply_to)
        assert result.status == "completed"
        assert s.contents == ["still here"]


async def test_F1_the_contexts_allowed_mentions_are_passed_on_every_send() -> None:
    async with stage() as s:
        mentions = discord.AllowedMentions(everyone=False, users=True, roles=False)
        await s.stream(ScriptProvider(["<@123456789012345678> hi"]), allowed_mentions=mentions)
        (message,) = s.api.messages()
        assert message.pings.users == frozenset({123456789012345678})
        assert not message.pings.everyone


async def test_F2_accumulated_text_is_exactly_what_the_channel_received() -> None:
    async with stage() as s:
        steps = ["Intro line\n", "```py\n", "x = 1\n", "```\n", "tail ", "words"]
        result = await s.stream(ScriptProvider(steps))
        assert result.messages == tuple(s.contents)
        assert result.accumulated_text == s.api.text() == "\n".join(s.contents)
        assert result.messages_sent == len(s.api.messages())


async def test_F2_messages_are_what_the_channel_holds_and_the_text_keeps_the_line_breaks() -> None:
    async with stage() as s:
        # "one" and "two" are ready at once and share a message; "three" comes at the end.
        result = await s.stream(ScriptProvider(["one\ntwo\nthr", Sleep(1), "ee"]))
        assert s.contents == ["one\ntwo", "three"]
        assert result.messages == ("one\ntwo", "three")
        assert result.accumulated_text == "one\ntwo\nthree" == s.api.text()  # not "one\ntwothree"
        assert result.messages_sent == 2


def _stop(s: Stage) -> Do:
    return Do(lambda: s.orchestrator.request_stop(s.channel.id, "user"))


def _follow_up(s: Stage) -> Do:
    return Do(lambda: s.orchestrator.request_follow_up(s.channel.id, "user"))


ENDINGS: dict[str, tuple[str, Callable[[Stage], list[Step]], tuple[str, ...]]] = {
    # name: (status, the steps after two messages went out, what the pending "fi" becomes)
    "stop": ("stopped_by_user", lambda s: [_stop(s), Hang()], ("fi",)),
    "provider_error": (
        "error",
        lambda s: [ErrorChunk(ProviderError("api_error", "upstream failed"))],
        ("fi",),
    ),
    "timeout": ("timeout", lambda s: [Hang()], ("fi",)),
    "follow_up": ("follow_up_interrupt", lambda s: [_follow_up(s), Hang()], ()),
    "crash": ("error", lambda s: [RuntimeError("connection reset")], ()),
    "function_call": ("function_call", lambda s: [FunctionCallChunk(FunctionCall("f"))], ("fi",)),
}


@pytest.mark.parametrize("name", list(ENDINGS))
async def test_B9_F2_every_ending_carries_the_messages_the_channel_holds(name: str) -> None:
    status, ending, flushed = ENDINGS[name]
    async with stage() as s:
        steps: list[Step] = ["one\ntwo\nthr", Sleep(1), "ee\nfour\nfi", Sleep(1), *ending(s)]
        result = await s.stream(
            ScriptProvider(steps), StreamConfig(delivery="messages", inactivity_timeout=5)
        )
        assert result.status == status
        assert result.messages == ("one\ntwo", "three\nfour", *flushed) == tuple(s.contents)
        assert result.accumulated_text == "\n".join(result.messages) == s.api.text()
        assert result.messages_sent == len(result.messages)


STOPPING: dict[str, tuple[str, Callable[[Stage], list[Step]], StreamConfig]] = {
    # name: (status, the steps after the first line, the config), each ending mid-answer
    **{
        name: (status, ending, StreamConfig(delivery="messages", inactivity_timeout=5))
        for name, (status, ending, _) in ENDINGS.items()
    },
    "send_message_limit": (
        "stopped_by_user",
        lambda s: [step for n in range(9) for step in (Sleep(1), f"line {n}\n")],
        StreamConfig(delivery="messages", send_message_limit=2),
    ),
}


@pytest.mark.parametrize("name", list(STOPPING))
async def test_B10_a_stream_that_wants_no_more_chunks_has_stopped_its_providers_lifecycle(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider's task reads, per chunk, whether the stream still wants chunks from the
    lifecycle's stage, not from the stream: so every way the stream stops wanting them must
    stop the lifecycle too. Checked after every event the stream is fed and every fault; and
    the provider, which would go on giving text, is read no further."""
    status, ending, config = STOPPING[name]
    broken: list[str] = []
    stopped_by: list[str] = []

    def checked(method: Callable[..., None]) -> Callable[..., None]:
        def run(self: orchestrator_module._Stream, *args: object) -> None:
            method(self, *args)
            if self.provider.task is None:
                return  # not started: the task asks the stream itself when it starts
            if not self.wants_chunks():
                stopped_by.append(type(args[0]).__name__)
                if not self.provider.stopped():
                    broken.append(f"{method.__name__}({args[0]!r})")

        return run

    stream_class = orchestrator_module._Stream
    monkeypatch.setattr(stream_class, "feed", checked(stream_class.feed))
    monkeypatch.setattr(stream_class, "fault", checked(stream_class.fault))
    async with stage() as s:
        pulled: list[str] = []
        more = [Do(lambda: pulled.append("after")), "more text"]
        provider = ScriptProvider(["one\n", Sleep(1), *ending(s), *more])
        result = await s.stream(provider, config)
        assert result.status == status
        assert stopped_by  # the check ran while the provider's task was alive
        assert broken == []
        assert pulled == []  # not read past the chunk that ended it
        assert provider.closed


async def test_F3_the_send_message_limit_stops_quietly() -> None:
    async with stage() as s:
        steps = ["one\n", Sleep(1), "two\n", Sleep(1), "three\n", Sleep(1), "four"]
        result = await s.stream(
            ScriptProvider(steps), StreamConfig(delivery="messages", send_message_limit=2)
        )
        assert result.status == "stopped_by_user"
        assert result.stop_reason == "send_message_limit"
        assert s.contents == ["one", "two"]
        assert s.embeds == []


async def test_F4_unknown_channel_ends_quietly() -> None:
    async with stage() as s:
        s.api.inject(UNKNOWN_CHANNEL, route="send")
        result = await s.stream(ScriptProvider(["Hello\n", "more", Hang()]))
        assert result.status == "stopped_by_user"
        assert result.stop_reason == "channel_deleted"
        assert s.api.messages() == []


async def test_F4_missing_access_ends_quietly() -> None:
    async with stage() as s:
        s.api.inject(MISSING_ACCESS, route="send")
        result = await s.stream(ScriptProvider(["Hello\n", "more"]))
        assert (result.status, result.stop_reason) == ("stopped_by_user", "missing_access")


async def test_F4_missing_permissions_is_an_error_with_discords_exception() -> None:
    async with stage() as s:
        s.api.inject(MISSING_PERMISSIONS, route="send")
        result = await s.stream(ScriptProvider(["Hello\n", "more"]))
        assert result.status == "error"
        assert isinstance(result.data, discord.Forbidden)
        assert result.data.code == 50013


async def test_F4_server_errors_after_discord_py_retries_are_an_error() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        s.api.inject(INTERNAL_SERVER_ERROR, route="send", times=5)
        start = loop.time()
        result = await s.stream(ScriptProvider(["Hello"]))
        assert result.status == "error"
        assert isinstance(result.data, discord.DiscordServerError)
        assert loop.time() - start >= 25  # discord.py's own 1+3+5+7+9 s of retries


async def test_F4_a_dropped_connection_is_an_error() -> None:
    async with stage() as s:
        s.api.inject(Drop(), route="send")
        result = await s.stream(ScriptProvider(["Hello"]))
        assert result.status == "error"


async def test_F4_rate_limits_are_waited_out_and_the_text_arrives_in_order() -> None:
    async with stage() as s:
        s.api.inject(RateLimited(retry_after=2.0), route="send", times=2)
        result = await s.stream(ScriptProvider(["one\n", "two\n", "three\n", "four"]))
        assert result.status == "completed"
        # Lines that piled up while Discord made us wait share a message, in order.
        assert "\n".join(s.contents).split("\n") == ["one", "two", "three", "four"]
        assert len(s.contents) < 4
        assert result.accumulated_text == s.api.text()


# -- G: embeds in the channel -------------------------------------------------------------------


async def test_G1_a_provider_error_shows_the_providers_headline() -> None:
    async with stage() as s:
        error = ProviderError("rate_limit", "429 from upstream", retryable=True)
        provider = ScriptProvider(["Hi\n", ErrorChunk(error)], headline="The model is busy.")
        result = await s.stream(provider)
        assert result.status == "error"
        assert result.data is error
        (embed,) = s.embeds
        assert "The model is busy." in str(embed["description"])
        assert "429 from upstream" in str(embed["description"])


async def test_G1_a_model_error_gets_the_model_configuration_title() -> None:
    async with stage() as s:
        error = ProviderError("model_error", "model gpt-9 does not exist")
        await s.stream(ScriptProvider([ErrorChunk(error)]))
        (embed,) = s.embeds
        assert embed["title"] == "Model Configuration Error"


async def test_G4_secrets_never_reach_the_channel() -> None:
    async with stage() as s:
        key = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2"
        error = ProviderError("api_error", f"invalid key {key}", user_message=f"key={key}")
        await s.stream(ScriptProvider([ErrorChunk(error)]))
        assert s.embeds
        assert all(key not in str(embed) for embed in s.embeds)


async def test_G7_suppress_user_errors_sends_no_embed_and_changes_no_status() -> None:
    async with stage() as s:
        result = await s.stream(
            ScriptProvider(["x\n", Hang()]),
            StreamConfig(delivery="messages", inactivity_timeout=5),
            suppress_user_errors=True,
        )
        assert result.status == "timeout"
        assert s.embeds == []


# -- E9 in the shell: typing ----------------------------------------------------------------------


async def test_E9_humanizer_2_types_before_each_further_message() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await s.stream(
            ScriptProvider(["one\n", "two\n", "three"]),
            StreamConfig(delivery="messages", humanizer_degree=2),
        )
        kinds = [r.kind for r in s.api.requests if r.kind in ("send", "typing")]
        assert kinds == ["send", "typing", "send", "typing", "send"]
        assert loop.time() - start >= 2 * 0.75  # two pauses of at least 0.75 s


async def test_E9_a_stop_interrupts_the_typing_pause() -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        text = "first line\n" + "x" * 400 + "\n" + "y" * 400 + "\nend"
        loop.call_later(1.0, s.orchestrator.request_stop, s.channel.id, "user-1")
        start = loop.time()
        result = await s.stream(
            ScriptProvider([text, Hang()]),
            StreamConfig(delivery="messages", humanizer_degree=2, inactivity_timeout=60),
        )
        assert result.status == "stopped_by_user"
        assert loop.time() - start < 1.1  # the 4 s pause was cut short
        assert len(s.contents) >= 2


# -- B1, B13, F2: the last resort when the core itself faults ------------------------------------
#
# `step` is total, so these faults are injected: `cordstream.shell.orchestrator.step` is
# replaced by one that raises for chosen events. Rule (shell/orchestrator.py docstring): the first
# fault is fed to the core as ProviderCrashed, which ends the stream the B13 way, waiting for the
# requests in flight; if the core cannot, the result is made once they are answered, counting
# what Discord accepted from the shell's own ledger.

CORE_BUG = "core bug"


def _break_step(monkeypatch: pytest.MonkeyPatch, breaks: Callable[[Event], bool]) -> None:
    real = domain_pkg.step

    def step(state: StreamState, event: Event) -> tuple[StreamState, tuple[Effect, ...]]:
        if breaks(event):
            raise RuntimeError(CORE_BUG)
        return real(state, event)

    monkeypatch.setattr(orchestrator_module, "step", step)


def _is_boom(event: Event) -> bool:
    return isinstance(event, ChunkArrived) and event.chunk == TextChunk("boom")


async def test_B13_F2_a_fault_in_step_waits_for_the_send_in_flight_then_shows_the_embed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _break_step(monkeypatch, _is_boom)
    async with stage() as s:
        before = other_tasks()
        s.api.inject(Delay(1.0), route="send")  # "Line" is still in flight at the fault
        # Each a chunk of its own (E10: text given at once is fed as one chunk).
        provider = ScriptProvider(["Line\n", "pending", Sleep(0.01), "boom", Sleep(0.01), "never"])
        result = await s.stream(provider)
        assert result.status == "error"
        assert isinstance(result.data, RuntimeError)
        assert str(result.data) == CORE_BUG
        assert result.accumulated_text == "Line" == s.api.text()  # F2: counted once accepted
        assert result.messages == ("Line",)
        assert result.messages_sent == 1
        assert s.contents == ["Line"]  # B13: "pending" is not flushed
        (embed,) = s.embeds
        assert embed["description"] == CORE_BUG
        assert provider.closed
        assert provider.calls.count("process") == 3  # "never" was not pulled
        assert other_tasks() <= before


async def test_F2_a_fault_on_delivered_still_counts_what_discord_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The core misses the `Delivered` it faults on, so it cannot finish: the result is made
    from the shell's ledger, at once (the provider's 60 s sleep is cut short), no embed."""
    _break_step(monkeypatch, lambda event: isinstance(event, Delivered) and event.seq == 1)
    async with stage() as s:
        loop = asyncio.get_running_loop()
        provider = ScriptProvider(["Line\n", "more", Sleep(60), "never"])
        start = loop.time()
        result = await s.stream(provider)
        assert loop.time() - start < 1.0
        assert result.status == "error"
        assert str(result.data) == CORE_BUG
        assert result.accumulated_text == "Line" == s.api.text()
        assert result.messages == ("Line",)  # from the ledger: the core missed the Delivered
        assert result.messages_sent == 1
        assert s.embeds == []
        assert provider.closed


async def test_F2_the_shells_own_ledger_joins_the_accepted_messages_with_line_breaks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The core misses the `Delivered` of the second message: the result comes from the
    shell's ledger, which has both messages, and joins them as the core would."""
    _break_step(monkeypatch, lambda event: isinstance(event, Delivered) and event.seq == 2)
    async with stage() as s:
        provider = ScriptProvider(["one\nt", Sleep(1), "wo\nmore", Sleep(60), "never"])
        result = await s.stream(provider)
        assert result.status == "error"
        assert str(result.data) == CORE_BUG
        assert s.contents == ["one", "two"]
        assert result.messages == ("one", "two")
        assert result.accumulated_text == "one\ntwo" == s.api.text()
        assert result.messages_sent == 2


async def test_B2_B13_a_fault_in_the_timer_callback_ends_a_hanging_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fault outside the caller's task (here the deadline's callback) still ends the stream:
    it does not vanish into the event loop's exception handler, leaving the call hanging."""
    _break_step(monkeypatch, lambda event: isinstance(event, TimerFired))
    async with stage() as s:
        loop = asyncio.get_running_loop()
        provider = ScriptProvider(["Line\n", "pending", Hang()])
        start = loop.time()
        result = await s.stream(provider, StreamConfig(delivery="messages", inactivity_timeout=30))
        assert 30 <= loop.time() - start <= 30.05
        assert result.status == "error"
        assert str(result.data) == CORE_BUG
        assert result.accumulated_text == "Line" == s.api.text()
        assert len(s.embeds) == 1
        assert provider.closed


async def test_B1_F2_when_the_core_cannot_even_crash_the_result_waits_for_the_send_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _break_step(monkeypatch, lambda event: _is_boom(event) or isinstance(event, ProviderCrashed))
    async with stage() as s:
        before = other_tasks()
        s.api.inject(Delay(1.0), route="send")
        provider = ScriptProvider(["Line\n", "pending", Sleep(0.01), "boom", Sleep(60), "never"])
        loop = asyncio.get_running_loop()
        start = loop.time()
        result = await s.stream(provider)
        assert loop.time() - start < 1.5  # the send's 1 s, not the provider's 60 s
        assert result.status == "error"
        assert str(result.data) == CORE_BUG
        assert result.accumulated_text == "Line" == s.api.text()  # accepted after the fault
        assert result.messages == ("Line",)
        assert result.messages_sent == 1
        assert s.embeds == []  # the core could not decide one
        assert provider.closed
        assert provider.calls.count("process") == 3
        assert other_tasks() <= before
