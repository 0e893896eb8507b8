"""Bad inputs: every hostile value a provider, a model or an SDK can hand cordstream, and the
defined outcome for each (SPEC B1, B13, D2, E3, E7, E8, F1, F2, G2–G4).

The corpus itself lives in `tests/support/bad_inputs.py`; this file is the table of input → outcome.
Each input is tried on the pure core (`step` through `tests.support.driver`, `normalize_usage`, the
embed builders) and, where the outcome is about what Discord receives, on the real shell:
`tests.support.stage.stage()` (a real discord.py client against the local emulator) on looptime's
virtual clock, so retries and waits cost no real seconds.

Rules these tests pin (chosen here where the SPEC is silent, and named in each test):

- A chunk constructor refuses a wrong field with a TypeError naming the field; a missing or
  extra field is Python's own TypeError, which names it too.
- Anything `process_chunk` returns that is not a chunk (None, int, dict, bytes, str, a
  duck-typed object with `content`, the class instead of an instance …) ends the stream as
  `error` with a TypeError naming the type as `data`; the pending text is not flushed (B13);
  the generic error embed is shown; nothing escapes. An honest subclass of `TextChunk` is a
  `TextChunk`, and a `str` subclass is a `str`: both are delivered as text.
- Text passes through unchanged: NUL, BEL, ANSI escapes, CR, C1 controls, BOM, zero-width and
  bidi marks (RLM, RLO override, isolates), private-use and noncharacters. The one rule: where
  a message is cut, whitespace (what Python's `str.isspace` calls whitespace, which includes
  U+2028, U+0085, U+001C–U+001F) is trimmed from its ends (`cordstream.domain.outbox.take`: Discord
  trims too). "Preserved" below means exactly that: the messages, in order, are the input
  with only whitespace removed at cut points (`_spans`).
- 10 MB of text, in one chunk or a few: every character arrives, in messages of at most
  `max_message_length`, and the result's `messages` are the channel's transcript and
  `accumulated_text` their join by "\\n" (F2), in linear time (E10) and no virtual time.
- Surrogates (a `str` can hold them; Discord's JSON cannot carry a lone one): what is sent is
  what Discord shows (`cordstream.domain.graphemes.sendable`): a surrogate pair becomes the
  character it encodes, a lone surrogate U+FFFD, in messages and in embed texts alike. The stream
  completes, `messages` and `accumulated_text` are the channel's text (F2), no request is
  retried; the emulator answers a lone surrogate 400 before recording anything.
- A message never ends inside a grapheme cluster (E7), whatever the chunking and wherever the
  message limit falls, and a run of flags of any length at any offset is cut between flags.
  The oracle knows the cluster positions by construction; it does not ask
  `cordstream.domain.graphemes`.
- Mentions are delivered verbatim and ping nobody with the default context; the reply does
  not ping the author (F1).
- Code fences, by domain.markdown's rule (a fence opens on a line starting with 3–16
  backticks and closes on a line of at least as many backticks alone; `~~~` is prose, since
  Discord has no `~~~` fences): every message leaves no fence open (E3). The text is the
  input apart from the closing/reopening fence lines and the inline closers E8 adds at the
  very end, whitespace included (the oracle `tests.support.answers.as_written`). An opening fence
  line with nothing after it is markup alone and is not sent. An opening fence line longer
  than a message is code however it is chunked.
- A secret in any field of a provider error, in its `original` (exception message, mapping,
  JSON body), in the provider's headline or in a raised exception never reaches Discord: no
  12-character piece of it appears in any request body the bot sent (G4).
- `normalize_usage` never raises; it returns the valid side(s) per D2 or None, and a count
  that cannot be read loses only its own alias. Through the shell a broken usage report
  changes nothing but `usage`.
- A chunk subclass that skipped validation is checked by the core: a bad field ends the
  stream as `error` with the TypeError (B13), and whatever Discord accepted is in the result.
- An error that says nothing readable gets the catalogue's generic text (G2, G3, G6).

Where today's behaviour is wrong, the test states the right behaviour and is marked
`xfail(strict=True)` with the reason, what goes wrong and a suggested fix; those tests
have `xfail` in their names. (None at present: the nine bugs first pinned here are fixed.)
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Final, TypeVar, cast

import pytest

from cordstream import domain
from cordstream.domain.embeds import EmbedSpec, exception_embed, provider_error_embed
from cordstream.shell import StreamConfig
from cordstream.shell.testing import Raw
from cordstream.shell.testing.emulator import SentMessage
from tests.support.answers import as_written
from tests.support.bad_inputs import (
    BIDI_TEXTS,
    CLUSTERS,
    CONTROL_TEXTS,
    FENCE_TEXTS,
    LONG_INFO_FENCE,
    MENTIONS,
    SECRETS,
    SILENT_ERRORS,
    SILENT_EXCEPTIONS,
    USAGE,
    RaisingGetattribute,
    SecretCase,
    UsageCase,
)
from tests.support.driver import Driver, run
from tests.support.stage import ScriptProvider, Stage, stage

Test = TypeVar("Test", bound=Callable[..., object])


def shell(test: Test) -> Test:
    """A test of the real shell (`tests.support.stage`): async, on looptime's virtual clock."""
    pytest.mark.looptime(pytest.mark.asyncio(test))  # each mark is stored on `test`
    return test


