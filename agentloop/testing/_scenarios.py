"""A built-in scenario for the loopback server: an emulated provider for benchmarks and load
tests, speaking the three APIs (Chat Completions, Responses, Anthropic Messages).

A request whose conversation ends with a user message is answered with two parallel tool calls;
one that ends with tool results is answered with a short text streamed in several SSE events. A
two-turn session with two parallel tool calls can so be run against it at any scale. With
``tool_rounds=N`` the answer comes only after N rounds of tool calls (a long session of tool
steps). Requests that are not streamed get the same answers as whole JSON bodies.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from ._script import Chunk, RecordedRequest, ScriptedResponse

__all__ = ["EmulatedProvider"]

_ANSWER = "Both lookups are done: the first says sunny, the second says 21 degrees. All set."
_SSE = {"content-type": "text/event-stream; charset=utf-8"}


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _split(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


class EmulatedProvider:
    """A handler for ``ProviderServer``: ``ProviderServer(EmulatedProvider())``.

    Args:
        text_chunks: The events the answer's text is split into.
        chunk_delay: Seconds between events.
        answer: The answer's text.
        script: Answers to send in order, whatever the request (ReAct-mode texts).
        tool_rounds: Rounds of tool calls before the answer.
    """

    def __init__(
        self,
        *,
        text_chunks: int = 6,
        chunk_delay: float = 0.0,
        answer: str = _ANSWER,
        script: list[str] | None = None,
        tool_rounds: int = 1,
    ) -> None:
        self._chunks = text_chunks
        self._pieces = _split(answer, text_chunks)
        self._answer = answer
        self._delay = chunk_delay
        self._ids = itertools.count(1)
        self._script = list(script) if script is not None else None
        self._rounds = tool_rounds

    def __call__(self, request: RecordedRequest) -> ScriptedResponse:
        """The emulated answer. With ``script`` (a list of texts), the texts are the answers in
        order, whatever the request (for ReAct-mode sessions)."""
        body = request.json or {}
        stream = bool(body.get("stream"))
        n = next(self._ids)
        path = request.path
        if self._script is not None:
            text = self._script.pop(0) if self._script else "Answer: (script exhausted)"
            return self._text_reply(path, n, text, stream)
        if path.endswith("/chat/completions"):
            answer = _chat_tool_results_done(body, self._rounds)
            events = _chat_text(n, self._pieces) if answer else _chat_calls(n, _tool_names(body))
            doc = _chat_doc(n, self._answer if answer else None, _tool_names(body))
            done = [b"data: [DONE]\n\n"]
        elif path.endswith("/responses"):
            answer = _responses_tool_results_done(body, self._rounds)
            events = _resp_text(n, self._pieces) if answer else _resp_calls(n, _tool_names(body))
            doc = _resp_doc(n, self._answer if answer else None, _tool_names(body))
            done = []
        elif path.endswith("/messages"):
            answer = _anthropic_tool_results_done(body, self._rounds)
            events = _anth_text(n, self._pieces) if answer else _anth_calls(n, _tool_names(body))
            doc = _anth_doc(n, self._answer if answer else None, _tool_names(body))
            done = []
        else:
            return ScriptedResponse.json(
                {"error": {"message": f"unknown endpoint {path}", "type": "not_found"}}, status=404
            )
        if not stream:
            return ScriptedResponse.json(doc)
        if not self._delay:
            return ScriptedResponse.sse([b"".join([*events, *done])])
        chunks = [Chunk(e, self._delay if i else 0.0) for i, e in enumerate(events)]
        return ScriptedResponse.sse([*chunks, *(Chunk(d) for d in done)])

    def _text_reply(self, path: str, n: int, text: str, stream: bool) -> ScriptedResponse:
        pieces = _split(text, self._chunks)
        if path.endswith("/chat/completions"):
            events, doc, done = (
                _chat_text(n, pieces),
                _chat_doc(n, text, ("", "")),
                [b"data: [DONE]\n\n"],
            )
        elif path.endswith("/responses"):
            events, doc, done = _resp_text(n, pieces), _resp_doc(n, text, ("", "")), []
        else:
            events, doc, done = _anth_text(n, pieces), _anth_doc(n, text, ("", "")), []
        if not stream:
            return ScriptedResponse.json(doc)
        return ScriptedResponse.sse([b"".join([*events, *done])])


def _tool_names(body: dict[str, Any]) -> tuple[str, str]:
    names: list[str] = []
    for tool in body.get("tools") or []:
        fn = tool.get("function", tool)
        if isinstance(fn, dict) and fn.get("name"):
            names.append(fn["name"])
    if not names:
        names = ["lookup"]
    return names[0], names[1 % len(names)]


def _chat_tool_results_done(body: dict[str, Any], rounds: int = 1) -> bool:
    messages = body.get("messages") or [{}]
    results = messages[-1].get("role") == "tool"
    if rounds > 1:
        done = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        results = results and done >= rounds
    return bool(results) or not body.get("tools")


def _responses_tool_results_done(body: dict[str, Any], rounds: int = 1) -> bool:
    items = body.get("input") or [{}]
    last = items[-1] if isinstance(items, list) else {}
    results = last.get("type") == "function_call_output"
    if rounds > 1:  # a round is a run of function_call items (then their outputs)
        done = sum(
            1
            for i, item in enumerate(items)
            if item.get("type") == "function_call"
            and (i == 0 or items[i - 1].get("type") != "function_call")
        )
        results = results and done >= rounds
    return results or not body.get("tools")


def _anthropic_tool_results_done(body: dict[str, Any], rounds: int = 1) -> bool:
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content")
    has_results = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )
    if rounds > 1:
        done = sum(
            1
            for m in messages
            if m.get("role") == "assistant"
            and isinstance(m.get("content"), list)
            and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in m["content"])
        )
        has_results = has_results and done >= rounds
    return has_results or not body.get("tools")


_ARGS = ('{"query": "first"}', '{"query": "second"}')

# -- Chat Completions --------------------------------------------------------------------------


def _chat_chunk(n: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": f"chatcmpl-emu{n}",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "emulated",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + _dumps(chunk) + b"\n\n"


def _chat_usage(n: int, out: int) -> bytes:
    usage = {"prompt_tokens": 50, "completion_tokens": out, "total_tokens": 50 + out}
    chunk = {"id": f"chatcmpl-emu{n}", "object": "chat.completion.chunk", "created": 1,
             "model": "emulated", "choices": [], "usage": usage}  # fmt: skip
    return b"data: " + _dumps(chunk) + b"\n\n"


def _chat_text(n: int, pieces: list[str]) -> list[bytes]:
    out = [_chat_chunk(n, {"role": "assistant", "content": ""})]
    out += [_chat_chunk(n, {"content": p}) for p in pieces]
    return [*out, _chat_chunk(n, {}, "stop"), _chat_usage(n, 20)]


def _chat_calls(n: int, names: tuple[str, str]) -> list[bytes]:
    out = [_chat_chunk(n, {"role": "assistant", "content": None})]
    for i, (name, args) in enumerate(zip(names, _ARGS, strict=True)):
        head = {"index": i, "id": f"call_{n}_{i}", "type": "function",
                "function": {"name": name, "arguments": ""}}  # fmt: skip
        out.append(_chat_chunk(n, {"tool_calls": [head]}))
        for part in (args[:9], args[9:]):
            out.append(
                _chat_chunk(n, {"tool_calls": [{"index": i, "function": {"arguments": part}}]})
            )
    return [*out, _chat_chunk(n, {}, "tool_calls"), _chat_usage(n, 30)]


def _chat_doc(n: int, answer: str | None, names: tuple[str, str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer}
    if answer is None:
        message["tool_calls"] = [
            {"id": f"call_{n}_{i}", "type": "function", "function": {"name": nm, "arguments": a}}
            for i, (nm, a) in enumerate(zip(names, _ARGS, strict=True))
        ]
    finish = "stop" if answer is not None else "tool_calls"
    return {
        "id": f"chatcmpl-emu{n}", "object": "chat.completion", "created": 1, "model": "emulated",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70},
    }  # fmt: skip


# -- Responses ------------------------------------------------------------------------------


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _dumps({"type": kind, **data}) + b"\n\n"


def _resp_usage(out: int) -> dict[str, Any]:
    return {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 50 + out}  # fmt: skip


def _resp_text(n: int, pieces: list[str]) -> list[bytes]:
    item = f"msg_emu{n}"
    out = [
        _event("response.created", {"response": {"id": f"resp_emu{n}", "status": "in_progress"}}),
        _event("response.output_item.added", {"output_index": 0, "item": {
            "id": item, "type": "message", "status": "in_progress", "content": [],
            "role": "assistant"}}),
    ]  # fmt: skip
    out += [
        _event("response.output_text.delta",
               {"item_id": item, "output_index": 0, "content_index": 0, "delta": p})
        for p in pieces
    ]  # fmt: skip
    text = "".join(pieces)
    done_item = {"id": item, "type": "message", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "annotations": [], "text": text}]}  # fmt: skip
    out.append(_event("response.output_item.done", {"output_index": 0, "item": done_item}))
    out.append(_event("response.completed", {"response": {
        "id": f"resp_emu{n}", "status": "completed", "usage": _resp_usage(20)}}))  # fmt: skip
    return out


def _resp_calls(n: int, names: tuple[str, str]) -> list[bytes]:
    out = [
        _event("response.created", {"response": {"id": f"resp_emu{n}", "status": "in_progress"}})
    ]
    for i, (name, args) in enumerate(zip(names, _ARGS, strict=True)):
        item = {"id": f"fc_emu{n}_{i}", "type": "function_call", "status": "in_progress",
                "arguments": "", "call_id": f"call_{n}_{i}", "name": name}  # fmt: skip
        out.append(_event("response.output_item.added", {"output_index": i, "item": item}))
        for part in (args[:9], args[9:]):
            out.append(_event("response.function_call_arguments.delta",
                              {"item_id": item["id"], "output_index": i, "delta": part}))  # fmt: skip
        out.append(_event("response.function_call_arguments.done",
                          {"item_id": item["id"], "output_index": i, "arguments": args}))  # fmt: skip
        done = {**item, "status": "completed", "arguments": args}
        out.append(_event("response.output_item.done", {"output_index": i, "item": done}))
    out.append(_event("response.completed", {"response": {
        "id": f"resp_emu{n}", "status": "completed", "usage": _resp_usage(30)}}))  # fmt: skip
    return out


def _resp_doc(n: int, answer: str | None, names: tuple[str, str]) -> dict[str, Any]:
    if answer is not None:
        output: list[dict[str, Any]] = [{"id": f"msg_emu{n}", "type": "message", "role": "assistant",
                   "status": "completed",
                   "content": [{"type": "output_text", "annotations": [], "text": answer}]}]  # fmt: skip
    else:
        output = [{"id": f"fc_emu{n}_{i}", "type": "function_call", "status": "completed",
                   "arguments": a, "call_id": f"call_{n}_{i}", "name": nm}
                  for i, (nm, a) in enumerate(zip(names, _ARGS, strict=True))]  # fmt: skip
    return {"id": f"resp_emu{n}", "object": "response", "status": "completed",
            "output": output, "usage": _resp_usage(20)}  # fmt: skip


# -- Anthropic --------------------------------------------------------------------------------


def _anth_start(n: int) -> bytes:
    return _event("message_start", {"message": {
        "id": f"msg_emu{n}", "type": "message", "role": "assistant", "model": "emulated",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 1}}})  # fmt: skip


def _anth_end(stop: str, out: int) -> list[bytes]:
    return [
        _event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                 "usage": {"output_tokens": out}}),
        _event("message_stop", {}),
    ]  # fmt: skip


def _anth_text(n: int, pieces: list[str]) -> list[bytes]:
    out = [_anth_start(n), _event("content_block_start",
                                  {"index": 0, "content_block": {"type": "text", "text": ""}})]  # fmt: skip
    out += [
        _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}})
        for p in pieces
    ]
    return [*out, _event("content_block_stop", {"index": 0}), *_anth_end("end_turn", 20)]


def _anth_calls(n: int, names: tuple[str, str]) -> list[bytes]:
    out = [_anth_start(n)]
    for i, (name, args) in enumerate(zip(names, _ARGS, strict=True)):
        block = {"type": "tool_use", "id": f"toolu_emu{n}_{i}", "name": name, "input": {}}
        out.append(_event("content_block_start", {"index": i, "content_block": block}))
        for part in (args[:9], args[9:]):
            out.append(_event("content_block_delta", {"index": i, "delta": {
                "type": "input_json_delta", "partial_json": part}}))  # fmt: skip
        out.append(_event("content_block_stop", {"index": i}))
    return [*out, *_anth_end("tool_use", 30)]


def _anth_doc(n: int, answer: str | None, names: tuple[str, str]) -> dict[str, Any]:
    if answer is not None:
        content: list[dict[str, Any]] = [{"type": "text", "text": answer}]
    else:
        content = [{"type": "tool_use", "id": f"toolu_emu{n}_{i}", "name": nm,
                    "input": json.loads(a)}
                   for i, (nm, a) in enumerate(zip(names, _ARGS, strict=True))]  # fmt: skip
    return {"id": f"msg_emu{n}", "type": "message", "role": "assistant", "model": "emulated",
            "content": content, "stop_reason": "end_turn" if answer else "tool_use",
            "usage": {"input_tokens": 50, "output_tokens": 20}}  # fmt: skip
