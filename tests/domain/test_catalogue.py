"""SPEC G5: embed texts come from a locale catalogue, English built in, others pluggable."""

from __future__ import annotations

import copy
import pickle
import re
from typing import Final, get_args

import pytest

from cordstream.domain.catalogue import (
    DEFAULT_CATALOGUE,
    ENGLISH,
    Catalogue,
    CatalogueText,
    MessageKey,
)

_PT = {
    "title.model_error": "Erro de configuração do modelo",
    "description.stopped": "Resposta interrompida (motivo: {reason})",
}


def test_G5_english_has_every_message_key() -> None:
    assert set(ENGLISH) == set(get_args(MessageKey))


def test_G5_english_model_error_title_is_exact() -> None:
    assert DEFAULT_CATALOGUE.text("en", "title.model_error") == "Model Configuration Error"


def test_G5_english_details_label() -> None:
    assert DEFAULT_CATALOGUE.text("en", "details.label") == "**Details:**"


def test_G5_text_formats_fields() -> None:
    text = DEFAULT_CATALOGUE.text("en", "description.stopped", reason="rate_limit")
    assert text == "Response stopped (reason: rate_limit)"


_WITH_PT: Final = DEFAULT_CATALOGUE.with_locale("pt", _PT)
_WITH_PT_BR: Final = _WITH_PT.with_locale(
    "pt-BR", {"title.model_error": "Erro de configuração do modelo (BR)"}
)


@pytest.mark.parametrize(
    ("catalogue", "locale", "key", "expected"),
    [
        (DEFAULT_CATALOGUE, "xx-YY", "timeout.title", "Response timed out"),
        (_WITH_PT, "pt", "title.model_error", "Erro de configuração do modelo"),
        (_WITH_PT, "pt-BR", "description.stopped", "Resposta interrompida (motivo: timeout)"),
        (_WITH_PT_BR, "pt-BR", "title.model_error", "Erro de configuração do modelo (BR)"),
        (
            DEFAULT_CATALOGUE.with_locale("pt-BR", _PT),
            "PT_br",
            "title.model_error",
            "Erro de configuração do modelo",
        ),
        (_WITH_PT, "pt", "title.rate_limit", "Rate Limited"),
    ],
    ids=[
        "unknown-locale-falls-back-to-english",
        "added-locale-is-used",
        "region-falls-back-to-base-language",
        "region-specific-message-wins-over-base-language",
        "locale-tags-match-ignoring-case-and-underscore",
        "missing-key-in-locale-falls-back-to-english",
    ],
)
def test_G5_a_text_is_found_by_locale(
    catalogue: Catalogue, locale: str, key: MessageKey, expected: str
) -> None:
    assert catalogue.text(locale, key, reason="timeout") == expected


def test_G5_with_locale_returns_a_new_catalogue() -> None:
    DEFAULT_CATALOGUE.with_locale("pt", _PT)
    assert DEFAULT_CATALOGUE.text("pt", "title.model_error") == "Model Configuration Error"


def test_G5_with_locale_merges_into_an_existing_locale() -> None:
    catalogue = DEFAULT_CATALOGUE.with_locale("pt", _PT).with_locale(
        "pt", {"title.rate_limit": "Limite de taxa"}
    )
    assert catalogue.text("pt", "title.model_error") == "Erro de configuração do modelo"


def test_G5_english_can_be_reworded() -> None:
    catalogue = DEFAULT_CATALOGUE.with_locale("en", {"timeout.title": "Too slow"})
    assert catalogue.text("de", "timeout.title") == "Too slow"


def test_G5_with_locale_rejects_unknown_key() -> None:
    with pytest.raises(ValueError, match=re.escape("unknown message key 'title.nope'")):
        DEFAULT_CATALOGUE.with_locale("de", {"title.nope": "Nein"})


def test_G5_with_locale_rejects_missing_placeholder() -> None:
    with pytest.raises(ValueError, match=r"placeholders must match English \(\{reason\}\)"):
        DEFAULT_CATALOGUE.with_locale("de", {"description.stopped": "Antwort gestoppt"})


def test_G5_with_locale_rejects_extra_placeholder() -> None:
    with pytest.raises(ValueError, match=re.escape("got {name}")):
        DEFAULT_CATALOGUE.with_locale("de", {"timeout.title": "Zeit für {name}"})


def test_G5_with_locale_rejects_format_spec() -> None:
    with pytest.raises(ValueError, match="plain"):
        DEFAULT_CATALOGUE.with_locale("de", {"description.stopped": "{reason:>99999999}"})


def test_G5_with_locale_rejects_attribute_access() -> None:
    with pytest.raises(ValueError, match="plain"):
        DEFAULT_CATALOGUE.with_locale("de", {"description.stopped": "{reason.__class__}"})


def test_G5_with_locale_rejects_unbalanced_braces() -> None:
    with pytest.raises(ValueError, match=re.escape("'description.stopped'")):
        DEFAULT_CATALOGUE.with_locale("de", {"description.stopped": "Grund: {reason"})


def test_G5_with_locale_rejects_non_string_message() -> None:
    messages: dict[str, object] = {"timeout.title": 3}
    with pytest.raises(ValueError, match="must be str"):
        DEFAULT_CATALOGUE.with_locale("de", messages)  # type: ignore[arg-type]  # the bad input


def test_G5_with_locale_rejects_blank_locale() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        DEFAULT_CATALOGUE.with_locale("  ", {"timeout.title": "x"})


def test_G5_constructor_checks_like_with_locale() -> None:
    with pytest.raises(ValueError, match="unknown message key"):
        Catalogue({"de": {"nope": "x"}})  # type: ignore[dict-item]  # the bad input


def test_G5_escaped_braces_are_not_placeholders() -> None:
    catalogue = DEFAULT_CATALOGUE.with_locale("de", {"timeout.title": "Zeit {{abgelaufen}}"})
    assert catalogue.text("de", "timeout.title") == "Zeit {abgelaufen}"


def test_G5_text_with_a_missing_field_returns_the_template() -> None:
    text = DEFAULT_CATALOGUE.text("en", "description.stopped")
    assert text == "Response stopped (reason: {reason})"


def test_G1_a_catalogue_text_is_its_text_and_keeps_its_key_when_copied() -> None:
    text = CatalogueText(DEFAULT_CATALOGUE.text("en", "headline.timeout"), "headline.timeout")
    assert text == "The model provider took too long to answer."
    for copied in (copy.copy(text), copy.deepcopy(text), pickle.loads(pickle.dumps(text))):
        assert isinstance(copied, CatalogueText)
        assert (copied, copied.key) == (text, "headline.timeout")
