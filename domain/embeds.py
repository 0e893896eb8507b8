"""What an embed says, as data: the shell turns an `EmbedSpec` into a Discord embed (SPEC G).

One function per embed (`provider_error_embed`, `timeout_embed`, `flush_limit_embed`,
`exception_embed`), each pure: what it shows depends only on what happened, the stream's
catalogue and locale (`cordstream.domain.catalogue`) and the stream's secrets. G1–G6 say what
each embed holds.

The idea: every text an embed shows, whoever wrote it (the provider, an exception, a
translation), takes the same four steps before it reaches an `EmbedSpec` (`_shown`; for the
detail, `_description`): it is made sendable (`graphemes.sendable`, E7), then redacted
(`redact_head`, G4), then rid of Python's object reprs and addresses (`plain`), then cut to
Discord's limit with an ellipsis (G3). So nothing reaches the channel unredacted or as Python
wrote it, and the limits count what Discord counts. Text heuristics (is this a model error, a
quota, a context length?) read only the start of a text, so a 10 MB error message costs
nothing more.

`reads_as_model_error` is the one test of "reads like a model error" (G1): the adapters' error
mapping (`cordstream.shell.providers.base.error_from_status`) uses it too. A headline that is a
`CatalogueText` (what the adapters' `describe_error` returns, `error_headline`) is looked up
again in the stream's catalogue and locale, so it is localized like the title.

Every function here runs on an error path, so none raises, whatever it is given: a failure
inside composition yields a plain English fallback embed. It never decides whether an embed is
sent (G7 is the reducer's decision) and never talks to Discord.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, get_args

from cordstream.domain.catalogue import (
    DEFAULT_CATALOGUE,
    DEFAULT_LOCALE,
    ENGLISH,
    Catalogue,
    CatalogueText,
    MessageKey,
)
from cordstream.domain.chunks import ErrorKind, ProviderError
from cordstream.domain.graphemes import sendable
from cordstream.domain.redact import NO_SECRETS, Secrets, redact_head

EmbedColour: TypeAlias = Literal["warning", "error"]
TITLE_LIMIT: Final = 256
DESCRIPTION_LIMIT: Final = 4096
ELLIPSIS: Final = "..."


@dataclass(frozen=True, slots=True)
class EmbedSpec:
    """One embed to show: Discord's limits are checked here, once (G3)."""

    title: str
    description: str
    colour: EmbedColour

    def __post_init__(self) -> None:
        title: object = self.title  # checked at run time whatever the annotation says
        description: object = self.description
        if not isinstance(title, str) or len(title) > TITLE_LIMIT:
            raise ValueError(f"EmbedSpec: title must be a str of at most {TITLE_LIMIT} chars")
        if not isinstance(description, str) or len(description) > DESCRIPTION_LIMIT:
            raise ValueError(
                f"EmbedSpec: description must be a str of at most {DESCRIPTION_LIMIT} chars"
            )
        if self.colour not in get_args(EmbedColour):
            raise ValueError(f"EmbedSpec: colour must be 'warning' or 'error', not {self.colour!r}")


_Category: TypeAlias = Literal[
    "rate_limit",
    "timeout",
    "provider_overloaded",
    "content_blocked",
    "model_error",
    "context_length",
    "quota_exhausted",
    "api_error",
    "unknown",
]
_TITLES: Final[Mapping[_Category, MessageKey]] = {
    "rate_limit": "title.rate_limit",
    "timeout": "title.timeout",
    "provider_overloaded": "title.provider_overloaded",
    "content_blocked": "title.content_blocked",
    "model_error": "title.model_error",
    "context_length": "title.context_length",
    "quota_exhausted": "title.quota_exhausted",
    "api_error": "title.api_error",
    "unknown": "title.unknown",
}
_WARNING: Final[frozenset[_Category]] = frozenset({"rate_limit", "timeout", "provider_overloaded"})
_ERROR: Final[frozenset[_Category]] = frozenset(
    {"content_blocked", "model_error", "context_length", "quota_exhausted"}
)

