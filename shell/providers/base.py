"""What every provider adapter shares: finish reasons, error mapping, headlines, tool results.

An adapter is a `StreamProvider` (SPEC §A) over one official SDK. Its `start_stream` is an
async generator that reads the SDK's stream and yields the adapter's raw items; its
`process_chunk` turns each into exactly one chunk. The rules every adapter follows:

- **Nothing raises out of `start_stream` for an SDK or HTTP failure.** The generator catches
  the SDK's exceptions (HTTP status, connection, timeout, a mid-stream error event) and yields
  an `Failed` item, which `process_chunk` turns into `ErrorChunk(ProviderError)` with the
  kind from `error_from_status`/`connection_error`/`timeout_error`. So the embed says "Rate
  Limited", not "Something went wrong", and the tool loop can read `retryable`.
- **A stream that ends without a finish signal is an error**, `truncated_error()`, never a
  `completed` answer: the HTTP stream was cut (or a proxy dropped it) and the answer is partial.
- **The terminal chunk comes last, after the usage.** A text answer ends with
  `DoneChunk(metadata, usage=...)`; a tool-call answer ends with one `FunctionCallChunk` holding
  every call of the response (parallel calls too) and the usage, so a function-call segment
  carries its bill.
- **`metadata`** of the terminal chunk: `finish_reason` (one of `FinishReason`), `raw_finish_reason`
  (the provider's own value), and, when the provider said, `model` and `id`.
- **The SDK client belongs to the caller.** The adapter never sets retries or timeouts on it
  and never closes it; it closes each HTTP stream it opened (B10).

An adapter also implements `ToolProvider.after_tools`: the same request with the model's
answer (as received: text, tool calls, thinking blocks and their signatures) and the tool
results appended in the provider's own format. `cordstream.shell.run_turn` uses it between segments.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import re
from collections import deque
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, Self, TypeAlias, TypeVar

from cordstream.domain import ErrorChunk, ErrorKind, FunctionCall, ProcessedChunk, ProviderError
from cordstream.shell.context import StreamProvider

FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter", "other"]

Raw = TypeVar("Raw")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call returned, for the next request.

    `output` is the text the model reads (JSON for structured results); `is_error` marks a
    tool that failed, so providers that have a flag for it (Anthropic's `is_error`) set it.
    """

    call: FunctionCall
    output: str
    is_error: bool = False


class ToolProvider(StreamProvider[Raw], Protocol):
    """A provider that can continue its own conversation after a tool round (`run_turn`)."""

    def after_tools(self, outcomes: Sequence[ToolOutcome]) -> Self:
        """A new provider: this request, plus the last answer and the tool results.

        Raises `ValueError` when no stream has ended in a tool call yet.
        """
        ...


@dataclass(frozen=True, slots=True)
class Failed:
    """A raw item an adapter yields in place of raising: the stream failed with `error`."""

    error: ProviderError


def chunk_of(raw: ProcessedChunk | Failed) -> ProcessedChunk:
    """`process_chunk` of an adapter whose `start_stream` yields decided chunks or `Failed`."""
    return ErrorChunk(raw.error) if isinstance(raw, Failed) else raw


def check_outcomes(
    calls: Sequence[FunctionCall], outcomes: Sequence[ToolOutcome], provider: str
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


# --- errors ---------------------------------------------------------------------------------

_MODEL_MESSAGE = re.compile(
    r"(unknown|unsupported|invalid|no such)\s+model|model\s+(\S+\s+)?(not found|does not exist|"
    r"is not supported|not available|deprecated)|model_not_found|not_found_error.*model",
    re.IGNORECASE,
)
_BLOCKED_MESSAGE = re.compile(
    r"content[\s_-]*(policy|filter|management)|safety|blocked|flagged|moderation",
    re.IGNORECASE,
)
_OVERLOADED_MESSAGE = re.compile(r"overload|capacity|unavailable", re.IGNORECASE)

# HTTP statuses a retry can fix.
_RETRYABLE_STATUS: Final = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})


