"""An interaction's faults (SPEC K1; docs/contract.md K, "A deferral that fails" and "The
token's expiry"): the paths of `cordstream.shell.target.InteractionTarget` that only a fault
reaches, each driven through the real stack, as `tests/shell/test_interactions.py` does: a real
discord.py bot connected to the emulator's gateway answers `/ask` with `stream_to_discord`, the
test plays its user and Discord's faults, and looks at what the channel shows.

- the deferral refused as already acknowledged (40060, another process of the bot answered):
  the answer is delivered as follow-ups only;
- the deferral refused otherwise (the 3 s deadline missed, 10062; the token dead; the
  connection lost): the whole answer is delivered in the channel from its first message;
- the token expiring while the original response shows "thinking": that message is deleted
  through the channel and the first message sent anew there;
- the token found dead when a stream that showed nothing settles: the thinking response is
  deleted through the channel.

Every test runs on looptime's virtual clock (a model that thinks for 16 minutes takes no real
time) and waits on conditions (a result, an interaction's state), never a sleep to let
something finish.
"""

from __future__ import annotations

from typing import Any, Final

import aiohttp
import discord
import pytest

from cordstream.shell import StreamConfig, StreamResult
from cordstream.shell.testing import (
    Delay,
    DiscordEmulator,
    Do,
    Drop,
    Fault,
    Hang,
    InteractionRecord,
    RecordedRequest,
    ScriptProvider,
    Sleep,
    Step,
)
from tests.shell.test_interactions import (
    WAIT,
    asking,
    channel_budget,  # noqa: F401  (autouse: Discord's pace of a channel, as there)
    no_cursor,
    paced,
    public_texts,
    settled,
)
from tests.support.answers import as_written

CONFIG: Final = StreamConfig(delivery="live", max_message_length=300)
TEXT: Final = "".join(
    f"Point {n}: the model explains one more thing, at some length, so that the answer needs "
    "more than one message.\n"
    for n in range(8)
)
TOKEN_LIFE: Final = 15 * 60.0  # Discord's (the emulator's default `interaction_ttl`)
LONGER: Final = TOKEN_LIFE + 60.0  # a model that thinks past the token's life
PATIENT: Final = StreamConfig(
    delivery="live", max_message_length=300, inactivity_timeout=2 * TOKEN_LIFE
)


def interaction_requests(api: DiscordEmulator) -> list[RecordedRequest]:
    return [r for r in api.requests if r.kind == "interaction"]


def channel_route(api: DiscordEmulator, message_id: int) -> str:
    """The path of a message through the channel's routes."""
    return f"/api/v10/channels/{api.channel_id}/messages/{message_id}"


def original_route(api: DiscordEmulator, record: InteractionRecord) -> str:
    """The path of an interaction's original response through its token."""
    return f"/api/v10/webhooks/{api.user_id}/{record.token}/messages/@original"


async def thinking_id(record: InteractionRecord) -> int:
    """The id of the deferral's "thinking" message, once it shows."""
    await record.wait_until(lambda r: r.thinking, timeout=WAIT)
    assert record.original_id is not None
    return record.original_id


def assert_whole_in_the_channel(s: Any, asked: InteractionRecord, result: StreamResult) -> None:
    """K1, F2: the whole answer is in the channel as the channel's own messages, exactly what
    the result says, no cursor, and nothing left "thinking"."""
    assert len(result.messages) >= 3
    as_written(result.messages, TEXT)
    assert public_texts(s.api) == list(result.messages)
    assert all(m.interaction_id is None for m in s.api.messages())
    assert no_cursor(s.api.messages())
    assert asked.original is None
    assert not asked.thinking


# ---- K1: a deferral that fails ---------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("other", [4, 5], ids=["answered_with_a_message", "deferred"])
async def test_K1_a_deferral_already_acknowledged_elsewhere_answers_in_follow_ups_only(
    other: int,
) -> None:
    # Another process of the bot answers the interaction first (a message, type 4, or its own
    # deferral, type 5), through Discord's HTTP API: this bot's discord.py never hears of it,
    # so cordstream defers, and Discord refuses that (400 40060).
    api = DiscordEmulator()

    async def answered_elsewhere(interaction: discord.Interaction) -> None:
        data = {"content": "On it.", "allowed_mentions": {"parse": []}} if other == 4 else {}
        url = f"{api.base_url}/interactions/{interaction.id}/{interaction.token}/callback"
        body = {"type": other, "data": data}
        async with aiohttp.ClientSession() as http, http.post(url, json=body) as reply:
            assert reply.status == 204

    script = ScriptProvider([Sleep(1.0), *paced(TEXT)])
    async with asking([script], config=CONFIG, api=api, prepare=answered_elsewhere) as s:
        asked = await s.api.slash(s.api.add_member("alice"), "ask", {"question": "q"})
        result = await s.result()
        assert result.status == "completed"
        callbacks = [r for r in interaction_requests(s.api) if r.path.endswith("/callback")]
        assert [r.status for r in callbacks] == [204, 400]  # the other process's, cordstream's
        assert asked.responses == [other]
        # The answer came in follow-ups only (a pending deferral folds the first one into its
        # original response, as Discord does), all of it, and nothing stayed "thinking".
        assert len(result.messages) >= 3
        as_written(result.messages, TEXT)
        original = asked.original
        assert original is not None
        if other == 4:
            assert original.content == "On it."
            assert [m.content for m in asked.followups] == list(result.messages)
            assert public_texts(s.api) == ["On it.", *result.messages]
        else:
            assert original.content == result.messages[0]
            assert [m.content for m in asked.followups] == list(result.messages[1:])
            assert public_texts(s.api) == list(result.messages)
        assert all(m.interaction_id == asked.id for m in s.api.messages())
        assert settled(asked)
        assert no_cursor(s.api.messages())
        assert asked.ephemeral == []


