"""What each stream will do, drawn from the soak's one `random.Random(seed)` before it runs.

A `Plan` is a stream's script (text pieces in random chunk sizes, pauses, one tail), its
provider's cleanup and reaction, its config (live 60%, or messages), the Discord faults for
its channel, the user requests and when they come, its caller, a moderator's deletion, and,
for streams sharing a channel, its group (`shared_plan`: live streams sharing a budget;
`answer_group`: streams each answering another user, with requests aimed at their answers).
`asked_plan` makes a stream into a slash command's interaction, `make_answer` a clean 3-line
answer. Drawing is the only use of randomness, in stream order, so one seed gives the same
plans. docs/soak.md ("Rules chosen") gives the shares and why.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, TypeAlias, get_args

from cordstream import domain
from cordstream.shell import (
    StreamConfig,
)
from cordstream.shell.testing import emulator
from cordstream.shell.testing.script import Hang, Raw, Sleep
from tests.soak.faults import (
    CLEANUPS,
    DETAILS_MARKER,
    EXCEPTIONS,
    GARBAGE,
    PROVIDER_ERRORS,
    REACTIONS,
    SMUGGLED,
    TAILS,
    THINK_MARKER,
    Cleanup,
    PlannedFault,
    Poison,
    Reaction,
    Step,
    Tail,
    _fault,
)
from tests.support.oracle import (
    PROSE_TRAPS,
    Request,
    When,
)

TIMEOUT: Final = 5.0  # every stream's inactivity timeout (virtual seconds)
USER_ID: Final = 123456789012345678
ROLE_ID: Final = 456
DONE_USAGE: Final = domain.TokenUsage(1234, 567)
# How the bot awaits `stream_to_discord`: plainly; in a task it cancels at a random moment;
# inside its own `asyncio.timeout`.
Caller: TypeAlias = Literal["plain", "cancel", "timeout"]
CALLERS: Final[tuple[Caller, ...]] = get_args(Caller)
LIVE_SHARE: Final = 0.6  # of the plans, the share streaming live (the others: messages)
# Live delivery's cursors: the default, one glued to the text, an emoji, none.
CURSORS: Final = (" \u258c", "\u258c", " \u23f3", "")
DELETE_SHARE: Final = 0.15  # of the live plans, those whose newest message a moderator deletes
SHARED_SHARE: Final = 0.04  # at each plan, the chance that 2 or 3 live streams share a channel
# At each plan, the chance that 2 or 3 streams share a channel, each answering a user (C9),
# with requests aimed at their answers (`answer_group`).
ANSWER_SHARE: Final = 0.06
ANSWERED: Final = (111000000000000001, 111000000000000002, 111000000000000003)  # the askers
THIRD_USER: Final = 111000000000000009  # a user no stream answers (Carol)
MODERATOR: Final = "222000000000000001"  # stops any answer (C10: manages messages)
# A group request's moments sit off the virtual clock's round values (the scripts' sleeps are
# multiples of 10 ms), so that no request lands in the instant a stream ends.
OFFSET: Final = 0.0000371


# Who clicks an answer's Stop button (K2, C10): the user it answers, a third user (refused), a
# moderator (Manage Messages: allowed).
Clicker: TypeAlias = Literal["asker", "third", "moderator"]
CLICKERS: Final[tuple[Clicker, ...]] = get_args(Clicker)


@dataclass(frozen=True)
class Asking:
    """What a stream into an interaction adds to its plan (K1, K2): the Stop button, whether
    errors are ephemeral (`StreamContext.ephemeral_errors`), when its token expires (seconds
    after the stream starts; 0: before it starts, so the deferral fails; None: not during the
    soak), and who clicks its Stop button when."""

    stop_button: bool
    ephemeral_errors: bool
    expire_at: float | None
    clicks: tuple[tuple[Clicker, float], ...]


@dataclass(frozen=True)
class Plan:
    index: int
    steps: tuple[Step, ...]
    tail: Tail
    config: StreamConfig
    faults: tuple[PlannedFault, ...]
    requests: tuple[Request, ...]
    reply: bool
    suppress: bool
    progress_raises: bool
    headline: str | Exception | None
    call: domain.FunctionCall | None  # the function call of a `function_call` tail
    cleanup: Cleanup = "normal"
    reaction: Reaction = "normal"
    caller: Caller = "plain"
    caller_at: float = 0.0  # when a `cancel` caller cancels, or a `timeout` caller's delay
    race: bool = False  # a follow-up, then a stop a few ms later, while a send waits on a 429
    # Live delivery: a moderator deletes the stream's newest message this long after its first
    # message appeared (None: never; nothing happens when the call returns without one).
    delete_at: float | None = None
    # Live streams sharing one channel (and its budget, L2): the index of the group's first
    # plan (None: the stream has a channel of its own).
    group: int | None = None
    # A group of streams each answering a user (C9, `answer_group`): the user this stream
    # answers (`StreamContext.answering`; None: it names nobody), and how long after the
    # batch's start it starts. Its `requests` are the group's, made in its name: "before"
    # ones before any of the group starts, "during" ones this long after the batch's start,
    # "after" ones this long after its own return.
    per_answer: bool = False
    answering: int | None = None
    start_at: float = 0.0
    # A stream into a slash command's interaction (the interactions phase, `asked_plan`).
    asking: Asking | None = None


SNIPPETS: Final = (
    "Hello there! ",
    "A whole line of prose.\n",
    "Dr. Smith paid $3.50. Then he left! ",
    "\n",
    "",
    "\n```python\nprint('hi')\nx = [1, 2, 3]\n```\n",  # a fence starts a line: after it,
    "\n```\nplain code\n```\n",  # a tag is markup again (inside, it is code)
    f"<think>{THINK_MARKER} private reasoning</think>",
    f"<thinking>{THINK_MARKER} a plan</thinking>\n",
    f"<reasoning>{THINK_MARKER}</reasoning>",
    f"<details><summary>Sources</summary>{DETAILS_MARKER} a, b</details>",
    "@everyone look at this\n",
    "@here ",
    f"<@{USER_ID}> hi\n",
    f"<@!{USER_ID}> again ",
    f"<@&{ROLE_ID}> role ping\n",
    "😀 ",
    "👨‍👩‍👧 family\n",
    "🇫🇷🇯🇵 flags ",
    "e\u0301 combining ",
    "嗯\n",
    *PROSE_TRAPS,
    "| a | b |\n|---|---|\n| 1 | 2 |\n",
    "`inline code` ",
)
# Visible text only: a body of these sends nothing (an empty_response when it ends).
SILENT: Final = (
    f"<think>{THINK_MARKER}</think>",
    "   ",
    "\n",
    f"<details><summary>s</summary>{DETAILS_MARKER}</details>",
)


def _long_line(rng: random.Random) -> str:
    match rng.randrange(4):
        case 0:
            return "word " * rng.randint(410, 600)
        case 1:
            return "y" * rng.randint(2001, 2600)
        case 2:
            return "👨‍👩‍👧" * rng.randint(401, 520)  # 5 code points each, no space
        case _:
            return "@everyone " * rng.randint(201, 260)


def _cut(rng: random.Random, text: str) -> list[str]:
    """Cut `text` into chunks of random sizes (at code points, so graphemes may split)."""
    pieces: list[str] = []
    mode = rng.random()
    i = 0
    while i < len(text):
        if mode < 0.4:
            size = rng.randint(1, 8)
        elif mode < 0.85:
            size = rng.randint(8, 80)
        else:
            size = rng.randint(200, 3000)
        pieces.append(text[i : i + size])
        i += size
    return pieces


def _body(rng: random.Random) -> list[Step]:
    if rng.random() < 0.06:
        parts = [rng.choice(SILENT) for _ in range(rng.randint(1, 3))]
    else:
        parts = [rng.choice(SNIPPETS) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.15:
            # A line over the overflow size, ending its line or with the text going on after
            # it (an overflow cut that may fall inside an inline code span, E2 and E4).
            end = rng.choice(["", "\n"])
            parts.insert(rng.randrange(len(parts) + 1), _long_line(rng) + end)
        if rng.random() < 0.05:
            parts.append("\n```js\nan unclosed fence\n")  # last: tags after it would be code
    steps: list[Step] = []
    for piece in _cut(rng, "".join(parts)):
        steps.append(piece)  # at most one sleep follows a piece: never 5 s without a chunk
        extra = rng.random()
        if extra < 0.03:
            steps.append(domain.TextChunk("", usage={"prompt_tokens": 3, "completion_tokens": 4}))
        elif extra < 0.04:
            steps.append(
                domain.TextChunk("", usage={"prompt_tokens": "9", "completion_tokens": True})
            )
        elif extra < 0.05:
            steps.append(domain.TextChunk("", thoughts=(domain.Thought("summary", THINK_MARKER),)))
        elif extra < 0.06:
            steps.append(domain.DoneChunk())
        elif extra < 0.065:
            steps.append(domain.FunctionCallChunk(None))  # no call: ignored
        elif extra < 0.07:
            steps.append(domain.ErrorChunk(None))  # no error: ignored
        elif extra < 0.25:
            steps.append(Sleep(rng.choice([0.01, 0.2, 0.5, 1.0, 2.0])))
    return steps


def _tail(rng: random.Random, tail: Tail) -> tuple[list[Step], domain.FunctionCall | None]:
    match tail:
        case "end":
            return [], None
        case "done":
            usage = {"prompt_tokens": DONE_USAGE.input_tokens, "completion_tokens": 567}
            done = domain.DoneChunk({"finish_reason": "stop"}, usage=usage)
            return [done, *(["\nP.S. after done"] if rng.random() < 0.3 else [])], None
        case "raise":
            return [rng.choice(EXCEPTIONS)()], None
        case "process_raise":
            error = rng.choice([None, ValueError("cannot parse chunk"), KeyError("delta")])
            return [Poison(error), "never read"], None
        case "hang":
            return [Hang()], None
        case "garbage":
            garbage = GARBAGE + SMUGGLED
            return [Raw(rng.choice(garbage)()), "never read"], None
        case "error_chunk":
            return [
                domain.ErrorChunk(rng.choice(PROVIDER_ERRORS), usage={"prompt_tokens": 7})
            ], None
        case "function_call":
            calls = [domain.FunctionCall("lookup", {"q": "x"}, id="call-1")]
            if rng.random() < 0.3:
                calls.append(domain.FunctionCall("roll", {"sides": 6}, id="call-2"))
            chunk = domain.FunctionCallChunk(calls if len(calls) > 1 else calls[0])
            return [chunk, "never read"], calls[0]


def _request(rng: random.Random, when: When, at: float = 0.0) -> Request:
    if rng.random() < 0.6:
        requesters = ["user-1", None, "", "channel_deleted", "missing_access"]
        requester = rng.choices(requesters, [68, 12, 8, 7, 5])[0]
        return Request("stop", requester, when, at)
    return Request("follow_up", "user-2", when, at)


def _config(rng: random.Random) -> StreamConfig:
    """Live delivery (60%), with the default cursor or another one, or messages delivery, with
    a humanizer degree (which only messages delivery uses, L11)."""
    max_length = rng.choices([1950, 2000, 500], [60, 20, 20])[0]
    if rng.random() < LIVE_SHARE:
        return StreamConfig(
            delivery="live",
            inactivity_timeout=TIMEOUT,
            max_message_length=max_length,
            cursor=rng.choices(CURSORS, [70, 10, 10, 10])[0],
        )
    return StreamConfig(
        delivery="messages",
        inactivity_timeout=TIMEOUT,
        max_message_length=max_length,
        humanizer_degree=rng.choices([0, 1, 2, 3], [15, 55, 15, 15])[0],
    )


def make_plan(rng: random.Random, index: int) -> Plan:
    """One stream's plan, drawn from `rng` (the soak's only source of randomness)."""
    tail: Tail = rng.choices(TAILS, [30, 10, 8, 6, 14, 8, 8, 8])[0]
    body = _body(rng)
    ending, call = _tail(rng, tail)
    config = _config(rng)
    live = config.delivery == "live"
    faults = tuple(_fault(rng, live) for _ in range(rng.choices([0, 1, 2], [55, 35, 10])[0]))
    requests: list[Request] = []
    if rng.random() < 0.06:
        requests.append(_request(rng, "before"))
    for _ in range(rng.choices([0, 1, 2], [60, 30, 10])[0]):
        # Microseconds, mostly early: many streams take no virtual time at all.
        at = rng.choice([rng.uniform(0.0, 0.01), rng.uniform(0.0, 1.0), rng.uniform(0.0, 8.0)])
        requests.append(_request(rng, "during", round(at, 6)))
    if rng.random() < 0.10:
        requests.append(_request(rng, "after", round(rng.uniform(0.0, 2.0), 6)))
    headline = rng.choices([None, "The model refused", RuntimeError("no headline")], [7, 2, 1])[0]
    reply = rng.random() < 0.5
    suppress = rng.random() < 0.15
    progress_raises = rng.random() < 0.1
    cleanup: Cleanup = rng.choices(CLEANUPS, [55, 15, 15, 15])[0]
    reaction: Reaction = rng.choices(REACTIONS, [50, 13, 13, 12, 12])[0]
    caller: Caller = rng.choices(CALLERS, [70, 18, 12])[0]
    moment = rng.choice([rng.uniform(0.0, 0.01), rng.uniform(0.0, 2.0), rng.uniform(0.0, 10.0)])
    caller_at = round(moment, 6)
    if caller == "cancel" and rng.random() < 0.5:
        # Cancel while discord.py may be waiting out a global 429 (defect 5): the stream's
        # first send is answered with one, and the caller cancels within its retry_after.
        wait = rng.choice([1.0, 2.0])
        faults = (("429-global", emulator.RateLimited(wait, is_global=True), "send", 1), *faults)
        caller_at = round(rng.uniform(0.0, wait + 0.05), 6)
    race = rng.random() < 0.06
    if race:
        # Defect 4: the first send waits on a 429 while a follow-up and then a stop arrive.
        at = rng.uniform(0.0, 0.9)
        stop_at = at + rng.uniform(0.002, 0.1)
        requests = [
            Request("follow_up", "user-2", "during", round(at, 6)),
            Request("stop", rng.choice(["user-1", None]), "during", round(stop_at, 6)),
        ]
        is_global = rng.random() < 0.3
        limited = emulator.RateLimited(rng.choice([1.0, 2.0]), is_global=is_global)
        label = "429-global" if is_global else "429"
        faults = ((label, limited, "send", 1),)
        if rng.random() < 0.5:  # the example: the provider then hangs
            tail, ending, call = "hang", [Hang()], None
    delete_at = None
    if config.delivery == "live" and rng.random() < DELETE_SHARE:
        delete_at = round(rng.choice([rng.uniform(0.0, 1.5), rng.uniform(0.0, 4.0)]), 6)
    return Plan(
        index=index,
        steps=(*body, *ending),
        tail=tail,
        config=config,
        faults=faults,
        requests=tuple(requests),
        reply=reply,
        suppress=suppress,
        progress_raises=progress_raises,
        headline=headline,
        call=call,
        cleanup=cleanup,
        reaction=reaction,
        caller=caller,
        caller_at=caller_at,
        race=race,
        delete_at=delete_at,
    )


def make_plans(rng: random.Random, first: int, count: int) -> list[Plan]:
    """`count` plans, the first numbered `first`: mostly streams with a channel of their own
    (`make_plan`), and now and then 2 or 3 live streams sharing one (`shared_plan`)."""
    plans: list[Plan] = []
    while len(plans) < count:
        index = first + len(plans)
        left = count - len(plans)
        if left >= 2 and rng.random() < ANSWER_SHARE:
            plans += answer_group(rng, index, min(rng.choice([2, 3]), left))
        elif left >= 2 and rng.random() < SHARED_SHARE:
            size = min(rng.choice([2, 3]), left)
            config = StreamConfig(
                delivery="live",
                inactivity_timeout=TIMEOUT,
                max_message_length=rng.choices([1950, 500], [60, 40])[0],
            )
            plans += [shared_plan(rng, index + k, index, config) for k in range(size)]
        else:
            plans.append(make_plan(rng, index))
    return plans


def shared_plan(rng: random.Random, index: int, group: int, config: StreamConfig) -> Plan:
    """A live stream sharing its channel (and the channel's budget, L2) with the others of its
    group: its script, cleanup and reaction drawn as any stream's, with the group's `config`
    but no Discord fault, no request, no deletion, a plain caller, no reply and no embed, so
    that what the channel shows is the streams' doing alone (`attribute`)."""
    return grouped(make_plan(rng, index), group, config, requests=())


def grouped(plan: Plan, group: int, config: StreamConfig, **more: Any) -> Plan:
    """`plan` as one of a group sharing a channel: the group's `config`, no embed, and
    `quiet`, so that what the channel shows is the group's streams' doing alone
    (`attribute`); `more` sets the rest."""
    return quiet(plan, config=config, suppress=True, group=group, **more)


def quiet(plan: Plan, **more: Any) -> Plan:
    """`plan` without a Discord fault, a moderator's deletion, a reply or a caller of its own
    (a plain call, no race); `more` sets the rest."""
    return replace(
        plan,
        faults=(),
        reply=False,
        caller="plain",
        caller_at=0.0,
        race=False,
        delete_at=None,
        **more,
    )


def answer_group(rng: random.Random, group: int, size: int) -> list[Plan]:
    """`size` streams sharing a channel, each answering another asker (C9), one of them now
    and then naming nobody (the channel's answer, which every request reaches), the last one
    now and then starting later than the others; their scripts, cleanups and reactions drawn
    as any stream's, one config (live or messages), no Discord fault, no deletion, a plain
    caller, no reply and no embed (`attribute` tells their messages apart). The group's
    requests (`_targeted`) race them: stops aimed at one answer, follow-ups from an asker
    (some through `interrupt_own_answer`), channel-wide stops, a third user's follow-ups and
    stops aimed at an answer nobody streams; before any of them starts (B4 per answer),
    during, and after one's return."""
    config = _config(rng)
    answering: list[int | None] = list(ANSWERED[:size])
    if rng.random() < 0.2:
        answering[rng.randrange(size)] = None
    start_at = [0.0] * size
    if rng.random() < 0.3:
        start_at[-1] = rng.choice([0.3, 1.0, 2.5])
    requests: list[list[Request]] = [[] for _ in range(size)]
    for _ in range(rng.choices([1, 2, 3, 4], [20, 35, 30, 15])[0]):
        member, request = _targeted(rng, answering)
        requests[member].append(request)
    plans = [make_plan(rng, group + k) for k in range(size)]
    return [
        grouped(
            plan,
            group,
            config,
            steps=_slowed(rng, plan.steps) if rng.random() < 0.6 else plan.steps,
            requests=tuple(requests[k]),
            per_answer=True,
            answering=answering[k],
            start_at=start_at[k],
        )
        for k, plan in enumerate(plans)
    ]


def _slowed(rng: random.Random, steps: Sequence[Step]) -> tuple[Step, ...]:
    """`steps` with a short pause after half of the text pieces, so that the answers of a
    group stream side by side long enough for requests to find them (never 5 s without a
    chunk: a piece is followed by at most 2.5 s of sleep)."""
    slowed: list[Step] = []
    for step in steps:
        slowed.append(step)
        if isinstance(step, str) and rng.random() < 0.5:
            slowed.append(Sleep(rng.choice([0.05, 0.2, 0.5])))
    return tuple(slowed)


def _targeted(rng: random.Random, answering: Sequence[int | None]) -> tuple[int, Request]:
    """One request of an `answer_group`, and the member that makes it (its "after" moment is
    that member's return): the asker of the answer it aims at, or anyone for the others."""
    askers = [(k, user) for k, user in enumerate(answering) if user is not None]
    member, user = rng.choice(askers)
    moments: list[When] = ["before", "during", "after"]
    when = rng.choices(moments, [15, 70, 15])[0]
    moment = rng.choice([rng.uniform(0.0, 0.01), rng.uniform(0.0, 1.0), rng.uniform(0.0, 6.0)])
    at = 0.0 if when == "before" else round(moment, 4) + OFFSET
    match rng.choices(["aimed", "follow_up", "channel", "third", "nobody"], [35, 30, 18, 9, 8])[0]:
        case "aimed":  # the asker's own /stop, a moderator's, the bot's or an internal one
            requester = rng.choices(
                [str(user), MODERATOR, None, "channel_deleted", "send_message_limit"],
                [50, 25, 10, 10, 5],
            )[0]
            return member, Request("stop", requester, when, at, answering=user)
        case "follow_up":
            own = rng.random() < 0.5
            return member, Request("follow_up", str(user), when, at, own=own)
        case "channel":
            requester = rng.choice([MODERATOR, None, str(user)])
            return rng.randrange(len(answering)), Request("stop", requester, when, at)
        case "third":  # Carol's message: it ends no asker's answer
            own = rng.random() < 0.5
            request = Request("follow_up", str(THIRD_USER), when, at, own=own)
            return rng.randrange(len(answering)), request
    request = Request("stop", MODERATOR, when, at, answering=THIRD_USER)  # no such answer
    return rng.randrange(len(answering)), request


INTERACTION_SHARE: Final = 0.28  # of the interaction plans, those whose token expires


def asked_plan(rng: random.Random, index: int, asker: int) -> Plan:
    """A stream into a slash command's interaction (K1), answering `asker`: a script, cleanup,
    reaction, config and user requests drawn as any stream's (the requests aimed at the
    asker's answer, `_for_asker`), no Discord fault (an interaction's requests go through
    discord.py's webhooks, which retry otherwise), a plain caller; a Stop button on 70% of the
    live ones (K2), clicked by the asker, a third user or a moderator in 60% of those; errors
    ephemeral (80%, the default) or public; the token expiring during the stream (25%) or
    before it starts (3%)."""
    plan = make_plan(rng, index)
    live = plan.config.delivery == "live"
    stop_button = live and rng.random() < 0.7
    clicks: tuple[tuple[Clicker, float], ...] = ()
    if stop_button and rng.random() < 0.6:
        clicks = tuple(
            (rng.choices(CLICKERS, [45, 35, 20])[0], round(rng.uniform(0.0, 3.0), 4) + OFFSET)
            for _ in range(rng.choice([1, 1, 2]))
        )
    roll = rng.random()
    expire_at: float | None = None
    if roll < INTERACTION_SHARE - 0.03:
        moment = rng.choice([rng.uniform(0.0, 0.5), rng.uniform(0.0, 4.0)])
        expire_at = round(moment, 4) + OFFSET
    elif roll < INTERACTION_SHARE:
        expire_at = 0.0
    return quiet(
        plan,
        requests=tuple(_for_asker(rng, r, asker) for r in plan.requests),
        answering=asker,
        asking=Asking(stop_button, rng.random() < 0.8, expire_at, clicks),
    )


def _for_asker(rng: random.Random, request: Request, asker: int) -> Request:
    """A request of `make_plan`, aimed at the asker's answer (C9): the user's stop is the
    asker's (at their answer, or channel-wide), a follow-up is the asker's new message
    (`request_follow_up` or `interrupt_own_answer`); system and internal stops stay
    channel-wide."""
    if request.kind == "follow_up":
        return replace(request, requester=str(asker), own=rng.random() < 0.5)
    if request.requester == "user-1":
        aimed = asker if rng.random() < 0.5 else None
        return replace(request, requester=str(asker), answering=aimed)
    return request


ANSWER_WORDS: Final = ("alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "lamp")


def make_answer(rng: random.Random, index: int) -> tuple[tuple[str, ...], tuple[Step, ...]]:
    """A 3-line answer (its lines) and the script that streams it: random chunk sizes, some
    pauses, never 5 s without a chunk."""
    lines = tuple(
        f"Answer {index}, line {k}: " + " ".join(rng.choices(ANSWER_WORDS, k=rng.randint(2, 9)))
        for k in (1, 2, 3)
    )
    steps: list[Step] = []
    for piece in _cut(rng, "\n".join(lines)):
        steps.append(piece)
        if rng.random() < 0.3:
            steps.append(Sleep(rng.choice([0.01, 0.2, 1.0])))
    return lines, tuple(steps)
