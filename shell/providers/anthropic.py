"""`AnthropicProvider`: Claude's streaming Messages API as a `StreamProvider` (SPEC §A).

It sends one `client.messages.create(..., stream=True)` request on the caller's
`anthropic.AsyncAnthropic` and reads the SDK's raw server-sent events (`message_start`,
`content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`), the API's documented
wire contract, rather than the `client.messages.stream()` helper. Which fields it reads, how it
merges usage and how each way of ending becomes the terminal chunk is stated in the contract's
"Provider adapters" section (Anthropic Messages); what every adapter shares is
`cordstream.shell.providers.base`.

The idea: the answer is a list of content blocks, and the per-stream state (`_Answer`, driven
by the skeleton of `base.Adapter`) rebuilds them as they stream, in order: text, thinking with
its signature, redacted thinking, tool calls with their input. The blocks give the chunks as
they come (text, thoughts, an empty `TextChunk` for the rest), the tool calls at
`message_stop`, and, kept whole, the assistant message `after_tools` hands back. Events are
told apart by their wire `type`, never their class, since the SDK builds an event of a type it
does not know as the first class of its union.

Closing (B10, B11): the terminal chunk waits for the end of the body. The API closes the
stream right after `message_stop`, and the adapter reads it out before yielding the terminal
chunk, so the SDK's nested event generators finish on their own and the connection goes back to
the pool. A stream closed mid-answer (a stop, the shell's `aclose()` between two chunks) leaves
them suspended: the adapter closes them itself, outer first, as it does for openai's (the same
Stainless layout, `base.stream_iterator`), instead of leaving them to the garbage collector,
which would close each in a task of its own, after the stream. The SDK stream's HTTP response
is closed in `finally` on every exit path.

It never sets the client's retries or timeouts and never closes the client.
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
from cordstream.shell.providers.connection import connection_error

AnthropicItem: TypeAlias = base.Item
"""What `start_stream` yields: finished chunks, plain text as a `str` (`base.Item`)."""

_KEEP_ALIVE: Final = base.KEEP_ALIVE
_CLOSED: Final = object()  # `_Answer.open_index` while no text block is open: equal to no index
_SDK_PACKAGES: Final = ("anthropic.", "httpx2.", "httpcore2.")


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
    # The text block that started and has not stopped (its index, its text), which nearly
    # every event adds to: `take` reads those events against it, without a lookup.
    open_index: object = _CLOSED
    open_text: list[str] = field(default_factory=list)

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

    def take(self, event: Any) -> AnthropicItem | None:
        """Record one SDK event; what it shows now (None from `message_stop` on: the terminal
        chunk waits for the end of the body)."""
        # The most frequent event of all, a text delta to the open text block, read as the
        # SDK's models hold it, without a `getattr` call per field; any other shape below.
        try:
            if event.type == "content_block_delta" and event.index == self.open_index:
                delta = event.delta
                text = delta.text if delta.type == "text_delta" else None
                if type(text) is str:
                    self.open_text.append(text)
                    return text or _KEEP_ALIVE  # plain text: a `str` (`base.Item`)
        except AttributeError:  # a field missing: as below
            pass
        if self.finished:
            return None
        # Dispatch on the wire `type`, not the class: the SDK builds an event, block or delta of
        # an unknown type as the first class of its union with the fields left None.
        kind = getattr(event, "type", None)
        if kind == "content_block_delta":
            return _on_delta(self, _index(event), getattr(event, "delta", None))
        if kind == "message_start":
            message = getattr(event, "message", None)
            self.message_id = _text(message, "id") or None
            self.model = _text(message, "model") or None
            self.usage = _dump(getattr(message, "usage", None))
            return domain.TextChunk("", usage=dict(self.usage) or None)
        if kind == "content_block_start":
            index, block = _index(event), _Block(_dump(getattr(event, "content_block", None)))
            self.blocks[index] = block
            if block.type == "text":
                self.open_index, self.open_text = index, block.text
            else:
                self.open_index = _CLOSED
            return _shown(block.type, block.initial("text"), block.initial("thinking"))
        if kind == "content_block_stop":
            self.open_index = _CLOSED
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
            self.finished, self.open_index = True, _CLOSED
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
    """A stream of Claude's Messages API; its rules: the contract's "Provider adapters" section."""

    name = "anthropic"
    _label = "Anthropic"
    _sdk_packages = _SDK_PACKAGES
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

    def _sdk_root(self, stream: anthropic.AsyncStream[RawMessageStreamEvent]) -> object:
        return base.stream_iterator(stream)  # the generator under the stream, and its own

    async def _close_stream(self, stream: anthropic.AsyncStream[RawMessageStreamEvent]) -> None:
        await stream.close()


def _on_delta(answer: _Answer, index: int, delta: object) -> AnthropicItem:
    kind = getattr(delta, "type", None)
    if kind == "text_delta":  # not to the open text block, or not a `str` (else `take` did it)
        text = getattr(delta, "text", None)
        if not isinstance(text, str):
            text = ""
        block = answer.blocks.get(index) or answer.block(index, "text")
        block.text.append(text)
        return text or _KEEP_ALIVE  # plain text: a `str` (`base.Item`)
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
        return connection_error(error, connecting=(httpx2.ConnectError,))
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
