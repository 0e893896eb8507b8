"""`OpenAIChatProvider`: streaming chat completions as a `StreamProvider` (SPEC §A).

It sends one `client.chat.completions.create(..., stream=True)` request, usage asked for, on
the caller's `openai.AsyncOpenAI`, so it works against OpenAI and every OpenAI-compatible
server (OpenRouter, Ollama, vLLM, LM Studio, llama.cpp, DeepSeek …), and reads the SDK's
`ChatCompletionChunk`s. Which fields it reads, how it assembles tool calls and how each way of
ending becomes the terminal chunk is stated in the contract's "Provider adapters" section
(OpenAI chat completions); what every adapter shares is `cordstream.shell.providers.base`.

The idea: the per-stream state (`_Answer`, driven by the skeleton of `base.Adapter`) collects
and decides nothing final until the SDK's stream is over. The text, the reasoning and the
tool-call fragments arrive spread over many chunks, servers disagree on where usage comes
(every chunk, the finish chunk, a trailing chunk without choices) and on how calls are
numbered, and some send chunks after the finish reason. So each SDK chunk only yields what it
shows (an empty `TextChunk` when nothing), and the tool calls, the usage and the finish are
turned into one terminal chunk after the stream, when all of it is known. The SDK builds
chunks without validation, so every field is read defensively, and once per chunk, where
pydantic keeps it (`base.fields_of`): `getattr` of the fields a chunk lacks (most of them, on
most chunks) would cost pydantic's `__getattr__` exception each time.

Closing (B10, B11): the SDK stream's HTTP response is closed in `finally` on every exit path,
before the terminal chunk is yielded. The SDK's own generators are closed first: its chunk
generator (the stream's private `_iterator`, read by `base.stream_iterator`), the event
generator under it and httpx2's byte generator under that, which the SDK itself leaves
unclosed when it reads `[DONE]` (they are noted at the first chunk, while suspended). Left to
the garbage collector, each would be closed in a task of its own, after the call is over.

It never sets the client's retries or timeouts and never closes the client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Self, TypeAlias, cast

import httpx2
import openai
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)

from cordstream import domain
from cordstream.shell.providers import base
from cordstream.shell.providers.base import NO_FIELDS, ToolOutcome, fields_of
from cordstream.shell.providers.connection import connection_error

OpenAIItem: TypeAlias = base.Item
"""What `start_stream` yields: finished chunks, plain text as a `str` (`base.Item`)."""

Message: TypeAlias = ChatCompletionMessageParam | Mapping[str, object]
Tool: TypeAlias = ChatCompletionToolUnionParam | Mapping[str, object]

# The SDK and its HTTP client: the modules whose generators the adapter closes (B11).
_SDK_PACKAGES: Final = ("openai.", "httpx2.", "httpcore2.")


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _choice(choices: object) -> Mapping[str, object]:
    """The fields of the choice with index 0 (or the first one) of a chunk's `choices`."""
    if not isinstance(choices, list) or not choices:
        return NO_FIELDS
    if len(choices) > 1:
        for choice in choices:
            fields = fields_of(choice)
            if fields.get("index") == 0:
                return fields
    return fields_of(choices[0])


@dataclass
class _Call:
    """One tool call, assembled from its deltas."""

    key: int
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    @property
    def call_id(self) -> str:
        return self.id or f"call_{self.key}"

    @property
    def raw_arguments(self) -> str:
        return "".join(self.arguments)


