"""`python -m bench.soak [--streams N] [--seed S] [--channels C] [--limited N]
[--limited-channels C] [--answers N] [--interactions N] [--interaction-channels C] [--json]`:
a soak of the real shell under faults (`make soak`).

Thousands of randomized streams go through the real `StreamOrchestrator.stream_to_discord`, a
real logged-in `discord.Client` and the local `DiscordEmulator`, in batches of C concurrent
streams, one per emulator channel (now and then two or three live streams share one, or two
or three streams each answering another user, with requests aimed at their answers), live
(SPEC L, 60%) or as messages. Everything runs on looptime's virtual clock (one
`asyncio.Runner` with `looptime.new_event_loop`): hangs, inactivity timeouts, typing pauses,
slow replies, 429 waits, discord.py's 5xx backoff (1, 3, 5, 7, 9 s) and the provider's cleanup
budget cost no real time.

Four phases, one emulator and client each, the plans of all drawn from the one seeded Random:

1. *faults* (`--streams`, 5000, `--channels` 8 at once): the emulator's rate limits off.
2. *real limits* (`--limited`, 1000, `--limited-channels` 250 at once): the same kind of plans
   under Discord's real rate limits (`DiscordEmulator(rate_limits=RateLimits())`, switched on
   after the set-up requests: per-channel buckets with their headers, a global 50 requests per
   second with `"global": true` 429s), with cordstream's process-wide pacing as it is
   (`cordstream.shell.ratelimit`, 50/s by default). Every check of phase 1 holds; a 429 from
   the limits counts as one of discord.py's tries, like an injected one (`_send_faults`).
3. *answers* (`--answers`, 1000, all at once): clean 3-line answers (random chunk sizes, some
   pauses), each into its own channel, live (60%) or as messages, under the same limits.
   Every one must end `completed` with its three lines, in order, in `accumulated_text` and
   in its channel, and no embed (F4, `check_answer`), and no live answer's message request
   may be answered 429 by its channel's limit (L2); any other is an answer lost.
4. *interactions* (`--interactions`, 500, `--interaction-channels` 20 at once; issue 13, K1,
   K2): streams into slash commands' interactions. A phase of its own because it needs a
   bot on the emulator's gateway (`local_bot`: a real `commands.Bot` whose `/ask` receives
   INTERACTION_CREATE over the websocket and hands its `discord.Interaction` to the soak),
   and every message and edit then also goes to that bot as a gateway event, which the
   other phases' thousands of streams need not pay for. Each plan (`asked_plan`) is any
   stream's script, cleanup, reaction, config and user requests (aimed at the asker's answer,
   `_for_asker`), without Discord faults (an interaction's requests go through discord.py's
   webhooks, whose retries are not the ones the oracle counts) and with a plain caller;
   `StreamContext(interaction, answering=asker, stop_button=..., ephemeral_errors=...)`.
   The token expires during the stream for a quarter of them
   (`DiscordEmulator.expire_interaction`), before it starts for 3% (the deferral is refused);
   70% of the live ones carry the Stop button, clicked (`DiscordEmulator.click`, on the
   newest message showing it) by the asker, a third user or a moderator in 60% of those; a
   stream ending on a function call is settled with `finish_interaction`. The oracle judges
   each as any stream, from its channel's public messages (the "thinking" response that
   never showed anything aside, `thinking_only`) and the ephemeral ones its asker was shown,
   its interaction's requests included (K3: allowed mentions, lengths, hidden text,
   `tests.oracle.message_body`), and with the stops its clicks registered as requests made
   (`ClickRegistry`); `check_asked` adds K1's and K2's rules: nothing left "thinking" after
   the result; no public error embed while the token lives where an ephemeral one is due
   (a public follow-up with an embed, or an embed on the original response after it showed
   text); a third user's click registers no stop, is not acknowledged as one, and gets the
   ephemeral refusal while the stream runs; the asker's or a moderator's click while the
   stream runs registers a stop, and the stream ends stopped. A transcript mismatch (F2) of
   a stream whose token expired during it is also a message lost at the expiry.

Rules chosen
------------
- Every stream draws its plan from one `random.Random(seed)`, in stream order, before it
  runs: the provider's script (text pieces cut into random chunk sizes, at most one sleep,
  shorter than the 5 s inactivity timeout, after each, and one *tail*), its cleanup and its
  reaction to cancellation, the Discord faults queued for its channel
  (`api.inject(..., channel_id=...)`), the user requests, the caller and the context. Real I/O
  interleaves with virtual time, so two runs with one seed agree on the plans, not
  necessarily on every status.
- Deliveries (issue 12): 60% of the plans stream live (`delivery="live"`), with the default
  cursor (70%), one glued to the text, an emoji or none; the others as messages, with a
  humanizer degree (which live delivery does not use, L11). A live plan's Discord faults fall
  on its edits too; 15% of the live plans have a moderator delete the stream's newest message
  (`DiscordEmulator.delete_message`) 0 to 4 virtual seconds after its first message appeared:
  an edit of it then gets 10008 and the stream must end as `message_deleted` (L9), or, when
  no edit of it followed, keep it in `messages` as Discord last accepted it (F2). At each
  plan, with a chance of 4%, two or three live streams share a channel and its budget (L2,
  `shared_plan`): no fault, no request, no deletion, a plain caller, no reply, no embed, one
  config; each stream's messages are then the channel's messages its result lists, in order
  (`attribute`), and the channel's must all be someone's.
- Answer groups (issue 13, C9): at each plan, with a chance of 6%, two or three streams share
  a channel, each answering another asker (`StreamContext(channel, answering=user_id)`; one
  in five groups has a stream that names nobody, the channel's answer, which every request
  reaches), and the group's requests race them (`answer_group`). They are plans of phases 1
  and 2, not a phase of their own: they then run beside faulty streams, under both limit
  settings, and every per-batch check (leaked tasks, listeners, the probe) covers them. Like
  a shared channel's streams: one config (live or messages), no Discord fault, no deletion,
  a plain caller, no reply, no embed, and `attribute`; their scripts, cleanups and reactions
  are any stream's, more often paced (`_slowed`), and the last one starts up to 2.5 s late
  now and then. The requests (1 to 4 a group, `_targeted`): a stop aimed at one answer
  (`request_stop(..., answering=user)`, by the asker, a moderator, the bot, or with an
  internal id), a follow-up from an asker (`request_follow_up(channel, str(user))`, or
  `interrupt_own_answer(channel, user)`), a channel-wide stop, a third user's follow-up or
  `interrupt_own_answer` (it ends no asker's answer), a stop aimed at an answer nobody
  streams; before any of the group starts (B4 per answer), during (a latecomer's B4 too),
  and after one's return. Which streams each request is for is C9's rule (`holders`): the
  streams it reaches (`tests.oracle.request_reaches`, written apart from the domain's)
  whose readers were open when it was registered; when none, the first it reaches to start
  after, if it is still pending then (and the next, when that one ends without consuming
  it). The order of requests, readers and entries is the registry's count of events
  (`TimedRegistry.tick`), not the clock's, so no instant is ambiguous. Each stream is then
  judged by the oracle as a stream of its own with the requests meant for it (`distribute`:
  those it took at its start count as made before it, B4), plus `check_targets`: no request
  meant for another stream ended it (`cross_answer`), and each request was accepted or
  refused as C3 and C9 say (`admissible`: a follow-up is refused while a stop reaching its
  requester's answer is pending, `interrupt_own_answer` also when no answer of theirs
  streams; a refused request changes nothing). An entry left in the channel is stale when
  every stream it was for explains it (as below), or it was for none (it waits for a later
  stream: a stop aimed at an answer that ended, a third user's follow-up); otherwise
  unexplained. After every batch no entry may still be owed to a stream or consumed by one
  (`TimedRegistry.leaks`: no later stream would take it).
- Provider tails: `end` (exhausted), `done` (a `DoneChunk` with usage, then maybe more text),
  `raise` (the iterator raises: ValueError, a RuntimeError with a key in it, ConnectionResetError,
  TimeoutError, KeyError, StopAsyncIteration, CancelledError), `process_raise` (`process_chunk`
  raises, or builds a chunk with a wrong-typed field), `hang` (never yields again),
  `garbage` (non-chunk values: None, ints, bytes, dicts, a raw str, a tuple),
  `error_chunk` (`ErrorChunk(ProviderError(...))`), `function_call`. Bodies mix plain text,
  code fences, `<think>`/`<details>` blocks holding markers that must never reach Discord,
  mentions (@everyone, @here, <@id>, <@!id>, <@&id>), lines over 2000 characters, emoji and
  ZWJ sequences, keep-alives with usage or thoughts, and `DoneChunk`s mid-stream.
- Provider cleanups (issue 10, defects 1 and 2), once cordstream stops the provider: `normal`;
  `finally_hang` (the async generator's `finally` awaits forever when it is cancelled or
  closed, so inside the interrupted `__anext__` or inside `aclose()`); `aclose_hang`
  (`aclose()` awaits forever); `aclose_cancelled` (`aclose()` raises CancelledError although
  nobody cancelled anything).
- Provider reactions to the cancellation cordstream uses to interrupt a pending `__anext__`
  (defect 3): `normal` (it goes through); `swallow_wait` (caught, and the provider keeps
  waiting); `swallow_yield` (caught, and it yields a text marker that must never be sent);
  `convert_return` (caught, and the iterator ends: StopAsyncIteration); `convert_raise`
  (caught, and it raises a ValueError of its own). A provider swallows or absorbs at most one
  cancellation: the next one, which cordstream sends when the cleanup budget
  (`CLOSE_TIMEOUT`) is spent, goes through, so no provider is abandoned and none of its code
  may still run when the call returns (a provider that ignores every cancellation is
  abandoned by design, see shell/orchestrator.py, and is not part of the soak).
- Callers (defects 3 and 5): `plain` awaits the call; `cancel` runs it in a task of its own
  and cancels that at a random virtual moment, half of the time while discord.py waits out a
  global 429 that the stream's first send is answered with (the caller cancels within its
  `retry_after`); `timeout` wraps the call in its own `asyncio.timeout(...)`. Every caller's
  task must leave the call with the `cancelling()` it came with, plus the one cancel request a
  `cancel` caller made itself; a delivered cancel must come out as CancelledError, a timeout
  that fired as TimeoutError, each within the provider's cleanup budget (`CLOSE_TIMEOUT +
  CLOSE_GRACE`) and RETURN_SLACK of the caller's move, with no result.
- Discord faults (each stream: none, one or two): 429 (with `Via`: waited out; global or not),
  429 without `Via` (Cloudflare: refused), 403 Missing Access / Missing Permissions, 404
  Unknown Channel, 500, 502, 500 six times (beyond discord.py's five retries), Drop, Delay
  (slow reply, accepted) and Delay-then-fault; mostly on sends, some on typing or any route,
  and a live stream's on its edits too. Faults not consumed by the end of a batch are cleared.
- User requests: a stop (user, system, or the internal `channel_deleted` or `missing_access`)
  or follow-up registered before the stream (B4), at random virtual moments after its start
  (`loop.call_later`; some land after the stream ended), and some deliberately after the result.
  Some streams race a stop against a follow-up (defect 4): the first send is answered with a
  429 (1 or 2 s, sometimes global), a follow-up comes at a random moment in the first 0.9 s,
  and a stop 2 to 100 ms after it; half of those providers hang after their text.
  After a batch, every scheduled request has fired; an entry left in the registry is *stale*
  when it was registered after its stream stopped listening, or it is a follow-up that came
  while a stop or follow-up was already ending the stream (it waits for the next turn, C5),
  or it is a stop that came once an internal stop had fixed the outcome (C5: it stays for the
  bot to see), or its call was cancelled by its caller (no result: nothing was resolved):
  those are counted and cleaned with `orchestrator.discard_requests(channel_id)` before the
  channel's next stream. Any other entry is unexplained, a must-be-zero figure.
- A stop is never lost (C2, C5, `_check_stops`): each accepted stop decided the result
  (`stopped_by_user` with the context of one of the stops made: a second stop that found the
  stream stopping changes nothing), or is still the channel's registry entry once the batch
  settled, or was replaced by a later stop while pending. A call its caller interrupted has no
  result and is not judged on this.
- Per batch: what cancelled calls left in the background (`ratelimit.drain_background`: the
  keepers that reopen discord.py's global lock, and requests handed over) are given
  BACKGROUND_LIMIT virtual seconds to end; tasks started during the batch and still alive
  after it (the emulator's own aiohttp connection handlers excluded: that is Discord's side)
  are leaked tasks; `stops.listening()` must be 0;
  then a probe message is sent through the same `discord.Client`, on a channel of its own,
  in its turn under cordstream's pacing, and must be accepted within PROBE_LIMIT virtual
  seconds, or the client is *wedged* (B11: a caller's cancellation during a global 429 wait
  must not leave discord.py's global lock closed).
- Per stream (`check_stream`, a pure function of the recorded `Outcome`): the invariants the
  shell's property tests check too, from their one home, `tests/oracle.py` (its docstring
  lists them: B1 and the result's `anomalies`, B2, B3, B4, B10, B11, C2, C4, C5, C7, E7, F1,
  F2, G6, G7, every status explained, a *quiet* stream ending as its tail says, and live
  delivery's L2, L3, L4, L9 and E3 from the channel's history), with the think/details
  markers and text yielded after a stop as texts that must never be sent (E4, E5, B5); the
  caller's (`check_caller` above); and the plan's: a known status, usage the
  latest valid report (B5), the function call planned, a quiet error chunk's error as data.
  The provider is the test kit's `ScriptProvider` (`SoakProvider` adds the plan's
  misbehaviour): it notes when it was told to stop (a cancellation reached it, its script's
  cleanup ran, or `aclose()` was called), whether `aclose()` was called, and its calls still
  under way. A *quiet* stream has no request before its end, no Discord fault that can change
  its course and no limit reached (its cleanup and reaction do not change the outcome).
  discord.py makes five tries per request, each 429-with-Via or 5xx reply using one: fewer
  than five such replies in a stream cannot fail a send, so they leave it quiet.
  A caller-interrupted stream is explained thus: CancelledError (or the caller's TimeoutError)
  came out of the call, there is no result, its messages obey every message rule above, the
  provider was closed and is not running, and the batch leaked nothing.
- Wall time is `time.perf_counter()` around the whole run, emulator start included; each
  phase's real and virtual seconds are printed.

Found by the soak and fixed: garbage chunks whose field was smuggled to a wrong type after
validation made `step` raise, and the shell's last resort then lost a message in flight (F2,
B13); an overflow cut (E2) inside an inline code span made capture take a later `<think>` on
that line for code, so the thought was sent (E4). Both faults are part of every soak. Run
against the shell of issue 10's time, the new faults find its defects 1 to 6: CancelledError
escaping, callers' `cancelling()` changed and a timeout raising CancelledError, stops lost
behind follow-ups, the client wedged after a cancel during a global 429 wait, and 37 of 200
answers lost at the global limit.

Found by the soak and the shell's property tests, fix pending: the oracle's `KNOWN_DEFECTS`
(`tests/oracle.py` says what each is; a strict xfail test in tests/test_soak.py pins each).
They are counted and sampled apart ("known defects"), not in the must-be-zero figures. None
now: the last, found by the interactions phase (`thinking_after_expiry`: a token that expired
while the original response was still "thinking" left it thinking), is fixed.

Must be zero (the exit status is 1 otherwise): exceptions escaped, streams stuck (not done
within 900 virtual seconds), leaked tasks, leaked listeners, unexplained registry entries,
transcript mismatches, pings, invariant violations, callers whose `cancelling()` changed,
timeout callers that got CancelledError instead of TimeoutError, stops lost, wedged clients,
answers lost or incomplete, results with anomalies (events a correct shell never feeds the
core), of live delivery, messages left with the cursor, messages whose text shrank, and
message requests answered 429 by a channel's limit, per answer (C9), streams ended by a
request meant for another stream (`cross_answer`), streams a request meant for them did not
end (`request_ignored`, B4: for every stream), and registry entries no later stream would
take (`leaks`), and of interactions (K1, K2), answers left "thinking", messages lost at a
token's expiry, public error embeds where an ephemeral one was due, refused Stop clicks that
stopped, and accepted ones that did not. A *global* 429 is not one of them: in
the real-limits phase the global limit is met by requests cordstream does not pace (discord.py
retrying a 5xx or a 429 it was answered, all of a client's requests going at once when a
global 429 wait ends) and, until it is paced, by the shell's final edit after a caller's
cancellation; the table counts them ("429s from Discord's real rate limits").
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, Literal, NoReturn, TypeAlias, cast, get_args

import discord
import looptime
from discord.ext import commands

from cordstream import domain
from cordstream.domain import StopRequest
from cordstream.shell import (
    StreamConfig,
    StreamContext,
    StreamOrchestrator,
    finish_interaction,
    ratelimit,
)
from cordstream.shell.buttons import STOP_BUTTON_PREFIX, STOP_REFUSED
from cordstream.shell.orchestrator import CLOSE_GRACE, CLOSE_TIMEOUT
from cordstream.shell.stops import StopRegistry
from cordstream.shell.testing import GuildMember, InteractionRecord, emulator, local_bot
from cordstream.shell.testing.script import Hang, Raw, ScriptProvider, ScriptStream, Sleep
from cordstream.shell.testing.script import Step as ScriptStep
from tests.support.oracle import (
    ENDING_STATUSES,
    KNOWN_DEFECTS,
    PROSE_TRAPS,
    Fired,
    Observed,
    Request,
    TimedRegistry,
    Violation,
    When,
    check,
    entry_explained,
    is_quiet,
    leftover_tasks,
    request_reaches,
)

DESCRIPTION: Final = "A soak of the real shell under faults, on looptime's virtual clock."
STATUSES: Final = frozenset(get_args(domain.StreamStatus))
TIMEOUT: Final = 5.0  # every stream's inactivity timeout (virtual seconds)
STREAM_LIMIT: Final = 900.0  # a batch not done within this (virtual) is stuck
THINK_MARKER: Final = "THINK-SECRET"
DETAILS_MARKER: Final = "DETAILS-SECRET"
USER_ID: Final = 123456789012345678
ROLE_ID: Final = 456
DONE_USAGE: Final = domain.TokenUsage(1234, 567)

Tail: TypeAlias = Literal[
    "end", "done", "raise", "process_raise", "hang", "garbage", "error_chunk", "function_call"
]
TAILS: Final[tuple[Tail, ...]] = get_args(Tail)
# A Discord fault a plan queues for its stream's channel: (label, fault, route, times).
PlannedFault: TypeAlias = tuple[str, emulator.Fault, emulator.FaultRoute, int]
FAULT_TAILS: Final = frozenset({"raise", "process_raise", "hang", "garbage", "error_chunk"})
# How the provider's cleanup behaves once cordstream stops it (B2, B10): as it should; an
# async generator whose `finally` awaits forever when it is cancelled or closed; an `aclose()`
# that hangs; an `aclose()` that raises CancelledError although nobody cancelled anything.
Cleanup: TypeAlias = Literal["normal", "finally_hang", "aclose_hang", "aclose_cancelled"]
CLEANUPS: Final[tuple[Cleanup, ...]] = get_args(Cleanup)
# What the provider does with the cancellation cordstream uses to interrupt a pending
# `__anext__` (§A, B11), the first time it gets one (the next one goes through): lets it
# through; swallows it and keeps waiting; swallows it and yields more text; turns it into
# the end of the stream (StopAsyncIteration); turns it into an exception of its own.
Reaction: TypeAlias = Literal[
    "normal", "swallow_wait", "swallow_yield", "convert_return", "convert_raise"
]
REACTIONS: Final[tuple[Reaction, ...]] = get_args(Reaction)
# How the bot awaits `stream_to_discord`: plainly; in a task it cancels at a random moment;
# inside its own `asyncio.timeout`.
Caller: TypeAlias = Literal["plain", "cancel", "timeout"]
CALLERS: Final[tuple[Caller, ...]] = get_args(Caller)
AFTER_STOP_MARKER: Final = "YIELDED-AFTER-STOP"  # text a provider yields once stopped
HIDDEN_MARKERS: Final = (THINK_MARKER, DETAILS_MARKER, AFTER_STOP_MARKER)
# A call interrupted by its caller (cancel, timeout) returns within the provider's cleanup
# budget (shell/orchestrator.py) and this much more.
RETURN_SLACK: Final = 0.5
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
PROBE_LIMIT: Final = 120.0  # a probe send after a batch not done within this: a wedged client
BACKGROUND_LIMIT: Final = 120.0  # requests handed over to the background end within this
# No registry entry ages out (C8) before its batch is judged, however long the batch lasts (a
# stuck one lasts STREAM_LIMIT): C8 has tests of its own.
MAX_AGE: Final = 10 * (STREAM_LIMIT + PROBE_LIMIT)
MUST_BE_ZERO: Final = (
    "exceptions_escaped",
    "stuck_streams",
    "leaked_tasks",
    "leaked_listeners",
    "unexplained_registry_entries",
    "transcript_mismatches",
    "pings",
    "invariant_violations",
    "cancelling_changed",
    "timeouts_as_cancelled",
    "stops_lost",
    "wedged_clients",
    "answers_lost",
    "anomalies",
    "cursors_left",
    "shrinking_edits",
    "live_429s",
    "cross_answer_stops",
    "stops_missed",
    "entries_leaked",
    "left_thinking",
    "expiry_losses",
    "public_embeds",
    "refused_clicks_obeyed",
    "accepted_clicks_ignored",
)


# -- the provider ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Poison:
    """Yielded; `process_chunk` raises (or builds a chunk that fails its own validation)."""

    error: Exception | None  # None: `process_chunk` builds `TextChunk(42)` (a TypeError)


Step: TypeAlias = ScriptStep | Poison


@dataclass(eq=False)
class SoakProvider(ScriptProvider):
    """The test kit's `ScriptProvider` (which notes when it was started, given chunks, told to
    stop and closed with `aclose()`, its calls under way, and what of its script it reached),
    misbehaving as the plan says: `Poison` items, a `cleanup` and a `reaction` to
    cordstream's cancellation (`SoakStream`). It also notes the cancellations its code
    received (`cancels`), the usage it expects in the result (`expected_usage`: the latest
    valid one processed, D2), and labels what it reached for the report ("done", cleanups,
    reactions)."""

    name: str = "soak"
    cleanup: Cleanup = "normal"
    reaction: Reaction = "normal"
    cancels: int = field(default=0, init=False)
    expected_usage: domain.TokenUsage | None = field(default=None, init=False)

    def start_stream(self, config: StreamConfig, context: StreamContext) -> AsyncIterator[object]:
        self.note_start()
        return SoakStream(self)

    def process(self, raw: object) -> domain.ProcessedChunk:
        match raw:
            case Poison(error=error):
                self.reached.add("process_raise")
                if error is None:  # a wrong type: TextChunk raises TypeError
                    return domain.TextChunk(cast(str, 42))
                raise error
            case domain.DoneChunk(usage=usage) if usage is not None:
                self.reached.add("done")
        usage = getattr(raw, "usage", None)
        if isinstance(usage, Mapping):  # D2: a side without a valid count counts 0
            prompt, completion = (
                _count(usage.get(k)) for k in ("prompt_tokens", "completion_tokens")
            )
            if prompt or completion:
                self.expected_usage = domain.TokenUsage(prompt, completion)
        return super().process(raw)


class SoakStream(ScriptStream):
    """The provider's stream with the plan's reaction to cordstream's cancellation of a pending
    `__anext__`, and its cleanup: `finally_hang` hangs where the script's own cleanup runs (in
    the interrupted `__anext__`, or in `aclose()` while it is suspended at a chunk),
    `aclose_hang` and `aclose_cancelled` in `aclose()`."""

    def __init__(self, provider: SoakProvider) -> None:
        super().__init__(provider)
        self.soak = provider
        self.begun = False  # `__anext__` was called
        self.over = False  # the script ended (ran out, raised, or was cancelled)

    async def __anext__(self) -> object:
        provider = self.soak
        provider.running += 1
        self.begun = True
        try:
            return await super().__anext__()
        except asyncio.CancelledError as error:
            self.over = True
            if error is provider.raised:
                raise  # the provider's own CancelledError (the `raise` tail), no cancellation
            provider.cancels += 1
            provider.stopped()
            if provider.cleanup == "finally_hang" and provider.cancels == 1:
                # Defect 2's provider: its cleanup itself hangs, inside the interrupted
                # `__anext__`, until it is cancelled again.
                provider.reached.add("finally_hang")
                await self._hang()
            if provider.cancels > 1 or provider.reaction == "normal":
                raise
            provider.reached.add(provider.reaction)
            match provider.reaction:
                case "swallow_wait":  # keeps waiting, until the next cancellation
                    await self._hang()
                case "swallow_yield":
                    return domain.TextChunk(AFTER_STOP_MARKER + "\n")
                case "convert_return":
                    raise StopAsyncIteration from None
                case _:
                    raise ValueError("the provider turned the cancellation into this") from None
        except BaseException:
            self.over = True
            raise
        finally:
            provider.running -= 1

    async def aclose(self) -> None:
        provider = self.soak
        provider.running += 1
        suspended = self.begun and not self.over  # at a chunk: closing runs its cleanup
        try:
            try:
                await super().aclose()
                if provider.cleanup == "finally_hang" and suspended:
                    provider.reached.add("finally_hang")
                    await self._hang()
            except asyncio.CancelledError:
                provider.cancels += 1
                raise
            match provider.cleanup:
                case "aclose_hang":
                    provider.reached.add("aclose_hang")
                    await self._hang()
                case "aclose_cancelled":  # defect 1: nobody cancelled anything
                    provider.reached.add("aclose_cancelled")
                    raise asyncio.CancelledError
        finally:
            provider.running -= 1

    async def _hang(self) -> NoReturn:
        """Wait until cancelled (counted)."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.soak.cancels += 1
            raise
        raise AssertionError("unreachable")  # pragma: no cover


