"""`GeminiProvider`: Gemini's streaming generate-content API as a `StreamProvider` (SPEC §A).

It calls `await client.aio.models.generate_content_stream(model=..., contents=..., config=...)`
on the caller's `google.genai.Client` (`POST .../models/{model}:streamGenerateContent?alt=sse`,
whose every `data:` line is one `GenerateContentResponse`, parsed by the SDK into snake_case
models). Which parts it reads, how it names function calls and how each way of ending becomes
the terminal chunk is stated in the contract's "Provider adapters" section (Gemini
generate-content); what every adapter shares is `cordstream.shell.providers.base`.

The idea: every response is a whole set of parts of the first candidate, and the per-stream
state (`_Answer`, driven by the skeleton of `base.Adapter`) keeps every part as received, in
order: text and thought summaries give the chunks as they come (an empty `TextChunk` for the
rest), function calls arrive whole and are sent in the terminal chunk once the stream is over
and the finish reason known, and the kept parts, `thought_signature`s untouched, are the model
turn `after_tools` hands back.

Closing (B10, B11): the SDK reads the response through a chain of async generators, and its
`HttpResponse` holds the innermost ones in a reference cycle (`segment_iterator`), so closing
the SDK's outer generator leaves the HTTP response open until the next garbage collection. The
adapter therefore notes the SDK's suspended generators below the stream (at the first response,
and again before closing), then closes each of them, outer to inner (`base.Adapter._close`):
the SDK's own `finally` releases the aiohttp response (or closes the httpx2 one) at once. A
stream the SDK already ended (finished, failed, cancelled) needs none of this.

It never sets the client's retries or timeouts and never closes the client. It does not
support the SDK's automatic function calling (Python callables as tools, run inside the SDK).
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
from cordstream.shell.providers.connection import connection_error
from cordstream.shell.secrets import client_secrets

GeminiItem: TypeAlias = base.Item
"""What `start_stream` yields (`base.Item`): finished chunks (each carries the running usage,
so this adapter hands no text over as a bare `str`)."""

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
_CONNECTING: Final = (aiohttp.ClientConnectorError, httpx2.ConnectError)
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
        usage: Mapping[str, object] | None = None
        if response.usage_metadata is not None:
            # Gemini sends the usage so far on every response: passed on as its fields (the
            # core reads a mapping fast, `base.fields_of`), and only when it changed (B5: the
            # latest wins).
            fields = base.fields_of(response.usage_metadata)
            if self.usage is None or fields != base.fields_of(self.usage):
                usage = fields
            self.usage = response.usage_metadata
        if response.model_version:
            self.model = response.model_version
        if response.response_id:
            self.response_id = response.response_id
        return domain.TextChunk("".join(text), usage=usage, thoughts=tuple(thoughts))

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
    """A Gemini generate-content stream; its rules: the contract's "Provider adapters" section."""

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
    """An SDK or transport exception as a `ProviderError` (the contract's "Provider adapters",
    Gemini, **Errors**)."""
    if isinstance(error, genai_errors.APIError):
        return _api_failure(error)
    if isinstance(error, genai_errors.UnknownApiResponseError):
        return base.malformed_event_error(error)
    if isinstance(error, _TIMEOUTS):
        return base.timeout_error(error)
    return connection_error(error, connecting=_CONNECTING)


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
