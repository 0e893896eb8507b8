"""cordstream's shell: `stream_to_discord` over discord.py (SPEC §A, B, C, F, K).

Everything a bot needs is importable from here: the orchestrator and registry, the config and
context (a channel, or a slash command's interaction, to stream into: `cordstream.shell.target`;
the Stop button: `cordstream.shell.buttons`), `finish_interaction`, the provider protocol, the
reference tool loop `run_turn`, and the core's value types it hands back, and the pace of
Discord requests (`Budget`, `DISCORD_GLOBAL`, `set_global_budget`, and live delivery's
per-channel `DISCORD_CHANNEL`, `set_channel_budget`). The provider adapters live in
`cordstream.shell.providers` (each needs its SDK's extra).
"""

from typing import TYPE_CHECKING

from cordstream.domain import (
    DoneChunk,
    ErrorChunk,
    FunctionCall,
    FunctionCallChunk,
    ProcessedChunk,
    ProviderError,
    StopReason,
    StreamResult,
    StreamStatus,
    TextChunk,
    Thought,
    ThoughtLog,
    TokenUsage,
    estimate_tokens,
    normalize_usage,
    sum_turn_usage,
)
from cordstream.shell.config import StreamConfig
from cordstream.shell.context import StreamContext, StreamProvider
from cordstream.shell.orchestrator import StreamOrchestrator
from cordstream.shell.providers.base import ToolOutcome, ToolProvider
from cordstream.shell.ratelimit import (
    DISCORD_CHANNEL,
    DISCORD_GLOBAL,
    Budget,
    set_channel_budget,
    set_global_budget,
)
from cordstream.shell.stops import (
    DEFAULT_STOPS,
    StopRegistry,
    interaction_may_stop,
    member_may_stop,
)
from cordstream.shell.target import finish_interaction
from cordstream.shell.turn import Tool, ToolRun, TurnResult, TurnStatus, run_turn

__all__ = [
    "DEFAULT_STOPS",
    "DISCORD_CHANNEL",
    "DISCORD_GLOBAL",
    "Budget",
    "DoneChunk",
    "ErrorChunk",
    "FunctionCall",
    "FunctionCallChunk",
    "ProcessedChunk",
    "ProviderError",
    "RedisStopRegistry",
    "StopReason",
    "StopRegistry",
    "StreamConfig",
    "StreamContext",
    "StreamOrchestrator",
    "StreamProvider",
    "StreamResult",
    "StreamStatus",
    "TextChunk",
    "Thought",
    "ThoughtLog",
    "TokenUsage",
    "Tool",
    "ToolOutcome",
    "ToolProvider",
    "ToolRun",
    "TurnResult",
    "TurnStatus",
    "estimate_tokens",
    "finish_interaction",
    "interaction_may_stop",
    "member_may_stop",
    "normalize_usage",
    "run_turn",
    "set_channel_budget",
    "set_global_budget",
    "sum_turn_usage",
]

if TYPE_CHECKING:
    from cordstream.shell.redis_stops import RedisStopRegistry


def __getattr__(name: str) -> object:
    """`RedisStopRegistry` on first use: it needs the `redis` extra (SPEC N1)."""
    if name != "RedisStopRegistry":
        raise AttributeError(f"module 'cordstream.shell' has no attribute {name!r}")
    try:
        from cordstream.shell.redis_stops import RedisStopRegistry  # noqa: PLC0415
    except ModuleNotFoundError as missing:
        raise ImportError(
            f"RedisStopRegistry needs redis: pip install 'cordstream[redis]' ({missing})"
        ) from missing
    return RedisStopRegistry
