"""SPEC G4: secrets never reach an embed."""

from __future__ import annotations

import string
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cordstream.domain.redact import REDACTED, redact, redact_head

_BODY = "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9-bC2_eF4hJ6kL8"


@pytest.mark.parametrize(
    "key",
    [
        f"sk-{_BODY}",
        f"sk-proj-{_BODY}",
        f"sk-ant-api03-{_BODY}",
        f"sk-or-v1-{_BODY}",
        f"AIzaSy{_BODY[:33]}",
        f"xai-{_BODY}",
        f"gsk_{_BODY}",
    ],
    ids=["openai", "openai-project", "anthropic", "openrouter", "google", "xai", "groq"],
)
def test_G4_redacts_provider_api_keys(key: str) -> None:
    assert redact(f"Incorrect API key provided: {key}.") == (
        f"Incorrect API key provided: {REDACTED}."
    )


def test_G4_redacts_anthropic_key() -> None:
    assert "sk-ant" not in redact(f"invalid x-api-key sk-ant-api03-{_BODY}")


def test_G4_redacts_masked_key_echo() -> None:
    assert redact("key: sk-proj-****************************ab12") == f"key: {REDACTED}"


def test_G4_redacts_bearer_token() -> None:
    text = "Authorization: Bearer eyJhbGciOi.J9.eyJzdWIiOiIx+/=="
    assert redact(text) == f"Authorization: Bearer {REDACTED}"


def test_G4_redacts_lower_case_bearer_token() -> None:
    assert redact("authorization: bearer abc.def.ghi") == f"authorization: bearer {REDACTED}"


@pytest.mark.parametrize("name", ["key", "api_key", "apikey", "api-key", "access_token", "token"])
def test_G4_redacts_secret_query_values(name: str) -> None:
    url = f"https://example.test/v1/models?{name}=s3cr3t-VALUE.x&alt=sse"
    assert redact(url) == f"https://example.test/v1/models?{name}={REDACTED}&alt=sse"


def test_G4_redacts_gemini_url_key() -> None:
    url = f"POST /v1beta/models/gemini:streamGenerateContent?key=AIzaSy{_BODY[:33]} failed"
    assert "AIza" not in redact(url)


@pytest.mark.parametrize(
    "prose",
    [
        "task-runner-abcdefghijklmnop failed",
        "a risk-assessment-framework-document",
        "monkey=banana and turkey=stuffed",
        "the Bearer of bad news",
        "tokens=12 used",
        "sk-learn is a library",
    ],
)
def test_G4_leaves_prose_alone(prose: str) -> None:
    assert redact(prose) == prose


_KEY_CHARS = string.ascii_letters + string.digits + "_-"
_KEYS = st.builds(
    lambda prefix, body: prefix + body,
    st.sampled_from(["sk-", "sk-ant-api03-", "sk-or-v1-", "sk-proj-", "AIza", "xai-", "gsk_"]),
    st.text(alphabet=_KEY_CHARS, min_size=36, max_size=64),
)
_SEPARATORS = st.sampled_from([" ", "\n", ":", "=", "/", "(", ")", '"', "'", ",", ".", "?"])


@given(st.text(), _SEPARATORS, _KEYS, _SEPARATORS, st.text())
def test_G4_redact_removes_every_generated_key_from_any_text(
    before: str, left: str, key: str, right: str, after: str
) -> None:
    shown = redact(before + left + key + right + after)
    assert key not in shown
    assert REDACTED in shown


@given(st.text())
def test_G4_redact_is_idempotent(text: str) -> None:
    assert redact(redact(text)) == redact(text)


_ADVERSARIAL = {
    "letters": "a" * 1_000_000,
    "prefixes": "sk-" * 333_334,
    "short keys": ("sk-" + "a" * 15 + "!") * 52_632,
    "bearer then spaces": "Bearer" + " " * 1_000_000,
    "bearers": "Bearer " * 142_858,
    "query names": "api_key" * 142_858,
    "equals": "key=" * 250_000,
    "mixed": "sk-AIza xai-gsk_ key= Bearer " * 34_483,
}


@pytest.mark.parametrize("text", list(_ADVERSARIAL.values()), ids=list(_ADVERSARIAL))
def test_G4_redact_is_linear_on_a_megabyte_of_adversarial_input(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    # Linear passes take well under a second; catastrophic backtracking would take hours.
    assert time.perf_counter() - started < 10.0


_PIECES = st.lists(
    st.one_of(
        _KEYS,
        _SEPARATORS,
        st.sampled_from(["Bearer ", "key=", "token=", "Bearer", "sk-", "x" * 40]),
        st.text(max_size=8),
    ),
    max_size=120,
).map("".join)


@given(_PIECES, st.integers(min_value=0, max_value=60))
def test_G4_redact_head_is_a_prefix_of_the_whole_redaction(text: str, limit: int) -> None:
    whole = redact(text)
    head = redact_head(text, limit)
    assert whole.startswith(head)
    assert len(head) >= min(limit, len(whole))


def test_G4_redact_head_never_shows_a_key_cut_at_its_window() -> None:
    # A huge key shrinks to the marker, pulling the text after it into view: the key that
    # straddles the read window must still be redacted, not shown half.
    text = "sk-" + "a" * 5000 + " sk-" + _BODY * 10
    head = redact_head(text, 100)
    assert head.startswith(f"{REDACTED} {REDACTED}")


def test_G4_redact_head_reads_only_a_window_of_a_huge_text() -> None:
    text = "word " * 2_000_000
    assert len(redact_head(text, 100)) < 1000
