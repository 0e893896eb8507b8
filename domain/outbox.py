"""Messages delivery: how the visible pieces of an answer become Discord messages (SPEC E6,
E7, E9, F2, F3).

The reducer (`cordstream.domain.machine`) decides what is visible and when the stream ends;
this module decides how the pieces the segmenter finished (`segments.Piece`) reach Discord,
one request at a time, and keeps what Discord accepted. Pure functions over one value,
`Outbox`; none of them reads a clock (`now` is an argument) or raises.

Packing (E6, E7, E9). Pieces that are ready at the same moment share a message at degrees 0
and 1 (one chunk finished several lines, or Discord was still busy with the previous message),
which keeps a fast model under Discord's per-channel rate limit. Degrees 2 and 3 send one piece
per message and pause before each further message as if typing (10 ms per character,
0.75–4 s, counted from the previous message). In a hurry (a stop, a timeout, an error) what is
left goes at once, without pauses. At degree 0 nothing is sent before the stream ends.

Every message passes `graphemes.sendable` as it is sent: a surrogate pair becomes the character
it encodes and a lone surrogate U+FFFD, which is what Discord shows, so the accepted text is
exactly the channel's (F2) and a message only gets shorter (E7). Done once per message, not
per chunk (a pair split across two chunks is whole by then); a flag test for ASCII text.

Limits (F3): the next message would pass `send_message_limit` or `flush_limit` → `pump`
answers `LimitReached(reason)`, and the reducer decides what that means for the outcome.

Accepted (F2): only content Discord accepted counts: `messages(out)`, in order (the result's
text is their join, `outcome.accumulated_text`).

The reducer reaches these functions through `cordstream.domain.delivery.MessagesDelivery`, the
messages policy (live delivery's sibling, `live`, is behind `delivery.LiveDelivery`):

    enqueue(out, pieces)               pieces the segmenter finished, in order
    pump(out, config, now, ending, hurry)  the next request or pause, a limit, or None
    embed(out, spec)                   the closing embed, once the text is out (G)
    accepted(out, now, url)            Discord accepted the request in flight
    refused(out)                       Discord refused it; and whether it was a message
    pausing(out, token) / pause_over(out)   the typing pause in progress, and its end
    knows(out, seq) / issued(out, token)   whether an answer or a pause end can be ours
    drained(out)                       nothing queued, in flight or paused
    pending(out) / requeue / clear     the queue, for a retraction, a stop and a discard
    messages(out)                      what Discord accepted, in order
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final, Literal, TypeAlias

from cordstream.domain import segments
from cordstream.domain.config import StreamConfig
from cordstream.domain.effects import SendEmbed, SendMessage, TypingPause
from cordstream.domain.embeds import EmbedSpec
from cordstream.domain.graphemes import sendable
from cordstream.domain.rope import Rope, items

TYPING_SECONDS_PER_CHAR: Final = 0.01
TYPING_MIN_SECONDS: Final = 0.75
TYPING_MAX_SECONDS: Final = 4.0
_PAUSE_SLACK: Final = 0.001  # a pause that ends this close to its target counts as over

Pieces = tuple[segments.Piece, ...]
Limit: TypeAlias = Literal["send_message_limit", "flush_limit"]


@dataclass(frozen=True, slots=True)
class LimitReached:
    """F3: the next message would pass the limit `reason` (an internal stop, C4)."""

    reason: Limit


@dataclass(frozen=True, slots=True, kw_only=True)
class Outbox:
    """Pieces waiting for Discord, the one request in flight, and what Discord accepted (F2).

    Built by keyword only: several fields share a type.
    """

    queue: Pieces = ()
    in_flight: int | None = None  # seq of the outstanding request
    in_flight_text: str | None = None  # its content; None for an embed
    delivered: Rope = None  # the accepted contents, newest first
    sent: int = 0  # how many messages Discord accepted
    last_sent_at: float = -math.inf
    first_url: str | None = None
    pause: int | None = None  # token of the typing pause in progress
    next_seq: int = 1  # the next request's seq, or the next pause's token


EMPTY: Final = Outbox()


def enqueue(out: Outbox, pieces: list[segments.Piece]) -> Outbox:
    return _with_queue(out, out.queue + tuple(pieces))


def requeue(out: Outbox, pieces: Pieces) -> Outbox:
    """`pieces` go back at the end of the queue (what a follow-up dropped, C2)."""
    return _with_queue(out, out.queue + pieces) if pieces else out


def clear(out: Outbox) -> Outbox:
    """Nothing queued is sent (C6, F3, F4, B13)."""
    return _with_queue(out, ()) if out.queue else out


def _with_queue(out: Outbox, queue: Pieces) -> Outbox:
    # Built in full rather than with `replace`, which costs twice as much: once per line (E10).
    return Outbox(
        queue=queue,
        in_flight=out.in_flight,
        in_flight_text=out.in_flight_text,
        delivered=out.delivered,
        sent=out.sent,
        last_sent_at=out.last_sent_at,
        first_url=out.first_url,
        pause=out.pause,
        next_seq=out.next_seq,
    )


def pending(out: Outbox) -> str:
    """The raw text of the queued pieces (for a stray `</think>` that retracts it, E4)."""
    return "".join(piece.raw for piece in out.queue)


def pump(
    out: Outbox, config: StreamConfig, now: float, *, ending: bool, hurry: bool
) -> tuple[Outbox, SendMessage | TypingPause | LimitReached | None]:
    """What to do next: a message to send, a typing pause to wait, a limit that the next
    message would pass (F3; the queue is left as it is), or None: a request is in flight, a
    pause runs, or nothing can be sent yet. `ending`: the outcome is decided, so everything
    queued goes; `hurry`: without pauses, and a pause in progress is over (E9)."""
    if out.in_flight is not None:
        return out, None
    if out.pause is not None:
        if not hurry:
            return out, None
        out = pause_over(out)  # a stop, a timeout or an error does not wait (E9)
    degree = config.humanizer_degree
    while out.queue and (ending or degree > 0):
        one_each = degree >= 2 and not hurry
        content, taken = take(out.queue, config.max_message_length, one_each=one_each)
        if not content:
            out = replace(out, queue=out.queue[taken:])  # only whitespace: never sent (E6)
            continue
        content = sendable(content)  # what Discord will show (F2); never longer (E7)
        limit = limit_reached(config, out.sent)
        if limit is not None:
            return out, limit
        if degree >= 2 and not hurry and out.sent:
            ready_at = out.last_sent_at + typing_seconds(len(content))
            if now + _PAUSE_SLACK < ready_at:
                token = out.next_seq
                return replace(out, pause=token, next_seq=token + 1), TypingPause(
                    token, ready_at - now
                )
        seq = out.next_seq
        sending = replace(
            out, queue=out.queue[taken:], in_flight=seq, in_flight_text=content, next_seq=seq + 1
        )
        return sending, SendMessage(seq, content, reply=out.sent == 0)
    return out, None


def embed(out: Outbox, spec: EmbedSpec) -> tuple[Outbox, SendEmbed]:
    seq = out.next_seq
    return replace(out, in_flight=seq, in_flight_text=None, next_seq=seq + 1), SendEmbed(seq, spec)


def accepted(out: Outbox, now: float, url: str | None) -> Outbox:
    """Discord accepted the request in flight (F2: only accepted content counts)."""
    text = out.in_flight_text
    if text is None:  # an embed
        return replace(out, in_flight=None)
    return replace(
        out,
        in_flight=None,
        in_flight_text=None,
        delivered=(out.delivered, text),
        sent=out.sent + 1,
        last_sent_at=now,
        first_url=out.first_url if out.first_url is not None else url,
    )


def refused(out: Outbox) -> tuple[Outbox, bool]:
    """Discord refused the request in flight; whether it was a message (not an embed)."""
    return replace(out, in_flight=None, in_flight_text=None), out.in_flight_text is not None


def pausing(out: Outbox, token: int) -> bool:
    """Whether the typing pause `token` is the one in progress."""
    return out.pause == token


def pause_over(out: Outbox) -> Outbox:
    """The pause in progress is over (E9): the next message may go."""
    return replace(out, pause=None)


def knows(out: Outbox, seq: int) -> bool:
    """Whether an answer for request `seq` is expected: it is the one in flight."""
    return out.in_flight == seq


def issued(out: Outbox, token: int) -> bool:
    """Whether a pause `token` was handed out (a pause a stop ended early still reports)."""
    return 0 < token < out.next_seq


def drained(out: Outbox) -> bool:
    return not out.queue and out.in_flight is None and out.pause is None


def messages(out: Outbox) -> tuple[str, ...]:
    """The contents Discord accepted, in order (F2)."""
    return tuple(items(out.delivered))


def limit_reached(config: StreamConfig, sent: int) -> LimitReached | None:
    """F3: the next message would pass a limit, after `sent` messages."""
    if config.send_message_limit and sent >= config.send_message_limit:
        return LimitReached("send_message_limit")
    if config.flush_limit and sent >= config.flush_limit:
        return LimitReached("flush_limit")
    return None


def typing_seconds(length: int) -> float:
    return min(TYPING_MAX_SECONDS, max(TYPING_MIN_SECONDS, TYPING_SECONDS_PER_CHAR * length))


def take(queue: Pieces, max_len: int, *, one_each: bool) -> tuple[str, int]:
    """The next message's content and how many pieces it uses (packing, E7, E9).

    A piece of a code block starts on its own line when packed after other text. Whitespace
    around the message is trimmed (Discord does too); whitespace-only content comes back as "".
    `one_each` (degrees 2 and 3): one piece per message, but a punctuation-only piece is never
    a message of its own when a piece next to it is queued and both fit (E6): it goes with the
    piece after it, or with the one before (the segmenter's leftovers at the end of a stream).
    """
    parts: list[str] = []
    size = 0  # of the message as shown: from its first character that is not whitespace
    taken = 0
    previous: segments.Piece | None = None
    substantive = False  # a piece with more than whitespace and punctuation is taken
    for piece in queue:
        text = piece.text
        separator = ""
        if (
            previous is not None
            and (piece.code or segments.ends_in_fence(previous))
            and not parts[-1].endswith("\n")
        ):
            separator = "\n"
        shown = separator + text
        if not size:
            shown = shown.lstrip()  # the message starts here: whitespace before it is trimmed
        # Whitespace at the end of the message is trimmed: a piece's own does not count (E7).
        if parts and size + len(shown.rstrip()) > max_len:
            break
        parts.append(separator + text)
        size += len(shown)
        taken += 1
        previous = piece
        if one_each and not substantive and text.strip() and not segments.lone(piece):
            substantive = True
        if substantive and not _lone_follows(queue, taken):
            break
    return "".join(parts).strip(), taken


def _lone_follows(queue: Pieces, start: int) -> bool:
    """Whether the first piece from `start` on that is not whitespace is punctuation-only."""
    for index in range(start, len(queue)):
        piece = queue[index]
        if piece.text.strip():
            return segments.lone(piece)
    return False
