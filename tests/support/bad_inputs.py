"""The bad-input corpus of `tests/shell/test_bad_input.py`: hostile values, texts and errors, as
data.

Every entry is a plain value with an id, so the test file reads as a table of input → outcome.
Nothing here imports the code under test beyond the public value types it builds.

- Hostile objects: classes whose attribute access, `__class__`, `__str__` or comparisons
  raise, the kind of thing an SDK model or a proxy object does on a bad day.
- Clusters: multi-code-point characters E7 must never cut, each with its length.
- Secrets: realistic API keys and tokens (fake, generated for these tests) and the places a
  provider error carries them (G4).
- Texts: control characters, bidi marks, mention injections, code-fence break-outs.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Final
from unittest.mock import MagicMock

from cordstream.domain import ProviderError, TokenUsage

# -- hostile objects ------------------------------------------------------------------------------


class RaisingGetattr:
    """Every attribute that is not found raises (a lazy SDK model whose loader is broken)."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"cannot load {name}")


class RaisingGetattribute:
    """Every attribute access raises, `__class__` included (a broken proxy object)."""

    def __getattribute__(self, name: str) -> object:
        raise RuntimeError("usage exploded")


class RaisingClass:
    """Only `__class__` raises: `isinstance` on it raises (a lazy proxy, e.g. werkzeug's)."""

    @property  # type: ignore[misc]  # overriding __class__ with a property is the point
    def __class__(self) -> type:
        raise RuntimeError("no class")


class RaisingProperty:
    """One side's property raises; the other side is valid (D2: the valid side is kept)."""

    completion_tokens = 5

    @property
    def prompt_tokens(self) -> int:
        raise ValueError("not loaded")


class RaisingMapping(dict[str, object]):
    """A mapping whose `get` raises."""

    def get(self, key: str, default: object = None) -> object:
        raise KeyError(key)


class ComparisonRaises(int):
    """An int whose comparisons raise (a numpy-like scalar with a broken `__ge__`)."""

    def __ge__(self, other: object) -> bool:
        raise RuntimeError("cannot compare")

    def __le__(self, other: object) -> bool:
        raise RuntimeError("cannot compare")


class IsIntegerRaises(float):
    """A float whose `is_integer` and comparisons raise (read as the plain float it is)."""

    def is_integer(self) -> bool:
        raise RuntimeError("cannot tell")

    def __ge__(self, other: object) -> bool:
        raise RuntimeError("cannot compare")


