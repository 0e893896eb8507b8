"""What a result reports besides delivery: usage, metadata, the serving provider, the thought
log and `<details>` bodies (SPEC B5, B9, E4, E5). Pure functions over one value, `Record`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from cordstream.domain import capture, rope
from cordstream.domain.chunks import DoneChunk, ErrorChunk, FunctionCallChunk, TextChunk
from cordstream.domain.results import ThoughtLog
from cordstream.domain.rope import Rope
from cordstream.domain.usage import TokenUsage, normalize_usage


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    usage: TokenUsage | None = None
    metadata: Mapping[str, object] | None = None
    serving_provider: str | None = None
    summary: Rope = None
    raw: Rope = None
    details: Rope = None  # finished <details> bodies
    details_block: Rope = None  # the block being read


EMPTY: Final = Record()


def note(record: Record, chunk: TextChunk | FunctionCallChunk | ErrorChunk | DoneChunk) -> Record:
    """B5: thoughts, serving provider, terminal metadata, usage (the latest valid report wins),
    in that order. The same record when the chunk adds nothing."""
    changed = False
    summary, raw = record.summary, record.raw
    for thought in chunk.thoughts:
        if thought.content:
            changed = True
            if thought.kind == "summary":
                summary = (summary, thought.content)
            else:
                raw = (raw, thought.content)
    serving = record.serving_provider
    if serving is None and chunk.serving_provider:
        serving, changed = chunk.serving_provider, True
    metadata = record.metadata
    if isinstance(chunk, DoneChunk) and chunk.metadata:
        metadata, changed = chunk.metadata, True
    usage = record.usage
    if chunk.usage is not None:
        latest = normalize_usage(chunk.usage)
        if latest is not None:
            usage, changed = latest, True
    if not changed:
        return record
    return replace(
        record, summary=summary, raw=raw, serving_provider=serving, metadata=metadata, usage=usage
    )


def merged(run: Sequence[TextChunk | str]) -> TextChunk:
    """E10: a run of plain text read at once (`TextChunk`s without thoughts or a serving
    provider, or plain `str`s), as the one chunk the core steps with: the texts joined, and
    the usage `note` would keep from them noted one by one, the latest valid report (D3, read
    once: Gemini repeats its running totals on every chunk). A single chunk is itself."""
    if len(run) == 1 and not isinstance(run[0], str):
        return run[0]
    text = "".join([item if isinstance(item, str) else item.content for item in run])
    for item in reversed(run):
        if not isinstance(item, str) and item.usage is not None:
            usage = normalize_usage(item.usage)
            if usage is not None:
                return TextChunk(text, usage=usage)
    return TextChunk(text)


def captured(record: Record, kind: capture.OpKind, text: str) -> Record:
    """A `<think>` or `<details>` op of the capture (E4, E5); other kinds change nothing."""
    match kind:
        case "think_open":
            if record.raw is not None:
                return replace(record, raw=(record.raw, "\n\n"))
        case "think":
            return replace(record, raw=(record.raw, text))
        case "details":
            return replace(record, details_block=(record.details_block, text))
        case "details_end":
            body = rope.join(record.details_block).strip()
            details = (record.details, body) if body else record.details
            return replace(record, details=details, details_block=None)
    return record


def retracted(record: Record, unsent: str) -> Record:
    """E4: a stray closing think tag; the text not sent yet was reasoning after all."""
    if not unsent.strip():
        return record
    raw = record.raw
    return replace(record, raw=(raw if raw is None else (raw, "\n\n"), unsent.strip()))


def thought_log(record: Record, first_url: str | None, duration_ms: int) -> ThoughtLog:
    return ThoughtLog(
        summary=rope.join(record.summary) or None,
        raw=rope.join(record.raw) or None,
        serving_provider=record.serving_provider,
        first_reply_url=first_url,
        generation_duration_ms=duration_ms,
    )


def details(record: Record) -> str | None:
    return "\n\n".join(rope.items(record.details)) or None
