"""`AnthropicProvider`: Claude's streaming Messages API as a `StreamProvider` (SPEC §A).

It calls `client.messages.create(..., stream=True)` and reads the SDK's raw server-sent events
(`message_start`, `content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`).
The raw events are used rather than `client.messages.stream()`: that helper accumulates a
snapshot per event and adds event kinds of its own, none of which the adapter needs, and the
raw events are the API's documented wire contract. The request carries `model`, `messages`,
`max_tokens` and `stream: true`; `system` and `tools` only when given (None, `""` and an empty
list are "not given"); anything else (`thinking`, `metadata`, `stop_sequences`,
`extra_headers`, `extra_body` …) goes to `messages.create` unchanged. (The installed SDK's
`create` has no `temperature`/`top_p` keywords: send them in `extra_body`.)

`start_stream` keeps the per-stream state (usage, content blocks, stop reason) and yields one
item per SDK event, already decided: a `ProcessedChunk`, or a `base.Failed` for an SDK or HTTP
failure, which `process_chunk` turns into an `ErrorChunk`. Every event yields something (an
empty `TextChunk` when it shows nothing), so a long tool input or thinking signature re-arms
the inactivity deadline (B2). `ping` events cannot: the SDK drops them before the adapter
sees them. Events are told apart by their wire `type`, not their class: the SDK builds an
event, block or delta of a type it does not know as the *first* class of its union with every
field None, so matching on classes would read a future event as a `message_start`. Unknown
events, blocks and deltas are keep-alives.

Rules (where the shared contract in `cordstream.shell.providers.base` left a choice):

- **Text** (`text_delta`) is passed through as-is. Several text blocks (text, tool call, text;
  or a block per citation) follow each other with no separator added: the model writes its
  own whitespace, and a separator would split a sentence that a citation cut in two.
- **Thinking** (`thinking_delta`) becomes `Thought("raw", delta)` on an empty `TextChunk`;
  `redacted_thinking` shows nothing. Both, and every `signature_delta`, are kept for
  `after_tools`.
- **Usage.** `message_start` carries the input side (`input_tokens`, the cache counts) and a
  first output count; `message_delta` carries the running output total and may repeat input
  fields. The adapter keeps `message_start`'s usage, overlays every field each `message_delta`
  reports (never adds), and puts the merged mapping on the `message_start` chunk, on every
  `message_delta` chunk and on the terminal chunk: a stream that fails after `message_start`
  still bills its input, and the latest report is always complete.
- **Tool calls.** A `tool_use` block's id and name come from `content_block_start`; its input
  is the concatenated `input_json_delta.partial_json`, parsed at `content_block_stop` (empty →
  the start block's own `input`, normally `{}`). At `message_stop` with stop reason `tool_use`,
  every call of the answer goes out in one `FunctionCallChunk`, in order, with the merged
  usage. Input that is not a JSON object is an error, not a call with made-up arguments: the
  stream ends with `ProviderError("api_error", code="invalid_tool_input", retryable=True)` (a
  new request usually gets valid input). Tool blocks of an answer that stopped for another
  reason (`max_tokens` cut the input short) are not calls: the answer ends with a `DoneChunk`.
- **Finish.** `message_stop` makes the terminal chunk: `DoneChunk(finish_metadata(stop_reason,
  model=message.model, response_id=message.id), usage=merged)`, plus `stop_sequence` in the
  metadata when one matched. `refusal` with no visible text and no tool call is
  `ErrorChunk(content_blocked_error("refusal"))` (its original is the API's `stop_details`);
  with text it is a `DoneChunk` with `finish_reason` `content_filter`. `pause_turn` is
  `other`. A stream that ends without `message_stop` is `Failed(truncated_error())`.
- **The terminal chunk waits for the end of the body.** The API closes the stream right after
  `message_stop`; the adapter reads it out before yielding the terminal chunk, so the SDK's
  nested event generators finish on their own instead of being left to the garbage collector,
  which would close each in a task of its own after the stream (B11), and the connection goes
  back to the pool. Events after `message_stop` are ignored, and so is a failure there (the
  answer was whole).
- **Errors.** `APIStatusError`: type and message come from the body
  `{"type": "error", "error": {"type", "message"}}` and go to `base.error_from_status` with the
  HTTP status. A mid-stream `event: error` reaches the adapter as an `APIStatusError` whose
  status is the stream's own 200; it is mapped with status `None` (the error type decides:
  `overloaded_error` → `provider_overloaded`; an unclassified one is retryable) and its `code`
  is the error type. `APITimeoutError` and httpx2 timeouts → `timeout_error`;
  `APIConnectionError` and httpx2 transport errors → `connection_error` (the SDK does not wrap
  a connection cut mid-stream: it raises `httpx2.RemoteProtocolError`); an event whose data is
  not JSON → `api_error`, retryable. Anything else is a bug and propagates (B13).
- **Closing.** The SDK stream's HTTP response is closed in `finally` on every exit path (B10),
  including the shell's `aclose()` between two chunks. The client is the caller's: its retries
  and timeouts are untouched and it is never closed.

`after_tools(outcomes)` returns a new provider whose messages are this request's, then the
answer as an assistant message (its content blocks as received and in order: thinking with
its signature, redacted thinking with its data, text with its citations, tool calls with id,
name and parsed input), then a user message of `tool_result` blocks in `outcomes` order
(`is_error: true` only for a failed tool). It raises `ValueError` unless the last stream ended
in tool calls, or when the outcomes do not answer exactly that answer's calls (the API rejects
a tool call without its result).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, cast

import anthropic
import httpx2
import pydantic
from anthropic.types import (
    ContentBlockParam,
    MessageParam,
    RawMessageStreamEvent,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
)

from cordstream.domain import (
    DoneChunk,
    ErrorChunk,
    FunctionCall,
    FunctionCallChunk,
    ProcessedChunk,
    ProviderError,
    TextChunk,
    Thought,
)
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext
from cordstream.shell.providers import base
from cordstream.shell.providers.base import Failed, ToolOutcome
from cordstream.shell.secrets import client_secrets

AnthropicItem: TypeAlias = ProcessedChunk | Failed
"""What `start_stream` yields: a decided chunk, or a failure to report as an `ErrorChunk`."""

_KEEP_ALIVE: Final = TextChunk("")


@dataclass
class _Block:
    """One content block of the answer, as it streams in."""

    start: dict[str, object]  # the content_block_start block, as sent
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    json: list[str] = field(default_factory=list)
    citations: list[dict[str, object]] = field(default_factory=list)
    input: dict[str, object] | None = None  # parsed at content_block_stop
    input_error: str | None = None

    @property
    def type(self) -> str:
        return str(self.start.get("type", ""))

    def finish(self) -> None:
        """content_block_stop: parse a tool's input (empty → the start block's own input)."""
        if "input" not in self.start and not self.json:
            return
        raw = "".join(self.json)
        if not raw.strip():
            initial = self.start.get("input")
            self.input = (
                dict(cast("Mapping[str, object]", initial)) if isinstance(initial, Mapping) else {}
            )
            return
        try:
            parsed: object = json.loads(raw)
        except ValueError as error:
            self.input_error = f"not JSON ({error})"
            return
        if not isinstance(parsed, dict):
            self.input_error = f"a JSON {type(parsed).__name__}, not an object"
            return
        self.input = cast("dict[str, object]", parsed)

    def param(self) -> ContentBlockParam:
        """The block as the next request's assistant content: as received, in full."""
        kind = self.type
        if kind == "text":
            text: TextBlockParam = {
                "type": "text",
                "text": self.initial("text") + "".join(self.text),
            }
            if self.citations:
                text["citations"] = cast(Any, self.citations)
            return text
        if kind == "thinking":
            return {
                "type": "thinking",
                "thinking": self.initial("thinking") + "".join(self.thinking),
                "signature": self.initial("signature") + "".join(self.signature),
            }
        if kind == "redacted_thinking":
            return {"type": "redacted_thinking", "data": self.initial("data")}
        block = dict(self.start)
        if self.input is not None:
            block["input"] = self.input
        return cast("ContentBlockParam", block)

    def call(self) -> FunctionCall:
        return FunctionCall(
            name=self.initial("name"),
            arguments=dict(self.input or {}),  # a copy: the tool may not edit what goes back
            id=self.initial("id") or None,
        )

    def initial(self, key: str) -> str:
        value = self.start.get(key)
        return value if isinstance(value, str) else ""


