"""What every provider adapter shares: the streaming skeleton, finish reasons, error mapping,
headlines, tool results.

An adapter is a `StreamProvider` (SPEC §A) over one official SDK, built on `Adapter`, whose
`_read` is the one skeleton all of them follow: open the SDK's stream, hand each SDK event to
the per-stream state and yield the chunk it makes of it, turn an SDK failure into an error,
close everything, and only then yield the terminal chunk. A subclass supplies only what its
wire format decides: how to open the SDK's stream (`_open`), the per-stream state that reads
its events (`_answer`, a `StreamAnswer`), which SDK exceptions are provider failures
(`_failure`), how the conversation continues after a tool round (`_continued`), and how its
stream is closed (`_sdk_packages`, `_sdk_root`, `_close_stream`). What every adapter promises
is stated in the contract's "Provider adapters" section; the helpers here (`error_from_status`,
`timeout_error`, `malformed_event_error`, `truncated_error`, `text_end`, `calls_end`,
`finish_metadata`, `tool_arguments`) and `cordstream.shell.providers.connection`'s
`connection_error` make each promise one piece of code, so the same failure gets the same kind
and code whatever the SDK; every failure's message passes through that module's `plain`, so no
Python repr reaches an embed.

**Why `process_chunk` is the identity.** Turning the SDK's events into chunks needs the
whole stream: tool-call fragments are assembled across events, usage reports are merged, the
terminal chunk is decided only once the SDK's stream has ended, and failures are caught around
the SDK's own iterator, whose HTTP response is closed before the error is reported. Only the
generator that owns the stream sees all of that, in order, and has the `finally` that closes
it; `process_chunk` is called per item by the orchestrator and sees neither the end of the
stream nor the SDK. So `start_stream` yields finished chunks, and `process_chunk` hands them
on: it is there for the Protocol, and for a host's subclass that rewrites chunks. Plain text
(the most frequent item by far) is yielded as the `str` itself (`Item`): `process_chunk` makes
it its `TextChunk`, and the provider's task, told so by `plain_text_items`, takes it as text
without the call, so no chunk is built per SDK event; a subclass that overrides
`process_chunk` gets a `TextChunk` for it, as ever.

An adapter also implements `ToolProvider.after_tools`: the same request with the model's
answer and the tool results appended in the provider's own format. `cordstream.shell.run_turn`
uses it between segments.

Per SDK event, an adapter reads fields and builds one chunk, and nothing more: the SDK's own
work per event is the floor it is measured against (`python -m bench.sdk`). `fields_of` reads
the SDKs' pydantic models where pydantic keeps their fields, and `KEEP_ALIVE` is the one chunk
of every event that shows nothing.

Nothing here sets an SDK client's retries or timeouts or closes the client: it is the caller's.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import re
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import (
    Any,
    ClassVar,
    Final,
    Generic,
    Literal,
    Never,
    NoReturn,
    Protocol,
    Self,
    TypeAlias,
    TypeVar,
    cast,
    overload,
)

from cordstream import domain
from cordstream.domain.catalogue import DEFAULT_CATALOGUE, ENGLISH, Catalogue
from cordstream.domain.embeds import HEADLINE_KEYS, error_headline, reads_as_model_error
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext, StreamProvider
from cordstream.shell.providers.connection import plain
from cordstream.shell.secrets import client_secrets

FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter", "other"]

Raw = TypeVar("Raw")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call returned, for the next request.

    `output` is the text the model reads (JSON for structured results); `is_error` marks a
    tool that failed, so providers that have a flag for it (Anthropic's `is_error`) set it.
    """

    call: domain.FunctionCall
    output: str
    is_error: bool = False


class ToolProvider(StreamProvider[Raw], Protocol):
    """A provider that can continue its own conversation after a tool round (`run_turn`)."""

    def after_tools(self, outcomes: Sequence[ToolOutcome]) -> Self:
        """A new provider: this request, plus the last answer and the tool results.

        Raises `ValueError` when no stream has ended in a tool call yet.
        """
        ...


