"""A hypothesis state machine over `step`: random streams, requests, timers and Discord outcomes.

Each run streams a generated answer in arbitrary chunks, interleaved with usage reports
(valid and invalid shapes), thoughts, done/function-call/error chunks, the provider's end or
crash, stop and follow-up requests of every kind, timer events (due, early and stale), typing
pauses, and Discord accepting or refusing each send. After every step it checks:

- at most one result, and nothing after it;
- every message fits `max_message_length` and has balanced code fences;
- delivered + still-buffered text == the visible text fed so far (think/details removed),
  modulo whitespace at split points and added fences: nothing lost, nothing duplicated; after
  a discard (follow-up, crash, internal stop, Discord failure) delivered text is a prefix;
- the result's usage is the last valid usage reported; its `messages` are what Discord
  accepted, in order, and its `accumulated_text` their join by "\\n" (F2), whatever the status;
- a follow-up never sends pending text.

`test_E6_the_channel_shows_the_answer_as_written` compares what the user sees with the
answer, whitespace included (`tests.support.answers.as_written`: only a whole message's leading and
trailing whitespace may differ, as Discord trims it), at every degree, with Discord answering
at once or staying busy while more text arrives (pieces ready together share a message).
"""

from __future__ import annotations

import math
import re

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from cordstream.domain import (
    ConsumeRequest,
    DiscordFailure,
    DoneChunk,
    ErrorChunk,
    Finish,
    FunctionCall,
    FunctionCallChunk,
    ProviderCrashed,
    ProviderEnded,
    ProviderError,
    SendMessage,
    StopRequest,
    StreamConfig,
    TextChunk,
    Thought,
    TimerFired,
    TokenUsage,
    capture,
    segments,
)
from cordstream.domain.delivery import Messages
from tests.support.answers import (
    Answer,
    answers,
    as_written,
    chunkings,
    fences_balanced,
    no_lone_punctuation,
    oracle_key,
)
from tests.support.driver import Driver, pack
from tests.support.fuzz import examples

_REQUESTERS = (None, "", "user-1", "send_message_limit", "flush_limit", "channel_deleted")
_CODES = (10003, 50001, 50013, None)
_CLOSERS = '*~`)"'  # markers a flush may close (E8)
_VALID_USAGE = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)).filter(any)
_INVALID_USAGE = st.sampled_from(
    (
        {"prompt_tokens": "5", "completion_tokens": "7"},
        {"prompt_tokens": -1, "completion_tokens": -3},
        {"input_tokens": math.nan, "output_tokens": math.inf},
        {"prompt_tokens": True, "completion_tokens": False},
        {"prompt_tokens": 0, "completion_tokens": 0},
        "garbage",
        42,
        [],
    )
)


