"""Secret redaction for everything an embed shows (SPEC G4).

Provider error messages and exception texts sometimes echo the request: a URL with `?key=`,
an `Authorization: Bearer` header, the API key itself. They end up in a public channel, so
every secret-looking token is replaced with `REDACTED` before it is shown.

Each pattern is a literal prefix followed by one character class, so a match attempt stops at
the first character outside the class: the cost is linear in the input (no nested or
overlapping quantifiers, no backtracking blow-up on megabyte inputs). Redacting is
idempotent: the marker itself matches no pattern's secret part.

Rules chosen where the SPEC is silent: a key must start after a non-alphanumeric character
(or the start) and be long enough to be a real key (`sk-` + 16, `AIza` + 30, `xai-`/`gsk_` +
20), and a bearer token at least 8 characters, so prose such as "task-runner", "sk-learn"
or "the Bearer of bad news" is left alone. Masked echoes (`sk-proj-****ab12`) are redacted
too. Query names are matched case-insensitively and also cover `refresh_token`/`client_secret`.
"""

from __future__ import annotations

import re
from typing import Final

REDACTED: Final = "[redacted]"

_KEY_CHARS = r"[A-Za-z0-9_\-*]"
_API_KEY: Final = re.compile(
    r"(?<![A-Za-z0-9])"
    r"(?:sk-" + _KEY_CHARS + r"{16,}"  # OpenAI sk-/sk-proj-, Anthropic sk-ant-, OpenRouter sk-or-
    r"|AIza" + _KEY_CHARS + r"{30,}"  # Google / Gemini
    r"|xai-" + _KEY_CHARS + r"{20,}"  # xAI
    r"|gsk_" + _KEY_CHARS + r"{20,})"  # Groq
)
_BEARER: Final = re.compile(r"\b(Bearer\s+)[A-Za-z0-9\-._~+/=]{8,}", re.IGNORECASE)
_QUERY_VALUE: Final = re.compile(
    r"(?<![A-Za-z0-9_])"
    r"((?:api[_-]?key|key|access[_-]?token|refresh[_-]?token|token|client[_-]?secret)=)"
    r"[^\s&\"'<>#]+",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """Replace API keys, bearer tokens and secret query values with `REDACTED`."""
    text = _QUERY_VALUE.sub(r"\g<1>" + REDACTED, text)
    text = _BEARER.sub(r"\g<1>" + REDACTED, text)
    return _API_KEY.sub(REDACTED, text)


# No secret part (key, token, query value) contains one of these; `Bearer ` and `key=` keep
# their name verbatim. Cutting just after one therefore redacts a prefix exactly as the whole.
_SEPARATORS: Final = frozenset(" \t\n\r\f\v&\"'<>#")


def redact_head(text: str, limit: int) -> str:
    """A prefix of `redact(text)` holding at least `limit` characters (or all of it).

    For display: a 10 MB exception message costs a few times `limit`, not 10 MB of regex
    passes. The input is cut just after a separator, so no secret is cut in half; when a
    cut cannot give enough text (a huge run without separators, or heavy redaction), the
    whole text is redacted instead.
    """
    window = 4 * max(limit, 0) + 256
    if len(text) <= window:
        return redact(text)
    cut = next((i for i in range(window, 0, -1) if text[i - 1] in _SEPARATORS), 0)
    head = redact(text[:cut]) if cut else ""
    return head if len(head) >= limit else redact(text)