def check_outcomes(
    calls: Sequence[domain.FunctionCall], outcomes: Sequence[ToolOutcome], provider: str
) -> None:
    """`after_tools`' precondition: the outcomes answer exactly the last answer's calls.

    Raises `ValueError` naming both sides otherwise (any order is fine).
    """
    wanted = sorted(str(call.id) for call in calls)
    given = sorted(str(outcome.call.id) for outcome in outcomes)
    if given != wanted:
        raise ValueError(
            f"tool results {given!r} do not answer the {provider} model's tool calls {wanted!r}"
        )


# --- the skeleton ---------------------------------------------------------------------------


class ToolTurn(Protocol):
    """The last answer, when it ended in tool calls: what `after_tools` appends."""

    @property
    def calls(self) -> tuple[domain.FunctionCall, ...]: ...


Value = TypeVar("Value")


class ReadOnly(Generic[Value]):
    """A read-only attribute of an adapter (`tools = ReadOnly[tuple[Tool, ...] | None]()`): it
    reads `_<name>`, which the constructor sets, and refuses to be set (an adapter's request
    is fixed; `after_tools` makes a new adapter)."""

    _private = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._private = f"_{name}"

    @overload
    def __get__(self, instance: None, owner: type) -> Self: ...

    @overload
    def __get__(self, instance: object, owner: type) -> Value: ...

    def __get__(self, instance: object, owner: type) -> Self | Value:
        if instance is None:
            return self
        return cast("Value", getattr(instance, self._private))

    def __set__(self, instance: object, value: Never) -> NoReturn:
        raise AttributeError(f"{self._private[1:]!r} is read-only")


TurnT = TypeVar("TurnT", bound=ToolTurn)
TurnT_co = TypeVar("TurnT_co", bound=ToolTurn, covariant=True)
ClientT = TypeVar("ClientT")
StreamT = TypeVar("StreamT", bound=AsyncIterator[Any])


Item: TypeAlias = domain.ProcessedChunk | str
"""What an adapter's `start_stream` yields: finished chunks, and plain text (a `TextChunk`
with nothing but its content) as the `str` itself, which `process_chunk` makes the chunk. The
provider's task takes such a `str` as plain text without the call (`plain_text_items`): no
chunk is built per SDK event, only one per run of text (`sdk_overhead_ratio_*`)."""


class StreamAnswer(Protocol[TurnT_co]):
    """What one stream has said so far: an adapter's per-stream state."""

    @property
    def finished(self) -> bool:
        """The provider said how the answer ends (its finish signal): a failure after it
        changes nothing, and a stream that ends without it is `truncated_error()`."""
        ...

    def take(self, event: Any, /) -> Item | None:
        """Record one SDK event; the chunk it shows now (plain text as a `str`, `Item`; an
        empty `TextChunk` when it shows nothing, which still re-arms the inactivity deadline,
        B2), or None to yield nothing."""
        ...

    def terminal(self) -> tuple[domain.ProcessedChunk, TurnT_co | None]:
        """The stream is over, `finished`: its last chunk, and the answer `after_tools`
        continues from when it ended in tool calls."""
        ...


