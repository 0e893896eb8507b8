"""What a provider adapter hands the machine: processed chunks (SPEC §A).

A provider's raw stream item becomes exactly one `ProcessedChunk` through the adapter's
`process_chunk`. Every chunk may carry the provider's raw usage object (normalized later by
`cordstream.domain.usage.normalize_usage`), provider-level thoughts and the name of the
serving provider.

Chunks validate their fields when built, so a broken adapter fails at the line that built the
bad chunk, with a message naming the field, and the machine can trust what it receives. A
chunk can skip that (a subclass overriding `__post_init__`, a field set afterwards with
`object.__setattr__`): `check` re-runs the same checks without changing the chunk, and the
machine applies it to every chunk off its hot path, so such a chunk ends the stream as an
`error` (B13) instead of making `step` raise (B1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, cast, get_args

ThoughtKind: TypeAlias = Literal["summary", "raw"]
ErrorKind: TypeAlias = Literal[
    "api_error",
    "rate_limit",
    "content_blocked",
    "timeout",
    "provider_overloaded",
    "model_error",
    "unknown",
]
ERROR_KINDS: frozenset[str] = frozenset(get_args(ErrorKind))


def _require(ok: bool, owner: str, message: str) -> None:
    if not ok:
        raise TypeError(f"{owner}: {message}")


def _check_common(owner: str, thoughts: object, serving_provider: object) -> None:
    _require(
        isinstance(thoughts, tuple) and all(isinstance(t, Thought) for t in thoughts),
        owner,
        f"thoughts must be a tuple of Thought, got {thoughts!r:.80}",
    )
    _require(
        serving_provider is None or isinstance(serving_provider, str),
        owner,
        f"serving_provider must be str or None, got {type(serving_provider).__name__}",
    )


@dataclass(frozen=True, slots=True)
class Thought:
    """A provider-level reasoning fragment; never sent to the channel (E4)."""

    kind: ThoughtKind
    content: str

    def __post_init__(self) -> None:
        _require(self.kind in ("summary", "raw"), "Thought", f"unknown kind {self.kind!r}")
        _require(isinstance(self.content, str), "Thought", "content must be str")


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """One tool call the model asked for."""

    name: str
    arguments: Mapping[str, object] = field(default_factory=dict, hash=False)
    id: str | None = None

    def __post_init__(self) -> None:
        _require(isinstance(self.name, str), "FunctionCall", "name must be str")
        _require(isinstance(self.arguments, Mapping), "FunctionCall", "arguments must be a mapping")
        _require(self.id is None or isinstance(self.id, str), "FunctionCall", "id must be str")


@dataclass(frozen=True, slots=True)
class ProviderError:
    """A failure the provider reported (or the adapter mapped from an SDK exception)."""

    kind: ErrorKind
    message: str
    code: str | int | None = None
    retryable: bool = False
    user_message: str | None = None
    original: object = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        _require(self.kind in ERROR_KINDS, "ProviderError", f"unknown kind {self.kind!r}")
        _require(isinstance(self.message, str), "ProviderError", "message must be str")
        _require(
            self.code is None or isinstance(self.code, str | int),
            "ProviderError",
            "code must be str, int or None",
        )
        _require(isinstance(self.retryable, bool), "ProviderError", "retryable must be bool")
        _require(
            self.user_message is None or isinstance(self.user_message, str),
            "ProviderError",
            "user_message must be str or None",
        )


class _Checked:
    """A chunk's constructor validates its fields with `check`: a bad one raises TypeError."""

    __slots__ = ()

    def __post_init__(self) -> None:
        check(cast("ProcessedChunk", self))  # no message is built unless a check fails


@dataclass(frozen=True, slots=True)
class TextChunk(_Checked):
    """Model text. May contain `<think>`/`<details>` markup; the machine strips it (E4, E5)."""

    content: str
    usage: object = field(default=None, kw_only=True, hash=False)
    thoughts: tuple[Thought, ...] = field(default=(), kw_only=True)
    serving_provider: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class FunctionCallChunk:
    """The model asked for one call, or several parallel calls (a sequence), or none."""

    call: FunctionCall | Sequence[FunctionCall] | None
    usage: object = field(default=None, kw_only=True, hash=False)
    thoughts: tuple[Thought, ...] = field(default=(), kw_only=True)
    serving_provider: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        call: object = self.call  # checked at run time whatever the annotation says
        if call is not None and not isinstance(call, FunctionCall):
            is_sequence = isinstance(call, Sequence) and not isinstance(call, str)
            calls = tuple(call) if isinstance(call, Sequence) else ()
            _require(
                is_sequence and all(isinstance(c, FunctionCall) for c in calls),
                "FunctionCallChunk",
                "call must be a FunctionCall, a sequence of them, or None",
            )
            object.__setattr__(self, "call", calls)
        _check_common("FunctionCallChunk", self.thoughts, self.serving_provider)

    @property
    def calls(self) -> tuple[FunctionCall, ...]:
        """All calls of this chunk, in the order the model made them."""
        call = self.call
        if call is None:
            return ()
        if isinstance(call, FunctionCall):
            return (call,)
        return tuple(call)


