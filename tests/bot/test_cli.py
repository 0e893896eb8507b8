"""The `cordstream` command behaves like a tool: one line on stderr and an exit status, never
a traceback, and that line before anything else the command prints. Ctrl-C at any moment
(loading, starting, streaming), unreachable servers, bad options (named by their subcommand),
help on every option, `--version`, a missing SDK, an emulator that cannot listen, and a chat
that shows each message (live delivery: each edit too) as the channel receives it.

The Ctrl-C and progress tests run the installed command in its own process, against servers
this test started on 127.0.0.1, and wait on what the process prints or loads (never a fixed
time to let it get somewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import importlib.metadata
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import aiohttp.web
import discord
import pytest

import cordstream
from cordstream.shell.cli import build_parser, chat, demo, main
from cordstream.shell.cli.chat import ChatOptions
from cordstream.shell.config import StreamConfig
from cordstream.shell.testing.openai_wire import frame, usage
from cordstream.shell.testing.sse import ModelServer, Reply, sse, sse_done

CORDSTREAM = Path(sys.executable).parent / "cordstream"
# Unclosed sockets, transports and sessions show up on stderr, where the tests look for them.
ENV = {"PATH": "/usr/bin:/bin", "PYTHONWARNINGS": "always::ResourceWarning"}


def _sigint_as_a_terminal_sends_it() -> None:
    """A shell starts a background job with SIGINT ignored, and exec keeps it ignored; the
    command under test gets Ctrl-C's default disposition, as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@asynccontextmanager
async def command(
    *args: str, env: dict[str, str] = ENV
) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        str(CORDSTREAM),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        preexec_fn=_sigint_as_a_terminal_sends_it,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()


async def read_until(process: asyncio.subprocess.Process, text: str) -> list[str]:
    """stdout's lines up to the first one containing `text` (fails after 60 s without it)."""
    assert process.stdout is not None
    lines: list[str] = []

    stdout = process.stdout

    async def read() -> list[str]:
        while True:
            raw = await stdout.readline()
            if not raw:
                raise AssertionError(f"stdout ended before {text!r}: {lines}")
            lines.append(raw.decode())
            if text in lines[-1]:
                return lines

    try:
        return await asyncio.wait_for(read(), timeout=60)
    except TimeoutError:
        raise AssertionError(f"no {text!r} on stdout within 60 s: {lines}") from None


async def finish(process: asyncio.subprocess.Process) -> tuple[str, list[str]]:
    """The rest of stdout, and stderr's lines, once the process has exited."""
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    return stdout.decode(), stderr.decode().splitlines()


@contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound (so nobody else takes it), not
    listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def text_frames(*pieces: str) -> list[bytes]:
    """An OpenAI stream that writes `pieces`, then finishes with usage."""
    frames = [sse(frame({"role": "assistant", "content": ""}))]
    frames += [sse(frame({"content": piece})) for piece in pieces]
    return [*frames, sse(frame({}, "stop")), usage(20, 8), sse_done()]


# --- Ctrl-C ------------------------------------------------------------------------------


async def loading(process: asyncio.subprocess.Process) -> None:
    """Wait until the process has begun loading the command: the interpreter's own start-up
    (before any cordstream code runs, which nothing can answer but the default SIGINT) maps
    no extension module; the library's first imports map several (`/proc/PID/maps`)."""
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + 60
    while ".cpython-" not in maps.read_text():
        assert time.monotonic() < deadline, "the command loaded nothing within 60 s"
        await asyncio.sleep(0.005)


@pytest.mark.asyncio
@pytest.mark.parametrize("args", [["demo"], ["demo", "--bot"], ["chat"]], ids=" ".join)
async def test_ctrl_c_a_tenth_of_a_second_in_is_one_line_and_exit_130(args: list[str]) -> None:
    """0.1 s after the command started (or, on a machine so loaded that the interpreter is
    still starting then, once it has begun loading the command), it is loading discord.py and
    the library: one line, no traceback, exit 130.

    With Python's default warnings, as a user runs it: an interrupt that lands inside the
    import system, between its opening a module's file and reading it, leaves that file to
    the garbage collector (CPython's, a ResourceWarning only when those are switched on)."""
    async with ModelServer([Reply(frames=text_frames("never asked"))]) as server:
        if args == ["chat"]:
            args = ["chat", "--model", "m", "--base-url", server.url + "/v1", "hi"]
        async with command(*args, env={"PATH": ENV["PATH"]}) as process:
            started = time.monotonic()
            await loading(process)
            await asyncio.sleep(max(0.0, started + 0.1 - time.monotonic()))
            process.send_signal(signal.SIGINT)
            stdout, stderr = await finish(process)
    assert process.returncode == 130, (stdout, stderr)
    assert stderr == [f"cordstream {args[0]}: interrupted"]
    assert "Traceback" not in stdout