class Adapter(ABC, Generic[ClientT, StreamT, TurnT]):
    """The skeleton of every adapter (see the module docstring); read-only attributes.

    A provider object runs one stream at a time: the last answer is remembered per object,
    and a new `start_stream` forgets it.
    """

    name: str
    _label: ClassVar[str]  # the provider, in error messages: "OpenAI"
    _calls: ClassVar[str] = "tool calls"  # what the provider calls them, in error messages
    # The modules whose suspended generators the adapter closes itself (`_close`); none when
    # the SDK needs no help.
    _sdk_packages: ClassVar[tuple[str, ...]] = ()

    model = ReadOnly[str]()

    def __init__(self, client: ClientT, model: str) -> None:
        self._client = client
        self._model = model
        self._last_turn: TurnT | None = None

    @property
    def client(self) -> ClientT:
        return self._client

    def secrets(self) -> tuple[str, ...]:
        """The client's API key and credential headers, removed from every embed (G4)."""
        return client_secrets(self._client)

    # --- StreamProvider ---------------------------------------------------------------------

    def start_stream(self, config: StreamConfig, context: StreamContext) -> AsyncIterator[Item]:
        """A fresh request per call (a retry calls it again); forgets the last answer."""
        self._last_turn = None
        return self._read()

    def process_chunk(self, raw: Item) -> domain.ProcessedChunk:
        """The identity for a chunk, and plain text's `TextChunk` for a `str` (`Item`):
        `start_stream` yields finished chunks (see the module docstring)."""
        return text_chunk(raw) if isinstance(raw, str) else raw

    @property
    def plain_text_items(self) -> bool:
        """Whether a `str` item is plain text that needs no `process_chunk` call: True unless a
        subclass overrides `process_chunk` (which then gets a `TextChunk` for it, as ever)."""
        return type(self).process_chunk is Adapter.process_chunk

    def describe_error(self, error: domain.ProviderError, locale: str) -> str | None:
        return describe_error(error, locale)

    # --- ToolProvider -----------------------------------------------------------------------

    def after_tools(self, outcomes: Sequence[ToolOutcome]) -> Self:
        turn = self._last_turn
        if turn is None:
            raise ValueError(f"the last {self._label} stream did not end in {self._calls}")
        check_outcomes(turn.calls, outcomes, self._label)
        return self._continued(turn, outcomes)

    # --- what a subclass supplies -----------------------------------------------------------

    @abstractmethod
    async def _open(self) -> StreamT:
        """Send the request; the SDK's stream of events."""

    @abstractmethod
    def _answer(self) -> StreamAnswer[TurnT]:
        """Fresh per-stream state."""

    @abstractmethod
    def _failure(self, error: Exception) -> domain.ProviderError | None:
        """The `ProviderError` for an SDK or HTTP failure; None for anything else (a bug)."""

    @abstractmethod
    def _continued(self, turn: TurnT, outcomes: Sequence[ToolOutcome]) -> Self:
        """A new provider: this request, then `turn` and the `outcomes`, in the wire format."""

    def _sdk_root(self, stream: StreamT) -> object:
        """Where the SDK's generators under `stream` start."""
        return stream

    async def _close_stream(self, stream: StreamT) -> None:
        """Close the stream's HTTP response, once the SDK's generators are closed."""

    # --- the stream -------------------------------------------------------------------------

    async def _read(self) -> AsyncIterator[Item]:
        answer = self._answer()
        stream: StreamT | None = None
        failure: domain.ProviderError | None = None
        # The SDK's generators under its stream, noted at the first event, while suspended.
        noted: list[AsyncGenerator[Any, Any]] = []
        try:
            stream = await self._open()
            # The generator under the SDK's stream where the adapter knows it (`_sdk_root`: the
            # Stainless SDKs' `_iterator`, which their `__anext__`, a coroutine made per event,
            # only passes on), else the SDK's own `async for`. Read with `async for` (no
            # `anext` call per event).
            root = self._sdk_root(stream)
            events = root if inspect.isasyncgen(root) else aiter(stream)
            if events is not stream and inspect.isasyncgen(events):
                noted.append(events)  # the outermost of them
            looked = not self._sdk_packages
            take, wrap = answer.take, not self.plain_text_items
            async for event in events:
                if not looked:
                    looked = True
                    noted += sdk_generators(self._sdk_root(stream), self._sdk_packages)
                chunk = take(event)
                if chunk is not None:
                    yield text_chunk(chunk) if wrap and isinstance(chunk, str) else chunk
        except Exception as error:
            failure = self._failure(error)
            if failure is None:
                raise
            failure = replace(failure, message=plain(failure.message))
        finally:
            if stream is not None:
                await self._close(stream, noted)
        if not answer.finished:
            yield domain.ErrorChunk(failure or truncated_error())
            return
        chunk, self._last_turn = answer.terminal()
        yield chunk

    async def _close(self, stream: StreamT, noted: Sequence[AsyncGenerator[Any, Any]]) -> None:
        """Close the SDK's generators now, outer first (those noted at the first event, then any
        found now), then the HTTP response (B10, B11). An SDK that stops iterating one of its
        generators without closing it (openai's at `[DONE]`, google-genai's response chain)
        would leave it to the garbage collector, which closes it in a task of its own, after
        the call is over. Nothing raised here turns a result into an exception."""
        packages = self._sdk_packages
        found = sdk_generators(self._sdk_root(stream), packages) if packages else []
        await close_generators(dict.fromkeys([*noted, *found]))
        with contextlib.suppress(Exception):
            await self._close_stream(stream)


