"""SPEC G1–G6 and F3: what the error, timeout, exception and flush-limit embeds say."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cordstream.domain.catalogue import (
    DEFAULT_CATALOGUE,
    ENGLISH,
    Catalogue,
    CatalogueText,
    MessageKey,
)
from cordstream.domain.chunks import ErrorKind, ProviderError
from cordstream.domain.embeds import (
    DESCRIPTION_LIMIT,
    TITLE_LIMIT,
    EmbedSpec,
    error_detail,
    error_headline,
    exception_embed,
    flush_limit_embed,
    plain,
    provider_error_embed,
    reads_as_model_error,
    timeout_embed,
)
from cordstream.domain.redact import REDACTED

_KEY = "sk-ant-api03-Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC2eF4hJ6"
_PT = DEFAULT_CATALOGUE.with_locale(
    "pt",
    {
        "title.model_error": "Erro de configuração do modelo",
        "headline.model_error": "O modelo configurado não pôde ser usado.",
        "headline.rate_limit": "O provedor está limitando este bot.",
        "headline.truncated": "A resposta do modelo foi cortada.",
        "description.stopped": "Resposta interrompida (motivo: {reason})",
        "details.label": "**Detalhes:**",
        "timeout.title": "Tempo esgotado",
        "exception.title": "Algo deu errado",
        "flush_limit.title": "Limite de mensagens",
    },
)


def _error(
    kind: ErrorKind = "api_error",
    message: str = "",
    *,
    code: str | int | None = None,
    retryable: bool = False,
    user_message: str | None = None,
    original: object = None,
) -> ProviderError:
    return ProviderError(
        kind, message, code=code, retryable=retryable, user_message=user_message, original=original
    )


class _RaisingStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


# --- G1: model errors ------------------------------------------------------------------------


def test_G1_model_error_kind_gets_the_model_configuration_title() -> None:
    embed = provider_error_embed(_error("model_error", "bad model"), "Headline")
    assert embed.title == "Model Configuration Error"


def test_G1_model_error_keeps_the_providers_headline() -> None:
    embed = provider_error_embed(_error("model_error", "bad model"), "Check `gpt-x`.")
    assert embed.description.startswith("Check `gpt-x`.")


def test_G1_model_error_without_headline_uses_the_model_error_headline() -> None:
    embed = provider_error_embed(_error("model_error", "bad model"), None)
    assert embed.description.startswith(ENGLISH["headline.model_error"])


def test_G1_model_error_headline_is_localized() -> None:
    embed = provider_error_embed(_error("model_error", "x"), None, locale="pt-BR", catalogue=_PT)
    assert (embed.title, embed.description.split("\n")[0]) == (
        "Erro de configuração do modelo",
        "O modelo configurado não pôde ser usado.",
    )


@pytest.mark.parametrize(
    "message",
    [
        "unsupported model: gpt-9",
        "Unknown model 'claude-x'",
        "invalid model ID",
        "Model not found",
        "The model `gpt-9` does not exist or you do not have access to it.",
        "This model has been deprecated",
    ],
)
def test_G1_model_error_is_recognised_from_the_message(message: str) -> None:
    embed = provider_error_embed(_error("api_error", message), None)
    assert (embed.title, embed.colour) == ("Model Configuration Error", "error")


def test_G1_model_error_is_recognised_from_the_code() -> None:
    embed = provider_error_embed(_error("unknown", "404", code="model_not_found"), None)
    assert embed.title == "Model Configuration Error"


def test_G1_a_specific_kind_wins_over_model_error_text() -> None:
    embed = provider_error_embed(_error("rate_limit", "endpoint deprecated, slow down"), None)
    assert embed.title == "Rate Limited"


@pytest.mark.parametrize(
    "message",
    [
        "model gpt-9-turbo not found",
        "The model is not supported for generateContent",
        "Error code: model_not_found",
        "not_found_error: model: claude-x",
        "No such model: llama9",
    ],
)
def test_G1_the_one_model_error_test_knows_what_providers_write(message: str) -> None:
    assert reads_as_model_error(message)
    embed = provider_error_embed(_error("api_error", message), None)
    assert embed.title == "Model Configuration Error"


@pytest.mark.parametrize("message", ["Internal server error", "max_tokens: Field required"])
def test_G1_other_texts_do_not_read_as_model_errors(message: str) -> None:
    assert not reads_as_model_error(message)


@pytest.mark.parametrize("kind", get_args(ErrorKind))
def test_G1_every_kind_has_a_catalogue_headline(kind: ErrorKind) -> None:
    headline = error_headline(_error(kind, "x"))
    assert isinstance(headline, CatalogueText)
    assert headline == ENGLISH[headline.key]
    assert headline.key == f"headline.{kind}"


def test_G1_a_truncated_stream_has_its_own_headline() -> None:
    headline = error_headline(_error("api_error", "cut", code="truncated"), "pt", _PT)
    assert (headline.key, headline) == ("headline.truncated", "A resposta do modelo foi cortada.")


def test_G1_a_failed_connection_has_its_own_headline() -> None:
    """Not "the model provider returned an error": it returned nothing."""
    error = _error("api_error", "could not connect to the provider", code="connection_error")
    headline = error_headline(error)
    assert (headline.key, headline) == (
        "headline.connection",
        "The connection to the model provider failed.",
    )
    embed = provider_error_embed(error, headline)
    assert embed.title == "API Error"
    assert embed.description == (
        "The connection to the model provider failed.\n\n**Details:**\n"
        "could not connect to the provider"
    )


def test_G1_a_catalogue_headline_is_shown_in_the_streams_locale_and_catalogue() -> None:
    error = _error("rate_limit", "Slow down", retryable=True)
    headline = error_headline(error)  # what an adapter's describe_error says, in English
    english = provider_error_embed(error, headline)
    assert english.description == ENGLISH["headline.rate_limit"] + "\n\n**Details:**\nSlow down"
    localized = provider_error_embed(error, headline, locale="pt-BR", catalogue=_PT)
    assert localized.description == (
        "O provedor está limitando este bot.\n\n**Detalhes:**\nSlow down"
    )
    plain = provider_error_embed(error, str(headline), locale="pt-BR", catalogue=_PT)
    assert plain.description.startswith(ENGLISH["headline.rate_limit"])  # a plain str as given


# --- G2: the detail --------------------------------------------------------------------------


def test_G2_detail_is_the_error_message() -> None:
    assert error_detail(_error(message="  upstream said no \n")) == "upstream said no"


def test_G2_blank_message_falls_back_to_the_original_exceptions_message() -> None:
    assert error_detail(_error(message=" ", original=ValueError("boom"))) == "boom"


def test_G2_exception_with_raising_str_falls_back_to_its_args() -> None:
    assert error_detail(_error(original=_RaisingStr("from args"))) == "from args"


def test_G2_sdk_exception_body_wins_over_its_noisy_str() -> None:
    exc = RuntimeError("Error code: 404 - {'error': {...}}")
    exc.body = {"error": {"message": "model gone"}}  # type: ignore[attr-defined]  # SDK-style
    assert error_detail(_error(original=exc)) == "model gone"


@pytest.mark.parametrize(
    ("original", "expected"),
    [
        ({"message": "m"}, "m"),
        ({"detail": "d"}, "d"),
        ({"error": {"message": "em"}}, "em"),
        ({"error": {"detail": "ed"}}, "ed"),
        ({"error": "plain"}, "plain"),
        (SimpleNamespace(error=SimpleNamespace(message="attr")), "attr"),
    ],
    ids=["message", "detail", "error.message", "error.detail", "error-string", "attributes"],
)
def test_G2_detail_is_dug_out_of_a_mapping_or_object(original: object, expected: str) -> None:
    assert error_detail(_error(original=original)) == expected


def test_G2_json_body_string_is_parsed() -> None:
    original = SimpleNamespace(body='{"type": "error", "error": {"message": "prompt is long"}}')
    assert error_detail(_error(original=original)) == "prompt is long"


def test_G2_body_mapping_is_read() -> None:
    assert error_detail(_error(original={"body": {"detail": "from body"}})) == "from body"


def test_G2_malformed_json_body_is_skipped() -> None:
    original = {"body": '{"error": ', "detail": "fallback"}
    assert error_detail(_error(original=original)) == "fallback"


def test_G2_user_message_comes_last() -> None:
    assert error_detail(_error(original={}, user_message="try later")) == "try later"


def test_G2_no_detail_is_none() -> None:
    assert error_detail(_error(message="", original={"message": "  "})) is None


def test_G2_cyclic_original_terminates() -> None:
    original: dict[str, object] = {}
    original["body"] = original
    assert error_detail(_error(original=original)) is None


def test_G2_original_whose_attributes_raise_is_no_detail() -> None:
    class Hostile:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError(name)

    assert error_detail(_error(original=Hostile())) is None


# --- G3: the description ---------------------------------------------------------------------


def test_G3_description_is_headline_then_details_block() -> None:
    embed = provider_error_embed(_error(message="upstream 500"), "The provider failed.")
    assert embed.description == "The provider failed.\n\n**Details:**\nupstream 500"


def test_G3_detail_already_in_the_headline_is_not_repeated() -> None:
    embed = provider_error_embed(_error(message="quota gone"), "Sorry: quota gone (429)")
    assert embed.description == "Sorry: quota gone (429)"


@pytest.mark.parametrize(
    ("headline", "shown"),
    [
        ("API Error: The provider failed.", "The provider failed."),
        ("api error - The provider failed.", "The provider failed."),
        ("  API Error. The provider failed.", "The provider failed."),
        ("API Error — The provider failed.", "The provider failed."),
        ("API errors are rare.", "API errors are rare."),  # a word that starts with the title
        ("The API Error: it failed.", "The API Error: it failed."),  # not at the start
    ],
)
def test_G3_a_headline_does_not_repeat_the_title(headline: str, shown: str) -> None:
    embed = provider_error_embed(_error(message="upstream 500"), headline)
    assert embed.title == "API Error"
    assert embed.description == shown + "\n\n**Details:**\nupstream 500"


@pytest.mark.parametrize("headline", ["API Error", "api error:", " API Error . "])
def test_G3_a_headline_that_is_only_the_title_counts_as_none(headline: str) -> None:
    embed = provider_error_embed(_error(message="upstream 500"), headline)
    assert embed.description == (
        "Response stopped (reason: api_error)\n\n**Details:**\nupstream 500"
    )


def test_G3_without_headline_the_response_stopped_description_names_the_kind() -> None:
    embed = provider_error_embed(_error("provider_overloaded"), None)
    assert embed.description == "Response stopped (reason: provider_overloaded)"


def test_G3_without_headline_the_details_block_still_follows() -> None:
    embed = provider_error_embed(_error("timeout", "read timed out"), None)
    assert embed.description == (
        "Response stopped (reason: timeout)\n\n**Details:**\nread timed out"
    )


def test_G3_response_stopped_description_is_localized() -> None:
    embed = provider_error_embed(_error("timeout", "lento"), None, locale="pt", catalogue=_PT)
    assert embed.description == "Resposta interrompida (motivo: timeout)\n\n**Detalhes:**\nlento"


def test_G3_blank_headline_counts_as_none() -> None:
    embed = provider_error_embed(_error("unknown"), "   ")
    assert embed.description == "Response stopped (reason: unknown)"


def test_G3_detail_truncated_to_4096() -> None:
    embed = provider_error_embed(_error(message="y" * 10_000), "Headline")
    assert len(embed.description) == DESCRIPTION_LIMIT
    assert embed.description.startswith("Headline\n\n**Details:**\nyyy")
    assert embed.description.endswith("y...")


def test_G3_long_headline_is_truncated_and_leaves_no_room_for_details() -> None:
    embed = provider_error_embed(_error(message="detail"), "h" * 5000)
    assert embed.description == "h" * (DESCRIPTION_LIMIT - 3) + "..."


def test_G3_embed_spec_rejects_a_description_over_4096() -> None:
    with pytest.raises(ValueError, match="description"):
        EmbedSpec("t", "d" * (DESCRIPTION_LIMIT + 1), "error")


def test_G3_embed_spec_rejects_a_title_over_256() -> None:
    with pytest.raises(ValueError, match="title"):
        EmbedSpec("t" * (TITLE_LIMIT + 1), "d", "error")


def test_G3_long_custom_title_is_cut_to_256() -> None:
    catalogue = DEFAULT_CATALOGUE.with_locale("de", {"title.api_error": "T" * 1000})
    embed = provider_error_embed(_error(), None, locale="de", catalogue=catalogue)
    assert embed.title == "T" * (TITLE_LIMIT - 3) + "..."


_SIZED_TEXT = st.builds(
    lambda unit, times: unit * times, st.text(min_size=1, max_size=12), st.integers(0, 700)
)


_PROVIDER_ERRORS = st.builds(
    ProviderError,
    st.sampled_from(get_args(ErrorKind)),
    _SIZED_TEXT,
    code=st.none() | st.integers() | st.text(max_size=30),
    retryable=st.booleans(),
    user_message=st.none() | _SIZED_TEXT,
    original=st.recursive(
        st.none() | st.text(max_size=20) | st.integers(),
        lambda children: st.dictionaries(
            st.sampled_from(["message", "detail", "error", "body"]), children, max_size=4
        ),
        max_leaves=10,
    ),
)


@given(_PROVIDER_ERRORS, st.none() | _SIZED_TEXT)
def test_G3_description_and_title_always_fit_discord(
    error: ProviderError, headline: str | None
) -> None:
    embed = provider_error_embed(error, headline)
    assert len(embed.title) <= TITLE_LIMIT
    assert len(embed.description) <= DESCRIPTION_LIMIT


# --- G4: redaction ---------------------------------------------------------------------------


def test_G4_redacts_the_detail() -> None:
    embed = provider_error_embed(_error(message=f"invalid x-api-key {_KEY}"), "Auth failed.")
    assert embed.description == f"Auth failed.\n\n**Details:**\ninvalid x-api-key {REDACTED}"


def test_G4_redacts_the_headline() -> None:
    embed = provider_error_embed(_error(), f"Key {_KEY} was rejected")
    assert _KEY not in embed.description


def test_G4_redacts_a_detail_dug_from_the_original() -> None:
    original = {
        "error": {"message": "GET /models?key=AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q failed"}
    }
    embed = provider_error_embed(_error(original=original), None)
    assert "AIza" not in embed.description


def test_G4_redacts_the_title() -> None:
    catalogue = DEFAULT_CATALOGUE.with_locale("de", {"title.api_error": f"Fehler {_KEY}"})
    embed = provider_error_embed(_error(), None, locale="de", catalogue=catalogue)
    assert embed.title == f"Fehler {REDACTED}"


def test_G4_a_detail_equal_to_the_redacted_headline_is_not_repeated() -> None:
    embed = provider_error_embed(_error(message=f"bad {_KEY}"), f"bad {_KEY}")
    assert embed.description == f"bad {REDACTED}"


# --- G5: title and colour by kind ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "title", "colour"),
    [
        ("rate_limit", "Rate Limited", "warning"),
        ("timeout", "Request Timed Out", "warning"),
        ("provider_overloaded", "Provider Overloaded", "warning"),
        ("content_blocked", "Content Blocked", "error"),
        ("model_error", "Model Configuration Error", "error"),
        ("api_error", "API Error", "error"),
        ("unknown", "Unexpected Error", "error"),
    ],
)
def test_G5_title_and_colour_by_kind(kind: ErrorKind, title: str, colour: str) -> None:
    embed = provider_error_embed(_error(kind, "something happened"), None)
    assert (embed.title, embed.colour) == (title, colour)


@pytest.mark.parametrize("kind", ["api_error", "unknown"])
def test_G5_retryable_other_kinds_are_warnings(kind: ErrorKind) -> None:
    embed = provider_error_embed(_error(kind, "try again", retryable=True), None)
    assert embed.colour == "warning"


def test_G5_retryable_does_not_soften_content_blocked() -> None:
    embed = provider_error_embed(_error("content_blocked", "safety", retryable=True), None)
    assert embed.colour == "error"


def test_G5_context_length_is_recognised_from_the_code() -> None:
    embed = provider_error_embed(_error(message="400", code="context_length_exceeded"), None)
    assert (embed.title, embed.colour) == ("Context Length Exceeded", "error")


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 8192 tokens.",
        "prompt is too long: 200500 tokens > 200000 maximum",
        "The input token count (1200000) exceeds the maximum number of tokens allowed",
    ],
)
def test_G5_context_length_is_recognised_from_the_message(message: str) -> None:
    embed = provider_error_embed(_error("api_error", message, retryable=True), None)
    assert (embed.title, embed.colour) == ("Context Length Exceeded", "error")


def test_G5_quota_is_recognised_from_the_code_even_as_a_rate_limit() -> None:
    error = _error("rate_limit", "429", code="insufficient_quota", retryable=True)
    embed = provider_error_embed(error, None)
    assert (embed.title, embed.colour) == ("Quota Exhausted", "error")


@pytest.mark.parametrize(
    "message",
    ["You exceeded your current quota", "Your credit balance is too low", "Insufficient credits"],
)
def test_G5_quota_is_recognised_from_the_message(message: str) -> None:
    embed = provider_error_embed(_error("api_error", message), None)
    assert (embed.title, embed.colour) == ("Quota Exhausted", "error")


def test_G5_title_comes_from_the_catalogue() -> None:
    catalogue = DEFAULT_CATALOGUE.with_locale("de", {"title.rate_limit": "Ratenlimit"})
    embed = provider_error_embed(_error("rate_limit"), None, locale="de", catalogue=catalogue)
    assert embed.title == "Ratenlimit"


def test_G5_never_raises_for_a_value_that_is_not_a_provider_error() -> None:
    embed = provider_error_embed(None, None)  # type: ignore[arg-type]  # the bad input
    assert embed.colour == "error"


# --- G6: timeout and exception embeds --------------------------------------------------------


def test_G6_timeout_embed_is_a_warning_titled_response_timed_out() -> None:
    embed = timeout_embed()
    assert (embed.title, embed.colour) == ("Response timed out", "warning")


def test_G6_timeout_embed_is_localized() -> None:
    assert timeout_embed(locale="pt", catalogue=_PT).title == "Tempo esgotado"


def test_G6_exception_embed_shows_the_message_in_error_colour() -> None:
    embed = exception_embed(ConnectionResetError("peer reset the stream"))
    assert embed == EmbedSpec("Something went wrong", "peer reset the stream", "error")


def test_G6_exception_embed_is_localized() -> None:
    assert exception_embed(ValueError("x"), locale="pt", catalogue=_PT).title == "Algo deu errado"


def test_G6_exception_embed_redacts_the_message() -> None:
    embed = exception_embed(RuntimeError(f"401 for Authorization: Bearer {_KEY}"))
    assert embed.description == f"401 for Authorization: Bearer {REDACTED}"


_REPR = "<ssl.SSLContext object at 0x7f3a2c1d9e80>"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"Cannot connect to host api.example:443 ssl:{_REPR} [Connection refused]",
         "Cannot connect to host api.example:443 [Connection refused]"),
        (f"failed: {_REPR}", "failed"),
        ("Task <Task pending> at 0x7f3a2c1d9e80 died", "Task <Task pending> died"),
        ("wrapped <ConnectError: [Errno 111] refused> here", "wrapped here"),
        ("handler <function f at 0x7f00aabbccdd> (retry)", "handler (retry)"),
        ("a <b> c, 0x1f and 3 < 4 > 2", "a <b> c, 0x1f and 3 < 4 > 2"),  # not Python's words
        ("f() got <Error at 0x7f00aabbccdd>: -", "f() got"),  # the writer's own () stay
    ],
)  # fmt: skip
def test_G3_no_python_repr_reaches_an_embed(text: str, shown: str) -> None:
    assert plain(text) == shown
    assert exception_embed(RuntimeError(text)).description == shown
    detail = provider_error_embed(_error(message=text), "Failed.").description
    assert detail == "Failed.\n\n**Details:**\n" + shown


def test_G3_plain_reads_near_misses_whatever_their_size() -> None:
    """Long runs that each pattern could start on at every character (dotted names, blanks
    before an address, brackets): the text comes back as written, addresses aside."""
    near = "a." * 50_000 + ":" + " " * 50_000 + "<" + "x" * 50_000 + " at 0xZ>"
    assert plain(near) == near
    assert plain("f() (" + " " * 50_000 + ") <x>") == "f() (" + " " * 50_000 + ") <x>"
    assert plain("f(" + " " * 50_000 + "0x7f3a2c1d9e80 ) end") == "f end"
    assert plain("at" + " " * 50_000 + "0x7f3a2c1d9e80 end") == "at" + " " * 49_999 + " end"


def test_G6_exception_embed_survives_a_raising_str() -> None:
    assert exception_embed(_RaisingStr()).description == ENGLISH["exception.description"]


def test_G6_exception_embed_with_a_blank_message_uses_the_generic_text() -> None:
    assert exception_embed(TimeoutError()).description == ENGLISH["exception.description"]


def test_G6_exception_embed_truncates_a_10_mb_message() -> None:
    embed = exception_embed(ValueError("z" * 10_000_000))
    assert embed.description == "z" * (DESCRIPTION_LIMIT - 3) + "..."


@given(
    st.one_of(
        st.none(),
        st.integers(),
        st.text(),
        st.builds(ValueError, st.text()),
        st.builds(lambda args: Exception(*args), st.lists(st.integers() | st.text(), max_size=3)),
        st.just(_RaisingStr()),
    )
)
def test_G6_exception_embed_never_raises(error: object) -> None:
    embed = exception_embed(error)
    assert embed.colour == "error"
    assert len(embed.description) <= DESCRIPTION_LIMIT


# --- F3: the flush-limit warning -------------------------------------------------------------


def test_F3_flush_limit_embed_is_a_warning() -> None:
    embed = flush_limit_embed()
    assert (embed.title, embed.colour) == ("Message limit reached", "warning")


def test_F3_flush_limit_embed_says_the_cap_was_hit() -> None:
    assert "maximum number of messages" in flush_limit_embed().description


def test_G2_json_body_after_leading_whitespace_is_parsed() -> None:
    original = SimpleNamespace(body='\n  {"error": {"message": "spaced out"}}')
    assert error_detail(_error(original=original)) == "spaced out"


class _RaisingCatalogue(Catalogue):
    """A custom catalogue that breaks on every lookup."""

    def text(self, locale: str, key: MessageKey, **fields: str) -> str:
        raise RuntimeError("broken catalogue")


def test_G6_a_broken_catalogue_still_gives_the_english_exception_embed() -> None:
    embed = exception_embed(ValueError("x"), catalogue=_RaisingCatalogue())
    assert embed == EmbedSpec(ENGLISH["exception.title"], ENGLISH["exception.description"], "error")


@pytest.mark.parametrize(
    ("make", "title"),
    [(timeout_embed, "timeout.title"), (flush_limit_embed, "flush_limit.title")],
)
def test_G6_a_broken_catalogue_keeps_a_warnings_english_title_and_colour(
    make: Callable[..., EmbedSpec], title: MessageKey
) -> None:
    embed = make(catalogue=_RaisingCatalogue())
    assert embed == EmbedSpec(ENGLISH[title], ENGLISH["exception.description"], "warning")