@dataclass
class _Answer:
    """Everything one stream said so far."""

    content: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    reasoning_content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    slots: dict[int, int] = field(default_factory=dict)  # wire index → call key, when reused
    last_key: int | None = None
    finish_reason: str | None = None
    usage: object = None
    model: str | None = None
    response_id: str | None = None
    serving_provider: str | None = None
    error: Mapping[str, object] | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def take(self, chunk: ChatCompletionChunk) -> OpenAIItem:
        """Record one SDK chunk; return what it shows now. Per chunk, so each field is read
        once, and a field that is None costs one comparison."""
        top = fields_of(chunk)
        choice = _choice(top.get("choices"))
        delta = fields_of(choice.get("delta"))
        text = _text(delta.get("content"))
        if text:
            self.content.append(text)
        refusal = delta.get("refusal")
        if refusal is not None and isinstance(refusal, str) and refusal:
            self.refusal.append(refusal)
            text += refusal
        thought = ""
        reasoning = delta.get("reasoning_content")  # DeepSeek, vLLM
        if reasoning is not None and isinstance(reasoning, str) and reasoning:
            self.reasoning_content.append(reasoning)
            thought = reasoning
        reasoning = delta.get("reasoning")  # OpenRouter, Ollama, newer vLLM
        if reasoning is not None and isinstance(reasoning, str) and reasoning:
            self.reasoning.append(reasoning)
            thought = thought or reasoning
        tool_calls = delta.get("tool_calls")
        if tool_calls is not None and isinstance(tool_calls, list):
            for call in tool_calls:
                self._merge(fields_of(call))
        model, response_id = top.get("model"), top.get("id")
        if isinstance(model, str) and model:
            self.model = model
        if isinstance(response_id, str) and response_id:
            self.response_id = response_id
        provider = top.get("provider")
        serving = provider if isinstance(provider, str) and provider else None
        if serving is not None:
            self.serving_provider = serving
        usage = top.get("usage")
        if usage is not None and domain.normalize_usage(usage) is not None:
            self.usage = usage
        finish = choice.get("finish_reason")
        if finish is not None and isinstance(finish, str) and finish:
            self.finish_reason = finish
        error = top.get("error")
        if error is not None and isinstance(error, Mapping) and error:
            self.error = cast("Mapping[str, object]", error)  # the SDK raises for it, usually
            self.finish_reason = "error"
        if not thought and serving is None:
            return text or base.KEEP_ALIVE  # plain text: a `str` (`base.Item`)
        return domain.TextChunk(
            text,
            thoughts=(domain.Thought("raw", thought),) if thought else (),
            serving_provider=serving,
        )

    def _merge(self, delta: Mapping[str, object]) -> None:
        """One tool-call delta's fields, merged into its call."""
        index = _int(delta.get("index"))
        call_id = delta.get("id")
        call_id = call_id if isinstance(call_id, str) and call_id else None
        if index is None:
            known = [key for key, call in self.calls.items() if call_id and call.id == call_id]
            if known:
                key = known[0]
            elif call_id is not None or self.last_key is None:
                key = max(self.calls, default=-1) + 1
            else:
                key = self.last_key
        else:
            key = self.slots.get(index, index)
            held = self.calls.get(key)
            if held is not None and held.id and call_id and held.id != call_id:
                key = max(self.calls) + 1  # a new call under a reused index
                self.slots[index] = key
        call = self.calls.setdefault(key, _Call(key))
        self.last_key = key
        if call.id is None and call_id is not None:
            call.id = call_id
        function = fields_of(delta.get("function"))
        name = function.get("name")
        if isinstance(name, str) and name and not call.name:
            call.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)

    def terminal(self) -> tuple[domain.ProcessedChunk, _ToolTurn | None]:
        """The last chunk of the stream, and the answer to remember for `after_tools`."""
        reason = self.finish_reason
        assert reason is not None, "only a finished answer has a terminal chunk"
        extra: dict[str, Any] = {"usage": self.usage, "serving_provider": self.serving_provider}
        if reason == "error":
            error = _reported(
                None,
                {"code": "error", **(self.error or {})},
                "the provider ended the answer with finish_reason 'error'",
                original=self.error,
            )
            return domain.ErrorChunk(error, **extra), None
        if self.calls:
            calls: list[domain.FunctionCall] = []
            for call in sorted(self.calls.values(), key=lambda c: c.key):
                try:
                    arguments = base.tool_arguments(call.raw_arguments) if call.name else {}
                except ValueError as problem:
                    error = base.invalid_tool_arguments_error(
                        call.name, f"{problem} (finish_reason {reason!r}): {_cut(call)}"
                    )
                    return domain.ErrorChunk(error, **extra), None
                calls.append(domain.FunctionCall(call.name, arguments, id=call.call_id))
            end = base.calls_end(calls, **extra)
            return end, None if isinstance(end, domain.ErrorChunk) else self._tool_turn(calls)
        shown = "".join(self.content) + "".join(self.refusal)
        return base.text_end(
            reason,
            shown=bool(shown.strip()),
            model=self.model,
            response_id=self.response_id,
            **extra,
        ), None

    def _tool_turn(self, calls: Sequence[domain.FunctionCall]) -> _ToolTurn:
        ordered = sorted(self.calls.values(), key=lambda c: c.key)
        message: dict[str, object] = {
            "role": "assistant",
            "content": "".join(self.content) or None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.raw_arguments or "{}"},
                }
                for call in ordered
            ],
        }
        if self.reasoning_content:
            message["reasoning_content"] = "".join(self.reasoning_content)
        if self.reasoning:
            message["reasoning"] = "".join(self.reasoning)
        return _ToolTurn(message, tuple(calls))


