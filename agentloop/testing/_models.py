"""Test doubles: ``ScriptedModel`` (a script of replies) and ``FunctionModel`` (a function)."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import anyio

from .. import ModelError
from ..models import (
    FinishDelta,
    FinishReason,
    Model,
    ModelDelta,
    ModelProfile,
    ModelRequest,
    ModelStream,
    TextPart,
    TextPiece,
    ThoughtDone,
    ThoughtPart,
    ThoughtPiece,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    UsageDelta,
    wire_tool_name,
)


class ScriptError(AssertionError):
    """A scripted model was called more (or fewer) times than its script says."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptedCall:
    """A native tool call in a scripted reply (rendered as a ReAct action in ReAct mode).

    Args:
        name: The tool's name.
        args: The arguments: a dict, or raw (possibly broken) JSON text.
        id: The call's id (default: ``call_<n>``).
        path: The toolkit activity, if any.
    """

    name: str
    args: Any = field(default_factory=dict)
    id: str | None = None
    path: str | None = None

    def arguments(self) -> str:
        return self.args if isinstance(self.args, str) else json.dumps(self.args)


def call(
    name: str, args: Any = None, *, id: str | None = None, path: str | None = None
) -> ScriptedCall:
    """A scripted tool call; ``args`` is a dict, or raw (possibly broken) JSON text.

    Args:
        name: The tool's name.
        args: The arguments (default: none).
        id: The call's id (default: ``call_<n>``).
        path: The toolkit activity, if any.
    """
    return ScriptedCall(name=name, args={} if args is None else args, id=id, path=path)


TimelineItem: TypeAlias = "str | ScriptedCall | Thought"


@dataclass(frozen=True, slots=True)
class Thought:
    """Reasoning text in a timeline (a provider's thinking, not a ReAct thought).

    Args:
        text: The reasoning.
    """

    text: str


_THOUGHT_END = Thought("")  # closes the reasoning part (compared by identity)


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """One scripted reply.

    ``text`` and ``calls`` stream in ``chunk_size`` pieces with ``delay`` seconds before each
    (the model's defaults when ``None``). ``timeline`` instead gives each piece the time, in
    seconds from the start of the stream, at which it arrives. ``raise_after`` is raised once the
    reply has streamed (a stream that fails midway). ``thought`` is provider reasoning.

    Args:
        text: The reply's text.
        calls: Its tool calls (``call(...)``).
        thought: Provider reasoning, streamed before the text.
        usage: The usage reported (default: characters / 4).
        finish: The finish reason (default: ``tool_calls`` with calls, else ``stop``).
        chunk_size: Characters per delta, over the model's.
        delay: Seconds before each delta, over the model's.
        timeline: ``(seconds from the start, piece)`` pairs, instead of text and calls.
        raise_after: Raised once the reply has streamed.
    """

    text: str = ""
    calls: Sequence[ScriptedCall] = ()
    thought: str = ""
    usage: Usage | None = None
    finish: FinishReason | None = None
    chunk_size: int | None = None
    delay: float | None = None
    timeline: Sequence[tuple[float, str | ScriptedCall | Thought]] = ()
    raise_after: ModelError | None = None


ScriptItem: TypeAlias = "Reply | str | ModelError"