class StreamMachine(RuleBasedStateMachine):
    """One stream per run; see the module docstring for what is checked."""

    def __init__(self) -> None:
        super().__init__()
        self.driver = Driver(auto_deliver=False)
        self.chunks: list[str] = []
        self.fed = ""  # markup fed while streaming
        self.answer = Answer("", "", ())
        self.usage: TokenUsage | None = None
        self.discarded = False
        self.follow_up_resolved_at: int | None = None
        self.stops_consumed: list[StopRequest] = []  # stops fed before the result, consumed
        self.end_after = 0  # chunks to feed before rules that end the stream are enabled

    @initialize(
        answer=answers(),
        data=st.data(),
        max_len=st.sampled_from((200, 500, 1950)),
        degree=st.integers(0, 3),
        limit=st.sampled_from((0, 0, 2, 5)),
    )
    def start(
        self, answer: Answer, data: st.DataObject, max_len: int, degree: int, limit: int
    ) -> None:
        config = StreamConfig(
            delivery="messages",
            inactivity_timeout=30.0,
            max_message_length=max_len,
            humanizer_degree=degree,
            send_message_limit=limit,
            flush_limit=data.draw(st.sampled_from((0, 3, 40))),
        )
        # Most runs let Discord answer at once; the others interleave answers with everything.
        self.driver = Driver(config, auto_deliver=data.draw(st.integers(0, 3)) > 0)
        self.answer = answer
        self.chunks = data.draw(chunkings(answer.markup))
        self.end_after = len(self.chunks) - data.draw(st.integers(0, len(self.chunks)))
        self.driver.start()

    # -- helpers -------------------------------------------------------------------------

    @property
    def streaming(self) -> bool:
        return self.driver.state.wants_chunks

    @property
    def may_end(self) -> bool:
        """Whether enough of the answer was fed for the rules that end a stream."""
        return self.end_after <= 0

    def feed_chunk(self, chunk: object, headline: str | None = None) -> None:
        before = len(self.driver.effects)
        finished = self.driver.result is not None
        state = self.driver.state
        if state.phase in ("ready", "ending"):
            self.driver.anomalies_fed += 1  # a shell reads chunks only while streaming
        self.driver.chunk(chunk, headline)
        if finished:
            assert len(self.driver.effects) == before, "effects after the result"
            assert self.driver.state == state
        self.after(before)

    def after(self, before: int) -> None:
        """Bookkeeping over the effects of the last step."""
        for effect in self.driver.effects[before:]:
            if isinstance(effect, ConsumeRequest) and effect.request.kind == "follow_up":
                self.follow_up_resolved_at = before
        if self.driver.refused:
            self.discarded = True  # F4: after a refusal the rest is not sent
        ending = self.driver.state.core.ending
        if ending is not None and (
            ending.origin == "internal" or ending.status == "follow_up_interrupt"
        ):
            self.discarded = True  # C6, F3, F4: nothing pending is sent
        config = self.driver.config
        limits = [n for n in (config.send_message_limit, config.flush_limit) if n]
        if limits and len(self.driver.messages) >= min(limits):
            self.discarded = True  # F3: a limit stops sending whatever the outcome

    # -- provider ------------------------------------------------------------------------

    @precondition(lambda self: bool(self.chunks))
    @rule(count=st.integers(1, 12))
    def text(self, count: int) -> None:
        for _ in range(count):
            if not self.chunks:
                return
            chunk = self.chunks.pop(0)
            self.end_after -= 1
            if self.streaming:
                self.fed += chunk
            self.feed_chunk(TextChunk(chunk))

    @rule(pair=_VALID_USAGE, kind=st.sampled_from(("text", "done", "function", "error")))
    def valid_usage(self, pair: tuple[int, int], kind: str) -> None:
        raw = {"prompt_tokens": pair[0], "completion_tokens": pair[1]}
        if self.streaming:
            self.usage = TokenUsage(*pair)
        if kind == "text":
            self.feed_chunk(TextChunk("", usage=raw))
        elif kind == "done":
            self.feed_chunk(DoneChunk(usage=raw))
        elif kind == "function":
            self.feed_chunk(FunctionCallChunk(None, usage=raw))
        else:
            self.feed_chunk(ErrorChunk(None, usage=raw))

    @rule(raw=_INVALID_USAGE)
    def invalid_usage(self, raw: object) -> None:
        self.feed_chunk(TextChunk("", usage=raw))

    @rule(content=st.text(max_size=20), kind=st.sampled_from(("summary", "raw")))
    def thought(self, content: str, kind: str) -> None:
        self.feed_chunk(
            TextChunk("", thoughts=(Thought("raw" if kind == "raw" else "summary", content),))
        )

    @rule(metadata=st.sampled_from((None, {}, {"finish_reason": "stop"})))
    def done(self, metadata: dict[str, object] | None) -> None:
        self.feed_chunk(DoneChunk(metadata))

    @precondition(lambda self: self.may_end)
    @rule(count=st.integers(1, 3))
    def function_call(self, count: int) -> None:
        calls = [FunctionCall(f"tool{i}", {"i": i}) for i in range(count)]
        self.feed_chunk(FunctionCallChunk(calls if count > 1 else calls[0]))

    @precondition(lambda self: self.may_end)
    @rule(kind=st.sampled_from(("rate_limit", "model_error", "api_error")))
    def provider_error(self, kind: str) -> None:
        error = ProviderError(kind, "it failed: sk-abcdefghijklmnopqrstuvwx")  # type: ignore[arg-type]
        self.feed_chunk(ErrorChunk(error), headline="Provider failed")

    @precondition(lambda self: self.may_end)
    @rule(garbage=st.sampled_from((None, 42, "text", object())))
    def garbage_chunk(self, garbage: object) -> None:
        self.discarded |= self.streaming  # B13: a broken stream flushes nothing
        self.feed_chunk(garbage)

    @precondition(lambda self: self.may_end and not self.chunks)
    @rule()
    def provider_ends(self) -> None:
        before = len(self.driver.effects)
        self.driver.feed(ProviderEnded(self.driver.now))
        self.after(before)

    @precondition(lambda self: self.may_end)
    @rule()
    def provider_crashes(self) -> None:
        before = len(self.driver.effects)
        self.discarded |= self.streaming  # B13
        self.driver.feed(ProviderCrashed(self.driver.now, RuntimeError("connection reset")))
        self.after(before)

    # -- requests, time, Discord -----------------------------------------------------------

    @precondition(lambda self: self.may_end)
    @rule(kind=st.sampled_from(("stop", "follow_up")), requester=st.sampled_from(_REQUESTERS))
    def request(self, kind: str, requester: str | None) -> None:
        before = len(self.driver.effects)
        if kind == "follow_up":
            requester = requester or "user-2"
        # A context of its own, so the result shows which stop decided it (C7).
        context = object()
        stop = (
            StopRequest.stop(requester, context)
            if kind == "stop"
            else StopRequest("follow_up", requester, context)
        )
        ending = self.driver.state.core.ending
        finished = self.driver.result is not None
        self.driver.request(stop)
        consumed = any(
            isinstance(e, ConsumeRequest) and e.request is stop
            for e in self.driver.effects[before:]
        )
        if kind == "stop" and not finished:
            if consumed:
                self.stops_consumed.append(stop)
            else:  # C5: only a fixed outcome leaves a stop in the registry, never lost
                assert ending is not None
                assert ending.origin == "internal", ending
        if consumed and kind == "stop" and ending is not None and ending.origin == "follow_up":
            self.follow_up_resolved_at = None  # C2: the stop delivers what the follow-up dropped
        self.after(before)

    @rule(seconds=st.floats(0, 40))
    def time_passes(self, seconds: float) -> None:
        self.driver.advance(seconds)

    @precondition(lambda self: self.driver.armed is not None)
    @rule(when=st.sampled_from(("due", "early", "stale")))
    def timer(self, when: str) -> None:
        before = len(self.driver.effects)
        armed = self.driver.armed
        assert armed is not None

        if when == "stale":
            state = self.driver.state
            self.driver.feed(TimerFired(self.driver.now, armed - 1000.0))
            assert self.driver.state == state, "a stale timer changed the state"
            assert len(self.driver.effects) == before, "a stale timer had effects"
        elif when == "early":
            self.driver.feed(TimerFired(min(self.driver.now, armed - 1.0), armed))
        else:
            self.driver.fire_timer()
        self.after(before)

    @precondition(lambda self: self.driver.pause is not None)
    @rule()
    def pause_over(self) -> None:
        before = len(self.driver.effects)
        self.driver.end_pause()
        self.after(before)

    @precondition(lambda self: self.driver.pending_send is not None)
    @rule()
    def discord_accepts(self) -> None:
        before = len(self.driver.effects)
        self.driver.deliver(url="https://discord.com/channels/1/2/3")
        self.after(before)

    @precondition(lambda self: self.may_end)
    @rule(code=st.sampled_from(_CODES), status=st.sampled_from((403, 404, 500, 502)))
    def discord_refuses(self, code: int | None, status: int) -> None:
        """Refuse the send in flight, or the next one when Discord answers at once."""
        before = len(self.driver.effects)
        failure = DiscordFailure(code, status, RuntimeError(f"HTTP {status}"))
        if self.driver.pending_send is not None:
            self.driver.reject(failure)
        elif not self.driver.reject_next:
            self.driver.reject_next.append(failure)
        self.after(before)

    def teardown(self) -> None:
        """Finish every run: feed the rest, end the provider, let Discord answer, check again."""
        driver = self.driver
        if driver.state.phase in ("streaming", "ending"):
            while self.chunks and self.streaming:
                self.text(12)
            if self.streaming:
                before = len(driver.effects)
                driver.feed(ProviderEnded(driver.now))
                self.after(before)
            before = len(driver.effects)
            driver.auto_deliver = True
            driver.settle()  # raises if the stream cannot reach its result
            self.after(before)
            self.the_channel_shows_the_text_as_written()
            for check in (
                self.at_most_one_result,
                self.messages_fit_and_fences_balance,
                self.nothing_lost_nothing_duplicated,
                self.a_follow_up_never_sends_pending_text,
                self.result_reports_what_discord_accepted,
                self.a_consumed_stop_decides_the_result,
            ):
                check()
        result = driver.result
        messages = len(driver.messages)
        event(f"status: {result.status if result else driver.state.phase}")
        event(f"messages sent: {min(messages, 5)}{'+' if messages >= 5 else ''}")

    def the_channel_shows_the_text_as_written(self) -> None:
        """E6, E8, C6: at the end, whitespace included, the channel shows the visible text fed
        (all of it when nothing was discarded), but for the edges Discord trims and the fences
        a split adds (`tests.support.answers.as_written`)."""
        if self.discarded:
            return
        texts = _visible_texts(self.answer, self.fed)
        messages = self.driver.messages
        assert _shows_as_written(messages, texts), (messages[-3:], texts)
        no_lone_punctuation(messages, min(texts, key=len))  # E6, whatever ended the stream

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def impossible_events_are_recorded(self) -> None:
        """Each impossible event fed is recorded once; nothing else is (`_Run.handle`)."""
        assert len(self.driver.state.core.anomalies) == self.driver.anomalies_fed

    @invariant()
    def at_most_one_result(self) -> None:
        assert sum(isinstance(e, Finish) for e in self.driver.effects) <= 1

    @invariant()
    def messages_fit_and_fences_balance(self) -> None:
        limit = self.driver.config.max_message_length
        for send in self.driver.sends:
            assert 0 < len(send.content) <= limit, send
            assert fences_balanced(send.content), send

    @invariant()
    def nothing_lost_nothing_duplicated(self) -> None:
        driver = self.driver
        core = driver.state.core
        delivered = "\n".join(driver.messages)
        if isinstance(driver.pending_send, SendMessage):
            delivered += "\n" + driver.pending_send.content
        expected = _visible_options(self.answer, self.fed)
        if self.discarded:
            shown = oracle_key(delivered).rstrip(_CLOSERS)
            assert any(e.startswith(shown) for e in expected), "text invented"
            return
        messages = driver.state.delivery
        assert isinstance(messages, Messages)
        queued = "\n".join(piece.text for piece in messages.out.queue)
        seg = messages.seg
        # What the segmenter holds and its tail are one run of text, but for the newline a
        # piece ending in a closing fence lost (`segments.ends_in_fence`).
        ahead = seg.lookahead
        lost = (
            ahead is not None
            and not seg.held
            and seg.code is None
            and segments.ends_in_fence(ahead)
        )
        joined = seg.buffered + ("\n" if lost else "") + driver.state.tail
        buffered = "\n".join((delivered, queued, joined))
        got = oracle_key(buffered)
        pending = oracle_key(core.capture.pending) if core.capture.mode == "visible" else ""
        ok = any(
            c == e or (c.startswith(e) and not c[len(e) :].strip(_CLOSERS))
            for c in (got, got + pending)
            for e in expected
        )
        assert ok, (got[-80:], sorted(e[-80:] for e in expected))

    @invariant()
    def a_follow_up_never_sends_pending_text(self) -> None:
        start = self.follow_up_resolved_at
        if start is not None:
            later = self.driver.effects[start:]
            assert not any(isinstance(e, SendMessage) for e in later)

    @invariant()
    def a_consumed_stop_decides_the_result(self) -> None:
        """C2, C5, C7: a stop consumed before the result is never lost: the result is a stop,
        with the context of the first stop consumed (a later one found the stream stopping)."""
        result = self.driver.result
        if result is None:
            return
        if self.stops_consumed:
            assert result.status == "stopped_by_user", result.status
            assert result.stop_context is self.stops_consumed[0].context
        else:
            assert result.stop_context is None

    @invariant()
    def result_reports_what_discord_accepted(self) -> None:
        result = self.driver.result
        if result is None:
            return
        assert result.messages == tuple(self.driver.messages)
        assert result.accumulated_text == "\n".join(self.driver.messages)
        assert result.messages_sent == len(self.driver.messages)
        assert result.usage == self.usage
        assert result.thought_log is not None


