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


def test_config_from_env_reads_inactivity_timeout_ms() -> None:
    config = StreamConfig.from_env(
        {"INACTIVITY_TIMEOUT_MS": "2500", "CORDSTREAM_HUMANIZER_DEGREE": "2"}
    )
    assert config.inactivity_timeout == 2.5
    assert config.humanizer_degree == 2


def test_config_from_env_ignores_unset_and_empty() -> None:
    assert StreamConfig.from_env({"INACTIVITY_TIMEOUT_MS": " "}) == StreamConfig()


def test_config_from_env_names_the_bad_variable() -> None:
    with pytest.raises(ValueError, match="INACTIVITY_TIMEOUT_MS='soon' is not a number"):
        StreamConfig.from_env({"INACTIVITY_TIMEOUT_MS": "soon"})
    assert "max_message_length" in parse_env({"CORDSTREAM_MAX_MESSAGE_LENGTH": "5000"}).failure()


def test_shell_config_from_env_reads_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INACTIVITY_TIMEOUT_MS", "1500")
    config = ShellConfig.from_env()
    assert isinstance(config, ShellConfig)
    assert config.inactivity_timeout == 1.5
    assert config == ShellConfig(inactivity_timeout=1.5)