@dataclass
class _Answer:
    """What one stream has said so far."""

    message_id: str | None = None
    model: str | None = None
    usage: dict[str, object] = field(default_factory=dict)
    blocks: dict[int, _Block] = field(default_factory=dict)
    stop_reason: str | None = None
    stop_sequence: str | None = None
    stop_details: object = None
    finished: bool = False

    def block(self, index: int, kind: str = "text") -> _Block:
        """The block at `index`; a delta without its start opens a block of the delta's kind."""
        if index not in self.blocks:
            self.blocks[index] = _Block({"type": kind})
        return self.blocks[index]

    def ordered(self) -> list[_Block]:
        return [self.blocks[index] for index in sorted(self.blocks)]

    def tool_blocks(self) -> list[_Block]:
        return [block for block in self.ordered() if block.type == "tool_use"]

    def has_text(self) -> bool:
        return any(
            "".join(block.text).strip() or block.initial("text").strip()
            for block in self.ordered()
            if block.type == "text"
        )


@dataclass(frozen=True)
class _ToolTurn:
    """The last answer, when it ended in tool calls: what `after_tools` appends."""

    content: tuple[ContentBlockParam, ...]
    calls: tuple[FunctionCall, ...]


class AnthropicProvider:
    """A stream of Claude's Messages API; see the module docstring for the rules."""

    name = "anthropic"

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        model: str,
        messages: Sequence[MessageParam],
        max_tokens: int,
        system: str | Sequence[TextBlockParam] | None = None,
        tools: Sequence[ToolParam] | None = None,
        **params: object,
    ) -> None:
        if "stream" in params:
            raise TypeError("AnthropicProvider always streams; do not pass `stream`")
        self.client = client
        self.model = model
        self.messages: tuple[MessageParam, ...] = tuple(messages)
        self.max_tokens = max_tokens
        self.system = system
        self.tools: tuple[ToolParam, ...] | None = tuple(tools) if tools else None
        self.params: dict[str, object] = dict(params)
        self._last_tool_turn: _ToolTurn | None = None

    def secrets(self) -> tuple[str, ...]:
        """The client's API key, auth token and credential headers, removed from every embed
        (G4)."""
        return client_secrets(self.client)

    # --- StreamProvider ---------------------------------------------------------------------

    def start_stream(
        self, config: StreamConfig, context: StreamContext
    ) -> AsyncIterator[AnthropicItem]:
        """A fresh request per call (a retry calls it again)."""
        return self._stream()

    def process_chunk(self, raw: AnthropicItem) -> ProcessedChunk:
        return base.chunk_of(raw)

    def describe_error(self, error: ProviderError, locale: str) -> str | None:
        return base.describe_error(error, locale)

    # --- ToolProvider -----------------------------------------------------------------------

    def after_tools(self, outcomes: Sequence[ToolOutcome]) -> AnthropicProvider:
        turn = self._last_tool_turn
        if turn is None:
            raise ValueError("the last Anthropic stream did not end in tool calls")
        base.check_outcomes(turn.calls, outcomes, "Anthropic")
        results: list[ContentBlockParam] = []
        for outcome in outcomes:
            result: ToolResultBlockParam = {
                "type": "tool_result",
                "tool_use_id": str(outcome.call.id),
                "content": outcome.output,
            }
            if outcome.is_error:
                result["is_error"] = True
            results.append(result)
        messages: list[MessageParam] = [
            *self.messages,
            {"role": "assistant", "content": list(turn.content)},
            {"role": "user", "content": results},
        ]
        return AnthropicProvider(
            self.client,
            model=self.model,
            messages=messages,
            max_tokens=self.max_tokens,
            system=self.system,
            tools=self.tools,
            **self.params,
        )

    # --- the stream -------------------------------------------------------------------------

    def _request(self) -> dict[str, Any]:
        request: dict[str, Any] = {
            **self.params,
            "model": self.model,
            "messages": list(self.messages),
            "max_tokens": self.max_tokens,
            "stream": True,
        }
        if self.system:
            request["system"] = self.system if isinstance(self.system, str) else list(self.system)
        if self.tools:
            request["tools"] = list(self.tools)
        return request

    async def _stream(self) -> AsyncIterator[AnthropicItem]:
        self._last_tool_turn = None
        try:
            stream = cast(
                "anthropic.AsyncStream[RawMessageStreamEvent]",
                await self.client.messages.create(**self._request()),
            )
        except Exception as error:
            failure = _failure(error)
            if failure is None:
                raise
            yield Failed(failure)
            return
        answer = _Answer()
        final: ProcessedChunk | None = None  # the terminal chunk, made at message_stop
        try:
            while True:
                try:
                    event = await anext(stream)
                except StopAsyncIteration:
                    break
                except Exception as error:
                    failure = _failure(error)
                    if failure is None:
                        raise
                    if final is not None:
                        break  # the answer was whole: a cut after message_stop changes nothing
                    yield Failed(failure)
                    return
                if final is not None:
                    continue  # nothing counts after message_stop
                chunk = self._on_event(answer, event)
                if answer.finished:
                    final = chunk  # yielded when the body ends, so the SDK's stream is read out
                else:
                    yield chunk
            yield final if final is not None else Failed(base.truncated_error())
        finally:
            await stream.close()

    def _on_event(self, answer: _Answer, event: object) -> ProcessedChunk:
        # Dispatch on the wire `type`, not the class: the SDK builds an event, block or delta of
        # an unknown type as the first class of its union with the fields left None.
        kind = getattr(event, "type", None)
        if kind == "content_block_delta":  # the most frequent first
            return _on_delta(answer, _index(event), getattr(event, "delta", None))
        if kind == "message_start":
            message = getattr(event, "message", None)
            answer.message_id = _text(message, "id") or None
            answer.model = _text(message, "model") or None
            answer.usage = _dump(getattr(message, "usage", None))
            return TextChunk("", usage=dict(answer.usage) or None)
        if kind == "content_block_start":
            block = _Block(_dump(getattr(event, "content_block", None)))
            answer.blocks[_index(event)] = block
            return _shown(block.type, block.initial("text"), block.initial("thinking"))
        if kind == "content_block_stop":
            answer.block(_index(event)).finish()
            return _KEEP_ALIVE
        if kind == "message_delta":
            delta = getattr(event, "delta", None)
            answer.stop_reason = _text(delta, "stop_reason") or answer.stop_reason
            answer.stop_sequence = _text(delta, "stop_sequence") or answer.stop_sequence
            answer.stop_details = getattr(delta, "stop_details", None) or answer.stop_details
            answer.usage = {**answer.usage, **_dump(getattr(event, "usage", None))}
            return TextChunk("", usage=dict(answer.usage) or None)
        if kind == "message_stop":
            answer.finished = True
            return self._finish(answer)
        return _KEEP_ALIVE  # an event this adapter does not know: a keep-alive

    def _finish(self, answer: _Answer) -> ProcessedChunk:
        usage = dict(answer.usage)
        tools = answer.tool_blocks()
        for block in tools:
            if block.input is None and block.input_error is None:
                block.finish()  # its content_block_stop never came
        if answer.stop_reason == "tool_use" and tools:
            broken = [block for block in tools if block.input_error is not None]
            if broken:
                block = broken[0]
                return ErrorChunk(
                    ProviderError(
                        "api_error",
                        f"the model's input for tool {block.start.get('name')!r} is "
                        f"{block.input_error}",
                        code="invalid_tool_input",
                        retryable=True,
                    ),
                    usage=usage,
                )
            calls = tuple(block.call() for block in tools)
            self._last_tool_turn = _ToolTurn(
                tuple(block.param() for block in answer.ordered()), calls
            )
            return FunctionCallChunk(calls, usage=usage)
        if answer.stop_reason == "refusal" and not answer.has_text():
            return ErrorChunk(
                base.content_blocked_error("refusal", original=answer.stop_details), usage=usage
            )
        metadata = base.finish_metadata(
            answer.stop_reason, model=answer.model, response_id=answer.message_id
        )
        if answer.stop_sequence:
            metadata["stop_sequence"] = answer.stop_sequence
        return DoneChunk(metadata, usage=usage)


