"""Token usage: one normalized shape for every provider's usage report (SPEC D1–D3).

`normalize_usage` turns whatever a provider reports (a mapping of parsed JSON, an SDK model, a
`SimpleNamespace`, nested under `usage` or not) into a `TokenUsage`, or None; which fields it
reads and which counts it trusts is D1–D2. `sum_turn_usage` adds the segments of one tool-loop
turn, and `estimate_tokens` stands in when no segment reported any (D3).

The idea: a usage report is advisory. It is read on every chunk, so None and scalars return at
once; and every read of it, down to `isinstance` and each count's own comparisons, runs
inside a guard, so a broken report is no usage rather than a broken stream. Each alias is
judged on its own, so one bad field costs only that field.

It never raises, whatever `raw` is, never adds up the reports of one stream (the latest wins,
D3), and never returns a count of a type other than a plain `int`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from cordstream.domain.results import StreamResult


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Billed tokens of one provider request: prompt side and generated side."""

    input_tokens: int
    output_tokens: int


_MAX_COUNT: Final = 2**53 - 1
_MAX_DEPTH: Final = 4
_NESTED: Final = ("usage", "usageMetadata", "usage_metadata")
# (name, already includes cached tokens); in D1 order.
_INPUT: Final = (
    ("prompt_tokens", True),
    ("promptTokens", True),
    ("input_tokens", False),
    ("inputTokens", False),
    ("promptTokenCount", True),
    ("prompt_token_count", True),
)
# Each alias is a group of names whose valid counts add up (Gemini counts thoughts apart).
_OUTPUT: Final = (
    ("completion_tokens",),
    ("completionTokens",),
    ("output_tokens",),
    ("outputTokens",),
    ("candidatesTokenCount", "thoughtsTokenCount"),
    ("candidates_token_count", "thoughts_token_count"),
)
# Two cache counts, each under one of two spellings (alternatives, not parts).
_CACHE: Final = (
    (("cache_read_input_tokens",), ("cacheReadInputTokens",)),
    (("cache_creation_input_tokens",), ("cacheCreationInputTokens",)),
)
# Values that can never hold usage: answered without a single attribute lookup.
_SCALARS: Final = (str, bytes, bytearray, int, float, complex)


def normalize_usage(raw: object) -> TokenUsage | None:
    """Map any provider's usage object to `TokenUsage`, or None when it holds no valid count."""
    if raw is None:
        return None
    try:  # `isinstance` included: a raising `__class__` makes it raise
        return _normalize(raw, _MAX_DEPTH)
    except Exception:  # a hostile object (e.g. a raising `__class__`) is just "no usage"
        return None


def sum_turn_usage(results: Iterable[StreamResult]) -> TokenUsage | None:
    """Add the usage of every segment of a turn; None when no segment reported usage.

    Each tool-loop request is billed on its own, so the sum is the turn's bill (D3).
    """
    reported = [result.usage for result in results if result.usage is not None]
    if not reported:
        return None
    return TokenUsage(
        input_tokens=sum(usage.input_tokens for usage in reported),
        output_tokens=sum(usage.output_tokens for usage in reported),
    )


def estimate_tokens(text: str) -> int:
    """The fallback estimate when no segment reported usage: ceil(len / 4)."""
    return -(-len(text) // 4)


def _normalize(raw: object, depth: int) -> TokenUsage | None:
    if raw is None or isinstance(raw, _SCALARS):
        return None
    if depth > 0:
        for name in _NESTED:
            inner = _field(raw, name)
            nested = None if inner is None else _normalize(inner, depth - 1)
            if nested is not None:  # a valid nested report wins over the container's own (D1)
                return nested
    input_tokens = _input_side(raw)
    output_tokens = _first_alias(raw, _OUTPUT) or 0
    if input_tokens <= 0 and output_tokens <= 0:
        return None
    return TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens)


def _input_side(raw: object) -> int:
    for name, includes_cache in _INPUT:
        count = _count(_field(raw, name))
        if count is not None:
            return count if includes_cache else count + _cached(raw)
    return _cached(raw)


def _cached(raw: object) -> int:
    return sum(_first_alias(raw, spellings) or 0 for spellings in _CACHE)


def _first_alias(raw: object, aliases: tuple[tuple[str, ...], ...]) -> int | None:
    """The count of the first alias with a valid count (D2); an alias's names add up."""
    for names in aliases:
        counts = [count for name in names if (count := _count(_field(raw, name))) is not None]
        if counts:
            return sum(counts)
    return None


def _field(raw: object, name: str) -> object | None:
    """The value under `name` (key of a mapping, else attribute); None when absent."""
    try:
        if type(raw) is dict:  # parsed JSON, an SDK model's fields: no ABC check
            return raw.get(name)
        return raw.get(name) if isinstance(raw, Mapping) else getattr(raw, name, None)
    except Exception:  # properties and `__getattr__` of SDK objects may raise anything
        return None


def _count(value: object) -> int | None:
    """A valid token count (D2): a non-negative int or integral float, not a bool.

    Judged on a plain `int`/`float` copy, so a subclass's own comparisons are not used; a value
    whose conversion raises is invalid for its alias only (the other side is still read).
    """
    if value is None:  # the usual answer: the field is absent
        return None
    try:
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            count = int.__index__(value)  # the int itself, whatever `__int__` says
            return count if 0 <= count <= _MAX_COUNT else None
        if isinstance(value, float):
            number = float.__float__(value)
            if number.is_integer() and 0 <= number <= _MAX_COUNT:
                return int(number)
    except Exception:  # a hostile subclass: this count is invalid, nothing more
        return None
    return None