def error_from_status(
    status: int | None,
    message: str,
    *,
    code: str | int | None = None,
    error_type: str | None = None,
    original: object = None,
) -> ProviderError:
    """Map an HTTP failure (or a mid-stream error event) to a `ProviderError`.

    `error_type` is the provider's own error class when it sends one (Anthropic's
    `overloaded_error`, OpenAI's `insufficient_quota`, Gemini's `RESOURCE_EXHAUSTED`); it wins
    over the status, because mid-stream errors arrive with a 200 status.
    """
    if status is None and isinstance(code, int) and 400 <= code <= 599:
        status = code  # a mid-stream error with an HTTP-like code (OpenRouter: 429, 502, 503)
    kind: ErrorKind
    kind_hint = " ".join(str(part).lower() for part in (error_type, code) if part is not None)
    if "overloaded" in kind_hint or status in {503, 529}:
        kind = "provider_overloaded"
    elif "rate_limit" in kind_hint or "resource_exhausted" in kind_hint or status == 429:
        kind = "rate_limit"
    elif "timeout" in kind_hint or status in {408, 504}:
        kind = "timeout"
    elif _MODEL_MESSAGE.search(message) or (status == 404 and "model" in message.lower()):
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
    return ProviderError(
        kind,
        text,
        code=code if code is not None else status,
        retryable=retryable,
        original=original,
    )


def timeout_error(original: object = None) -> ProviderError:
    """The SDK gave up waiting for the provider (its own read or connect timeout)."""
    return ProviderError(
        "timeout", "the provider did not answer in time", retryable=True, original=original
    )


def connection_error(original: object = None) -> ProviderError:
    """The connection failed or was cut before the stream finished."""
    detail = str(original).strip() if original is not None else ""
    message = "the connection to the provider was lost"
    return ProviderError(
        "api_error",
        f"{message}: {detail}" if detail else message,
        code="connection_error",
        retryable=True,
        original=original,
    )


def truncated_error() -> ProviderError:
    """The stream ended without the provider's finish signal: the answer may be cut short."""
    return ProviderError(
        "api_error",
        "the provider's stream ended without a finish signal; the answer may be incomplete",
        code="truncated",
        retryable=True,
    )


def content_blocked_error(reason: str, original: object = None) -> ProviderError:
    """The provider refused to answer (a blocked prompt, or a filter with nothing written)."""
    return ProviderError(
        "content_blocked",
        f"the provider blocked the response ({reason})",
        code=reason,
        retryable=False,
        original=original,
    )


# --- headlines ------------------------------------------------------------------------------

HEADLINES: Final[Mapping[ErrorKind, str]] = {
    "rate_limit": "The model provider is rate limiting this bot. Try again in a moment.",
    "provider_overloaded": "The model provider is overloaded right now. Try again shortly.",
    "content_blocked": "The model provider blocked this response.",
    "timeout": "The model provider took too long to answer.",
    "model_error": (
        "The configured model could not be used. Check the model name in the bot's settings."
    ),
    "api_error": "The model provider returned an error.",
    "unknown": "Something went wrong while talking to the model provider.",
}


def describe_error(
    error: ProviderError,
    locale: str,
    headlines: Mapping[str, Mapping[ErrorKind, str]] | None = None,
) -> str | None:
    """A short headline for the error embed (G1), by kind, in `locale` when known.

    `headlines` maps a locale to per-kind headlines; a locale or kind it lacks falls back to
    the English `HEADLINES`. A truncated stream says so rather than "returned an error".
    """
    if error.code == "truncated":
        return "The model's answer was cut off before it finished."
    localized = (headlines or {}).get(locale.strip().replace("_", "-").lower(), {})
    return localized.get(error.kind) or HEADLINES.get(error.kind)


# --- closing the SDK's generators (B10, B11) ----------------------------------------------

MAX_SDK_GENERATORS: Final = 64


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
