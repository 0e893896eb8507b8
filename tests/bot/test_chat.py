"""`cordstream chat` and `run_turn` end to end: the real OpenAI SDK against a local model
server, the real shell, discord.py and the Discord emulator.

The model server asks for a tool, the tool runs, the second request carries its result in
OpenAI's format, and the second segment answers. One test runs the installed `cordstream`
command in a subprocess against a server this test suite started.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import discord
import pytest

from cordstream.domain import TokenUsage
from cordstream.domain.config import Delivery
from cordstream.shell.cli.chat import (
    ChatOptions,
    api_key,
    check,
    run_chat,
    tool_specs,
)
from cordstream.shell.cli.console import Failure
from cordstream.shell.testing.emulator import DiscordEmulator
from cordstream.shell.testing.openai_wire import answer, frame, tool_request, usage
from cordstream.shell.testing.sse import ModelServer, Reply, sse, sse_done

CORDSTREAM = Path(sys.executable).parent / "cordstream"


def options(server: ModelServer, prompt: str = "roll a d20", **changes: object) -> ChatOptions:
    base = ChatOptions(prompt=prompt, model="local-model", base_url=server.url + "/v1")
    return ChatOptions(**{**base.__dict__, **changes})


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_the_tool_loop_end_to_end_tool_request_tool_run_answer() -> None:
    printed: list[str] = []
    async with ModelServer(
        [tool_request("roll_dice", {"sides": 20, "count": 2}), answer("You rolled well!")]
    ) as server:
        turn = await run_chat(options(server), printed.append, environ={})
    assert turn.status == "completed"
    assert [segment.status for segment in turn.segments] == ["function_call", "completed"]
    (run,) = turn.tool_runs
    assert run.call.name == "roll_dice"
    assert run.call.arguments == {"sides": 20, "count": 2}
    rolled = json.loads(run.outcome.output)
    assert len(rolled["rolls"]) == 2
    assert all(1 <= roll <= 20 for roll in rolled["rolls"])
    # The function-call segment carries its usage; the turn sums both requests.
    assert turn.segments[0].usage == TokenUsage(15, 6)
    assert turn.usage == TokenUsage(35, 14)
    assert not turn.usage_estimated
    # The second request is the first plus the assistant's call and the tool's result.
    first, second = (seen.body for seen in server.seen)
    assert isinstance(first, dict)
    assert isinstance(second, dict)
    assert first["stream_options"] == {"include_usage": True}
    assert [tool["function"]["name"] for tool in first["tools"]] == ["roll_dice", "current_time"]
    assert second["messages"][:-2] == first["messages"]
    call_message, tool_message = second["messages"][-2:]
    assert call_message["role"] == "assistant"
    assert call_message["tool_calls"][0]["id"] == "call_1"
    assert json.loads(call_message["tool_calls"][0]["function"]["arguments"]) == {
        "sides": 20,
        "count": 2,
    }
    assert tool_message == {"role": "tool", "tool_call_id": "call_1", "content": run.outcome.output}
    transcript = "\n".join(printed)
    assert "You rolled well!" in transcript
    assert "status:          completed" in transcript
    assert "segments:        function_call → completed" in transcript


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_no_tools_and_a_system_prompt_reach_the_request() -> None:
    async with ModelServer([answer("Hello!")]) as server:
        turn = await run_chat(
            options(server, system="Be brief.", tools=False), lambda _: None, environ={}
        )
    assert turn.status == "completed"
    (seen,) = server.seen
    assert isinstance(seen.body, dict)
    assert "tools" not in seen.body
    assert seen.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "roll a d20"},
    ]
    assert seen.headers["Authorization"] == "Bearer not-needed"  # placeholder for local servers


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_provider_error_is_a_turn_status_not_a_crash() -> None:
    reply = Reply(status=404, body={"error": {"message": "model 'x' not found", "type": "x"}})
    printed: list[str] = []
    async with ModelServer([reply]) as server:
        opts = options(server)
        turn = await run_chat(
            ChatOptions(**{**opts.__dict__, "timeout": 5.0}), printed.append, environ={}
        )
    assert turn.status == "error"
    assert "Model Configuration Error" in "\n".join(printed)


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("delivery", ["live", "messages"])
async def test_the_turn_streams_with_the_chosen_delivery(delivery: Delivery) -> None:
    """A model that pauses after its first line, until that line is on the channel. Live: one
    message, created with the first text and edited to the whole answer, each change printed
    as the emulator accepts it; messages: a message per piece, each printed, none edited."""
    shown = asyncio.Event()
    printed: list[str] = []

    def out(line: str) -> None:
        printed.append(line)
        if " channel receives message" in line:
            shown.set()

    pieces = ["One line.\nAnother", " line.\nThe last line."]
    frames = [sse(frame({"role": "assistant", "content": ""}))]
    frames += [sse(frame({"content": piece})) for piece in pieces]
    frames += [sse(frame({}, "stop")), usage(20, 8), sse_done()]
    async with ModelServer([Reply(frames=frames, hang_after=2, resume=shown)]) as server:
        chat = options(server, "hi", tools=False, delivery=delivery)
        turn = await run_chat(chat, out, environ={})
    assert turn.status == "completed"
    assert f"{delivery} delivery" in printed[0]
    log = [line for line in printed if line.startswith("[")]
    assert log[0].endswith("as a reply: One line.")
    if delivery == "live":
        assert turn.messages_sent == 1
        assert " channel receives message 1 (" in log[0]
        assert all(" message 1 edited (" in line for line in log[1:])
        assert log[-1].endswith(f"edited ({len(''.join(pieces))} chars): The last line.")
    else:
        assert turn.messages_sent == len(log) > 1
        assert all(" channel receives message (" in line for line in log)
        assert not any("edited" in line for line in printed)


def test_the_key_comes_from_the_flag_then_the_environment_then_a_placeholder() -> None:
    assert api_key("openai", "flag", {"OPENAI_API_KEY": "env"}) == "flag"
    assert api_key("openai", None, {"OPENAI_API_KEY": "env"}) == "env"
    assert api_key("gemini", None, {"GOOGLE_API_KEY": "g"}) == "g"
    assert api_key("anthropic", None, {}) == "not-needed"


def test_command_line_problems_are_named() -> None:
    assert check(ChatOptions(prompt="p")) == "--model (or CORDSTREAM_MODEL) is required"
    assert check(ChatOptions(prompt="p", model="m", channel_id=1)) == (
        "--channel-id needs --discord-token (or DISCORD_TOKEN)"
    )
    assert check(ChatOptions(prompt="p", model="m")) is None


def test_tool_declarations_follow_each_providers_format() -> None:
    openai_tools = tool_specs("openai")
    assert openai_tools[0]["type"] == "function"
    assert openai_tools[0]["function"]["name"] == "roll_dice"
    anthropic_tools = tool_specs("anthropic")
    assert anthropic_tools[0]["input_schema"]["type"] == "object"
    (gemini_tool,) = tool_specs("gemini")
    names = [d["name"] for d in gemini_tool["function_declarations"]]
    assert names == ["roll_dice", "current_time"]


@pytest.mark.asyncio
async def test_the_cordstream_command_streams_a_local_model_into_the_emulator() -> None:
    """The installed entry point, in its own process, against a server this test started."""
    async with ModelServer([tool_request("current_time", {}), answer("It is time.")]) as server:
        process = await asyncio.create_subprocess_exec(
            str(CORDSTREAM),
            "chat",
            "--provider",
            "openai",
            "--model",
            "local-model",
            "--base-url",
            server.url + "/v1",
            "what time is it?",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    output = stdout.decode()
    assert process.returncode == 0, stderr.decode()
    assert "→ local Discord emulator" in output
    assert "It is time." in output
    assert "segments:        function_call → completed" in output
    assert "tool:            current_time({})" in output
    assert len(server.seen) == 2


@pytest.mark.asyncio
async def test_the_command_fails_clearly_without_a_model() -> None:
    process = await asyncio.create_subprocess_exec(
        str(CORDSTREAM),
        "chat",
        "hello",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 2
    assert "--model (or CORDSTREAM_MODEL) is required" in stderr.decode()


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_real_channel_gets_the_answer_with_a_token_and_a_channel_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The `--channel-id` path: its own discord.py client, REST only, no emulator of its own
    (here Discord's API address points at a local emulator, as `discord_client` does)."""
    printed: list[str] = []
    async with DiscordEmulator() as api, ModelServer([answer("Straight in.")]) as server:
        monkeypatch.setattr(discord.http.Route, "BASE", api.base_url)
        chat = options(server, channel_id=api.channel_id, discord_token=api.token, tools=False)
        turn = await run_chat(chat, printed.append, environ={})
        assert turn.status == "completed"
        assert [m.content for m in api.messages()] == ["Straight in."]
        assert api.messages()[0].message_reference is None  # no user message to reply to
    assert f"→ channel {api.channel_id}" in printed[0]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_wrong_token_is_refused_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    async with DiscordEmulator() as api, ModelServer([answer("never")]) as server:
        monkeypatch.setattr(discord.http.Route, "BASE", api.base_url)
        chat = options(server, channel_id=api.channel_id, discord_token="wrong", tools=False)
        with pytest.raises(Failure) as refused:
            await run_chat(chat, lambda _: None, environ={})
        assert server.seen == []  # the model was not asked
    assert str(refused.value) == (
        f"Discord at {api.base_url} refused the bot token: Improper token has been passed."
    )
    assert refused.value.status == 2
    assert isinstance(refused.value.__cause__, discord.LoginFailure)
