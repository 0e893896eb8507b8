"""Provider adapters over the official SDKs, each a `StreamProvider` (SPEC §A).

Each adapter needs its SDK, installed with an extra: `pip install 'cordstream[openai]'`,
`[anthropic]`, `[gemini]` (or `[all]`). Importing an adapter whose SDK is missing raises an
ImportError that names the extra.

- `OpenAIChatProvider`: chat completions; any OpenAI-compatible endpoint.
- `AnthropicProvider`: the Messages API.
- `GeminiProvider`: Gemini's generate-content streaming (`google-genai`).

`cordstream.shell.providers.base` holds what they share: the streaming skeleton (`Adapter`),
`ToolOutcome`, `ToolProvider`, finish-reason and error mapping, and the error headlines (the
locale catalogue's `headline.*` messages).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from cordstream.shell.providers.base import (
    FinishReason,
    ToolOutcome,
    ToolProvider,
    describe_error,
    unify_finish_reason,
)

if TYPE_CHECKING:
    from cordstream.shell.providers.anthropic import AnthropicProvider
    from cordstream.shell.providers.gemini import GeminiProvider
    from cordstream.shell.providers.openai import OpenAIChatProvider

_LAZY = {
    "OpenAIChatProvider": ("cordstream.shell.providers.openai", "openai"),
    "AnthropicProvider": ("cordstream.shell.providers.anthropic", "anthropic"),
    "GeminiProvider": ("cordstream.shell.providers.gemini", "gemini"),
}

__all__ = [
    "AnthropicProvider",
    "FinishReason",
    "GeminiProvider",
    "OpenAIChatProvider",
    "ToolOutcome",
    "ToolProvider",
    "describe_error",
    "unify_finish_reason",
]


def __getattr__(name: str) -> object:
    """Import an adapter on first use, so a missing SDK only matters to who uses it."""
    if name not in _LAZY:
        raise AttributeError(f"module 'cordstream.shell.providers' has no attribute {name!r}")
    module_name, extra = _LAZY[name]
    try:
        module = import_module(module_name)
    except ModuleNotFoundError as missing:
        raise ImportError(
            f"{name} needs its SDK: pip install 'cordstream[{extra}]' ({missing})"
        ) from missing
    return getattr(module, name)