def _cut(call: _Call) -> str:
    """A call's raw arguments, as shown in an error: the first 200 characters."""
    text = call.raw_arguments
    return text if len(text) <= 200 else text[:200] + "…"


@dataclass(frozen=True, slots=True)
class _ToolTurn:
    """The last answer, when it ended in tool calls: what `after_tools` appends."""

    message: Mapping[str, object]
    calls: tuple[domain.FunctionCall, ...]


class OpenAIChatProvider(
    base.Adapter[openai.AsyncOpenAI, openai.AsyncStream[ChatCompletionChunk], _ToolTurn]
):
    """A chat-completions stream; its rules: the contract's "Provider adapters" section."""

    name: str = "openai"
    _label = "OpenAI"
    _sdk_packages = _SDK_PACKAGES
    messages = base.ReadOnly[tuple[Message, ...]]()
    tools = base.ReadOnly[tuple[Tool, ...] | None]()
    params = base.ReadOnly[Mapping[str, Any]]()

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        model: str,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None = None,
        **params: Any,
    ) -> None:
        if "stream" in params:
            raise TypeError("OpenAIChatProvider always streams; do not pass `stream`")
        super().__init__(client, model)
        self._messages = tuple(messages)
        self._tools = tuple(tools) if tools else None
        self._params = MappingProxyType(dict(params))

    def _continued(self, turn: _ToolTurn, outcomes: Sequence[ToolOutcome]) -> Self:
        results: list[Message] = [
            {"role": "tool", "tool_call_id": str(outcome.call.id), "content": outcome.output}
            for outcome in outcomes
        ]
        return type(self)(
            self._client,
            model=self._model,
            messages=[*self._messages, dict(turn.message), *results],
            tools=self._tools,
            **self._params,
        )

    # --- the stream -------------------------------------------------------------------------

    def _request(self) -> dict[str, Any]:
        request: dict[str, Any] = dict(self._params)
        options = request.pop("stream_options", {})
        if options is not None:
            request["stream_options"] = {**dict(options), "include_usage": True}
        request["model"] = self._model
        request["messages"] = [
            message if isinstance(message, dict) else dict(message) for message in self._messages
        ]
        if self._tools:
            request["tools"] = [
                tool if isinstance(tool, dict) else dict(tool) for tool in self._tools
            ]
        request["stream"] = True
        return request

    async def _open(self) -> openai.AsyncStream[ChatCompletionChunk]:
        return cast(
            "openai.AsyncStream[ChatCompletionChunk]",
            await self._client.chat.completions.create(**self._request()),
        )

    def _answer(self) -> _Answer:
        return _Answer()

    def _failure(self, error: Exception) -> domain.ProviderError | None:
        return _failure(error)

    def _sdk_root(self, stream: openai.AsyncStream[ChatCompletionChunk]) -> object:
        return base.stream_iterator(stream)  # the generator under the stream, and its own

    async def _close_stream(self, stream: openai.AsyncStream[ChatCompletionChunk]) -> None:
        await stream.close()


def _failure(error: Exception) -> domain.ProviderError | None:
    """An SDK exception as a `ProviderError` (the contract's "Provider adapters", OpenAI,
    **Errors**); None for anything else (a bug: it propagates)."""
    if isinstance(error, json.JSONDecodeError):
        return base.malformed_event_error(error)
    if not isinstance(error, openai.APIError):
        return None
    if isinstance(error, openai.APITimeoutError):
        return base.timeout_error(error)
    if isinstance(error, openai.APIConnectionError):
        return connection_error(error, connecting=(httpx2.ConnectError,))
    status = error.status_code if isinstance(error, openai.APIStatusError) else None
    body: object = error.body
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        body = body["error"]  # the SDK unwraps `{"error": {...}}`; a proxy may not
    details = cast("Mapping[str, object]", body) if isinstance(body, Mapping) else {}
    return _reported(status, details, error.message, original=error)


def _reported(
    status: int | None, details: Mapping[str, object], fallback: str, *, original: object
) -> domain.ProviderError:
    """An error the provider described as `{"message", "type", "code"}`."""
    message, error_type, code = details.get("message"), details.get("type"), details.get("code")
    return base.error_from_status(
        status,
        message if isinstance(message, str) and message.strip() else fallback,
        code=code if isinstance(code, str | int) and not isinstance(code, bool) else None,
        error_type=error_type if isinstance(error_type, str) else None,
        original=original,
    )