class _ScriptedBase(Model):
    provider = "test"

    def __init__(
        self,
        *,
        name: str,
        chunk_size: int | None,
        delay: float,
        native_tools: bool,
        stop_sequences: bool,
        native_output: bool,
    ) -> None:
        self._name = name
        self._chunk_size = chunk_size
        self._delay = delay
        self._profile = ModelProfile(
            native_tools=native_tools, stop_sequences=stop_sequences, native_output=native_output
        )
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def profile(self) -> ModelProfile:
        return self._profile

    async def _next(self, request: ModelRequest) -> Reply:
        raise NotImplementedError

    def stream(self, request: ModelRequest) -> ModelStream:
        return self._open(request)

    @asynccontextmanager
    async def _open(self, request: ModelRequest) -> AsyncGenerator[AsyncIterator[ModelDelta], None]:
        self.requests.append(request)
        reply = await self._next(request)
        deltas = self._deltas(reply, request)
        try:
            yield deltas
        finally:
            await deltas.aclose()

    async def _deltas(self, reply: Reply, request: ModelRequest) -> AsyncGenerator[ModelDelta]:
        react = request.tool_mode == "react"
        if reply.timeline:
            items = _frame_timeline(reply.timeline, react)
        else:
            items = _untimed(reply, react, reply.chunk_size or self._chunk_size, reply.delay)
        start = anyio.current_time()
        delay = self._delay if reply.delay is None else reply.delay
        out_chars = 0
        calls = 0
        for at, item in items:
            if at is None:
                if delay:
                    await anyio.sleep(delay)
            else:
                await anyio.sleep(max(0.0, start + at - anyio.current_time()))
            if isinstance(item, ScriptedCall):
                calls += 1
                if item.id is None:
                    item = ScriptedCall(
                        name=item.name, args=item.args, id=f"call_{calls}", path=item.path
                    )
            for delta in _to_deltas(item):
                if isinstance(delta, TextPiece | ThoughtPiece | ToolCallArgsDelta):
                    out_chars += len(delta.text)
                yield delta
        if reply.raise_after is not None:
            raise reply.raise_after
        has_calls = bool(reply.calls) or any(
            isinstance(item, ScriptedCall) for _, item in reply.timeline
        )
        yield UsageDelta(reply.usage or _estimate(request, out_chars))
        yield FinishDelta(
            reason=reply.finish or ("tool_calls" if has_calls and not react else "stop")
        )