@pytest.mark.asyncio
@pytest.mark.parametrize("args", [["demo"], ["demo", "--bot"]], ids=" ".join)
async def test_ctrl_c_once_the_demo_has_said_its_first_line_is_one_line_and_exit_130(
    args: list[str],
) -> None:
    """Right after the first line: the local Discord, its client (and, with --bot, the bot
    on its gateway) are starting up."""
    async with command(*args) as process:
        await read_until(process, "cordstream demo")
        process.send_signal(signal.SIGINT)
        stdout, stderr = await finish(process)
    assert process.returncode == 130, (stdout, stderr)
    assert stderr == ["cordstream demo: interrupted"]
    assert "Traceback" not in stdout


@pytest.mark.asyncio
async def test_ctrl_c_in_the_demo_is_one_line_and_exit_130() -> None:
    async with command("demo", "--hang", "--timeout", "600") as process:
        await read_until(process, "channel receives message")  # streaming, then hanging
        process.send_signal(signal.SIGINT)
        _, stderr = await finish(process)
    assert process.returncode == 130
    assert stderr == ["cordstream demo: interrupted"]  # no traceback, no unclosed anything


@pytest.mark.asyncio
async def test_ctrl_c_in_chat_is_one_line_and_exit_130() -> None:
    # E6: a line goes out once the next one has begun ("More"), in case that is only "...".
    hanging = Reply(frames=text_frames("First line.\nMore", " never sent"), hang_after=2)
    async with ModelServer([hanging]) as server:
        async with command(
            "chat", "--model", "local-model", "--base-url", server.url + "/v1", "hello"
        ) as process:
            await read_until(process, "First line.")  # the model is mid-answer, and hangs
            process.send_signal(signal.SIGINT)
            _, stderr = await finish(process)
        assert len(server.seen) == 1
    assert process.returncode == 130
    assert stderr == ["cordstream chat: interrupted"]


# --- unreachable servers ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_an_unreachable_model_server_is_one_line_naming_its_url_and_exit_2() -> None:
    """The SDK retries a refused connection on its own (twice), then the adapter ends the
    stream with a connection error; the command says which address it could not reach."""
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}/v1"
        async with command("chat", "--model", "local-model", "--base-url", url, "hi") as process:
            stdout, stderr = await finish(process)
    assert process.returncode == 2
    assert stderr == [
        f"cordstream chat: cannot reach the model server at {url}: connection refused"
    ]
    # The two progress lines, and no report after them: the channel shows an error embed only.
    started, embed = stdout.splitlines()
    assert started == "cordstream chat: openai local-model → local Discord emulator, live delivery"
    assert "] channel receives embed: " in embed