def _count(value: object) -> int:
    """A valid positive token count (an int, not a bool), else 0 (D2)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# -- plans -------------------------------------------------------------------------------------


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
GARBAGE: Final[tuple[Callable[[], object], ...]] = (
    lambda: 42,
    lambda: None,
    lambda: b"bytes",
    lambda: {"not": "a chunk"},
    lambda: "a raw string",
    lambda: ("tuple",),
)
# Chunks whose field was set to a wrong type after validation (a broken adapter): the core
# checks them off the hot path and ends the stream as `error` (B13), what was sent counted.
SMUGGLED: Final[tuple[Callable[[], object], ...]] = (
    lambda: _smuggled(domain.TextChunk("x"), "content", None),
    lambda: _smuggled(domain.ErrorChunk(None), "error", "not an error"),
    lambda: _smuggled(domain.FunctionCallChunk(None), "call", 7),
)
EXCEPTIONS: Final[tuple[Callable[[], BaseException], ...]] = (
    lambda: ValueError("provider broke"),
    lambda: RuntimeError("auth failed for sk-abcdefghijklmnopqrstuvwx"),
    ConnectionResetError,
    TimeoutError,
    lambda: KeyError("choices"),
    StopAsyncIteration,  # raised in an async generator: a RuntimeError (PEP 479)
    asyncio.CancelledError,  # raised by the provider itself, not a cancellation
)
PROVIDER_ERRORS: Final = (
    domain.ProviderError("rate_limit", "slow down", retryable=True),
    domain.ProviderError("model_error", "model not found", code=404),
    domain.ProviderError("content_blocked", "", user_message="blocked", original={"message": "no"}),
    domain.ProviderError("api_error", "Bearer abc.def.ghi rejected", code="401"),
)


def _smuggled(chunk: object, name: str, value: object) -> object:
    """A chunk whose field was set to a wrong type after validation (a broken adapter)."""
    object.__setattr__(chunk, name, value)
    return chunk


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


def _delay_then_fault(rng: random.Random) -> emulator.Fault:
    thens: list[emulator.ErrorReply | emulator.Drop | emulator.RateLimited] = [
        emulator.MISSING_PERMISSIONS,
        emulator.UNKNOWN_CHANNEL,
        emulator.Drop(),
        emulator.RateLimited(1.0),
    ]
    then = rng.choice(thens)
    return emulator.Delay(rng.choice([0.3, 1.0]), then)


# The Discord faults a plan draws from, by label (`fault_label` names a consumed one).
FAULTS: Final[Mapping[str, Callable[[random.Random], emulator.Fault]]] = {
    "429": lambda rng: emulator.RateLimited(retry_after=rng.choice([0.5, 1.0, 2.5])),
    "429-global": lambda rng: emulator.RateLimited(
        retry_after=rng.choice([1.0, 2.0]), is_global=True
    ),
    "429-cloudflare": lambda rng: emulator.RateLimited(retry_after=1.0, via=False),
    "403-missing-access": lambda rng: emulator.MISSING_ACCESS,
    "403-missing-permissions": lambda rng: emulator.MISSING_PERMISSIONS,
    "404-unknown-channel": lambda rng: emulator.UNKNOWN_CHANNEL,
    "500": lambda rng: emulator.INTERNAL_SERVER_ERROR,
    "502": lambda rng: emulator.BAD_GATEWAY,
    "500-x6": lambda rng: emulator.INTERNAL_SERVER_ERROR,  # six sends in a row (`_fault`)
    "drop": lambda rng: emulator.Drop(),
    "delay": lambda rng: emulator.Delay(rng.choice([0.3, 1.0, 3.0])),
    "delay-then-fault": _delay_then_fault,
}
FAULT_LABELS: Final = tuple(FAULTS)


def _fault(rng: random.Random, live: bool) -> PlannedFault:
    """A Discord fault: on message creates mostly, and for a live stream on its edits too."""
    label = rng.choice(FAULT_LABELS)
    routes: list[emulator.FaultRoute] = ["send", "typing", "any", "edit"]
    route = rng.choices(routes, [45, 15, 15, 25] if live else [70, 15, 15, 0])[0]
    times = rng.choice([1, 1, 1, 2])
    if label == "500-x6":
        route, times = rng.choice(["send", "edit"]) if live else "send", 6
    return label, FAULTS[label](rng), route, times


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
        if rng.random() < 0.5:  # the issue's example: the provider then hangs
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


# -- running -----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Outcome(Observed):
    """Everything one stream produced, for `check_stream`: what the oracle judges
    (`tests.oracle.Observed`), and the soak's own records."""

    plan: Plan
    channel_id: int
    reply_id: int
    provider: SoakProvider
    stuck: bool = False
    # The caller (`Plan.caller`): its task's `cancelling()` before and after the call; whether
    # its cancel (or its timeout) reached the call's task (`cancel_delivered`), and when
    # (`interrupted_at`, also a timeout's deadline); whether the global 429 lock of discord.py
    # was closed then; whether CancelledError (`caller_cancelled`) or TimeoutError
    # (`timed_out`) came out of the call.
    cancelling_before: int = 0
    cancelling_after: int = 0
    in_global_wait: bool = False
    timed_out: bool = False
    timeout_expired: bool = False  # the caller's asyncio.timeout fired
    handed_over: bool = False  # requests ran in the background when the cancelled call ended
    # The plan's moderator (`Plan.delete_at`): when it deleted the stream's newest message
    # (None: not yet, or never), or found none to delete.
    deleted_at: float | None = None
    nothing_to_delete: bool = False
    deleter: asyncio.TimerHandle | None = None  # the moderator's deletion, once scheduled
    # A stream of an `answer_group` (C9): when its reader opened and closed in the registry's
    # count of events (`TimedRegistry.tick`; None: not known); the group's accepted requests
    # not meant for it (`foreign`, by context: none may decide its result); what the group's
    # requests did (`targets`, labels for the report, on its first stream); requests made
    # in its name whose acceptance was not C3's and C9's (`misadmitted`).
    opened: int | None = None
    closed: int | None = None
    foreign: dict[object, Fired] = field(default_factory=dict)
    targets: list[str] = field(default_factory=list)
    misadmitted: list[str] = field(default_factory=list)
    # A stream into an interaction (`Plan.asking`): its record in the emulator, where its
    # channel's messages began, when its token was made to expire (None: not during the
    # call), the clicks on its Stop button, and whether it was left "thinking" once settled.
    record: InteractionRecord | None = None
    first_message: int = 0
    expired_at: float | None = None
    clicks: list[Click] = field(default_factory=list)
    thinking_left: bool = False

    def interrupted(self) -> bool:
        """The caller's own cancel or timeout ended the call: no result, by design (B11)."""
        cancelled = self.plan.caller == "cancel" and self.caller_cancelled
        return (cancelled and self.cancel_delivered) or self.timed_out


