"""The emulated provider's replies on the wire, streamed and whole, for the three APIs.

Each stream has the events, in the order and with the fields, that the recorded real streams in
the repository's ``tests/fixtures/provider-streams`` show (``tests/models/test_emulated_wire.py``
checks it): a Responses stream opens with ``response.created`` and ``response.in_progress``
carrying the whole response object, wraps text in ``content_part.added``/``done`` with
``output_text.done``, numbers its events; a Chat stream sends the usage chunk only when the
request asks for it (``stream_options.include_usage``); a Messages stream sends a ``ping``
after ``message_start``. The SDKs' stream helpers (``responses.stream()`` and the like) rebuild
replies from exactly these events, so a missing one breaks them.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from typing import Any

from ._script import Chunk, ScriptedResponse

__all__ = ["Call", "Reply", "bad_request", "render"]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call as it goes on the wire: the wire name and the arguments' JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """One reply to render: its parts, streamed in ``pieces``, and what the request asked for."""

    n: int
    model: str
    thought: str
    thoughts: list[str]
    text: str
    pieces: list[str]
    calls: list[Call]
    prompt: int
    delay: float = 0.0
    include_usage: bool = False
    encrypted_reasoning: bool = False
    obfuscation: bool = True

    @property
    def output_tokens(self) -> int:
        return 30 if self.calls else 20


def render(api: str, reply: Reply, *, stream: bool) -> ScriptedResponse:
    """The reply: a stream of SSE events, ``delay`` seconds apart, or a whole JSON body."""
    if api == "chat":
        events, doc = (_chat_events(reply) if stream else []), _chat_doc(reply)
    elif api == "responses":
        created = int(time.time())
        events, doc = (_resp_events(reply, created) if stream else []), _resp_doc(reply, created)
    else:
        events, doc = (_anth_events(reply) if stream else []), _anth_doc(reply)
    if not stream:
        return ScriptedResponse.json(doc)
    done = [b"data: [DONE]\n\n"] if api == "chat" else []
    if not reply.delay:
        return ScriptedResponse.sse([b"".join([*events, *done])])
    chunks = [Chunk(e, reply.delay if i else 0.0) for i, e in enumerate(events)]
    return ScriptedResponse.sse([*chunks, *(Chunk(d) for d in done)])


def bad_request(api: str, message: str) -> ScriptedResponse:
    """A 400 with the API's error body."""
    error = {"type": "invalid_request_error", "message": message}
    if api == "anthropic":
        return ScriptedResponse.json(
            {"type": "error", "error": error, "request_id": "req_emulated"}, status=400
        )
    return ScriptedResponse.json({"error": {**error, "param": None, "code": None}}, status=400)


