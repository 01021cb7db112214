"""OpenAI Chat Completions wire format: request bodies and reply decoding.

Output schemas go out as ``response_format`` ``json_schema`` (``strict`` when the schema meets
OpenAI's strict rules). Stop sequences go out as ``stop``. Streams always ask for usage
(``stream_options.include_usage``). Only choice 0 is read and ``n`` is never sent. Reasoning from
OpenAI-compatible servers (``reasoning_content`` / ``reasoning``) becomes thought deltas; thoughts
are never sent back (Chat Completions has no way to accept them), except a ``ThoughtPart`` with no
provider (visible text the runtime recorded as a thought), which is sent as text. Settings:
``max_tokens`` (as ``max_completion_tokens``, or ``max_tokens`` for compatible servers),
``temperature``, ``top_p``, ``seed``, ``reasoning_effort``; ``thinking_budget`` has no Chat
Completions field and is not sent. ``extra`` is merged into the body (it cannot set ``n``).
"""

from __future__ import annotations

from typing import Any

from agentloop._errors import ModelConnectionError, ModelStreamError

from ._bounds import STRUCTURE_CHARS, Meter
from ._encode import FragmentCache, assemble, dumps, is_strict_schema, join_items, loads
from ._errors_map import stream_error
from ._media import chat_block
from ._sse import SSEEvent
from ._types import (
    FilePart,
    FinishDelta,
    FinishReason,
    ImagePart,
    Message,
    ModelDelta,
    ModelRequest,
    ModelSettings,
    TextPart,
    TextPiece,
    ThoughtPart,
    ThoughtPiece,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
    ToolResultPart,
    ToolSpec,
    Usage,
    UsageDelta,
)

__all__ = [
    "ChatDecoder",
    "build_chat_body",
    "chat_usage",
    "encode_chat_message",
    "openai_tool_choice",
]

# Body keys the driver owns: ``extra`` may not replace them.
_OWNED = frozenset({"model", "stream", "n"})

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def _result_items(results: list[ToolResultPart]) -> list[dict[str, Any]]:
    """Tool messages, then one user message with the images they returned: a Chat Completions
    tool message takes text only."""
    items: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": p.id, "content": p.content} for p in results
    ]
    images = [(p, image) for p in results for image in p.images]
    if images:
        content: list[dict[str, Any]] = []
        for p, image in images:
            content.append({"type": "text", "text": f"Image returned by {p.name} ({p.id}):"})
            content.append(chat_block(image))
        items.append({"role": "user", "content": content})
    return items


def _user_content(message: Message) -> str | list[dict[str, Any]]:
    """Text, or content parts when the message holds images or files."""
    if not any(isinstance(p, ImagePart | FilePart) for p in message.parts):
        return "".join(p.text for p in message.parts if isinstance(p, TextPart))
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart | FilePart):
            content.append(chat_block(part))
    return content


def encode_chat_message(message: Message) -> bytes:
    """One message as zero or more comma-separated Chat Completions messages."""
    role = message.role
    results = [p for p in message.parts if isinstance(p, ToolResultPart)]
    if role == "tool":
        return b",".join(dumps(item) for item in _result_items(results))
    if role != "assistant":
        items = _result_items(results)
        content = _user_content(message)
        if content or not results:
            items.append({"role": role, "content": content})
        return b",".join(dumps(item) for item in items)
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) or (isinstance(part, ThoughtPart) and part.provider is None):
            texts.append(part.text)
        elif isinstance(part, ToolCallPart):
            calls.append(
                {
                    "id": part.id,
                    "type": "function",
                    "function": {"name": part.wire_name, "arguments": part.arguments or "{}"},
                }
            )
    item: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        item["tool_calls"] = calls
    elif item["content"] is None:
        return b""  # nothing this API can take back (thoughts of another provider)
    return dumps(item)


def encode_chat_tool(tool: ToolSpec) -> bytes:
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters}
    if tool.description:
        function["description"] = tool.description
    if is_strict_schema(tool.parameters):
        function["strict"] = True
    return dumps({"type": "function", "function": function})