def outcome_of(plan: Plan, channel_id: int, reply_id: int, provider: SoakProvider) -> Outcome:
    """A stream's record before it runs, with what the oracle needs to know of its plan."""
    return Outcome(
        plan=plan,
        channel_id=channel_id,
        reply_id=reply_id,
        provider=provider,
        config=plan.config,
        reply_to=reply_id if plan.reply else None,
        suppress=plan.suppress,
        hidden=HIDDEN_MARKERS,
        expected=ENDING_STATUSES[TAIL_ENDINGS.get(plan.tail, "error")],
    )


@dataclass
class Report:
    seed: int = 0
    channels: int = 0
    streams: int = 0
    batches: int = 0
    exceptions_escaped: int = 0
    stuck_streams: int = 0
    leaked_tasks: int = 0
    leaked_listeners: int = 0
    unexplained_registry_entries: int = 0
    stale_requests_discarded: int = 0
    transcript_mismatches: int = 0
    pings: int = 0
    invariant_violations: int = 0
    quiet_streams: int = 0  # streams whose exact status the checker predicted
    cancelling_changed: int = 0  # the caller's task left the call in another cancel state
    timeouts_as_cancelled: int = 0  # an asyncio.timeout caller got CancelledError
    stops_lost: int = 0  # a stop consumed without deciding the result (C5)
    wedged_clients: int = 0  # a probe send after a batch did not complete (B11)
    answers_lost: int = 0  # answers phase: not `completed` with every line, in order (F4)
    anomalies: int = 0  # results whose core was fed an event a correct shell never feeds
    cursors_left: int = 0  # live messages left ending with the cursor (L4)
    shrinking_edits: int = 0  # live messages whose shown text shrank or changed (L3)
    live_429s: int = 0  # live streams' message requests answered 429 by Discord's limits (L2)
    # Per answer (C9): streams ended by a request meant for another stream (aimed at another
    # user's answer, a third user's follow-up, a stop registered before they started); streams
    # a request meant for them did not end (B3, B4); registry entries no later stream would
    # take (still owed to, or consumed by, a stream once none runs, C5).
    cross_answer_stops: int = 0
    stops_missed: int = 0
    entries_leaked: int = 0
    answer_streams: int = 0  # streams of answer groups (each answering a user, C9)
    targets: Counter[str] = field(default_factory=Counter)  # what their requests did
    # Interactions (K1, K2): answers left "thinking" after their result; F2 transcripts wrong
    # after a token expired during the stream (a message lost); public error embeds where an
    # ephemeral one was due; refused Stop clicks that stopped (or were taken for a stop);
    # accepted Stop clicks that did not stop the stream streaming.
    left_thinking: int = 0
    expiry_losses: int = 0
    public_embeds: int = 0
    refused_clicks_obeyed: int = 0
    accepted_clicks_ignored: int = 0
    interaction_streams: int = 0
    clicks: Counter[str] = field(default_factory=Counter)  # who clicked, and what came of it
    expiries: Counter[str] = field(default_factory=Counter)  # token expiries, by moment
    live_streams: int = 0  # streams with delivery="live" (the others: "messages")
    live_global_429s: int = 0  # live streams' message requests answered a global 429
    shared_streams: int = 0  # live streams sharing a channel with others of their group
    answers: int = 0  # streams of the answers phase
    live_answers: int = 0  # of those, the live ones (the others: messages delivery)
    limited_streams: int = 0  # streams run under Discord's real rate limits
    background_requests: int = 0  # cancelled calls that ended with requests handed over
    messages_accepted: int = 0
    embeds_accepted: int = 0
    virtual_seconds: float = 0.0
    wall_seconds: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    stop_reasons: Counter[str] = field(default_factory=Counter)
    violations: Counter[str] = field(default_factory=Counter)
    provider_faults: Counter[str] = field(default_factory=Counter)  # tails reached
    discord_faults: Counter[str] = field(default_factory=Counter)  # faults consumed
    user_requests: Counter[str] = field(default_factory=Counter)  # accepted, by moment
    provider_cleanups: Counter[str] = field(default_factory=Counter)  # cleanups, reactions
    callers: Counter[str] = field(default_factory=Counter)  # what each caller did and got
    races: Counter[str] = field(default_factory=Counter)  # how each stop-vs-follow-up ended
    deletions: Counter[str] = field(default_factory=Counter)  # the moderators' deletions (L9)
    # Violations whose fix is pending (`tests.oracle.KNOWN_DEFECTS`), not must-be-zero.
    known_defects: Counter[str] = field(default_factory=Counter)
    known_samples: list[str] = field(default_factory=list)
    rate_limit_hits: Counter[str] = field(default_factory=Counter)  # 429s of the real limits
    phases: dict[str, str] = field(default_factory=dict)  # phase -> streams, wall and virtual s
    leaked_task_names: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)  # the first few violations, described

    def failures(self) -> dict[str, int]:
        """The must-be-zero figures that are not zero."""
        figures = {name: int(getattr(self, name)) for name in MUST_BE_ZERO}
        return {name: value for name, value in figures.items() if value}

    def as_json(self) -> dict[str, Any]:
        """Every figure, by its name: counters sorted, seconds to the millisecond, the first
        20 leaked task names, and the names of the failed must-be-zero figures."""
        figures: dict[str, Any] = {}
        for figure in fields(self):
            value = getattr(self, figure.name)
            if isinstance(value, Counter):
                value = dict(sorted(value.items()))
            elif isinstance(value, float):
                value = round(value, 3)
            figures[figure.name] = value
        figures["leaked_task_names"] = self.leaked_task_names[:20]
        figures["failed"] = sorted(self.failures())
        return figures