Chunk = TypeVar("Chunk")
SMALL: Final = StreamConfig(delivery="messages", max_message_length=200, flush_limit=0)
GENERIC_EXCEPTION: Final = domain.DEFAULT_CATALOGUE.text("en", "exception.description")
EXCEPTION_TITLE: Final = domain.DEFAULT_CATALOGUE.text("en", "exception.title")
# domain.markdown's fence rule, restated independently: 3–16 backticks open (no more follow).
_OPENER: Final = re.compile(r"[ \t]*(`{3,16})(?!`)[^`]*")


# -- oracles ---------------------------------------------------------------------------------------


def _spans(messages: Sequence[str], text: str) -> list[tuple[int, int]]:
    """Where each message sits in `text`: the messages are `text` in order, with only
    whitespace left out between them (and at both ends). Fails on anything else: a lost, added,
    duplicated or reordered character. Linear in the text (10 MB inputs). The shared oracle
    `tests.support.answers.as_written`, which says what Discord normalizes (`shown`)."""
    return as_written(messages, text)


def _open_fence(message: str) -> str | None:
    """The fence a message leaves open (domain.markdown's rule), or None when balanced."""
    fence: str | None = None
    for raw in message.split("\n"):
        line = raw.rstrip("\r")
        if fence is None:
            opener = _OPENER.fullmatch(line)
            if opener is not None:
                fence = opener.group(1)
        else:
            stripped = line.strip()
            if len(stripped) >= len(fence) and stripped == "`" * len(stripped):
                fence = None
    return fence


def _fence_lines(message: str) -> int:
    return sum(1 for line in message.split("\n") if line.lstrip(" \t").startswith("```"))


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _core(
    chunks: Sequence[str], config: StreamConfig = SMALL
) -> tuple[Driver, domain.StreamResult]:
    driver, result = run(list(chunks), config=config)
    assert result.messages == tuple(driver.messages)  # F2: what Discord accepted, in order
    assert result.accumulated_text == "\n".join(driver.messages)
    assert result.messages_sent == len(driver.messages)
    assert all(len(m) <= config.max_message_length for m in driver.messages)  # E7
    return driver, result


def _transcript_is_the_result(s: Stage, result: domain.StreamResult) -> list[str]:
    """F2 through the real shell: what the result says is what the channel holds, once."""
    contents = s.contents
    assert result.messages == tuple(contents)
    assert result.accumulated_text == "\n".join(contents)
    assert result.accumulated_text == s.api.text()
    assert result.messages_sent == len(contents)
    return contents


async def _completed(s: Stage, text: str, size: int, config: StreamConfig) -> list[str]:
    """Stream `text` through the shell in chunks of `size`: it completes, and the channel holds
    what the result says (F2); the channel's messages."""
    result = await s.stream(ScriptProvider(_chunks(text, size)), config)
    assert result.status == "completed"
    return _transcript_is_the_result(s, result)


def test_the_oracles_reject_loss_duplication_cuts_and_open_fences() -> None:
    """The checks below can fail: each catches the fault it exists for."""
    assert _spans(["ab", "cd"], "ab \ncd ") == [(0, 2), (4, 6)]
    for messages in (["ab"], ["ab", "c"], ["ab", "cd", "cd"], ["cd", "ab"], ["ab", "xcd"]):
        with pytest.raises(AssertionError):
            _spans(messages, "ab cd")
    with pytest.raises(AssertionError):
        _assert_no_cut_inside([(0, 3), (3, 9)], [(2, 5)])
    assert _open_fence("```py\nx\n```") is None
    assert _open_fence("````\n```\n") == "````"
    assert _open_fence("text ``` inline") is None
    with pytest.raises(AssertionError):
        _assert_hidden("key: abcdefghijklmnop", "abcdefghijklmnop")


# -- B1/B13: chunks of the wrong type ------------------------------------------------------------


def _gen() -> Iterator[domain.FunctionCall]:
    yield domain.FunctionCall("f")


