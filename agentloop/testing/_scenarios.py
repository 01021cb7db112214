"""The emulated provider: a handler for the loopback server that answers like a model, over the
three APIs (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages), streamed or not.

Without a script, a request whose conversation ends with a user message is answered with two
parallel tool calls (to the first two tools it offers, with arguments made up from their
schemas); one that ends with tool results is answered with a short text streamed in several SSE
events. A two-turn session with two parallel tool calls can so be run against it at any scale.
With ``tool_rounds=N`` the answer comes only after N rounds of tool calls. With a script, the
turns are played per conversation (see ``EmulatedTurn``). ``agentloop emulate`` serves it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models import wire_tool_name
from ._arguments import arguments_for
from ._checks import request_problem
from ._json import is_dict, is_list
from ._script import Chunk, RecordedRequest, ScriptedResponse
from ._turns import EmulatedCall, EmulatedTurn, load_turns

__all__ = ["EmulatedProvider"]

_ANSWER = "Both lookups are done: the first says sunny, the second says 21 degrees. All set."
_SCRIPT_ENDED = "The emulated provider's script has no more turns."


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _split(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


@dataclass(frozen=True, slots=True)
class _Call:
    """A tool call as it goes on the wire: the wire name and the arguments' JSON text."""

    name: str
    arguments: str