@dataclass
class Env:
    api: emulator.DiscordEmulator
    orchestrator: StreamOrchestrator
    stops: TimedRegistry
    channels: list[discord.TextChannel]
    reply_ids: dict[int, int]
    probe: discord.abc.Messageable | None = None  # a channel of its own, for `probe_client`
    killing: bool = False  # the soak cancels the stuck streams of a batch
    # The batch's `answer_group` requests, by group (`Plan.group`), as made; the requests
    # whose acceptance was not C3's and C9's, by the index of the plan that made them.
    made: dict[int, list[Fired]] = field(default_factory=dict)
    misadmitted: dict[int, list[str]] = field(default_factory=dict)


def _raiser() -> None:
    raise RuntimeError("heartbeat failed")


def fire(env: Env, channel_id: int, plan: Plan, request: Request, made: list[Fired]) -> None:
    """Make `request` in `plan`'s name, as a bot does (C2, C3, C9): a stop (aimed at an
    answer or channel-wide), a follow-up, or `interrupt_own_answer`; note it in `made`, with
    the entry it registered and those it removed, and whether its acceptance is what C3 and
    C9 say (`admissible`; else `Env.misadmitted`)."""
    orchestrator, stops = env.orchestrator, env.stops
    context = f"context-{plan.index}-{len(made)}"
    before = stops.entries(channel_id)
    replaced = stops.peek(channel_id)
    expected = admissible(stops, channel_id, request, before)
    seq = stops.tick()
    if request.kind == "stop":
        accepted = orchestrator.request_stop(
            channel_id, request.requester, context, answering=request.answering
        )
    elif request.own:
        accepted = orchestrator.interrupt_own_answer(channel_id, int(request.requester or 0))
    else:
        accepted = orchestrator.request_follow_up(channel_id, request.requester or "user-2")
    after = stops.entries(channel_id)
    entry = next((e for e in after if not any(e is b for b in before)), None)
    displaced = tuple(b for b in before if not any(b is a for a in after))
    at = asyncio.get_running_loop().time()
    made.append(Fired(request, at, accepted, context, replaced, entry, displaced, seq))
    if accepted != expected:
        verdict = "accepted" if accepted else "refused"
        env.misadmitted.setdefault(plan.index, []).append(f"{request} {verdict} at {at:.4f}")


def admissible(
    stops: TimedRegistry, channel_id: int, request: Request, pending: Sequence[StopRequest]
) -> bool:
    """Whether C2, C3 and C9 accept `request`, given the channel's `pending` entries: a stop
    always; a follow-up unless a stop reaching its requester's answer is pending (channel-wide,
    or aimed at them); `interrupt_own_answer` only while a stream answering its requester
    runs in the channel (its reader is open) and no such stop is pending."""
    if request.kind == "stop":
        return True
    user = request.requester or "user-2"
    if request.own:
        key = (channel_id, int(user))
        if key not in stops.opened or key in stops.closed:
            return False
    return not any(
        e.kind == "stop" and (e.answering is None or str(e.answering) == user) for e in pending
    )


async def run_stream(env: Env, plan: Plan, channel: discord.TextChannel) -> Outcome:
    """One `stream_to_discord` call with its faults and requests, made the way `plan.caller`
    says; never raises (but for the soak's own cancellation of a stuck stream)."""
    loop = asyncio.get_running_loop()
    api, orchestrator = env.api, env.orchestrator
    provider = SoakProvider(
        plan.steps, headline=plan.headline, cleanup=plan.cleanup, reaction=plan.reaction
    )
    outcome = outcome_of(plan, channel.id, env.reply_ids[channel.id], provider)
    # An answer group's requests are the group's: `distribute` gives each stream its own.
    group = plan.group if plan.per_answer else None
    made = env.made.setdefault(group, []) if group is not None else outcome.fired

    def make(request: Request) -> None:
        fire(env, channel.id, plan, request, made)

    for _, fault, route, times in plan.faults:
        api.inject(fault, route=route, times=times, channel_id=channel.id)
    for request in plan.requests:
        if request.when == "before" and not plan.per_answer:  # a group's: made by run_batch
            make(request)
        elif request.when == "during":
            loop.call_later(request.at, make, request)
    first_message = len(api.messages(channel.id))

    def delete() -> None:
        """A moderator deletes the stream's newest message (L9)."""
        outcome.deleter = None
        mine = [m for m in api.messages(channel.id)[first_message:] if not m.embeds]
        if not mine:
            outcome.nothing_to_delete = True
            return
        api.delete_message(mine[-1].id, channel_id=channel.id)
        outcome.deleted_at = loop.time()

    def created(change: emulator.Change) -> None:
        """The stream's first message exists: the moderator deletes `delete_at` later."""
        if change.channel_id == channel.id and change.kind == "create" and not change.embeds:
            unlisten()
            if plan.delete_at is not None:
                outcome.deleter = loop.call_later(plan.delete_at, delete)

    listeners: list[Callable[[], None]] = []

    def unlisten() -> None:
        while listeners:
            listeners.pop()()

    if plan.delete_at is not None:
        listeners.append(api.on_change(created))
    context = StreamContext(
        channel,
        reply_to=channel.get_partial_message(outcome.reply_id) if plan.reply else None,
        suppress_user_errors=plan.suppress,
        on_stream_progress=_raiser if plan.progress_raises else None,
        answering=plan.answering,
    )

    async def call() -> None:
        """The bot's await; in a task of its own for a `cancel` caller."""
        task = asyncio.current_task()
        assert task is not None
        outcome.cancelling_before = task.cancelling()
        try:
            if plan.caller == "timeout":
                timeout = asyncio.timeout(plan.caller_at)
                try:
                    async with timeout:
                        outcome.result = await orchestrator.stream_to_discord(
                            provider, plan.config, context
                        )
                except TimeoutError:
                    outcome.timed_out = True
                finally:
                    outcome.timeout_expired = outcome.cancel_delivered = timeout.expired()
                    outcome.interrupted_at = timeout.when()
            else:
                outcome.result = await orchestrator.stream_to_discord(
                    provider, plan.config, context
                )
        except asyncio.CancelledError:
            outcome.caller_cancelled = True
            outcome.handed_over = ratelimit.background_requests() > 0
            raise
        finally:
            outcome.cancelling_after = task.cancelling()
            outcome.done_at = loop.time()
            outcome.provider_running = provider.running

    try:
        if plan.start_at:
            await asyncio.sleep(plan.start_at)  # an answer group's latecomer
        if plan.caller == "cancel":
            await cancelled_call(outcome, loop.create_task(call()), channel)
        else:
            await call()
    except asyncio.CancelledError as error:
        if env.killing:
            unlisten()
            if outcome.deleter is not None:
                outcome.deleter.cancel()
            raise  # the soak's own stuck-stream cancellation
        if not (plan.caller == "timeout" and outcome.timeout_expired):
            outcome.escaped = error  # (a timeout's, instead of TimeoutError: `check_caller`)
    except Exception as error:
        outcome.escaped = error
    for request in plan.requests:
        if request.when == "after":
            loop.call_later(request.at, make, request)
    if listeners:  # no message when the call returned: the moderator has nothing to delete
        unlisten()
        outcome.nothing_to_delete = True
    return outcome


async def cancelled_call(
    outcome: Outcome, task: asyncio.Task[None], channel: discord.abc.Messageable
) -> None:
    """Cancel the call's `task` `plan.caller_at` seconds after it started, unless it is done
    by then; note whether discord.py was waiting out a global 429 at that moment."""
    loop = asyncio.get_running_loop()

    def cancel() -> None:
        if task.done():
            return
        gate = ratelimit.discord_global_gate(channel)
        outcome.in_global_wait = isinstance(gate, asyncio.Event) and not gate.is_set()
        outcome.interrupted_at = loop.time()
        outcome.cancel_delivered = task.cancel()

    handle = loop.call_later(outcome.plan.caller_at, cancel)
    try:
        await asyncio.wait((task,))
    except asyncio.CancelledError:  # the soak's stuck-stream cancellation: pass it on
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    finally:
        handle.cancel()
    if task.cancelled():
        if outcome.done_at == 0.0:  # cancelled before its first step: the call was not made
            outcome.caller_cancelled = True
            outcome.cancelling_after = outcome.cancelling_before + 1
            outcome.done_at = loop.time()
        if not outcome.cancel_delivered:
            outcome.escaped = asyncio.CancelledError("out of the call, but nobody cancelled")
        return
    error = task.exception()
    if error is not None:
        outcome.escaped = error


def _latest_request(plans: Sequence[Plan]) -> float:
    """How long after a batch started its last scheduled request or deletion happens, at most."""
    moments = [r.at for p in plans for r in p.requests]
    moments += [p.delete_at for p in plans if p.delete_at is not None]
    return max(moments, default=0.0)


def attribute(members: Sequence[Outcome]) -> None:
    """Give each stream of a group sharing a channel its own messages and their history, as
    the oracle judges one stream: the channel's messages, in order, each claimed by the one
    stream whose `messages` list it (F2), in the order listed. The channel's messages no
    stream claims (and any embed: the group's streams suppress them) go to the first stream,
    whose transcript then differs from its result (a violation). Every stream keeps all the
    channel's requests (its checks are the same for the group: one config, no fault)."""
    channel = list(members[0].messages)
    claims: list[list[emulator.SentMessage]] | None = None
    for order in itertools.permutations(range(len(members))):
        claimed = _claim(channel, [members[i] for i in order])
        if claimed is not None:
            claims = [[] for _ in members]
            for position, i in enumerate(order):
                claims[i] = claimed[position]
            break
    if claims is None:  # no consistent reading: the greedy one, the rest to the first
        claims = _claim(channel, list(members), partial=True) or [[] for _ in members]
    taken = {m.id for claim in claims for m in claim}
    claims[0] += [m for m in channel if m.id not in taken]
    claims[0].sort(key=lambda m: m.id)
    history = members[0].history
    for outcome, claim in zip(members, claims, strict=True):
        ids = {m.id for m in claim}
        outcome.messages = claim
        outcome.history = [c for c in history if c.message_id in ids]


def _claim(
    channel: Sequence[emulator.SentMessage], members: Sequence[Outcome], *, partial: bool = False
) -> list[list[emulator.SentMessage]] | None:
    """Each stream's messages, claimed in `members`' order: each stream's `messages`, in
    order, the first unclaimed channel messages with those contents after its previous one.
    None when one cannot be found (unless `partial`), or when some message is left over."""
    taken: set[int] = set()
    claims: list[list[emulator.SentMessage]] = []
    for outcome in members:
        wanted = outcome.result.messages if outcome.result is not None else ()
        claim: list[emulator.SentMessage] = []
        after = -1
        for content in wanted:
            found = next(
                (
                    m
                    for m in channel
                    if m.id > after and m.id not in taken and not m.embeds and m.content == content
                ),
                None,
            )
            if found is None:
                if partial:
                    continue
                return None
            claim.append(found)
            taken.add(found.id)
            after = found.id
        claims.append(claim)
    if not partial and len(taken) != len(channel):
        return None
    return claims


def assign_channels(
    plans: Sequence[Plan], channels: Sequence[discord.TextChannel]
) -> list[discord.TextChannel]:
    """A channel for each plan: one of its own, or its group's (`Plan.group`)."""
    free = iter(channels)
    shared: dict[int, discord.TextChannel] = {}
    assigned: list[discord.TextChannel] = []
    for plan in plans:
        if plan.group is None:
            assigned.append(next(free))
        else:
            if plan.group not in shared:
                shared[plan.group] = next(free)
            assigned.append(shared[plan.group])
    return assigned


async def run_batch(env: Env, plans: Sequence[Plan], report: Report) -> list[Outcome]:
    api, stops = env.api, env.stops
    tasks_before = set(asyncio.all_tasks())
    first_request = len(api.requests)
    first_message = {c.id: len(api.messages(c.id)) for c in env.channels}
    first_change = {c.id: len(api.history(c.id)) for c in env.channels}
    channels = assign_channels(plans, env.channels)
    env.made, env.misadmitted = {}, {}
    for plan, channel in zip(plans, channels, strict=True):  # before any stream starts (B4)
        if plan.per_answer and plan.group is not None:
            made = env.made.setdefault(plan.group, [])
            for request in plan.requests:
                if request.when == "before":
                    fire(env, channel.id, plan, request, made)
    by_channel = {c.id: c for c in channels}
    outcomes = await run_streams(
        env,
        plans,
        [c.id for c in channels],
        lambda plan, channel_id: run_stream(env, plan, by_channel[channel_id]),
        lambda channel_id: env.reply_ids[channel_id],
    )
    await quiesce(env, report, outcomes, _latest_request(plans), tasks_before)
    requests = api.requests[first_request:]
    groups: dict[int, list[Outcome]] = {}
    for outcome in outcomes:
        plan, channel_id = outcome.plan, outcome.channel_id
        outcome.ended_at = stops.unlistened.get(channel_id)
        outcome.messages = api.messages(channel_id)[first_message[channel_id] :]
        outcome.history = api.history(channel_id)[first_change[channel_id] :]
        outcome.requests = [r for r in requests if r.channel_id == channel_id]
        outcome.registry_entry = stops.peek(channel_id)
        outcome.misadmitted = env.misadmitted.get(plan.index, [])
        if plan.group is not None:
            outcome.ended_at = None  # the channel's, not this stream's: its return stands in
            groups.setdefault(plan.group, []).append(outcome)
        if plan.per_answer:  # its own reader's (C9)
            outcome.opened = stops.opened.get((channel_id, plan.answering))
            closed = stops.closed.get((channel_id, plan.answering))
            if closed is not None:
                outcome.closed, outcome.ended_at = closed
            outcome.registry_entry = None
    leaks = stops.leaks()  # owed to, or consumed by, a stream although none runs
    report.entries_leaked += len(leaks)
    if leaks and len(report.samples) < 20:
        report.samples.append(f"batch {report.batches}: registry entries leaked: {leaks}")
    for outcome in outcomes:
        if not outcome.plan.per_answer:
            judge_registry(env, outcome, report)
    for members in groups.values():
        if members[0].plan.per_answer:
            distribute(env, members)
            judge_answers(env, members, report)
        attribute(members)
    api.clear_faults()
    await close_batch(env, report)
    return outcomes