def build_chat_body(
    request: ModelRequest,
    settings: ModelSettings,
    *,
    model: str,
    stream: bool,
    max_tokens_key: str,
    messages: FragmentCache[Message],
    tools: FragmentCache[ToolSpec],
) -> bytes:
    head: dict[str, Any] = {k: v for k, v in settings.extra.items() if k not in _OWNED}
    head["model"] = model
    head["stream"] = stream
    if stream:
        options = head.get("stream_options")
        head["stream_options"] = {
            **(options if isinstance(options, dict) else {}),
            "include_usage": True,
        }
    if settings.max_tokens is not None:
        head.setdefault(max_tokens_key, settings.max_tokens)
    for key in ("temperature", "top_p", "seed", "reasoning_effort"):
        value = getattr(settings, key)
        if value is not None:
            head.setdefault(key, value)
    if request.stop:
        head.setdefault("stop", list(request.stop))
    if request.output_schema is not None:
        schema = request.output_schema
        json_schema: dict[str, Any] = {"name": schema.name, "schema": schema.json_schema}
        if is_strict_schema(schema.json_schema):
            json_schema["strict"] = True
        head.setdefault("response_format", {"type": "json_schema", "json_schema": json_schema})
    if settings.prompt_cache_key is not None:
        head.setdefault("prompt_cache_key", settings.prompt_cache_key)
    raw = [("messages", join_items(messages.get(m, encode_chat_message) for m in request.messages))]
    if request.tool_mode == "native" and request.tools:
        raw.append(("tools", join_items(tools.get(t, encode_chat_tool) for t in request.tools)))
        if settings.tool_choice is not None:
            head.setdefault("tool_choice", openai_tool_choice(settings.tool_choice, nested=True))
        if settings.parallel_tool_calls is not None:
            head.setdefault("parallel_tool_calls", settings.parallel_tool_calls)
    return assemble(head, raw)


def openai_tool_choice(choice: str, *, nested: bool) -> str | dict[str, Any]:
    """``tool_choice`` for OpenAI: the mode, or the tool to call (Chat nests its name under
    ``function``; Responses does not)."""
    if choice in ("auto", "required", "none"):
        return choice
    if nested:
        return {"type": "function", "function": {"name": choice}}
    return {"type": "function", "name": choice}


def chat_usage(usage: dict[str, Any]) -> Usage:
    prompt = usage.get("prompt_tokens_details") or {}
    completion = usage.get("completion_tokens_details") or {}
    return Usage(
        requests=1,
        input_tokens=usage.get("prompt_tokens") or 0,
        output_tokens=usage.get("completion_tokens") or 0,
        cache_read_tokens=prompt.get("cached_tokens") or 0,
        reasoning_tokens=completion.get("reasoning_tokens") or 0,
    )


class _Call:
    __slots__ = ("id", "sealed")

    def __init__(self, id: str) -> None:
        self.id = id
        self.sealed = False


# Never written: a decoder makes its own with its first call, or its first refusal piece.
_NO_CALLS: dict[int, Any] = {}
_NO_REFUSAL: list[str] = []