def _on_delta(answer: _Answer, index: int, delta: object) -> ProcessedChunk:
    kind = getattr(delta, "type", None)
    if kind == "text_delta":
        text = _text(delta, "text")
        answer.block(index, "text").text.append(text)
        return TextChunk(text)
    if kind == "thinking_delta":
        thinking = _text(delta, "thinking")
        answer.block(index, "thinking").thinking.append(thinking)
        return _shown("thinking", "", thinking)
    if kind == "signature_delta":
        answer.block(index, "thinking").signature.append(_text(delta, "signature"))
    elif kind == "input_json_delta":
        answer.block(index, "tool_use").json.append(_text(delta, "partial_json"))
    elif kind == "citations_delta":
        citation = _dump(getattr(delta, "citation", None))
        if citation:
            answer.block(index, "text").citations.append(citation)
    return _KEEP_ALIVE


def _text(item: object, name: str) -> str:
    value = getattr(item, name, None)
    return value if isinstance(value, str) else ""


def _index(event: object) -> int:
    index = getattr(event, "index", None)
    return index if isinstance(index, int) else 0


def _dump(item: object) -> dict[str, object]:
    """An SDK model (or a mapping) as a plain dict of the fields it holds, as sent."""
    if isinstance(item, pydantic.BaseModel):
        return item.model_dump(exclude_none=True)
    if isinstance(item, Mapping):
        return dict(cast("Mapping[str, object]", item))
    return {}