class EmulatedProvider:
    """A handler for ``ProviderServer`` that answers like a model: ``ProviderServer(EmulatedProvider())``,
    or ``agentloop emulate`` on the command line.

    It speaks OpenAI Chat Completions (``POST /v1/chat/completions``), OpenAI Responses
    (``POST /v1/responses``) and Anthropic Messages (``POST /v1/messages``), streamed (SSE,
    ``text_chunks`` text events ``chunk_delay`` seconds apart) or as whole JSON bodies.

    Without ``script`` it answers a conversation that ends with a user message with two
    parallel tool calls to the first two tools offered (arguments made up from their JSON
    schemas: every required property, with a value of its type, enum and format), and one that
    ends with tool results with ``answer`` (after ``tool_rounds`` rounds of calls). A request
    without tools gets ``answer`` at once. With ``script`` (``EmulatedTurn`` objects or
    strings), each conversation plays the turns in order: see ``EmulatedTurn``.

    Args:
        text_chunks: The events the answer's text is split into.
        chunk_delay: Seconds between events.
        answer: The answer's text.
        script: The turns each conversation plays, in order (``EmulatedTurn`` objects or
            strings).
        tool_rounds: Rounds of tool calls before the answer.
        prompt_tokens: The prompt tokens each reply's usage reports; ``None`` estimates them
            from the request's size (a token per four bytes), as a long run's context
            window needs.
        check_requests: Refuse with a 400, as the API would, a request it documents it
            refuses (a tool result without its call, a content part of the wrong shape).
    """

    def __init__(
        self,
        *,
        text_chunks: int = 6,
        chunk_delay: float = 0.0,
        answer: str = _ANSWER,
        script: Sequence[EmulatedTurn | str] | None = None,
        tool_rounds: int = 1,
        prompt_tokens: int | None = 50,
        check_requests: bool = True,
    ) -> None:
        self._prompt_tokens = prompt_tokens
        self._check = check_requests
        self._chunks = text_chunks
        self._pieces = _split(answer, text_chunks)
        self._answer = answer
        self._delay = chunk_delay
        self._ids = itertools.count(1)
        self._script = (
            [EmulatedTurn(text=t) if isinstance(t, str) else t for t in script]
            if script is not None
            else None
        )
        self._rounds = tool_rounds

    @classmethod
    def from_script_file(cls, path: str | Path, **options: Any) -> EmulatedProvider:
        """An emulated provider playing a JSON script file (see ``EmulatedTurn``); ``options``
        as for the constructor. A file that is not a valid script raises ``UserError``.

        Args:
            path: The JSON script file.
            **options: The constructor's other options.
        """
        return cls(script=load_turns(path), **options)

    def __call__(self, request: RecordedRequest) -> ScriptedResponse:
        """The emulated answer to one request."""
        body = request.json or {}
        if not is_dict(body):
            body = {}
        api = _api(request.path)
        if api is None:
            return ScriptedResponse.json(
                {"error": {"message": f"unknown endpoint {request.path}", "type": "not_found"}},
                status=404,
            )
        problem = request_problem(api, body) if self._check else None
        if problem is not None:
            return _bad_request(api, problem)
        n = next(self._ids)
        offered = _offered(api, body)
        if self._script is not None:
            text, calls = self._scripted(api, body, offered)
            pieces = _split(text, self._chunks)
        elif _tool_results_done(api, body, self._rounds):
            text, calls, pieces = self._answer, [], self._pieces
        else:
            names = list(offered) or ["lookup"]
            chosen = (names[0], names[1 % len(names)])
            text, pieces = "", []
            calls = [
                _Call(name, json.dumps(arguments_for(offered.get(name), i)))
                for i, name in enumerate(chosen)
            ]
        prompt = self._prompt_tokens
        if prompt is None:  # as a tokenizer would roughly count them: a character in four
            prompt = max(1, len(request.body) // 4)
        return self._respond(
            api, n, text, pieces, calls, stream=bool(body.get("stream")), prompt=prompt
        )

    def _scripted(
        self, api: str, body: dict[str, Any], offered: dict[str, Any]
    ) -> tuple[str, list[_Call]]:
        """The text and the wire calls of this conversation's next turn."""
        if self._script is None:  # pragma: no cover - only called with a script
            return "", []
        index = _assistant_turns(api, body)
        if index >= len(self._script):
            return _SCRIPT_ENDED, []
        turn = self._script[index]
        if turn.calls and not body.get("tools"):  # ReAct mode: the calls are text
            return _with_react_actions(turn.text, turn.calls), []
        calls = []
        for i, call in enumerate(turn.calls):
            name = wire_tool_name(call.name, call.path)
            arguments = call.arguments
            if arguments is None:
                arguments = arguments_for(offered.get(name), i)
            text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
            calls.append(_Call(name, text))
        return turn.text, calls

    def _respond(
        self,
        api: str,
        n: int,
        text: str,
        pieces: list[str],
        calls: list[_Call],
        *,
        stream: bool,
        prompt: int,
    ) -> ScriptedResponse:
        if api == "chat":
            events = _chat_events(n, pieces, calls, prompt)
            doc = _chat_doc(n, text, calls, prompt)
            done = [b"data: [DONE]\n\n"]
        elif api == "responses":
            events = _resp_events(n, pieces, calls, prompt)
            doc, done = _resp_doc(n, text, calls, prompt), []
        else:
            events = _anth_events(n, pieces, calls, prompt)
            doc, done = _anth_doc(n, text, calls, prompt), []
        if not stream:
            return ScriptedResponse.json(doc)
        if not self._delay:
            return ScriptedResponse.sse([b"".join([*events, *done])])
        chunks = [Chunk(e, self._delay if i else 0.0) for i, e in enumerate(events)]
        return ScriptedResponse.sse([*chunks, *(Chunk(d) for d in done)])


def _bad_request(api: str, message: str) -> ScriptedResponse:
    error = {"type": "invalid_request_error", "message": message}
    if api == "anthropic":
        return ScriptedResponse.json({"type": "error", "error": error}, status=400)
    return ScriptedResponse.json({"error": {**error, "param": None, "code": None}}, status=400)


def _api(path: str) -> str | None:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    return None


def _offered(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """The tools a request offers, in order: wire name to argument schema."""
    offered: dict[str, Any] = {}
    tools = body.get("tools")
    for tool in tools if is_list(tools) else ():
        if not is_dict(tool):
            continue
        if api == "chat":
            fn = tool.get("function")
            fn = fn if is_dict(fn) else {}
            name, schema = fn.get("name"), fn.get("parameters")
        elif api == "responses":
            name, schema = tool.get("name"), tool.get("parameters")
        else:
            name, schema = tool.get("name"), tool.get("input_schema")
        if isinstance(name, str) and name:
            offered[name] = schema
    return offered


def _assistant_turns(api: str, body: dict[str, Any]) -> int:
    """How many replies of the model the request's conversation already holds."""
    if api == "responses":
        items = body.get("input")
        if not is_list(items):
            return 0
        turns, inside = 0, False
        for item in items:  # a turn is a run of model output items (message, calls, reasoning)
            mine = is_dict(item) and (
                item.get("role") == "assistant"
                or item.get("type") in ("function_call", "reasoning")
            )
            turns += mine and not inside
            inside = mine
        return turns
    messages = body.get("messages")
    if not is_list(messages):
        return 0
    return sum(1 for m in messages if is_dict(m) and m.get("role") == "assistant")


def _with_react_actions(text: str, calls: Sequence[EmulatedCall]) -> str:
    """The text, then the calls as a ReAct ``Actions:`` line (arguments as given, else ``{}``:
    a ReAct request carries no machine-readable schemas)."""
    actions = []
    for i, call in enumerate(calls):
        arguments = call.arguments if call.arguments is not None else {}
        raw = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
        actions.append(
            f'{{"tag": "call_{i + 1}", "name": {json.dumps(call.name)}, '
            f'"path": {json.dumps(call.path or call.name)}, "input": {raw}}}'
        )
    line = f"Actions: [{', '.join(actions)}]"
    return f"{text}\n{line}" if text else line


def _tool_results_done(api: str, body: dict[str, Any], rounds: int) -> bool:
    if api == "chat":
        return _chat_tool_results_done(body, rounds)
    if api == "responses":
        return _responses_tool_results_done(body, rounds)
    return _anthropic_tool_results_done(body, rounds)


def _chat_tool_results_done(body: dict[str, Any], rounds: int = 1) -> bool:
    messages = body.get("messages") or [{}]
    # Tool messages end it, or the user message after them with the images they returned.
    results = messages[-1].get("role") == "tool" or (
        len(messages) > 1
        and messages[-1].get("role") == "user"
        and messages[-2].get("role") == "tool"
    )
    if rounds > 1:
        done = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        results = results and done >= rounds
    return bool(results) or not body.get("tools")


def _responses_tool_results_done(body: dict[str, Any], rounds: int = 1) -> bool:
    items = body.get("input") or [{}]
    last = items[-1] if is_list(items) else {}
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
    has_results = is_list(content) and any(
        is_dict(b) and b.get("type") == "tool_result" for b in content
    )
    if rounds > 1:
        done = sum(
            1
            for m in messages
            if m.get("role") == "assistant"
            and is_list(m.get("content"))
            and any(is_dict(b) and b.get("type") == "tool_use" for b in m["content"])
        )
        has_results = has_results and done >= rounds
    return has_results or not body.get("tools")


def _halves(text: str) -> list[str]:
    """Arguments streamed in two pieces, as models do (neither half is JSON on its own)."""
    middle = max(1, len(text) // 2)
    return [part for part in (text[:middle], text[middle:]) if part]


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


def _chat_usage(n: int, out: int, prompt: int) -> bytes:
    usage = {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}
    chunk = {"id": f"chatcmpl-emu{n}", "object": "chat.completion.chunk", "created": 1,
             "model": "emulated", "choices": [], "usage": usage}  # fmt: skip
    return b"data: " + _dumps(chunk) + b"\n\n"


def _chat_events(n: int, pieces: list[str], calls: list[_Call], prompt: int) -> list[bytes]:
    content = None if calls and not pieces else ""
    out = [_chat_chunk(n, {"role": "assistant", "content": content})]
    out += [_chat_chunk(n, {"content": p}) for p in pieces]
    for i, call in enumerate(calls):
        head = {"index": i, "id": f"call_{n}_{i}", "type": "function",
                "function": {"name": call.name, "arguments": ""}}  # fmt: skip
        out.append(_chat_chunk(n, {"tool_calls": [head]}))
        for part in _halves(call.arguments):
            out.append(
                _chat_chunk(n, {"tool_calls": [{"index": i, "function": {"arguments": part}}]})
            )
    finish = "tool_calls" if calls else "stop"
    return [*out, _chat_chunk(n, {}, finish), _chat_usage(n, 30 if calls else 20, prompt)]


def _chat_doc(n: int, text: str, calls: list[_Call], prompt: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{n}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for i, c in enumerate(calls)
        ]  # fmt: skip
    finish = "tool_calls" if calls else "stop"
    return {
        "id": f"chatcmpl-emu{n}", "object": "chat.completion", "created": 1, "model": "emulated",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20},
    }  # fmt: skip


# -- Responses ------------------------------------------------------------------------------


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _dumps({"type": kind, **data}) + b"\n\n"


def _resp_usage(out: int, prompt: int) -> dict[str, Any]:
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + out}  # fmt: skip


def _resp_message(n: int, text: str, status: str) -> dict[str, Any]:
    content = (
        [{"type": "output_text", "annotations": [], "text": text}] if status == "completed" else []
    )
    return {"id": f"msg_emu{n}", "type": "message", "status": status, "role": "assistant",
            "content": content}  # fmt: skip


def _resp_call(n: int, i: int, call: _Call, arguments: str, status: str) -> dict[str, Any]:
    return {"id": f"fc_emu{n}_{i}", "type": "function_call", "status": status,
            "arguments": arguments, "call_id": f"call_{n}_{i}", "name": call.name}  # fmt: skip


def _resp_events(n: int, pieces: list[str], calls: list[_Call], prompt: int) -> list[bytes]:
    out = [
        _event("response.created", {"response": {"id": f"resp_emu{n}", "status": "in_progress"}})
    ]
    index = 0
    if pieces or not calls:
        message_id = f"msg_emu{n}"
        out.append(_event("response.output_item.added",
                          {"output_index": 0, "item": _resp_message(n, "", "in_progress")}))  # fmt: skip
        out += [
            _event("response.output_text.delta",
                   {"item_id": message_id, "output_index": 0, "content_index": 0, "delta": p})
            for p in pieces
        ]  # fmt: skip
        message = _resp_message(n, "".join(pieces), "completed")
        out.append(_event("response.output_item.done", {"output_index": 0, "item": message}))
        index = 1
    for i, call in enumerate(calls):
        at = index + i
        item = _resp_call(n, i, call, "", "in_progress")
        out.append(_event("response.output_item.added", {"output_index": at, "item": item}))
        for part in _halves(call.arguments):
            out.append(_event("response.function_call_arguments.delta",
                              {"item_id": item["id"], "output_index": at, "delta": part}))  # fmt: skip
        out.append(_event("response.function_call_arguments.done",
                          {"item_id": item["id"], "output_index": at, "arguments": call.arguments}))  # fmt: skip
        done = _resp_call(n, i, call, call.arguments, "completed")
        out.append(_event("response.output_item.done", {"output_index": at, "item": done}))
    out.append(_event("response.completed", {"response": {
        "id": f"resp_emu{n}", "status": "completed", "usage": _resp_usage(30 if calls else 20, prompt)}}))  # fmt: skip
    return out


def _resp_doc(n: int, text: str, calls: list[_Call], prompt: int) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if text or not calls:
        output.append(_resp_message(n, text, "completed"))
    output += [_resp_call(n, i, c, c.arguments, "completed") for i, c in enumerate(calls)]
    return {"id": f"resp_emu{n}", "object": "response", "status": "completed",
            "output": output, "usage": _resp_usage(20, prompt)}  # fmt: skip


# -- Anthropic --------------------------------------------------------------------------------


def _anth_start(n: int, prompt: int) -> bytes:
    return _event("message_start", {"message": {
        "id": f"msg_emu{n}", "type": "message", "role": "assistant", "model": "emulated",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 1}}})  # fmt: skip


