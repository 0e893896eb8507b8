"""SPEC G4 by value: the secrets cordstream knows exactly never reach an embed.

The core gets them as data (`Secrets`, through `initial_state`) and removes them from every
embed it composes; the shell gathers them per stream: the values the bot registered, the bot's
own Discord token and the provider's API key (`cordstream.shell.secrets`). The end-to-end tests
run a real discord.py client against the emulator and read what Discord received.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import SimpleNamespace

import anthropic
import openai
import pytest
from google import genai

from cordstream.domain import ErrorChunk, ProviderError
from cordstream.domain.catalogue import DEFAULT_CATALOGUE
from cordstream.domain.embeds import (
    DESCRIPTION_LIMIT,
    exception_embed,
    flush_limit_embed,
    provider_error_embed,
    timeout_embed,
)
from cordstream.domain.redact import REDACTED, Secrets
from cordstream.shell import StreamConfig, StreamContext, StreamOrchestrator
from cordstream.shell.providers.anthropic import AnthropicProvider
from cordstream.shell.providers.gemini import GeminiProvider
from cordstream.shell.providers.openai import OpenAIChatProvider
from cordstream.shell.secrets import MAX_PROVIDER_SECRETS, provider_secrets, stream_secrets
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing.emulator import DiscordEmulator, discord_client
from tests.support.stage import ScriptProvider

shell = pytest.mark.asyncio
virtual_time = pytest.mark.looptime

# None of these has a credential's shape: only redaction by value can hide them.
BOT_TOKEN = "emulator-bot-token-Zq8Lp3Xw"
API_KEY = "plainkey0123456789abcdef"
REGISTERED = "correct horse battery staple"
LATER = "registered-later-0042"
PRIVATE_URL = "http://10.0.3.7:8000/v1"


def _pieces(secret: str, width: int = 8) -> Iterator[str]:
    return (secret[i : i + width] for i in range(len(secret) - width + 1))


def _assert_hidden(shown: str, *secrets: str) -> None:
    # A count, not the pieces: a failing test must not print the secret either.
    leaked = sum(piece in shown for secret in secrets for piece in _pieces(secret))
    assert leaked == 0, "pieces of a secret are shown"


def _error(message: str) -> ProviderError:
    return ProviderError("api_error", message)


# -- the core: embeds ---------------------------------------------------------------------------

_SECRETS = Secrets.of([BOT_TOKEN, API_KEY, REGISTERED])
_ECHO = f"401 for {BOT_TOKEN} with key {API_KEY} and password {REGISTERED} at {PRIVATE_URL}"


def test_G4_a_provider_error_embed_hides_every_known_value() -> None:
    embed = provider_error_embed(_error(_ECHO), f"Rejected {API_KEY}", secrets=_SECRETS)
    _assert_hidden(embed.title + embed.description, BOT_TOKEN, API_KEY, REGISTERED, "10.0.3.7")
    assert REDACTED in embed.description
    assert "401 for" in embed.description  # the rest still reads


def test_G4_without_the_values_the_same_error_shows_them() -> None:
    embed = provider_error_embed(_error(_ECHO), None)
    assert BOT_TOKEN in embed.description  # why the shell must pass them


def test_G4_an_exception_embed_hides_every_known_value() -> None:
    embed = exception_embed(RuntimeError(_ECHO), secrets=_SECRETS)
    _assert_hidden(embed.title + embed.description, BOT_TOKEN, API_KEY, REGISTERED)


def test_G4_a_value_in_a_custom_catalogue_title_is_hidden() -> None:
    catalogue = DEFAULT_CATALOGUE.with_locale(
        "xx",
        {
            "title.api_error": f"Fehler {API_KEY}",
            "timeout.title": f"Zeit {API_KEY}",
            "timeout.description": f"Zeit {REGISTERED}",
            "flush_limit.title": f"Limit {API_KEY}",
            "exception.title": f"Ausnahme {API_KEY}",
        },
    )
    embeds = [
        provider_error_embed(_error("x"), None, locale="xx", catalogue=catalogue, secrets=_SECRETS),
        timeout_embed(locale="xx", catalogue=catalogue, secrets=_SECRETS),
        flush_limit_embed(locale="xx", catalogue=catalogue, secrets=_SECRETS),
        exception_embed(ValueError("x"), locale="xx", catalogue=catalogue, secrets=_SECRETS),
    ]
    for embed in embeds:
        _assert_hidden(embed.title + embed.description, API_KEY, REGISTERED)


@pytest.mark.parametrize("at", [4000, 4060, 4075, 4090, 4100])
def test_G4_a_value_at_the_description_cut_is_not_shown_in_part(at: str) -> None:
    message = "x" * int(at) + " " + REGISTERED + " tail" * 10
    embed = provider_error_embed(_error(message), None, secrets=_SECRETS)
    assert len(embed.description) <= DESCRIPTION_LIMIT
    _assert_hidden(embed.description, REGISTERED)


def test_G4_megabytes_of_a_repeated_value_stay_hidden_and_fit() -> None:
    embed = provider_error_embed(_error(f"{API_KEY} " * 200_000), None, secrets=_SECRETS)
    assert len(embed.description) <= DESCRIPTION_LIMIT
    _assert_hidden(embed.description, API_KEY)


# -- the shell: gathering --------------------------------------------------------------------


@dataclass
class _Hooked:
    values: object

    def secrets(self) -> object:
        return self.values


class _Raises:
    def secrets(self) -> list[str]:
        raise RuntimeError("no")


def _endless() -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"value-{n:08d}"


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        (_Hooked([API_KEY, 42, None]), [API_KEY]),
        (_Hooked(API_KEY), [API_KEY]),
        (_Hooked(None), []),
        (_Raises(), []),
        (SimpleNamespace(client=SimpleNamespace(api_key=API_KEY)), [API_KEY]),
        (SimpleNamespace(client=SimpleNamespace(api_key=None)), []),
        (SimpleNamespace(), []),
    ],
    ids=["hook", "hook-str", "hook-none", "hook-raises", "client-key", "client-no-key", "none"],
)
def test_G4_provider_secrets_come_from_its_hook_or_its_client(
    provider: object, expected: list[str]
) -> None:
    assert provider_secrets(provider) == expected


def test_G4_an_endless_hook_is_read_only_so_far() -> None:
    assert len(provider_secrets(_Hooked(_endless()))) == MAX_PROVIDER_SECRETS


def test_G4_stream_secrets_never_raises_on_a_strange_channel() -> None:
    class Hostile:
        @property
        def _state(self) -> object:
            raise RuntimeError("no")

    registered = Secrets.of([REGISTERED])
    assert stream_secrets(registered, object(), Hostile()) == registered


def test_G4_the_adapters_expose_their_client_key() -> None:
    client = openai.AsyncOpenAI(api_key=API_KEY, default_headers={"api-key": "Azure-KEY-0001"})
    provider = OpenAIChatProvider(client, model="m", messages=[])
    assert {API_KEY, "Azure-KEY-0001"} <= set(provider.secrets())


def test_G4_the_anthropic_and_gemini_adapters_expose_their_client_key() -> None:
    claude = AnthropicProvider(
        anthropic.AsyncAnthropic(api_key=API_KEY), model="m", messages=[], max_tokens=5
    )
    gemini = GeminiProvider(genai.Client(api_key=API_KEY), model="m", contents="x")
    assert API_KEY in claude.secrets()
    assert API_KEY in gemini.secrets()


# -- end to end: what Discord receives -------------------------------------------------------


@dataclass
class KeyedProvider(ScriptProvider):
    """A provider that knows its API key, as the adapters do."""

    def secrets(self) -> tuple[str, ...]:
        return (API_KEY,)


@asynccontextmanager
async def _discord(**options: object) -> AsyncIterator[tuple[DiscordEmulator, StreamContext]]:
    async with DiscordEmulator(token=BOT_TOKEN) as api, discord_client(api) as client:
        channel = await client.fetch_channel(api.channel_id)
        yield api, StreamContext(channel, **options)  # type: ignore[arg-type]


def _orchestrator() -> StreamOrchestrator:
    stops = StopRegistry(clock=asyncio.get_running_loop().time)
    return StreamOrchestrator(stops, secrets=[REGISTERED])


def _everything_sent(api: DiscordEmulator) -> str:
    return "\n".join(json.dumps(r.json, ensure_ascii=False) for r in api.requests)


_FAILURES = {
    "error-chunk": ErrorChunk(_error(_ECHO + f" {LATER}")),
    "error-original": ErrorChunk(
        ProviderError("api_error", "", original={"error": {"message": _ECHO + f" {LATER}"}})
    ),
    "raised": RuntimeError(_ECHO + f" {LATER}"),
}


@shell
@virtual_time
@pytest.mark.parametrize("failure", list(_FAILURES.values()), ids=list(_FAILURES))
async def test_G4_shell_an_echoed_token_key_value_or_private_url_never_reaches_discord(
    failure: object,
) -> None:
    async with _discord() as (api, context):
        orchestrator = _orchestrator()
        orchestrator.register_secret(LATER)
        provider = KeyedProvider(["Partial answer\n", failure])
        result = await orchestrator.stream_to_discord(
            provider, StreamConfig(delivery="messages"), context
        )
        assert result.status == "error"
        embeds = [m.embeds[0] for m in api.messages() if m.embeds]
        assert len(embeds) == 1  # the error was reported ...
        assert REDACTED in str(embeds[0].get("description"))
        # ... and nothing the bot sent holds a secret or the private address.
        _assert_hidden(_everything_sent(api), BOT_TOKEN, API_KEY, REGISTERED, LATER, "10.0.3.7")


@shell
@virtual_time
async def test_G4_shell_the_client_key_of_a_provider_without_a_hook_is_hidden() -> None:
    async with _discord() as (api, context):
        provider = ScriptProvider([ErrorChunk(_error(f"bad key {API_KEY}"))])
        provider.client = SimpleNamespace(api_key=API_KEY)  # type: ignore[attr-defined]
        result = await _orchestrator().stream_to_discord(
            provider, StreamConfig(delivery="messages"), context
        )
        assert result.status == "error"
        _assert_hidden(_everything_sent(api), API_KEY)


def test_G4_registering_again_escapes_nothing_twice() -> None:
    orchestrator = StreamOrchestrator(StopRegistry(clock=lambda: 0.0), secrets=['quo"ted-value'])
    before = orchestrator._secrets
    for _ in range(5):
        orchestrator.register_secret('quo"ted-value', "short")
    assert orchestrator._secrets == before
