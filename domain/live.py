"""Live delivery: the answer grows in place, one message edited as the model writes (SPEC L).

A sibling of `cordstream.domain.outbox` (messages delivery); the reducer reaches it through
`delivery.LiveDelivery`. Pure functions over one value, `Live`, and the machine's `tail`, which
here holds the visible text of the *open* message (the one being edited) and all after it.

Cadence (L2). One request at a time, each in its turn under the channel's budget: the core
asks with `AwaitTurn(token)` when there is something new to show, and decides what the request
carries when the shell answers `TurnGranted(token)`, so it carries the latest text. The budget
is the shell's (`cordstream.shell.ratelimit`); what to show is decided here from the state
alone, so every decision replays in a unit test.

Layout (L3–L5). The open message shows `reopen` (a continued code block's fence line) and
`tail[:shown]`, then provisional closers (E8) and the cursor; what it shows only grows. Near
its end it shows only up to a boundary (`_near_end`); when the text does not fit it is finished
(*sealed*) at the best cut at or after what it shows (`_seal`), a code block closed there and
reopened in the next message (E3). When finishing would show nothing new, the next message is
created first and the finished one gets its final edit in the next turn (`closing`).

Cost (L10). A chunk only grows the tail while a turn or a request is under way (`appending`,
which the machine's hot path asks through `Live.try_append`); past `TAIL_BOUND` text waits in
a rope (`pile`) joined once per decision. A decision scans the tail once.

Typing (L1). Until the first message exists, the typing indicator shows, renewed every
`TYPING_RENEW` seconds (`TypingPause`, whose `PauseOver` renews it).

Endings (L7). Text still to show is shown in final edits and new messages (E8, closers
included) when the ending delivers; otherwise (a follow-up, B13, a limit, a refusal) what was
not shown is dropped and the open message gets its final edit with what it showed. Either way
the cursor goes. The embed, if any, follows as a message of its own, in its turn.

Accepted (L8, F2): `messages(live)` is each message's content as Discord last accepted it.
`created` counts messages created, which `send_message_limit` and `flush_limit` limit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal

from cordstream.domain.config import StreamConfig
from cordstream.domain.effects import (
    AwaitTurn,
    EditMessage,
    Route,
    SendEmbed,
    SendMessage,
    TypingPause,
)
from cordstream.domain.embeds import EmbedSpec
from cordstream.domain.graphemes import cut_before, is_boundary, sendable
from cordstream.domain.markdown import closers, closes_fence, fence_of, language_of
from cordstream.domain.outbox import LimitReached, limit_reached
from cordstream.domain.rope import Rope, items

TYPING_RENEW: Final = 8.0  # Discord shows the indicator for 10 s
TAIL_BOUND: Final = 32768  # past this, text waits in `Live.pile` rather than the tail (L10)
_CLOSER_RESERVE: Final = 24  # room kept for provisional closers; checked exactly when composed
_LONGEST_FENCE: Final = 16
_EARLY: Final = 32  # near a message's end, a new line this long starts the next message

Request = SendMessage | EditMessage | SendEmbed


@dataclass(frozen=True, slots=True)
class Flight:
    """The request in flight: what it is, its content, and whether it finishes the message."""

    kind: Literal["create", "edit", "close", "embed"]
    content: str = ""
    seals: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Live:
    """Live delivery's state beside the machine's `tail` (see the module docstring)."""

    sealed: Rope = None  # finished messages as Discord accepted them, newest first (F2)
    created: int = 0  # messages Discord created (L8)
    current: str | None = None  # the open message as Discord last accepted it; None: none
    shown: int = 0  # how much of the tail the open message shows, or is being edited to show
    reopen: str = ""  # the fence line the open message starts with, continuing a code block
    fence: str = ""  # that block's fence: the tail starts inside it ("" when not)
    # A finished message whose final edit waits: the next message was created first, since
    # the edit would have shown nothing new (L2); its final content, what it showed until
    # then, and its index among the stream's messages.
    closing: str | None = None
    previous: str | None = None
    closing_index: int = 0
    in_flight: int | None = None
    flight: Flight | None = None
    turn: int | None = None  # the turn awaited
    prompt: bool = False  # whether it is prompt (`AwaitTurn.prompt`)
    route: Route = "edit"  # the route it was asked for (`AwaitTurn.route`)
    typing: int | None = None  # the typing indicator's renewal awaited
    next_seq: int = 1  # the next request's seq, turn's or renewal's token
    first_url: str | None = None
    broken: bool = False  # Discord refused a message request: no text is sent any more
    pile: Rope = None  # visible text after a long tail, newest first (`add`, `merged`)
    # Whether a chunk may just grow the tail (`try_append`): the model writes, no capture is
    # open, a turn or a request is under way and nothing is piled up (`appending`).
    appending: bool = False

    def try_append(self, tail: str, text: str) -> str | None:
        """The machine's hot path (E10): the new tail, when `text` only has to wait for the
        next decision; None when the reducer must look (also for a `text` that is not a
        `str`: the reducer's caller checks and rejects it)."""
        try:  # free unless it raises
            if self.appending and len(tail) + len(text) <= TAIL_BOUND:
                return tail + text
        except TypeError:
            pass
        return None


EMPTY: Final = Live()


def busy(live: Live) -> bool:
    return live.turn is not None or live.in_flight is not None


def appending(live: Live, *, streaming: bool, capturing: bool) -> Live:
    """`live` saying whether the next chunk may just grow the tail (`Live.try_append`): not
    when it may ask for a turn, open a capture or end up in the pile."""
    fast = streaming and not capturing and live.pile is None and busy(live)
    return live if fast is live.appending else replace(live, appending=fast)


def add(live: Live, tail: str, text: str) -> tuple[Live, str]:
    """Visible `text` after what is there (L10): it joins the tail, or, once the tail is long
    (the model writes faster than Discord's budget lets it show), waits in the pile, which
    costs nothing per chunk; `merged` joins it when the next request is decided."""
    if live.pile is None and len(tail) + len(text) <= TAIL_BOUND:
        return live, tail + text
    return replace(live, pile=(live.pile, text)), tail


def merged(live: Live, tail: str) -> tuple[Live, str]:
    """The tail with the pile joined to it (once per decision, bounded by the cadence)."""
    if live.pile is None:
        return live, tail
    return replace(live, pile=None), tail + "".join(items(live.pile))


# -- the course of the stream ----------------------------------------------------------------


def start_typing(live: Live) -> tuple[Live, TypingPause]:
    token = live.next_seq
    return replace(live, typing=token, next_seq=token + 1), TypingPause(token, TYPING_RENEW)


def typing_over(live: Live, *, streaming: bool) -> tuple[Live, TypingPause | None]:
    """The indicator's time is up: renewed while nothing is shown yet and the model writes."""
    if streaming and live.created == 0 and live.in_flight is None and not live.broken:
        return start_typing(live)
    return replace(live, typing=None), None


def typing_due(live: Live, token: int) -> bool:
    return live.typing == token


def issued(live: Live, token: int) -> bool:
    return 0 < token < live.next_seq


def knows(live: Live, seq: int) -> bool:
    return live.in_flight == seq


def awaits(live: Live, token: int) -> bool:
    return live.turn == token


def unshown(live: Live, tail: str) -> tuple[str, str]:
    """The tail split into what the open message shows and what it does not (E4, C6, F3)."""
    return tail[: live.shown], tail[live.shown :]


def context(live: Live, tail: str) -> tuple[str, str]:
    """For capture: the fence of the code block the partial line is inside ("" if none; the
    complete lines decide), and that partial line (see `capture.feed`)."""
    line_start = tail.rfind("\n") + 1
    blocks = _blocks(tail[:line_start], live.fence)
    fence = blocks[-1].fence if blocks and blocks[-1].end is None else ""
    return fence, tail[line_start:]


def pump(
    live: Live, tail: str, config: StreamConfig, *, ending: bool, embed: EmbedSpec | None
) -> tuple[Live, AwaitTurn | None, bool]:
    """Ask for a turn when there is something to send; and whether all is done (ending only:
    nothing in flight, nothing left to send, no embed due).

    The turn names the request that would go now (`granted`): its route, and whether it is
    prompt, for a final content (a finished message, anything once the model ended), or
    spaced (L2). A spaced turn still awaited when the model ends is asked for again."""
    if live.in_flight is not None or (live.turn is not None and not ending):
        return live, None, False  # busy: the turn or the answer will look again
    plan = _plan(live, tail, config, final=ending)
    if embed is None and live.closing is None and plan is None:
        return live, None, ending
    if live.turn is not None and live.prompt:
        return live, None, False
    request = granted(live, tail, config, ending=ending, embed=embed)[2]
    prompt = not isinstance(request, SendMessage | EditMessage) or not request.streaming
    route = route_of(request)
    token = live.next_seq
    return (
        replace(live, turn=token, prompt=prompt, route=route, next_seq=token + 1),
        AwaitTurn(token, prompt, route),
        False,
    )


def _starting(tail: str, max_len: int) -> str:
    """The tail of a message about to start: without the blanks it would start with (Discord
    trims them, E6), and with a fence line it starts with that would not fit it with its
    closing fence shortened to its fence and language word: the rest of its info string is
    markup Markdown does not show (E3, as `segments.code_line` does)."""
    if tail[:1].isspace():
        tail = tail.lstrip()
    line = tail[: tail.find("\n") + 1]
    fence = fence_of(line) if line.startswith("```") else None
    if fence is not None and len(line) > max_len - _LONGEST_FENCE - 2:
        tail = f"{fence}{language_of(line)}\n{tail[len(line) :]}"
    return tail


def route_of(request: object) -> Route:
    """The route a request counts in at Discord (L2): an edit's, or a create's (an embed too)."""
    return "edit" if isinstance(request, EditMessage) else "send"


def granted(
    live: Live, tail: str, config: StreamConfig, *, ending: bool, embed: EmbedSpec | None
) -> tuple[Live, str, Request | LimitReached | None]:
    """The turn came: the request to make now, with the latest text (or a limit the next
    message would pass, F3, or None: nothing to send after all)."""
    live = replace(live, turn=None)
    if live.current is None and not live.shown and not live.reopen:
        tail = _starting(tail, config.max_message_length)
    plan = _plan(live, tail, config, final=ending)
    if (
        plan is not None
        and plan.seals
        and plan.cut <= live.shown
        and live.current is not None
        and live.closing is None
        and not ending
    ):
        # Finishing the message would show nothing new: the next message goes first, and
        # the final edit in the next turn (L2: no two turns without new text).
        live = replace(
            live,
            closing=plan.content,
            previous=live.current,
            closing_index=live.created - 1,
            current=None,
            shown=0,
            reopen=plan.reopen,
            fence=plan.fence,
        )
        tail = tail[plan.cut :]
        if not plan.reopen:
            tail = _starting(tail, config.max_message_length)
        plan = _plan(live, tail, config, final=ending)
    seq = live.next_seq
    if live.closing is not None and (
        plan is None or plan.seals or live.current is not None or ending
    ):  # the finished message's final edit before another message is finished (F2 order)
        flight = Flight("close", live.closing, seals=True)
        edit = EditMessage(seq, live.closing, live.closing_index)
        return replace(live, in_flight=seq, flight=flight, next_seq=seq + 1), tail, edit
    if plan is None:
        if embed is None:
            return live, tail, None
        flight = Flight("embed")
        return (
            replace(live, in_flight=seq, flight=flight, next_seq=seq + 1),
            tail,
            SendEmbed(seq, embed),
        )
    create = live.current is None
    if create:
        limit = limit_reached(config, live.created)
        if limit is not None:
            return live, tail, limit
    content = plan.content
    flight = Flight("create" if create else "edit", content, plan.seals)
    live = replace(live, in_flight=seq, flight=flight, next_seq=seq + 1, shown=plan.shown)
    if plan.seals:
        live = replace(live, shown=0, reopen=plan.reopen, fence=plan.fence)
        tail = tail[plan.cut :]
    streaming = not plan.seals
    request: Request = (
        SendMessage(seq, content, reply=live.created == 0, streaming=streaming)
        if create
        else EditMessage(seq, content, live.created - 1, streaming=streaming)
    )
    return live, tail, request


def accepted(live: Live, url: str | None) -> Live:
    """Discord accepted the request in flight."""
    flight = live.flight
    assert flight is not None
    live = replace(live, in_flight=None, flight=None)
    if flight.kind == "embed":
        return live
    if flight.kind == "close":
        return replace(live, sealed=(live.sealed, flight.content), closing=None, previous=None)
    if flight.kind == "create":
        first = live.first_url if live.first_url is not None else url
        live = replace(live, created=live.created + 1, first_url=first)
    if flight.seals:
        return replace(live, sealed=(live.sealed, flight.content), current=None)
    return replace(live, current=flight.content)


def refused(live: Live, *, deleted: bool) -> tuple[Live, Flight]:
    """Discord refused the request in flight; what it was. No text is sent after a refused
    message request. `deleted`: the open message is gone (L9), so it no longer counts (F2)."""
    flight = live.flight
    assert flight is not None
    live = replace(live, in_flight=None, flight=None)
    if flight.kind == "embed":
        return live, flight
    if deleted and flight.kind == "close":
        live = replace(live, previous=None, closing=None)
    elif deleted:
        live = replace(live, current=None)
    return replace(live, broken=True, closing=None), flight


def messages(live: Live) -> tuple[str, ...]:
    """Each message's content as Discord last accepted it, in order (F2, L8)."""
    found = items(live.sealed)
    if live.previous is not None:
        found.append(live.previous)
    if live.current is not None:
        found.append(live.current)
    return tuple(found)


def final_content(live: Live, tail: str, config: StreamConfig) -> str | None:
    """What the open message should show if the stream stopped now without delivering more
    (the cursor gone), or None when there is no open message: for a shell that must make the
    final edit itself (the caller's cancellation, L4)."""
    if live.current is None:
        return None
    text = tail[: live.shown]
    return _compose(live, text, _blocks(text, live.fence), cursor=None, last=True)


# -- layout ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Block:
    """A code block in the tail: where its fence line starts (0 when it continues from the
    previous message), where its code starts, and where it ends (after its closing fence
    line; None while open)."""

    start: int
    body: int
    end: int | None
    fence: str
    language: str


@dataclass(frozen=True, slots=True)
class _Plan:
    content: str
    shown: int  # what the open message shows after this request
    seals: bool = False  # the request finishes the message
    cut: int = 0  # sealing: where the next message's tail starts
    reopen: str = ""  # sealing: its fence line
    fence: str = ""


def _blocks(text: str, fence: str) -> list[_Block]:
    """The code blocks in `text`, which starts inside a block opened by `fence` when given."""
    blocks: list[_Block] = []
    open_block: _Block | None = _Block(0, 0, None, fence, "") if fence else None
    start = 0
    size = len(text)
    while start < size:
        newline = text.find("\n", start)
        end = size if newline == -1 else newline + 1
        line = text[start:end]
        if open_block is None:
            found = fence_of(line)
            if found is not None:
                open_block = _Block(start, end if newline != -1 else size + 1, None, found, "")
                open_block = replace(open_block, language=language_of(line))
        elif start >= open_block.body and closes_fence(line, open_block.fence):
            blocks.append(replace(open_block, end=end))
            open_block = None
        start = end
    if open_block is not None:
        blocks.append(open_block)
    return blocks


def _until(blocks: list[_Block], text: str, end: int) -> list[_Block]:
    """`_blocks(text[:end], fence)` from `blocks = _blocks(text, fence)`, without a scan: the
    blocks that start before `end`, the last one open if its closing fence line is not all
    before `end` (only the line's trailing whitespace may be after it)."""
    found = [block for block in blocks if block.start < end or block.start == 0]
    last = found[-1] if found else None
    if last is not None and last.end is not None and last.end > end:
        if text[end : last.end].strip() or not text[:end].rstrip().endswith("`"):
            found[-1] = replace(last, end=None)
        else:
            found[-1] = replace(last, end=end)
    return found


def _open_at(blocks: list[_Block], position: int) -> _Block | None:
    """The block a cut at `position` falls inside (after its fence line, before its end)."""
    for block in blocks:
        if block.start < position and (block.end is None or position < block.end):
            return block if position >= block.body or block.start == 0 else None
    return None


def _slack(config: StreamConfig) -> int:
    return min(400, config.max_message_length // 8)


def _plan(live: Live, tail: str, config: StreamConfig, *, final: bool) -> _Plan | None:
    """The next request: None when there is nothing new to show."""
    if live.broken:
        return None
    max_len = config.max_message_length
    cursor = "" if final else config.cursor
    blocks = _blocks(tail, live.fence)
    if final:
        # A fence line with nothing after it is left out (E3), but never what a message
        # already shows (L3: a backtick shown before it became a fence stays).
        visible = max(_visible_end(tail, blocks, arriving=False), live.shown)
        whole = _compose(live, tail, blocks, cursor=None, last=True)
        if visible < len(tail.rstrip()):
            shown = tail[:visible]
            whole = _compose(live, shown, _blocks(shown, live.fence), cursor=None, last=True)
        if len(whole) <= max_len:  # the last message: it takes all the tail, shown or left out
            return _Plan(whole, len(tail), seals=True, cut=len(tail)) if whole else None
        return _seal(live, tail, blocks, config, final=True)
    room = max_len - len(live.reopen) - len(cursor) - _CLOSER_RESERVE
    visible = _visible_end(tail, blocks)
    if visible > room:
        return _seal(live, tail, blocks, config)
    end = visible
    if visible > room - _slack(config):
        end = _near_end(tail, blocks, live.shown, visible, room - _slack(config))
        if end < 0:  # a line ended near the end and the next one is under way: roll over
            return _seal(live, tail, blocks, config, at=-end)
    if end <= live.shown:
        return None
    text = tail[:end]
    content = _compose(live, text, _until(blocks, tail, end), cursor=cursor, last=False)
    while len(content) > max_len and end > live.shown:  # closers longer than the reserve
        end = cut_before(tail, end - 1, live.shown)
        text = tail[:end]
        content = _compose(live, text, _blocks(text, live.fence), cursor=cursor, last=False)
    if end <= live.shown or len(content) > max_len or not content.strip():
        return None
    return _Plan(content, end)


def _visible_end(tail: str, blocks: list[_Block], *, arriving: bool = True) -> int:
    """How much of the tail may be shown at all: a code block's fence line is held back until
    code follows it (it may yet name its language, and a block cut there would be empty), and
    so is trailing whitespace, and (`arriving`: the model still writes) a last line of
    backticks alone, which may become a fence line (E3)."""
    end = len(tail)
    if blocks and blocks[-1].end is None and not tail[blocks[-1].body :].strip():
        end = blocks[-1].start  # not before it holds code: an empty block shows nothing
    line = tail.rfind("\n", 0, end) + 1
    if arriving and "\n" not in tail[line:] and not tail[line:end].strip(" \t").strip("`"):
        end = line  # "`" or "``" may be the start of "```"
    return len(tail[:end].rstrip()) if tail[:end].strip() else 0


def _near_end(tail: str, blocks: list[_Block], shown: int, end: int, soft: int) -> int:
    """Near the message's end, show only up to a boundary at or after `shown` (L5): before a
    code block that starts there and is still open (held), at a line end, else after a space.

    A line end there is where the message should end: once the next line has grown past
    `_EARLY` characters (so the wait it causes stays short), the answer is `-cut`, asking to
    finish the message at that line end now, unless a held block starts there."""
    held = False
    for block in blocks:
        if block.start >= max(shown, soft) and block.start > 0 and block.end is None:
            end, held = min(end, block.start), True
            break
    newline = tail.rfind("\n", max(shown - 1, soft), end)  # a cut at `shown` is fine
    if newline != -1:
        if not held and end - (newline + 1) > _EARLY:
            return -(newline + 1)
        return newline + 1
    for index in range(end - 1, shown - 1, -1):
        if tail[index].isspace() and is_boundary(tail, index + 1):
            return index + 1
    return shown  # no boundary since what is shown: nothing new until the next one


def _seal(
    live: Live,
    tail: str,
    blocks: list[_Block],
    config: StreamConfig,
    *,
    at: int = 0,
    final: bool = False,
) -> _Plan | None:
    """Finish the open message at the best cut at or after what it shows (L5, E3, E7), or
    `at`, a line end `_near_end` chose. While the model writes, never at the very end of what
    arrived: the next chunk may extend its last grapheme cluster. None: not yet (a closing
    fence line is arriving right where the message would be cut)."""
    max_len = config.max_message_length
    room = max_len - len(live.reopen) - _LONGEST_FENCE - 2
    soft = max(live.shown - 1, room - _slack(config), 0)  # a cut at `shown` is fine
    limit = min(room, len(tail) if final else len(tail) - 1)
    cut = at
    for block in (
        () if cut else blocks
    ):  # a block starting near the end that does not close in the room
        if soft <= block.start <= limit and block.start > 0 and (block.end or limit + 1) > limit:
            cut = block.start
            break
    if not cut:
        newline = tail.rfind("\n", soft, limit)
        if newline != -1:
            cut = newline + 1
    if not cut:  # a space, in the last three quarters of the room (as E7's cuts)
        for index in range(limit - 1, max(live.shown, limit // 4, 1) - 1, -1):
            if tail[index].isspace() and is_boundary(tail, index + 1):
                cut = index + 1
                break
    if not cut or cut < live.shown:
        cut = max(live.shown, cut_before(tail, limit, live.shown))
    for block in blocks:  # a cut in a block's opening fence line: the block starts the next
        if 0 < block.start < cut < block.body and live.shown <= block.start:
            cut = block.start  # message, where `_starting` shortens the line if need be
    inside = _open_at(blocks, cut)
    if inside is not None and cut <= inside.body:  # not right after a fence line
        if live.shown <= inside.start > 0:
            cut, inside = inside.start, None  # the block starts the next message
        else:  # the block starts this message: cut its code
            cut = max(cut, cut_before(tail, limit, max(live.shown, inside.body)))
    if inside is not None:
        # A block is never cut before its closing fence alone: the next message would be an
        # empty block. The fence goes with this message (the room kept for it takes it).
        rest = tail[cut : len(tail) if inside.end is None else inside.end]
        if not rest.strip().strip("`"):  # whitespace and its closing fence at most
            if inside.end is None and not final:
                return None  # what comes is unknown: wait until code or the fence is there
            end = len(tail) if inside.end is None else inside.end
            whole = _compose(
                live, tail[:end], _blocks(tail[:end], live.fence), cursor=None, last=False
            )
            if len(whole) <= max_len:
                cut, inside = end, None
    text = tail[:cut]
    shown = _blocks(text, live.fence)
    content = _compose(live, text, shown, cursor=None, last=False)
    if shown and shown[-1].end is None and shown[-1].body > cut and inside is None:
        # The cut leaves the start of a prose line that reads as a fence line (the backtick
        # that makes it prose is past the cut): closed here, the message has balanced fences.
        content += "\n" + shown[-1].fence
    reopen = fence = ""
    if inside is not None:
        fence = inside.fence
        reopen = live.reopen if inside.start == 0 and live.fence else ""
        reopen = reopen or f"{inside.fence}{inside.language}\n"
    return _Plan(content, cut, seals=True, cut=cut, reopen=reopen, fence=fence)


def _compose(live: Live, text: str, blocks: list[_Block], *, cursor: str | None, last: bool) -> str:
    """A message's content: the reopened fence line, the text, closers, the cursor (L4)."""
    body = (live.reopen + text).lstrip()
    if not text.strip():
        return ""  # a reopened fence line alone shows nothing
    last_block = blocks[-1] if blocks and blocks[-1].end is None else None
    if last_block is not None and last_block.body <= len(text):
        content = body + ("" if body.endswith("\n") else "\n") + last_block.fence
        if cursor:
            content += "\n" + cursor.strip()
    else:
        body = body.rstrip()
        # Inline markers after the last code block only: nothing is added after a closing
        # fence, and markup inside a block is code (E3, E8).
        after = max((block.end for block in blocks if block.end is not None), default=0)
        prose = text[after:].rstrip()
        close = closers(prose) if prose.strip() and (cursor is not None or last) else ""
        content = body + close + (cursor or "")
    return sendable(content)