def _anth_end(stop: str, out: int) -> list[bytes]:
    return [
        _event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                 "usage": {"output_tokens": out}}),
        _event("message_stop", {}),
    ]  # fmt: skip


def _anth_events(n: int, pieces: list[str], calls: list[_Call], prompt: int) -> list[bytes]:
    out = [_anth_start(n, prompt)]
    index = 0
    if pieces or not calls:
        out.append(_event("content_block_start",
                          {"index": 0, "content_block": {"type": "text", "text": ""}}))  # fmt: skip
        out += [
            _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}})
            for p in pieces
        ]
        out.append(_event("content_block_stop", {"index": 0}))
        index = 1
    for i, call in enumerate(calls):
        at = index + i
        block = {"type": "tool_use", "id": f"toolu_emu{n}_{i}", "name": call.name, "input": {}}
        out.append(_event("content_block_start", {"index": at, "content_block": block}))
        for part in _halves(call.arguments):
            out.append(_event("content_block_delta", {"index": at, "delta": {
                "type": "input_json_delta", "partial_json": part}}))  # fmt: skip
        out.append(_event("content_block_stop", {"index": at}))
    return [*out, *_anth_end("tool_use" if calls else "end_turn", 30 if calls else 20)]


def _anth_doc(n: int, text: str, calls: list[_Call], prompt: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text or not calls else []
    content += [{"type": "tool_use", "id": f"toolu_emu{n}_{i}", "name": c.name,
                 "input": _decoded(c.arguments)} for i, c in enumerate(calls)]  # fmt: skip
    return {"id": f"msg_emu{n}", "type": "message", "role": "assistant", "model": "emulated",
            "content": content, "stop_reason": "tool_use" if calls else "end_turn",
            "usage": {"input_tokens": prompt, "output_tokens": 20}}  # fmt: skip


def _decoded(arguments: str) -> Any:
    """A whole Anthropic body carries the input decoded; raw text that is not JSON is sent as
    a string (the driver then reports it, as it would a provider's)."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
