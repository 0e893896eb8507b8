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

`start_stream` (the skeleton of `cordstream.shell.providers.base.Adapter`) keeps the
per-stream state (usage, content blocks, stop reason) and yields one chunk per SDK event up to
`message_stop`: an empty `TextChunk` when it shows nothing, so a long tool input or thinking
signature re-arms the inactivity deadline (B2); an SDK or HTTP failure ends the stream with an
`ErrorChunk`. `ping` events cannot: the SDK drops them before the adapter
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
  stream ends with `ProviderError("api_error", code="invalid_tool_arguments", retryable=True)`
  (a new request usually gets valid input), as from every adapter; so does a call without a
  name (`code="invalid_tool_call"`). Tool blocks of an answer that stopped for another
  reason (`max_tokens` cut the input short) are not calls: the answer ends with a `DoneChunk`.
- **Finish.** `message_stop` makes the terminal chunk: `DoneChunk(finish_metadata(stop_reason,
  model=message.model, response_id=message.id), usage=merged)`, plus `stop_sequence` in the
  metadata when one matched. `refusal` with no visible text and no tool call is
  `ErrorChunk(content_blocked_error("refusal"))` (its original is the API's `stop_details`);
  with text it is a `DoneChunk` with `finish_reason` `content_filter`. `pause_turn` is
  `other`. A stream that ends without `message_stop` is `ErrorChunk(truncated_error())`.
- **The terminal chunk waits for the end of the body**, as in every adapter. The API closes
  the stream right after `message_stop`; the adapter reads it out before yielding the terminal
  chunk, so the SDK's nested event generators finish on their own instead of being left to
  the garbage collector, which would close each in a task of its own after the stream (B11),
  and the connection goes back to the pool: this SDK's generators need no closing by the
  adapter. Events after `message_stop` are ignored, and so is a failure there (the answer was
  whole).
- **Errors.** `APIStatusError`: type and message come from the body
  `{"type": "error", "error": {"type", "message"}}` and go to `base.error_from_status` with the
  HTTP status. A mid-stream `event: error` reaches the adapter as an `APIStatusError` whose
  status is the stream's own 200; it is mapped with status `None` (the error type decides:
  `overloaded_error` → `provider_overloaded`; an unclassified one is retryable) and its `code`
  is the error type. `APITimeoutError` and httpx2 timeouts → `timeout_error`;
  `APIConnectionError` and httpx2 transport errors → `connection_error` (the SDK does not wrap
  a connection cut mid-stream: it raises `httpx2.RemoteProtocolError`); an event whose data is
  not JSON → `malformed_event_error` (`api_error`, retryable). Anything else is a bug and
  propagates (B13).
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

The provider's `client`, `model`, `messages`, `max_tokens`, `system`, `tools` and `params` are
read-only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Self, TypeAlias, cast

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

from cordstream import domain
from cordstream.shell.providers import base
from cordstream.shell.providers.base import ToolOutcome

AnthropicItem: TypeAlias = domain.ProcessedChunk
"""What `start_stream` yields: finished chunks (`base` says why `process_chunk` passes them on)."""

_KEEP_ALIVE: Final = domain.TextChunk("")


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
            self.input = base.tool_arguments(raw)
        except ValueError as problem:
            self.input_error = str(problem)

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

    def call(self) -> domain.FunctionCall:
        return domain.FunctionCall(
            name=self.initial("name"),
            arguments=dict(self.input or {}),  # a copy: the tool may not edit what goes back
            id=self.initial("id") or None,
        )

    def initial(self, key: str) -> str:
        value = self.start.get(key)
        return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class _ToolTurn:
    """The last answer, when it ended in tool calls: what `after_tools` appends."""

    content: tuple[ContentBlockParam, ...]
    calls: tuple[domain.FunctionCall, ...]


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
    finished: bool = False  # message_stop came: nothing after it counts

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

    def take(self, event: RawMessageStreamEvent) -> domain.ProcessedChunk | None:
        """Record one SDK event; what it shows now (None from `message_stop` on: the terminal
        chunk waits for the end of the body)."""
        if self.finished:
            return None
        # Dispatch on the wire `type`, not the class: the SDK builds an event, block or delta of
        # an unknown type as the first class of its union with the fields left None.
        kind = getattr(event, "type", None)
        if kind == "content_block_delta":  # the most frequent first
            return _on_delta(self, _index(event), getattr(event, "delta", None))
        if kind == "message_start":
            message = getattr(event, "message", None)
            self.message_id = _text(message, "id") or None
            self.model = _text(message, "model") or None
            self.usage = _dump(getattr(message, "usage", None))
            return domain.TextChunk("", usage=dict(self.usage) or None)
        if kind == "content_block_start":
            block = _Block(_dump(getattr(event, "content_block", None)))
            self.blocks[_index(event)] = block
            return _shown(block.type, block.initial("text"), block.initial("thinking"))
        if kind == "content_block_stop":
            self.block(_index(event)).finish()
            return _KEEP_ALIVE
        if kind == "message_delta":
            delta = getattr(event, "delta", None)
            self.stop_reason = _text(delta, "stop_reason") or self.stop_reason
            self.stop_sequence = _text(delta, "stop_sequence") or self.stop_sequence
            self.stop_details = getattr(delta, "stop_details", None) or self.stop_details
            self.usage = {**self.usage, **_dump(getattr(event, "usage", None))}
            return domain.TextChunk("", usage=dict(self.usage) or None)
        if kind == "message_stop":
            self.finished = True
            return None
        return _KEEP_ALIVE  # an event this adapter does not know: a keep-alive

    def terminal(self) -> tuple[domain.ProcessedChunk, _ToolTurn | None]:
        """The last chunk of the stream, and the answer to remember for `after_tools`."""
        usage = dict(self.usage)
        tools = self.tool_blocks()
        for block in tools:
            if block.input is None and block.input_error is None:
                block.finish()  # its content_block_stop never came
        if self.stop_reason == "tool_use" and tools:
            broken = next((block for block in tools if block.input_error is not None), None)
            if broken is not None:
                name, problem = broken.initial("name"), str(broken.input_error)
                return domain.ErrorChunk(
                    base.invalid_tool_arguments_error(name, problem), usage=usage
                ), None
            calls = tuple(block.call() for block in tools)
            end = base.calls_end(calls, usage=usage)
            if isinstance(end, domain.ErrorChunk):
                return end, None
            return end, _ToolTurn(tuple(block.param() for block in self.ordered()), calls)
        extra = {"stop_sequence": self.stop_sequence} if self.stop_sequence else {}
        return base.text_end(
            self.stop_reason,
            shown=self.has_text(),
            usage=usage,
            model=self.model,
            response_id=self.message_id,
            original=self.stop_details,
            **extra,
        ), None


