"""What cordstream tells whoever runs the bot: log records, and with OpenTelemetry, spans and
metrics (SPEC M).

Logging
-------
The standard library's `logging`, under the logger `cordstream`, which is silent until the
application configures logging (it carries a `NullHandler`):

- `cordstream.stream`: one INFO record per stream's end, with its outcome and figures; a
  WARNING for events a correct shell never feeds (`StreamResult.anomalies`: a bug).
- `cordstream.discord`: one DEBUG record per Discord request a stream makes; a WARNING for
  each one Discord refused, a 429 that reached cordstream included.
- `cordstream.provider`: a WARNING when a provider's cleanup overran its budget
  (`CLOSE_TIMEOUT`), and when its task was abandoned.
- `cordstream.turn`: one INFO record per `run_turn`, a DEBUG record per tool call, a WARNING
  per tool that raised or timed out.

A record's figures are also attributes of the record (`extra`), for a structured formatter:
`stream_id`, `channel_id`, `guild_id`, `provider`, `model`, `status` and the others each
record names. No record holds a model's text, and every error message in one is redacted as
an embed's is (G4), with the stream's secrets.

Tracing and metrics
-------------------
Through `cordstream.shell.otel` (the API's global providers; nothing without the `otel`
extra): a span `chat {model}` per stream (the GenAI conventions' model call), its Discord
requests summed on it and each refused one an event `discord {route}`; a span
`execute_tool {name}` per tool call and `invoke_agent` per `run_turn` above them
(`cordstream.shell.turn`). Every task a stream starts runs in its span's context, so an SDK's
own instrumentation nests under it too. Metrics: `cordstream.shell.otel.Instruments`.

Telemetry never breaks a stream: what it raises is logged on `cordstream` and dropped
(`never_raises`).

How it plugs in: the stream enters its `StreamWatch` around its run; `current()` finds it
from the courier's requests (`cordstream.shell.ratelimit`), which report each request and
each wait. Per chunk it costs nothing: the watch hears about the first chunk from the
provider's task at the end.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal, ParamSpec, Self, TypeAlias

from returns.io import IOFailure, IOResultE
from returns.result import Failure

from cordstream.domain import StreamResult
from cordstream.domain.chunks import FunctionCall, ProviderError
from cordstream.domain.redact import Secrets, redact, redact_head
from cordstream.shell import otel

_LOG: Final = logging.getLogger("cordstream")
STREAM_LOG: Final = logging.getLogger("cordstream.stream")
DISCORD_LOG: Final = logging.getLogger("cordstream.discord")
PROVIDER_LOG: Final = logging.getLogger("cordstream.provider")
TURN_LOG: Final = logging.getLogger("cordstream.turn")

P = ParamSpec("P")
Route: TypeAlias = Literal["send", "edit", "embed"]
Attributes: TypeAlias = dict[str, Any]

ERROR_HEAD: Final = 300
"""How much of an error's message a log record or a span shows (redacted, G4)."""

_current: ContextVar[StreamWatch | None] = ContextVar("cordstream_stream", default=None)
_ids = itertools.count(1)


def current() -> StreamWatch | None:
    """The watch of the stream whose task this is, or None outside a stream."""
    return _current.get()


def _attribute(owner: object, name: str) -> object:
    """`owner.name`, or None: whatever reading it raises (a user's object)."""
    try:
        return getattr(owner, name, None)
    except Exception:
        return None


def never_raises(method: Callable[P, None]) -> Callable[P, None]:
    """Telemetry never breaks a stream: what it raises is logged, as a warning, and dropped."""

    @functools.wraps(method)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            method(*args, **kwargs)
        except Exception:
            _LOG.warning("cordstream's telemetry failed in %s", method.__qualname__, exc_info=True)

    return guarded


