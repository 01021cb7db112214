"""OpenAI Chat Completions streams for the loopback server, built from a few plain values."""

from __future__ import annotations

import json
from typing import Any

from agentloop.testing import ScriptedResponse


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _usage(prompt: int, completion: int, cached: int = 0) -> bytes:
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "test-model",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def text_stream(text: str, *, size: int = 8, cached: int = 0) -> ScriptedResponse:
    """A streamed text reply, in pieces of ``size`` characters; ``cached`` of its 20 prompt
    tokens were read from the provider's cache."""
    pieces = [_chunk({"role": "assistant", "content": ""})]
    pieces += [_chunk({"content": text[i : i + size]}) for i in range(0, len(text), size)]
    pieces += [_chunk({}, "stop"), _usage(20, len(text) // 4, cached), b"data: [DONE]\n\n"]
    return ScriptedResponse.sse(pieces)


def tool_call_stream(
    name: str, args: dict[str, Any], *, call_id: str = "call_1"
) -> ScriptedResponse:
    """A streamed reply that calls one tool, its arguments in two pieces."""
    arguments = json.dumps(args)
    half = len(arguments) // 2
    start = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    pieces = [
        _chunk({"role": "assistant", "content": None, "tool_calls": [start]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}),
        _chunk({}, "tool_calls"),
        _usage(30, 10),
        b"data: [DONE]\n\n",
    ]
    return ScriptedResponse.sse(pieces)