CONSTRUCTION: Final[dict[str, tuple[Callable[..., object], str]]] = {
    # id: (constructor call, the field the TypeError must name)
    "text-none": (lambda: domain.TextChunk(None), "content"),  # type: ignore[arg-type]
    "text-bytes": (lambda: domain.TextChunk(b"hi"), "content"),  # type: ignore[arg-type]
    "text-int": (lambda: domain.TextChunk(42), "content"),  # type: ignore[arg-type]
    "text-missing": (domain.TextChunk, "content"),
    "text-extra-field": (lambda: domain.TextChunk("x", extra=1), "extra"),  # type: ignore[call-arg]
    "text-thoughts-list": (
        lambda: domain.TextChunk("x", thoughts=[domain.Thought("raw", "t")]),  # type: ignore[arg-type]
        "thoughts",
    ),
    "text-thoughts-str": (lambda: domain.TextChunk("x", thoughts=("t",)), "thoughts"),  # type: ignore[arg-type]
    "text-serving-int": (lambda: domain.TextChunk("x", serving_provider=5), "serving_provider"),  # type: ignore[arg-type]
    "thought-bad-kind": (lambda: domain.Thought("secret", "x"), "kind"),  # type: ignore[arg-type]
    "thought-none": (lambda: domain.Thought("raw", None), "content"),  # type: ignore[arg-type]
    "call-name-none": (lambda: domain.FunctionCall(None), "name"),  # type: ignore[arg-type]
    "call-arguments-json-string": (
        lambda: domain.FunctionCall("f", arguments='{"a": 1}'),  # type: ignore[arg-type]
        "arguments",
    ),
    "call-arguments-pairs": (
        lambda: domain.FunctionCall("f", arguments=[("a", 1)]),  # type: ignore[arg-type]
        "arguments",
    ),
    "call-arguments-none": (lambda: domain.FunctionCall("f", arguments=None), "arguments"),  # type: ignore[arg-type]
    "call-id-int": (lambda: domain.FunctionCall("f", id=7), "id"),  # type: ignore[arg-type]
    "call-chunk-str": (lambda: domain.FunctionCallChunk("f"), "call"),  # type: ignore[arg-type]
    "call-chunk-dict": (lambda: domain.FunctionCallChunk({"name": "f"}), "call"),  # type: ignore[arg-type]
    "call-chunk-mixed": (
        lambda: domain.FunctionCallChunk([domain.FunctionCall("f"), {"name": "g"}]),  # type: ignore[list-item]
        "call",
    ),
    "call-chunk-generator": (lambda: domain.FunctionCallChunk(_gen()), "call"),  # type: ignore[arg-type]
    "error-chunk-str": (lambda: domain.ErrorChunk("boom"), "error"),  # type: ignore[arg-type]
    "error-chunk-exception": (lambda: domain.ErrorChunk(RuntimeError("x")), "error"),  # type: ignore[arg-type]
    "done-pairs": (lambda: domain.DoneChunk([("finish_reason", "stop")]), "metadata"),  # type: ignore[arg-type]
    "done-str": (lambda: domain.DoneChunk("stop"), "metadata"),  # type: ignore[arg-type]
    "error-kind": (lambda: domain.ProviderError("nope", "x"), "kind"),  # type: ignore[arg-type]
    "error-message-none": (lambda: domain.ProviderError("api_error", None), "message"),  # type: ignore[arg-type]
    "error-missing-message": (lambda: domain.ProviderError("api_error"), "message"),  # type: ignore[call-arg]
    "error-code-float": (lambda: domain.ProviderError("api_error", "x", code=1.5), "code"),  # type: ignore[arg-type]
    "error-retryable-str": (
        lambda: domain.ProviderError("api_error", "x", retryable="yes"),  # type: ignore[arg-type]
        "retryable",
    ),
    "error-user-message-int": (
        lambda: domain.ProviderError("api_error", "x", user_message=5),  # type: ignore[arg-type]
        "user_message",
    ),
}


@pytest.mark.parametrize("case", CONSTRUCTION, ids=str)
def test_B1_a_chunk_with_a_bad_field_fails_where_it_is_built_naming_the_field(case: str) -> None:
    build, name = CONSTRUCTION[case]
    with pytest.raises(TypeError, match=re.escape(name)):
        build()


class _DuckChunk:
    """Looks like a TextChunk to duck typing, is not one."""

    content = "duck"
    usage = None
    thoughts = ()
    serving_provider = None


GARBAGE: Final[dict[str, Callable[[], object]]] = {
    "none": lambda: None,
    "int": lambda: 42,
    "float-nan": lambda: math.nan,
    "dict": lambda: {"content": "looks like text"},
    "bytes": lambda: b"raw bytes",
    "str": lambda: "a plain str",
    "list-of-chunks": lambda: [domain.TextChunk("a")],
    "object-with-content": lambda: SimpleNamespace(content="hello", usage=None),
    "duck-typed-class": _DuckChunk,
    "chunk-class-not-instance": lambda: domain.TextChunk,
    "exception-returned": lambda: ValueError("returned, not raised"),
}


def _fed(chunk: object, pending: str = "pending") -> Driver:
    """The core, started and fed "Line\n", `pending`, then `chunk`."""
    driver = Driver(SMALL)
    driver.start()
    driver.text("Line\n", pending)
    driver.chunk(chunk)
    return driver


def _core_type_error(bad: object) -> domain.StreamResult:
    """The core fed "Line\n", "pending", then `bad`: an `error` result whose data is a
    TypeError, "pending" not flushed (B13), the stream closed, the generic exception embed."""
    driver = _fed(bad)
    result = driver.settle()
    assert result.status == "error"
    assert isinstance(result.data, TypeError)
    assert driver.messages == ["Line"]  # B13: "pending" is not flushed
    assert result.accumulated_text == "Line"
    assert driver.closed
    (embed,) = driver.embeds
    assert embed.title == EXCEPTION_TITLE
    return result


async def _shell_error_after_line(s: Stage, provider: ScriptProvider) -> domain.StreamResult:
    """Through the shell: `provider` says "Line\n", "pending", then something that breaks the
    stream (B13): an `error` result, only "Line" reaches the channel ("pending" is not
    flushed), and the one embed is the generic exception embed."""
    result = await s.stream(provider, SMALL)
    assert result.status == "error"
    assert _transcript_is_the_result(s, result) == ["Line"]  # B13: "pending" is not flushed
    (embed,) = s.embeds
    assert embed["title"] == EXCEPTION_TITLE
    return result


