"""The locale message catalogue for every text an embed shows (SPEC G5, G1, G3, G6, F3).

A `Catalogue` maps a locale and a message key to a text. English is built in and complete, and
is the reference every other locale is held to: a host bot plugs in other locales with
`Catalogue.with_locale`, which checks each message against the English one when it is added
(G5 says how). The idea: all checking happens when a catalogue is built, so looking a text up,
which happens on error paths, never fails and falls back instead (G5).

It never formats anything but plain `{name}` placeholders, and never sees what the embeds do
with its texts (redaction and length are `cordstream.domain.embeds`'s job).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from string import Formatter
from types import MappingProxyType
from typing import Final, Literal, TypeAlias, TypeGuard, get_args

MessageKey: TypeAlias = Literal[
    "title.rate_limit",
    "title.timeout",
    "title.provider_overloaded",
    "title.content_blocked",
    "title.model_error",
    "title.context_length",
    "title.quota_exhausted",
    "title.api_error",
    "title.unknown",
    "headline.rate_limit",
    "headline.provider_overloaded",
    "headline.content_blocked",
    "headline.timeout",
    "headline.model_error",
    "headline.api_error",
    "headline.unknown",
    "headline.truncated",
    "headline.connection",
    "description.stopped",
    "details.label",
    "timeout.title",
    "timeout.description",
    "exception.title",
    "exception.description",
    "flush_limit.title",
    "flush_limit.description",
]
MESSAGE_KEYS: Final[frozenset[str]] = frozenset(get_args(MessageKey))
DEFAULT_LOCALE: Final = "en"

ENGLISH: Final[Mapping[MessageKey, str]] = MappingProxyType(
    {
        "title.rate_limit": "Rate Limited",
        "title.timeout": "Request Timed Out",
        "title.provider_overloaded": "Provider Overloaded",
        "title.content_blocked": "Content Blocked",
        "title.model_error": "Model Configuration Error",
        "title.context_length": "Context Length Exceeded",
        "title.quota_exhausted": "Quota Exhausted",
        "title.api_error": "API Error",
        "title.unknown": "Unexpected Error",
        "headline.rate_limit": (
            "The model provider is rate limiting this bot. Try again in a moment."
        ),
        "headline.provider_overloaded": (
            "The model provider is overloaded right now. Try again shortly."
        ),
        "headline.content_blocked": "The model provider blocked this response.",
        "headline.timeout": "The model provider took too long to answer.",
        "headline.model_error": (
            "The configured model could not be used. Check the model name in the bot's settings."
        ),
        "headline.api_error": "The model provider returned an error.",
        "headline.unknown": "Something went wrong while talking to the model provider.",
        "headline.truncated": "The model's answer was cut off before it finished.",
        "headline.connection": "The connection to the model provider failed.",
        "description.stopped": "Response stopped (reason: {reason})",
        "details.label": "**Details:**",
        "timeout.title": "Response timed out",
        "timeout.description": (
            "The model sent nothing for too long, so the response was stopped. Please try again."
        ),
        "exception.title": "Something went wrong",
        "exception.description": "An unexpected error stopped the response.",
        "flush_limit.title": "Message limit reached",
        "flush_limit.description": (
            "This response reached the maximum number of messages for one stream,"
            " so the rest of it was not sent."
        ),
    }
)


def _normalize_locale(locale: str) -> str:
    return locale.strip().replace("_", "-").lower()


def _placeholders(template: str) -> frozenset[str]:
    """The `{name}` fields of `template`; ValueError for anything but plain names."""
    names: set[str] = set()
    for _literal, name, spec, conversion in Formatter().parse(template):
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise ValueError(f"placeholder {{{name}}} must be a plain {{name}}")
        names.add(name)
    return frozenset(names)


_ENGLISH_PLACEHOLDERS: Final = {key: _placeholders(text) for key, text in ENGLISH.items()}


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Per-locale message templates, checked against English when built.

    `locales` maps a locale tag to its messages; any locale may be partial. Building a
    catalogue with an unknown key, a non-string message or placeholders that differ from the
    English message raises ValueError naming the locale and key.
    """

    locales: Mapping[str, Mapping[MessageKey, str]] = field(
        default_factory=lambda: MappingProxyType({DEFAULT_LOCALE: ENGLISH}), hash=False
    )

    def __post_init__(self) -> None:
        checked: dict[str, Mapping[MessageKey, str]] = {}
        for locale, messages in self.locales.items():
            tag = _checked_locale(locale)
            merged = {**checked.get(tag, {}), **_checked_messages(tag, messages)}
            checked[tag] = MappingProxyType(merged)
        object.__setattr__(self, "locales", MappingProxyType(checked))

    def with_locale(self, locale: str, messages: Mapping[str, str]) -> Catalogue:
        """A new catalogue with `messages` merged into `locale`; ValueError naming a bad entry."""
        tag = _checked_locale(locale)
        merged = {**self.locales.get(tag, {}), **_checked_messages(tag, messages)}
        return Catalogue(MappingProxyType({**self.locales, tag: merged}))

    def text(self, locale: str, key: MessageKey, **fields: str) -> str:
        """The message for `key` in `locale`, formatted with `fields`; never raises.

        Falls back to the base language, then English; a template missing a field is
        returned unformatted rather than failing an error path.
        """
        candidates = self._candidates(locale, key)
        for template in candidates:
            try:
                return template.format(**fields)
            except (KeyError, IndexError, ValueError, AttributeError):
                continue  # a caller forgot a field: the next candidate may still work
        return candidates[0] if candidates else str(key)

    def _candidates(self, locale: object, key: MessageKey) -> list[str]:
        tags = [DEFAULT_LOCALE]
        if isinstance(locale, str):
            tag = _normalize_locale(locale)
            tags = [tag, tag.split("-", 1)[0], DEFAULT_LOCALE]
        found = [self.locales.get(tag, {}).get(key) for tag in tags]
        found.append(ENGLISH.get(key))
        return [template for template in found if isinstance(template, str)]