def _estimate(request: ModelRequest, out_chars: int) -> Usage:
    """Deterministic token counts (characters / 4) so that budgets can be tested."""
    in_chars = sum(
        len(p.text)
        for m in request.messages
        for p in m.parts
        if isinstance(p, TextPart | ThoughtPart)
    )
    return Usage(requests=1, input_tokens=in_chars // 4, output_tokens=out_chars // 4)


def _untimed(
    reply: Reply, react: bool, chunk_size: int | None, delay: float | None
) -> list[tuple[float | None, str | ScriptedCall | Thought]]:
    items: list[tuple[float | None, str | ScriptedCall | Thought]] = []
    if reply.thought:
        items.extend((None, Thought(c)) for c in _chunks(reply.thought, chunk_size))
        items.append((None, _THOUGHT_END))
    if react:
        text = _react_text(reply)
        items.extend((None, c) for c in _chunks(text, chunk_size))
        return items
    items.extend((None, c) for c in _chunks(reply.text, chunk_size))
    items.extend((None, c) for c in reply.calls)
    return items


def _react_text(reply: Reply) -> str:
    if reply.calls:
        actions = ", ".join(_react_action(c, i) for i, c in enumerate(reply.calls))
        thought = f"Thought: {reply.text}\n" if reply.text else ""
        return f"{thought}Actions: [{actions}]"
    return f"Answer: {reply.text}" if reply.text else ""


def _react_action(c: ScriptedCall, index: int) -> str:
    tag = c.id or f"call_{index + 1}"
    args = c.args if isinstance(c.args, str) else json.dumps(c.args)
    path = json.dumps(c.path or c.name)
    return f'{{"tag": {json.dumps(tag)}, "name": {json.dumps(c.name)}, "path": {path}, "input": {args}}}'


def _frame_timeline(
    timeline: Sequence[tuple[float, str | ScriptedCall | Thought]], react: bool
) -> list[tuple[float | None, str | ScriptedCall | Thought]]:
    if not react:
        return [(at, item) for at, item in timeline]
    # ReAct: calls become action objects of one Actions array, closed with the last call.
    calls = [i for i, (_, item) in enumerate(timeline) if isinstance(item, ScriptedCall)]
    framed: list[tuple[float | None, str | ScriptedCall | Thought]] = []
    for i, (at, item) in enumerate(timeline):
        if isinstance(item, ScriptedCall):
            prefix = "Actions: [" if i == calls[0] else ", "
            suffix = "]" if i == calls[-1] else ""
            framed.append((at, prefix + _react_action(item, calls.index(i)) + suffix))
        else:
            framed.append((at, item))
    return framed


def _chunks(text: str, size: int | None) -> list[str]:
    if not text:
        return []
    if not size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


def _to_deltas(item: str | ScriptedCall | Thought) -> list[ModelDelta]:
    if isinstance(item, str):
        return [TextPiece(item)] if item else []
    if item is _THOUGHT_END:
        return [ThoughtDone()]
    if isinstance(item, Thought):
        return [ThoughtPiece(item.text)]
    call_id = item.id or "call"
    arguments = item.arguments()
    return [
        ToolCallStart(id=call_id, name=wire_tool_name(item.name, item.path)),
        ToolCallArgsDelta(id=call_id, text=arguments),
        ToolCallEnd(id=call_id),
    ]


class ScriptedModel(_ScriptedBase):
    """Replies from a script, one per model call, streamed in chunks with optional delays.

    A script item is a ``Reply``, a string (a text reply), or a ``ModelError`` (raised for that
    call). Calling it more often than scripted raises ``ScriptError``; ``assert_consumed()``
    (or leaving ``with ScriptedModel(...) as model:``) fails when replies are left over.
    ``requests`` records every request, for assertions on prompts.

    Args:
        script: The replies, one per model call.
        name: The model's name (``usage_by_model`` counts it as ``"test:<name>"``).
        chunk_size: Characters per text delta (``None``: each text in one delta).
        delay: Seconds before each delta.
        native_tools: The profile's native tool calling (``False``: ``"auto"`` runs ReAct).
        stop_sequences: The profile's stop sequences.
        native_output: The profile's native structured output.
    """

    def __init__(
        self,
        script: Sequence[Reply | str | ModelError],
        *,
        name: str = "scripted",
        chunk_size: int | None = None,
        delay: float = 0.0,
        native_tools: bool = True,
        stop_sequences: bool = True,
        native_output: bool = False,
    ) -> None:
        super().__init__(
            name=name,
            chunk_size=chunk_size,
            delay=delay,
            native_tools=native_tools,
            stop_sequences=stop_sequences,
            native_output=native_output,
        )
        self._script = list(script)
        self._position = 0

    @property
    def remaining(self) -> int:
        return len(self._script) - self._position

    async def _next(self, request: ModelRequest) -> Reply:
        if self._position >= len(self._script):
            raise ScriptError(
                f"{self.name}: called {self._position + 1} times but only "
                f"{len(self._script)} replies are scripted"
            )
        item = self._script[self._position]
        self._position += 1
        if isinstance(item, ModelError):
            raise item
        return Reply(text=item) if isinstance(item, str) else item

    def assert_consumed(self) -> None:
        if self.remaining:
            raise ScriptError(
                f"{self.name}: {self.remaining} of {len(self._script)} scripted replies were "
                "never requested"
            )

    def __enter__(self) -> ScriptedModel:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.assert_consumed()


ReplyFunction: TypeAlias = Callable[[ModelRequest], "Reply | str | Awaitable[Reply | str]"]


class FunctionModel(_ScriptedBase):
    """Replies computed by a function of the request (sync or async).

    Args:
        function: Makes the reply (a ``Reply`` or a string) of each request.
        name: The model's name (``usage_by_model`` counts it as ``"test:<name>"``).
        chunk_size: Characters per text delta (``None``: each text in one delta).
        delay: Seconds before each delta.
        native_tools: The profile's native tool calling (``False``: ``"auto"`` runs ReAct).
        stop_sequences: The profile's stop sequences.
        native_output: The profile's native structured output.
    """

    def __init__(
        self,
        function: Callable[[ModelRequest], Reply | str | Awaitable[Reply | str]],
        *,
        name: str = "function",
        chunk_size: int | None = None,
        delay: float = 0.0,
        native_tools: bool = True,
        stop_sequences: bool = True,
        native_output: bool = False,
    ) -> None:
        super().__init__(
            name=name,
            chunk_size=chunk_size,
            delay=delay,
            native_tools=native_tools,
            stop_sequences=stop_sequences,
            native_output=native_output,
        )
        self._function = function

    async def _next(self, request: ModelRequest) -> Reply:
        value = self._function(request)
        if inspect.isawaitable(value):
            value = await value
        return Reply(text=value) if isinstance(value, str) else value


class EchoModel(FunctionModel):
    """Answers with the last user message (``"test:echo"``): a model for smoke tests.

    Args:
        name: The model's name.
    """

    def __init__(self, name: str = "echo") -> None:
        super().__init__(lambda request: _last_user_text(request), name=name)


def _last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.text
    return ""