@pytest.mark.parametrize("kind", GARBAGE, ids=str)
def test_B13_core_garbage_from_process_chunk_is_an_error_result_pending_not_flushed(
    kind: str,
) -> None:
    garbage = GARBAGE[kind]()
    result = _core_type_error(garbage)
    assert type(garbage).__name__ in str(result.data)


@shell
@pytest.mark.parametrize("kind", GARBAGE, ids=str)
async def test_B13_shell_garbage_from_process_chunk_is_an_error_result_pending_not_flushed(
    kind: str,
) -> None:
    garbage = GARBAGE[kind]()
    async with stage() as s:
        provider = ScriptProvider(["Line\n", "pending", Raw(garbage), "never"])
        result = await _shell_error_after_line(s, provider)
        assert isinstance(result.data, TypeError)
        assert type(garbage).__name__ in str(result.data)
        assert provider.closed
        assert provider.calls.count("process") == 3  # "never" was not pulled


class _HonestText(domain.TextChunk):
    """A subclass that keeps the parent's validation."""


class _Str(str):
    """A str subclass, as some SDKs return (e.g. an enum-ish or annotated string)."""


@pytest.mark.parametrize(
    "chunk",
    [_HonestText("sub text"), domain.TextChunk(_Str("str subclass"))],
    ids=["textchunk-subclass", "str-subclass-content"],
)
def test_B6_a_textchunk_subclass_and_a_str_subclass_are_delivered_as_text(
    chunk: domain.TextChunk,
) -> None:
    driver = _fed(chunk, "pending ")
    result = driver.end()
    assert result.status == "completed"
    assert driver.messages == ["Line", "pending " + str(chunk.content)]
    assert type(result.accumulated_text) is str


def _unchecked(chunk: type[Chunk]) -> type[Chunk]:
    """A subclass of `chunk` that skips validation: `_unchecked(domain.TextChunk)(42)` is a
    TextChunk with an int content."""

    def skip(self: object) -> None:
        pass

    return cast(
        "type[Chunk]", type(f"Unchecked{chunk.__name__}", (chunk,), {"__post_init__": skip})
    )


_Unchecked = _unchecked(domain.TextChunk)
_UncheckedCall = _unchecked(domain.FunctionCallChunk)
_UncheckedError = _unchecked(domain.ErrorChunk)
_UncheckedDone = _unchecked(domain.DoneChunk)