async def run_streams(
    env: Env,
    plans: Sequence[Plan],
    channel_ids: Sequence[int],
    run: Callable[[Plan, int], Coroutine[Any, Any, Outcome]],
    reply_id: Callable[[int], int],
) -> list[Outcome]:
    """Each plan's stream (`run(plan, channel_id)`) in a task of its own, all at once; those
    still running after STREAM_LIMIT are cancelled, and their outcomes say `stuck`."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(run(p, c)) for p, c in zip(plans, channel_ids, strict=True)]
    done, stuck = await asyncio.wait(tasks, timeout=STREAM_LIMIT)
    env.killing = True
    for task in stuck:
        task.cancel()
    await asyncio.gather(*stuck, return_exceptions=True)
    env.killing = False
    outcomes: list[Outcome] = []
    for plan, channel_id, task in zip(plans, channel_ids, tasks, strict=True):
        if task in done:
            outcomes.append(task.result())
        else:
            outcome = outcome_of(plan, channel_id, reply_id(channel_id), SoakProvider(()))
            outcome.stuck = True
            outcomes.append(outcome)
    return outcomes


async def quiesce(
    env: Env,
    report: Report,
    outcomes: Sequence[Outcome],
    latest: float,
    tasks_before: set[asyncio.Task[Any]],
    *,
    then: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Before a batch is judged: every request scheduled during or after a stream fires
    (`latest` seconds after the last result at most), then what `then` waits for; requests a
    cancelled call handed over (discord.py was waiting out a global 429) end once its lock
    opens, and any still running after BACKGROUND_LIMIT is counted as leaked. Then a request a
    cancelled call had already sent, which Discord still answers (here: one the emulator
    delays) and may accept after the call, lands in this batch's window, not in the next
    stream's on that channel. Leaked tasks and registry listeners are counted."""
    loop = asyncio.get_running_loop()
    last = max(o.done_at for o in outcomes) + latest + 0.001
    if last > loop.time():
        await asyncio.sleep(last - loop.time())
    if then is not None:
        await then()
    try:
        async with asyncio.timeout(BACKGROUND_LIMIT):
            await ratelimit.drain_background()
            await env.api.idle()
    except TimeoutError:
        pass
    leftover = leftover_tasks(tasks_before)
    report.leaked_tasks += len(leftover)
    report.leaked_task_names.extend(leftover)
    report.leaked_listeners += env.stops.listening()


async def close_batch(env: Env, report: Report) -> None:
    """The registry forgets the batch, and a probe send checks the client still works (B11)."""
    env.stops.forget()
    if not await probe_client(env):
        report.wedged_clients += 1
        report.samples.append(f"batch {report.batches}: a probe send did not complete (B11)")


async def probe_client(env: Env) -> bool:
    """Whether a send through the batch's `discord.Client`, on a channel no stream used,
    completes within PROBE_LIMIT (virtual) seconds: a caller's cancellation during a global
    429 wait must not have wedged the client (B11). The probe waits for its turn under
    cordstream's pacing, as the bot's own requests should (`cordstream.shell.ratelimit`): sent
    at once, it would be a 51st request in the second the next batch's streams start in."""
    if env.probe is None:
        return True
    try:
        async with asyncio.timeout(PROBE_LIMIT):
            await ratelimit.pacer().acquire()
            await env.probe.send("probe")
    except TimeoutError:
        return False
    return True


def judge_registry(env: Env, outcome: Outcome, report: Report) -> None:
    """Count each entry left for the channel as stale (explained) or unexplained; clean them."""
    for entry in env.stops.entries(outcome.channel_id):
        # A stuck stream (cancelled by the soak, counted as such) resolved nothing.
        if entry_explained(outcome, entry) or outcome.stuck:
            report.stale_requests_discarded += 1
        else:
            report.unexplained_registry_entries += 1
            _sample(report, outcome, f"registry entry {entry.kind} at {entry.at} left (C5)")
    env.orchestrator.discard_requests(outcome.channel_id)


def holders(
    stops: TimedRegistry, fired: Fired, members: Sequence[Outcome]
) -> tuple[list[Outcome], list[Outcome]]:
    """C9, B4, C5: the streams of an answer group an accepted request is for, and of those,
    the ones that took it when they started (B4). An entry is for the streams it reaches
    (`request_reaches`) whose readers were open when it was registered; when there are none,
    or when all of them ended without consuming it, it waits, and the first stream it reaches
    that starts after that takes it, if it is still in the registry then; and so on. Orders
    are the registry's count of events (`TimedRegistry.tick`), never the clock's."""
    if not fired.accepted or fired.entry is None:
        return [], []
    forever = float("inf")
    reached = [
        m
        for m in sorted(members, key=lambda m: forever if m.opened is None else m.opened)
        if m.opened is not None and request_reaches(fired.request, m.plan.answering)
    ]
    closed = {id(m): forever if m.closed is None else m.closed for m in reached}
    held = [m for m in reached if cast(int, m.opened) < fired.seq < closed[id(m)]]
    left = stops.left_at(fired.entry)
    gone = forever if left is None else left
    free = max((closed[id(m)] for m in held), default=fired.seq)
    took: list[Outcome] = []
    while gone > free:
        later = next((m for m in reached if m not in held and cast(int, m.opened) > free), None)
        if later is None or cast(int, later.opened) > gone:
            break
        held.append(later)
        took.append(later)
        free = closed[id(later)]
    return held, took


def distribute(env: Env, members: Sequence[Outcome]) -> None:
    """Give each stream of an answer group the group's requests meant for it (`holders`;
    those it took when it started count as made before it, B4), the contexts of the group's
    other accepted requests (`Outcome.foreign`), the entries left that reach it, the stops
    that decided the others' results, and label what each request did (`target_label`)."""
    stops = env.stops
    made = env.made.get(cast(int, members[0].plan.group), [])
    left = stops.entries(members[0].channel_id)
    for member in members:
        member.fired = []
    for fired in made:
        held, took = holders(stops, fired, members)
        for member in held:
            before = replace(fired.request, when="before")
            member.fired.append(replace(fired, request=before) if member in took else fired)
        members[0].targets.append(target_label(fired, held, took, members))
    by_entry = {id(f.entry): f.request for f in made if f.entry is not None}
    for member in members:
        mine = {f.context for f in member.fired}
        member.foreign = {f.context: f for f in made if f.accepted and f.context not in mine}
        member.registry_entries = tuple(
            e
            for e in left
            if id(e) in by_entry and request_reaches(by_entry[id(e)], member.plan.answering)
        )
        member.decided_elsewhere = frozenset(
            other.result.stop_context
            for other in members
            if other is not member
            and other.result is not None
            and other.result.status == "stopped_by_user"
        )


def target_label(
    fired: Fired, held: Sequence[Outcome], took: Sequence[Outcome], members: Sequence[Outcome]
) -> str:
    """What a request of an answer group was, and what it did, for the report: whether it
    ended streams (at their start or while they streamed), and whether another stream of the
    group was streaming then and went on."""
    request = fired.request
    if request.kind == "stop":
        match request.answering:
            case None:
                kind = "channel-wide stop"
            case user if user in ANSWERED:
                kind = "stop aimed at an answer"
            case _:
                kind = "stop aimed at an answer nobody streams"
    else:
        who = "a third user" if request.requester == str(THIRD_USER) else "an asker"
        kind = f"{'interrupt_own_answer' if request.own else 'follow-up'} from {who}"
    if not fired.accepted:
        return f"{kind}: refused"
    if not held:
        return f"{kind}: reached no stream (waits for a later one)"
    ended = [
        m
        for m in held
        if m.result is not None
        and (
            m.result.status == "follow_up_interrupt"
            if request.kind == "follow_up"
            else m.result.stop_context == fired.context
        )
    ]
    if not ended:
        return f"{kind}: resolved otherwise (the outcome was fixed)"
    moment = "at its start (B4)" if set(map(id, ended)) <= set(map(id, took)) else "while streaming"
    streaming = [
        m
        for m in members
        if m.opened is not None and m.opened < fired.seq < (m.closed or fired.seq + 1)
    ]
    on = ", another went on" if any(m not in held for m in streaming) else ""
    return f"{kind}: ended {len(ended)} {moment}{on}"


def judge_answers(env: Env, members: Sequence[Outcome], report: Report) -> None:
    """C5 per answer (C9): each entry left in an answer group's channel is stale when every
    stream it was for (`holders`) explains it (`entry_explained`: a follow-up waiting behind
    a stop, a stop after an internal one, one registered as the stream ended), or when it was
    for none (it waits for a later stream, aimed at an answer that is not streaming);
    otherwise unexplained. Then the channel is cleaned."""
    stops = env.stops
    made = env.made.get(cast(int, members[0].plan.group), [])
    for entry in stops.entries(members[0].channel_id):
        fired = next((f for f in made if f.entry is entry), None)
        if fired is None:
            report.unexplained_registry_entries += 1
            _sample(report, members[0], f"registry entry {entry} nobody made (C9)")
            continue
        held, _ = holders(stops, fired, members)
        unexplained = [m for m in held if not (m.stuck or entry_explained(m, entry))]
        if unexplained:
            report.unexplained_registry_entries += 1
            detail = f"{fired.request} at {fired.at:.4f} left in the registry (C5, C9)"
            _sample(report, unexplained[0], detail)
        else:
            report.stale_requests_discarded += 1
    env.orchestrator.discard_requests(members[0].channel_id)


def _sample(report: Report, outcome: Outcome, text: str) -> None:
    if len(report.samples) < 20:
        result = outcome.result
        status = f"{result.status}/{result.stop_reason}" if result is not None else "no result"
        faults = [label for label, *_ in outcome.plan.faults]
        report.samples.append(
            f"stream {outcome.plan.index} ({outcome.plan.tail}, {status}, faults {faults}): " + text
        )


def tally(report: Report, outcome: Outcome) -> None:
    """Add one judged stream to the report."""
    report.streams += 1
    if outcome.stuck:
        report.stuck_streams += 1
    if outcome.plan.config.delivery == "live":
        report.live_streams += 1
        if outcome.plan.group in (None, outcome.plan.index):  # a shared channel's once
            report.live_global_429s += sum(
                r.kind in ("send", "edit") and r.rate_limited == "global" for r in outcome.requests
            )
    report.shared_streams += outcome.plan.group is not None and not outcome.plan.per_answer
    report.answer_streams += outcome.plan.per_answer
    report.targets.update(outcome.targets)
    if outcome.plan.asking is not None:
        report.interaction_streams += 1
        report.clicks.update(click_label(outcome, c) for c in outcome.clicks)
        report.expiries[expiry_label(outcome)] += 1
    if outcome.plan.delete_at is not None:
        report.deletions[deletion_label(outcome)] += 1
    if outcome.escaped is not None:
        report.exceptions_escaped += 1
    if outcome.result is not None:
        report.quiet_streams += is_quiet(outcome.result, outcome)
        report.statuses[outcome.result.status] += 1
        if outcome.result.stop_reason is not None:
            report.stop_reasons[outcome.result.stop_reason] += 1
    for tail in outcome.provider.reached & (FAULT_TAILS | {"function_call", "done"}):
        report.provider_faults[tail] += 1
    for cleanup in outcome.provider.reached & CLEANUP_REACHED:
        report.provider_cleanups[cleanup] += 1
    report.callers[caller_label(outcome)] += 1
    report.background_requests += outcome.handed_over
    if outcome.plan.race:
        report.races[race_label(outcome)] += 1
    for label in consumed_faults(outcome):
        report.discord_faults[label] += 1
    for fired in outcome.fired:
        if fired.accepted:
            report.user_requests[_moment(outcome, fired)] += 1
    report.messages_accepted += sum(1 for m in outcome.messages if not m.embeds)
    report.embeds_accepted += sum(1 for m in outcome.messages if m.embeds)
    report.pings += sum(1 for m in outcome.messages if m.pings.anyone)
    violations = check_stream(outcome)
    for name, detail in violations:
        if name in KNOWN_DEFECTS:
            report.known_defects[name] += 1
            if len(report.known_samples) < 10:
                report.known_samples.append(f"stream {outcome.plan.index}: {name}: {detail}")
            continue
        report.violations[name] += 1
        report.invariant_violations += 1
        figure = COUNTED_AS.get(name)
        if figure is not None:
            setattr(report, figure, getattr(report, figure) + 1)
        if name == "transcript":  # a transcript that lost text at a token's expiry (K1)
            expired = outcome.expired_at
            report.expiry_losses += expired is not None and expired <= outcome.done_at
        _sample(report, outcome, f"{name}: {detail}")


