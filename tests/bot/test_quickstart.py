"""The kit's quick-start bot (`quickstart_bot.py`), run as its author would test it."""

import openai
import pytest

from cordstream.shell.testing import ModelServer, local_bot
from cordstream.shell.testing.openai_wire import answer
from tests.bot.quickstart_bot import make_bot

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_the_bot_answers_a_mention_and_ask() -> None:
    async with ModelServer(route=lambda request: answer("Hello, alice!")) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="test")
        async with local_bot(make_bot(client, "test-model")) as api:
            alice = api.add_member("alice")
            asked = await api.user_says(alice, f"<@{api.user_id}> hi!")
            reply = await api.wait_for_message(lambda m: m.content == "Hello, alice!")
            assert reply.message_reference is not None
            assert reply.message_reference["message_id"] == asked  # a reply to alice
            command = await api.slash(alice, "ask", {"question": "hi again"})
            await api.wait_for_message(
                lambda m: m.interaction_id == command.id and m.content == "Hello, alice!"
            )
        await client.close()
