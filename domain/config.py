"""Stream configuration (SPEC §A): a pure value, validated when built.

Re-exported by `cordstream.shell`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self, TypeVar

from returns.result import Failure, Result, Success

DISCORD_MESSAGE_LIMIT = 2000
# Room for a re-opened code fence and its closer around at least a few lines of code (E3).
MIN_MESSAGE_LENGTH = 200
HUMANIZER_DEGREES = (0, 1, 2, 3)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """How one stream behaves. Every field is checked here; a bad value raises `ValueError`.

    - `inactivity_timeout`: seconds without any chunk before the stream ends as `timeout` (B2).
    - `send_message_limit`: messages per stream before the internal stop (F3); 0 = no limit.
    - `flush_limit`: hard cap on messages per stream, with a warning embed (F3); 0 = none.
    - `max_message_length`: longest message sent, in code points (E7), 200..2000.
    - `humanizer_degree`: 0..3 (E9).
    """

    inactivity_timeout: float = 120.0
    send_message_limit: int = 0
    flush_limit: int = 40
    max_message_length: int = 1950
    humanizer_degree: int = 1

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            raise ValueError(f"StreamConfig: {problem}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        """Build a config from environment variables; raise `ValueError` naming a bad one.

        `INACTIVITY_TIMEOUT_MS` (milliseconds), `CORDSTREAM_SEND_MESSAGE_LIMIT`,
        `CORDSTREAM_FLUSH_LIMIT`, `CORDSTREAM_MAX_MESSAGE_LENGTH`,
        `CORDSTREAM_HUMANIZER_DEGREE`; unset or empty variables keep the defaults.
        """
        parsed = parse_env(environ, cls)
        if isinstance(parsed, Failure):
            raise ValueError(parsed.failure())
        return parsed.unwrap()


def parse_env(
    environ: Mapping[str, str],
    kind: type[_Config] = StreamConfig,  # type: ignore[assignment]
) -> Result[_Config, str]:
    """The pure half of `StreamConfig.from_env`: a config, or a message naming the bad variable.

    `kind` is the class to build (`cordstream.shell.StreamConfig` re-exports this one with a
    zero-argument `from_env()` that reads the process environment).
    """
    values: dict[str, float | int] = {}
    for name, key, unit in _ENV_FIELDS:
        text = environ.get(name, "").strip()
        if not text:
            continue
        try:
            number = float(text) if key == "inactivity_timeout" else int(text)
        except ValueError:
            return Failure(f"{name}={text!r} is not a number")
        values[key] = number / unit if key == "inactivity_timeout" else number
    try:
        return Success(kind(**values))  # type: ignore[arg-type]  # keys from _ENV_FIELDS
    except ValueError as error:
        return Failure(str(error))


_Config = TypeVar("_Config", bound=StreamConfig)

_ENV_FIELDS: tuple[tuple[str, str, float], ...] = (
    ("INACTIVITY_TIMEOUT_MS", "inactivity_timeout", 1000.0),
    ("CORDSTREAM_SEND_MESSAGE_LIMIT", "send_message_limit", 1.0),
    ("CORDSTREAM_FLUSH_LIMIT", "flush_limit", 1.0),
    ("CORDSTREAM_MAX_MESSAGE_LENGTH", "max_message_length", 1.0),
    ("CORDSTREAM_HUMANIZER_DEGREE", "humanizer_degree", 1.0),
)


def _problem(config: StreamConfig) -> str | None:
    timeout = config.inactivity_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        return "inactivity_timeout must be a number of seconds"
    if not math.isfinite(timeout) or timeout <= 0:
        return f"inactivity_timeout must be a positive finite number, got {timeout!r}"
    for name in ("send_message_limit", "flush_limit"):
        value = getattr(config, name)
        if not _is_int(value) or value < 0:
            return f"{name} must be an int >= 0 (0 = no limit), got {value!r}"
    length = config.max_message_length
    if not _is_int(length) or not MIN_MESSAGE_LENGTH <= length <= DISCORD_MESSAGE_LIMIT:
        return (
            f"max_message_length must be an int in {MIN_MESSAGE_LENGTH}..{DISCORD_MESSAGE_LIMIT},"
            f" got {length!r}"
        )
    if not _is_int(config.humanizer_degree) or config.humanizer_degree not in HUMANIZER_DEGREES:
        return f"humanizer_degree must be 0, 1, 2 or 3, got {config.humanizer_degree!r}"
    return None
