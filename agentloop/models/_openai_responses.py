"""OpenAI Responses wire format: request bodies and reply decoding.

The first system message goes out as ``instructions``, later ones as ``developer`` items. Output
schemas go out as ``text.format`` ``json_schema``. The Responses API has no stop parameter: in
ReAct mode the runtime's own parser cuts the reply at the stop marker (``ModelProfile`` says
``stop_sequences=False``). Reasoning items are kept as thoughts (summary text, encrypted content
as the signature, item id) and replayed to this API only; server-tool items (web search and the
like) become ``ProviderBlock`` values and are replayed as they came. A reasoning item without
encrypted content is kept as a thought with ``signature=""`` so its id is still replayed.
Settings: ``max_tokens`` (``max_output_tokens``), ``temperature``, ``top_p``,
``reasoning_effort`` (``reasoning.effort``, which also asks for the encrypted reasoning content);
``seed`` and ``thinking_budget`` have no Responses field and are not sent.
"""

from __future__ import annotations

import json
from typing import Any

from agentloop._errors import ModelConnectionError

from ._bounds import STRUCTURE_CHARS, Meter
from ._encode import FragmentCache, assemble, dumps, is_strict_schema, join_items
from ._errors_map import stream_error
from ._media import responses_block
from ._openai_chat import openai_tool_choice
from ._sse import SSEEvent
from ._types import (
    CitationDelta,
    FilePart,
    FinishDelta,
    FinishReason,
    ImagePart,
    Message,
    ModelDelta,
    ModelRequest,
    ModelSettings,
    ProviderBlock,
    ProviderPart,
    TextPart,
    TextPiece,
    ThoughtDone,
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

__all__ = ["PROVIDER", "ResponsesDecoder", "build_responses_body", "responses_usage"]

PROVIDER = "openai-responses"
_OWNED = frozenset({"model", "stream"})


def _text_item(role: str, text: Any) -> dict[str, Any]:
    return {"role": role, "content": text}


def encode_responses_message(message: Message) -> bytes:
    """One message as zero or more comma-separated Responses input items."""
    items: list[dict[str, Any]] = []
    role = message.role
    if role == "assistant":
        texts: list[str] = []
        for part in message.parts:
            if isinstance(part, TextPart) or (
                isinstance(part, ThoughtPart) and part.provider is None
            ):
                texts.append(part.text)
                continue
            if texts:
                items.append(_text_item("assistant", "".join(texts)))
                texts = []
            if isinstance(part, ToolCallPart):
                items.append(
                    {
                        "type": "function_call",
                        "call_id": part.id,
                        "name": part.wire_name,
                        "arguments": part.arguments or "{}",
                    }
                )
            elif isinstance(part, ThoughtPart) and part.provider == PROVIDER and part.id:
                item: dict[str, Any] = {
                    "type": "reasoning",
                    "id": part.id,
                    "summary": [{"type": "summary_text", "text": part.text}] if part.text else [],
                }
                if part.signature:
                    item["encrypted_content"] = part.signature
                items.append(item)
            elif isinstance(part, ProviderPart) and part.provider == PROVIDER:
                items.append(dict(part.data))
        if texts:
            items.append(_text_item("assistant", "".join(texts)))
    else:
        results = [p for p in message.parts if isinstance(p, ToolResultPart)]
        items += [
            {"type": "function_call_output", "call_id": p.id, "output": _output(p)} for p in results
        ]
        if role != "tool":
            content = _input_content(message)
            if content or not results:
                items.append(_text_item("developer" if role == "system" else role, content))
    return b",".join(dumps(item) for item in items)


def _output(result: ToolResultPart) -> str | list[dict[str, Any]]:
    """A function call's output: text, or text and images (the API takes both)."""
    if not result.images:
        return result.content
    return [
        {"type": "input_text", "text": result.content},
        *(responses_block(image) for image in result.images),
    ]


def _input_content(message: Message) -> Any:
    """Text, or input content items when the message holds images or files."""
    if not any(isinstance(p, ImagePart | FilePart) for p in message.parts):
        return "".join(p.text for p in message.parts if isinstance(p, TextPart))
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            content.append({"type": "input_text", "text": part.text})
        elif isinstance(part, ImagePart | FilePart):
            content.append(responses_block(part))
    return content


def encode_responses_tool(tool: ToolSpec) -> bytes:
    item: dict[str, Any] = {"type": "function", "name": tool.name, "parameters": tool.parameters}
    if tool.description:
        item["description"] = tool.description
    item["strict"] = is_strict_schema(tool.parameters)
    return dumps(item)


def build_responses_body(
    request: ModelRequest,
    settings: ModelSettings,
    *,
    model: str,
    stream: bool,
    encrypted_reasoning: bool | None,
    messages: FragmentCache[Message],
    tools: FragmentCache[ToolSpec],
) -> bytes:
    head: dict[str, Any] = {k: v for k, v in settings.extra.items() if k not in _OWNED}
    head["model"] = model
    head["stream"] = stream
    first_system = next((m for m in request.messages if m.role == "system"), None)
    if first_system is not None:
        head.setdefault("instructions", first_system.text)
    if settings.max_tokens is not None:
        head.setdefault("max_output_tokens", settings.max_tokens)
    for key in ("temperature", "top_p"):
        value = getattr(settings, key)
        if value is not None:
            head.setdefault(key, value)
    if settings.reasoning_effort is not None:
        head.setdefault("reasoning", {"effort": settings.reasoning_effort})
    if encrypted_reasoning or (encrypted_reasoning is None and settings.reasoning_effort):
        head.setdefault("include", ["reasoning.encrypted_content"])
    if request.output_schema is not None:
        schema = request.output_schema
        head.setdefault(
            "text",
            {
                "format": {
                    "type": "json_schema",
                    "name": schema.name,
                    "schema": schema.json_schema,
                    "strict": is_strict_schema(schema.json_schema),
                }
            },
        )
    fragments = (
        messages.get(m, encode_responses_message) for m in request.messages if m is not first_system
    )
    if settings.prompt_cache_key is not None:
        head.setdefault("prompt_cache_key", settings.prompt_cache_key)
    raw = [("input", join_items(fragments))]
    if request.tool_mode == "native" and request.tools:
        raw.append(
            ("tools", join_items(tools.get(t, encode_responses_tool) for t in request.tools))
        )
        if settings.tool_choice is not None:
            head.setdefault("tool_choice", openai_tool_choice(settings.tool_choice, nested=False))
        if settings.parallel_tool_calls is not None:
            head.setdefault("parallel_tool_calls", settings.parallel_tool_calls)
    return assemble(head, raw)


def responses_usage(usage: dict[str, Any]) -> Usage:
    details_in = usage.get("input_tokens_details") or {}
    details_out = usage.get("output_tokens_details") or {}
    return Usage(
        requests=1,
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cache_read_tokens=details_in.get("cached_tokens") or 0,
        cache_write_tokens=details_in.get("cache_write_tokens") or 0,
        reasoning_tokens=details_out.get("reasoning_tokens") or 0,
    )


_CALL_TYPES = frozenset({"function_call"})
_INCOMPLETE: dict[str, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}


class ResponsesDecoder:
    """Responses events to deltas. A call is sealed at ``function_call_arguments.done`` (or its
    ``output_item.done``); a stream without a terminal event was cut (``ModelConnectionError``)."""

    __slots__ = (
        "_calls",
        "_finished",
        "_has_calls",
        "_refusal",
        "_sealed",
        "_thought_items",
        "meter",
    )

    def __init__(self) -> None:
        self.meter = Meter()
        self._calls: dict[str, str] = {}  # item id -> call id
        self._sealed: set[str] = set()
        self._thought_items: set[str] = set()  # reasoning items whose text was streamed
        self._refusal: list[str] = []
        self._has_calls = False
        self._finished = False

    def event(self, event: SSEEvent, out: list[ModelDelta]) -> None:
        data = json.loads(event.data)
        kind = data.get("type") or event.event
        if kind == "response.output_text.delta":
            delta = data.get("delta")
            if delta:
                out.append(TextPiece(delta))
                self.meter.used += len(delta)
        elif kind == "response.function_call_arguments.delta":
            call_id = self._calls.get(data.get("item_id", ""))
            if call_id is not None and data.get("delta"):
                out.append(ToolCallArgsDelta(id=call_id, text=data["delta"]))
                self.meter.used += len(data["delta"])
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            if data.get("delta"):
                self._thought_items.add(data.get("item_id", ""))
                out.append(ThoughtPiece(data["delta"]))
                self.meter.used += len(data["delta"])
        elif kind == "response.reasoning_summary_part.added":
            if data.get("summary_index", 0) > 0:
                out.append(ThoughtPiece("\n\n"))
                self.meter.used += 2
        elif kind == "response.function_call_arguments.done":
            call_id = self._calls.get(data.get("item_id", ""))
            if call_id is not None and call_id not in self._sealed:
                self._sealed.add(call_id)
                arguments = data.get("arguments") or "{}"
                out.append(ToolCallEnd(id=call_id, arguments=arguments))
                self.meter.used += len(arguments)
        elif kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") in _CALL_TYPES:
                self._start_call(item, out)
        elif kind == "response.output_item.done":
            # A finished item (a provider block, a reasoning item, a call's whole arguments)
            # counts as its size.
            self.meter.used += STRUCTURE_CHARS + len(event.data)
            self._item_done(data.get("item") or {}, out, streamed=True)
        elif kind == "response.output_text.annotation.added":
            annotation = data.get("annotation")
            if annotation is not None:
                out.append(CitationDelta(annotation))
                self.meter.used += STRUCTURE_CHARS + len(event.data)
        elif kind == "response.refusal.delta":
            if data.get("delta"):
                self._refusal.append(data["delta"])
                self.meter.used += len(data["delta"])
        elif kind in ("response.completed", "response.incomplete"):
            self._terminal(data.get("response") or {}, out)
        elif kind == "response.failed":
            response = data.get("response") or {}
            error = response.get("error") or {}
            raise stream_error(
                error.get("message") or "the response failed",
                error_type=error.get("code") or error.get("type"),
                body=data,
            )
        elif kind == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else data
            raise stream_error(
                error.get("message"),
                error_type=error.get("code") or error.get("type"),
                body=data,
            )

    def _start_call(self, item: dict[str, Any], out: list[ModelDelta]) -> str:
        item_id = item.get("id") or item.get("call_id") or f"fc_{len(self._calls)}"
        call_id = item.get("call_id") or item_id
        if item_id not in self._calls:
            self._calls[item_id] = call_id
            self._has_calls = True
            name = item.get("name") or ""
            out.append(ToolCallStart(id=call_id, name=name))
            self.meter.used += STRUCTURE_CHARS + len(item_id) + len(call_id) + len(name)
        return call_id

    def _item_done(self, item: dict[str, Any], out: list[ModelDelta], *, streamed: bool) -> None:
        kind = item.get("type")
        if kind == "function_call":
            call_id = self._start_call(item, out)
            if call_id not in self._sealed:
                self._sealed.add(call_id)
                out.append(ToolCallEnd(id=call_id, arguments=item.get("arguments") or "{}"))
        elif kind == "reasoning":
            item_id = item.get("id")
            if not streamed or item_id not in self._thought_items:
                summary = item.get("summary") or []
                content = item.get("content") or []
                texts = [s.get("text", "") for s in (*summary, *content) if s.get("text")]
                if texts:
                    out.append(ThoughtPiece("\n\n".join(texts)))
            out.append(ThoughtDone(signature=item.get("encrypted_content") or "", id=item_id))
        elif kind == "message":
            if not streamed:
                for part in item.get("content") or []:
                    if part.get("type") == "output_text":
                        if part.get("text"):
                            out.append(TextPiece(part["text"]))
                        for annotation in part.get("annotations") or []:
                            out.append(CitationDelta(annotation))
                    elif part.get("type") == "refusal" and part.get("refusal"):
                        self._refusal.append(part["refusal"])
        elif kind:
            out.append(ProviderBlock(ProviderPart(provider=PROVIDER, type=kind, data=item)))

    def _terminal(self, response: dict[str, Any], out: list[ModelDelta]) -> None:
        self._finished = True
        usage = response.get("usage")
        if usage:
            out.append(UsageDelta(responses_usage(usage)))
        status = response.get("status")
        refusal = "".join(self._refusal) or None
        reason: FinishReason
        if status == "incomplete":
            detail = (response.get("incomplete_details") or {}).get("reason")
            reason = _INCOMPLETE.get(detail or "", "incomplete")
            raw = f"incomplete:{detail}" if detail else "incomplete"
        elif refusal is not None:
            reason, raw = "refusal", status or "completed"
        else:
            reason = "tool_calls" if self._has_calls else "stop"
            raw = status or "completed"
        out.append(FinishDelta(reason=reason, raw=raw, refusal=refusal))

    def end(self, out: list[ModelDelta]) -> None:
        if not self._finished:
            raise ModelConnectionError(
                "the Responses stream ended before response.completed / response.incomplete"
            )

    def document(self, value: Any, out: list[ModelDelta]) -> None:
        """A whole ``response`` object."""
        if value.get("status") == "failed":
            error = value.get("error") or {}
            raise stream_error(
                error.get("message") or "the response failed",
                error_type=error.get("code"),
                body=value,
            )
        for item in value.get("output") or []:
            self.meter.used += STRUCTURE_CHARS + len(dumps(item))
            if item.get("type") == "function_call":
                self._start_call(item, out)
            self._item_done(item, out, streamed=False)
        self._terminal(value, out)