# --- finish reasons -------------------------------------------------------------------------

_FINISH: Final[Mapping[str, FinishReason]] = {
    # OpenAI and compatibles
    "stop": "stop",
    "eos": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    # Anthropic
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    # Gemini (FinishReason enum names)
    "finish_reason_unspecified": "other",
    "safety": "content_filter",
    "recitation": "content_filter",
    "blocklist": "content_filter",
    "prohibited_content": "content_filter",
    "spii": "content_filter",
    "image_safety": "content_filter",
    "image_prohibited_content": "content_filter",
    "image_recitation": "content_filter",
    "malformed_function_call": "other",
}


def unify_finish_reason(raw: object) -> FinishReason:
    """One vocabulary for every provider's finish reason; anything unknown is `other`.

    Accepts a string or an enum member (Gemini's `FinishReason.MAX_TOKENS` → `length`).
    """
    value = getattr(raw, "value", raw)
    if not isinstance(value, str):
        return "other"
    return _FINISH.get(value.strip().lower(), "other")


def wire_value(reason: object) -> str:
    """A finish or block reason as the provider sent it (`FinishReason.SAFETY` → "SAFETY")."""
    value = getattr(reason, "value", reason)
    return value if isinstance(value, str) else str(value)


def finish_metadata(
    raw_reason: object, *, model: object = None, response_id: object = None
) -> dict[str, object]:
    """The terminal chunk's metadata: unified and raw finish reason, model and id if known."""
    raw = getattr(raw_reason, "value", raw_reason)
    metadata: dict[str, object] = {
        "finish_reason": unify_finish_reason(raw),
        "raw_finish_reason": raw if isinstance(raw, str) else None,
    }
    if isinstance(model, str) and model:
        metadata["model"] = model
    if isinstance(response_id, str) and response_id:
        metadata["id"] = response_id
    return metadata


def text_end(
    reason: object,
    *,
    shown: bool,
    usage: object = None,
    model: object = None,
    response_id: object = None,
    original: object = None,
    serving_provider: str | None = None,
    **metadata: object,
) -> domain.ProcessedChunk:
    """The terminal chunk of an answer that ended without tool calls: a content filter with
    nothing `shown` is `content_blocked` (the user would see no answer), anything else a
    `DoneChunk` of `finish_metadata` plus `metadata` (with text, a filtered answer is done)."""
    if unify_finish_reason(reason) == "content_filter" and not shown:
        blocked = content_blocked_error(wire_value(reason), original)
        return domain.ErrorChunk(blocked, usage=usage, serving_provider=serving_provider)
    finish = finish_metadata(reason, model=model, response_id=response_id)
    return domain.DoneChunk({**finish, **metadata}, usage=usage, serving_provider=serving_provider)


def calls_end(
    calls: Sequence[domain.FunctionCall],
    *,
    usage: object = None,
    serving_provider: str | None = None,
) -> domain.ProcessedChunk:
    """The terminal chunk of an answer that ended in tool calls: all of them in one
    `FunctionCallChunk`, or the error for the first call without a name."""
    nameless = next((call for call in calls if not call.name), None)
    if nameless is not None:
        error = invalid_tool_call_error(nameless.id)
        return domain.ErrorChunk(error, usage=usage, serving_provider=serving_provider)
    return domain.FunctionCallChunk(tuple(calls), usage=usage, serving_provider=serving_provider)