# G1's phrases, and the forms providers use: "model gpt-9 not found", "The model `x` does not
# exist", "model_not_found", Anthropic's "not_found_error ... model".
_MODEL_ERROR_TEXT: Final = re.compile(
    r"\b(?:unsupported|unknown|invalid|no[\s_-]+such)[\s_-]+model\b"
    r"|\bmodel[\s_-]+(?:\S+\s+)?(?:not[\s_-]+found|is not supported|not available)\b"
    r"|\bdoes not exist\b|\bdeprecated\b|not_found_error.*model",
    re.IGNORECASE,
)
# The catalogue's headline for each kind (G1); a truncated stream and a failed connection
# (by their `code`) have their own.
HEADLINE_KEYS: Final[Mapping[ErrorKind, MessageKey]] = {
    "rate_limit": "headline.rate_limit",
    "provider_overloaded": "headline.provider_overloaded",
    "content_blocked": "headline.content_blocked",
    "timeout": "headline.timeout",
    "model_error": "headline.model_error",
    "api_error": "headline.api_error",
    "unknown": "headline.unknown",
}
_SPECIAL_HEADLINES: Final[Mapping[str, MessageKey]] = {
    "truncated": "headline.truncated",
    "connection_error": "headline.connection",
}
_CONTEXT_LENGTH_TEXT: Final = re.compile(
    r"context[\s_-]+length|context[\s_-]+window|maximum context"
    r"|prompt is too long|input is too long|maximum number of tokens",
    re.IGNORECASE,
)
_QUOTA_TEXT: Final = re.compile(
    r"quota|insufficient[\s_-]+credits?|credit balance|billing[\s_-]+hard[\s_-]+limit",
    re.IGNORECASE,
)
# Python's words, which never reach a channel (`plain`), each with one blank before it (so
# no double space is left). Every quantifier that could run over a long stretch is bounded or
# stops at a character the next part cannot start with: a 10 MB text costs a few linear passes.
_LABEL: Final = r"[ \t]?(?:\b[A-Za-z_][\w.]{0,63}[:=])?"  # `ssl:` in `ssl:<… object at 0x…>`
_OBJECT_REPR: Final = re.compile(_LABEL + r"<[^<>\n]*\bat 0x[0-9A-Fa-f]+>")
_EXCEPTION_REPR: Final = re.compile(_LABEL + r"<[\w.]*(?:Error|Exception|Warning)\b[^<>\n]*>")
_ADDRESS: Final = re.compile(r"(?:[ \t]{1,8}at)?[ \t]?\b0x[0-9A-Fa-f]{6,}\b")
_BRACKETS: Final = re.compile(r"[ \t]?(?:\([\s\0]*\)|\[[\s\0]*\]|\{[\s\0]*\})")
_GONE: Final = "\0"  # where `plain` took something out, until the brackets left empty go
# Heuristics read the start of each text only: a 10 MB message costs nothing more.
_SCAN_LIMIT: Final = 8192
_MIN_DETAIL_ROOM: Final = 16
_DIG_DEPTH: Final = 4
_MAX_JSON_BODY: Final = 1_000_000


def provider_error_embed(
    error: ProviderError,
    headline: str | None,
    *,
    locale: str = DEFAULT_LOCALE,
    catalogue: Catalogue = DEFAULT_CATALOGUE,
    secrets: Secrets = NO_SECRETS,
) -> EmbedSpec:
    """The embed for a provider error (G1–G5); `headline` is `describe_error`'s answer."""
    try:
        if isinstance(headline, CatalogueText):  # G1: in the stream's locale and catalogue
            headline = catalogue.text(locale, headline.key)
        detail = error_detail(error)
        category = _category(error, detail)
        title = catalogue.text(locale, _TITLES[category])
        if isinstance(headline, str):
            headline = _without_title(headline, title)
        if not isinstance(headline, str) or not headline.strip():
            headline = (
                catalogue.text(locale, "headline.model_error")
                if category == "model_error"
                else catalogue.text(locale, "description.stopped", reason=str(error.kind))
            )
        return EmbedSpec(
            title=_shown(title, TITLE_LIMIT, secrets),
            description=_description(
                headline, detail, catalogue.text(locale, "details.label"), secrets
            ),
            colour=_colour(category, error.retryable),
        )
    except Exception:  # composition must not turn an error report into a crash (B1)
        return _fallback("title.unknown", "error")


