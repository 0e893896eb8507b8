"""Secret redaction for everything an embed shows (SPEC G4).

Provider error messages and exception texts sometimes echo the request: a URL with `?key=` or
a password in it, an `Authorization` header, the API key itself, the address of a self-hosted
model. An embed goes to a public channel, so `redact` replaces each such thing with `REDACTED`
before anything is shown, in three passes: the exact values the shell knows (`Secrets`, data:
the core never looks a secret up itself), credential shapes, and private hosts. Which values,
shapes and hosts, and what is left alone, is G4's list. The name in front of a value, a URL's
scheme and user, an `Authorization` scheme and the quotes around a value stay, so the message
still reads.

The idea that keeps it linear, whatever the input (a megabyte of near-matches included): every
pattern is anchored by a look-behind at the start of a token (or by a literal prefix), and each
of its parts is one character class that the next part's first character is outside of. So a
match attempt reads its token once, the input is read a bounded number of times per pattern,
and nothing backtracks (no nested or overlapping quantifiers). Values are replaced with
`str.replace`, linear too.

Idempotent: `redact(redact(t)) == redact(t)`. No pattern matches the marker as a secret part
(the named values that would are replaced by the same marker), and a registered value is
trimmed so that no occurrence of it can overlap a marker (see `Secrets`).

It never touches the model's answer, which is sent as written: only embeds are redacted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

REDACTED: Final = "[redacted]"
# A registered value shorter than this is not redacted by value (G4).
MIN_SECRET_LENGTH: Final = 8
# At most this many distinct values are kept (each costs one pass over the text).
MAX_SECRETS: Final = 256


@dataclass(frozen=True, slots=True)
class Secrets:
    """Exact values to remove from everything an embed shows (G4); build it with `of`.

    `values` are normalized: stripped, at least `MIN_SECRET_LENGTH` long, with their JSON-
    escaped and percent-encoded forms, trimmed so that no occurrence can overlap `REDACTED`
    (a value that starts with the marker's end, `]` say, or ends with its start, `[`, loses
    that part; one that contains the marker is split around it), longest first. The repr
    shows how many there are, never a value, so a logged state cannot leak one.
    """

    values: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"Secrets(<{len(self.values)} values>)"

    @classmethod
    def of(cls, *groups: Iterable[object]) -> Secrets:
        """The normalized secrets from any iterables; anything but a `str` is ignored."""
        found: set[str] = set()
        for group in groups:
            for value in group:
                if isinstance(value, str):
                    found.update(_forms(value))
        return cls._sorted(found)

    def __add__(self, other: Secrets) -> Secrets:
        """Both sets (already normalized: nothing is escaped twice)."""
        return Secrets._sorted({*self.values, *other.values})

    @classmethod
    def _sorted(cls, values: set[str]) -> Secrets:
        return cls(tuple(sorted(values, key=lambda v: (-len(v), v))[:MAX_SECRETS]))


NO_SECRETS: Final = Secrets()


def _forms(value: str) -> set[str]:
    """`value` as it may appear in an error text, each form trimmed and long enough."""
    value = value.strip()
    if len(value) < MIN_SECRET_LENGTH:
        return set()
    forms = {value, json.dumps(value)[1:-1], _percent_encoded(value)}
    return {piece for form in forms for piece in _trimmed(form) if len(piece) >= MIN_SECRET_LENGTH}


def _percent_encoded(value: str) -> str:
    safe = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
    return "".join(
        char
        if char in safe
        else "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "replace"))
        for char in value
    )


_MARKER_SIZES: Final = range(len(REDACTED), 0, -1)  # longest fragment first


def _trimmed(value: str) -> list[str]:
    """The parts of `value` no occurrence of which can overlap a `REDACTED` in a text.

    An occurrence overlapping a marker either contains it, lies inside it, starts with a
    suffix of it, or ends with a prefix of it; splitting around a contained marker and
    trimming such ends leaves parts that can only occur in the text's own characters.
    """
    parts = []
    for piece in value.split(REDACTED):
        part, before = piece, None
        while part != before:
            before = part
            start = next((k for k in _MARKER_SIZES if part.startswith(REDACTED[-k:])), 0)
            part = part[start:]
            end = next((k for k in _MARKER_SIZES if part.endswith(REDACTED[:k])), 0)
            part = part[: len(part) - end]
        if part and part not in REDACTED:
            parts.append(part)
    return parts


# -- shapes ---------------------------------------------------------------------------------

_START: Final = r"(?<![A-Za-z0-9])"  # a token starts after a non-alphanumeric or the start
_KEY_CHARS: Final = r"[A-Za-z0-9_\-*]"  # `*`: masked echoes such as `sk-proj-****ab12`
_BASE64URL: Final = r"[A-Za-z0-9_-]"
_AWS_ID_PREFIXES: Final = "AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA"

_PREFIXED_KEY: Final = re.compile(
    _START + r"(?:"
    r"sk-" + _KEY_CHARS + r"{16,}"  # OpenAI sk-/sk-proj-, Anthropic sk-ant-, OpenRouter sk-or-
    r"|AIza" + _KEY_CHARS + r"{30,}"  # Google / Gemini API key
    r"|xai-" + _KEY_CHARS + r"{20,}"  # xAI
    r"|gsk_" + _KEY_CHARS + r"{20,}"  # Groq
    r"|hf_" + _KEY_CHARS + r"{20,}"  # Hugging Face
    r"|gh[pousr]_" + _KEY_CHARS + r"{20,}"  # GitHub classic tokens
    r"|github_pat_" + _KEY_CHARS + r"{20,}"  # GitHub fine-grained tokens
    r"|gl(?:pat|ptt|dt|rt|cbt|oas|soat|imt|ft)-" + _KEY_CHARS + r"{20,}"  # GitLab
    r"|npm_" + _KEY_CHARS + r"{30,}"  # npm
    r"|xox[abposre]-[A-Za-z0-9\-*]{10,}|xapp-[A-Za-z0-9\-*]{10,}"  # Slack
    r"|(?:sk|rk)_(?:live|test)_" + _KEY_CHARS + r"{16,}|whsec_" + _KEY_CHARS + r"{20,}"  # Stripe
    r"|ya29\." + _KEY_CHARS + r"{20,}"  # Google OAuth access token
    r"|1//0" + _KEY_CHARS + r"{30,}"  # Google OAuth refresh token
    r"|(?:" + _AWS_ID_PREFIXES + r")[A-Z0-9]{16}(?![A-Za-z0-9])"  # AWS access key id
    r")"
)
# JWT (JWS and JWE): a base64url JSON header, then two to four more parts.
_JWT: Final = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ" + _BASE64URL + r"{5,}\." + _BASE64URL + r"{5,}\." + _BASE64URL + r"*"
    r"(?:\." + _BASE64URL + r"+){0,2}"
)
# A Discord bot token: base64 user id, base64 timestamp, HMAC.
_DOT_TOKEN: Final = re.compile(
    r"(?<![A-Za-z0-9_-])"
    + _BASE64URL
    + r"{20,}\."
    + _BASE64URL
    + r"{4,8}\."
    + _BASE64URL
    + r"{20,}(?![A-Za-z0-9_-])"
)
_BASE64: Final = r"[A-Za-z0-9/+]"
_AWS_SECRET: Final = re.compile(
    r"(?<![A-Za-z0-9/+])"
    r"(?="
    + _BASE64
    + r"{0,39}[A-Z])(?="
    + _BASE64
    + r"{0,39}[a-z])(?="
    + _BASE64
    + r"{0,39}[0-9])"
    + _BASE64
    + r"{40}(?![A-Za-z0-9/+])"
)
_PEM: Final = re.compile(
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[A-Za-z0-9+/=:,. \t\r\n\\]|-(?!----))*"
    r"(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----)?"
    r"|-----BEGIN[ A-Z0-9]*\Z"  # a header cut short where the text ends (`redact_head`)
)
_URL_PASSWORD: Final = re.compile(
    r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:\"'<>\[\]]*:)[^\s/?#@\"'<>]+(?=@)"
)
_COOKIE_LINE: Final = re.compile(
    r"(?<![A-Za-z0-9-])((?:set-)?cookie[ \t]*:[ \t]*)[^\s\"'][^\r\n\"']*", re.I
)
_SCHEME: Final = r"(?:basic|bearer|bot|token|digest|apikey|key|sso-key|negotiate)[ \t]+"
_STRONG_NAME: Final = (
    r"api[ _-]?key|apikey|api[_-]?secret|access[_-]?key(?:[_-]?id)?"
    r"|secret(?:[_-]?(?:access[_-]?)?key)?|password|passwd|passphrase|pwd|token"
    r"|authorization|private[_-]?key|subscription[_-]?key|cookie"
)
_WEAK_NAME: Final = r"key|sig|signature|credential|session(?:[_-]?id)?"
_NAMED_VALUE: Final = re.compile(
    _START + r"(?P<kept>"
    r"(?:(?:" + _STRONG_NAME + r")\\?[\"']?[ \t]*[:=]|(?:" + _WEAK_NAME + r")\\?[\"']?[ \t]*=)"
    r"[ \t]*(?:(?P<dq>\")|(?P<eq>\\\")|(?P<sq>\\?'))?(?>(?:" + _SCHEME + r")?))"
    # Quoted: up to the closing quote, escapes included; `\"…\"` (JSON inside a JSON string)
    # up to the next `\"`. Unquoted: one token.
    r"(?(dq)(?=[^\"\n])[^\"\\\n]*(?:\\.[^\"\\\n]*)*"
    r"|(?(eq)(?=[^\"\n\\]|\\[^\"\n])[^\"\\\n]*(?:\\[^\"\n][^\"\\\n]*)*"
    r"|(?(sq)(?=[^'\n])[^'\\\n]*(?:\\.[^'\\\n]*)*"
    r"|[^\s\"'<>&#,;\\]+)))",
    re.IGNORECASE,
)
_BEARER: Final = re.compile(r"\b(Bearer\s+)[A-Za-z0-9\-._~+/=]{8,}", re.IGNORECASE)
_BASIC: Final = re.compile(
    _START + r"((?i:basic)[ \t]+)(?=[A-Za-z0-9+/]+[A-Z0-9+/=])[A-Za-z0-9+/]{8,}={0,2}"
)

# -- private hosts --------------------------------------------------------------------------

_IPV4: Final = re.compile(
    r"(?<![0-9A-Za-z.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![0-9A-Za-z_]|\.[0-9A-Za-z])"
)
_HEX4: Final = r"[0-9A-Fa-f]{1,4}"
_IPV6: Final = re.compile(
    r"(?<![0-9A-Za-z:.])(?P<open>\[)?"
    r"(?P<address>" + _HEX4 + r"(?::[0-9A-Fa-f]{0,4}){2,7}|::" + _HEX4 + r")"
    r"(?:%[0-9A-Za-z._-]+)?(?(open)\]|(?![0-9A-Za-z:]))"
)
_PRIVATE_NAME: Final = re.compile(
    r"(?<![A-Za-z0-9_.-])(?:[A-Za-z0-9_][A-Za-z0-9_-]*\.)+"
    r"(?:internal|localdomain|local|lan|corp|intranet|home\.arpa)"
    r"(?![A-Za-z0-9_-]|\.[A-Za-z0-9])",
    re.IGNORECASE,
)
_SINGLE_LABEL_HOST: Final = re.compile(
    r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://(?>(?:[^\s/?#@\"'<>]*@)?))"
    r"[A-Za-z0-9_-]+(?![A-Za-z0-9_.-])"
)


def _private_ipv4(match: re.Match[str]) -> str:
    octets = [int(part) for part in match.groups()]
    if any(octet > 255 for octet in octets):
        return match[0]
    a, b = octets[0], octets[1]
    private = (
        a in (10, 127)
        or (a == 172 and 16 <= b <= 31)
        or (a == 192 and b == 168)
        or (a == 169 and b == 254)
        or (a == 100 and 64 <= b <= 127)
    )
    return REDACTED if private else match[0]


def _private_ipv6(match: re.Match[str]) -> str:
    address = match["address"].lower()
    if "::" not in address and address.count(":") != 7:
        return match[0]  # not an IPv6 address (a time, say)
    first = address.split(":", 1)[0]
    private = (
        address == "::1"
        or (len(first) == 4 and first[:2] in ("fc", "fd"))
        or (len(first) == 4 and first[:3] in ("fe8", "fe9", "fea", "feb"))
    )
    return REDACTED if private else match[0]


def _named(match: re.Match[str]) -> str:
    return match["kept"] + REDACTED


_KEPT_PREFIX: Final = r"\g<1>" + REDACTED


def _by_shape(text: str) -> str:
    text = _PEM.sub(REDACTED, text)
    text = _URL_PASSWORD.sub(_KEPT_PREFIX, text)
    text = _COOKIE_LINE.sub(_KEPT_PREFIX, text)
    text = _NAMED_VALUE.sub(_named, text)
    text = _BEARER.sub(_KEPT_PREFIX, text)
    text = _BASIC.sub(_KEPT_PREFIX, text)
    text = _PREFIXED_KEY.sub(REDACTED, text)
    text = _JWT.sub(REDACTED, text)
    text = _DOT_TOKEN.sub(REDACTED, text)
    text = _AWS_SECRET.sub(REDACTED, text)
    text = _IPV4.sub(_private_ipv4, text)
    text = _IPV6.sub(_private_ipv6, text)
    text = _PRIVATE_NAME.sub(REDACTED, text)
    return _SINGLE_LABEL_HOST.sub(_KEPT_PREFIX, text)


def _by_value(text: str, secrets: Secrets) -> str:
    for value in secrets.values:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redact(text: str, secrets: Secrets = NO_SECRETS) -> str:
    """`text` with `secrets`, credentials and private hosts replaced with `REDACTED`."""
    return _by_shape(_by_value(text, secrets))


# No secret part a pattern replaces holds one of these, except the few whose match still
# redacts the same part when the text is cut just after one (a quoted value, a cookie line, a
# PEM block: all replaced from where they start). Cutting just after one therefore redacts a
# prefix exactly as the whole.
_SEPARATORS: Final = frozenset(" \t\n\r\f\v&\"'<>#")


def redact_head(text: str, limit: int, secrets: Secrets = NO_SECRETS) -> str:
    """A prefix of `redact(text, secrets)` holding at least `limit` characters (or all of it).

    For display: a 10 MB exception message costs a few times `limit` in regex passes, not
    10 MB of them (values are replaced in the whole text first, with `str.replace`). The
    input is cut just after a separator, so no secret is cut in half; when a cut cannot give
    enough text (a huge run without separators, or heavy redaction), the whole text is
    redacted instead.
    """
    text = _by_value(text, secrets)
    window = 4 * max(limit, 0) + 256
    if len(text) <= window:
        return _by_shape(text)
    cut = next((i for i in range(window, 0, -1) if text[i - 1] in _SEPARATORS), 0)
    head = _by_shape(text[:cut]) if cut else ""
    return head if len(head) >= limit else _by_shape(text)