# The must-be-zero figure a violation counts toward, besides `invariant_violations`.
COUNTED_AS: Final[Mapping[str, str]] = {
    "transcript": "transcript_mismatches",
    "cancelling": "cancelling_changed",
    "timeout_as_cancelled": "timeouts_as_cancelled",
    "stop_lost": "stops_lost",
    "anomalies": "anomalies",
    "cursor_left": "cursors_left",
    "shrank": "shrinking_edits",
    "rate_limited": "live_429s",
    "cross_answer": "cross_answer_stops",
    "request_ignored": "stops_missed",
    "B4": "stops_missed",
    "left_thinking": "left_thinking",
    "public_embed": "public_embeds",
    "refused_click_obeyed": "refused_clicks_obeyed",
    "click_ignored": "accepted_clicks_ignored",
}

CLEANUP_REACHED: Final = frozenset(CLEANUPS[1:]) | frozenset(REACTIONS[1:])


def caller_label(outcome: Outcome) -> str:
    """What the caller did, and when."""
    match outcome.plan.caller:
        case "cancel" if not outcome.cancel_delivered:
            return "cancel: after the call returned"
        case "cancel" if outcome.in_global_wait:
            return "cancel: during a global 429 wait"
        case "cancel":
            return "cancel: during the call"
        case "timeout" if outcome.timeout_expired:
            return "timeout: fired"
        case "timeout":
            return "timeout: not reached"
    return "plain"


def deletion_label(outcome: Outcome) -> str:
    """What a moderator's deletion (`Plan.delete_at`) met, and what came of it (L9)."""
    result = outcome.result
    if outcome.nothing_to_delete:
        return "no message to delete yet"
    if outcome.deleted_at is None:
        return "not made (the stream was stuck)"
    if result is not None and result.stop_reason == "message_deleted":
        return "found: ended as message_deleted"
    if outcome.deleted_at > outcome.done_at:
        return "after the call returned"
    return "during the call, not found (no edit of it followed)"


def race_label(outcome: Outcome) -> str:
    """How a stop that raced a follow-up ended (C2, C5)."""
    result = outcome.result
    stop = next((f for f in outcome.fired if f.request.kind == "stop" and f.accepted), None)
    if result is None:
        return "no result (the caller cancelled)"
    if stop is None:
        return "the stop was not made (the stream was over)"
    if result.status == "stopped_by_user" and result.stop_context == stop.context:
        return "the stop decided the result"
    if outcome.ended_at is not None and stop.at >= outcome.ended_at:
        return "the stop came after the result (stays for the next turn)"
    if stop.entry is not None and stop.entry is outcome.registry_entry:
        return "the stop stayed in the registry (the outcome was fixed)"
    return f"other ({result.status})"


def _moment(outcome: Outcome, fired: Fired) -> str:
    if fired.request.when == "before":
        return "before"
    return "during" if fired.at <= outcome.done_at else "after"


def fault_label(fault: emulator.Fault) -> str:
    """The soak's name for a fault the emulator answered with."""
    match fault:
        case emulator.RateLimited(via=False):
            return "429-cloudflare"
        case emulator.RateLimited(is_global=True):
            return "429-global"
        case emulator.RateLimited():
            return "429"
        case emulator.ErrorReply(status=403, code=50001):
            return "403-missing-access"
        case emulator.ErrorReply(status=403):
            return "403-missing-permissions"
        case emulator.ErrorReply(status=404):
            return "404-unknown-channel"
        case emulator.ErrorReply(status=status):
            return str(status)
        case emulator.Drop():
            return "drop"
        case emulator.Delay(then=None):
            return "delay"
        case emulator.Delay():
            return "delay-then-fault"
    raise AssertionError(f"unknown fault {fault!r}")  # pragma: no cover


def consumed_faults(outcome: Outcome) -> list[str]:
    """Labels of the faults the stream's requests consumed; the 500s of a planned `500-x6`
    count once as `500-x6` when at least five (one request's tries) were consumed."""
    labels = [fault_label(r.fault) for r in outcome.requests if r.fault is not None]
    if labels.count("500") >= 5 and any(label == "500-x6" for label, *_ in outcome.plan.faults):
        labels = [label for label in labels if label != "500"] + ["500-x6"]
    return labels


# -- the invariants ----------------------------------------------------------------------------

# What a quiet stream ends as, by its tail (`tests.oracle.ENDING_STATUSES`); the others: error.
TAIL_ENDINGS: Final[Mapping[str, str]] = {
    "end": "end",
    "done": "end",
    "hang": "hang",
    "function_call": "function_call",
}


def check_stream(outcome: Outcome) -> list[Violation]:
    """Every invariant one stream must satisfy, whatever its plan; [] when all hold: the
    oracle's (`tests.oracle.check`), the caller's (`check_caller`) and what the plan says
    of the result (`_check_plan`)."""
    if outcome.stuck:
        return [("stuck", f"not done within {STREAM_LIMIT} virtual seconds")]
    found = check(outcome) + check_caller(outcome) + _check_plan(outcome)
    return found + check_targets(outcome) + check_asked(outcome)


def check_targets(outcome: Outcome) -> list[Violation]:
    """Per answer (C9): no request meant for another stream ended this one (a stop aimed at
    another user's answer, a follow-up from another user, a channel-wide stop registered
    before it started while the others streamed); each request made in its name was accepted
    or refused as C3 and C9 say (`admissible`)."""
    found = [("admission", text) for text in outcome.misadmitted]
    result = outcome.result
    if result is None or not outcome.plan.per_answer:
        return found
    foreign = outcome.foreign.get(result.stop_context) if result.stop_context else None
    if result.status == "stopped_by_user" and foreign is not None:
        found.append(("cross_answer", f"ended by {foreign.request} at {foreign.at:.4f}"))
    own = [f for f in outcome.heard() if f.request.kind == "follow_up"]
    others = [f for f in outcome.foreign.values() if f.request.kind == "follow_up"]
    if result.status == "follow_up_interrupt" and not own and others:
        found.append(("cross_answer", f"follow_up_interrupt, after {others[0].request}"))
    return found


def check_caller(outcome: Outcome) -> list[Violation]:
    """The caller gets back what it is owed (§A, B11): its task leaves the call with the
    `cancelling()` it came with (plus the one cancel request of its own a `cancel` caller
    made and nobody took back); its `asyncio.timeout` comes out as TimeoutError, and each
    comes out within the provider's cleanup budget (a cancel swallowed into a result is the
    oracle's `cancel_swallowed`)."""
    found: list[Violation] = []
    plan = outcome.plan
    expected = outcome.cancelling_before
    if plan.caller == "cancel" and outcome.cancel_delivered:
        expected += 1
    if plan.caller == "timeout" and outcome.timeout_expired and outcome.caller_cancelled:
        found.append(("timeout_as_cancelled", "CancelledError instead of TimeoutError"))
    if outcome.cancelling_after != expected:
        found.append(
            (
                "cancelling",
                f"cancelling() {outcome.cancelling_before} before the call, "
                f"{outcome.cancelling_after} after it (expected {expected})",
            )
        )
    if outcome.interrupted() and outcome.interrupted_at is not None:
        late = outcome.done_at - outcome.interrupted_at
        if late > CLOSE_TIMEOUT + CLOSE_GRACE + RETURN_SLACK:
            found.append(("slow_return", f"returned {late:.3f} s after the caller's cancel"))
    return found


def _check_plan(outcome: Outcome) -> list[Violation]:
    """What the plan says of the result: its status is one of the known ones, its usage the
    latest valid one the provider reported (B5), a function call the one planned, and a
    quiet error chunk's error the result's data."""
    result, plan = outcome.result, outcome.plan
    if result is None:
        return []
    found: list[Violation] = []
    if result.status not in STATUSES:
        found.append(("status", repr(result.status)))
    expected_usage = outcome.provider.expected_usage
    if expected_usage is not None and result.usage != expected_usage:
        found.append(("usage", f"{result.usage} != {expected_usage}"))
    if result.status == "function_call" and plan.call is not None and result.data != plan.call:
        found.append(("data", f"function_call data {result.data!r}, planned {plan.call!r}"))
    if (
        is_quiet(result, outcome)
        and plan.tail == "error_chunk"
        and result.status == "error"
        and not isinstance(result.data, domain.ProviderError)
    ):
        found.append(("data", f"error data {result.data!r}"))
    return found


# -- the soak ----------------------------------------------------------------------------------


@asynccontextmanager
async def environment(
    channels: int,
    orchestrator: Callable[[StopRegistry], StreamOrchestrator] = StreamOrchestrator,
    *,
    rate_limits: emulator.RateLimits | None = None,
) -> AsyncIterator[Env]:
    """The emulator with `channels` channels (a user's question in each) and a probe channel,
    a logged-in client, and an orchestrator on a registry that runs on the loop's (virtual)
    clock. `rate_limits` are switched on once the channels are set up."""
    loop = asyncio.get_running_loop()
    async with emulator.local_discord() as local:
        api = local.api
        fetched = [local.channel]
        fetched += [await local.add_channel(f"soak-{n}") for n in range(1, channels)]
        probe = await local.add_channel("soak-probe")
        reply_ids = {c.id: api.post_user_message("a question", channel_id=c.id) for c in fetched}
        stops = TimedRegistry(clock=loop.time, max_age=MAX_AGE)
        api.rate_limits = rate_limits
        yield Env(api, orchestrator(stops), stops, fetched, reply_ids, probe)


async def run_phase(
    report: Report,
    rng: random.Random,
    streams: int,
    channels: int,
    limits: emulator.RateLimits | None,
) -> None:
    """`streams` streams in batches of `channels`, their plans drawn from `rng`."""
    async with environment(channels, rate_limits=limits) as env:
        index = report.streams
        last = index + streams
        while index < last:
            count = min(channels, last - index)
            plans = make_plans(rng, index, count)
            index += count
            for outcome in await run_batch(env, plans, report):
                tally(report, outcome)
            report.batches += 1
        report.rate_limit_hits.update(env.api.rate_limit_hits)


# -- the interactions phase --------------------------------------------------------------------

INTERACTION_SHARE: Final = 0.28  # of the interaction plans, those whose token expires


@dataclass(frozen=True)
class Click:
    """A click on a stream's Stop button: who, when (loop time), and its record (None: there
    was no button to click then)."""

    who: Clicker
    at: float
    record: InteractionRecord | None


class ClickRegistry(TimedRegistry):
    """The soak's registry for interactions: it also keeps every stop offered to it, with the
    entry it registered (`offers`), so that the stops a Stop button's click registers (their
    context is the click's `discord.Interaction`, `cordstream.shell.buttons`) are judged like
    the soak's own requests."""

    def __init__(self, *, clock: Callable[[], float], max_age: float) -> None:
        super().__init__(clock=clock, max_age=max_age)
        self.offers: list[tuple[int, Fired]] = []  # (channel id, the stop as a request made)

    def request_stop(
        self,
        channel_id: int,
        requester_id: str | None = None,
        context: object = None,
        *,
        answering: int | None = None,
    ) -> bool:
        before = self.entries(channel_id)
        seq = self.tick()
        accepted = super().request_stop(channel_id, requester_id, context, answering=answering)
        after = self.entries(channel_id)
        entry = next((e for e in after if not any(e is b for b in before)), None)
        displaced = tuple(b for b in before if not any(b is a for a in after))
        request = Request("stop", requester_id, "during", answering=answering)
        made = Fired(request, self.clock(), accepted, context, None, entry, displaced, seq)
        self.offers.append((channel_id, made))
        return accepted


@dataclass
class Asked:
    """The interactions phase's world: the emulator, the bot on its gateway, its members by
    role, the interactions the bot received and the soak waits for (by plan index), and the
    clicks under way."""

    env: Env
    bot: commands.Bot
    members: dict[Clicker, GuildMember]
    channel_ids: list[int]
    pending: dict[int, asyncio.Future[discord.Interaction[Any]]]
    clicking: set[asyncio.Task[None]] = field(default_factory=set)


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