def tool_arguments(text: str) -> dict[str, object]:
    """A tool call's arguments, sent as JSON text: the object (`{}` for blank text).

    Raises `ValueError` saying what the text is instead ("not JSON (...)", "a JSON list, not
    an object"), for `invalid_tool_arguments_error`.
    """
    if not text.strip():
        return {}
    try:
        value: object = json.loads(text)
    except ValueError as error:
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"a JSON {type(value).__name__}, not an object")
    return value


# --- errors ---------------------------------------------------------------------------------

_BLOCKED_MESSAGE: Final = re.compile(
    r"content[\s_-]*(policy|filter|management)|safety|blocked|flagged|moderation",
    re.IGNORECASE,
)
_OVERLOADED_MESSAGE: Final = re.compile(r"overload|capacity|unavailable", re.IGNORECASE)

# HTTP statuses a retry can fix.
_RETRYABLE_STATUS: Final = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})


def error_from_status(
    status: int | None,
    message: str,
    *,
    code: str | int | None = None,
    error_type: str | None = None,
    original: object = None,
) -> domain.ProviderError:
    """Map an HTTP failure (or a mid-stream error event) to a `ProviderError`.

    `error_type` is the provider's own error class when it sends one (Anthropic's
    `overloaded_error`, OpenAI's `insufficient_quota`, Gemini's `RESOURCE_EXHAUSTED`); it wins
    over the status, because mid-stream errors arrive with a 200 status. A message that reads
    as a model error (`cordstream.domain.embeds.reads_as_model_error`, the embed's own test)
    is a `model_error`.
    """
    if status is None and isinstance(code, int) and 400 <= code <= 599:
        status = code  # a mid-stream error with an HTTP-like code (OpenRouter: 429, 502, 503)
    kind: domain.ErrorKind
    kind_hint = " ".join(str(part).lower() for part in (error_type, code) if part is not None)
    if "overloaded" in kind_hint or status in {503, 529}:
        kind = "provider_overloaded"
    elif "rate_limit" in kind_hint or "resource_exhausted" in kind_hint or status == 429:
        kind = "rate_limit"
    elif "timeout" in kind_hint or status in {408, 504}:
        kind = "timeout"
    elif reads_as_model_error(message) or (status == 404 and "model" in message.lower()):
        kind = "model_error"
    elif status in {400, 403, None} and _BLOCKED_MESSAGE.search(f"{kind_hint} {message}"):
        kind = "content_blocked"
    elif (status is None or status >= 500) and _OVERLOADED_MESSAGE.search(message):
        kind = "provider_overloaded"
    else:
        kind = "api_error"
    retryable = kind in {"rate_limit", "provider_overloaded", "timeout"} or (
        status is not None and status in _RETRYABLE_STATUS
    )
    if "insufficient_quota" in kind_hint or "quota" in message.lower():
        retryable = False  # a 429 for an empty account does not pass by waiting
    if status is None and kind == "api_error":
        retryable = True  # a mid-stream error event without a class: the server's trouble
    text = message.strip() or (
        f"HTTP {status}" if status is not None else "the provider reported an error"
    )
    return domain.ProviderError(
        kind,
        text,
        code=code if code is not None else status,
        retryable=retryable,
        original=original,
    )


def timeout_error(original: object = None) -> domain.ProviderError:
    """The SDK gave up waiting for the provider (its own read or connect timeout)."""
    return domain.ProviderError(
        "timeout", "the provider did not answer in time", retryable=True, original=original
    )


def malformed_event_error(original: object = None) -> domain.ProviderError:
    """The provider sent a stream event whose data is not JSON (a proxy's HTML, a cut line)."""
    return error_from_status(
        None,
        f"the provider sent a stream event that is not JSON ({original})",
        code="malformed_event",
        original=original,
    )