class AnthropicProvider(
    base.Adapter[anthropic.AsyncAnthropic, anthropic.AsyncStream[RawMessageStreamEvent], _ToolTurn]
):
    """A stream of Claude's Messages API; see the module docstring for the rules."""

    name = "anthropic"
    _label = "Anthropic"
    messages = base.ReadOnly[tuple[MessageParam, ...]]()
    max_tokens = base.ReadOnly[int]()
    system = base.ReadOnly[str | Sequence[TextBlockParam] | None]()
    tools = base.ReadOnly[tuple[ToolParam, ...] | None]()
    params = base.ReadOnly[Mapping[str, object]]()

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
        super().__init__(client, model)
        self._messages = tuple(messages)
        self._max_tokens = max_tokens
        self._system = system
        self._tools = tuple(tools) if tools else None
        self._params = MappingProxyType(dict(params))

    def _continued(self, turn: _ToolTurn, outcomes: Sequence[ToolOutcome]) -> Self:
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
            *self._messages,
            {"role": "assistant", "content": list(turn.content)},
            {"role": "user", "content": results},
        ]
        return type(self)(
            self._client,
            model=self._model,
            messages=messages,
            max_tokens=self._max_tokens,
            system=self._system,
            tools=self._tools,
            **self._params,
        )

    # --- the stream -------------------------------------------------------------------------

    def _request(self) -> dict[str, Any]:
        request: dict[str, Any] = {
            **self._params,
            "model": self._model,
            "messages": list(self._messages),
            "max_tokens": self._max_tokens,
            "stream": True,
        }
        if self._system:
            request["system"] = (
                self._system if isinstance(self._system, str) else list(self._system)
            )
        if self._tools:
            request["tools"] = list(self._tools)
        return request

    async def _open(self) -> anthropic.AsyncStream[RawMessageStreamEvent]:
        return cast(
            "anthropic.AsyncStream[RawMessageStreamEvent]",
            await self._client.messages.create(**self._request()),
        )

    def _answer(self) -> _Answer:
        return _Answer()

    def _failure(self, error: Exception) -> domain.ProviderError | None:
        return _failure(error)

    async def _close_stream(self, stream: anthropic.AsyncStream[RawMessageStreamEvent]) -> None:
        await stream.close()


def _on_delta(answer: _Answer, index: int, delta: object) -> domain.ProcessedChunk:
    kind = getattr(delta, "type", None)
    if kind == "text_delta":
        text = _text(delta, "text")
        answer.block(index, "text").text.append(text)
        return domain.TextChunk(text)
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


def _shown(kind: str, text: str, thinking: str) -> domain.ProcessedChunk:
    if kind == "text" and text:
        return domain.TextChunk(text)
    if kind == "thinking" and thinking:
        return domain.TextChunk("", thoughts=(domain.Thought("raw", thinking),))
    return _KEEP_ALIVE


# --- errors ---------------------------------------------------------------------------------


def _failure(error: Exception) -> domain.ProviderError | None:
    """The `ProviderError` for an SDK or HTTP failure; None for anything else (a bug: raise)."""
    if isinstance(error, anthropic.APIStatusError):
        return _status_failure(error)
    if isinstance(error, anthropic.APITimeoutError | httpx2.TimeoutException):
        return base.timeout_error(error)
    if isinstance(error, anthropic.APIConnectionError | httpx2.TransportError):
        return base.connection_error(error)
    if isinstance(error, json.JSONDecodeError):
        return base.malformed_event_error(error)
    if isinstance(error, anthropic.APIError):
        return base.error_from_status(None, error.message, original=error)
    return None


def _status_failure(error: anthropic.APIStatusError) -> domain.ProviderError:
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
