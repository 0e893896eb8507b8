"""cordstream's pure core: everything about a stream that can be decided without I/O.

Read this first
---------------
A provider adapter turns the model's stream into *chunks* (`TextChunk`, `FunctionCallChunk`,
`ErrorChunk`, `DoneChunk`). The shell (`shell/`) reads them, asks Discord to send things and
keeps the clock; this package decides everything else, as one reducer:

    state, effects = step(state, event)

Events (`cordstream.domain.events`) are what happened — a chunk arrived, the provider ended
or raised, a stop or follow-up was requested, a timer fired, Discord accepted or refused a
send — each with the shell's clock reading `now`. Effects (`cordstream.domain.effects`) are
what the shell must do — arm the inactivity timer, send a message or an embed, pause as if
typing, close the provider, consume a registry entry, and, exactly once, `Finish(result)`. Both
are frozen dataclasses holding plain data, so a test compares a step's output with `==` and
replays any timing exactly.

Where each rule of the contract (`docs/contract.md`) lives:

- `machine`   — the reducer: phases, chunk routing, stop resolution (B, C4–C7), Discord
                failures (F4), time as data (B2, B12), impossible events (`anomalies`).
- `delivery`  — the state's one delivery value (messages or live) and the two policies the
                reducer drives it through (E, F, L).
- `outbox`    — messages delivery: packing pieces into messages, typing pauses, limits,
                what Discord accepted (E6, E7, E9, F2, F3).
- `live`      — live delivery: one message edited as the text grows, cadence, layout,
                rollover (L).
- `state`     — the machine's state: one value, one sub-record per concern.
- `outcome`   — how a stream ends: each ending, its embed, the result (B8, B13, C4–C7, F4, G).
- `record`    — what a result reports besides delivery: usage, thoughts, details (B5, B9).
- `capture`   — `<think>`/`<details>` removal, in source order (E4, E5).
- `segments`  — when text leaves the buffer and in what pieces (E1–E3, E6–E8, E10).
- `graphemes` — where a message may be cut without splitting a character (E7), and text
                made sendable (surrogates, F2).
- `usage`     — one shape for every provider's token usage (D).
- `embeds`, `catalogue`, `redact` — what an error, timeout or warning embed says (G).
- `requests`  — stop and follow-up entries: which wins, what reason (an internal stop is a
                typed field, C4), what a stream does with one (C1–C10).
- `interaction` — where an interaction's answer stands: the deferral, the route of each
                message, embed and edit, the token's expiry, settling (K1).
- `lifecycle` — the provider's task: when it is cancelled, cancelled again, given up (B10, B11).
- `final`     — the final edits a shell makes itself after the caller's cancellation (L4).
- `pacing`    — the pace of Discord requests: windows, lanes, retries of a 429 (F4, L2).
- `chunks`, `results`, `config` — the public value types of SPEC §A.

This package imports nothing from asyncio, discord, aiohttp, clocks, randomness or I/O.

Example: feeding the machine by hand (the shell does exactly this against Discord)::

    from cordstream.domain import ChunkArrived, Delivered, ProviderEnded, SendMessage, Started
    from cordstream.domain import StreamConfig, TextChunk, initial_state, step

    state = initial_state(StreamConfig())
    state, effects = step(state, Started(now=0.0))            # → (ArmTimer(at=120.0),)
    state, effects = step(state, ChunkArrived(0.1, TextChunk("Hi!\\nHow")))
    send = effects[0]                                        # SendMessage(1, "Hi!", reply=True)
    assert isinstance(send, SendMessage)
    state, effects = step(state, Delivered(0.2, send.seq))
    state, effects = step(state, ProviderEnded(0.3))         # flushes "How"
"""

from cordstream.domain.catalogue import DEFAULT_CATALOGUE, Catalogue
from cordstream.domain.chunks import (
    DoneChunk,
    ErrorChunk,
    ErrorKind,
    FunctionCall,
    FunctionCallChunk,
    ProcessedChunk,
    ProviderError,
    TextChunk,
    Thought,
)
from cordstream.domain.config import StreamConfig
from cordstream.domain.effects import (
    ArmTimer,
    AwaitTurn,
    CloseProvider,
    ConsumeRequest,
    EditMessage,
    Effect,
    Finish,
    SendEmbed,
    SendMessage,
    TypingPause,
)
from cordstream.domain.embeds import EmbedColour, EmbedSpec
from cordstream.domain.events import (
    ChunkArrived,
    Delivered,
    DiscordFailure,
    Event,
    PauseOver,
    ProviderCrashed,
    ProviderEnded,
    Rejected,
    Started,
    StopRequested,
    TimerFired,
    TurnGranted,
)
from cordstream.domain.machine import step
from cordstream.domain.requests import StopRequest, may_stop, register, stop_reason
from cordstream.domain.results import StopReason, StreamResult, StreamStatus, ThoughtLog
from cordstream.domain.state import StreamState, initial_state
from cordstream.domain.usage import TokenUsage, estimate_tokens, normalize_usage, sum_turn_usage

__all__ = [
    "DEFAULT_CATALOGUE",
    "ArmTimer",
    "AwaitTurn",
    "Catalogue",
    "ChunkArrived",
    "CloseProvider",
    "ConsumeRequest",
    "Delivered",
    "DiscordFailure",
    "DoneChunk",
    "EditMessage",
    "Effect",
    "EmbedColour",
    "EmbedSpec",
    "ErrorChunk",
    "ErrorKind",
    "Event",
    "Finish",
    "FunctionCall",
    "FunctionCallChunk",
    "PauseOver",
    "ProcessedChunk",
    "ProviderCrashed",
    "ProviderEnded",
    "ProviderError",
    "Rejected",
    "SendEmbed",
    "SendMessage",
    "Started",
    "StopReason",
    "StopRequest",
    "StopRequested",
    "StreamConfig",
    "StreamResult",
    "StreamState",
    "StreamStatus",
    "TextChunk",
    "Thought",
    "ThoughtLog",
    "TimerFired",
    "TokenUsage",
    "TurnGranted",
    "TypingPause",
    "estimate_tokens",
    "initial_state",
    "may_stop",
    "normalize_usage",
    "register",
    "step",
    "stop_reason",
    "sum_turn_usage",
]
