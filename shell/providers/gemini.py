"""`GeminiProvider`: Gemini's streaming generate-content API as a `StreamProvider` (SPEC §A).

It calls `await client.aio.models.generate_content_stream(model=..., contents=...,
config=...)` on the caller's `google.genai.Client`: `POST .../models/{model}:
streamGenerateContent?alt=sse`, whose every `data:` line is one `GenerateContentResponse`
(camelCase JSON, parsed by the SDK into snake_case models). `contents` and `config` go to the
SDK as given (a `GenerateContentConfig`, its dict form, or None).

`start_stream` (the skeleton of `cordstream.shell.providers.base.Adapter`) keeps the
per-stream state (the model's parts, function calls, finish reason, usage) and yields one chunk
per SDK response: an empty `TextChunk` when it shows nothing, so a long function call re-arms
the inactivity deadline (B2). After the SDK's stream ends, one terminal chunk follows; an SDK
or HTTP failure ends the stream with an `ErrorChunk`.

Rules (where the shared contract in `cordstream.shell.providers.base` left a choice):

- **Candidates.** Only the first candidate is read (the SDK's own stream helpers do the same);
  ask for `candidate_count` 1.
- **Text.** Text parts whose `thought` is not true are passed through as-is (inline `<think>`
  included: the core captures it). Other part kinds (inline data, executable code …) show
  nothing but are kept for `after_tools`.
- **Thoughts.** Parts with `thought: true` are the thought *summaries* Gemini sends when
  `thinking_config.include_thoughts` is set (the raw reasoning is never sent), so they become
  `Thought("summary", text)`.
- **Usage.** `usage_metadata` is a running total repeated on several responses; each chunk
  carries its response's report as given (the SDK model; `normalize_usage` reads
  `prompt_token_count` as input and `candidates_token_count + thoughts_token_count` as output),
  and the terminal chunk carries the last report, so the latest wins and nothing is summed.
- **Function calls** are whole in the part that brings them (`functionCall.args` is a JSON
  object; none is `{}`). A call without an `id` (the Gemini API sends none for most models)
  gets `call_<n>`, `n` counting the calls of the answer from 0; that id exists only on our
  side: the function response goes back without one, as the API expects. Streamed arguments
  (`streamFunctionCallArguments`, `partial_args`) are not assembled. Declare tools as
  function declarations: Python callables in `config.tools` make the SDK run them itself
  (automatic function calling) inside one stream, which this adapter does not support. A call
  without a name ends the stream with `code="invalid_tool_call"`, as from every adapter.
- **Finish.** The finish signal is a candidate's `finish_reason`. When the stream is over, in
  this order: a prompt blocked by `prompt_feedback.block_reason` (nothing shown, no call) →
  `ErrorChunk(content_blocked_error(<block reason>))`; no finish reason → `ErrorChunk(
  truncated_error())`; a content-filter finish (`SAFETY`, `RECITATION`, `BLOCKLIST`,
  `PROHIBITED_CONTENT`, `SPII`, `IMAGE_SAFETY`: whatever `unify_finish_reason` calls
  `content_filter`) with no visible text → `ErrorChunk(content_blocked_error(<reason>))`, even
  when function calls came before the filter (calls from a filtered answer are not run); with
  text → `DoneChunk` whose `finish_reason` is `content_filter`; function calls → one
  `FunctionCallChunk` with every call in order (Gemini finishes a function-call answer with
  `STOP`); anything else → `DoneChunk(finish_metadata(reason, model=model_version,
  response_id=response_id))` (`MAX_TOKENS` → `length`). Error chunks carry the last usage too.
- **Errors.** `google.genai.errors.APIError` (`ClientError` 4xx, `ServerError` 5xx) →
  `error_from_status(code, message, error_type=status)`, from the body `{"error": {"code",
  "message", "status"}}`: `RESOURCE_EXHAUSTED` → `rate_limit`, `UNAVAILABLE` →
  `provider_overloaded`, `DEADLINE_EXCEEDED`/504 → `timeout`, a 404 naming the model →
  `model_error`, `INTERNAL` → retryable `api_error`, `INVALID_ARGUMENT`/`PERMISSION_DENIED` →
  `api_error`. A rate limit that mentions a quota is not retryable by the shared rule, unless
  the error's details hold a `google.rpc.RetryInfo` (the API's "retry in 33 s"): then it is. A
  mid-stream `data: {"error": {...}}` line is raised by the SDK as the same `APIError`, with the
  code from the body (the HTTP status was 200), and is mapped the same way. A `data:` line that
  is not JSON → `malformed_event_error` (`api_error`, retryable). Transport failures depend on
  the SDK's HTTP client: aiohttp (the default whenever it is installed, and this project depends
  on it) raises `aiohttp.ClientError` (a cut mid-stream is `ClientPayloadError`) and
  `TimeoutError`; an `httpx2` client (`HttpOptions.httpx_async_client`) raises
  `httpx2.RequestError` / `httpx2.TimeoutException`. Timeouts → `timeout_error`, the rest and
  any `OSError` → `connection_error`. A failure after the finish signal is ignored: the answer
  is whole. (A caller-supplied plain `httpx` client's errors are not mapped: they end the stream
  as an exception result, B13.)
- **Closing** (B10). The SDK reads the response through a chain of async generators, and its
  `HttpResponse` holds the innermost ones in a reference cycle (`segment_iterator`), so
  closing the SDK's outer generator leaves the HTTP response open until the next garbage
  collection. The adapter therefore notes the SDK's suspended generators below the stream
  (at the first response, and again before closing), then closes each of them, outer to
  inner (`base.Adapter._close`): the SDK's own `finally` releases the aiohttp response (or
  closes the httpx2 one) at once. A stream the SDK already ended (finished, failed,
  cancelled) needs none of this.
- **The client is the caller's.** Its retries (`HttpOptions.retry_options`; none by default,
  except the SDK's own single retry of an aiohttp connect error when no retry options are
  set) and timeouts are left alone, and it is never closed. The SDK's automatic continuation
  (`continuation_token` hops) is left as configured: its chunks are read like any others.

`after_tools(outcomes)` returns a new provider whose `contents` are this request's (a plain
string becomes one user `Content`), then the answer as received, `Content(role="model",
parts=...)` with every part of every response in order — thought parts, text, function calls
and their `thought_signature`s untouched — then one `Content(role="user", parts=[Part(
function_response=FunctionResponse(name, response={"result": output}, id))...])`, in
`outcomes` order; a failed tool (`is_error`) answers `{"error": output}`, and `id` is set only
when the model's call had one. It raises `ValueError` unless the last stream ended in function
calls, or when the outcomes do not answer exactly those calls (the API rejects a turn whose
function responses do not match its calls). A provider object runs one stream at a time: the
last answer is remembered per object, and a new `start_stream` forgets it.

The provider's `client`, `model`, `contents` and `config` are read-only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Self, TypeAlias, cast

import aiohttp
import httpx2
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from cordstream import domain
from cordstream.shell.providers import base
from cordstream.shell.providers.base import ToolOutcome
from cordstream.shell.secrets import client_secrets

GeminiItem: TypeAlias = domain.ProcessedChunk
"""What `start_stream` yields: finished chunks (`base` says why `process_chunk` passes them on)."""

Contents: TypeAlias = types.ContentListUnion | types.ContentListUnionDict
"""What `generate_content_stream` accepts as `contents`: a string, a `Content`, parts, a list."""

Config: TypeAlias = types.GenerateContentConfigOrDict | None

_TIMEOUTS: Final = (TimeoutError, httpx2.TimeoutException)
_FAILURES: Final = (
    genai_errors.APIError,
    genai_errors.UnknownApiResponseError,
    aiohttp.ClientError,
    httpx2.RequestError,
    OSError,  # TimeoutError, ConnectionResetError …
)
_SDK_PACKAGE: Final = "google.genai"
_RETRY_INFO: Final = "google.rpc.RetryInfo"


@dataclass(frozen=True, slots=True)
class _ToolTurn:
    """The last answer, when it ended in function calls: what `after_tools` appends."""

    content: types.Content
    calls: tuple[domain.FunctionCall, ...]
    wire_ids: Mapping[str, str | None]  # our call id → the id the model sent (None: none)


@dataclass
class _Answer:
    """Everything one stream said so far."""

    parts: list[types.Part] = field(default_factory=list)
    calls: list[types.FunctionCall] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    finish_reason: types.FinishReason | str | None = None
    block_reason: types.BlockedReason | str | None = None
    usage: types.GenerateContentResponseUsageMetadata | None = None
    model: str | None = None
    response_id: str | None = None

    @property
    def finished(self) -> bool:
        """A finish reason came, or the prompt was blocked (the API sends no finish reason)."""
        return self.finish_reason is not None or self.block_reason is not None

    def take(self, response: types.GenerateContentResponse) -> domain.TextChunk:
        """Record one SDK response; return what it shows now."""
        candidate = response.candidates[0] if response.candidates else None
        content = candidate.content if candidate is not None else None
        text: list[str] = []
        thoughts: list[domain.Thought] = []
        for part in (content.parts if content is not None else None) or []:
            self.parts.append(part)
            if part.function_call is not None:
                self.calls.append(part.function_call)
            elif part.text:
                if part.thought:
                    thoughts.append(domain.Thought("summary", part.text))
                else:
                    text.append(part.text)
        self.shown.extend(text)
        if candidate is not None and candidate.finish_reason is not None:
            self.finish_reason = candidate.finish_reason
        feedback = response.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            self.block_reason = feedback.block_reason
        if response.usage_metadata is not None:
            self.usage = response.usage_metadata
        if response.model_version:
            self.model = response.model_version
        if response.response_id:
            self.response_id = response.response_id
        return domain.TextChunk(
            "".join(text), usage=response.usage_metadata, thoughts=tuple(thoughts)
        )

    def terminal(self) -> tuple[domain.ProcessedChunk, _ToolTurn | None]:
        """The last chunk of the stream, and the answer to remember for `after_tools`."""
        usage = self.usage
        visible = bool("".join(self.shown).strip())
        if self.block_reason is not None and not visible and not self.calls:
            blocked = base.content_blocked_error(base.wire_value(self.block_reason))
            return domain.ErrorChunk(blocked, usage=usage), None
        reason = self.finish_reason
        if reason is None:  # a blocked prompt, yet something came: no end was said
            return domain.ErrorChunk(base.truncated_error()), None
        if self.calls and base.unify_finish_reason(reason) != "content_filter":
            calls: list[domain.FunctionCall] = []
            wire_ids: dict[str, str | None] = {}
            for index, call in enumerate(self.calls):
                call_id = call.id or f"call_{index}"
                wire_ids[call_id] = call.id or None
                calls.append(
                    domain.FunctionCall(call.name or "", dict(call.args or {}), id=call_id)
                )
            end = base.calls_end(calls, usage=usage)
            if isinstance(end, domain.ErrorChunk):
                return end, None
            content = types.Content(role="model", parts=list(self.parts))
            return end, _ToolTurn(content, tuple(calls), wire_ids)
        return base.text_end(
            reason, shown=visible, usage=usage, model=self.model, response_id=self.response_id
        ), None


class GeminiProvider(
    base.Adapter[genai.Client, AsyncIterator[types.GenerateContentResponse], _ToolTurn]
):
    """A Gemini generate-content stream; see the module docstring for the rules."""

    name: str = "gemini"
    _label = "Gemini"
    _calls = "function calls"
    _sdk_packages = (_SDK_PACKAGE,)
    contents = base.ReadOnly[Contents]()
    config = base.ReadOnly[Config]()

    def __init__(
        self,
        client: genai.Client,
        *,
        model: str,
        contents: Contents,
        config: Config = None,
    ) -> None:
        super().__init__(client, model)
        self._contents = contents
        self._config = config

    def secrets(self) -> tuple[str, ...]:
        """The client's API key and credential headers, removed from every embed (G4)."""
        api_client = base.genai_api_client(self._client)
        return client_secrets(api_client, getattr(api_client, "api_key", None))

    def _continued(self, turn: _ToolTurn, outcomes: Sequence[ToolOutcome]) -> Self:
        names = {str(call.id): call.name for call in turn.calls}
        responses = [
            types.Part(
                function_response=types.FunctionResponse(
                    id=turn.wire_ids[str(outcome.call.id)],
                    name=names[str(outcome.call.id)],
                    response={"error" if outcome.is_error else "result": outcome.output},
                )
            )
            for outcome in outcomes
        ]
        contents: list[types.ContentUnionDict] = [
            *_as_list(self._contents),
            turn.content,
            types.Content(role="user", parts=responses),
        ]
        return type(self)(self._client, model=self._model, contents=contents, config=self._config)

    # --- the stream -------------------------------------------------------------------------

    async def _open(self) -> AsyncIterator[types.GenerateContentResponse]:
        return await self._client.aio.models.generate_content_stream(
            model=self._model, contents=self._contents, config=self._config
        )

    def _answer(self) -> _Answer:
        return _Answer()

    def _failure(self, error: Exception) -> domain.ProviderError | None:
        return _failure(error) if isinstance(error, _FAILURES) else None

    async def _close_stream(self, stream: AsyncIterator[types.GenerateContentResponse]) -> None:
        await base.close_generators([stream])  # when it is not among the SDK's own