UNCHECKED: Final[dict[str, Callable[[], object]]] = {
    "text-int-content": lambda: _Unchecked(42),  # type: ignore[arg-type]
    "text-bytes-content": lambda: _Unchecked(b"raw"),  # type: ignore[arg-type]
    "text-thoughts-list": lambda: _Unchecked("x", thoughts=["t"]),  # type: ignore[arg-type]
    "text-serving-int": lambda: _Unchecked("x", serving_provider=5),  # type: ignore[arg-type]
    "call-str": lambda: _UncheckedCall("f"),  # type: ignore[arg-type]
    "call-int": lambda: _UncheckedCall(7),  # type: ignore[arg-type]
    "error-str": lambda: _UncheckedError("boom"),  # type: ignore[arg-type]
    "done-pairs": lambda: _UncheckedDone([("finish_reason", "stop")]),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("kind", UNCHECKED, ids=str)
def test_B1_core_an_unvalidated_chunk_subclass_is_an_error_result(kind: str) -> None:
    _core_type_error(UNCHECKED[kind]())


@shell
async def test_B1_shell_an_unvalidated_textchunk_subclass_ends_as_an_error_result() -> None:
    async with stage() as s:
        provider = ScriptProvider(["Line\n", "pending", _Unchecked(42)])  # type: ignore[arg-type]
        result = await s.stream(provider, SMALL)
        assert result.status == "error"
        assert isinstance(result.data, TypeError)
        assert "pending" not in s.api.text()  # B13: not flushed
        assert provider.closed


@shell
async def test_F2_B13_shell_an_unvalidated_subclass_the_result_holds_what_was_sent() -> None:
    """'Line' is still in flight when the bad chunk arrives: it is counted, then the embed."""
    async with stage() as s:
        provider = ScriptProvider(["Line\n", "pending", _Unchecked(42)])  # type: ignore[arg-type]
        result = await s.stream(provider, SMALL)
        assert _transcript_is_the_result(s, result) == ["Line"]
        assert len(s.embeds) == 1


# -- E7, E10, F2: 10 MB of text --------------------------------------------------------------------

TEN_MB: Final = 10_000_000


def _big_text(size: int) -> str:
    """`size` characters of prose in lines of every length (some far longer than a message),
    with emoji, CJK and combining marks, and no markup (seeded, repeatable)."""
    rng = random.Random(5)
    words = [
        "stream", "Discord", "message", "model", "token", "漢字", "データ", "👍🏽",
        "👨‍👩‍👧‍👦", "🇫🇷", "e\u0301", "naïve", "42", "3.14", "end.", "why?", "yes!",
    ]  # fmt: skip
    lines: list[str] = []
    length = 0
    while length < 100_000:
        count = rng.choice((1, 5, 20, 80, 600))  # 600 words: a line of ~4000 characters
        line = " ".join(rng.choice(words) for _ in range(count)) + "\n"
        lines.append(line)
        length += len(line)
    block = "".join(lines)
    return (block * (size // len(block) + 1))[:size]


@pytest.fixture(scope="module")
def ten_mb() -> str:
    return _big_text(TEN_MB)


BIG: Final = StreamConfig(delivery="messages", max_message_length=2000, flush_limit=0)


@pytest.mark.parametrize("pieces", [1, 4], ids=["one-chunk", "four-chunks"])
def test_E7_core_10mb_every_character_arrives_in_messages_that_fit(
    ten_mb: str, pieces: int
) -> None:
    """How fast is not a test's to say (a shared machine, mutmut's tracing): the core's
    linearity (E10) is `bench.core`'s `scaling_ratio_10x`."""
    size = -(-len(ten_mb) // pieces) + 7  # not aligned with anything in the text
    driver, result = _core(_chunks(ten_mb, size), BIG)
    assert result.status == "completed"
    _spans(driver.messages, ten_mb)
    assert len(driver.messages) >= TEN_MB // 2000


@shell
async def test_E7_F2_shell_10mb_in_three_chunks_the_channel_holds_every_character_once(
    ten_mb: str,
) -> None:
    """One shell run only: 5000+ real discord.py sends cost ~1 ms each (the core tests above
    cover the single 10 MB chunk; each chunk here is 3.3 MB, far past any buffer)."""
    size = -(-len(ten_mb) // 3) + 7
    async with stage() as s:
        loop = asyncio.get_running_loop()
        started = loop.time()
        contents = await _completed(s, ten_mb, size, BIG)
        assert all(len(m) <= 2000 for m in contents)
        _spans(contents, ten_mb)
        # No waiting of any kind but the pacing (F4): 50 requests a second, not one 429.
        requests = [r for r in s.api.requests if r.at >= started]
        assert {r.status for r in requests} <= {200, 204}
        assert loop.time() - started == (len(requests) - 1) // 50


# -- controls and bidi: passed through -----------------------------------------------------------

PASS_THROUGH: Final = {**CONTROL_TEXTS, **BIDI_TEXTS}


@pytest.mark.parametrize("name", PASS_THROUGH, ids=str)
@pytest.mark.parametrize("size", [1, 3, 1000], ids=["by-1", "by-3", "whole"])
def test_E6_core_control_and_bidi_characters_pass_through(name: str, size: int) -> None:
    text = f"{PASS_THROUGH[name]}\nsecond line {PASS_THROUGH[name]} end"
    driver, result = _core(_chunks(text, size))
    assert result.status == "completed"
    _spans(driver.messages, text)
    for needle in PASS_THROUGH[name].split():  # inside a message, nothing is touched
        assert needle in result.accumulated_text


@shell
async def test_E6_shell_control_and_bidi_characters_reach_discord_unchanged() -> None:
    async with stage() as s:
        lines = [f"{name}: {text} end" for name, text in PASS_THROUGH.items()]
        text = "\n".join(lines)
        contents = await _completed(s, text, 5, SMALL)
        _spans(contents, text)
        for line in lines:  # each line is a message or inside one, byte for byte
            assert line.strip() in s.api.text()


# -- lone surrogates: JSON cannot carry them -------------------------------------------------------

SURROGATE_TEXT: Final = "before\nbad \ud800 here\nafter"


@shell
@pytest.mark.parametrize("size", [1, 4, 1000], ids=["by-1", "by-4", "whole"])
async def test_F2_shell_a_lone_surrogate_is_replaced_and_the_stream_completes(size: int) -> None:
    async with stage() as s:
        loop = asyncio.get_running_loop()
        started = loop.time()
        contents = await _completed(s, SURROGATE_TEXT, size, SMALL)
        _spans(contents, SURROGATE_TEXT.replace("\ud800", "\ufffd"))
        assert all(r.status == 200 for r in s.api.requests if r.kind == "send")
        assert loop.time() - started < 1.0  # no retries


# A pair split across two chunks (by-1, by-4 from offset 0 splits it at 5 and 6) is whole.
PAIR_TEXT: Final = "pair \ud83d\ude00 ok, lone \udc00 and reversed \ude00\ud83d end"
PAIR_SHOWN: Final = "pair \U0001f600 ok, lone \ufffd and reversed \ufffd\ufffd end"


@shell
@pytest.mark.parametrize("size", [1, 4, 6, 1000], ids=["by-1", "by-4", "by-6", "whole"])
async def test_F2_shell_a_surrogate_pair_is_counted_as_discord_shows_it(size: int) -> None:
    async with stage() as s:
        result = await s.stream(ScriptProvider(_chunks(PAIR_TEXT, size)), SMALL)
        assert result.status == "completed"
        assert result.accumulated_text == s.api.text() == PAIR_SHOWN


@shell
@pytest.mark.parametrize(
    "failure",
    [
        domain.ErrorChunk(domain.ProviderError("api_error", "bad \ud800 thing")),
        RuntimeError("boom \udfff"),
    ],
    ids=["provider-error-message", "raised-exception"],
)
async def test_G3_shell_a_lone_surrogate_in_an_error_shows_one_embed(failure: object) -> None:
    async with stage() as s:
        result = await s.stream(ScriptProvider([failure]), SMALL)
        assert result.status == "error"
        (embed,) = s.embeds
        assert "\ufffd" in str(embed["description"])
        assert all(r.status == 200 for r in s.api.requests if r.kind == "send")


# -- E7: graphemes at every split position ---------------------------------------------------------


def _assert_no_cut_inside(spans: list[tuple[int, int]], clusters: list[tuple[int, int]]) -> None:
    cuts = {edge for span in spans for edge in span}
    for start, end in clusters:
        inside = [cut for cut in cuts if start < cut < end]
        assert not inside, f"cut at {inside} inside the cluster at {start}..{end}"


@pytest.mark.parametrize("name", CLUSTERS, ids=str)
def test_E7_core_no_message_cuts_a_cluster_at_the_limit_whatever_the_chunking(
    name: str,
) -> None:
    """The cluster straddles the 200-character limit at every offset; the text is fed whole,
    one code point per chunk (a chunk boundary at every position at once), and in two chunks
    split at every position in and around the cluster."""
    cluster = CLUSTERS[name]
    size = len(cluster)
    limit = SMALL.max_message_length
    for before in range(limit - size - 2, limit + 3):
        text = "a" * before + cluster + "b" * 50
        chunkings = [[text], list(text)]
        chunkings += [[text[:p], text[p:]] for p in range(before - 1, before + size + 2)]
        for chunks in chunkings:
            driver, result = _core(chunks)
            assert result.status == "completed"
            spans = _spans(driver.messages, text)
            assert "".join(driver.messages) == text  # no whitespace: exact
            _assert_no_cut_inside(spans, [(before, before + size)])


@pytest.mark.parametrize("name", CLUSTERS, ids=str)
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, 10_000], ids=lambda n: f"by-{n}")
def test_E7_core_a_dense_run_of_clusters_is_cut_only_between_them(name: str, size: int) -> None:
    cluster = CLUSTERS[name]
    width = len(cluster)
    for offset in range(width + 1):
        text = "x" * offset + cluster * (700 // width)
        driver, _ = _core(_chunks(text, size))
        spans = _spans(driver.messages, text)
        assert "".join(driver.messages) == text
        starts = range(offset, len(text), width)
        _assert_no_cut_inside(spans, [(s, s + width) for s in starts])


@pytest.mark.parametrize("size", [1, 3, 10_000], ids=lambda n: f"by-{n}")
@pytest.mark.parametrize("code", [False, True], ids=["prose", "code-line"])
def test_E7_core_a_long_flag_run_at_an_odd_offset_is_not_cut_inside_a_flag(
    size: int, code: bool
) -> None:
    eu = "🇦🇹🇧🇪🇧🇬🇭🇷🇨🇾🇨🇿🇩🇰🇪🇪🇫🇮🇫🇷🇩🇪🇬🇷🇭🇺🇮🇪🇮🇹🇱🇻🇱🇹🇱🇺🇲🇹🇳🇱🇵🇱🇵🇹🇷🇴🇸🇰🇸🇮🇪🇸🇸🇪"
    prefix = "Flags of the EU: "
    text = prefix + eu * 8  # 432 indicators from offset 17
    fenced = "```\n" + text + "\n```" if code else text
    driver, _ = _core(_chunks(fenced, size))
    # Each message of a split code line is the piece wrapped in the fence (E3).
    bodies = [m.removeprefix("```\n").removesuffix("\n```") for m in driver.messages]
    assert len(bodies) >= 3
    assert "".join(bodies) == text
    spans = _spans(bodies, text)
    flags = [(s, s + 2) for s in range(len(prefix), len(text), 2)]
    _assert_no_cut_inside(spans, flags)


@shell
@pytest.mark.parametrize("name", CLUSTERS, ids=str)
async def test_E7_shell_no_message_in_the_channel_cuts_a_cluster(name: str) -> None:
    cluster = CLUSTERS[name]
    width = len(cluster)
    offset = 0 if name == "flag" else 1
    text = "x" * offset + cluster * (700 // width)
    async with stage() as s:
        result = await s.stream(ScriptProvider(_chunks(text, 3)), SMALL)
        assert result.status == "completed"
        contents = _transcript_is_the_result(s, result)
        assert len(contents) >= 3
        assert all(len(m) <= 200 for m in contents)
        assert "".join(contents) == text
        spans = _spans(contents, text)
        _assert_no_cut_inside(spans, [(p, p + width) for p in range(offset, len(text), width)])


# -- F1: mention injection -------------------------------------------------------------------------


def _assert_pings_nobody(messages: list[SentMessage]) -> None:
    for message in messages:
        assert not message.pings.anyone, message
        assert message.allowed_mentions is not None
        assert message.allowed_mentions.get("parse") == []
        assert not message.allowed_mentions.get("replied_user", False)


@shell
@pytest.mark.parametrize("size", [1, 4, 10_000], ids=["by-1", "by-4", "whole"])
async def test_F1_shell_mentions_are_delivered_verbatim_and_ping_nobody(size: int) -> None:
    lines = [f"hey {m} look" for m in MENTIONS]
    lines += [" ".join(MENTIONS), "@everyone@here<@1><@!2><@&3>", "x" * 190 + " " + MENTIONS[2]]
    text = "\n".join(lines)
    async with stage() as s:
        question = s.api.post_user_message("hi bot")
        reply_to = s.channel.get_partial_message(question)
        result = await s.stream(ScriptProvider(_chunks(text, size)), SMALL, reply_to=reply_to)
        assert result.status == "completed"
        contents = _transcript_is_the_result(s, result)
        _spans(contents, text)
        for mention in MENTIONS:
            assert mention in result.accumulated_text
        messages = s.api.messages()
        assert messages[0].message_reference is not None  # a reply ...
        assert messages[0].pings.replied_user is None  # ... that does not ping the author
        _assert_pings_nobody(messages)


@shell
async def test_F1_shell_mentions_in_an_error_embed_ping_nobody() -> None:
    error = domain.ProviderError("api_error", " ".join(MENTIONS))
    async with stage() as s:
        result = await s.stream(ScriptProvider(["ok\n", domain.ErrorChunk(error)]), SMALL)
        assert result.status == "error"
        assert len(s.embeds) == 1
        _assert_pings_nobody(s.api.messages())


# -- E3, E8: code fences that try to break out -----------------------------------------------------


@pytest.mark.parametrize("name", FENCE_TEXTS, ids=str)
def test_E3_core_every_message_has_balanced_fences_and_the_text_survives(name: str) -> None:
    text = FENCE_TEXTS[name]
    for size in [len(text), *range(1, 14)]:
        driver, result = _core(_chunks(text, size))
        assert result.status == "completed"
        for message in driver.messages:
            assert _open_fence(message) is None, (size, message)
        as_written(driver.messages, text, closers=True, fences=True)


@shell
@pytest.mark.parametrize("name", FENCE_TEXTS, ids=str)
async def test_E3_shell_every_message_in_the_channel_has_balanced_fences(name: str) -> None:
    text = FENCE_TEXTS[name]
    async with stage() as s:
        result = await s.stream(ScriptProvider(_chunks(text, 3)), SMALL)
        assert result.status == "completed"
        contents = _transcript_is_the_result(s, result)
        for message in contents:
            assert _open_fence(message) is None, message
            assert len(message) <= 200
        as_written(contents, text, closers=True, fences=True)


def test_E3_core_a_split_block_reopens_with_its_language_in_every_message() -> None:
    text = FENCE_TEXTS["split-across-limit"]
    driver, _ = _core(_chunks(text, 5))
    code = [m for m in driver.messages if m.startswith("```")]
    assert len(code) >= 4
    for message in code:
        assert message.startswith("```python\n")
        assert message.endswith("\n```")
        assert _fence_lines(message) == 2


def test_E3_core_a_fence_line_longer_than_a_message_fed_whole_stays_balanced() -> None:
    driver, _ = _core([LONG_INFO_FENCE])
    for message in driver.messages:
        assert _open_fence(message) is None, message


@pytest.mark.parametrize("degree", [1, 3], ids=["degree-1", "degree-3"])
@pytest.mark.parametrize("size", [1, 7, 250], ids=["by-1", "by-7", "by-250"])
def test_E3_core_a_fence_line_longer_than_a_message_in_chunks_is_as_when_fed_whole(
    size: int, degree: int
) -> None:
    config = StreamConfig(
        delivery="messages", max_message_length=200, flush_limit=0, humanizer_degree=degree
    )
    text = "intro\n" + LONG_INFO_FENCE + "after"
    whole, _ = _core([text], config)
    driver, _ = _core(_chunks(text, size), config)
    for message in driver.messages:
        assert _open_fence(message) is None, message
    assert "code" in "".join(driver.messages)
    assert driver.messages[-1].endswith("after")
    # The chunking changes what is shown in no way (only how it is packed, as for any block:
    # "intro" goes alone when the block is not there yet). The fence and language word stand
    # for the line (E3).
    assert "\n".join(driver.messages) == "\n".join(whole.messages)
    assert "```" + "x" * 24 + "\ncode\n```" in driver.messages


# -- G4: secrets in provider errors ---------------------------------------------------------------


def _pieces(secret: str, width: int = 12) -> set[str]:
    return {secret[i : i + width] for i in range(len(secret) - width + 1)}


def _assert_hidden(shown: str, secret: str) -> None:
    # A count, not the pieces: a failing test must not print the secret either.
    leaked = sum(piece in shown for piece in _pieces(secret))
    assert leaked == 0, "pieces of the secret are shown"


def _embed_text(embed: EmbedSpec) -> str:
    return embed.title + "\n" + embed.description


@pytest.mark.parametrize("case", SECRETS, ids=lambda c: c.id)
def test_G4_core_the_embed_for_an_error_never_shows_a_secret(case: SecretCase) -> None:
    if isinstance(case.failure, domain.ProviderError):
        embed = provider_error_embed(case.failure, case.headline)
    else:
        embed = exception_embed(case.failure)
    assert embed.description.strip()
    _assert_hidden(_embed_text(embed), case.secret)


@shell
@pytest.mark.parametrize("case", SECRETS, ids=lambda c: c.id)
async def test_G4_shell_no_request_to_discord_carries_a_secret(case: SecretCase) -> None:
    failure = case.failure
    step = domain.ErrorChunk(failure) if isinstance(failure, domain.ProviderError) else failure
    async with stage() as s:
        provider = ScriptProvider(["Partial answer\n", step], headline=case.headline)
        result = await s.stream(provider, SMALL)
        assert result.status == "error"
        assert len(s.embeds) == 1  # the error was reported ...
        for request in s.api.requests:  # ... and nothing the bot sent holds the secret
            _assert_hidden(json.dumps(request.json, ensure_ascii=False), case.secret)


# -- D2: usage objects -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", USAGE, ids=lambda c: c.id)
def test_D2_normalize_usage_returns_the_valid_side_or_none_and_never_raises(
    case: UsageCase,
) -> None:
    assert domain.normalize_usage(case.build()) == case.expected


@shell
async def test_D2_B5_shell_broken_usage_reports_change_nothing_but_usage() -> None:
    valid = {"prompt_tokens": 11, "completion_tokens": 22}
    steps: list[object] = ["one\n", domain.TextChunk("two\n", usage=valid)]
    # MagicMock is left to the core table: it builds thousands of child mocks (0.5 s).
    broken = [c for c in USAGE if c.expected is None and c.id != "magicmock"]
    steps += [domain.TextChunk("x", usage=case.build()) for case in broken]
    steps += [domain.DoneChunk({"finish_reason": "stop"}, usage={"prompt_tokens": math.nan})]
    async with stage() as s:
        result = await s.stream(ScriptProvider(steps), SMALL)
        assert result.status == "completed"
        assert result.usage == domain.TokenUsage(11, 22)  # latest *valid* report wins (B5)
        contents = _transcript_is_the_result(s, result)
        _spans(contents, "one\ntwo\n" + "x" * (len(steps) - 3))


@shell
async def test_D2_shell_a_usage_object_that_raises_does_not_end_the_stream() -> None:
    steps: list[object] = [
        domain.TextChunk("one\n", usage={"prompt_tokens": 1, "completion_tokens": 2}),
        domain.TextChunk("two ", usage=RaisingGetattribute()),
        "three",
    ]
    async with stage() as s:
        result = await s.stream(ScriptProvider(steps), SMALL)
        assert result.status == "completed"
        assert result.usage == domain.TokenUsage(1, 2)
        assert _transcript_is_the_result(s, result) == ["one", "two three"]


# -- G2, G3, G6: errors that say nothing ---------------------------------------------------------


def _stopped(error: domain.ProviderError) -> str:
    return domain.DEFAULT_CATALOGUE.text("en", "description.stopped", reason=error.kind)


@pytest.mark.parametrize("name", SILENT_ERRORS, ids=str)
def test_G2_G3_core_an_error_without_a_message_gets_the_generic_description(name: str) -> None:
    error = SILENT_ERRORS[name]
    embed = provider_error_embed(error, None)
    assert embed.description == _stopped(error)
    assert embed.title.strip()


@pytest.mark.parametrize("name", SILENT_EXCEPTIONS, ids=str)
def test_G6_core_an_exception_without_a_readable_message_gets_the_generic_text(
    name: str,
) -> None:
    embed = exception_embed(SILENT_EXCEPTIONS[name]())
    assert (embed.title, embed.description) == (EXCEPTION_TITLE, GENERIC_EXCEPTION)


@shell
@pytest.mark.parametrize("name", SILENT_ERRORS, ids=str)
async def test_G2_G3_shell_an_error_without_a_message_is_an_error_result_with_an_embed(
    name: str,
) -> None:
    error = SILENT_ERRORS[name]
    async with stage() as s:
        provider = ScriptProvider(["Line\n", "pending", domain.ErrorChunk(error), "never"])
        result = await s.stream(provider, SMALL)
        assert result.status == "error"
        assert result.data is error
        assert _transcript_is_the_result(s, result) == ["Line", "pending"]  # B6: flushed
        (embed,) = s.embeds
        assert embed["description"] == _stopped(error)


class _BadDescriber(ScriptProvider):
    """`describe_error` raises, or returns something that is not a headline."""

    def __init__(self, steps: Sequence[object], answer: Callable[[], object]) -> None:
        super().__init__(steps)
        self.answer = answer

    def describe_error(self, error: domain.ProviderError, locale: str) -> str | None:
        return self.answer()  # type: ignore[return-value]  # garbage on purpose


def _raise() -> object:
    raise RuntimeError("describe_error exploded")


@shell
@pytest.mark.parametrize(
    "answer",
    [_raise, lambda: 42, lambda: "", lambda: "   ", lambda: None],
    ids=["raises", "int", "empty", "blank", "none"],
)
async def test_G1_shell_a_broken_describe_error_falls_back_to_the_generic_headline(
    answer: Callable[[], object],
) -> None:
    error = domain.ProviderError("rate_limit", "", retryable=True)
    async with stage() as s:
        result = await s.stream(_BadDescriber([domain.ErrorChunk(error)], answer), SMALL)
        assert result.status == "error"
        (embed,) = s.embeds
        assert embed["description"] == _stopped(error)


@shell
@pytest.mark.parametrize("name", SILENT_EXCEPTIONS, ids=str)
async def test_B13_G6_shell_an_exception_without_a_message_gets_the_generic_embed(
    name: str,
) -> None:
    async with stage() as s:
        exception = SILENT_EXCEPTIONS[name]()
        result = await _shell_error_after_line(s, ScriptProvider(["Line\n", "pending", exception]))
        assert result.data is exception
        assert s.embeds[0]["description"] == GENERIC_EXCEPTION
