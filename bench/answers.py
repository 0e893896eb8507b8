"""Realistic model answers for benchmarks: prose, lists, a table, code, a think block."""

from __future__ import annotations

import random

_VOCABULARY = (
    "the stream sends each line as soon as it is complete while the model keeps writing "
    "tokens arrive in small pieces and a message must never pass two thousand characters "
    "code blocks stay whole when they fit and tables wait for their last row before leaving"
)
_WORDS = tuple(_VOCABULARY.split())


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 18))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", ".", ".", "!", "?"))


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(1, 4)))


def _code(rng: random.Random) -> str:
    lines = [f"    total += value_{i} * {rng.randint(1, 99)}  # step {i}" for i in range(40)]
    return "```python\ndef total():\n    total = 0\n" + "\n".join(lines) + "\n    return total\n```"


def answer(size: int, seed: int = 7) -> str:
    """About `size` characters of markdown in the mix a chat model writes."""
    rng = random.Random(seed)
    parts: list[str] = ["<think>The user wants an overview; keep it short.</think>"]
    length = 0
    while length < size:
        kind = rng.random()
        if kind < 0.6:
            part = _paragraph(rng)
        elif kind < 0.8:
            part = "\n".join(f"- {_sentence(rng)}" for _ in range(rng.randint(2, 5)))
        elif kind < 0.9:
            part = "| name | value |\n|---|---|\n" + "\n".join(
                f"| item {i} | {rng.randint(1, 999)} |" for i in range(rng.randint(2, 6))
            )
        else:
            part = _code(rng)
        parts.append(part)
        length += len(part) + 2
    return "\n\n".join(parts)[:size]


def chunked(text: str, seed: int = 11, smallest: int = 1, largest: int = 8) -> list[str]:
    """`text` cut into chunks of `smallest`..`largest` characters, as a provider streams it."""
    rng = random.Random(seed)
    chunks: list[str] = []
    start = 0
    while start < len(text):
        size = rng.randint(smallest, largest)
        chunks.append(text[start : start + size])
        start += size
    return chunks
