"""The emulated provider: a handler for the loopback server that answers like a model, over the
three APIs (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages), streamed or not.

Without a script, a request whose conversation ends with a user message is answered with two
parallel tool calls (to the first two tools it offers, with arguments made up from their
schemas); one that ends with tool results is answered with a short text streamed in several SSE
events; one that offers no tools, with a text that says so. A two-turn session with two
parallel tool calls can so be run against it at any scale. With ``tool_rounds=N`` the answer
comes only after N rounds of tool calls. With a script, the turns are played per conversation
(see ``EmulatedTurn``). ``agentloop emulate`` serves it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..models import wire_tool_name
from ._arguments import arguments_for
from ._checks import request_problem
from ._json import is_dict, is_list
from ._script import RecordedRequest, ScriptedResponse
from ._turns import EmulatedCall, EmulatedTurn, load_turns
from ._wire import Call, Reply, bad_request, render

__all__ = ["EmulatedProvider"]

_ANSWER = "Both lookups are done: the first says sunny, the second says 21 degrees. All set."
_SCRIPT_ENDED = "The emulated provider's script has no more turns."
_NO_TOOLS = (
    "No tools were offered, so none ran: this is agentloop's emulated provider. Give the agent "
    "tools (agentloop run --tools FILE) and it first calls two of them in parallel, with "
    "arguments made up from their schemas, then answers."
)


def _split(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


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
    without tools gets ``answer`` at once (by default, a text that says no tool was offered,
    rather than the default answer's report of lookups that did not happen). With ``script``
    (``EmulatedTurn`` objects or strings), each conversation plays the turns in order: see
    ``EmulatedTurn``.

    Args:
        text_chunks: The events the answer's text is split into.
        chunk_delay: Seconds between events.
        answer: The answer's text (default: one reporting two lookups; to a request without
            tools, one saying no tool was offered).
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
        answer: str | None = None,
        script: Sequence[EmulatedTurn | str] | None = None,
        tool_rounds: int = 1,
        prompt_tokens: int | None = 50,
        check_requests: bool = True,
    ) -> None:
        self._prompt_tokens = prompt_tokens
        self._check = check_requests
        self._chunks = text_chunks
        self._pieces = _split(answer or _ANSWER, text_chunks)
        self._answer = answer or _ANSWER
        self._no_tools = answer or _NO_TOOLS
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
            return bad_request(api, problem)
        n = next(self._ids)
        offered = _offered(api, body)
        thought = ""
        if self._script is not None:
            thought, text, calls = self._scripted(api, body, offered)
            pieces = _split(text, self._chunks)
        elif not body.get("tools") and not _holds_results(api, body):
            text, calls = self._no_tools, []
            pieces = _split(text, self._chunks)
        elif _tool_results_done(api, body, self._rounds):
            text, calls, pieces = self._answer, [], self._pieces
        else:
            names = list(offered) or ["lookup"]
            chosen = (names[0], names[1 % len(names)])
            text, pieces = "", []
            calls = [
                Call(name, json.dumps(arguments_for(offered.get(name), i)))
                for i, name in enumerate(chosen)
            ]
        prompt = self._prompt_tokens
        if prompt is None:  # as a tokenizer would roughly count them: a character in four
            prompt = max(1, len(request.body) // 4)
        options = body.get("stream_options")
        include = body.get("include")
        reply = Reply(
            n=n,
            model=str(body.get("model") or "emulated"),
            thought=thought,
            thoughts=_split(thought, self._chunks) if thought else [],
            text=text,
            pieces=pieces,
            calls=calls,
            prompt=prompt,
            delay=self._delay,
            include_usage=is_dict(options) and options.get("include_usage") is True,
            encrypted_reasoning=is_list(include) and "reasoning.encrypted_content" in include,
            obfuscation=not (is_dict(options) and options.get("include_obfuscation") is False),
        )
        return render(api, reply, stream=bool(body.get("stream")))

    def _scripted(
        self, api: str, body: dict[str, Any], offered: dict[str, Any]
    ) -> tuple[str, str, list[Call]]:
        """The thought, the text and the wire calls of this conversation's next turn."""
        if self._script is None:  # pragma: no cover - only called with a script
            return "", "", []
        index = _next_turn(_replies(api, body), self._script)
        if index >= len(self._script):
            return "", _SCRIPT_ENDED, []
        turn = self._script[index]
        if turn.calls and not body.get("tools"):  # ReAct mode: the calls are text
            return turn.thought, _with_react_actions(turn.text, turn.calls), []
        calls = []
        for i, call in enumerate(turn.calls):
            name = wire_tool_name(call.name, call.path)
            arguments = call.arguments
            if arguments is None:
                arguments = arguments_for(offered.get(name), i)
            text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
            calls.append(Call(name, text))
        return turn.thought, turn.text, calls


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