def provider_name(provider: object) -> str:
    """`gen_ai.provider.name` for a provider (its `name`, in the conventions' spelling)."""
    name = _attribute(provider, "name")
    if not isinstance(name, str) or not name:
        return "_OTHER"
    return otel.PROVIDER_NAMES.get(name, name)


def model_name(provider: object) -> str | None:
    model = _attribute(provider, "model")
    return model if isinstance(model, str) and model else None


def error_text(error: object, secrets: Secrets) -> str:
    """An error, for a log record or a span: its type and its message, redacted (G4). An
    exception whose `str` fails or is not a string is named by its type alone."""
    if isinstance(error, ProviderError):
        message: object = error.message
        text = f"{error.kind}: {message}" if isinstance(message, str) else error.kind
    else:
        named = type(error).__name__
        message = _message(error)
        text = f"{named}: {message}" if message else named
    return redact_head(text, ERROR_HEAD, secrets)


def _message(error: object) -> str:
    try:
        return str(error)  # a `__str__` that returns no string raises TypeError
    except Exception:  # a broken `__str__`: the type says enough
        return ""


def error_type(error: object) -> str:
    """`error.type`: a provider error's kind, an exception's class."""
    if isinstance(error, ProviderError):
        return error.kind
    if isinstance(error, BaseException):
        return type(error).__qualname__
    return "_OTHER"


def guild_of(channel: object) -> int | None:
    guild_id = _attribute(channel, "guild_id")  # an interaction
    if isinstance(guild_id, int):
        return guild_id
    found = _attribute(_attribute(channel, "guild"), "id")
    return found if isinstance(found, int) else None


class _Watch:
    """A context manager whose opening and closing never raise (`never_raises`): what a
    watch opens on entry (`_open`) it closes on exit (`_close`), told the exception, if any."""

    def __enter__(self) -> Self:
        self._open()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._close(error)

    def _open(self) -> None:
        raise NotImplementedError

    def _close(self, error: BaseException | None) -> None:
        raise NotImplementedError