def plain(text: str) -> str:
    """`text` without Python object reprs, exception reprs or memory addresses (with the
    label glued to one, and the brackets they leave empty); the rest as written (a text with
    a NUL in it is left alone: NUL marks what is taken out).

    Every text an embed shows passes through it (`_shown`), and the adapters pass every
    failure's message through it: a user reads the provider's words, never Python's."""
    if ("<" not in text and "0x" not in text) or _GONE in text:
        return text
    cleaned = _OBJECT_REPR.sub(_GONE, text)
    cleaned = _EXCEPTION_REPR.sub(_GONE, cleaned)
    cleaned = _ADDRESS.sub(_GONE, cleaned)
    if _GONE not in cleaned:
        return text
    cleaned = _BRACKETS.sub(_unless_emptied, cleaned).replace(_GONE, "")
    return cleaned.strip(" \t:;,=-")


def _unless_emptied(brackets: re.Match[str]) -> str:
    """Brackets that held only what `plain` took out go with it; a writer's own `()` stays."""
    return "" if _GONE in brackets[0] else brackets[0]


def error_headline(
    error: ProviderError, locale: str = DEFAULT_LOCALE, catalogue: Catalogue = DEFAULT_CATALOGUE
) -> CatalogueText:
    """What happened, in one line, by kind (G1): the catalogue's `headline.<kind>` message;
    a stream cut short (`code="truncated"`) and a failed connection (`"connection_error"`)
    say so rather than "returned an error"."""
    key: MessageKey = _SPECIAL_HEADLINES.get(str(error.code), HEADLINE_KEYS[error.kind])
    return CatalogueText(catalogue.text(locale, key), key)


def reads_as_model_error(text: str) -> bool:
    """Whether a provider's text says the configured model cannot be used (G1): "unknown
    model", "model not found", "does not exist", "deprecated" and their variants."""
    return _MODEL_ERROR_TEXT.search(text[:_SCAN_LIMIT]) is not None


def error_detail(error: ProviderError) -> str | None:
    """The provider's own words (G2), stripped and unredacted; None when there are none."""
    try:
        return _text(error.message) or _dig(error.original, _DIG_DEPTH) or _text(error.user_message)
    except Exception:  # `original` is arbitrary provider data
        return None


def timeout_embed(
    *,
    locale: str = DEFAULT_LOCALE,
    catalogue: Catalogue = DEFAULT_CATALOGUE,
    secrets: Secrets = NO_SECRETS,
) -> EmbedSpec:
    """The embed for an inactivity timeout (G6, B12)."""
    return _catalogued(
        "timeout.title", "timeout.description", "warning", locale, catalogue, secrets=secrets
    )


def flush_limit_embed(
    *,
    locale: str = DEFAULT_LOCALE,
    catalogue: Catalogue = DEFAULT_CATALOGUE,
    secrets: Secrets = NO_SECRETS,
) -> EmbedSpec:
    """The warning shown once when a stream hits its per-stream message cap (F3)."""
    return _catalogued(
        "flush_limit.title",
        "flush_limit.description",
        "warning",
        locale,
        catalogue,
        secrets=secrets,
    )


def exception_embed(
    error: object,
    *,
    locale: str = DEFAULT_LOCALE,
    catalogue: Catalogue = DEFAULT_CATALOGUE,
    secrets: Secrets = NO_SECRETS,
) -> EmbedSpec:
    """The embed for a caught exception (G6, B13): its redacted message, error colour."""
    try:
        message = _exception_message(error) or catalogue.text(locale, "exception.description")
        return EmbedSpec(
            title=_shown(catalogue.text(locale, "exception.title"), TITLE_LIMIT, secrets),
            description=_shown(message, DESCRIPTION_LIMIT, secrets),
            colour="error",
        )
    except Exception:  # the exception may be hostile; the embed must still exist
        return _fallback("exception.title", "error")


def _category(error: ProviderError, detail: str | None) -> _Category:
    kind = error.kind
    if kind in ("model_error", "content_blocked"):
        return kind
    code = "" if error.code is None else str(error.code)
    texts = [text[:_SCAN_LIMIT] for text in (error.message, code, detail or "")]
    if any(_QUOTA_TEXT.search(text) for text in texts):
        return "quota_exhausted"
    if any(_CONTEXT_LENGTH_TEXT.search(text) for text in texts):
        return "context_length"
    if kind in ("api_error", "unknown") and any(reads_as_model_error(t) for t in texts):
        return "model_error"
    return kind


