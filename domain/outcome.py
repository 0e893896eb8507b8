"""How a stream ends: its outcome (`Ending`), who decided it, what happens to the text still
pending, and which embed follows the text (SPEC B8, B13, C2–C7, F3, F4, G).

Every way a stream can end is one function here, returning the `Ending` the reducer
(`cordstream.domain.machine`) waits on while the outbox drains. The idea: an ending is decided
once, as data, and carried out later; nothing here waits for the drain or sends anything.
Embeds are composed in the stream's locale with its secrets removed, or not at all when user
errors are suppressed (G7).

`stop_context` is the context of the stop that decided the outcome: kept when the channel is
lost during its flush (the quiet F4 ending keeps it), None for a follow-up and for the stream's
own internal stops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Final, TypeAlias

from cordstream.domain import record as records
from cordstream.domain.catalogue import Catalogue
from cordstream.domain.chunks import FunctionCall, ProviderError
from cordstream.domain.config import StreamConfig
from cordstream.domain.embeds import (
    EmbedSpec,
    exception_embed,
    flush_limit_embed,
    provider_error_embed,
    timeout_embed,
)
from cordstream.domain.events import DiscordFailure
from cordstream.domain.redact import NO_SECRETS, Secrets
from cordstream.domain.requests import InternalStop, Origin, StopRequest, stop_reason
from cordstream.domain.results import StopReason, StreamResult, StreamStatus
from cordstream.domain.segments import Piece

UNKNOWN_CHANNEL: Final = 10003
UNKNOWN_MESSAGE: Final = 10008
MISSING_ACCESS: Final = 50001
# F4: the channel is gone or closed to us; the stream stops quietly (no embed could reach it).
QUIET_FAILURES: Final[Mapping[int, InternalStop]] = {
    UNKNOWN_CHANNEL: "channel_deleted",
    MISSING_ACCESS: "missing_access",
}
# Builds an embed from (locale, catalogue, secrets).
_EmbedBuilder: TypeAlias = Callable[[str, Catalogue, Secrets], EmbedSpec]


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What the stream was started with; constant for its whole life."""

    config: StreamConfig
    locale: str
    suppress_user_errors: bool
    catalogue: Catalogue
    secrets: Secrets = NO_SECRETS  # removed from every embed by value (G4)


@dataclass(frozen=True, slots=True)
class Ending:
    """The decided outcome, waiting for the outbox to drain."""

    status: StreamStatus
    origin: Origin
    data: object = None
    stop_reason: StopReason | None = None
    stop_context: object = None
    function_calls: tuple[FunctionCall, ...] = ()
    embed: EmbedSpec | None = None  # sent after the text; None once sent or if suppressed
    hurry: bool = False  # deliver the rest without humanizer pauses
    # Whether the text still pending is delivered (E8, C6) or discarded (B13, C6, F3, F4).
    deliver: bool = True
    # A follow-up's outcome: the pending text it dropped (C6), which a stop that overrides the
    # follow-up before the result exists delivers after all (C2).
    dropped: tuple[Piece, ...] = ()


def completed(metadata: object) -> Ending:
    return Ending("completed", "natural", metadata)


def function_call(calls: tuple[FunctionCall, ...]) -> Ending:
    return Ending("function_call", "natural", calls[0], function_calls=calls)


def timeout(settings: Settings) -> Ending:
    embed = _embed(
        settings, lambda loc, cat, sec: timeout_embed(locale=loc, catalogue=cat, secrets=sec)
    )
    return Ending("timeout", "natural", embed=embed, hurry=True)


def provider_error(settings: Settings, error: ProviderError, headline: str | None) -> Ending:
    embed = _embed(
        settings,
        lambda loc, cat, sec: provider_error_embed(
            error, headline, locale=loc, catalogue=cat, secrets=sec
        ),
    )
    return Ending("error", "natural", error, embed=embed, hurry=True)