def _halves(text: str) -> list[str]:
    """Arguments streamed in two pieces, as models do (neither half is JSON on its own)."""
    middle = max(1, len(text) // 2)
    return [part for part in (text[:middle], text[middle:]) if part]


def _decoded(arguments: str) -> Any:
    """A whole Anthropic body carries the input decoded; raw text that is not JSON is sent as
    a string (the driver then reports it, as it would a provider's)."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


# -- Chat Completions --------------------------------------------------------------------------


def _chat_chunk(r: Reply, delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk: dict[str, Any] = {
        "id": f"chatcmpl-emu{r.n}", "object": "chat.completion.chunk", "created": 1,
        "model": r.model, "service_tier": "default", "system_fingerprint": "fp_emulated",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }  # fmt: skip
    if r.include_usage:
        chunk["usage"] = None
    return b"data: " + _dumps(chunk) + b"\n\n"


def _chat_usage(r: Reply) -> dict[str, Any]:
    out = r.output_tokens
    return {
        "prompt_tokens": r.prompt, "completion_tokens": out, "total_tokens": r.prompt + out,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    }  # fmt: skip


def _chat_events(r: Reply) -> list[bytes]:
    content = None if (r.calls or r.thoughts) and not r.pieces else ""
    out = [_chat_chunk(r, {"role": "assistant", "content": content, "refusal": None})]
    out += [_chat_chunk(r, {"reasoning_content": t}) for t in r.thoughts]
    out += [_chat_chunk(r, {"content": p}) for p in r.pieces]
    for i, call in enumerate(r.calls):
        head = {"index": i, "id": f"call_{r.n}_{i}", "type": "function",
                "function": {"name": call.name, "arguments": ""}}  # fmt: skip
        out.append(_chat_chunk(r, {"tool_calls": [head]}))
        for part in _halves(call.arguments):
            out.append(
                _chat_chunk(r, {"tool_calls": [{"index": i, "function": {"arguments": part}}]})
            )
    out.append(_chat_chunk(r, {}, "tool_calls" if r.calls else "stop"))
    if r.include_usage:
        usage = {
            "id": f"chatcmpl-emu{r.n}", "object": "chat.completion.chunk", "created": 1,
            "model": r.model, "service_tier": "default", "system_fingerprint": "fp_emulated",
            "choices": [], "usage": _chat_usage(r),
        }  # fmt: skip
        out.append(b"data: " + _dumps(usage) + b"\n\n")
    return out


def _chat_doc(r: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": r.text or (None if r.calls else ""),
        "refusal": None,
        "annotations": [],
    }
    if r.thought:
        message["reasoning_content"] = r.thought
    if r.calls:
        message["tool_calls"] = [
            {"id": f"call_{r.n}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for i, c in enumerate(r.calls)
        ]  # fmt: skip
    return {
        "id": f"chatcmpl-emu{r.n}", "object": "chat.completion", "created": 1, "model": r.model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if r.calls else "stop"}],
        "usage": _chat_usage(r), "service_tier": "default", "system_fingerprint": "fp_emulated",
    }  # fmt: skip


# -- Responses ------------------------------------------------------------------------------


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _dumps({"type": kind, **data}) + b"\n\n"


def _resp_usage(r: Reply) -> dict[str, Any]:
    out = r.output_tokens
    return {"input_tokens": r.prompt, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": r.prompt + out}  # fmt: skip


def _resp_object(
    r: Reply, created: int, output: list[dict[str, Any]], done: bool
) -> dict[str, Any]:
    """The response object, as ``response.created`` (``done=False``) and ``response.completed``
    carry it (and the whole body)."""
    return {
        "id": f"resp_emu{r.n}", "object": "response", "created_at": created,
        "status": "completed" if done else "in_progress", "background": False,
        "completed_at": created if done else None, "error": None, "incomplete_details": None,
        "instructions": None, "max_output_tokens": None, "max_tool_calls": None,
        "model": r.model, "output": output, "parallel_tool_calls": True,
        "previous_response_id": None, "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None}, "safety_identifier": None,
        "service_tier": "default", "store": False, "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto",
        "tools": [], "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled",
        "usage": _resp_usage(r) if done else None, "user": None, "metadata": {},
    }  # fmt: skip


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _resp_reasoning(r: Reply, done: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"id": f"rs_emu{r.n}", "type": "reasoning"}
    item["encrypted_content"] = (
        base64.b64encode(f"emulated {r.n}".encode()).decode() if r.encrypted_reasoning else None
    )
    item["summary"] = [{"type": "summary_text", "text": r.thought}] if done else []
    return item


def _resp_message(r: Reply, done: bool) -> dict[str, Any]:
    return {"id": f"msg_emu{r.n}", "type": "message",
            "status": "completed" if done else "in_progress",
            "content": [_text_part(r.text)] if done else [], "role": "assistant"}  # fmt: skip


def _resp_call(r: Reply, i: int, done: bool) -> dict[str, Any]:
    call = r.calls[i]
    return {"id": f"fc_emu{r.n}_{i}", "type": "function_call",
            "status": "completed" if done else "in_progress",
            "arguments": call.arguments if done else "", "call_id": f"call_{r.n}_{i}",
            "name": call.name}  # fmt: skip


def _resp_output(r: Reply) -> list[dict[str, Any]]:
    output = [_resp_reasoning(r, True)] if r.thought else []
    if r.text or not r.calls:
        output.append(_resp_message(r, True))
    return [*output, *(_resp_call(r, i, True) for i in range(len(r.calls)))]


def _resp_events(r: Reply, created: int) -> list[bytes]:
    def pad(delta: str) -> dict[str, str]:
        """The padding that evens out the deltas' sizes (unless the request turned it off)."""
        return {"obfuscation": "x" * max(1, 16 - len(delta))} if r.obfuscation else {}

    out: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": _resp_object(r, created, [], False)}),
        ("response.in_progress", {"response": _resp_object(r, created, [], False)}),
    ]
    at = 0
    if r.thought:
        item_id = f"rs_emu{r.n}"
        where = {"item_id": item_id, "output_index": at, "summary_index": 0}
        out += [
            ("response.output_item.added", {"output_index": at, "item": _resp_reasoning(r, False)}),
            ("response.reasoning_summary_part.added",
             {**where, "part": {"type": "summary_text", "text": ""}}),
            *(("response.reasoning_summary_text.delta", {**where, "delta": t, **pad(t)})
              for t in r.thoughts),
            ("response.reasoning_summary_text.done", {**where, "text": r.thought}),
            ("response.reasoning_summary_part.done",
             {**where, "part": {"type": "summary_text", "text": r.thought}}),
            ("response.output_item.done", {"output_index": at, "item": _resp_reasoning(r, True)}),
        ]  # fmt: skip
        at += 1
    if r.text or not r.calls:
        where = {"item_id": f"msg_emu{r.n}", "output_index": at, "content_index": 0}
        out += [
            ("response.output_item.added", {"output_index": at, "item": _resp_message(r, False)}),
            ("response.content_part.added", {**where, "part": _text_part("")}),
            *(("response.output_text.delta", {**where, "delta": p, "logprobs": [], **pad(p)})
              for p in r.pieces),
            ("response.output_text.done", {**where, "text": r.text, "logprobs": []}),
            ("response.content_part.done", {**where, "part": _text_part(r.text)}),
            ("response.output_item.done", {"output_index": at, "item": _resp_message(r, True)}),
        ]  # fmt: skip
        at += 1
    for i, call in enumerate(r.calls):
        where = {"item_id": f"fc_emu{r.n}_{i}", "output_index": at + i}
        added = {"output_index": at + i, "item": _resp_call(r, i, False)}
        out += [
            ("response.output_item.added", added),
            *(("response.function_call_arguments.delta", {**where, "delta": part, **pad(part)})
              for part in _halves(call.arguments)),
            ("response.function_call_arguments.done", {**where, "arguments": call.arguments}),
            ("response.output_item.done", {"output_index": at + i, "item": _resp_call(r, i, True)}),
        ]  # fmt: skip
    completed = _resp_object(r, created, _resp_output(r), True)
    out.append(("response.completed", {"response": completed}))
    return [_event(kind, {**data, "sequence_number": i}) for i, (kind, data) in enumerate(out)]