class StreamWatch(_Watch):
    """One stream's observations (see the module docstring): entered around the stream's run,
    it makes its span the current one and `current()` find it, in every task the stream
    starts; on exit it ends the span and records the stream's log line and metrics."""

    def __init__(
        self, provider: object, delivery: str, channel: object, channel_id: int, secrets: Secrets
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.id = next(_ids)
        self.started_at = self.loop.time()
        self.channel_id = channel_id
        self.guild_id = guild_of(channel)
        self.provider = provider_name(provider)
        self.model = model_name(provider)
        self.delivery = delivery
        self.secrets = secrets
        self.first_chunk_at: float | None = None
        self.first_text_at: float | None = None
        self.requests = self.refused = self.rate_limited = 0
        self.counted: dict[tuple[Route, str, int | None], int] = {}  # requests by route, outcome
        self.waited = self.request_time = 0.0  # seconds: waiting for turns, in requests
        self.result: StreamResult | None = None
        self.ended_at: float | None = None
        self.stop_latency: float | None = None
        try:
            self.instruments = otel.instruments()
        except Exception:  # an SDK that refuses an instrument: no metrics, the stream goes on
            _LOG.warning("cordstream's metrics could not be created", exc_info=True)
            self.instruments = None
        self.span: Any = None
        self._tokens: tuple[Token[StreamWatch | None], Any] | None = None

    @property
    def attributes(self) -> Attributes:
        """The GenAI attributes every one of the stream's metrics carries."""
        found: Attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": self.provider}
        if self.model is not None:
            found["gen_ai.request.model"] = self.model
        return found

    @never_raises
    def _open(self) -> None:
        self._tokens = (_current.set(self), None)
        tracer = otel.tracer()
        if tracer is not None:
            name = "chat" if self.model is None else f"chat {self.model}"
            attributes = self.attributes | {"cordstream.discord.channel_id": self.channel_id}
            if self.guild_id is not None:
                attributes["cordstream.discord.guild_id"] = self.guild_id
            attributes["cordstream.delivery"] = self.delivery
            self.span = tracer.start_span(
                name, kind=otel.trace.SpanKind.CLIENT, attributes=attributes
            )
            attached = otel.context.attach(otel.trace.set_span_in_context(self.span))
            self._tokens = (self._tokens[0], attached)

    @never_raises
    def _close(self, error: BaseException | None) -> None:
        if self._tokens is not None:
            token, otel_token = self._tokens
            _current.reset(token)
            if otel_token is not None:
                otel.context.detach(otel_token)
        _report(self, error)

    # -- what the stream reports ------------------------------------------------------------

    @never_raises
    def concluded(self, result: StreamResult, stop_latency: float | None) -> None:
        self.result = result
        self.ended_at = self.loop.time()
        self.stop_latency = stop_latency
        if result.anomalies:
            STREAM_LOG.warning(
                "stream %s in channel %s was fed impossible events: %s",
                self.id,
                self.channel_id,
                "; ".join(result.anomalies),
                extra=self.fields(),
            )

    @never_raises
    def shown(self) -> None:
        """Discord accepted the stream's first message."""
        if self.first_text_at is None:
            self.first_text_at = self.loop.time()

    @never_raises
    def provider_closed(
        self, first_chunk_at: float | None, close_by: float, done_at: float | None
    ) -> None:
        """The provider's task is over or given up: when its first chunk came, and whether
        its cleanup kept to its budget (`done_at`: when the stream saw it over; None: it was
        abandoned)."""
        self.first_chunk_at = first_chunk_at
        if done_at is None:
            PROVIDER_LOG.warning(
                "stream %s: the %s provider's task did not end within its cleanup budget "
                "and grace; it was abandoned",
                self.id,
                self.provider,
                extra=self.fields(),
            )
        elif done_at > close_by:
            PROVIDER_LOG.warning(
                "stream %s: the %s provider's cleanup overran its budget by %.3f s",
                self.id,
                self.provider,
                done_at - close_by,
                extra=self.fields(overrun_s=done_at - close_by),
            )

    @never_raises
    def waited_turn(self, seconds: float) -> None:
        """A request waited `seconds` for its turn in the channel's lane (L2)."""
        self.waited += seconds

    @never_raises
    def request(
        self, route: Route, waited: float, took: float, result: IOResultE[object], *, retry: bool
    ) -> None:
        """One Discord request: its wait for the global budget, its time, Discord's answer;
        `retry`: it was Discord's 429 (cordstream sends it again)."""
        self.requests += 1
        self.waited += waited
        _request(self, route, waited, took, result, retry=retry)

    def fields(self, **more: object) -> dict[str, object]:
        """A log record's `extra`: who the stream is, and `more`."""
        fields: dict[str, object] = {
            "stream_id": self.id,
            "channel_id": self.channel_id,
            "guild_id": self.guild_id,
            "provider": self.provider,
            "model": self.model,
        }
        fields.update(more)
        return fields


# -- the figures' forms: a log line, a span, metrics ------------------------------------------


def _request(
    watch: StreamWatch,
    route: Route,
    waited: float,
    took: float,
    result: IOResultE[object],
    *,
    retry: bool,
) -> None:
    """One request: a DEBUG record; counted for the stream's metrics and its span (added
    once, at its end: a counter's sum is the same, and telemetry per request would cost more
    than the rest of the stream's, `bench.telemetry`); if Discord refused it, a WARNING and an
    event on the stream's span."""
    error = _failure_of(result)
    status = 200 if error is None else _attribute(error, "status")
    if not isinstance(status, int):
        status = None
    if error is None:
        outcome = "ok"
    elif status == 429:
        outcome = "rate_limited"
        watch.rate_limited += 1
    else:
        outcome = "refused"
    if error is not None:
        watch.refused += 1
    key = (route, outcome, status)
    watch.counted[key] = watch.counted.get(key, 0) + 1
    if DISCORD_LOG.isEnabledFor(logging.DEBUG):
        DISCORD_LOG.debug(
            "stream %s: %s in channel %s: %s in %.3f s, after %.3f s waiting for the budget",
            watch.id,
            route,
            watch.channel_id,
            "accepted" if error is None else f"HTTP {status}",
            took,
            waited,
            extra=_request_fields(watch, route, status, took, waited),
        )
    if error is not None:
        text = error_text(error, watch.secrets)
        DISCORD_LOG.warning(
            "stream %s: Discord refused a %s in channel %s%s: %s",
            watch.id,
            route,
            watch.channel_id,
            " (429, sent again)" if retry else "",
            text,
            extra=_request_fields(watch, route, status, took, waited) | {"error": text},
        )
    watch.request_time += took
    span = watch.span
    if span is not None and error is not None:  # the others: summed on the span at its end
        attributes: Attributes = {"cordstream.discord.duration": took}
        if status is not None:
            attributes["http.response.status_code"] = status
        attributes["error.type"] = str(status) if status is not None else error_type(error)
        span.add_event(f"discord {route}", attributes)


def _request_fields(
    watch: StreamWatch, route: Route, status: int | None, took: float, waited: float
) -> dict[str, object]:
    return watch.fields(
        route=route, http_status=status, took_s=round(took, 6), budget_wait_s=round(waited, 6)
    )


def _report(watch: StreamWatch, error: BaseException | None) -> None:
    """The stream is over: its log line, its metrics, the end of its span."""
    result = watch.result
    ended = watch.ended_at if watch.ended_at is not None else watch.loop.time()
    if result is not None:
        status: str = result.status
    else:
        status = "cancelled" if isinstance(error, asyncio.CancelledError) else "interrupted"
    failure = _result_error(result)
    usage = None if result is None else result.usage
    seconds = {
        "duration_s": ended - watch.started_at,
        "first_chunk_s": _since(watch, watch.first_chunk_at),
        "first_text_s": _since(watch, watch.first_text_at),
        "stop_latency_s": watch.stop_latency,
    }
    fields = watch.fields(
        status=status,
        **{name: None if value is None else round(value, 6) for name, value in seconds.items()},
        messages_sent=0 if result is None else result.messages_sent,
        discord_requests=watch.requests,
        discord_refused=watch.refused,
        rate_limited=watch.rate_limited,
        budget_wait_s=round(watch.waited, 6),
        input_tokens=None if usage is None else usage.input_tokens,
        output_tokens=None if usage is None else usage.output_tokens,
        error=None if failure is None else error_text(failure, watch.secrets),
    )
    STREAM_LOG.info(
        "stream %s in channel %s: %s after %.2f s (first chunk %s, first text %s); %s "
        "message(s), %s Discord request(s), %s refused (%s x 429), %.2f s waiting for the "
        "budget; tokens in/out %s/%s%s",
        watch.id,
        watch.channel_id,
        status,
        seconds["duration_s"],
        _shown_seconds(seconds["first_chunk_s"]),
        _shown_seconds(seconds["first_text_s"]),
        fields["messages_sent"],
        watch.requests,
        watch.refused,
        watch.rate_limited,
        watch.waited,
        fields["input_tokens"],
        fields["output_tokens"],
        "" if fields["error"] is None else f"; {fields['error']}",
        extra=fields,
    )
    if watch.instruments is not None:
        _record(watch, result, status, failure, seconds)
    if watch.span is not None:
        _end_span(watch, result, status, failure, error)


def _record(
    watch: StreamWatch,
    result: StreamResult | None,
    status: str,
    failure: object,
    seconds: dict[str, float | None],
) -> None:
    instruments = watch.instruments
    assert instruments is not None
    attributes = watch.attributes | _response(result)
    if watch.guild_id is not None:
        attributes["cordstream.discord.guild_id"] = watch.guild_id
    ended = attributes | {"cordstream.stream.status": status}
    if status in ("error", "timeout"):
        ended["error.type"] = "timeout" if status == "timeout" else error_type(failure)
    instruments.streams.add(1, ended)
    duration = seconds["duration_s"]
    assert duration is not None
    failed = {"error.type": ended["error.type"]} if "error.type" in ended else {}
    instruments.duration.record(duration, attributes | failed)
    if seconds["first_chunk_s"] is not None:
        instruments.first_chunk.record(seconds["first_chunk_s"], attributes)
    if seconds["first_text_s"] is not None:
        instruments.first_text.record(seconds["first_text_s"], attributes)
    usage = None if result is None else result.usage
    if usage is not None:
        for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            instruments.token_usage.record(count, attributes | {"gen_ai.token.type": kind})
    for (route, outcome, status_code), count in watch.counted.items():
        counted: Attributes = {
            "cordstream.discord.route": route,
            "cordstream.discord.outcome": outcome,
        }
        if status_code is not None:
            counted["http.response.status_code"] = status_code
        instruments.requests.add(count, counted)
        if outcome == "rate_limited":
            instruments.rate_limited.add(count, {"cordstream.discord.route": route})
    if watch.requests:
        instruments.budget_wait.record(watch.waited, attributes)
    if seconds["stop_latency_s"] is not None:
        kind = "follow_up" if status == "follow_up_interrupt" else "stop"
        instruments.stop_latency.record(seconds["stop_latency_s"], {"cordstream.stop.kind": kind})


def _end_span(
    watch: StreamWatch,
    result: StreamResult | None,
    status: str,
    failure: object,
    error: BaseException | None,
) -> None:
    span = watch.span
    attributes = _response(result) | {"cordstream.stream.status": status}
    if result is not None:
        attributes["cordstream.messages_sent"] = result.messages_sent
        finish = _finish_reason(result)
        if finish is not None:
            attributes["gen_ai.response.finish_reasons"] = [finish]
        if result.usage is not None:
            attributes["gen_ai.usage.input_tokens"] = result.usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = result.usage.output_tokens
        if otel.capture_content():
            attributes["gen_ai.output.messages"] = _output_messages(watch, result, finish)
    attributes["cordstream.discord.requests"] = watch.requests
    attributes["cordstream.discord.request_time"] = watch.request_time
    attributes["cordstream.discord.budget_wait"] = watch.waited
    attributes["cordstream.discord.refused"] = watch.refused
    attributes["cordstream.discord.rate_limited"] = watch.rate_limited
    if watch.first_chunk_at is not None:
        attributes["cordstream.time_to_first_chunk"] = watch.first_chunk_at - watch.started_at
    if watch.first_text_at is not None:
        attributes["cordstream.time_to_first_text"] = watch.first_text_at - watch.started_at
    if watch.stop_latency is not None:
        attributes["cordstream.stop.latency"] = watch.stop_latency
    span.set_attributes(attributes)
    if status in ("error", "timeout"):
        span.set_attribute("error.type", "timeout" if status == "timeout" else error_type(failure))
        silent = "the model went silent"
        description = silent if failure is None else error_text(failure, watch.secrets)
        span.set_status(otel.trace.StatusCode.ERROR, description)
    elif error is not None and not isinstance(error, asyncio.CancelledError):
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_status(otel.trace.StatusCode.ERROR, error_text(error, watch.secrets))
    span.end()


def _response(result: StreamResult | None) -> Attributes:
    metadata = None if result is None else result.data
    found: Attributes = {}
    if isinstance(metadata, Mapping):
        model, response_id = metadata.get("model"), metadata.get("id")
        if isinstance(model, str) and model:
            found["gen_ai.response.model"] = model
        if isinstance(response_id, str) and response_id:
            found["gen_ai.response.id"] = response_id
    return found


def _finish_reason(result: StreamResult) -> str | None:
    if result.status == "function_call":
        return "tool_call"
    metadata = result.data
    if isinstance(metadata, Mapping):
        for key in ("raw_finish_reason", "finish_reason"):
            value = metadata.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def _output_messages(watch: StreamWatch, result: StreamResult, finish: str | None) -> str:
    """`gen_ai.output.messages` (opted in): what reached the channel, redacted (G4)."""
    parts: list[dict[str, object]] = []
    if result.accumulated_text:
        text = redact(result.accumulated_text, watch.secrets)
        parts.append({"type": "text", "content": text})
    for call in result.function_calls:
        arguments = redact(json.dumps(dict(call.arguments), default=str), watch.secrets)
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": arguments}
        )
    message = {"role": "assistant", "parts": parts, "finish_reason": finish or result.status}
    return json.dumps([message], ensure_ascii=False)


