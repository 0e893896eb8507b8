"""Messages delivery on its own (`cordstream.domain.outbox`): the queue, packing, typing pauses,
limits, and what Discord accepted (E6, E7, E9, F2, F3). Pure functions, tested without the
reducer; `test_machine.py` tests them through `step`."""

from __future__ import annotations

import pytest

from cordstream.domain import SendEmbed, SendMessage, StreamConfig, TypingPause, outbox
from cordstream.domain.embeds import EmbedSpec
from cordstream.domain.outbox import Limit, LimitReached
from cordstream.domain.segments import Piece

DEGREE_1 = StreamConfig(humanizer_degree=1, max_message_length=200)


def test_E6_pieces_ready_together_share_a_message() -> None:
    out = outbox.enqueue(outbox.EMPTY, [Piece("one\n"), Piece("two\n")])
    out, send = outbox.pump(out, DEGREE_1, 0.0, ending=False, hurry=False)
    assert send == SendMessage(1, "one\ntwo", reply=True)
    assert out.queue == ()
    assert out.in_flight == 1


def test_E6_degree_0_sends_nothing_before_the_stream_ends() -> None:
    config = StreamConfig(humanizer_degree=0)
    out = outbox.enqueue(outbox.EMPTY, [Piece("one\n")])
    assert outbox.pump(out, config, 0.0, ending=False, hurry=False) == (out, None)
    _, send = outbox.pump(out, config, 0.0, ending=True, hurry=False)
    assert send == SendMessage(1, "one", reply=True)


def test_F2_one_request_at_a_time_and_only_accepted_text_counts() -> None:
    out = outbox.enqueue(outbox.EMPTY, [Piece("one\n")])
    out, _ = outbox.pump(out, DEGREE_1, 0.0, ending=False, hurry=False)
    out = outbox.enqueue(out, [Piece("two\n")])
    assert outbox.pump(out, DEGREE_1, 0.0, ending=False, hurry=False) == (out, None)  # busy
    assert outbox.knows(out, 1)
    assert not outbox.knows(out, 2)
    out, was_message = outbox.refused(out)
    assert was_message
    assert outbox.messages(out) == ()  # refused: not accepted
    out, send = outbox.pump(out, DEGREE_1, 1.0, ending=False, hurry=False)
    assert send == SendMessage(2, "two", reply=True)  # still the first message that counts
    out = outbox.accepted(out, 1.0, "https://discord.com/channels/1/2/3")
    assert outbox.messages(out) == ("two",)
    assert out.first_url == "https://discord.com/channels/1/2/3"
    assert outbox.drained(out)


def test_E7_leading_whitespace_discord_trims_does_not_count_against_the_length() -> None:
    """A piece that starts indented (a table row) is trimmed where it starts a message, so
    the room it leaves is measured without that indentation."""
    row = "  | " + "x" * 193 + " |\n"  # 200 characters, 197 shown (and its newline)
    content, taken = outbox.take((Piece(row), Piece(":)\n")), 200, one_each=False)
    assert taken == 2
    assert content == row.strip() + "\n:)"
    assert len(content) <= 200


def test_E9_degrees_2_and_3_pause_before_each_further_message() -> None:
    config = StreamConfig(humanizer_degree=2)
    out = outbox.enqueue(outbox.EMPTY, [Piece("First line.\n"), Piece("Second line.\n")])
    out, send = outbox.pump(out, config, 0.0, ending=False, hurry=False)
    assert isinstance(send, SendMessage)
    assert send.content == "First line."
    out = outbox.accepted(out, 0.0, None)
    out, pause = outbox.pump(out, config, 0.1, ending=False, hurry=False)
    assert isinstance(pause, TypingPause)
    assert pause.token == 2
    assert pause.seconds == pytest.approx(outbox.TYPING_MIN_SECONDS - 0.1)
    assert outbox.pump(out, config, 0.2, ending=False, hurry=False) == (out, None)  # pausing
    assert outbox.issued(out, 2)
    assert not outbox.issued(out, 3)
    hurried, send = outbox.pump(out, config, 0.2, ending=True, hurry=True)  # a stop
    assert send == SendMessage(3, "Second line.", reply=False)
    assert hurried.pause is None
    assert outbox.pausing(out, 2)
    assert not outbox.pausing(out, 1)
    assert outbox.pause_over(out).pause is None


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (StreamConfig(humanizer_degree=1, send_message_limit=1), "send_message_limit"),
        (StreamConfig(humanizer_degree=1, flush_limit=1), "flush_limit"),
    ],
)
def test_F3_the_next_message_past_a_limit_is_not_sent(config: StreamConfig, reason: Limit) -> None:
    out = outbox.enqueue(outbox.EMPTY, [Piece("one\n")])
    out, _ = outbox.pump(out, config, 0.0, ending=False, hurry=False)
    out = outbox.accepted(out, 0.0, None)
    out = outbox.enqueue(out, [Piece("two\n")])
    assert outbox.pump(out, config, 0.0, ending=True, hurry=True) == (out, LimitReached(reason))
    assert outbox.pending(out) == "two\n"


def test_G_the_embed_follows_the_text_and_is_not_a_message() -> None:
    spec = EmbedSpec(title="t", description="d", colour="error")
    out, send = outbox.embed(outbox.EMPTY, spec)
    assert send == SendEmbed(1, spec)
    out = outbox.accepted(out, 0.0, None)
    assert outbox.messages(out) == ()
    assert out.sent == 0


def test_C6_clear_and_requeue_keep_the_order() -> None:
    dropped = (Piece("two\n"), Piece("three\n"))
    out = outbox.enqueue(outbox.EMPTY, [Piece("one\n")])
    assert outbox.clear(out).queue == ()
    assert outbox.requeue(out, dropped).queue == (Piece("one\n"), *dropped)
    assert outbox.requeue(out, ()) is out