def _checked_locale(locale: object) -> str:
    tag = _normalize_locale(locale) if isinstance(locale, str) else ""
    if not tag:
        raise ValueError(f"locale must be a non-empty string, got {locale!r:.80}")
    return tag


def _checked_messages(locale: str, messages: object) -> dict[MessageKey, str]:
    if not isinstance(messages, Mapping):
        raise ValueError(f"locale {locale!r}: messages must be a mapping, got {messages!r:.80}")
    checked: dict[MessageKey, str] = {}
    for key, text in messages.items():
        if not _is_message_key(key):
            known = ", ".join(sorted(MESSAGE_KEYS))
            raise ValueError(f"locale {locale!r}: unknown message key {key!r}; known: {known}")
        checked[key] = _checked_text(locale, key, text)
    return checked


def _is_message_key(key: object) -> TypeGuard[MessageKey]:
    return isinstance(key, str) and key in MESSAGE_KEYS


def _checked_text(locale: str, key: MessageKey, text: object) -> str:
    if not isinstance(text, str):
        raise ValueError(f"locale {locale!r}, key {key!r}: message must be str, got {text!r:.80}")
    try:
        found = _placeholders(text)
    except ValueError as error:
        raise ValueError(f"locale {locale!r}, key {key!r}: {error}") from None
    expected = _ENGLISH_PLACEHOLDERS[key]
    if found != expected:
        want = ", ".join(f"{{{name}}}" for name in sorted(expected)) or "none"
        got = ", ".join(f"{{{name}}}" for name in sorted(found)) or "none"
        raise ValueError(
            f"locale {locale!r}, key {key!r}: placeholders must match English ({want}), got {got}"
        )
    return text


DEFAULT_CATALOGUE: Final = Catalogue()


class CatalogueText(str):
    """A catalogue message that remembers its key: `Catalogue.text`'s answer for `key`, as a `str`.

    An adapter's `describe_error` answers with one (its `headline.*` message in the locale it
    was asked for, from the built-in catalogue), and the embed shows `key` again from the
    stream's own catalogue and locale (`provider_error_embed`), so a bot's catalogue
    localizes the headline as well as the title without the adapter knowing that catalogue.
    Anywhere else it is the plain text it holds.
    """

    key: MessageKey

    def __new__(cls, text: str, key: MessageKey) -> CatalogueText:
        made = super().__new__(cls, text)
        made.key = key
        return made

    def __reduce__(self) -> tuple[type[CatalogueText], tuple[str, MessageKey]]:
        return (CatalogueText, (str(self), self.key))  # copies and pickles keep the key