def _result_error(result: StreamResult | None) -> object:
    if result is None or result.status != "error":
        return None
    return result.data


def _failure_of(result: IOResultE[object]) -> BaseException | None:
    match result:
        case IOFailure(Failure(error)) if isinstance(error, BaseException):
            return error
    return None


def _since(watch: StreamWatch, at: float | None) -> float | None:
    return None if at is None else at - watch.started_at


def _shown_seconds(seconds: float | None) -> str:
    return "none" if seconds is None else f"{seconds:.2f} s"


# -- run_turn: a span per turn and per tool call, a log line per turn ---------------------------


class TurnWatch(_Watch):
    """One `run_turn` (`cordstream.shell.turn`): the span `invoke_agent` that the turn's model
    calls and tool calls nest under, and the turn's log line."""

    def __init__(self, provider: object, channel: object, secrets: Secrets) -> None:
        self.loop = asyncio.get_running_loop()
        self.started_at = self.loop.time()
        self.provider = provider_name(provider)
        self.model = model_name(provider)
        self.channel_id = _attribute(channel, "channel_id") or _attribute(channel, "id")
        self.guild_id = guild_of(channel)
        self.secrets = secrets
        self.span: Any = None
        self._token: Any = None

    @never_raises
    def _open(self) -> None:
        tracer = otel.tracer()
        if tracer is not None:
            attributes: Attributes = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": self.provider,
            }
            if self.model is not None:
                attributes["gen_ai.request.model"] = self.model
            if isinstance(self.channel_id, int):
                attributes["cordstream.discord.channel_id"] = self.channel_id
            self.span = tracer.start_span("invoke_agent", attributes=attributes)
            self._token = otel.context.attach(otel.trace.set_span_in_context(self.span))

    @never_raises
    def _close(self, error: BaseException | None) -> None:
        if self._token is not None:
            otel.context.detach(self._token)
        if self.span is not None and error is not None:
            if not isinstance(error, asyncio.CancelledError):
                self.span.set_status(otel.trace.StatusCode.ERROR, error_text(error, self.secrets))
            self.span.set_attribute("cordstream.turn.status", type(error).__name__)
            self.span.end()

    @never_raises
    def ended(self, turn: TurnFigures) -> None:
        """The turn's result: its log line, and the end of its span."""
        failed = sum(1 for is_error in turn.tool_errors if is_error)
        problem = None if turn.error is None else error_text(turn.error, self.secrets)
        fields = {
            "channel_id": self.channel_id,
            "guild_id": self.guild_id,
            "provider": self.provider,
            "model": self.model,
            "status": turn.status,
            "duration_s": round(self.loop.time() - self.started_at, 6),
            "segments": turn.segments,
            "tool_calls": len(turn.tool_errors),
            "tool_errors": failed,
            "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens,
            "usage_estimated": turn.usage_estimated,
            "error": problem,
        }
        TURN_LOG.info(
            "turn in channel %s: %s after %s segment(s) and %s tool call(s), %s failed; "
            "tokens in/out %s/%s%s%s",
            self.channel_id,
            turn.status,
            turn.segments,
            len(turn.tool_errors),
            failed,
            turn.input_tokens,
            turn.output_tokens,
            " (estimated)" if turn.usage_estimated else "",
            "" if problem is None else f"; {problem}",
            extra=fields,
        )
        span = self.span
        if span is None:
            return
        span.set_attributes(
            {
                "cordstream.turn.status": turn.status,
                "cordstream.turn.segments": turn.segments,
                "cordstream.turn.tool_calls": len(turn.tool_errors),
                "gen_ai.usage.input_tokens": turn.input_tokens,
                "gen_ai.usage.output_tokens": turn.output_tokens,
            }
        )
        if turn.status in ("error", "timeout", "tool_round_limit", "tool_error_limit"):
            span.set_attribute("error.type", turn.status)
            span.set_status(otel.trace.StatusCode.ERROR, problem or turn.status)
        span.end()