class StrRaises(Exception):
    """An exception whose `__str__` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no message for you")


class BlankWithRaisingArgs(Exception):
    """A blank message, and reading `args` raises."""

    def __str__(self) -> str:
        return ""

    @property
    def args(self) -> tuple[object, ...]:  # type: ignore[override]
        raise RuntimeError("no args")


class StrReturnsNonStr(Exception):
    """`__str__` returns an int: `str()` on it raises TypeError."""

    def __str__(self) -> str:
        return 42  # type: ignore[return-value]  # noqa: PLE0307  # the bug being simulated


def cyclic_mapping() -> dict[str, object]:
    usage: dict[str, object] = {"prompt_tokens": 1}
    usage["usage"] = usage
    return usage


def cyclic_namespace() -> SimpleNamespace:
    usage = SimpleNamespace(output_tokens=3)
    usage.usage = usage
    return usage


@dataclass(frozen=True)
class UsageCase:
    """A raw usage value and what `normalize_usage` must make of it (D1, D2)."""

    id: str
    build: Callable[[], object]
    expected: TokenUsage | None


# Each value is built fresh per test (some are mutable or cyclic).
USAGE: Final[tuple[UsageCase, ...]] = (
    UsageCase("strings", lambda: {"prompt_tokens": "5", "completion_tokens": "7"}, None),
    UsageCase("nan-inf", lambda: {"input_tokens": math.nan, "output_tokens": math.inf}, None),
    UsageCase("negative-inf", lambda: {"input_tokens": -math.inf, "output_tokens": -5}, None),
    UsageCase("bools", lambda: {"prompt_tokens": True, "completion_tokens": False}, None),
    UsageCase(
        "bool-side-skipped",
        lambda: {"prompt_tokens": True, "completion_tokens": 2},
        TokenUsage(0, 2),
    ),
    UsageCase(
        "negative-side-skipped",
        lambda: {"prompt_tokens": -1, "completion_tokens": 4},
        TokenUsage(0, 4),
    ),
    UsageCase("zeros", lambda: {"prompt_tokens": 0, "completion_tokens": 0}, None),
    UsageCase(
        "2**64-skipped",
        lambda: {"prompt_tokens": 2**64, "completion_tokens": 3},
        TokenUsage(0, 3),
    ),
    UsageCase("2**53-1-kept", lambda: {"prompt_tokens": 2**53 - 1}, TokenUsage(2**53 - 1, 0)),
    UsageCase("2**53-skipped", lambda: {"prompt_tokens": 2**53}, None),
    UsageCase("1e300", lambda: {"prompt_tokens": 1e300, "completion_tokens": 1e300}, None),
    UsageCase(
        "fractional-skipped",
        lambda: {"prompt_tokens": 5.0, "completion_tokens": 5.5},
        TokenUsage(5, 0),
    ),
    UsageCase(
        "minus-zero", lambda: {"prompt_tokens": -0.0, "completion_tokens": 1}, TokenUsage(0, 1)
    ),
    UsageCase(
        "first-valid-alias",
        lambda: {"prompt_tokens": "x", "promptTokens": 4, "completion_tokens": None},
        TokenUsage(4, 0),
    ),
    UsageCase("nested-garbage", lambda: {"usage": {"usage": {"usage": "x"}}}, None),
    UsageCase("nested-list", lambda: {"usage": [1, 2, 3]}, None),
    UsageCase("list", lambda: [10, 20], None),
    UsageCase("tuple-of-pairs", lambda: (("prompt_tokens", 3),), None),
    UsageCase("str", lambda: "prompt_tokens=3", None),
    UsageCase("bytes", lambda: b'{"prompt_tokens": 3}', None),
    UsageCase("int", lambda: 42, None),
    UsageCase("float-nan", lambda: math.nan, None),
    UsageCase("object", object, None),
    UsageCase("magicmock", MagicMock, None),
    UsageCase("cyclic-mapping", cyclic_mapping, TokenUsage(1, 0)),
    UsageCase("cyclic-namespace", cyclic_namespace, TokenUsage(0, 3)),
    UsageCase("raising-getattr", RaisingGetattr, None),
    UsageCase("raising-property-other-side-kept", RaisingProperty, TokenUsage(0, 5)),
    UsageCase("raising-mapping-get", lambda: RaisingMapping(prompt_tokens=3), None),
    UsageCase("raising-getattribute", RaisingGetattribute, None),
    UsageCase("raising-__class__", RaisingClass, None),
    UsageCase(
        "comparison-raises-read-as-plain-int",
        lambda: {"prompt_tokens": ComparisonRaises(3), "completion_tokens": 4},
        TokenUsage(3, 4),
    ),
    UsageCase(
        "float-is-integer-raises-other-side-kept",
        lambda: {"prompt_tokens": IsIntegerRaises(3.0), "completion_tokens": 4},
        TokenUsage(3, 4),
    ),
    UsageCase(
        "count-whose-class-raises-other-side-kept",
        lambda: {"input_tokens": RaisingClass(), "output_tokens": 4},
        TokenUsage(0, 4),
    ),
)


# -- E7: clusters that must never be cut ---------------------------------------------------------

CLUSTERS: Final[dict[str, str]] = {
    "zwj-family": "👨‍👩‍👧‍👦",
    "zwj-couple-skin-tones": "👩🏽‍🤝‍👨🏿",
    "flag": "🇫🇷",
    "skin-tone": "👍🏽",
    "keycap": "1️⃣",
    "tag-flag": "🏴󠁧󠁢󠁥󠁮󠁧󠁿",
    "combining-marks": "e\u0301\u0323",
    "hangul-jamo": "\u1100\u1161\u11a8",
    "indic-conjunct": "क्ष",
}

# -- texts ----------------------------------------------------------------------------------------

# Passed through unchanged inside a message (a character Python counts as whitespace may be
# trimmed where a message is cut, as all whitespace is).
CONTROL_TEXTS: Final[dict[str, str]] = {
    "nul": "before\x00after and a\x00b",
    "bell": "ding\x07dong",
    "ansi-colour": "\x1b[31mred\x1b[0m and \x1b[1;32mbold green\x1b[0m",
    "crlf-lines": "first\r\nsecond\r\nthird",
    "lone-cr": "over\rwrite",
    "line-separator": "one\u2028two\u2029three",
    "vertical-tab-form-feed": "a\x0bb\x0cc",
    "nel": "next\x85line",
    "c1-controls": "csi\x9b31m osc\x9d0;title\x07",
    "bom-zwsp-zwnj": "\ufeffstart zero\u200bwidth non\u200cjoin",
    "del": "rub\x7fout",
    "private-use": "\ue000\U000f0000 private",
    "noncharacters": "\ufffe\uffff\U0010ffff end",
}

BIDI_TEXTS: Final[dict[str, str]] = {
    "rlm": "abc \u200fשלום\u200f done",
    "lrm": "שלום \u200eabc\u200e עולם",
    "rlo-override": "file\u202etxt.exe\u202c ok",
    "lro-pdf": "\u202dforced ltr\u202c",
    "isolates": "\u2066iso\u2069 \u2067rtl\u2069 \u2068first\u2069",
    "arabic-letter-mark": "\u061cمرحبا",
}

MENTIONS: Final[tuple[str, ...]] = (
    "@everyone",
    "@here",
    "<@123456789012345678>",
    "<@!123456789012345678>",
    "<@&234567890123456789>",
    "<#345678901234567890>",
)

# Code-fence break-out attempts. The rule (domain.markdown): a fence is a line starting with
# 3–16 backticks; `~~~` is not a fence in Discord, so it is prose.
FENCE_TEXTS: Final[dict[str, str]] = {
    "triple-backticks-inside-inline-code": "Use ``` inside `inline ``` code` here\nand more",
    "four-backtick-fence-around-three": "````\ncode with\n```\ninside\n````\nafter",
    "four-backtick-fence-long": (
        "````md\n" + "".join(f"```py {i}\n" for i in range(40)) + "````\nafter"
    ),
    "tilde-fence": "~~~\ncode\n~~~\nafter",
    "tilde-fence-long": "~~~\n" + "".join(f"value_{i} = {i}\n" for i in range(40)) + "~~~\n",
    "unclosed-at-end": "intro\n```python\nx = 1\ny = 2\n",
    "unclosed-at-end-no-newline": "intro\n```python\nx = 1\ny = 2",
    "unclosed-long": "```js\n" + "let a = 1;\n" * 50,
    "split-across-limit": (
        "```python\n" + "".join(f"line_{i} = {i}\n" for i in range(60)) + "```\nafter"
    ),
    "one-code-line-longer-than-a-message": "```\n" + "y" * 500 + "\n```",
    "nested-fence-lookalike": "```md\n```python\nx\n```\n```\nafter",
    "indented-fence": "   ```\n   code\n   ```\nafter",
    "crlf-fence": "```py\r\nx = 1\r\n```\r\nafter",
    "closer-with-trailing-text": "```\ncode\n``` not a closer\nmore\n```\nend",
    "fence-right-at-the-limit": "x" * 190 + "\n```\ncode\n```",
    "unclosed-inline-markers": "some `code that never closes\nand **bold",
}

# A fence opening line longer than a message (broken today with chunked input, see xfail).
LONG_INFO_FENCE: Final = "```" + "x" * 300 + "\ncode\n```\n"


# -- G4: secrets in provider errors ----------------------------------------------------------------

_RNG = random.Random(20240605)
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _fake(prefix: str, length: int, alphabet: str = _ALNUM) -> str:
    return prefix + "".join(_RNG.choice(alphabet) for _ in range(length))


OPENAI_KEY: Final = _fake("sk-proj-", 48)
ANTHROPIC_KEY: Final = _fake("sk-ant-api03-", 40)
GEMINI_KEY: Final = _fake("AIzaSy", 33)
XAI_KEY: Final = _fake("xai-", 40)
JWT: Final = _fake("eyJhbGciOiJIUzI1NiJ9.", 30) + "." + _fake("", 20)
OPAQUE_TOKEN: Final = _fake("", 32)
MASKED_KEY: Final = "sk-proj-ab" + "*" * 24 + "cdEF"
_BASE64URL = _ALNUM + "_-"
DISCORD_TOKEN: Final = (
    _fake("MTA4NjY3NzY5MjM0ODc3OTY0OQ.", 6, _BASE64URL) + "." + _fake("", 38, _BASE64URL)
)
URL_PASSWORD: Final = _fake("pw-", 20)
BASIC_CREDENTIAL: Final = _fake("", 24) + "=="
AZURE_KEY: Final = _fake("", 32, "0123456789abcdef")
AWS_SECRET: Final = _fake("wJalr/", 30) + "EXAM"
HF_TOKEN: Final = _fake("hf_", 34)
GITHUB_TOKEN: Final = _fake("ghp_", 36)
SLACK_TOKEN: Final = "xoxb-1234567890-1234567890123-" + _fake("", 24)
PEM_BODY: Final = _fake("MIIEpAIBAAKCAQEA", 64, _ALNUM + "+/")
PRIVATE_HOST: Final = "vllm-gpu-cluster.internal"


@dataclass(frozen=True)
class SecretCase:
    """A provider failure carrying `secret` somewhere; what G4 must keep out of Discord."""

    id: str
    failure: ProviderError | BaseException
    secret: str
    headline: str | None = None


def _error(message: str = "", **fields: object) -> ProviderError:
    return ProviderError("api_error", message, **fields)  # type: ignore[arg-type]


SECRETS: Final[tuple[SecretCase, ...]] = (
    SecretCase(
        "openai-in-message", _error(f"Incorrect API key provided: {OPENAI_KEY}."), OPENAI_KEY
    ),
    SecretCase("masked-openai-in-message", _error(f"bad key {MASKED_KEY}"), MASKED_KEY),
    SecretCase("anthropic-in-message", _error(f"x-api-key: {ANTHROPIC_KEY}"), ANTHROPIC_KEY),
    SecretCase(
        "gemini-in-url-query",
        _error(
            "Client error '400 Bad Request' for url 'https://generativelanguage.googleapis.com"
            f"/v1beta/models/m:streamGenerateContent?alt=sse&key={GEMINI_KEY}'"
        ),
        GEMINI_KEY,
    ),
    SecretCase("xai-in-message", _error(f"invalid token {XAI_KEY}"), XAI_KEY),
    SecretCase("bearer-jwt", _error(f"sent Authorization: Bearer {JWT}"), JWT),
    SecretCase(
        "api-key-query-value",
        _error(f"GET https://api.example.com/v1/chat?api_key={OPAQUE_TOKEN}&stream=1 failed"),
        OPAQUE_TOKEN,
    ),
    SecretCase(
        "in-original-exception",
        _error("", original=RuntimeError(f"401 for key {OPENAI_KEY}")),
        OPENAI_KEY,
    ),
    SecretCase(
        "in-original-json-body",
        _error(
            "",
            original=SimpleNamespace(
                body=json.dumps({"error": {"message": f"Invalid key {ANTHROPIC_KEY}"}})
            ),
        ),
        ANTHROPIC_KEY,
    ),
    SecretCase(
        "in-original-mapping-error-detail",
        _error("", original={"error": {"detail": f"bad token Bearer {OPAQUE_TOKEN}"}}),
        OPAQUE_TOKEN,
    ),
    SecretCase(
        "in-user-message",
        _error("", user_message=f"Your key {GEMINI_KEY} was rejected"),
        GEMINI_KEY,
    ),
    SecretCase(
        "at-the-4096-truncation-point",
        _error("x" * 4070 + f" {OPENAI_KEY} trailing"),
        OPENAI_KEY,
    ),
    SecretCase(
        "in-the-headline",
        _error("quota"),
        XAI_KEY,
        headline=f"The provider rejected {XAI_KEY}",
    ),
    SecretCase("in-a-raised-exception", RuntimeError(f"boom with {ANTHROPIC_KEY}"), ANTHROPIC_KEY),
    SecretCase("discord-bot-token", _error(f"Improper token: {DISCORD_TOKEN}"), DISCORD_TOKEN),
    SecretCase(
        "password-in-a-url",
        _error(f"connect https://svc:{URL_PASSWORD}@llm.example.com/v1 failed"),
        URL_PASSWORD,
    ),
    SecretCase(
        "authorization-basic",
        _error(f"sent Authorization: Basic {BASIC_CREDENTIAL}"),
        BASIC_CREDENTIAL,
    ),
    SecretCase("azure-api-key-header", _error(f"401 with api-key: {AZURE_KEY}"), AZURE_KEY),
    SecretCase("aws-secret-access-key", _error(f"bad secret {AWS_SECRET} for bucket"), AWS_SECRET),
    SecretCase("hugging-face-token", _error(f"Invalid user token {HF_TOKEN}."), HF_TOKEN),
    SecretCase("github-token", _error(f"Bad credentials ({GITHUB_TOKEN})"), GITHUB_TOKEN),
    SecretCase("bare-jwt", _error(f"id_token {JWT} expired"), JWT),
    SecretCase("slack-token", _error(f"invalid_auth for {SLACK_TOKEN}"), SLACK_TOKEN),
    SecretCase(
        "pem-private-key",
        _error(f"bad key -----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----"),
        PEM_BODY,
    ),
    SecretCase(
        "private-host-in-a-url",
        _error(f"Cannot connect to host http://{PRIVATE_HOST}:8000/v1 ssl:default"),
        PRIVATE_HOST,
    ),
    SecretCase(
        "repeated-megabytes",
        _error(f"{OPENAI_KEY} " * 100_000),
        OPENAI_KEY,
    ),
)


# -- G2/G3: errors that say nothing ----------------------------------------------------------------


class AllAccessRaises:
    """An `original` whose every attribute access and `__str__` raise."""

    def __getattribute__(self, name: str) -> object:
        raise RuntimeError("no access")

    def __str__(self) -> str:
        raise RuntimeError("no str")


SILENT_ERRORS: Final[dict[str, ProviderError]] = {
    "empty-message": ProviderError("api_error", ""),
    "blank-message": ProviderError("unknown", "  \n\t "),
    "original-none": ProviderError("api_error", "", original=None),
    "original-str-raises": ProviderError("api_error", "", original=StrRaises()),
    "original-args-raise": ProviderError("api_error", "", original=BlankWithRaisingArgs()),
    "original-str-non-str": ProviderError("api_error", "", original=StrReturnsNonStr()),
    "original-all-access-raises": ProviderError("api_error", "", original=AllAccessRaises()),
    "original-bare-exception": ProviderError("api_error", "", original=Exception()),
    "original-error-none": ProviderError("api_error", "", original={"error": None}),
    "body-not-json": ProviderError("api_error", "", original={"body": "<html>502</html>"}),
    "body-broken-json": ProviderError("api_error", "", original={"body": '{"error": '}),
    "body-deeply-nested-json": ProviderError("api_error", "", original={"body": "[" * 100_000}),
    "body-blank-message": ProviderError(
        "api_error", "", original={"body": '{"error": {"message": "   "}}'}
    ),
    "blank-user-message": ProviderError("api_error", "", user_message="   "),
}

# Exceptions a provider may raise that say nothing readable (B13 → the generic text).
SILENT_EXCEPTIONS: Final[dict[str, Callable[[], BaseException]]] = {
    "bare": Exception,
    "blank": lambda: RuntimeError("   "),
    "str-raises": StrRaises,
    "args-raise": BlankWithRaisingArgs,
    "str-non-str": StrReturnsNonStr,
}