def _visible_texts(answer: Answer, fed: str) -> set[str]:
    """The visible text of the markup fed so far.

    Computed from the answer's own parts, not with the code under test. A partial tag at the
    very end is either still held back or, once the stream ended, released as text: both count.
    """
    if fed == answer.markup:
        return {answer.visible}
    text = re.sub(
        r"<(think|THINK|thinking|reasoning|x:think|Thinking|details)>.*?(</\1>|\Z)",
        "",
        fed,
        flags=re.DOTALL,
    )
    partial = re.search(r"<[a-zA-Z:/]*\Z", text)
    if partial is None:
        return {text}
    return {text[: partial.start()], text}


def _visible_options(answer: Answer, fed: str) -> set[str]:
    """Oracle keys of `_visible_texts`: for text still in the buffers."""
    return {oracle_key(text) for text in _visible_texts(answer, fed)}


def _shows_as_written(messages: list[str], texts: set[str]) -> bool:
    """Whether the messages show one of `texts` exactly as written (`as_written`, whitespace
    included, added fences allowed)."""
    for text in texts:
        try:
            as_written(messages, text, closers=True, fences=True)
        except AssertionError:
            continue
        return True
    return False


TestStreamMachine = StreamMachine.TestCase
TestStreamMachine.settings = settings(
    max_examples=examples(200),
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), max_len=st.sampled_from((200, 1950)), degree=st.sampled_from((0, 1)))
def test_E10_the_fast_path_changes_nothing(data: st.DataObject, max_len: int, degree: int) -> None:
    """The machine skips segmentation for plain chunks; that must not change a single message."""
    answer = data.draw(answers(blocks=False))
    chunks = data.draw(chunkings(answer.visible))
    config = StreamConfig(
        delivery="messages", max_message_length=max_len, humanizer_degree=degree, flush_limit=0
    )
    driver = Driver(config)
    driver.start()
    driver.text(*chunks)
    result = driver.end()

    # The same chunks through capture and the segmenter, every one of them (the slow path),
    # packed as the machine packs.
    seg, tail = segments.new_segmenter(max_len, sentences=False), ""
    scanner = capture.IDLE
    queue: list[segments.Piece] = []
    expected: list[str] = []

    def segment(ops: list[capture.Op]) -> None:
        nonlocal seg, tail
        for kind, text in ops:
            assert kind == "visible"
            seg, tail, pieces = segments.feed(seg, tail, text)
            queue.extend(pieces)

    for chunk in chunks:
        fence, line = segments.context(seg, tail)
        scanner, ops = capture.feed(scanner, chunk, fence=fence, line=line)
        segment(ops)
        if degree == 1:
            expected += pack(queue, max_len)
            queue.clear()
    segment(capture.close(scanner)[1])
    queue += segments.flush(seg, tail, close_markers=True)
    expected += pack(queue, max_len)
    assert driver.messages == expected
    assert result.messages_sent == len(expected)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), max_len=st.sampled_from((300, 500, 1950, 2000)), degree=st.integers(0, 3))
def test_E6_the_channel_shows_the_answer_as_written(
    data: st.DataObject, max_len: int, degree: int
) -> None:
    """Blank lines after prose, tables, lists in tables, code blocks and think/details blocks
    reach the channel as the model wrote them, whichever pieces end up sharing a message."""
    answer = data.draw(answers(long_lines=data.draw(st.booleans()), split_code=False))
    chunks = data.draw(chunkings(answer.markup))
    config = StreamConfig(
        delivery="messages", max_message_length=max_len, humanizer_degree=degree, flush_limit=0
    )
    driver = Driver(config, auto_deliver=False)
    driver.start()
    for chunk in chunks:
        driver.text(chunk)
        if data.draw(st.booleans()):  # Discord answers now, or is still busy when more arrives
            if driver.pending_send is not None:
                driver.deliver()
            elif driver.pause is not None:
                driver.end_pause()
    result = driver.end()

    as_written(driver.messages, answer.visible, closers=True)
    no_lone_punctuation(driver.messages, answer.visible)  # E6 at every degree, busy or not
    assert result.messages == tuple(driver.messages)
    assert result.accumulated_text == "\n".join(driver.messages)
