"""Slash commands and the Stop button (SPEC K1, K2, K3): a real discord.py bot, connected to the
emulator's gateway, answers `/ask` and users' messages with `stream_to_discord`, and the tests
play its users (`slash`, `user_says`, `click`); nothing calls a handler by hand.

Each test runs on looptime's virtual clock: the emulator, discord.py and the bot share one event
loop, loopback I/O is ready as soon as it is written, and the clock only moves when every task
waits on a timer (a slow model, the channel's pace, an injected `Delay`). Every wait is on a
condition (a result, an interaction's state, a frame), never a sleep to let something finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import discord
import pytest
from discord.ext import commands

from cordstream.domain import ErrorChunk, FunctionCall, FunctionCallChunk, ProviderError
from cordstream.shell import (
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    StreamResult,
    ToolOutcome,
    TurnResult,
    ratelimit,
    run_turn,
)
from cordstream.shell.buttons import STOP_BUTTON_PREFIX, STOP_REFUSED, stop_clicks
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing import (
    DiscordEmulator,
    GatewayFrame,
    GuildMember,
    InteractionRecord,
    ScriptProvider,
    local_bot,
)
from cordstream.shell.testing.emulator import Delay, SentMessage
from cordstream.shell.testing.gateway import EPHEMERAL
from tests.support.answers import as_written, fences_balanced
from tests.support.stage import Do, Hang, Sleep, Step

WAIT: Final = 3600.0  # seconds of loop time a test waits for a condition (an hour: virtual)
CURSOR: Final = "\u258c"
LIVE: Final = StreamConfig(delivery="live")


@pytest.fixture(autouse=True)
def channel_budget() -> Any:
    previous = ratelimit.set_channel_budget(ratelimit.DISCORD_CHANNEL)
    try:
        yield
    finally:
        ratelimit.set_channel_budget(previous)


@dataclass
class Asked:
    """One answer the bot streamed: its context, and the task that streams it (its result)."""

    context: StreamContext
    task: asyncio.Task[Any]


Run = Callable[[StreamOrchestrator, ScriptProvider, StreamConfig, StreamContext], Awaitable[Any]]


async def stream(
    orchestrator: StreamOrchestrator,
    provider: ScriptProvider,
    config: StreamConfig,
    context: StreamContext,
) -> StreamResult:
    return await orchestrator.stream_to_discord(provider, config, context)


@dataclass
class Bot:
    """A bot that answers `/ask` (and, with `messages`, every user's message) by running the
    next script of `scripts` with the context's knobs; each answer is queued in `answers`."""

    api: DiscordEmulator
    bot: commands.Bot
    orchestrator: StreamOrchestrator
    scripts: list[ScriptProvider]
    answers: asyncio.Queue[Asked] = field(default_factory=asyncio.Queue)

    async def next_answer(self) -> Asked:
        return await asyncio.wait_for(self.answers.get(), WAIT)

    async def result(self, asked: Asked | None = None) -> Any:
        """The result of `asked` (by default, the next answer's)."""
        asked = asked if asked is not None else await self.next_answer()
        return await asyncio.wait_for(asyncio.shield(asked.task), WAIT)


@asynccontextmanager
async def asking(
    scripts: Sequence[ScriptProvider] = (),
    *,
    config: StreamConfig = LIVE,
    api: DiscordEmulator | None = None,
    messages: bool = False,
    run: Run = stream,
    prepare: Callable[[discord.Interaction], Awaitable[object]] | None = None,
    **knobs: Any,
) -> AsyncIterator[Bot]:
    """A bot connected to the emulator's gateway (`local_bot`): `/ask question:` streams the
    next script into the interaction, answering its user; with `messages`, a user's message is
    answered in the channel, as a reply. `knobs` go to `StreamContext`; `run` is what the bot
    calls (by default `stream_to_discord`); `prepare`, what the bot does with an interaction
    before it hands it over."""
    loop = asyncio.get_running_loop()
    intents = discord.Intents.default()
    intents.message_content = True
    bot = commands.Bot(command_prefix="!", intents=intents)
    orchestrator = StreamOrchestrator(StopRegistry(clock=loop.time))
    emulator = api if api is not None else DiscordEmulator()
    state = Bot(emulator, bot, orchestrator, list(scripts))

    async def answer(context: StreamContext) -> None:
        provider = state.scripts.pop(0)
        task = asyncio.ensure_future(run(orchestrator, provider, config, context))
        await state.answers.put(Asked(context, task))
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():  # the handler's own task was cancelled: not the test's
                raise

    @bot.tree.command(description="Ask the model")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        if prepare is not None:
            await prepare(interaction)
        await answer(StreamContext(interaction, answering=interaction.user.id, **knobs))

    if messages:

        @bot.event
        async def on_message(message: discord.Message) -> None:
            if not message.author.bot:
                context = StreamContext(
                    message.channel, reply_to=message, answering=message.author.id, **knobs
                )
                await answer(context)

    async with local_bot(bot, emulator):
        yield state


def paced(text: str, *, size: int = 20, every: float = 0.1) -> list[Step]:
    """`text` in `size`-character chunks, one every `every` seconds."""
    steps: list[Step] = []
    for start in range(0, len(text), size):
        steps += [text[start : start + size], Sleep(every)]
    return steps


def buttons(message: SentMessage | None) -> list[str]:
    """The custom ids of the buttons on a message."""
    if message is None:
        return []
    return [
        item["custom_id"]
        for row in message.components
        for item in row.get("components", ())
        if item.get("type") == 2 and "custom_id" in item
    ]


def stop_button(message: SentMessage | None) -> str | None:
    found = [c for c in buttons(message) if c.startswith(STOP_BUTTON_PREFIX)]
    return found[0] if found else None


def public_texts(api: DiscordEmulator) -> list[str]:
    """What the channel holds: its messages' contents, embeds left out (F2)."""
    return [m.content for m in api.messages() if not m.embeds]


def interaction_bodies(api: DiscordEmulator) -> list[dict[str, Any]]:
    """The JSON bodies of the interaction requests that carry something to show."""
    return [
        r.json
        for r in api.requests
        if r.kind == "interaction"
        and isinstance(r.json, dict)
        and ("content" in r.json or "embeds" in r.json)
    ]


def settled(record: InteractionRecord) -> bool:
    """K1: acknowledged, and not "thinking" any more."""
    return record.state == "responded" and not record.thinking


def no_cursor(messages: Sequence[SentMessage]) -> bool:
    return not any(CURSOR in m.content for m in messages)


ANSWER: Final = "".join(
    f"Paragraph {n}: the model explains one more thing, at some length, so that the answer "
    "grows past one message and the rest goes to follow-ups.\n\n"
    for n in range(14)
)


# ---- K1: streaming into an interaction -------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K1_ask_is_deferred_then_the_original_response_grows_and_follow_ups_go_on() -> None:
    config = StreamConfig(delivery="live", max_message_length=600)
    provider = ScriptProvider([Sleep(2.0), *paced(ANSWER)])
    async with asking([provider], config=config) as s:
        alice = s.api.add_member("alice")
        asked = await s.api.slash(alice, "ask", {"question": "why?"})
        # Deferred at once, "thinking" while the model thinks.
        await asked.wait_until(lambda r: r.state != "pending")
        assert (asked.responses, asked.thinking) == ([5], True)
        result = await s.result()
        assert result.status == "completed"
        assert settled(asked)
        # The first message is the original response; the others are follow-ups.
        original = asked.original
        assert original is not None
        assert result.messages[0] == original.content
        assert [m.content for m in asked.followups] == list(result.messages[1:])
        assert len(result.messages) >= 3
        # Each was edited live (L), and what the channel holds is what the result says (F2).
        assert original.edits >= 3
        assert all(m.edits >= 1 for m in asked.followups[:-1])
        assert public_texts(s.api) == list(result.messages)
        assert no_cursor(s.api.messages())
        as_written(result.messages, ANSWER)
        assert asked.ephemeral == []
        # L2: every message request waited for the channel's turn; no 429 on any route.
        assert s.api.rate_limit_hits == {}
        # No typing indicator while Discord showed "thinking…".
        assert not [r for r in s.api.requests if r.kind == "typing"]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K1_an_error_before_any_text_replaces_the_thinking_state_publicly() -> None:
    async with asking([ScriptProvider([Sleep(1.0), RuntimeError("the model broke")])]) as s:
        asked = await s.api.slash(s.api.add_member("alice"), "ask", {"question": "q"})
        result = await s.result()
        assert result.status == "error"
        assert settled(asked)
        original = asked.original
        assert original is not None
        assert original.content == ""
        assert [e["description"] for e in original.embeds] == ["the model broke"]
        assert not original.flags & EPHEMERAL  # in the channel, where "thinking" was
        assert asked.followups == []
        assert s.api.messages() == [original]
        assert result.messages == ()


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("ephemeral_errors", [True, False])
async def test_K1_an_error_after_text_is_a_follow_up_ephemeral_by_default(
    ephemeral_errors: bool,
) -> None:
    error = ErrorChunk(ProviderError("api_error", "the provider failed"))
    script = ScriptProvider(["The answer begins.\n", Sleep(3.0), "and then", error])
    async with asking([script], ephemeral_errors=ephemeral_errors) as s:
        alice = s.api.add_member("alice")
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        result = await s.result()
        assert result.status == "error"
        assert settled(asked)
        assert result.messages == ("The answer begins.\nand then",)  # flushed first (B6)
        original = asked.original
        assert original is not None
        assert (original.content, original.embeds) == (result.messages[0], ())
        (embed_message,) = asked.followups
        assert "the provider failed" in embed_message.embeds[0]["description"]
        if ephemeral_errors:  # only alice sees it; the channel shows the answer alone
            assert asked.ephemeral == [embed_message]
            assert s.api.ephemeral_messages(alice) == [embed_message]
            assert s.api.messages() == [original]
        else:
            assert asked.ephemeral == []
            assert s.api.messages() == [original, embed_message]
        assert public_texts(s.api) == list(result.messages)


@dataclass(frozen=True)
class Ending:
    """How an answer that showed text ends: the script's last steps, the config, the status."""

    name: str
    steps: Callable[[Bot, GuildMember], list[Step]]
    status: str | None  # None: the caller cancelled (no result)
    config: StreamConfig = LIVE
    embed_follows: bool = False


ENDINGS: Final = [
    Ending("completed", lambda s, u: [" and the end."], "completed"),
    Ending(
        "stop",
        lambda s, u: [
            Do(lambda: s.orchestrator.request_stop(s.api.channel_id, str(u.id), answering=u.id)),
            Hang(),
        ],
        "stopped_by_user",
    ),
    Ending(
        "follow_up",
        lambda s, u: [
            Do(lambda: s.orchestrator.interrupt_own_answer(s.api.channel_id, u.id)),
            Hang(),
        ],
        "follow_up_interrupt",
    ),
    Ending(
        "timeout",
        lambda s, u: [Hang()],
        "timeout",
        StreamConfig(delivery="live", inactivity_timeout=20.0),
        embed_follows=True,
    ),
    Ending("error", lambda s, u: [RuntimeError("broke")], "error", embed_follows=True),
    Ending(
        "suppressed_error",
        lambda s, u: [RuntimeError("broke")],
        "error",
    ),
    Ending("cancelled", lambda s, u: [Hang()], None),
]


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("ending", ENDINGS, ids=[e.name for e in ENDINGS])
async def test_K1_K2_nothing_is_left_thinking_and_no_cursor_or_button_on_any_ending(
    ending: Ending,
) -> None:
    knobs: dict[str, Any] = {"stop_button": True}
    if ending.name == "suppressed_error":
        knobs["suppress_user_errors"] = True
    async with asking(config=ending.config, **knobs) as s:
        alice = s.api.add_member("alice")
        shown = "Some text shown first.\n"
        s.scripts.append(ScriptProvider([shown, Sleep(4.0), *ending.steps(s, alice)]))
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        answer = await s.next_answer()
        if ending.status is None:  # the bot's own code cancels the answer once text shows
            await asked.wait_until(lambda r: stop_button(r.original) is not None)
            answer.task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await answer.task
        else:
            result = await s.result(answer)
            assert result.status == ending.status
            assert public_texts(s.api) == list(result.messages)
        assert settled(asked)
        original = asked.original
        assert original is not None
        assert original.content.startswith("Some text shown first.")
        everything = s.api.messages() + asked.ephemeral
        assert no_cursor(everything)
        assert not any(buttons(m) for m in everything)  # the final edit took the button away
        embeds = [m for m in asked.followups if m.embeds]
        assert len(embeds) == ending.embed_follows
        assert all(m.flags & EPHEMERAL for m in embeds)


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([Hang()], id="timeout"),
        pytest.param([ErrorChunk(ProviderError("rate_limit", "slow down"))], id="provider_error"),
    ],
)
async def test_K1_a_timeout_or_provider_error_before_text_shows_in_place_of_thinking(
    steps: list[Step],
) -> None:
    config = StreamConfig(delivery="live", inactivity_timeout=30.0)
    async with asking([ScriptProvider([Sleep(1.0), *steps])], config=config) as s:
        asked = await s.api.slash(s.api.add_member("alice"), "ask", {"question": "q"})
        result = await s.result()
        assert result.status in ("timeout", "error")
        assert settled(asked)
        original = asked.original
        assert original is not None
        assert len(original.embeds) == 1
        assert asked.followups == []


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("how", ["empty", "stopped_before_text", "suppressed_error"])
async def test_K1_an_answer_that_shows_nothing_deletes_the_thinking_response(how: str) -> None:
    knobs: dict[str, Any] = {"suppress_user_errors": how == "suppressed_error"}
    async with asking(**knobs) as s:
        alice = s.api.add_member("alice")
        scripts: dict[str, list[Step]] = {
            "empty": [Sleep(2.0)],
            "stopped_before_text": [
                Do(lambda: s.orchestrator.request_stop(s.api.channel_id, str(alice.id))),
                Hang(),
            ],
            "suppressed_error": [RuntimeError("broke")],
        }
        steps = scripts[how]
        s.scripts.append(ScriptProvider(steps))
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        result = await s.result()
        assert result.messages == ()
        deleted = [r for r in s.api.requests if r.method == "DELETE"]
        assert [r.path.rsplit("/", 1)[-1] for r in deleted][:1] == ["@original"]
        assert asked.original is None  # deleted: nothing shown, nothing stays
        assert s.api.messages() == []
        assert not asked.thinking


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K1_an_answer_outlasting_the_token_goes_on_in_the_channel_and_loses_nothing() -> None:
    # Discord's 15 minutes (the emulator's default `interaction_ttl`): a slow model writes for
    # about 20 minutes of loop time, then stops answering (a timeout, after the token died).
    text = "".join(
        f"Minute {n}: the model is slow today, but it keeps writing its long answer.\n"
        for n in range(20)
    )
    steps: list[Step] = []
    for line in text.splitlines(keepends=True):
        steps += [line, Sleep(60.0)]
    config = StreamConfig(delivery="live", max_message_length=400, inactivity_timeout=90.0)
    async with asking([ScriptProvider([*steps, Hang()])], config=config) as s:
        alice = s.api.add_member("alice")
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        result = await s.result()
        assert asked.expired
        assert result.status == "timeout"
        # Nothing lost: the channel holds the whole answer, as the result says (F2).
        assert public_texts(s.api) == list(result.messages)
        as_written(result.messages, text)
        assert no_cursor(s.api.messages())
        # The interaction's routes answered 401 once the token was dead; the same request then
        # went through the channel, and so did every later one.
        refused = [r for r in s.api.requests if r.kind == "interaction" and r.status == 401]
        assert refused
        assert all(r.at >= asked.expires_at for r in refused)
        after = [r for r in s.api.requests if r.at >= refused[0].at and r.kind != "typing"]
        assert [r.kind for r in after[1:]]
        assert all(r.kind != "interaction" for r in after[1:])
        assert {"send", "edit"} <= {r.kind for r in after}
        # The messages made before the expiry are the interaction's (the original response and
        # follow-ups); the one streaming then was edited on (its final edit, the cursor gone,
        # included) through the channel's route; the rest are the channel's own messages.
        made = s.api.messages()
        ours = {m.id for m in made if m.interaction_id == asked.id}
        assert asked.original is not None
        assert asked.original.id in ours
        assert [m.interaction_id for m in made if not m.embeds] == sorted(
            (m.interaction_id for m in made if not m.embeds),
            key=lambda i: i is None,
        )  # the interaction's first, then the channel's
        assert any(m.interaction_id is None for m in made if not m.embeds)
        edited = {
            int(r.path.rsplit("/", 1)[-1])
            for r in s.api.requests
            if r.kind == "edit" and r.at >= asked.expires_at
        }
        assert edited & ours
        # The timeout embed came after the token died: public, in the channel.
        embeds = [m for m in s.api.messages() if m.embeds]
        assert len(embeds) == 1
        assert embeds[0].interaction_id is None
        assert asked.ephemeral == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K3_allowed_mentions_go_with_every_interaction_request_and_nobody_is_pinged() -> None:
    async with asking(config=StreamConfig(delivery="live", max_message_length=300)) as s:
        alice, bob = s.api.add_member("alice"), s.api.add_member("bob")
        pings = f"@everyone, @here, <@{bob.id}> and <@&{s.api.gateway.moderator_role_id}>"
        text = "".join(f"Line {n} calls {pings}.\n" for n in range(8))
        error = ErrorChunk(ProviderError("api_error", f"failed for {pings}"))
        s.scripts.append(ScriptProvider([*paced(text, every=0.5), error]))
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        result = await s.result()
        assert result.status == "error"
        assert len(asked.followups) >= 2  # follow-ups, and the ephemeral embed
        bodies = interaction_bodies(s.api)
        assert len(bodies) >= 5  # the original's edits, follow-ups and their edits, the embed
        for body in bodies:
            assert body.get("allowed_mentions") == {"parse": []}  # AllowedMentions.none()
        for message in s.api.messages() + asked.ephemeral:
            assert not message.pings.anyone