def crash(settings: Settings, error: object) -> Ending:
    """B13: the stream is broken; nothing pending is flushed."""
    embed = _embed(
        settings,
        lambda loc, cat, sec: exception_embed(error, locale=loc, catalogue=cat, secrets=sec),
    )
    return Ending("error", "natural", error, embed=embed, hurry=True, deliver=False)


def requested(settings: Settings, request: StopRequest) -> Ending:
    """The outcome a registry entry decides (C4, C6, C7)."""
    if request.internal is not None:
        return internal_stop(settings, request.internal, context=request.context)
    reason = stop_reason(request)
    if request.kind == "follow_up":
        # Nothing of it is sent: a typing pause in progress is over (E9), no reason to wait.
        return Ending(
            "follow_up_interrupt", "follow_up", stop_reason=reason, hurry=True, deliver=False
        )
    # C6: a user or system stop flushes.
    return Ending(
        "stopped_by_user", "stop", stop_reason=reason, stop_context=request.context, hurry=True
    )


def internal_stop(settings: Settings, reason: InternalStop, *, context: object = None) -> Ending:
    """C4, C6, F3, F4: the stream stops itself; nothing more is sent (but one warning).

    `context`: an internal stop registered from outside keeps its caller's context (C7).
    """
    embed = None
    if reason == "flush_limit":
        embed = _embed(
            settings,
            lambda loc, cat, sec: flush_limit_embed(locale=loc, catalogue=cat, secrets=sec),
        )
    return Ending(
        "stopped_by_user",
        "internal",
        stop_reason=reason,
        stop_context=context,
        embed=embed,
        hurry=True,
        deliver=False,
    )


def refused(settings: Settings, ending: Ending | None, failure: DiscordFailure) -> Ending:
    """F4, B13: Discord refused a message; nothing more is sent after it."""
    quiet = QUIET_FAILURES.get(failure.code) if failure.code is not None else None
    if quiet is not None:
        # A stop being flushed keeps its context: its registry entry is already consumed (C7).
        context = ending.stop_context if ending is not None else None
        return Ending(
            "stopped_by_user",
            "internal",
            stop_reason=quiet,
            stop_context=context,
            hurry=True,
            deliver=False,
        )
    if ending is None or (ending.origin == "natural" and ending.status != "error"):
        return crash(settings, failure.error if failure.error is not None else failure)
    # The first error or a stop stays the outcome; nothing more is sent after a refusal, not
    # even what a follow-up dropped, should a stop override it now.
    return replace(ending, dropped=(), deliver=False)


def message_deleted(ending: Ending | None) -> Ending:
    """L9: someone deleted the live message being edited; the stream ends quietly. A stop
    being flushed keeps its context (C7)."""
    context = ending.stop_context if ending is not None else None
    return Ending(
        "stopped_by_user",
        "internal",
        stop_reason="message_deleted",
        stop_context=context,
        deliver=False,
    )


def result(
    ending: Ending,
    record: records.Record,
    messages: tuple[str, ...],
    *,
    first_url: str | None,
    duration_ms: int,
    anomalies: tuple[str, ...],
) -> StreamResult:
    """The one result (B1, B9): the outcome, with what Discord accepted (`messages`, F2)."""
    status = ending.status
    if status == "completed" and not messages:
        status = "empty_response"  # B8: keeps data, usage and thought log
    return StreamResult(
        status=status,
        data=ending.data,
        accumulated_text=accumulated_text(messages),
        details_content=records.details(record),
        stop_reason=ending.stop_reason,
        thought_log=records.thought_log(record, first_url, duration_ms),
        usage=record.usage,
        messages_sent=len(messages),
        stop_context=ending.stop_context,
        function_calls=ending.function_calls,
        messages=messages,
        anomalies=anomalies,
    )


def accumulated_text(messages: tuple[str, ...]) -> str:
    """F2: what a user copies from the channel: the accepted messages joined by "\\n" (a plain
    concatenation would glue one message's last line to the next's first)."""
    return "\n".join(messages)


def _embed(settings: Settings, build: _EmbedBuilder) -> EmbedSpec | None:
    if settings.suppress_user_errors:
        return None  # G7
    return build(settings.locale, settings.catalogue, settings.secrets)