def truncated_error() -> domain.ProviderError:
    """The stream ended without the provider's finish signal: the answer may be cut short."""
    return domain.ProviderError(
        "api_error",
        "the provider's stream ended without a finish signal; the answer may be incomplete",
        code="truncated",
        retryable=True,
    )


def content_blocked_error(reason: str, original: object = None) -> domain.ProviderError:
    """The provider refused to answer (a blocked prompt, or a filter with nothing written)."""
    return domain.ProviderError(
        "content_blocked",
        f"the provider blocked the response ({reason})",
        code=reason,
        retryable=False,
        original=original,
    )


def invalid_tool_call_error(call_id: str | None) -> domain.ProviderError:
    """The model made a tool call without a name: nothing to run."""
    return domain.ProviderError(
        "api_error",
        f"the model made a tool call ({call_id}) without a name",
        code="invalid_tool_call",
        retryable=True,
    )


def invalid_tool_arguments_error(name: str, problem: str) -> domain.ProviderError:
    """The model called `name` with arguments that are not a JSON object (`problem` says what
    they are): cut short by a token limit, or malformed."""
    return domain.ProviderError(
        "api_error",
        f"the model called {name!r} with arguments that are not a JSON object: {problem}",
        code="invalid_tool_arguments",
        retryable=True,
    )


# --- headlines ------------------------------------------------------------------------------

HEADLINES: Final[Mapping[domain.ErrorKind, str]] = MappingProxyType(
    {kind: ENGLISH[key] for kind, key in HEADLINE_KEYS.items()}
)
"""The English headline per kind: the built-in catalogue's `headline.<kind>` messages (kept for
callers of the table; `describe_error` reads the catalogue)."""


def describe_error(
    error: domain.ProviderError,
    locale: str,
    headlines: Mapping[str, Mapping[domain.ErrorKind, str]] | None = None,
    *,
    catalogue: Catalogue = DEFAULT_CATALOGUE,
) -> str | None:
    """A short headline for the error embed (G1), by kind, in `locale` when known.

    The headline is the catalogue's `headline.<kind>` message (`headline.truncated` for a
    truncated stream), as a `CatalogueText`: the embed shows that message from the stream's
    own catalogue, in its locale, so a bot's `StreamOrchestrator(catalogue=...)` localizes it.
    `headlines`, when given, maps a locale to per-kind headlines that win over the catalogue
    (shown as given); a truncated stream always says so.
    """
    localized = (headlines or {}).get(locale.strip().replace("_", "-").lower(), {})
    given = localized.get(error.kind) if error.code != "truncated" else None
    return given or error_headline(error, locale, catalogue)


# --- reading the SDKs' models ---------------------------------------------------------------

KEEP_ALIVE: Final = domain.TextChunk("")
"""What an SDK event that shows nothing yields (B2: it re-arms the inactivity deadline)."""

_new: Final = object.__new__
_set: Final = object.__setattr__


def text_chunk(content: str) -> domain.TextChunk:
    """`TextChunk(content)` for text an adapter read as a `str`, built without the
    constructor's checks, the larger part of an adapter's work on a text delta:
    the one chunk per SDK event (`sdk_overhead_ratio_*`). The same value, field for field."""
    chunk = _new(domain.TextChunk)
    _set(chunk, "content", content)
    _set(chunk, "usage", None)
    _set(chunk, "thoughts", ())
    _set(chunk, "serving_provider", None)
    return chunk


NO_FIELDS: Final[Mapping[str, object]] = MappingProxyType({})
"""`fields_of` a value without fields."""