def stop_button_on(
    api: emulator.DiscordEmulator, channel_id: int, first: int
) -> tuple[int, str] | None:
    """The newest message of the channel (from `first` on) showing a Stop button, and the
    button's custom id."""
    for message in reversed(api.messages(channel_id)[first:]):
        for row in message.components:
            for item in row.get("components", ()):
                custom_id = item.get("custom_id")
                if isinstance(custom_id, str) and custom_id.startswith(STOP_BUTTON_PREFIX):
                    return message.id, custom_id
    return None


async def click(asked: Asked, outcome: Outcome, who: Clicker) -> None:
    """`who` clicks the stream's Stop button, if a message of it shows one now."""
    api = asked.env.api
    at = asyncio.get_running_loop().time()
    found = stop_button_on(api, outcome.channel_id, outcome.first_message)
    record: InteractionRecord | None = None
    if found is not None:
        try:
            record = await api.click(asked.members[who], *found)
        except ValueError:  # gone meanwhile (the final edit removed it)
            record = None
    outcome.clicks.append(Click(who, at, record))


async def run_interaction(asked: Asked, plan: Plan, channel_id: int) -> Outcome:
    """The asker runs `/ask` in the channel; the bot hands the interaction it receives over
    the gateway to the soak, which streams the plan into it (`StreamContext(interaction,
    answering=asker, stop_button=..., ephemeral_errors=...)`), makes the plan's requests,
    expires the token and clicks the Stop button when the plan says; a stream ending on a
    function call is settled with `finish_interaction` (K1). Never raises (but for the soak's
    own cancellation of a stuck stream)."""
    loop = asyncio.get_running_loop()
    env, asking = asked.env, cast(Asking, plan.asking)
    api, asker = env.api, asked.members["asker"]
    provider = SoakProvider(
        plan.steps, headline=plan.headline, cleanup=plan.cleanup, reaction=plan.reaction
    )
    outcome = outcome_of(plan, channel_id, 0, provider)
    outcome.first_message = len(api.messages(channel_id))
    received = loop.create_future()
    asked.pending[plan.index] = received
    try:
        record = await api.slash(asker, "ask", {"question": str(plan.index)}, channel_id=channel_id)
        outcome.record = record
        interaction = await received
    except asyncio.CancelledError:
        if env.killing:
            raise
        outcome.escaped = asyncio.CancelledError("the interaction never reached the bot")
        return outcome

    def make(request: Request) -> None:
        fire(env, channel_id, plan, request, outcome.fired)

    def expire() -> None:
        if outcome.done_at == 0.0:  # not once the call returned: nothing to see
            api.expire_interaction(record)
            outcome.expired_at = loop.time()

    def press(who: Clicker) -> None:
        task = loop.create_task(click(asked, outcome, who))
        asked.clicking.add(task)
        task.add_done_callback(asked.clicking.discard)

    for request in plan.requests:
        if request.when == "before":
            make(request)
        elif request.when == "during":
            loop.call_later(request.at, make, request)
    if asking.expire_at == 0.0:
        expire()  # before the stream starts: its deferral fails (K1)
    elif asking.expire_at is not None:
        loop.call_later(asking.expire_at, expire)
    for who, at in asking.clicks:
        loop.call_later(at, press, who)
    context = StreamContext(
        interaction,
        suppress_user_errors=plan.suppress,
        on_stream_progress=_raiser if plan.progress_raises else None,
        answering=asker.id,
        stop_button=asking.stop_button,
        ephemeral_errors=asking.ephemeral_errors,
    )
    try:
        try:
            outcome.result = await env.orchestrator.stream_to_discord(
                provider, plan.config, context
            )
        finally:
            outcome.done_at = loop.time()
            outcome.provider_running = provider.running
        if outcome.result.status == "function_call":
            await finish_interaction(interaction)  # the bot gives up its tool loop
    except asyncio.CancelledError as error:
        if env.killing:
            raise
        outcome.escaped = error
    except Exception as error:
        outcome.escaped = error
    for request in plan.requests:
        if request.when == "after":
            loop.call_later(request.at, make, request)
    return outcome


def _latest_asking(plans: Sequence[Plan]) -> float:
    """How long after a batch started its last request, expiry or click happens, at most."""
    moments = [_latest_request(plans)]
    for plan in plans:
        if plan.asking is not None:
            moments += [at for _, at in plan.asking.clicks]
            moments.append(plan.asking.expire_at or 0.0)
    return max(moments)


def thinking_only(history: Sequence[emulator.Change]) -> set[int]:
    """The messages that only ever showed "thinking" (a deferral's response: no content, no
    embed): cordstream's, not the answer's; they are not part of its transcript (F2)."""
    shown = {c.message_id for c in history if c.kind != "delete" and (c.content or c.embeds)}
    return {c.message_id for c in history} - shown


async def run_asked_batch(asked: Asked, plans: Sequence[Plan], report: Report) -> list[Outcome]:
    """One batch of the interactions phase, judged as `run_batch` judges its own: every
    request, expiry and click has happened, the clicks are answered, what cancelled calls
    handed over has ended, leaked tasks and listeners are counted, the registry is judged;
    each stream's record is its channel's public messages (the "thinking" ones aside) and
    the ephemeral ones it showed its user, its requests (its interaction's too), and the
    stops its Stop button's clicks registered (`ClickRegistry.offers`)."""
    env = asked.env
    api, stops = env.api, cast(ClickRegistry, env.stops)
    tasks_before = set(asyncio.all_tasks())
    first_request = len(api.requests)
    channels = asked.channel_ids[: len(plans)]
    first_change = {c: len(api.history(c)) for c in channels}
    stops.offers.clear()
    outcomes = await run_streams(
        env,
        plans,
        channels,
        lambda plan, channel_id: run_interaction(asked, plan, channel_id),
        lambda _channel_id: 0,
    )

    async def clicks_answered() -> None:
        while asked.clicking:
            await asyncio.gather(*asked.clicking, return_exceptions=True)

    await quiesce(env, report, outcomes, _latest_asking(plans), tasks_before, then=clicks_answered)
    report.entries_leaked += len(stops.leaks())
    requests = api.requests[first_request:]
    for outcome in outcomes:
        channel_id, record = outcome.channel_id, outcome.record
        history = api.history(channel_id)[first_change[channel_id] :]
        hidden = thinking_only(history)
        outcome.history = [c for c in history if c.message_id not in hidden]
        public = api.messages(channel_id)[outcome.first_message :]
        mine = [m for m in public if m.id not in hidden]
        if record is not None:
            mine += record.ephemeral  # what only the asker sees (K1: error embeds)
            outcome.thinking_left = record.thinking
        outcome.messages = sorted(mine, key=lambda m: m.id)
        outcome.requests = [r for r in requests if r.channel_id == channel_id]
        outcome.ended_at = stops.unlistened.get(channel_id)
        outcome.registry_entry = stops.peek(channel_id)
        outcome.registry_entries = tuple(stops.entries(channel_id))  # the asker's slot's too
        outcome.misadmitted = env.misadmitted.get(outcome.plan.index, [])
        clicked = {c.record.id for c in outcome.clicks if c.record is not None}
        outcome.fired += [
            made
            for offered, made in stops.offers
            if offered == channel_id
            and isinstance(made.context, discord.Interaction)
            and made.context.id in clicked
        ]
        outcome.fired.sort(key=lambda f: f.at)
        judge_registry(env, outcome, report)
    env.misadmitted = {}
    await close_batch(env, report)
    return outcomes


async def interactions_phase(
    report: Report, rng: random.Random, streams: int, channels: int
) -> None:
    """`streams` streams into slash commands' interactions, `channels` at once (one per
    channel), through a real `commands.Bot` on the emulator's gateway (`local_bot`): its
    `/ask` command hands each interaction it receives to the soak (`run_interaction`)."""
    loop = asyncio.get_running_loop()
    api = emulator.DiscordEmulator()
    # discord.py reconnects when no gateway event came for `heartbeat_timeout` seconds of the
    # loop's clock, while it heartbeats on the real one: on looptime, a quiet minute would
    # make it reconnect (and resume), which is not what the soak is after.
    bot = commands.Bot(command_prefix="!", intents=discord.Intents.default(), heartbeat_timeout=1e9)
    stops = ClickRegistry(clock=loop.time, max_age=MAX_AGE)
    pending: dict[int, asyncio.Future[discord.Interaction[Any]]] = {}

    @bot.tree.command(description="Ask the model")
    async def ask(interaction: discord.Interaction[Any], question: str) -> None:
        received = pending.pop(int(question), None)
        if received is not None and not received.done():
            received.set_result(interaction)

    async with local_bot(bot, api):
        members: dict[Clicker, GuildMember] = {
            "asker": api.add_member("asker"),
            "third": api.add_member("carol"),
            "moderator": api.add_member("moderator", manage_messages=True),
        }
        ids = [api.channel_id, *(api.add_channel(f"ask-{n}") for n in range(1, channels))]
        probe = bot.get_partial_messageable(api.add_channel("ask-probe"))
        env = Env(api, StreamOrchestrator(stops), stops, [], {}, probe)
        asked = Asked(env, bot, members, ids, pending)
        index, last = report.streams, report.streams + streams
        while index < last:
            count = min(channels, last - index)
            plans = [asked_plan(rng, index + k, members["asker"].id) for k in range(count)]
            index += count
            for outcome in await run_asked_batch(asked, plans, report):
                tally(report, outcome)
            report.batches += 1


def check_asked(outcome: Outcome) -> list[Violation]:
    """K1, K2, C10 for a stream into an interaction: nothing left "thinking" once it is
    settled (`left_thinking`; a known defect apart, `_expired_thinking`); no public error
    embed where an ephemeral one was due (a public follow-up with an embed while the token
    lived and errors are ephemeral, or an embed on the original response after it showed
    text); a third
    user's click registers no stop, is not acknowledged as a stop, ends nothing, and, made
    while the stream listened, is answered with the ephemeral refusal; an allowed click
    (the asker's, a moderator's) made while the stream listened registered a stop, and the
    stream ended stopped (the oracle judges that stop as any request: B3, C7)."""
    asking, result = outcome.plan.asking, outcome.result
    if asking is None:
        return []
    found: list[Violation] = []
    if outcome.thinking_left:
        status = result.status if result is not None else "no result"
        found.append(("left_thinking", f"still thinking after {status}"))
    found += _public_embeds(outcome, asking)
    listened = outcome.end
    for made in outcome.clicks:
        record = made.record
        if record is None:
            continue
        # The stop the click registered: its context is the click (`ClickRegistry`).
        stop = next((f for f in outcome.fired if getattr(f.context, "id", None) == record.id), None)
        during = made.at < listened - EPSILON_SOAK
        if made.who == "third":
            if stop is not None or 6 in record.responses:
                found.append(("refused_click_obeyed", f"a third user's click at {made.at:.4f}"))
            refusal = [m.content for m in record.ephemeral]
            if during and refusal != [STOP_REFUSED]:
                found.append(("refusal_missing", f"the click at {made.at:.4f} got {refusal}"))
            continue
        if during and stop is None:
            found.append(("click_ignored", f"{made.who}'s click at {made.at:.4f}: no stop"))
        elif stop is not None and (result is None or result.status != "stopped_by_user"):
            status = result.status if result is not None else "no result"
            found.append(("click_ignored", f"{made.who}'s click at {made.at:.4f}: {status}"))
    return found


EPSILON_SOAK: Final = 1e-6


def _public_embeds(outcome: Outcome, asking: Asking) -> list[Violation]:
    """K1: error, timeout and warning embeds are the asker's alone (ephemeral follow-ups)
    while the token lives, when `ephemeral_errors`; only one that comes before any text
    replaces the "thinking" response, publicly. After the token expired every embed goes to
    the channel."""
    if not asking.ephemeral_errors:
        return []
    found: list[Violation] = []
    expired = outcome.expired_at if outcome.expired_at is not None else float("inf")
    showed: set[int] = set()
    for change in outcome.history:
        if change.kind == "delete":
            continue
        if change.embeds and change.at < expired:
            if change.kind == "create" or change.message_id in showed:
                found.append(("public_embed", f"a public embed at {change.at:.4f}"))
        elif change.content:
            showed.add(change.message_id)
    return found


def click_label(outcome: Outcome, made: Click) -> str:
    """Who clicked a Stop button, and what came of it (K2, C10)."""
    if made.record is None:
        return f"{made.who}: no button to click"
    context = outcome.result.stop_context if outcome.result is not None else None
    mine = context is not None and getattr(context, "id", None) == made.record.id
    if made.who == "third":
        return f"{made.who}: refused" + (", answered ephemerally" if made.record.ephemeral else "")
    if mine:
        return f"{made.who}: stopped the answer"
    if made.at >= outcome.end:
        return f"{made.who}: after the answer ended"
    return f"{made.who}: the answer was stopping already"