@dataclass(frozen=True, slots=True)
class ErrorChunk(_Checked):
    """The provider reported an error in-band; `None` means no error (the chunk is ignored)."""

    error: ProviderError | None
    usage: object = field(default=None, kw_only=True, hash=False)
    thoughts: tuple[Thought, ...] = field(default=(), kw_only=True)
    serving_provider: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class DoneChunk(_Checked):
    """The provider's finish signal. Text after it is still delivered (B6)."""

    metadata: Mapping[str, object] | None = field(default=None, hash=False)
    usage: object = field(default=None, kw_only=True, hash=False)
    thoughts: tuple[Thought, ...] = field(default=(), kw_only=True)
    serving_provider: str | None = field(default=None, kw_only=True)


ProcessedChunk: TypeAlias = TextChunk | FunctionCallChunk | ErrorChunk | DoneChunk


def check(chunk: ProcessedChunk) -> None:
    """Raise the TypeError the constructor raises for a bad field, without changing `chunk`.

    For a chunk that skipped validation: a subclass whose `__post_init__` does not check, or a
    field changed after construction. Cheap when all is well (a few `isinstance` tests, no
    message built): the machine calls it for every chunk off its hot path.
    """
    # Read as `object`: at run time a field may hold anything, whatever its annotation says.
    owner: str
    if isinstance(chunk, TextChunk):
        owner = "TextChunk"
        content: object = chunk.content
        if not isinstance(content, str):
            _require(False, owner, f"content must be str, got {type(content).__name__}")
    elif isinstance(chunk, FunctionCallChunk):
        owner = "FunctionCallChunk"
        call: object = chunk.call
        if call is not None and not isinstance(call, FunctionCall):
            _require(
                isinstance(call, Sequence)
                and not isinstance(call, str)
                and all(isinstance(c, FunctionCall) for c in call),
                owner,
                "call must be a FunctionCall, a sequence of them, or None",
            )
    elif isinstance(chunk, ErrorChunk):
        owner = "ErrorChunk"
        error: object = chunk.error
        if error is not None and not isinstance(error, ProviderError):
            _require(False, owner, "error must be a ProviderError or None")
    else:
        owner = "DoneChunk"
        metadata: object = chunk.metadata
        if metadata is not None and not isinstance(metadata, Mapping):
            _require(False, owner, "metadata must be a mapping or None")
    thoughts: object = chunk.thoughts
    serving: object = chunk.serving_provider
    thoughts_ok = isinstance(thoughts, tuple) and (
        not thoughts or all(isinstance(t, Thought) for t in thoughts)
    )
    if not thoughts_ok or not (serving is None or isinstance(serving, str)):
        _check_common(owner, thoughts, serving)  # raises, naming the field


def trusted(chunk: object) -> ProcessedChunk | Exception:
    """`chunk` if it can be routed, else why not (B1, B13): a value that is not a chunk at all,
    or a chunk with a field that skipped its constructor's validation (a subclass overriding
    `__post_init__`, a field set afterwards with `object.__setattr__`)."""
    if not isinstance(chunk, TextChunk | FunctionCallChunk | ErrorChunk | DoneChunk):
        name = type(chunk).__name__
        return TypeError(f"process_chunk returned {name}, expected a ProcessedChunk")
    if _plain_text(chunk):
        return chunk
    try:
        check(chunk)
    except Exception as error:  # a field the checks cannot even read is as bad
        return error
    return chunk


def _plain_text(chunk: object) -> bool:
    """A `TextChunk` as built, without thoughts: the common case, too cheap to check further."""
    return (
        type(chunk) is TextChunk
        and type(chunk.content) is str
        and type(chunk.thoughts) is tuple
        and not chunk.thoughts
        and (chunk.serving_provider is None or type(chunk.serving_provider) is str)
    )
