"""cordstream's shell: `stream_to_discord` over discord.py (SPEC §A, B, C, F).

Everything a bot needs is importable from here: the orchestrator and registry, the config and
context, the provider protocol, and the core's value types it hands back.
"""

from domain import (
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
from shell.config import StreamConfig
from shell.context import StreamContext, StreamProvider
from shell.orchestrator import StreamOrchestrator
from shell.stops import DEFAULT_STOPS, StopRegistry

__all__ = [
    "DEFAULT_STOPS",
    "DoneChunk",
    "ErrorChunk",
    "FunctionCall",
    "FunctionCallChunk",
    "ProcessedChunk",
    "ProviderError",
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
    "estimate_tokens",
    "normalize_usage",
    "sum_turn_usage",
]