@pytest.mark.asyncio
async def test_a_failed_chat_says_so_first_then_shows_the_answer_it_got_that_far() -> None:
    """The model's connection is cut after two lines: the one-line error comes before the
    channel and the turn (stdout and stderr into one pipe, in the order they were written),
    which follow because the channel shows some of the answer."""
    cut = Reply(frames=text_frames("First line.\nSecond line.\n", "Third"), cut_after=3)
    async with ModelServer([cut]) as server:
        url = server.url + "/v1"
        process = await asyncio.create_subprocess_exec(
            str(CORDSTREAM),
            *("chat", "--model", "local-model", "--base-url", url, "hi"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=ENV,
        )
        output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 1
    lines = output.decode().splitlines()
    error = f"cordstream chat: the model server at {url} failed: "
    (complaint,) = (i for i, line in enumerate(lines) if line.startswith(error))
    assert lines.index("══════ #general ══════") > complaint
    assert "First line." in lines[lines.index("══════ #general ══════") :]
    assert "status:          error" in lines


def test_an_unreachable_discord_is_one_line_naming_its_url_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The `--channel-id` path; discord.py has no setting for Discord's address but
    `discord.http.Route.BASE`, which the emulator-backed tests point at 127.0.0.1 too."""
    with closed_port() as discord_port, closed_port() as model_port:
        base = f"http://127.0.0.1:{discord_port}/api/v10"
        monkeypatch.setattr(discord.http.Route, "BASE", base)
        status = main(
            [
                "chat",
                "--model",
                "local-model",
                "--base-url",
                f"http://127.0.0.1:{model_port}/v1",
                "--channel-id",
                "123",
                "--discord-token",
                "token",
                "hi",
            ]
        )
    assert status == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"cordstream chat: cannot reach Discord at {base}: connection refused"
    ]


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize(
    ("reply", "line"),
    [
        (
            Reply(status=401, body={"error": {"message": "Incorrect API key", "type": "auth"}}),
            "answered HTTP 401: Incorrect API key",
        ),
        (
            Reply(status=500, body={"error": {"message": "the GPU caught fire"}}),
            "answered HTTP 500: the GPU caught fire",
        ),
    ],
    ids=["401", "500"],
)
async def test_a_model_server_error_is_one_line_and_exit_1(reply: Reply, line: str) -> None:
    async with ModelServer([reply]) as server:
        options = ChatOptions(prompt="hi", model="m", base_url=server.url + "/v1", timeout=30.0)
        ran = await chat.run(options, lambda _: None, environ={})
    assert ran.turn.status == "error"
    assert chat.outcome(ran) == (1, f"the model server at {server.url}/v1 {line}")


# --- bad options --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (
            ["demo", "--timeout=0"],
            "argument --timeout: must be a positive number of seconds, got '0'",
        ),
        (["demo", "--timeout=-1"], "argument --timeout: must be a positive number of seconds"),
        (["demo", "--timeout=nan"], "argument --timeout: must be a positive number of seconds"),
        (["demo", "--timeout=inf"], "argument --timeout: must be a positive number of seconds"),
        (["demo", "--timeout=soon"], "argument --timeout: must be a positive number of seconds"),
        (["demo", "--speed=0"], "argument --speed: must be a positive number of chunks per second"),
        (
            ["demo", "--speed=-5"],
            "argument --speed: must be a positive number of chunks per second",
        ),
        (
            ["demo", "--speed=nan"],
            "argument --speed: must be a positive number of chunks per second",
        ),
        (
            ["demo", "--speed=inf"],
            "argument --speed: must be a positive number of chunks per second",
        ),
        (
            ["demo", "--stop-after=-1"],
            "argument --stop-after: must be a number of seconds, 0 or more, got '-1'",
        ),
        (["demo", "--stop-after=nan"], "argument --stop-after: must be a number of seconds"),
        (["demo", "--stop-after=inf"], "argument --stop-after: must be a number of seconds"),
        (
            ["demo", "--follow-up-after=-1"],
            "argument --follow-up-after: must be a number of seconds, 0 or more, got '-1'",
        ),
        (["demo", "--follow-up-after=-inf"], "argument --follow-up-after: must be a number"),
        (["demo", "--humanizer=4"], "argument --humanizer: invalid choice: 4"),
        (["demo", "--delivery=stream"], "argument --delivery: invalid choice: 'stream'"),
        (["demo", "--log-level=loud"], "argument --log-level: invalid choice: 'loud'"),
        (["chat", "--model=m", "--log-level=INFO", "hi"], "argument --log-level: invalid choice"),
        (
            ["chat", "--model=m", "--timeout=0", "hi"],
            "argument --timeout: must be a positive number of seconds, got '0'",
        ),
        (["chat", "--model=m", "--timeout=nan", "hi"], "argument --timeout: must be a positive"),
        (
            ["chat", "--model=m", "--max-tokens=0", "hi"],
            "argument --max-tokens: must be a whole number of tokens, 1 or more, got '0'",
        ),
        (["chat", "--model=m", "--provider=llama", "hi"], "argument --provider: invalid choice"),
        (["chat", "--model=m", "--delivery=stream", "hi"], "argument --delivery: invalid choice"),
        (
            ["chat", "--model=m", "--base-url=localhost:11434", "hi"],
            "argument --base-url: must be an http:// or https:// address",
        ),
        (["chat", "--model=m", "--base-url=http://[::1", "hi"], "argument --base-url: Invalid"),
        (
            ["chat", "--model=m", "--base-url=http://127.0.0.1:99999/v1", "hi"],
            "argument --base-url: Port out of range",
        ),
    ],
)
def test_a_bad_option_is_an_argparse_error(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith(f"cordstream {argv[0]}: error: {complaint}"), last


def test_the_commands_own_checks_name_the_subcommand(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CORDSTREAM_MODEL", raising=False)
    monkeypatch.delenv("DISCORD_TOKEN", raising=False)
    for argv, complaint in [
        (["chat", "hi"], "--model (or CORDSTREAM_MODEL) is required"),
        (["chat", "--model=m", "--channel-id=1", "hi"], "--channel-id needs --discord-token"),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith("usage: cordstream chat ")
        assert err[-1].startswith(f"cordstream chat: error: {complaint}"), err


def test_every_option_of_every_command_has_help() -> None:
    parser = build_parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == {"demo", "chat"}
    for each in [parser, *commands.choices.values()]:
        for action in each._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{each.prog} {action.option_strings or action.dest}"
                assert action.help != argparse.SUPPRESS


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"cordstream {cordstream.__version__}\n"
    assert cordstream.__version__ == importlib.metadata.version("cordstream")


def test_the_installed_command_prints_its_version_at_once() -> None:
    """`cordstream --version`, and `python -m cordstream --version`, as a user runs them."""
    for argv in ([str(CORDSTREAM)], [sys.executable, "-m", "cordstream"]):
        done = subprocess.run(
            [*argv, "--version"], capture_output=True, text=True, env=ENV, timeout=60, check=False
        )
        assert (done.returncode, done.stdout, done.stderr) == (
            0,
            f"cordstream {importlib.metadata.version('cordstream')}\n",
            "",
        )


# --- a missing SDK, an emulator that cannot listen, a reader that has gone --------------------


@pytest.mark.parametrize(
    ("provider", "module", "extra"),
    [("anthropic", "anthropic", "anthropic"), ("gemini", "google.genai", "gemini")],
)
def test_a_missing_sdk_names_the_extra_that_installs_it(
    provider: str,
    module: str,
    extra: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what Python does for a module not installed
    assert main(["chat", "--provider", provider, "--model", "m", "hi"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"cordstream chat: --provider {provider} needs the {module} SDK, which is not "
        f"installed: pip install 'cordstream[{extra}]'"
    ]


def test_an_emulator_that_cannot_listen_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operating system refusing the address (a fault 127.0.0.1 cannot be made to
    produce on demand, so it is raised where aiohttp would raise it)."""

    async def refused(self: aiohttp.web.TCPSite) -> None:
        raise OSError(errno.EADDRNOTAVAIL, os.strerror(errno.EADDRNOTAVAIL))

    monkeypatch.setattr(aiohttp.web.TCPSite, "start", refused)
    assert main(["demo"]) == 2
    reason = os.strerror(errno.EADDRNOTAVAIL)
    assert capsys.readouterr().err.splitlines() == [
        "cordstream demo: cannot start the local Discord emulator on 127.0.0.1: "
        + reason[:1].lower()
        + reason[1:]
    ]


# --- chat shows each message (live: each edit) as the channel receives it ----------------


async def slow_chat(*options: str) -> tuple[list[str], str]:
    """`cordstream chat` with a slow model: what stdout shows up to the first message while
    the model still holds the rest of its answer, and everything after (a clean exit)."""
    go = asyncio.Event()
    # E6: a line goes out once the next one has begun ("Second"), in case that is only "...".
    slow = Reply(frames=text_frames("First line.\nSecond", " line."), hang_after=2, resume=go)
    async with ModelServer([slow]) as server:
        url = server.url + "/v1"
        argv = ("chat", "--model", "local-model", "--base-url", url, *options, "hello")
        async with command(*argv) as process:
            shown = await read_until(process, "channel receives message")
            assert not go.is_set()  # the model is still holding the rest of its answer
            assert shown[-1].rstrip().endswith("as a reply: First line.")
            assert "status:" not in "".join(shown)
            go.set()
            rest, stderr = await finish(process)
    assert process.returncode == 0, stderr
    assert stderr == []
    assert "status:          completed" in rest
    return shown, rest


@pytest.mark.asyncio
async def test_chat_prints_each_message_as_the_channel_receives_it() -> None:
    """A slow model: the first line is in the channel, and on the command's stdout, while the
    model has not finished; the rest follows once the test lets the model go on."""
    _shown, rest = await slow_chat("--delivery", "messages")
    assert "channel receives message (12 chars): Second line." in rest


@pytest.mark.asyncio
async def test_live_chat_prints_the_first_text_then_each_edit_as_the_channel_accepts_it() -> None:
    """Live delivery (the default), a slow model: the first text creates the message, which is
    on the command's stdout while the model has not finished; once the test lets the model go
    on, the final edit shows the whole answer, without the cursor."""
    shown, rest = await slow_chat()
    assert "live delivery" in shown[0]
    assert " channel receives message 1 (" in shown[-1]
    # The final edit: "First line.\nSecond line.", the cursor gone; no second message.
    assert "] message 1 edited (24 chars): Second line.\n" in rest
    assert "message 2" not in rest
    assert "┌─ message 1 (24 chars, " in rest
    assert "\u258c" not in rest.split("══════ #general ══════", 1)[1]


def test_a_reader_that_goes_away_is_not_an_error() -> None:
    """`cordstream demo | head -2`: once the pipe is closed, the rest of the output goes
    nowhere, quietly, and the demo still finishes (and cleans up) as usual."""
    with subprocess.Popen(
        [str(CORDSTREAM), "demo", "--speed", "2000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        assert "cordstream demo" in process.stdout.readline().decode()
        process.stdout.close()  # as `head -1` does once it has its line
        stderr = process.stderr.read().decode()
        assert process.wait(timeout=60) == 0, stderr
    assert stderr == ""


def test_on_a_terminal_the_demo_redraws_the_channel_and_gives_the_screen_back() -> None:
    """stdout a terminal (a pseudo-terminal here): the channel is drawn on the alternate
    screen while it streams, and the shell's screen comes back, with the channel and the
    result printed on it."""
    controller, terminal = pty.openpty()
    termios.tcsetwinsize(terminal, (24, 80))
    output = b""
    try:
        with subprocess.Popen(
            [str(CORDSTREAM), "demo", "--speed", "2000"],
            stdout=terminal,
            stderr=subprocess.PIPE,
            env={**ENV, "TERM": "xterm"},
        ) as process:
            os.close(terminal)
            terminal = -1
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                ready, _, _ = select.select([controller], [], [], deadline - time.monotonic())
                try:
                    data = os.read(controller, 65536) if ready else b""
                except OSError:  # Linux: EIO once the command has closed its end
                    data = b""
                if not data:
                    break
                output += data
            assert process.stderr is not None
            stderr = process.stderr.read().decode()
            assert process.wait(timeout=60) == 0, stderr
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert stderr == ""
    shown = output.decode()
    enter, leave = "\x1b[?1049h", "\x1b[?1049l"
    assert shown.count(enter) == 1
    assert shown.count(leave) == 1
    assert shown.startswith("cordstream demo: live delivery")
    drawn, after = shown.split(enter, 1)[1].split(leave, 1)
    assert "cordstream demo: live delivery ·" in drawn  # the status line of a frame
    assert "══════ #general ══════" in drawn
    assert "\x1b[" not in after  # the channel and the result as plain text
    assert "status:          completed" in after


@pytest.mark.parametrize(
    ("command", "default"),
    [
        pytest.param(["demo"], demo.config_for(demo.Options()), id="demo"),
        pytest.param(["chat", "--model=m"], chat.config_for(ChatOptions(prompt="p")), id="chat"),
    ],
)
def test_both_commands_stream_live_by_default(command: list[str], default: StreamConfig) -> None:
    def config_from(*argv: str) -> StreamConfig:
        if command[0] == "chat":
            return chat.config_for(
                chat.options_from(build_parser().parse_args([*command, *argv, "hi"]))
            )
        return demo.config_for(demo.options_from(build_parser().parse_args([*command, *argv])))

    assert config_from().delivery == default.delivery == "live"
    messages = config_from("--delivery", "messages", "--humanizer", "2", "--timeout", "5")
    assert (messages.delivery, messages.humanizer_degree) == ("messages", 2)
    assert messages.inactivity_timeout == 5.0
    assert config_from("--delivery=live").delivery == "live"