FAILED_DEFERRALS: Final[list[Any]] = [
    pytest.param(Delay(4.0), 404, id="deadline_missed"),  # it reaches Discord after 3 s: 10062
    pytest.param(None, 401, id="token_dead"),  # 50027
    pytest.param(Drop(), None, id="connection_lost"),  # no answer at all
]


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(("fault", "status"), FAILED_DEFERRALS)
async def test_K1_a_deferral_that_fails_delivers_the_whole_answer_in_the_channel(
    fault: Fault | None, status: int | None
) -> None:
    api = DiscordEmulator()

    async def expire(interaction: discord.Interaction) -> None:
        api.expire_interaction(interaction.id)  # the token is dead before the stream starts

    prepare = expire if fault is None else None
    script = ScriptProvider([Sleep(1.0), *paced(TEXT)])
    async with asking([script], config=CONFIG, api=api, prepare=prepare) as s:
        if fault is not None:
            s.api.inject(fault, route="interaction")  # the deferral's callback
        asked = await s.api.slash(s.api.add_member("alice"), "ask", {"question": "q"})
        result = await s.result()
        assert result.status == "completed"
        # The deferral was the only request through the interaction, and it failed.
        (deferral,) = interaction_requests(s.api)
        assert deferral.path.endswith("/callback")
        assert deferral.status == status
        assert asked.responses == []
        # From its first message on, the whole answer is in the channel, as the channel's own
        # messages; what the channel holds is what the result says (F2), and no "thinking".
        assert_whole_in_the_channel(s, asked, result)


# ---- K1: the token's expiry ------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K1_a_token_expiring_while_thinking_deletes_that_message_and_sends_anew() -> None:
    # The model thinks past the token's life: the first message cannot fill the "thinking"
    # original response any more (only the token takes a message out of "thinking").
    script = ScriptProvider([Sleep(LONGER), *paced(TEXT)])
    async with asking([script], config=PATIENT) as s:
        asked = await s.api.slash(s.api.add_member("alice"), "ask", {"question": "q"})
        thinking = await thinking_id(asked)
        result = await s.result()
        assert result.status == "completed"
        assert asked.expired
        # The first message tried the original response, was refused (401), the thinking
        # message was deleted through the channel, and the message sent anew there.
        refused = [r for r in interaction_requests(s.api) if r.status == 401]
        assert [(r.method, r.path) for r in refused] == [("PATCH", original_route(s.api, asked))]
        deletions = [(r.path, r.status) for r in s.api.requests if r.method == "DELETE"]
        assert deletions == [(channel_route(s.api, thinking), 204)]
        history = s.api.history()
        assert [(c.kind, c.message_id) for c in history[:2]] == [
            ("create", thinking),
            ("delete", thinking),
        ]
        assert all(c.message_id != thinking for c in history[2:])
        # Nothing lost: the channel holds the whole answer, as the result says (F2), as the
        # channel's own messages, and nothing is left "thinking".
        assert_whole_in_the_channel(s, asked, result)


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("how", ["empty", "stopped_before_text"])
async def test_K1_a_token_found_dead_when_settling_deletes_the_thinking_response_in_the_channel(
    how: str,
) -> None:
    # The model thinks past the token's life, then answers nothing (or the user stops it
    # first): the answer shows nothing, and the token is dead when the stream settles.
    async with asking(config=PATIENT) as s:
        alice = s.api.add_member("alice")
        ends: dict[str, list[Step]] = {
            "empty": [],
            "stopped_before_text": [
                Do(lambda: s.orchestrator.request_stop(s.api.channel_id, str(alice.id))),
                Hang(),
            ],
        }
        s.scripts.append(ScriptProvider([Sleep(LONGER), *ends[how]]))
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        thinking = await thinking_id(asked)
        result = await s.result()
        assert result.messages == ()
        assert asked.expired
        # Deleting it through the token was refused (401); through the channel it went.
        deletions = [(r.path, r.status) for r in s.api.requests if r.method == "DELETE"]
        assert deletions == [
            (original_route(s.api, asked), 401),
            (channel_route(s.api, thinking), 204),
        ]
        assert [(c.kind, c.message_id) for c in s.api.history()] == [
            ("create", thinking),
            ("delete", thinking),
        ]
        assert s.api.messages() == []
        assert asked.original is None
        assert not asked.thinking