@dataclass
class Conversation(ScriptProvider):
    """One script per segment of a tool-loop turn; `after_tools` moves to the next."""

    later: Sequence[Sequence[Step]] = ()

    def after_tools(self, outcomes: Sequence[ToolOutcome]) -> Conversation:
        return Conversation(list(self.later[0]), later=self.later[1:])


async def look_up(arguments: Mapping[str, object]) -> object:
    await asyncio.sleep(10.0)  # a slow tool: the interaction stays "thinking" meanwhile
    return {"found": "42"}


def turning(**options: Any) -> Run:
    """What the bot runs: a tool-loop turn (`run_turn`) with the `look_up` tool and `options`."""

    async def turn(
        orchestrator: StreamOrchestrator,
        provider: ScriptProvider,
        config: StreamConfig,
        context: StreamContext,
    ) -> TurnResult:
        assert isinstance(provider, Conversation)
        return await run_turn(
            orchestrator, provider, context, tools={"look_up": look_up}, config=config, **options
        )

    return turn


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K1_a_tool_loop_turn_thinks_while_its_tools_run_then_answers_in_place() -> None:
    call = FunctionCallChunk(FunctionCall("look_up", {}, id="c1"))
    records: list[InteractionRecord] = []
    seen: list[tuple[bool, str | None]] = []

    def after_the_tool() -> None:  # what the user saw while the tool ran
        original = records[0].original
        seen.append((records[0].thinking, None if original is None else original.content))

    conversation = Conversation(
        [Sleep(1.0), call],
        later=[[Do(after_the_tool), "The answer is 42.\n", Sleep(2.0), "Anything else?"]],
    )
    async with asking([conversation], run=turning()) as s:
        asked = await s.api.slash(s.api.add_member("alice"), "ask", {"question": "q"})
        records.append(asked)
        result = await s.result()
        # The first segment ended on a function call with nothing shown: still thinking while
        # the tool ran (the answer was not over).
        assert seen == [(True, "")]
        assert isinstance(result, TurnResult)
        assert result.status == "completed"
        assert [segment.status for segment in result.segments] == ["function_call", "completed"]
        assert settled(asked)
        original = asked.original
        assert original is not None
        assert original.content == "The answer is 42.\nAnything else?"
        assert asked.followups == []
        assert public_texts(s.api) == [original.content]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K1_a_turn_that_ends_on_its_tool_limit_leaves_nothing_thinking() -> None:
    call = FunctionCallChunk(FunctionCall("look_up", {}, id="c1"))
    conversation = Conversation([call], later=[[call]])
    one_round = turning(max_tool_rounds=1)
    async with asking([conversation], config=StreamConfig(), run=one_round) as s:
        asked = await s.api.slash(s.api.add_member("alice"), "ask", {"question": "q"})
        result = await s.result()
        assert result.status == "tool_round_limit"
        deleted = [r.path for r in s.api.requests if r.method == "DELETE"]
        assert deleted[:1] == [
            f"/api/v10/webhooks/{s.api.user_id}/{asked.token}/messages/@original"
        ]
        assert asked.original is None
        assert not asked.thinking


