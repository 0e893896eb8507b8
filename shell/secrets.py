"""The secrets a stream knows exactly, gathered for the core's embeds (SPEC G4).

The core redacts credential shapes on its own; the values it cannot guess are handed to it as
data (`cordstream.domain.redact.Secrets`, in `initial_state`). This module gathers them once
per stream, where G4 says they come from: the values the bot registered, the bot's own Discord
token (read from discord.py's client behind the channel, `channel._state.http.token`) and the
provider's own (`provider_secrets`; the bundled adapters' `secrets()` hook uses
`client_secrets`, an SDK client's API key and credential headers).

The idea: gathering reads provider and discord.py objects it does not trust, so every read is
guarded and bounded. It never raises and never waits: anything unreadable is skipped, and a
provider's `secrets()` is read only up to `MAX_PROVIDER_SECRETS` values. It never filters
short values itself: `Secrets` ignores those (`MIN_SECRET_LENGTH`, G4).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import TypeGuard

from cordstream.domain.redact import Secrets

MAX_PROVIDER_SECRETS = 64
# Header names whose value is a credential in an SDK client's `default_headers`.
_SECRET_HEADERS = ("authorization", "api-key", "x-api-key", "x-goog-api-key", "cookie", "token")


def stream_secrets(registered: Secrets, provider: object, channel: object) -> Secrets:
    """`registered` plus the bot's token and the provider's secrets."""
    found: list[str] = []
    found.extend(_bot_token(channel))
    found.extend(provider_secrets(provider))
    if not found:
        return registered
    try:
        return registered + Secrets.of(found)
    except Exception:  # a str subclass with a hostile method: keep what is known
        return registered


def provider_secrets(provider: object) -> list[str]:
    """What `provider` says is secret, else its client's `api_key`; never raises."""
    try:
        hook = getattr(provider, "secrets", None)
        if callable(hook):
            values = hook()
            if isinstance(values, str):
                return [values]
            if isinstance(values, Iterable):
                return [v for v in itertools.islice(values, MAX_PROVIDER_SECRETS) if _is_str(v)]
            return []
        key = getattr(getattr(provider, "client", None), "api_key", None)
        return [key] if _is_str(key) else []
    except Exception:  # provider code: whatever it does, the stream goes on
        return []


def client_secrets(client: object, *extra: object) -> tuple[str, ...]:
    """An SDK client's credentials: `api_key`, `auth_token`, the credential headers of
    `default_headers`/`custom_headers`, plus `extra`; for the adapters' `secrets()`."""
    values: list[object] = [*extra, _attribute(client, "api_key"), _attribute(client, "auth_token")]
    for name in ("default_headers", "custom_headers", "_custom_headers"):
        headers = _attribute(client, name)
        if isinstance(headers, Mapping):
            values.extend(_credential_header_values(headers))
    return tuple(dict.fromkeys(v for v in values if _is_str(v)))


def _credential_header_values(headers: Mapping[object, object]) -> list[object]:
    values: list[object] = []
    for name, value in list(headers.items())[:MAX_PROVIDER_SECRETS]:
        lowered = name.lower() if isinstance(name, str) else ""
        if isinstance(value, str) and any(part in lowered for part in _SECRET_HEADERS):
            values.append(value)
            values.append(value.split()[-1] if value.split() else value)  # past the scheme
    return values


def _bot_token(channel: object) -> list[str]:
    try:
        token = channel._state.http.token  # type: ignore[attr-defined]  # discord.py internals
    except Exception:  # not a discord.py channel, or not logged in
        return []
    return [token] if _is_str(token) else []


def _attribute(source: object, name: str) -> object:
    try:
        return getattr(source, name, None)
    except Exception:
        return None


def _is_str(value: object) -> TypeGuard[str]:
    return type(value) is str