@dataclass(frozen=True, slots=True)
class TurnFigures:
    """What `TurnWatch.ended` reports of a turn."""

    status: str
    segments: int
    tool_errors: tuple[bool, ...]
    input_tokens: int
    output_tokens: int
    usage_estimated: bool
    error: Exception | None


class ToolWatch(_Watch):
    """One tool call: its span `execute_tool {name}` and its log records."""

    def __init__(self, call: FunctionCall, secrets: Secrets) -> None:
        self.call = call
        self.secrets = secrets
        self.loop = asyncio.get_running_loop()
        self.started_at = self.loop.time()
        self.span: Any = None

    @never_raises
    def _open(self) -> None:
        tracer = otel.tracer()
        if tracer is not None:
            attributes: Attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": self.call.name,
                "gen_ai.tool.type": "function",
            }
            if self.call.id is not None:
                attributes["gen_ai.tool.call.id"] = self.call.id
            if otel.capture_content():
                arguments = json.dumps(dict(self.call.arguments), ensure_ascii=False, default=str)
                attributes["gen_ai.tool.call.arguments"] = redact(arguments, self.secrets)
            self.span = tracer.start_span(f"execute_tool {self.call.name}", attributes=attributes)

    @never_raises
    def _close(self, error: BaseException | None) -> None:
        if self.span is not None and error is not None:  # cancelled with its turn
            self.span.set_attribute("error.type", type(error).__qualname__)
            self.span.end()

    @never_raises
    def ran(self, result: str, *, is_error: bool, exception: BaseException | None) -> None:
        """The tool's outcome: what the model is told, and what it raised."""
        took = self.loop.time() - self.started_at
        fields = {"tool": self.call.name, "tool_call_id": self.call.id, "took_s": round(took, 6)}
        problem = None
        if exception is not None:
            problem = error_text(exception, self.secrets)
            TURN_LOG.warning(
                "tool %r raised after %.3f s: %s",
                self.call.name,
                took,
                problem,
                extra=fields | {"error": problem},
            )
        TURN_LOG.debug(
            "tool %r %s in %.3f s",
            self.call.name,
            "failed" if is_error else "ran",
            took,
            extra=fields | {"is_error": is_error},
        )
        error_kind = None
        if is_error:
            error_kind = "tool_error" if exception is None else type(exception).__qualname__
        instruments = otel.instruments()
        if instruments is not None:
            counted: Attributes = {"gen_ai.tool.name": self.call.name}
            counted["cordstream.tool.outcome"] = "error" if is_error else "ok"
            if error_kind is not None:
                counted["error.type"] = error_kind
            instruments.tool_calls.add(1, counted)
        span = self.span
        if span is None:
            return
        if otel.capture_content():
            span.set_attribute("gen_ai.tool.call.result", redact(result, self.secrets))
        if error_kind is not None:
            span.set_attribute("error.type", error_kind)
            span.set_status(otel.trace.StatusCode.ERROR, problem or redact(result, self.secrets))
        span.end()