# ---- K2: the Stop button -------------------------------------------------------------------------


def interaction_created(record: InteractionRecord) -> Callable[[GatewayFrame], bool]:
    """The gateway's INTERACTION_CREATE for `record`: the moment its click reaches the bot."""
    return lambda frame: (
        frame.sent
        and frame.payload.get("t") == "INTERACTION_CREATE"
        and frame.payload["d"]["id"] == str(record.id)
    )


def stored_views(bot: commands.Bot) -> list[object]:
    """The views discord.py's view store still dispatches clicks to (discord.py 2.x's private
    `ConnectionState._view_store`; no public API lists non-persistent views)."""
    store = bot._connection._view_store
    return [*store._views.values(), *store._synced_message_views.values()]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K2_the_askers_click_stops_the_answer_within_50_ms_before_the_click_is_answered() -> (
    None
):
    provider = ScriptProvider(["The answer starts", Sleep(2.0), " and goes on", Hang()])
    async with asking([provider], messages=True, stop_button=True) as s:
        alice = s.api.add_member("alice")
        await s.api.user_says(alice, "Tell me everything.")
        answer = await s.next_answer()
        live = await s.api.wait_for_message(lambda m: "goes on" in m.content, timeout=WAIT)
        button = stop_button(live)
        assert button is not None
        assert CURSOR in live.content
        # Discord answers the click's acknowledgement slowly: the stop must not wait for it.
        s.api.inject(Delay(2.0), route="interaction")
        pressed = await s.api.click(alice, live.id, button)
        result = await s.result(answer)
        (frame,) = await s.api.gateway.wait_frames(interaction_created(pressed))
        assert provider.closed_at is not None
        assert provider.closed_at - frame.at <= 0.050  # K2: within 50 ms of reaching the bot
        await pressed.wait_until()
        assert pressed.responses == [6]  # acknowledged as a deferred update...
        assert asyncio.get_running_loop().time() - frame.at >= 2.0  # ...2 s later, after it
        # A user stop (C9, C10): the text received is delivered, and the click comes back.
        assert (result.status, result.stop_reason) == ("stopped_by_user", "user_request")
        assert isinstance(result.stop_context, discord.Interaction)
        assert result.stop_context.id == pressed.id
        assert result.messages == ("The answer starts and goes on",)
        (final,) = s.api.messages()
        assert (final.content, buttons(final)) == (result.messages[0], [])  # the button went
        assert pressed.ephemeral == []
        assert stored_views(s.bot) == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K2_a_third_users_click_is_refused_ephemerally_and_the_answer_goes_on() -> None:
    text = "The answer starts.\n" + "".join(f"Then point {n}.\n" for n in range(10))
    provider = ScriptProvider(paced(text, every=1.0))
    async with asking([provider], stop_button=True) as s:
        alice, bob = s.api.add_member("alice"), s.api.add_member("bob")
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        await asked.wait_until(lambda r: stop_button(r.original) is not None)
        assert asked.original is not None
        button = stop_button(asked.original)
        assert button is not None
        refused = await s.api.click(bob, asked.original.id, button)
        await refused.wait_until(lambda r: r.state == "responded")
        assert [m.content for m in refused.ephemeral] == [STOP_REFUSED]
        assert s.api.ephemeral_messages(bob) == refused.ephemeral
        assert s.api.ephemeral_messages(alice) == []
        result = await s.result()
        assert result.status == "completed"  # bob's click stopped nothing
        assert "end" in provider.reached
        assert result.stop_context is None
        as_written(result.messages, text)
        assert public_texts(s.api) == list(result.messages)
        assert not any(buttons(m) for m in s.api.messages())
        assert stored_views(s.bot) == []


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K2_a_moderators_click_stops_the_answer_to_someone_else() -> None:
    provider = ScriptProvider(["Alice's answer begins", Sleep(2.0), " here", Hang()])
    async with asking([provider], stop_button=True) as s:
        alice = s.api.add_member("alice")
        carol = s.api.add_member("carol", manage_messages=True)
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        await asked.wait_until(lambda r: r.original is not None and "here" in r.original.content)
        assert asked.original is not None
        button = stop_button(asked.original)
        assert button is not None
        pressed = await s.api.click(carol, asked.original.id, button)
        result = await s.result()
        (frame,) = await s.api.gateway.wait_frames(interaction_created(pressed))
        assert provider.closed_at is not None
        assert provider.closed_at - frame.at <= 0.050
        assert result.status == "stopped_by_user"
        assert isinstance(result.stop_context, discord.Interaction)
        assert result.stop_context.user.id == carol.id
        await pressed.wait_until()
        assert (pressed.responses, pressed.ephemeral) == ([6], [])
        assert settled(asked)
        assert asked.original is not None
        assert (asked.original.content, buttons(asked.original)) == (
            "Alice's answer begins here",
            [],
        )


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K2_N1_stop_clicks_leave_a_click_on_this_processes_own_button_to_its_view() -> None:
    """A process that streams answers and also takes other processes' Stop clicks
    (`stop_clicks`): a click on its own answer's button is handled once, by the view."""
    provider = ScriptProvider(["Alice's answer begins", Sleep(2.0), " here", Hang()])
    async with asking([provider], stop_button=True) as s:
        stops = s.orchestrator.stops
        s.bot.add_dynamic_items(stop_clicks(stops))
        requested: list[str | None] = []
        request_stop = stops.request_stop

        def counted(channel_id: int, requester_id: str | None = None, *a: Any, **k: Any) -> bool:
            requested.append(requester_id)
            return request_stop(channel_id, requester_id, *a, **k)

        stops.request_stop = counted  # type: ignore[method-assign]
        alice = s.api.add_member("alice")
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        await asked.wait_until(lambda r: r.original is not None and "here" in r.original.content)
        assert asked.original is not None
        button = stop_button(asked.original)
        assert button is not None
        pressed = await s.api.click(alice, asked.original.id, button)
        result = await s.result()
        await pressed.wait_until()
        # The task discord.py started for `stop_clicks`' item (before the view's): its end.
        clicks = [t for t in asyncio.all_tasks() if t.get_name().startswith("discord-ui-dynamic")]
        if clicks:
            await asyncio.wait(clicks)
        assert result.status == "stopped_by_user"
        assert requested == [str(alice.id)]  # once: the view's
        assert pressed.responses == [6]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K2_B11_the_button_rides_only_on_the_streaming_message_and_nothing_outlives_it() -> (
    None
):
    config = StreamConfig(delivery="live", max_message_length=300)
    text = "".join(f"Sentence {n} of a long answer, written slowly.\n" for n in range(30))
    provider = ScriptProvider(paced(text, every=0.2))
    async with asking([provider], config=config, messages=True, stop_button=True) as s:
        alice = s.api.add_member("alice")
        moments: list[list[tuple[bool, bool]]] = []

        def note(_: object) -> None:  # each message: (shows a button, shows the cursor)
            moments.append([(bool(buttons(m)), CURSOR in m.content) for m in s.api.messages()])

        remove = s.api.on_change(note)
        before = {t for t in asyncio.all_tasks() if not t.done()}
        await s.api.user_says(alice, "A long one, please.")
        result = await s.result()
        remove()
        assert result.status == "completed"
        assert len(result.messages) >= 3
        # At every moment, at most one message carries the button, the one still streaming.
        assert all(sum(button for button, _ in moment) <= 1 for moment in moments)
        assert all(cursor for moment in moments for button, cursor in moment if button)
        assert sum(1 for moment in moments if any(b for b, _ in moment)) >= len(result.messages)
        assert not any(buttons(m) for m in s.api.messages())
        assert public_texts(s.api) == list(result.messages)
        # B11: no view left for discord.py to dispatch to, no task left running.
        assert stored_views(s.bot) == []
        leftover = {
            t
            for t in asyncio.all_tasks()
            if not t.done()
            and t not in before
            and t is not asyncio.current_task()
            # the emulator's server keeps a new keep-alive connection of the client open
            and getattr(t.get_coro(), "__qualname__", "") != "RequestHandler.start"
        }
        if leftover:  # discord.py's event tasks finishing now (the bot's handler among them)
            await asyncio.wait(leftover, timeout=5.0)
        assert all(t.done() for t in leftover), [t for t in leftover if not t.done()]