def _shown(kind: str, text: str, thinking: str) -> ProcessedChunk:
    if kind == "text" and text:
        return TextChunk(text)
    if kind == "thinking" and thinking:
        return TextChunk("", thoughts=(Thought("raw", thinking),))
    return _KEEP_ALIVE


# --- errors ---------------------------------------------------------------------------------


def _failure(error: Exception) -> ProviderError | None:
    """The `ProviderError` for an SDK or HTTP failure; None for anything else (a bug: raise)."""
    if isinstance(error, anthropic.APIStatusError):
        return _status_failure(error)
    if isinstance(error, anthropic.APITimeoutError | httpx2.TimeoutException):
        return base.timeout_error(error)
    if isinstance(error, anthropic.APIConnectionError | httpx2.TransportError):
        return base.connection_error(error)
    if isinstance(error, json.JSONDecodeError):
        return base.error_from_status(
            None, f"the provider sent an event that is not JSON ({error})", original=error
        )
    if isinstance(error, anthropic.APIError):
        return base.error_from_status(None, error.message, original=error)
    return None


def _status_failure(error: anthropic.APIStatusError) -> ProviderError:
    error_type, message = _error_body(error.body)
    # A mid-stream `error` event arrives on the stream's own 2xx response: no HTTP status.
    status = error.status_code if error.status_code >= 400 else None
    return base.error_from_status(
        status,
        message or error.message,
        code=error_type if status is None else None,
        error_type=error_type,
        original=error,
    )


def _error_body(body: object) -> tuple[str | None, str]:
    """`(error.type, error.message)` of `{"type": "error", "error": {...}}`."""
    if not isinstance(body, Mapping):
        return None, ""
    inner = cast("Mapping[str, object]", body).get("error")
    if not isinstance(inner, Mapping):
        return None, ""
    details = cast("Mapping[str, object]", inner)
    error_type = details.get("type")
    message = details.get("message")
    return (
        error_type if isinstance(error_type, str) else None,
        message if isinstance(message, str) else "",
    )
