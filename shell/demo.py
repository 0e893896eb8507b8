"""`cordstream demo`: a built-in answer streamed through the core, shown as a channel would show it.

This version runs the pure core (`domain.step`) under a virtual clock against a simulated
channel that accepts each message after `--latency` seconds, so it needs no token, no key and
no network, and runs instantly whatever the timings. The shell issue replaces the simulated
channel with discord.py talking to the project's local Discord emulator.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from domain import (
    ArmTimer,
    ChunkArrived,
    CloseProvider,
    ConsumeRequest,
    Delivered,
    DoneChunk,
    EmbedSpec,
    Event,
    Finish,
    PauseOver,
    ProcessedChunk,
    ProviderEnded,
    SendEmbed,
    SendMessage,
    Started,
    StopRequest,
    StopRequested,
    StreamConfig,
    StreamResult,
    TextChunk,
    TimerFired,
    TypingPause,
    initial_state,
    step,
)

_PARAGRAPH = (
    "Streaming into Discord looks simple until the details arrive. A message may hold at most "
    "two thousand characters, so a long answer must be cut, and every cut must fall where a "
    "reader expects it: after a sentence, never inside a word, never between an emoji and its "
    "skin tone. Code blocks are worse, because a block cut in two must be closed in the first "
    "message and reopened, with its language, in the second, or the rest of the answer renders "
    "as code. Meanwhile the model keeps writing, the user may press stop, a new message may "
    "arrive, and Discord may refuse a send. "
)
_CODE = "\n".join(
    [
        "```python",
        "from shell import StreamOrchestrator, StreamConfig, StreamContext",
        "",
        "async def answer(channel, message, provider):",
        "    orchestrator = StreamOrchestrator()",
        "    context = StreamContext(channel, reply_to=message)",
        "    result = await orchestrator.stream_to_discord(provider, StreamConfig(), context)",
        *(
            f"    # step {i:02d}: the tool loop acts on result.status ({i * 7} ms budget)"
            for i in range(40)
        ),
        "    return result",
        "```",
    ]
)
ANSWER = (
    "<think>The user asked how cordstream works. Show prose, a long paragraph and code.</think>"
    "Here is how **cordstream** delivers an answer.\n\n"
    "Each line leaves as soon as it is complete, so the channel fills while the model writes.\n"
    + _PARAGRAPH * 3
    + "\n\nA code block longer than one message is split line by line:\n\n"
    + _CODE
    + "\n\nThat's all — nothing the model wrote is lost, and nothing is sent twice. 🎉\n"
)
USAGE = {"prompt_tokens": 412, "completion_tokens": 1337}


def chunks(text: str = ANSWER, size: int = 7) -> Iterator[ProcessedChunk]:
    """The built-in answer as a provider streams it, with usage on a trailing chunk."""
    for start in range(0, len(text), size):
        yield TextChunk(text[start : start + size])
    yield DoneChunk({"finish_reason": "stop"})
    yield TextChunk("", usage=USAGE)


@dataclass
class Options:
    speed: float = 200.0  # chunks per second
    humanizer: int = 1
    stop_after: float | None = None
    follow_up_after: float | None = None
    hang: bool = False
    timeout: float = 10.0
    latency: float = 0.05  # seconds Discord takes to accept a send


@dataclass
class Transcript:
    """What the simulated channel shows."""

    messages: list[str] = field(default_factory=list)
    embeds: list[EmbedSpec] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


def simulate(options: Options) -> tuple[StreamResult, Transcript]:
    """Run one stream under a virtual clock; return its result and the channel."""
    config = StreamConfig(
        inactivity_timeout=options.timeout,
        humanizer_degree=options.humanizer,
        flush_limit=0,
    )
    state = initial_state(config)
    channel = Transcript()
    order = itertools.count()
    queue: list[tuple[float, int, Event]] = []  # (time, tie-break, event)

    def at(when: float, event: Event) -> None:
        heapq.heappush(queue, (when, next(order), event))

    source = list(chunks())
    if options.hang:
        source = source[: len(source) // 3]  # then the provider never yields again
    else:
        at(len(source) / options.speed + 0.001, ProviderEnded(0.0))
    for index, chunk in enumerate(source):
        at(index / options.speed, ChunkArrived(0.0, chunk))
    if options.stop_after is not None:
        at(options.stop_after, StopRequested(0.0, StopRequest("stop", "user-1", "/stop")))
    if options.follow_up_after is not None:
        request = StopRequest("follow_up", "user-1", "new message")
        at(options.follow_up_after, StopRequested(0.0, request))

    state, effects = step(state, Started(0.0))
    now = 0.0
    result: StreamResult | None = None
    while result is None:
        for effect in effects:
            match effect:
                case ArmTimer(at=deadline):
                    at(deadline, TimerFired(deadline, deadline))
                case SendMessage(seq=seq, content=content, reply=reply):
                    channel.messages.append(content)
                    kind = "reply" if reply else "message"
                    channel.log.append(f"[{now:8.3f}s] → {kind} {seq}: {len(content)} chars")
                    at(now + options.latency, Delivered(0.0, seq))
                case SendEmbed(seq=seq, embed=embed):
                    channel.embeds.append(embed)
                    channel.log.append(f"[{now:8.3f}s] → embed: {embed.title}")
                    at(now + options.latency, Delivered(0.0, seq))
                case TypingPause(token=token, seconds=seconds):
                    channel.log.append(f"[{now:8.3f}s] … typing for {seconds:.2f}s")
                    at(now + seconds, PauseOver(0.0, token))
                case CloseProvider():
                    queue = [e for e in queue if not isinstance(e[2], ChunkArrived | ProviderEnded)]
                    heapq.heapify(queue)
                case ConsumeRequest(request=request):
                    channel.log.append(f"[{now:8.3f}s] {request.kind} request handled")
                case Finish(result=final):
                    result = final
        if result is not None or not queue:
            break
        now, _, event = heapq.heappop(queue)
        if isinstance(event, StopRequested):
            channel.log.append(f"[{now:8.3f}s] user asks: {event.request.kind}")
        state, effects = step(state, _at_time(event, now))
    if result is None:  # pragma: no cover - the core always finishes once the provider ends
        raise RuntimeError("the stream did not finish")
    return result, channel


def _at_time(event: Event, now: float) -> Event:
    """The same event stamped with the virtual clock's reading."""
    match event:
        case TimerFired(armed_for=armed_for):
            return TimerFired(now, armed_for)
        case ChunkArrived(chunk=chunk, headline=headline):
            return ChunkArrived(now, chunk, headline)
        case ProviderEnded():
            return ProviderEnded(now)
        case StopRequested(request=request):
            return StopRequested(now, request)
        case PauseOver(token=token):
            return PauseOver(now, token)
        case Delivered(seq=seq, url=url):
            return Delivered(now, seq, url or f"https://discord.com/channels/1/2/{seq}")
    return event


def render(result: StreamResult, channel: Transcript) -> str:
    """The channel as a user sees it, then the result."""
    lines = ["", "══════ #demo-channel ══════"]
    for number, message in enumerate(channel.messages, 1):
        lines += [f"┌─ message {number} ({len(message)} chars)", message, "└─"]
    for embed in channel.embeds:
        lines += [f"┌─ embed [{embed.colour}] {embed.title}", embed.description, "└─"]
    log = result.thought_log
    lines += [
        "",
        "══════ StreamResult ══════",
        f"status:          {result.status}",
        f"stop_reason:     {result.stop_reason}",
        f"messages_sent:   {result.messages_sent}",
        f"accumulated:     {len(result.accumulated_text)} chars",
        f"usage:           {result.usage}",
        f"thought (raw):   {log.raw if log else None!r}",
        f"data:            {result.data!r}",
    ]
    return "\n".join(lines)
