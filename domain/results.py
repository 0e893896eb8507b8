"""What a stream ends in: exactly one `StreamResult` (SPEC §A, B1, B9).

Every result carries what was delivered so far, whatever its status: the messages Discord
accepted and their text, the number of messages, usage, the thought log and the `<details>`
content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from cordstream.domain.chunks import FunctionCall
from cordstream.domain.usage import TokenUsage

StreamStatus: TypeAlias = Literal[
    "completed",
    "function_call",
    "error",
    "timeout",
    "stopped_by_user",
    "empty_response",
    "follow_up_interrupt",
]
StopReason: TypeAlias = Literal[
    "user_request",
    "system_request",
    "send_message_limit",
    "flush_limit",
    "channel_deleted",
    "missing_access",
    "message_deleted",
    "unknown",
]


@dataclass(frozen=True, slots=True)
class ThoughtLog:
    """The model's reasoning for one stream, never shown in the channel (E4).

    `summary` and `raw` join the provider-level thoughts of that kind in arrival order; `raw`
    also holds `<think>` blocks captured from the text, each separated by a blank line.
    """

    summary: str | None
    raw: str | None
    serving_provider: str | None
    first_reply_url: str | None
    generation_duration_ms: int


@dataclass(frozen=True, slots=True)
class StreamResult:
    """The one outcome of `stream_to_discord`.

    `data` by status: `completed`/`empty_response` → the terminal `DoneChunk` metadata (or
    None); `function_call` → the first `FunctionCall` (all of them in `function_calls`);
    `error` → the `ProviderError` or the exception; otherwise None.

    What reached the channel (F2, B9), for every status: `messages` is the contents Discord
    accepted, in order (`messages_sent` of them); `accumulated_text` is those contents joined
    by "\\n" — what a user copies from the channel, and what a bot stores as the assistant's
    turn. (A plain concatenation would glue the last line of one message
    to the first line of the next.) The stream builds both; a hand-made result keeps the
    defaults it is given.

    `anomalies`: events the stream was fed that a correct shell never feeds (an answer to a
    request that was not in flight, a chunk after the stream ended, …), each described in a
    line; they changed nothing. Always empty unless the shell driving the core has a bug (see
    `cordstream.domain.machine`); the shell logs them.
    """

    status: StreamStatus
    data: object = field(default=None, hash=False)
    accumulated_text: str = ""
    details_content: str | None = None
    stop_reason: StopReason | None = None
    thought_log: ThoughtLog | None = None
    usage: TokenUsage | None = None
    messages_sent: int = 0
    stop_context: object = field(default=None, hash=False)
    function_calls: tuple[FunctionCall, ...] = ()
    messages: tuple[str, ...] = ()
    anomalies: tuple[str, ...] = ()
