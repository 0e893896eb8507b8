"""OpenAI chat-completions stream frames, as the API sends them, for a local `ModelServer`
(tool-loop tests, and a bot's own).

`answer("text")` is a whole text reply; `tool_request(name, arguments)` a reply asking for one
tool, with usage on the trailing `choices == []` chunk as OpenAI sends it when asked for
`stream_options={"include_usage": true}`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cordstream.shell.testing.sse import Reply, sse, sse_done


def frame(
    delta: Mapping[str, object], finish: str | None = None, *, index: int = 0
) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "local-model",
        "choices": [{"index": index, "delta": dict(delta), "finish_reason": finish}],
    }


def usage(prompt: int, completion: int) -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "local-model",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )


def answer(text: str, *, prompt: int = 20, completion: int = 8, size: int = 5) -> Reply:
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    frames = [sse(frame({"role": "assistant", "content": ""}))]
    frames += [sse(frame({"content": piece})) for piece in pieces]
    frames += [sse(frame({}, "stop")), usage(prompt, completion), sse_done()]
    return Reply(frames=frames)


def tool_request(
    name: str,
    arguments: Mapping[str, object],
    *,
    call_id: str = "call_1",
    prompt: int = 15,
    completion: int = 6,
) -> Reply:
    text = json.dumps(dict(arguments))
    half = len(text) // 2
    start = {"index": 0, "id": call_id, "type": "function", "function": {"name": name}}
    frames = [
        sse(frame({"role": "assistant", "content": None, "tool_calls": [start]})),
        sse(frame({"tool_calls": [{"index": 0, "function": {"arguments": text[:half]}}]})),
        sse(frame({"tool_calls": [{"index": 0, "function": {"arguments": text[half:]}}]})),
        sse(frame({}, "tool_calls")),
        usage(prompt, completion),
        sse_done(),
    ]
    return Reply(frames=frames)