def _colour(category: _Category, retryable: bool) -> EmbedColour:
    if category in _WARNING:
        return "warning"
    if category in _ERROR:
        return "error"
    return "warning" if retryable is True else "error"


def _without_title(headline: str, title: str) -> str:
    """G3: a headline that starts by repeating the title ("API Error: The model provider…"
    under the title "API Error") without it; empty when it is the title and nothing else."""
    if not title.strip():
        return headline
    repeat = r"\s*" + re.escape(title.strip()) + r"\s*(?:[:.\-–—]\s*|\Z)"
    found = re.match(repeat, headline, re.IGNORECASE)
    return headline if found is None else headline[found.end() :]


def _description(headline: str, detail: str | None, label: str, secrets: Secrets) -> str:
    """G3: the headline, then the detail block unless the headline already says it."""
    shown_headline = _shown(headline, DESCRIPTION_LIMIT, secrets)
    if detail is None:
        return shown_headline
    block = f"\n\n{_shown(label, TITLE_LIMIT, secrets)}\n"
    room = DESCRIPTION_LIMIT - len(shown_headline) - len(block)
    shown_detail = plain(redact_head(sendable(detail), max(room, 0) + 1, secrets)).strip()
    if not shown_detail or shown_detail in shown_headline or room < _MIN_DETAIL_ROOM:
        return shown_headline
    return shown_headline + block + _fit(shown_detail, room)


def _shown(text: str, limit: int, secrets: Secrets) -> str:
    """`text` as Discord shows it, redacted (G4) and without Python's reprs (`plain`), then
    cut to `limit` characters with an ellipsis."""
    return _fit(plain(redact_head(sendable(text), limit + 1, secrets)), limit)


def _fit(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - len(ELLIPSIS), 0)] + ELLIPSIS[: max(limit, 0)]


def _catalogued(
    title: MessageKey,
    description: MessageKey,
    colour: EmbedColour,
    locale: str,
    cat: Catalogue,
    *,
    secrets: Secrets,
) -> EmbedSpec:
    try:
        return EmbedSpec(
            title=_shown(cat.text(locale, title), TITLE_LIMIT, secrets),
            description=_shown(cat.text(locale, description), DESCRIPTION_LIMIT, secrets),
            colour=colour,
        )
    except Exception:  # a broken custom catalogue still yields an embed
        return _fallback(title, colour)


def _fallback(title: MessageKey, colour: EmbedColour) -> EmbedSpec:
    return EmbedSpec(ENGLISH[title], ENGLISH["exception.description"], colour)


def _text(value: object) -> str | None:
    """`value` stripped when it is a non-blank string."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _get(source: object, name: str) -> object:
    """A mapping's key or an object's attribute; None when absent or unreadable."""
    try:
        return source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
    except Exception:
        return None


def _dig(source: object, depth: int) -> str | None:
    """The first message found in `source` (G2), following at most `depth` levels."""
    if depth <= 0 or source is None:
        return None
    if isinstance(source, str):
        return _text(source)
    nested = _get(source, "error")
    found = (
        _dig_body(_get(source, "body"), depth)
        or _text(_get(source, "message"))
        or _text(_get(source, "detail"))
        or _text(nested)
        or _text(_get(nested, "message"))
        or _text(_get(nested, "detail"))
    )
    if found or not isinstance(source, BaseException):
        return found
    return _exception_text(source)


def _dig_body(body: object, depth: int) -> str | None:
    if isinstance(body, str):
        if len(body) > _MAX_JSON_BODY or not body.lstrip().startswith(("{", "[")):
            return None
        try:
            body = json.loads(body)
        except ValueError:
            return None
        except RecursionError:  # deeply nested JSON
            return None
    if isinstance(body, Mapping):
        return _dig(body, depth - 1)
    return None


def _exception_message(error: object) -> str | None:
    if isinstance(error, BaseException):
        return _exception_text(error)
    try:
        return _text(str(error))
    except Exception:  # a raising `__str__`
        return None


def _exception_text(error: BaseException) -> str | None:
    """`str(error)`, else its first non-blank string argument."""
    try:
        text = _text(str(error))
    except Exception:  # a raising `__str__`: fall back to the arguments
        text = None
    if text is not None:
        return text
    try:
        return next((found for arg in error.args if (found := _text(arg))), None)
    except Exception:  # an `args` property that raises
        return None