class ChatDecoder:
    """Chat Completions chunks to deltas. A tool call is sealed when the next index starts or
    the choice finishes; a stream that ends without ``[DONE]`` and without a finish reason was
    cut and raises ``ModelConnectionError``."""

    __slots__ = ("_calls", "_done", "_finish", "_open", "_refusal", "meter")

    def __init__(self) -> None:
        self.meter = Meter()
        self._calls: dict[int, _Call] = _NO_CALLS  # its own from the first call
        self._open: _Call | None = None
        self._refusal: list[str] = _NO_REFUSAL  # its own from the first piece
        self._finish: str | None = None
        self._done = False

    def event(self, event: SSEEvent, out: list[ModelDelta]) -> None:
        data = event.data
        if data[:6] == "[DONE]":
            self._done = True
            return
        chunk = loads(data)
        if type(chunk) is not dict:
            raise TypeError(f"a chunk is a JSON object, not {type(chunk).__name__}")
        # ``in`` before a lookup: most chunks hold only ``choices`` (no call per absent key).
        error = chunk["error"] if "error" in chunk else None
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            kind = (error.get("type") or error.get("code")) if isinstance(error, dict) else None
            raise stream_error(message, error_type=kind, body=chunk)
        choices = chunk.get("choices")
        if choices:
            for choice in choices:
                if choice.get("index", 0) == 0:
                    self._choice(choice, out)
                    break
        if "usage" in chunk:
            usage = chunk["usage"]
            if usage:
                out.append(UsageDelta(chat_usage(usage)))

    def _choice(self, choice: dict[str, Any], out: list[ModelDelta]) -> None:
        delta = choice.get("delta")
        if delta:
            content = delta.get("content")
            if content:
                out.append(TextPiece(content))
                self.meter.used += len(content)
            if "reasoning_content" in delta or "reasoning" in delta:
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if reasoning and isinstance(reasoning, str):
                    out.append(ThoughtPiece(reasoning))
                    self.meter.used += len(reasoning)
            if "refusal" in delta:
                refusal = delta["refusal"]
                if refusal:
                    if self._refusal is _NO_REFUSAL:
                        self._refusal = []
                    self._refusal.append(refusal)
                    self.meter.used += len(refusal)
            if "tool_calls" in delta:
                tool_calls = delta["tool_calls"]
                if tool_calls:
                    for fragment in tool_calls:
                        self._fragment(fragment, out)
        if "finish_reason" in choice:
            finish = choice["finish_reason"]
            if finish:
                self._seal(out)
                self._finish = finish
                out.append(self._finish_delta(finish))

    def _fragment(self, fragment: dict[str, Any], out: list[ModelDelta]) -> None:
        index = fragment.get("index", len(self._calls))
        call = self._calls.get(index)
        new_id = fragment.get("id")
        if call is None or (new_id and new_id != call.id):
            self._seal(out)
            function = fragment.get("function") or {}
            call = _Call(new_id or f"call_{index}")
            if self._calls is _NO_CALLS:
                self._calls = {}
            self._calls[index] = call
            self._open = call
            name = function.get("name") or ""
            out.append(ToolCallStart(id=call.id, name=name))
            self.meter.used += STRUCTURE_CHARS + len(call.id) + len(name)
        elif call is not self._open:
            # The call was sealed when the next index began (so the runtime could start it):
            # a server that interleaves parallel calls cannot be streamed eagerly.
            raise ModelStreamError(
                f"arguments for tool call {call.id!r} arrived after the next call had started"
            )
        arguments = (fragment.get("function") or {}).get("arguments")
        if arguments:
            out.append(ToolCallArgsDelta(id=call.id, text=arguments))
            self.meter.used += len(arguments)

    def _seal(self, out: list[ModelDelta]) -> None:
        call = self._open
        if call is not None and not call.sealed:
            call.sealed = True
            out.append(ToolCallEnd(id=call.id))
        self._open = None

    def _finish_delta(self, raw: str) -> FinishDelta:
        refusal = "".join(self._refusal) or None
        if refusal is not None:
            return FinishDelta(reason="refusal", raw=raw, refusal=refusal)
        reason = _FINISH.get(raw, "stop")
        if reason == "stop" and self._calls:
            reason = "tool_calls"  # a forced tool choice ends with "stop"
        return FinishDelta(reason=reason, raw=raw)

    def end(self, out: list[ModelDelta]) -> None:
        if self._finish is None:
            if not self._done:
                raise ModelConnectionError(
                    "the Chat Completions stream ended before [DONE] and before a finish reason"
                )
            self._seal(out)
            out.append(self._finish_delta("stop"))

    def document(self, value: Any, out: list[ModelDelta]) -> None:
        """A whole ``chat.completion`` object."""
        meter = self.meter
        choices = value.get("choices") or []
        choice = next((c for c in choices if c.get("index", 0) == 0), None)
        if choice is not None:
            message = choice.get("message") or {}
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if reasoning and isinstance(reasoning, str):
                out.append(ThoughtPiece(reasoning))
                meter.used += len(reasoning)
            if message.get("content"):
                out.append(TextPiece(message["content"]))
                meter.used += len(message["content"])
            if message.get("refusal"):
                if self._refusal is _NO_REFUSAL:
                    self._refusal = []
                self._refusal.append(message["refusal"])
                meter.used += len(message["refusal"])
            for index, call in enumerate(message.get("tool_calls") or []):
                function = call.get("function") or {}
                call_id = call.get("id") or f"call_{index}"
                if self._calls is _NO_CALLS:
                    self._calls = {}
                self._calls[index] = _Call(call_id)
                name, arguments = function.get("name") or "", function.get("arguments") or "{}"
                out.append(ToolCallStart(id=call_id, name=name))
                out.append(ToolCallEnd(id=call_id, arguments=arguments))
                meter.used += STRUCTURE_CHARS + len(call_id) + len(name) + len(arguments)
        usage = value.get("usage")
        if usage:
            out.append(UsageDelta(chat_usage(usage)))
        finish = (choice or {}).get("finish_reason") or "stop"
        self._finish = finish
        out.append(self._finish_delta(finish))