# ---- K1, K3: what else holds for an interaction --------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("ephemeral", [False, True])
async def test_K1_an_interaction_the_bot_deferred_itself_is_answered_in_its_original_response(
    ephemeral: bool,
) -> None:
    async def defer(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True, ephemeral=ephemeral)

    provider = ScriptProvider(
        ["Only for ", Sleep(2.0), "you, maybe.", Sleep(2.0), RuntimeError("x")]
    )
    async with asking([provider], prepare=defer) as s:
        alice = s.api.add_member("alice")
        asked = await s.api.slash(alice, "ask", {"question": "q"})
        result = await s.result()
        assert result.status == "error"
        assert asked.responses == [5]  # the bot's own deferral; cordstream made none
        assert settled(asked)
        original = asked.original
        assert original is not None
        assert original.content == "Only for you, maybe."
        assert bool(original.flags & EPHEMERAL) == ephemeral  # its visibility, kept
        assert s.api.messages() == ([] if ephemeral else [original])
        (embed,) = asked.followups
        assert embed.flags & EPHEMERAL
        assert embed.embeds


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K3_fences_stay_balanced_and_the_send_message_limit_counts_follow_ups() -> None:
    code = "```python\n" + "".join(f"print({n})  # line {n} of the code\n" for n in range(40))
    text = "Here is the code:\n\n" + code + "```\nThat was all of it.\n" * 3
    config = StreamConfig(delivery="live", max_message_length=300, send_message_limit=3)
    async with asking([ScriptProvider(paced(text))], config=config) as s:
        asked = await s.api.slash(s.api.add_member("alice"), "ask", {"question": "q"})
        result = await s.result()
        assert (result.status, result.stop_reason) == ("stopped_by_user", "send_message_limit")
        assert result.messages_sent == 3  # the original response and two follow-ups (F3, L8)
        assert len(asked.followups) == 2
        assert all(fences_balanced(m) for m in result.messages)  # E3
        assert all(len(m) <= 300 for m in result.messages)  # E7
        assert public_texts(s.api) == list(result.messages)
        assert asked.ephemeral == []  # a quiet stop: no embed
        assert settled(asked)
        assert no_cursor(s.api.messages())


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_K3_L9_a_moderator_deleting_the_original_response_ends_the_stream_quietly() -> None:
    async with asking() as s:
        records: list[InteractionRecord] = []

        def delete() -> None:
            original = records[0].original
            assert original is not None
            s.api.delete_message(original.id)

        provider = ScriptProvider(
            ["The answer begins", Sleep(3.0), Do(delete), " and goes on", Hang()]
        )
        s.scripts.append(provider)
        asked = await s.api.slash(s.api.add_member("alice"), "ask", {"question": "q"})
        records.append(asked)
        result = await s.result()
        assert (result.status, result.stop_reason) == ("stopped_by_user", "message_deleted")
        assert result.messages == ()  # what the channel holds (F2)
        assert s.api.messages() == []
        assert provider.closed  # B10
