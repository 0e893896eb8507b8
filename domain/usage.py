"""Token usage: one normalized shape for every provider's usage report (SPEC D1–D3).

Within one stream the latest valid report wins (providers send running totals; summing them
double-counts). Across the segments of one tool-loop turn, `sum_turn_usage` adds them up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from domain.results import StreamResult


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Billed tokens of one provider request: prompt side and generated side."""

    input_tokens: int
    output_tokens: int


def normalize_usage(raw: object) -> TokenUsage | None:
    """Map any provider's usage object to `TokenUsage`, or None when it holds no valid count."""
    raise NotImplementedError


def sum_turn_usage(results: Iterable[StreamResult]) -> TokenUsage | None:
    """Add the usage of every segment of a turn; None when no segment reported usage."""
    raise NotImplementedError


def estimate_tokens(text: str) -> int:
    """The fallback estimate when no segment reported usage: ceil(len / 4)."""
    raise NotImplementedError