def _as_list(contents: Contents) -> list[types.ContentUnionDict]:
    """The request's contents as a list to append to (a string is one user `Content`)."""
    if isinstance(contents, str):
        return [types.Content(role="user", parts=[types.Part(text=contents)])]
    if isinstance(contents, list):
        return cast("list[types.ContentUnionDict]", list(contents))
    return [cast("types.ContentUnionDict", contents)]


def _failure(error: Exception) -> domain.ProviderError:
    """An SDK or transport exception as a `ProviderError` (see **Errors** above)."""
    if isinstance(error, genai_errors.APIError):
        return _api_failure(error)
    if isinstance(error, genai_errors.UnknownApiResponseError):
        return base.malformed_event_error(error)
    if isinstance(error, _TIMEOUTS):
        return base.timeout_error(error)
    return base.connection_error(error)


def _api_failure(error: genai_errors.APIError) -> domain.ProviderError:
    code: object = error.code
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    message = error.message if isinstance(error.message, str) else ""
    kind = error.status if isinstance(error.status, str) else None
    mapped = base.error_from_status(status, message or str(error), error_type=kind, original=error)
    if mapped.kind == "rate_limit" and not mapped.retryable and _says_retry(error.details):
        mapped = dataclasses.replace(mapped, retryable=True)
    return mapped


def _says_retry(details: object) -> bool:
    """Whether an error body holds a `google.rpc.RetryInfo` (the server's "retry in …")."""
    if isinstance(details, Mapping) and isinstance(details.get("error"), Mapping):
        details = details["error"]
    entries = details.get("details") if isinstance(details, Mapping) else None
    if not isinstance(entries, list):
        return False
    return any(
        isinstance(entry, Mapping) and str(entry.get("@type", "")).endswith(_RETRY_INFO)
        for entry in entries
    )
