"""`StreamConfig`: defaults from SPEC §A, every bad value refused with a clear message."""

from __future__ import annotations

import pytest

from cordstream.domain import StreamConfig
from cordstream.domain.config import parse_env
from cordstream.shell import StreamConfig as ShellConfig


def test_config_defaults_match_the_spec() -> None:
    config = StreamConfig()
    assert (
        config.inactivity_timeout,
        config.send_message_limit,
        config.flush_limit,
        config.max_message_length,
        config.humanizer_degree,
    ) == (120.0, 0, 40, 1950, 1)


@pytest.mark.parametrize(
    "changes",
    [
        {"inactivity_timeout": 0},
        {"inactivity_timeout": float("nan")},
        {"inactivity_timeout": float("inf")},
        {"inactivity_timeout": True},
        {"send_message_limit": -1},
        {"flush_limit": 1.5},
        {"max_message_length": 2001},
        {"max_message_length": 199},
        {"humanizer_degree": 4},
        {"humanizer_degree": True},
    ],
)
def test_config_refuses_bad_values(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="StreamConfig: "):
        StreamConfig(**changes)  # type: ignore[arg-type]  # bad values on purpose


@pytest.mark.parametrize(
    "changes",
    [
        {"inactivity_timeout": 0.001},
        {"inactivity_timeout": 0.5},
        {"inactivity_timeout": 1},
        {"send_message_limit": 0},
        {"flush_limit": 0},
        {"max_message_length": 200},
        {"max_message_length": 2000},
        {"humanizer_degree": 0},
        {"humanizer_degree": 3},
    ],
)
def test_config_accepts_every_value_up_to_its_bounds(changes: dict[str, object]) -> None:
    """The edges of each range are valid (a sub-second timeout included)."""
    config = StreamConfig(**changes)  # type: ignore[arg-type]  # one field at a time
    assert all(getattr(config, name) == value for name, value in changes.items())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"inactivity_timeout": "5"}, "inactivity_timeout must be a number of seconds"),
        ({"inactivity_timeout": True}, "inactivity_timeout must be a number of seconds"),
        (
            {"inactivity_timeout": -1.0},
            "inactivity_timeout must be a positive finite number, got -1.0",
        ),
        ({"flush_limit": -1}, "flush_limit must be an int >= 0 (0 = no limit), got -1"),
        (
            {"send_message_limit": 2.0},
            "send_message_limit must be an int >= 0 (0 = no limit), got 2.0",
        ),
        ({"max_message_length": 199}, "max_message_length must be an int in 200..2000, got 199"),
        ({"humanizer_degree": 4}, "humanizer_degree must be 0, 1, 2 or 3, got 4"),
    ],
)
def test_config_names_the_field_and_the_value_it_refuses(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=r"^StreamConfig: ") as raised:
        StreamConfig(**changes)  # type: ignore[arg-type]  # bad values on purpose
    assert str(raised.value) == f"StreamConfig: {message}"


def test_config_from_env_reads_inactivity_timeout_ms() -> None:
    config = StreamConfig.from_env(
        {"INACTIVITY_TIMEOUT_MS": "2500", "CORDSTREAM_HUMANIZER_DEGREE": "2"}
    )
    assert config.inactivity_timeout == 2.5
    assert config.humanizer_degree == 2


def test_config_from_env_ignores_unset_and_empty() -> None:
    assert StreamConfig.from_env({"INACTIVITY_TIMEOUT_MS": " "}) == StreamConfig()


# Every variable `from_env` reads, with its unit as the message states it.
_UNITS = {
    "INACTIVITY_TIMEOUT_MS": "a positive number of milliseconds",
    "CORDSTREAM_SEND_MESSAGE_LIMIT": "a whole number of messages, 0 or more (0 = no limit)",
    "CORDSTREAM_FLUSH_LIMIT": "a whole number of messages, 0 or more (0 = no limit)",
    "CORDSTREAM_MAX_MESSAGE_LENGTH": "a whole number of characters from 200 to 2000",
    "CORDSTREAM_HUMANIZER_DEGREE": "a humanizer degree from 0 to 3",
}
_BAD = {
    "INACTIVITY_TIMEOUT_MS": ["-5", "0", "-0.0", "soon", "nan", "inf", "-inf", "1e999", "5e-324"],
    "CORDSTREAM_SEND_MESSAGE_LIMIT": ["-1", "1.5", "many", "nan", "inf", "1e3"],
    "CORDSTREAM_FLUSH_LIMIT": ["-1", "2.0", "forty", "nan", "inf"],
    "CORDSTREAM_MAX_MESSAGE_LENGTH": ["199", "2001", "5000", "-1", "1950.0", "long", "nan", "inf"],
    "CORDSTREAM_HUMANIZER_DEGREE": ["4", "-1", "1.0", "one", "nan", "inf", " 7 "],
}


@pytest.mark.parametrize(
    ("name", "given"), [(name, given) for name, values in _BAD.items() for given in values]
)
def test_config_from_env_names_the_variable_its_unit_and_the_text_given(
    name: str, given: str
) -> None:
    """SPEC §A: a bad variable is reported as the user wrote it, not as the field it becomes
    (never `inactivity_timeout must be … got -0.005` for `INACTIVITY_TIMEOUT_MS=-5`)."""
    expected = f"{name} must be {_UNITS[name]}, got {given!r}"
    with pytest.raises(ValueError, match=f"^{name} must be ") as raised:
        StreamConfig.from_env({name: given})
    assert str(raised.value) == expected
    assert parse_env({name: given}).failure() == expected
    with pytest.raises(ValueError, match=f"^{name} must be ") as from_shell:
        ShellConfig.from_env({name: given})
    assert str(from_shell.value) == expected


@pytest.mark.parametrize("name", sorted(_UNITS))
@pytest.mark.parametrize("blank", ["", " ", "\t\n"])
def test_config_from_env_keeps_the_default_for_an_empty_variable(name: str, blank: str) -> None:
    assert StreamConfig.from_env({name: blank}) == StreamConfig()


def test_config_from_env_reads_each_variable_in_its_unit() -> None:
    config = StreamConfig.from_env(
        {
            "INACTIVITY_TIMEOUT_MS": " 2500.5 ",
            "CORDSTREAM_SEND_MESSAGE_LIMIT": "0",
            "CORDSTREAM_FLUSH_LIMIT": "12",
            "CORDSTREAM_MAX_MESSAGE_LENGTH": "200",
            "CORDSTREAM_HUMANIZER_DEGREE": "3",
        }
    )
    assert config == StreamConfig(
        inactivity_timeout=2.5005,
        send_message_limit=0,
        flush_limit=12,
        max_message_length=200,
        humanizer_degree=3,
    )


def test_config_from_env_reports_the_first_bad_variable_in_table_order() -> None:
    environ = {"CORDSTREAM_HUMANIZER_DEGREE": "9", "INACTIVITY_TIMEOUT_MS": "-5"}
    assert parse_env(environ).failure() == (
        "INACTIVITY_TIMEOUT_MS must be a positive number of milliseconds, got '-5'"
    )


def test_shell_config_from_env_reads_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INACTIVITY_TIMEOUT_MS", "1500")
    config = ShellConfig.from_env()
    assert isinstance(config, ShellConfig)
    assert config.inactivity_timeout == 1.5
    assert config == ShellConfig(inactivity_timeout=1.5)
