"""What cordstream tells whoever runs the bot (SPEC M): log records under `cordstream`, and
OpenTelemetry GenAI spans and metrics through the API's global providers.

The SDK is configured here as an application configures it (`tests.support.otel`: a
`TracerProvider` and a `MeterProvider` set globally, in-memory exporter and reader), and
cordstream is given nothing else. Streams run through the real shell and discord.py into the
local Discord emulator, on looptime's virtual clock, so durations and latencies are exact;
log records are read with pytest's `caplog`.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import cordstream.shell
from cordstream.domain import DoneChunk, ErrorChunk, FunctionCall, ProviderError, TextChunk
from cordstream.shell import StreamConfig, run_turn
from cordstream.shell.provider_task import CLOSE_GRACE, CLOSE_TIMEOUT
from cordstream.shell.testing.wire import ErrorReply, RateLimited
from tests.shell.test_turn import Conversation, ask, dice, used
from tests.support.otel import Recorded, recording
from tests.support.stage import Hang, ScriptProvider, Sleep, stage

MODEL: Final = "scripted-1"
SECRET: Final = "sk-proj-Qw3rTy8uIoP4sDfGhJkL0zXcVbNm"  # an API key's shape (G4)
ANSWER: Final = ("The answer ", "is forty-two.\n", "Nothing more to say.")
DONE: Final = DoneChunk(
    {"finish_reason": "stop", "raw_finish_reason": "end_turn", "model": "scripted-1-0425"},
    usage={"input_tokens": 12, "output_tokens": 34},
)
MESSAGES: Final = StreamConfig(delivery="messages")
QUICK_TIMEOUT: Final = StreamConfig(delivery="messages", inactivity_timeout=1.0)


@dataclass
class Model(ScriptProvider):
    """A scripted model with a model name, as the adapters have."""

    model: str = MODEL


@dataclass
class Talk(Conversation):
    model: str = MODEL

    def after_tools(self, outcomes: Any) -> Talk:
        following = super().after_tools(outcomes)
        return Talk(following.steps, later=following.later, handed_back=self.handed_back)


@pytest.fixture
def otel() -> Iterator[Recorded]:
    with recording() as recorded:
        yield recorded


def records(caplog: pytest.LogCaptureFixture, name: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name and r.levelno == level]


def only(values: list[Any]) -> Any:
    assert len(values) == 1, values
    return values[0]


def with_attributes(
    points: list[tuple[Mapping[str, Any], int, float]], **wanted: object
) -> list[tuple[int, float]]:
    """The (count, sum) of the data points carrying `wanted` (dots spelled `__`)."""
    want = {name.replace("__", "."): value for name, value in wanted.items()}
    return [(n, v) for a, n, v in points if all(a.get(k) == v_ for k, v_ in want.items())]


# -- logging ------------------------------------------------------------------------------------


def test_M1_cordstream_logs_nothing_until_the_application_configures_logging() -> None:
    handlers = logging.getLogger("cordstream").handlers
    assert any(isinstance(handler, logging.NullHandler) for handler in handlers)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M1_one_info_record_per_stream_with_its_figures_and_no_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with stage() as s:
        caplog.set_level(logging.DEBUG, logger="cordstream")
        result = await s.stream(Model([*ANSWER, DONE]), MESSAGES)
        assert result.status == "completed"
        line = only(records(caplog, "cordstream.stream", logging.INFO))
        fields = line.__dict__
        assert fields["status"] == "completed"
        assert fields["channel_id"] == s.channel.id
        assert fields["guild_id"] == s.channel.guild.id
        assert (fields["provider"], fields["model"]) == ("script", MODEL)
        assert (fields["input_tokens"], fields["output_tokens"]) == (12, 34)
        assert fields["messages_sent"] == result.messages_sent == 2
        assert fields["discord_requests"] == 2
        assert fields["first_chunk_s"] == 0.0  # virtual time: the model answers at once
        assert fields["first_text_s"] is not None
        assert fields["duration_s"] >= fields["first_text_s"]
        assert "completed" in line.getMessage()
        sends = records(caplog, "cordstream.discord", logging.DEBUG)
        assert len(sends) == 2
        assert {r.__dict__["route"] for r in sends} == {"send"}
        ours = [r for r in caplog.records if r.name.startswith("cordstream")]
        assert not [r for r in ours if r.levelno >= logging.WARNING]  # the provider ended well
        for record in caplog.records:  # a model's text only at DEBUG, and there is none here
            assert "forty-two" not in record.getMessage()


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M1_a_discord_failure_is_a_warning_and_its_message_is_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with stage() as s:
        caplog.set_level(logging.INFO, logger="cordstream")
        s.api.inject(ErrorReply(403, 50013, f"Missing Permissions for {SECRET}"), route="send")
        result = await s.stream(Model(["Hello\n", DONE]), MESSAGES)
        assert result.status == "error"
        warning = only(records(caplog, "cordstream.discord", logging.WARNING))
        assert warning.__dict__["http_status"] == 403
        assert "Missing Permissions" in warning.getMessage()
        for record in caplog.records:
            assert SECRET not in record.getMessage()
            assert SECRET not in str(record.__dict__.get("error"))


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M1_a_429_that_reaches_cordstream_is_a_warning(
    caplog: pytest.LogCaptureFixture, otel: Recorded
) -> None:
    async with stage() as s:
        caplog.set_level(logging.INFO, logger="cordstream")
        s.api.inject(RateLimited(retry_after=0.5), route="send", times=5)  # discord.py gives up
        result = await s.stream(Model(["Hello", DONE]), MESSAGES)
        assert result.status == "completed"
        warning = only(records(caplog, "cordstream.discord", logging.WARNING))
        assert warning.__dict__["http_status"] == 429
        assert "429, sent again" in warning.getMessage()
        limited = otel.metrics("cordstream.discord.rate_limited")
        assert with_attributes(limited, cordstream__discord__route="send") == [(0, 1.0)]
        requests = otel.metrics("cordstream.discord.requests")
        assert sorted(
            (a["cordstream.discord.outcome"], a["http.response.status_code"], v)
            for a, _, v in requests
        ) == [("ok", 200, 1.0), ("rate_limited", 429, 1.0)]
        line = only(records(caplog, "cordstream.stream", logging.INFO))
        assert (line.__dict__["rate_limited"], line.__dict__["discord_requests"]) == (1, 2)
        chat = otel.span(f"chat {MODEL}")
        assert chat.attributes is not None
        assert chat.attributes["cordstream.discord.requests"] == 2
        assert chat.attributes["cordstream.discord.rate_limited"] == 1
        event = only(list(chat.events))  # refused requests are events, the others summed
        assert event.name == "discord send"
        assert event.attributes is not None
        assert event.attributes["http.response.status_code"] == 429
        assert event.attributes["error.type"] == "429"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M1_a_provider_whose_cleanup_overruns_is_a_warning_and_an_abandoned_one_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with stage() as s:
        caplog.set_level(logging.INFO, logger="cordstream")
        loop = asyncio.get_running_loop()

        class Stubborn:
            """Swallows every cancellation of its cleanup until `until` after the stop."""

            name = "stubborn"
            model = MODEL

            def __init__(self, until: float) -> None:
                self.until = until

            def start_stream(self, config: object, context: object) -> AsyncIterator[object]:
                return self.chunks()

            async def chunks(self) -> AsyncIterator[object]:
                yield TextChunk("Hello\n")
                stopped = loop.time()
                try:
                    await asyncio.sleep(3600)
                finally:
                    stopped = loop.time()
                    while loop.time() < stopped + self.until:
                        try:
                            await asyncio.sleep(stopped + self.until - loop.time())
                        except asyncio.CancelledError:
                            continue

            def process_chunk(self, raw: object) -> Any:
                return raw

            def describe_error(self, error: object, locale: str) -> None:
                return None

        overrun = CLOSE_TIMEOUT + CLOSE_GRACE / 2  # past the budget, within the grace
        result = await s.stream(
            Stubborn(overrun), StreamConfig(delivery="messages", inactivity_timeout=1.0)
        )
        assert result.status == "timeout"
        warning = only(records(caplog, "cordstream.provider", logging.WARNING))
        assert "overran its budget by 0.050 s" in warning.getMessage()
        caplog.clear()
        abandoned = CLOSE_TIMEOUT + CLOSE_GRACE + 1.0
        result = await s.stream(
            Stubborn(abandoned), StreamConfig(delivery="messages", inactivity_timeout=1.0)
        )
        assert result.status == "timeout"
        warning = only(records(caplog, "cordstream.provider", logging.WARNING))
        assert "abandoned" in warning.getMessage()
        await asyncio.sleep(2.0)  # the abandoned task ends on its own (virtual time)


# -- spans and metrics ------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_a_completed_answer_is_a_chat_span_with_the_genai_attributes(
    otel: Recorded,
) -> None:
    async with stage() as s:
        result = await s.stream(Model([*ANSWER, DONE]), MESSAGES)
        assert result.status == "completed"
        chat = otel.span(f"chat {MODEL}")
        assert chat.kind == SpanKind.CLIENT
        attributes = dict(chat.attributes or {})
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "script"
        assert attributes["gen_ai.request.model"] == MODEL
        assert attributes["gen_ai.response.model"] == "scripted-1-0425"
        assert attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
        assert attributes["gen_ai.usage.input_tokens"] == 12
        assert attributes["gen_ai.usage.output_tokens"] == 34
        assert attributes["cordstream.stream.status"] == "completed"
        assert attributes["cordstream.discord.channel_id"] == s.channel.id
        assert "gen_ai.output.messages" not in attributes  # contents only when opted in
        assert "error.type" not in attributes
        assert chat.status.status_code == StatusCode.UNSET
        assert attributes["cordstream.discord.requests"] == 2
        assert attributes["cordstream.discord.refused"] == 0
        assert attributes["cordstream.time_to_first_chunk"] == 0.0
        assert isinstance(attributes["cordstream.discord.request_time"], float)
        assert list(chat.events) == []  # only refused requests are events
        assert [span.name for span in otel.spans] == [f"chat {MODEL}"]
        assert chat.instrumentation_scope is not None
        assert chat.instrumentation_scope.name == "cordstream"
        assert chat.instrumentation_scope.schema_url == cordstream.shell.otel.SCHEMA_URL


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_a_completed_answer_records_the_genai_metrics_and_cordstreams_own(
    otel: Recorded,
) -> None:
    async with stage() as s:
        await s.stream(Model([*ANSWER, DONE]), MESSAGES)
        tokens = otel.metrics("gen_ai.client.token.usage")
        assert with_attributes(tokens, gen_ai__token__type="input") == [(1, 12.0)]
        assert with_attributes(tokens, gen_ai__token__type="output") == [(1, 34.0)]
        assert all(
            a["gen_ai.request.model"] == MODEL and a["gen_ai.response.model"] == "scripted-1-0425"
            for a, _, _ in tokens
        )
        assert [n for _, n, _ in otel.metrics("gen_ai.client.operation.duration")] == [1]
        assert otel.metrics("gen_ai.client.operation.time_to_first_chunk")[0][1:] == (1, 0.0)
        assert [n for _, n, _ in otel.metrics("cordstream.stream.time_to_first_text")] == [1]
        streams = otel.metrics("cordstream.streams")
        assert with_attributes(streams, cordstream__stream__status="completed") == [(0, 1.0)]
        assert only(streams)[0]["cordstream.discord.guild_id"] == s.channel.guild.id
        requests = otel.metrics("cordstream.discord.requests")
        assert with_attributes(requests, cordstream__discord__route="send") == [(0, 2.0)]
        waits = otel.metrics("cordstream.discord.budget_wait")  # one per stream
        assert [(n, total) for _, n, total in waits] == [(1, 0.0)]  # nothing to wait for
        assert otel.metrics("cordstream.discord.rate_limited") == []
        assert otel.metrics("cordstream.stop.latency") == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_a_tool_loop_nests_its_model_calls_and_tool_calls_under_the_turn(
    otel: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    async with stage() as s:
        caplog.set_level(logging.DEBUG, logger="cordstream")

        async def broken(arguments: Mapping[str, object]) -> object:
            raise RuntimeError(f"the dice are lost, key {SECRET}")

        provider = Talk(
            [ask(FunctionCall("roll", {"sides": 20}, id="c1"), FunctionCall("lost", id="c2"))],
            later=[["You rolled 20.", DoneChunk(usage=used(5, 6))]],
        )
        turn = await run_turn(
            s.orchestrator,
            provider,
            s.context(),
            tools={"roll": dice, "lost": broken},
            config=MESSAGES,
        )
        assert turn.status == "completed"
        agent = otel.span("invoke_agent")
        assert agent.context is not None
        chats = [span for span in otel.spans if span.name == f"chat {MODEL}"]
        tools = [span for span in otel.spans if span.name.startswith("execute_tool ")]
        assert len(chats) == 2
        assert sorted(span.name for span in tools) == ["execute_tool lost", "execute_tool roll"]
        for child in [*chats, *tools]:
            assert child.parent is not None
            assert child.parent.span_id == agent.context.span_id
        roll = otel.span("execute_tool roll")
        assert roll.attributes is not None
        assert roll.attributes["gen_ai.operation.name"] == "execute_tool"
        assert roll.attributes["gen_ai.tool.call.id"] == "c1"
        assert roll.status.status_code == StatusCode.UNSET
        lost = otel.span("execute_tool lost")
        assert lost.attributes is not None
        assert lost.attributes["error.type"] == "RuntimeError"
        assert lost.status.status_code == StatusCode.ERROR
        assert SECRET not in str(lost.status.description)
        assert agent.attributes is not None
        assert agent.attributes["cordstream.turn.status"] == "completed"
        assert agent.attributes["cordstream.turn.tool_calls"] == 2
        assert chats[0].attributes is not None
        assert chats[0].attributes["gen_ai.response.finish_reasons"] == ("tool_call",)
        calls = otel.metrics("cordstream.tool.calls")
        assert with_attributes(calls, gen_ai__tool__name="roll", cordstream__tool__outcome="ok")
        lost_calls = with_attributes(calls, gen_ai__tool__name="lost", error__type="RuntimeError")
        assert lost_calls == [(0, 1.0)]
        warning = only(records(caplog, "cordstream.turn", logging.WARNING))
        assert "the dice are lost" in warning.getMessage()
        assert SECRET not in warning.getMessage()
        turn_line = only(records(caplog, "cordstream.turn", logging.INFO))
        assert (turn_line.__dict__["tool_calls"], turn_line.__dict__["tool_errors"]) == (2, 1)
        assert len(records(caplog, "cordstream.turn", logging.DEBUG)) == 2
        assert len(records(caplog, "cordstream.stream", logging.INFO)) == 2


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_a_stop_records_how_fast_it_took_effect(
    otel: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    async with stage() as s:
        caplog.set_level(logging.INFO, logger="cordstream")
        loop = asyncio.get_running_loop()
        loop.call_later(2.0, s.orchestrator.request_stop, s.channel.id, "42")
        result = await s.stream(Model(["Hello\n", "half a line", Hang()]), MESSAGES)
        assert result.status == "stopped_by_user"
        latency = only(otel.metrics("cordstream.stop.latency"))
        assert latency[0] == {"cordstream.stop.kind": "stop"}
        assert latency[1] == 1
        assert 0.0 <= latency[2] < 0.1  # the flush of "half a line" on the virtual clock
        chat = otel.span(f"chat {MODEL}")
        assert chat.attributes is not None
        assert chat.attributes["cordstream.stream.status"] == "stopped_by_user"
        assert chat.status.status_code == StatusCode.UNSET  # a stop is not an error
        line = only(records(caplog, "cordstream.stream", logging.INFO))
        assert line.__dict__["stop_latency_s"] == pytest.approx(latency[2])
        assert line.__dict__["duration_s"] == pytest.approx(2.0 + latency[2])


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_a_timeout_is_an_error_span_and_counted_by_status(otel: Recorded) -> None:
    async with stage() as s:
        config = StreamConfig(delivery="messages", inactivity_timeout=3.0)
        result = await s.stream(Model(["Hello\n", Hang()]), config)
        assert result.status == "timeout"
        chat = otel.span(f"chat {MODEL}")
        assert chat.attributes is not None
        assert chat.attributes["error.type"] == "timeout"
        assert chat.status.status_code == StatusCode.ERROR
        streams = otel.metrics("cordstream.streams")
        assert with_attributes(streams, cordstream__stream__status="timeout", error__type="timeout")
        duration = only(otel.metrics("gen_ai.client.operation.duration"))
        assert duration[0]["error.type"] == "timeout"
        assert duration[2] == pytest.approx(3.0)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_a_provider_error_names_its_kind_and_its_message_is_redacted(
    otel: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    async with stage() as s:
        caplog.set_level(logging.INFO, logger="cordstream")
        error = ProviderError("api_error", f"invalid api key {SECRET}", code=401)
        result = await s.stream(Model(["Hello\n", ErrorChunk(error)]), MESSAGES)
        assert result.status == "error"
        chat = otel.span(f"chat {MODEL}")
        assert chat.attributes is not None
        assert chat.attributes["error.type"] == "api_error"
        assert chat.status.status_code == StatusCode.ERROR
        assert "invalid api key" in str(chat.status.description)
        assert SECRET not in str(chat.status.description)
        line = only(records(caplog, "cordstream.stream", logging.INFO))
        assert "invalid api key" in line.getMessage()
        assert SECRET not in line.getMessage()
        crashed = await s.stream(Model(["Hi\n", ValueError(f"broken with {SECRET}")]), MESSAGES)
        assert crashed.status == "error"
        spans = [span for span in otel.spans if span.name == f"chat {MODEL}"]
        assert spans[-1].attributes is not None
        assert spans[-1].attributes["error.type"] == "ValueError"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_message_contents_only_when_the_application_opts_in_and_redacted(
    otel: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stage() as s:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        result = await s.stream(Model([f"My key is {SECRET}, and ", "the answer is 42.", DONE]))
        assert result.status == "completed"
        chat = otel.span(f"chat {MODEL}")
        assert chat.attributes is not None
        output = str(chat.attributes["gen_ai.output.messages"])
        assert "the answer is 42." in output
        assert SECRET not in output
        assert '"finish_reason": "end_turn"' in output


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_the_span_is_current_in_the_providers_task(otel: Recorded) -> None:
    """An SDK's own instrumentation (an HTTP client's spans) nests under the model call."""
    async with stage() as s:
        seen: list[int] = []

        class Looking(Model):
            def process_chunk(self, raw: object) -> Any:
                seen.append(trace.get_current_span().get_span_context().span_id)
                return super().process_chunk(raw)

        await s.stream(Looking(["Hello", DONE]), MESSAGES)
        chat = otel.span(f"chat {MODEL}")
        assert chat.context is not None
        assert set(seen) == {chat.context.span_id}


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_the_caller_cancelling_still_ends_the_span(otel: Recorded) -> None:
    async with stage() as s:
        task = asyncio.ensure_future(s.stream(Model(["Hello\n", Hang()]), MESSAGES))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        chat = otel.span(f"chat {MODEL}")
        assert chat.attributes is not None
        assert chat.attributes["cordstream.stream.status"] == "cancelled"
        assert chat.end_time is not None


def test_M2_without_opentelemetry_installed_streams_run_and_record_nothing() -> None:
    """`pip install cordstream` alone: the API cannot be imported, and nothing changes."""
    script = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if the extra were not installed
        from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator, otel
        from cordstream.shell.testing import ScriptProvider, local_discord

        async def main() -> str:
            async with local_discord() as (_, _, channel):
                result = await StreamOrchestrator().stream_to_discord(
                    ScriptProvider(["Hello"]), StreamConfig(), StreamContext(channel)
                )
            return result.status

        assert not otel.AVAILABLE and otel.tracer() is None and otel.instruments() is None
        print(asyncio.run(main()))
        """
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "completed"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_M2_the_time_live_delivery_waits_for_the_channels_budget_is_recorded(
    otel: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cordstream")
    async with stage() as s:
        words = [step for n in range(12) for step in (f"word {n} ", Sleep(0.25))]
        result = await s.stream(Model([*words, DONE]), StreamConfig(delivery="live"))
        assert result.status == "completed"
        line = only(records(caplog, "cordstream.stream", logging.INFO))
        waited = line.__dict__["budget_wait_s"]
        assert waited > 0.5  # edits spaced about a second apart while the model writes
        assert line.__dict__["discord_requests"] >= 3
        wait = only(otel.metrics("cordstream.discord.budget_wait"))
        assert wait[1:] == (1, pytest.approx(waited, abs=1e-5))
        edits = otel.metrics("cordstream.discord.requests")
        assert with_attributes(edits, cordstream__discord__route="edit")