def fields_of(item: object) -> Mapping[str, object]:
    """The fields an SDK's model holds, as one read-only mapping: where `getattr(item, name,
    None)` finds a field, `fields_of(item).get(name)` finds the same value, fast.

    The SDKs build stream events with pydantic models, and pydantic v2 keeps a model's
    declared fields in the instance's `__dict__` and the fields it does not declare (kept by
    `extra="allow"`, as the openai and anthropic SDKs do for the wire's extra fields) in
    `__pydantic_extra__` (`model_extra`). `getattr` of a name a model holds neither way goes
    through pydantic's `__getattr__`, which raises an AttributeError for `getattr` to swallow:
    microseconds, for each of the fields most chunks do not have. Read here, a model costs one
    call and each field a dict lookup.

    A model's `__dict__` itself is returned when it has no extra fields (not to be changed).
    Anything without an instance `__dict__` (None, a JSON value of the wrong type the SDK left
    unvalidated) has no fields. A pydantic v1 model keeps its extra fields in `__dict__` too.
    Class attributes (a model's methods) are not fields."""
    values = getattr(item, "__dict__", None)
    if not isinstance(values, dict):
        return NO_FIELDS
    extra = getattr(item, "__pydantic_extra__", None)
    if isinstance(extra, dict) and extra:
        return {**extra, **values}  # as `getattr`: the instance's own first
    return values


# --- closing the SDK's generators (B10, B11) ----------------------------------------------

MAX_SDK_GENERATORS: Final = 64

# The private SDK attributes an adapter reads, each in one helper here: the generator under
# openai's `AsyncStream` (`stream_iterator`), and google-genai's API client (`genai_api_client`,
# for the key, G4). tests/providers/test_provider_sdk.py pins them, and what `sdk_generators`
# follows, against the installed SDKs, so an SDK release that changes them fails there, by name.
STREAM_ITERATOR: Final = "_iterator"
GENAI_API_CLIENT: Final = "_api_client"


def stream_iterator(stream: object) -> object:
    """The async generator under a Stainless SDK's `AsyncStream` (openai's): its private
    `_iterator`, read from the instance so that a lazy one is not made by reading it."""
    return getattr(stream, "__dict__", {}).get(STREAM_ITERATOR)


def genai_api_client(client: object) -> object:
    """google-genai's `Client`'s private `_api_client`, which holds the API key."""
    return getattr(client, GENAI_API_CLIENT, None)


def sdk_generators(root: object, package: str | tuple[str, ...]) -> list[AsyncGenerator[Any, Any]]:
    """The SDK's suspended async generators from `root` down, outer first.

    Followed: the generators a suspended generator's frame holds (locals and the iterator of
    an `async for`), and those kept as attributes by an SDK async iterator it holds
    (`HttpResponse.segment_iterator`); not the attributes of shared SDK objects such as the
    client. Only generators of the SDK's own modules (`package`, one module prefix or
    several) are taken. An SDK that stops iterating one of its generators without closing it
    leaves the closing to the garbage collector, and asyncio then closes it in a task of its
    own, after the stream is over: an adapter finds them while they are suspended and closes
    them itself (`close_generators`).
    """
    found: list[AsyncGenerator[Any, Any]] = []
    seen: set[int] = set()
    pending: deque[object] = deque([root])
    while pending and len(found) < MAX_SDK_GENERATORS:
        item = pending.popleft()
        if not inspect.isasyncgen(item) or id(item) in seen:
            continue
        seen.add(id(item))
        frame = item.ag_frame
        if frame is None or not str(frame.f_globals.get("__name__", "")).startswith(package):
            continue
        found.append(item)
        for held in gc.get_referents(item):
            if inspect.isasyncgen(held):
                pending.append(held)
            elif _is_sdk_async_iterator(held, package):
                pending.extend(v for v in vars(held).values() if inspect.isasyncgen(v))
    return found


def _is_sdk_async_iterator(value: object, package: str | tuple[str, ...]) -> bool:
    kind = type(value)
    return (
        kind.__module__.startswith(package)
        and hasattr(kind, "__anext__")
        and hasattr(value, "__dict__")
    )


async def close_generators(generators: Iterable[object]) -> None:
    """`aclose()` each in turn (outer first); what one raises does not keep the next open and
    never turns a result into an exception. A finished generator's `aclose()` does nothing."""
    for closable in generators:
        aclose = getattr(closable, "aclose", None)
        if aclose is None:
            continue
        with contextlib.suppress(Exception):
            await aclose()
