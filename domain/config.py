"""Stream configuration (SPEC §A): a pure value, validated when built.

Re-exported by `cordstream.shell`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, Self, TypeAlias, TypeVar, get_args

from returns.result import Failure, Result, Success

DISCORD_MESSAGE_LIMIT = 2000
# Room for a re-opened code fence and its closer around at least a few lines of code (E3).
MIN_MESSAGE_LENGTH = 200
HUMANIZER_DEGREES = (0, 1, 2, 3)
Delivery: TypeAlias = Literal["live", "messages"]
DELIVERIES: Final[tuple[Delivery, ...]] = get_args(Delivery)
CURSOR_MAX: Final = 8  # the longest streaming cursor (L4)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """How one stream behaves. Every field is checked here; a bad value raises `ValueError`.

    - `inactivity_timeout`: seconds without any chunk before the stream ends as `timeout` (B2).
    - `send_message_limit`: messages per stream before the internal stop (F3); 0 = no limit.
    - `flush_limit`: hard cap on messages per stream, with a warning embed (F3); 0 = none.
    - `max_message_length`: longest message sent, in code points (E7), 200..2000.
    - `humanizer_degree`: 0..3 (E9); messages delivery only (L11).
    - `delivery`: `"live"` (one message edited as the answer grows, SPEC L) or `"messages"`
      (a new message per piece, as the reference does, E9).
    - `cursor`: what a live message ends with while it streams (L4), at most `CURSOR_MAX`
      characters and no letters or digits; `""` for none.
    """

    inactivity_timeout: float = 120.0
    send_message_limit: int = 0
    flush_limit: int = 40
    max_message_length: int = 1950
    humanizer_degree: int = 1
    delivery: Delivery = "live"
    cursor: str = " \u258c"

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            raise ValueError(f"StreamConfig: {problem}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        """Build a config from environment variables; raise `ValueError` naming a bad one.

        `INACTIVITY_TIMEOUT_MS` (milliseconds), `CORDSTREAM_SEND_MESSAGE_LIMIT`,
        `CORDSTREAM_FLUSH_LIMIT`, `CORDSTREAM_MAX_MESSAGE_LENGTH`,
        `CORDSTREAM_HUMANIZER_DEGREE`, `CORDSTREAM_DELIVERY` (`live` or `messages`); unset or
        empty (blank) variables keep the defaults. The error names the variable, what it must
        be, in its own unit, and the value as given:
        `INACTIVITY_TIMEOUT_MS must be a positive number of milliseconds, got '-5'`.
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

    Each variable is checked on its own, in its own unit (milliseconds, messages, characters,
    a degree), so the message speaks of what the user wrote, not of the field it becomes. The
    first bad variable, in the order of the README's table, is the one reported.

    `kind` is the class to build (`cordstream.shell.StreamConfig` re-exports this one with a
    zero-argument `from_env()` that reads the process environment).
    """
    values: dict[str, float | int | str] = {}
    for variable in _ENV_VARIABLES:
        given = environ.get(variable.name, "")
        if not given.strip():
            continue
        value = variable.read(given.strip())
        if value is None:
            return Failure(f"{variable.name} must be {variable.rule}, got {given!r}")
        values[variable.field] = value
    try:
        return Success(kind(**values))  # type: ignore[arg-type]  # keys from _ENV_VARIABLES
    except ValueError as error:  # pragma: no cover - each variable was checked above
        return Failure(str(error))


_Config = TypeVar("_Config", bound=StreamConfig)


def _milliseconds_as_seconds(text: str) -> float | None:
    try:
        milliseconds = float(text)
    except ValueError:
        return None
    seconds = milliseconds / 1000.0
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _whole(low: int, high: int | None) -> Callable[[str], int | None]:
    """A reader of whole numbers from `low` to `high` (None: no upper bound)."""
    return functools.partial(_read_whole, low=low, high=high)


def _read_whole(text: str, *, low: int, high: int | None) -> int | None:
    try:
        number = int(text)
    except ValueError:  # "1.5", "1e3", "nan", "inf", "ten", too many digits
        return None
    return number if low <= number and (high is None or number <= high) else None


@dataclass(frozen=True, slots=True)
class _Variable:
    name: str
    field: str
    rule: str  # what a good value is, in the variable's own unit
    read: Callable[[str], float | int | str | None]  # the field's value, or None when bad


_ENV_VARIABLES: tuple[_Variable, ...] = (
    _Variable(
        "INACTIVITY_TIMEOUT_MS",
        "inactivity_timeout",
        "a positive number of milliseconds",
        _milliseconds_as_seconds,
    ),
    _Variable(
        "CORDSTREAM_SEND_MESSAGE_LIMIT",
        "send_message_limit",
        "a whole number of messages, 0 or more (0 = no limit)",
        _whole(0, None),
    ),
    _Variable(
        "CORDSTREAM_FLUSH_LIMIT",
        "flush_limit",
        "a whole number of messages, 0 or more (0 = no limit)",
        _whole(0, None),
    ),
    _Variable(
        "CORDSTREAM_MAX_MESSAGE_LENGTH",
        "max_message_length",
        f"a whole number of characters from {MIN_MESSAGE_LENGTH} to {DISCORD_MESSAGE_LIMIT}",
        _whole(MIN_MESSAGE_LENGTH, DISCORD_MESSAGE_LIMIT),
    ),
    _Variable(
        "CORDSTREAM_HUMANIZER_DEGREE",
        "humanizer_degree",
        "a humanizer degree from 0 to 3",
        _whole(min(HUMANIZER_DEGREES), max(HUMANIZER_DEGREES)),
    ),
    _Variable(
        "CORDSTREAM_DELIVERY",
        "delivery",
        "one of " + ", ".join(DELIVERIES),
        lambda text: text.lower() if text.lower() in DELIVERIES else None,
    ),
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
    if config.delivery not in DELIVERIES:
        return f"delivery must be 'live' or 'messages', got {config.delivery!r}"
    cursor: object = config.cursor
    if not isinstance(cursor, str) or len(cursor) > CURSOR_MAX:
        return f"cursor must be a str of at most {CURSOR_MAX} characters, got {cursor!r}"
    if any(char.isalnum() for char in cursor) or (cursor and not cursor.strip()):
        return f"cursor must hold no letters or digits and more than whitespace, got {cursor!r}"
    return None
