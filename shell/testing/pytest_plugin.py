"""cordstream's pytest plugin: the test kit as fixtures, so a bot's test is a few lines.

Installed with `pip install "cordstream[testing]"` (pytest, pytest-asyncio, looptime); pytest
loads it by itself (entry point `pytest11`, name `cordstream`; `-p no:cordstream` turns it off).
Two fixtures, each closed after the test:

- `local_discord`: a `LocalDiscord` (`api, client, channel = local_discord`), the emulator, a
  client logged into it and its channel (`cordstream.shell.testing.local_discord`);
- `local_bot`: a `LocalBot`; `api = await local_bot(MyBot())` runs the bot on the local
  gateway until the test ends and returns the emulator (`cordstream.shell.testing.local_bot`).
  The test plays the users (`api.user_says`, `api.slash`, `api.click`) and waits for the
  bot's answer with `await api.wait_for_text(...)`. With both fixtures, give the bot the same
  Discord (discord.py's address is process-wide): `await local_bot(bot, local_discord.api)`.

Async tests run on pytest-asyncio, and the plugin leaves how they run to it: a plugin that
every pytest run of the environment loads must not change other tests. In its default (strict)
mode a test is marked: `@pytest.mark.asyncio`, or `pytestmark = pytest.mark.asyncio` for a
module, or `asyncio_mode = "auto"` in the project's pytest configuration. A test that uses the
fixtures without being run by pytest-asyncio fails with a message saying so, instead of being
skipped. pytest-asyncio warns until `asyncio_default_fixture_loop_scope` is set: the fixtures
here use the test's own loop (`"function"`), which is the value to set.

Virtual time: with `@pytest.mark.looptime` on a test (or `--looptime` on the command line, for
every test) the event loop's clock jumps ahead whenever every task is waiting, so discord.py's
start-up waits, live delivery's cadence, retries and timeouts cost no real seconds, and a
timeout in a test is loop time. looptime applies to the test's body, not to fixtures; that is
why `local_bot` starts the bot inside the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from cordstream.shell.testing import LocalBot, LocalDiscord, local_discord


@pytest_asyncio.fixture(name="local_discord", loop_scope="function")
async def local_discord_fixture(request: pytest.FixtureRequest) -> AsyncIterator[LocalDiscord]:
    """A local Discord: the emulator, a client logged into it, its channel."""
    _run_by_asyncio(request, "local_discord")
    async with local_discord() as discord:
        yield discord


@pytest_asyncio.fixture(name="local_bot", loop_scope="function")
async def local_bot_fixture(request: pytest.FixtureRequest) -> AsyncIterator[LocalBot]:
    """Runs bots on the local Discord: `api = await local_bot(MyBot())`."""
    _run_by_asyncio(request, "local_bot")
    bots = LocalBot()
    try:
        yield bots
    finally:
        await bots.aclose()


def _run_by_asyncio(request: pytest.FixtureRequest, fixture: str) -> None:
    if request.node.get_closest_marker("asyncio") is None:
        pytest.fail(
            f"{request.node.name} uses the {fixture} fixture but is not run by pytest-asyncio: "
            "mark it `@pytest.mark.asyncio` (or set `asyncio_mode = auto`)",
            pytrace=False,
        )