def _replies(api: str, body: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """The model's replies the request's conversation holds: each one's text and the wire names
    of its calls."""
    replies: list[tuple[str, tuple[str, ...]]] = []
    if api == "responses":
        items = body.get("input")
        inside = False
        for item in items if is_list(items) else ():  # a reply: a run of model output items
            mine = is_dict(item) and (
                item.get("role") == "assistant"
                or item.get("type") in ("function_call", "reasoning")
            )
            if mine and not inside:
                replies.append(("", ()))
            inside = mine
            if mine:
                text, names = replies[-1]
                if item.get("type") == "function_call":
                    names = (*names, str(item.get("name")))
                else:
                    text += _text_of(item.get("content"))
                replies[-1] = (text, names)
        return replies
    messages = body.get("messages")
    for m in messages if is_list(messages) else ():
        if not is_dict(m) or m.get("role") != "assistant":
            continue
        content = m.get("content")
        called: list[str] = []
        if api == "chat":
            calls = m.get("tool_calls")
            for c in calls if is_list(calls) else ():
                fn = c.get("function") if is_dict(c) else None
                called.append(str(fn.get("name")) if is_dict(fn) else "")
        elif is_list(content):
            called = [
                str(b.get("name")) for b in content if is_dict(b) and b.get("type") == "tool_use"
            ]
        replies.append((_text_of(content), tuple(called)))
    return replies


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text of its text parts."""
    if isinstance(content, str):
        return content
    parts = content if is_list(content) else ()
    return "".join(str(p.get("text")) for p in parts if is_dict(p) and p.get("type") in _TEXT_PARTS)


_TEXT_PARTS = ("text", "output_text", "input_text")


def _next_turn(replies: list[tuple[str, tuple[str, ...]]], script: Sequence[EmulatedTurn]) -> int:
    """Where the script stands after these replies: each reply is the next turn it matches
    (its text and calls), else the turn after the last one. A session remembers only its runs'
    inputs and answers, not the tool calls between them, so counting replies would replay
    turns; a conversation given as memory, which matches no turn, counts its replies."""
    at = 0
    for text, names in replies:
        found = next((i for i in range(at, len(script)) if _matches(text, names, script[i])), None)
        at = at + 1 if found is None else found + 1
    return at


def _matches(text: str, names: tuple[str, ...], turn: EmulatedTurn) -> bool:
    wire = tuple(wire_tool_name(c.name, c.path) for c in turn.calls)
    if names == wire and text.strip() == turn.text.strip():
        return True
    return (
        bool(turn.calls)
        and not names
        and text.strip() == _with_react_actions(turn.text, turn.calls).strip()
    )


def _holds_results(api: str, body: dict[str, Any]) -> bool:
    """Whether the conversation holds any tool result."""
    if api == "responses":
        items = body.get("input")
        return is_list(items) and any(
            is_dict(i) and i.get("type") == "function_call_output" for i in items
        )
    messages = body.get("messages")
    for m in messages if is_list(messages) else ():
        if not is_dict(m):
            continue
        content = m.get("content")
        if m.get("role") == "tool" or (
            is_list(content) and any(is_dict(b) and b.get("type") == "tool_result" for b in content)
        ):
            return True
    return False


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