def _resp_doc(r: Reply, created: int) -> dict[str, Any]:
    return _resp_object(r, created, _resp_output(r), True)


# -- Anthropic --------------------------------------------------------------------------------


def _anth_usage(r: Reply, out: int) -> dict[str, Any]:
    return {"input_tokens": r.prompt, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "output_tokens": out,
            "service_tier": "standard"}  # fmt: skip


def _signature(r: Reply) -> str:
    return base64.b64encode(f"emulated thought {r.n}".encode()).decode()


def _anth_events(r: Reply) -> list[bytes]:
    message: dict[str, Any] = {
        "id": f"msg_emu{r.n}", "type": "message", "role": "assistant", "model": r.model,
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": _anth_usage(r, 1),
    }  # fmt: skip
    out = [_event("message_start", {"message": message}), _event("ping", {})]
    at = 0

    def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        nonlocal at
        out.append(_event("content_block_start", {"index": at, "content_block": start}))
        out.extend(_event("content_block_delta", {"index": at, "delta": d}) for d in deltas)
        out.append(_event("content_block_stop", {"index": at}))
        at += 1

    if r.thought:
        block(
            {"type": "thinking", "thinking": "", "signature": ""},
            [*({"type": "thinking_delta", "thinking": t} for t in r.thoughts),
             {"type": "signature_delta", "signature": _signature(r)}],
        )  # fmt: skip
    if r.pieces or not r.calls:
        block({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in r.pieces])
    for i, call in enumerate(r.calls):
        block(
            {"type": "tool_use", "id": f"toolu_emu{r.n}_{i}", "name": call.name, "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in _halves(call.arguments)],
        )
    end = {"stop_reason": "tool_use" if r.calls else "end_turn", "stop_sequence": None}
    out.append(_event("message_delta", {"delta": end, "usage": _anth_usage(r, r.output_tokens)}))
    out.append(_event("message_stop", {}))
    return out


def _anth_doc(r: Reply) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if r.thought:
        content.append({"type": "thinking", "thinking": r.thought, "signature": _signature(r)})
    if r.text or not r.calls:
        content.append({"type": "text", "text": r.text})
    content += [{"type": "tool_use", "id": f"toolu_emu{r.n}_{i}", "name": c.name,
                 "input": _decoded(c.arguments)} for i, c in enumerate(r.calls)]  # fmt: skip
    return {"id": f"msg_emu{r.n}", "type": "message", "role": "assistant", "model": r.model,
            "content": content, "stop_reason": "tool_use" if r.calls else "end_turn",
            "stop_sequence": None, "usage": _anth_usage(r, r.output_tokens)}  # fmt: skip