def expiry_label(outcome: Outcome) -> str:
    """When an interaction's token expired, relative to the stream."""
    asking = cast(Asking, outcome.plan.asking)
    if asking.expire_at is None:
        return "not during the stream"
    if asking.expire_at == 0.0:
        return "before the stream started (deferral refused)"
    if outcome.expired_at is None:
        return "planned after the answer ended"
    messages = len(outcome.result.messages) if outcome.result is not None else 0
    return f"during the stream ({'text shown' if messages else 'no text yet'} at the end)"


# -- the answers phase -------------------------------------------------------------------------

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


def check_answer(
    lines: Sequence[str], got: object, sent: Sequence[emulator.SentMessage]
) -> str | None:
    """What is wrong with one answer of the answers phase (None: nothing): it must end
    `completed`, its three lines in order in `accumulated_text` and in its channel (F2, F4),
    with no embed."""
    want = "\n".join(lines)
    texts = "\n".join(m.content for m in sent if not m.embeds)
    if not isinstance(got, domain.StreamResult):
        return f"no result: {got!r}"[:120]
    if got.status != "completed":
        return f"{got.status} ({got.data!r})"[:120]
    if got.accumulated_text != want or texts != want:
        return f"text {got.accumulated_text[-40:]!r}, channel {texts[-40:]!r}, want {want[-40:]!r}"
    if any(m.embeds for m in sent) or got.messages_sent != len(sent):
        return f"{got.messages_sent} messages sent, {len(sent)} in the channel"
    return None


async def answers_phase(report: Report, rng: random.Random, streams: int) -> None:
    """`streams` 3-line answers at once, each into its own channel, under Discord's real rate
    limits (50 requests per second for the bot), live (60%) or as messages: every one must end
    `completed`, with its three lines in order in its channel and in `accumulated_text` (F4),
    and no live answer's message request may be answered 429 by its channel's limit (L2)."""
    loop = asyncio.get_running_loop()
    tasks_before = set(asyncio.all_tasks())
    async with emulator.local_discord() as (api, client, _):
        ids = [api.channel_id, *(api.add_channel(f"answers-{n}") for n in range(1, streams))]
        channels = [client.get_partial_messageable(c, type=discord.ChannelType.text) for c in ids]
        probe = client.get_partial_messageable(api.add_channel("answers-probe"))
        stops = TimedRegistry(clock=loop.time, max_age=MAX_AGE)
        orchestrator = StreamOrchestrator(stops)
        plans = [make_answer(rng, n) for n in range(streams)]
        configs = [
            StreamConfig(
                delivery="live" if rng.random() < LIVE_SHARE else "messages",
                inactivity_timeout=TIMEOUT,
            )
            for _ in plans
        ]
        api.rate_limits = emulator.RateLimits()

        async def answer(
            steps: tuple[Step, ...], config: StreamConfig, channel: discord.PartialMessageable
        ) -> object:
            try:
                return await orchestrator.stream_to_discord(
                    SoakProvider(steps), config, StreamContext(channel)
                )
            except Exception as error:
                return error

        tasks = [
            loop.create_task(answer(steps, config, channel))
            for (_, steps), config, channel in zip(plans, configs, channels, strict=True)
        ]
        done, stuck = await asyncio.wait(tasks, timeout=STREAM_LIMIT) if tasks else (set(), set())
        for task in stuck:
            task.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)
        report.stuck_streams += len(stuck)
        requests: dict[int, list[emulator.RecordedRequest]] = {}
        for request in api.requests:
            if request.channel_id is not None:
                requests.setdefault(request.channel_id, []).append(request)
        for (lines, _), config, channel_id, task in zip(plans, configs, ids, tasks, strict=True):
            report.answers += 1
            got = task.result() if task in done else None
            sent = api.messages(channel_id)
            if isinstance(got, BaseException):
                report.exceptions_escaped += 1
            problem = check_answer(lines, got, sent)
            if config.delivery == "live":
                report.live_answers += 1
                limited = [r for r in requests.get(channel_id, []) if r.rate_limited == "route"]
                report.live_429s += len(limited)
                if limited and problem is None:
                    problem = f"{len(limited)} requests answered 429 by the channel's limit"
            if problem is not None:
                report.answers_lost += 1
                if len(report.samples) < 20:
                    report.samples.append(f"answer in channel {channel_id}: {problem}")
            report.messages_accepted += sum(1 for m in sent if not m.embeds)
            report.embeds_accepted += sum(1 for m in sent if m.embeds)
        report.leaked_listeners += stops.listening()
        report.rate_limit_hits.update(f"answers {k}" for k in api.rate_limit_hits.elements())
        env = Env(api, orchestrator, stops, [], {}, probe)
        if not await probe_client(env):
            report.wedged_clients += 1
            report.samples.append("answers: a probe send did not complete (B11)")
    leftover = leftover_tasks(tasks_before)
    report.leaked_tasks += len(leftover)
    report.leaked_task_names.extend(leftover)


# -- the soak ----------------------------------------------------------------------------------


async def soak_async(
    streams: int,
    seed: int,
    channels: int,
    *,
    limited: int = 0,
    limited_channels: int = 200,
    answers: int = 0,
    interactions: int = 0,
    interaction_channels: int = 20,
) -> Report:
    """The four phases: `streams` streams under faults, `channels` at once, with Discord's
    limits off; `limited` streams under the same faults, `limited_channels` at once, with
    Discord's real rate limits on; `answers` clean 3-line answers all at once under them;
    `interactions` streams into slash commands' interactions, `interaction_channels` at
    once, through a bot on the emulator's gateway."""
    report = Report(seed=seed, channels=channels)
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    started = loop.time()
    phases: list[tuple[str, int, Callable[[], Awaitable[None]]]] = [
        ("faults", streams, lambda: run_phase(report, rng, streams, channels, None)),
        (
            "real limits",
            limited,
            lambda: run_phase(report, rng, limited, limited_channels, emulator.RateLimits()),
        ),
        ("answers", answers, lambda: answers_phase(report, rng, answers)),
        (
            "interactions",
            interactions,
            lambda: interactions_phase(report, rng, interactions, interaction_channels),
        ),
    ]
    for name, count, run in phases:
        if not count:
            continue
        wall, virtual, before = time.perf_counter(), loop.time(), report.streams
        await run()
        if name == "real limits":
            report.limited_streams += report.streams - before
        report.phases[name] = (
            f"{count} streams, {time.perf_counter() - wall:.1f} s real, "
            f"{loop.time() - virtual:,.1f} s virtual"
        )
    report.virtual_seconds = loop.time() - started
    return report


def soak(
    streams: int = 5000,
    seed: int = 0,
    channels: int = 8,
    *,
    limited: int = 0,
    limited_channels: int = 200,
    answers: int = 0,
    interactions: int = 0,
    interaction_channels: int = 20,
) -> Report:
    """Run the soak on a looptime loop; the report has the real seconds it took."""
    counts = (streams, limited, answers, interactions)
    if min(counts) < 0 or min(channels, limited_channels, interaction_channels) < 1:
        raise ValueError("stream counts must be >= 0 and channel counts >= 1")
    wall = time.perf_counter()
    with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        report = runner.run(
            soak_async(
                streams,
                seed,
                channels,
                limited=limited,
                limited_channels=limited_channels,
                answers=answers,
                interactions=interactions,
                interaction_channels=interaction_channels,
            )
        )
    report.wall_seconds = time.perf_counter() - wall
    return report


def render(report: Report) -> str:
    """The printed table."""
    rows: list[tuple[str, object]] = [
        ("seed", report.seed),
        ("streams run", report.streams),
        (f"batches ({report.channels} channels streaming at once)", report.batches),
        ("exceptions escaped from stream_to_discord", report.exceptions_escaped),
        ("streams stuck", report.stuck_streams),
        ("leaked tasks after the batches", report.leaked_tasks),
        ("leaked registry listeners", report.leaked_listeners),
        ("unexplained registry entries", report.unexplained_registry_entries),
        ("stale requests discarded (not a leak)", report.stale_requests_discarded),
        ("transcript mismatches (accumulated_text)", report.transcript_mismatches),
        ("messages that pinged", report.pings),
        ("invariant violations", report.invariant_violations),
        ("quiet streams (exact status predicted)", report.quiet_streams),
        ("callers whose cancelling() changed", report.cancelling_changed),
        ("timeout callers that got CancelledError", report.timeouts_as_cancelled),
        ("stops lost (consumed, result not theirs)", report.stops_lost),
        ("clients wedged (probe send after a batch)", report.wedged_clients),
        (
            f"answers lost or incomplete (of {report.answers}, {report.live_answers} live)",
            report.answers_lost,
        ),
        ("results with anomalies (impossible events)", report.anomalies),
        ("live messages left with the cursor (L4)", report.cursors_left),
        ("live messages whose text shrank (L3)", report.shrinking_edits),
        ("live message requests answered 429 (L2)", report.live_429s),
        ("streams ended by another answer's request (C9)", report.cross_answer_stops),
        ("streams a request for them did not end", report.stops_missed),
        ("registry entries no later stream takes (C9)", report.entries_leaked),
        ("streams sharing a channel, each answering a user", report.answer_streams),
        ("interactions left thinking after the result (K1)", report.left_thinking),
        ("messages lost at a token's expiry (K1, F2)", report.expiry_losses),
        ("public error embeds due ephemeral (K1)", report.public_embeds),
        ("refused Stop clicks that stopped (K2, C10)", report.refused_clicks_obeyed),
        ("accepted Stop clicks that did not stop (K2)", report.accepted_clicks_ignored),
        ("streams into a slash command's interaction", report.interaction_streams),
        ("live streams (the others: messages delivery)", report.live_streams),
        ("live requests answered a global 429 (allowed)", report.live_global_429s),
        ("live streams sharing a channel (2 or 3)", report.shared_streams),
        ("streams under Discord's real rate limits", report.limited_streams),
        ("cancels that left work in the background (B11)", report.background_requests),
        (
            "messages accepted / embeds accepted",
            f"{report.messages_accepted} / {report.embeds_accepted}",
        ),
        ("virtual seconds", f"{report.virtual_seconds:,.1f}"),
        ("real seconds", f"{report.wall_seconds:,.1f}"),
    ]
    title = "cordstream soak: the real shell, discord.py and the emulator, under faults"
    lines = [title]
    lines += [f"  {label:<44} {value!s:>14}" for label, value in rows]
    for title, counter in (
        ("results per status", report.statuses),
        ("stop reasons", report.stop_reasons),
        ("provider faults reached", report.provider_faults),
        ("Discord faults consumed", report.discord_faults),
        ("user requests accepted", report.user_requests),
        ("provider cleanups and reactions reached", report.provider_cleanups),
        ("callers", report.callers),
        ("stops racing follow-ups", report.races),
        ("requests aimed at answers (C9)", report.targets),
        ("Stop button clicks (K2)", report.clicks),
        ("interaction tokens expired (K1)", report.expiries),
        ("moderators' deletions of a live message", report.deletions),
        ("429s from Discord's real rate limits", report.rate_limit_hits),
        ("violations", report.violations),
        ("known defects, fix pending (tests.oracle.KNOWN_DEFECTS)", report.known_defects),
    ):
        lines.append(f"  {title}:")
        lines += [f"    {key:<42} {value!s:>14}" for key, value in sorted(counter.items())]
    lines.append("  phases:")
    lines += [f"    {name:<14} {text}" for name, text in report.phases.items()]
    if report.leaked_task_names:
        lines.append(f"  leaked tasks: {report.leaked_task_names[:10]}")
    if report.samples:
        lines.append("  first violations:")
        lines += [f"    {sample}" for sample in report.samples]
    if report.known_samples:
        lines.append("  first known defects (fix pending):")
        lines += [f"    {sample}" for sample in report.known_samples]
    failures = report.failures()
    lines.append(f"  FAILED: {failures}" if failures else "  OK: every must-be-zero figure is 0")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=DESCRIPTION)
    parser.add_argument("--streams", type=int, default=5000, help="streams to run (5000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the plans (0)")
    parser.add_argument("--channels", type=int, default=8, help="concurrent channels (8)")
    parser.add_argument(
        "--limited", type=int, default=1000, help="streams under Discord's real limits (1000)"
    )
    parser.add_argument(
        "--limited-channels", type=int, default=250, help="their concurrent channels (250)"
    )
    parser.add_argument(
        "--answers", type=int, default=1000, help="3-line answers at once, at 50/s (1000)"
    )
    parser.add_argument(
        "--interactions",
        type=int,
        default=500,
        help="streams into slash commands' interactions, through a bot on the gateway (500)",
    )
    parser.add_argument(
        "--interaction-channels", type=int, default=20, help="their concurrent channels (20)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    report = soak(
        args.streams,
        args.seed,
        args.channels,
        limited=args.limited,
        limited_channels=args.limited_channels,
        answers=args.answers,
        interactions=args.interactions,
        interaction_channels=args.interaction_channels,
    )
    print(json.dumps(report.as_json()) if args.json else render(report))
    return 1 if report.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
