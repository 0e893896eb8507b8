"""What the user is told when the connection to the model provider fails, and the cleanup of
any text an adapter puts into an error: no Python repr reaches a Discord channel.

An SDK reports a failed connection in its own words and classes: openai's and anthropic's
`APIConnectionError("Connection error.")` over httpx2's `ConnectError`, google-genai's aiohttp
transport a `ClientConnectorError` whose text holds the repr of an SSL context
(`ssl:<ssl.SSLContext object at 0x…>`). None of that helps a user. What does is which of two
things happened, and why:

- the connection could not be made: "could not connect to the provider: connection refused";
- it was made and then dropped: "the connection to the provider was lost" (mid-answer).

Which one is decided by the SDK's connect-phase classes, which each adapter names
(`connecting`: httpx2's `ConnectError`, aiohttp's `ClientConnectorError`), or by a cause only
a connection attempt has. The cause is read from the exception chain (`_chain`), where the
standard library's exception sits beneath every SDK's wrapping: `socket.gaierror` is "name not
resolved", `ConnectionRefusedError` "connection refused", an `ssl.SSLError` while connecting
"TLS handshake failed", `TimeoutError` "timed out", and so on (`_CAUSES`). A cause the chain
does not name is left out, not guessed; the SDK's own text never enters the message. It stays
in `ProviderError.original`, for the bot's logs.

`plain(text)` (from `cordstream.domain.embeds`, where every embed text passes through it too)
removes object reprs (`<… object at 0x…>`, `<SomeError: …>`) and memory addresses. `Adapter`
passes every failure's message through it, so the provider's own words reach the embed, the
tool loop and the bot's logs, and Python's do not.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Iterator
from typing import Final

from cordstream import domain
from cordstream.domain.embeds import plain

__all__ = ["connection_error", "plain"]

CONNECT: Final = "could not connect to the provider"
LOST: Final = "the connection to the provider was lost"

# (class, the cause while connecting, the cause once connected, whether only a connection
# attempt has it), first match wins along the chain.
_CAUSES: Final[tuple[tuple[type[BaseException], str, str, bool], ...]] = (
    (socket.gaierror, "name not resolved", "name not resolved", True),
    (ConnectionRefusedError, "connection refused", "connection refused", True),
    (ssl.SSLCertVerificationError, "TLS handshake failed", "TLS handshake failed", True),
    (ssl.SSLError, "TLS handshake failed", "TLS error", False),
    (TimeoutError, "timed out", "timed out", False),
    (ConnectionResetError, "connection reset", "connection reset", False),
    (ConnectionAbortedError, "connection aborted", "connection aborted", False),
    (BrokenPipeError, "connection closed", "connection closed", False),
)
_UNREACHABLE: Final = {
    errno.ENETUNREACH: "network unreachable",
    errno.EHOSTUNREACH: "host unreachable",
    errno.EADDRNOTAVAIL: "address not available",
}
_CHAIN_LIMIT: Final = 32


def connection_error(
    original: object = None, *, connecting: tuple[type[BaseException], ...] = ()
) -> domain.ProviderError:
    """The connection failed (`CONNECT`) or was cut before the stream finished (`LOST`), with
    the cause the exception chain names (see the module docstring); retryable."""
    chain = list(_chain(original))
    found = _cause(chain)
    attempt = any(isinstance(error, connecting) for error in chain) or (
        found is not None and found[2]
    )
    message = CONNECT if attempt else LOST
    if found is not None:
        message = f"{message}: {found[0] if attempt else found[1]}"
    return domain.ProviderError(
        "api_error",
        message,
        code="connection_error",
        retryable=True,
        original=original,
    )


def _chain(error: object) -> Iterator[BaseException]:
    """`error` and the exceptions beneath it, outermost first: each one's `__cause__`, else the
    exception it wraps as its argument (httpcore's `ConnectError(OSError(...))`, raised `from
    None`), else its `__context__`, suppressed or not (it is read, never shown)."""
    seen: set[int] = set()
    current = error if isinstance(error, BaseException) else None
    while current is not None and id(current) not in seen and len(seen) < _CHAIN_LIMIT:
        seen.add(id(current))
        yield current
        wrapped = [arg for arg in current.args[:1] if isinstance(arg, BaseException)]
        current = current.__cause__ or (wrapped[0] if wrapped else current.__context__)


def _cause(chain: list[BaseException]) -> tuple[str, str, bool] | None:
    for error in chain:
        for kind, connecting, connected, attempt_only in _CAUSES:
            if isinstance(error, kind):
                return connecting, connected, attempt_only
        if isinstance(error, OSError) and error.errno in _UNREACHABLE:
            return _UNREACHABLE[error.errno], _UNREACHABLE[error.errno], True
    return None
