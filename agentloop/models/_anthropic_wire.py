"""Anthropic Messages wire format: request bodies and reply decoding.

System messages go out as ``system``; stop sequences as ``stop_sequences``; ``max_tokens`` is
required, so it defaults to 4096 (plus the thinking budget when one is set). Anthropic has no
native JSON output mode: ``ModelProfile(native_output=False)`` tells the runtime to add a prompt
rule instead. Thinking blocks come back with their signature (redacted thinking with its data) and
are replayed to Anthropic only; server-tool blocks (``server_tool_use``, ``web_search_tool_result``
and the like) become ``ProviderBlock`` values and are replayed as they came. ``input_tokens`` in
usage counts every prompt token, cached or not, as OpenAI reports it. Settings: ``max_tokens``,
``temperature``, ``top_p``, ``thinking_budget`` (``thinking.budget_tokens``),
``reasoning_effort`` (``output_config.effort``); ``seed`` has no Anthropic field and is not sent.
"""

from __future__ import annotations

import json
from typing import Any

from agentloop._errors import ModelConnectionError

from ._bounds import STRUCTURE_CHARS, Meter
from ._encode import FragmentCache, assemble, dumps, join_items, parse_arguments
from ._errors_map import stream_error
from ._media import anthropic_block
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

__all__ = ["DEFAULT_MAX_TOKENS", "PROVIDER", "AnthropicDecoder", "build_anthropic_body"]

PROVIDER = "anthropic"
DEFAULT_MAX_TOKENS = 4096
_OWNED = frozenset({"model", "stream"})
# Three breakpoints of the four allowed: tools, system, the history's end.
_EPHEMERAL = {"type": "ephemeral"}

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
}


def encode_anthropic_message(message: Message) -> bytes:
    """One message as zero or one Anthropic message (``tool`` messages become user turns)."""
    blocks = _blocks(message)
    if not blocks:
        return b""
    return dumps(
        {"role": "assistant" if message.role == "assistant" else "user", "content": blocks}
    )


def _marked_message(message: Message) -> bytes:
    """The message with a cache breakpoint on its last block (thinking blocks take none)."""
    blocks = _blocks(message)
    if not blocks or blocks[-1].get("type") in ("thinking", "redacted_thinking"):
        return encode_anthropic_message(message)
    blocks[-1] = {**blocks[-1], "cache_control": _EPHEMERAL}
    return dumps(
        {"role": "assistant" if message.role == "assistant" else "user", "content": blocks}
    )


def _blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.role == "assistant":
        for part in message.parts:
            if isinstance(part, TextPart) or (
                isinstance(part, ThoughtPart) and part.provider is None
            ):
                if part.text:
                    blocks.append({"type": "text", "text": part.text})
            elif isinstance(part, ToolCallPart):
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": part.id,
                        "name": part.wire_name,
                        "input": parse_arguments(part.arguments),
                    }
                )
            elif isinstance(part, ThoughtPart) and part.provider == PROVIDER and part.signature:
                if part.redacted:
                    blocks.append({"type": "redacted_thinking", "data": part.signature})
                else:
                    blocks.append(
                        {"type": "thinking", "thinking": part.text, "signature": part.signature}
                    )
            elif isinstance(part, ProviderPart) and part.provider == PROVIDER:
                blocks.append(dict(part.data))
        return blocks
    for part in message.parts:  # results first: they must follow their calls at once
        if isinstance(part, ToolResultPart):
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.id}
            if part.images:
                block["content"] = [
                    {"type": "text", "text": part.content},
                    *(anthropic_block(image) for image in part.images),
                ]
            else:
                block["content"] = part.content
            if part.is_error:
                block["is_error"] = True
            blocks.append(block)
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart | FilePart):
            blocks.append(anthropic_block(part))
    return blocks


def encode_anthropic_tool(tool: ToolSpec) -> bytes:
    return dumps(_tool_item(tool))


def _tool_item(tool: ToolSpec) -> dict[str, Any]:
    item: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters}
    if tool.description:
        item["description"] = tool.description
    return item


def _tool_choice(settings: ModelSettings) -> dict[str, Any] | None:
    choice, parallel = settings.tool_choice, settings.parallel_tool_calls
    if choice is None and parallel is None:
        return None
    kinds = {"auto": "auto", "required": "any", "none": "none", None: "auto"}
    out: dict[str, Any] = {"type": kinds.get(choice, "tool")}
    if out["type"] == "tool":
        out["name"] = choice
    if parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


def build_anthropic_body(
    request: ModelRequest,
    settings: ModelSettings,
    *,
    model: str,
    stream: bool,
    messages: FragmentCache[Message],
    tools: FragmentCache[ToolSpec],
) -> bytes:
    head: dict[str, Any] = {k: v for k, v in settings.extra.items() if k not in _OWNED}
    head["model"] = model
    head["stream"] = stream
    budget = settings.thinking_budget
    if settings.max_tokens is not None:
        head.setdefault("max_tokens", settings.max_tokens)
    else:
        head.setdefault("max_tokens", DEFAULT_MAX_TOKENS + (budget or 0))
    if budget is not None:
        head.setdefault("thinking", {"type": "enabled", "budget_tokens": budget})
    if settings.reasoning_effort is not None:
        head.setdefault("output_config", {"effort": settings.reasoning_effort})
    for key in ("temperature", "top_p"):
        value = getattr(settings, key)
        if value is not None:
            head.setdefault(key, value)
    cache = settings.prompt_caching
    system = [m.text for m in request.messages if m.role == "system"]
    if system:
        text = "\n\n".join(system)
        if cache:
            head.setdefault("system", [{"type": "text", "text": text, "cache_control": _EPHEMERAL}])
        else:
            head.setdefault("system", text)
    if request.stop:
        head.setdefault("stop_sequences", list(request.stop))
    history = [m for m in request.messages if m.role != "system"]
    fragments = [messages.get(m, encode_anthropic_message) for m in history]
    if cache:  # the history's end: the next step's request reads all of it from the cache
        last = next((i for i in range(len(fragments) - 1, -1, -1) if fragments[i]), None)
        if last is not None:
            fragments[last] = _marked_message(history[last])
    raw = [("messages", join_items(fragments))]
    if request.tool_mode == "native" and request.tools:
        specs = [tools.get(t, encode_anthropic_tool) for t in request.tools]
        if cache:
            specs[-1] = dumps({**_tool_item(request.tools[-1]), "cache_control": _EPHEMERAL})
        raw.append(("tools", join_items(specs)))
        choice = _tool_choice(settings)
        if choice is not None:
            head.setdefault("tool_choice", choice)
    return assemble(head, raw)


class _Block:
    __slots__ = ("data", "id", "json", "kind", "signature")

    def __init__(self, kind: str, data: dict[str, Any] | None = None, id: str = "") -> None:
        self.kind = kind
        self.data = data
        self.id = id
        self.json: list[str] = []
        self.signature: list[str] = []


class AnthropicDecoder:
    """Anthropic events to deltas. Each ``tool_use`` is sealed at its ``content_block_stop``; a
    stream without ``message_stop`` was cut (``ModelConnectionError``)."""

    __slots__ = (
        "_blocks",
        "_cache_read",
        "_cache_write",
        "_input",
        "_output",
        "_reasoning",
        "_stopped",
        "_text",
        "meter",
    )

    def __init__(self) -> None:
        self.meter = Meter()
        self._blocks: dict[int, _Block] = {}
        self._text: list[str] = []
        self._input = self._output = self._cache_read = self._cache_write = self._reasoning = 0
        self._stopped = False

    def event(self, event: SSEEvent, out: list[ModelDelta]) -> None:
        data = json.loads(event.data)
        kind = data.get("type") or event.event
        if kind == "content_block_delta":
            delta = data["delta"]
            dtype = delta.get("type")
            if dtype == "text_delta":
                text = delta.get("text")
                if text:
                    self._text.append(text)
                    out.append(TextPiece(text))
                    self.meter.used += len(text)
            elif dtype == "input_json_delta":
                block = self._blocks.get(data.get("index", -1))
                partial = delta.get("partial_json")
                if block is not None and partial:
                    block.json.append(partial)
                    self.meter.used += len(partial)
                    if block.kind == "tool_use":
                        out.append(ToolCallArgsDelta(id=block.id, text=partial))
            elif dtype == "thinking_delta":
                if delta.get("thinking"):
                    out.append(ThoughtPiece(delta["thinking"]))
                    self.meter.used += len(delta["thinking"])
            elif dtype == "signature_delta":
                block = self._blocks.get(data.get("index", -1))
                if block is not None:
                    signature = delta.get("signature") or ""
                    block.signature.append(signature)
                    self.meter.used += len(signature)
            elif dtype == "citations_delta" and delta.get("citation") is not None:
                out.append(CitationDelta(delta["citation"]))
                self.meter.used += STRUCTURE_CHARS + len(event.data)
        elif kind == "content_block_start":
            self.meter.used += STRUCTURE_CHARS + len(event.data)
            self._start(data.get("index", len(self._blocks)), data["content_block"], out)
        elif kind == "content_block_stop":
            block = self._blocks.pop(data.get("index", -1), None)
            if block is not None:
                self._stop(block, out)
        elif kind == "message_start":
            message = data.get("message") or {}
            self._usage(message.get("usage") or {}, out)
            for i, block in enumerate(message.get("content") or []):  # pragma: no cover
                self._whole_block(block, out, i)
        elif kind == "message_delta":
            self._usage(data.get("usage") or {}, out)
            stop = (data.get("delta") or {}).get("stop_reason")
            if stop:
                out.append(self._finish(stop))
        elif kind == "message_stop":
            self._stopped = True
        elif kind == "error":
            error = data.get("error") or {}
            raise stream_error(
                error.get("message"),
                error_type=error.get("type"),
                body=data,
                request_id=data.get("request_id"),
            )

    def _start(self, index: int, block: dict[str, Any], out: list[ModelDelta]) -> None:
        btype = block.get("type")
        if btype == "text":
            self._blocks[index] = _Block("text")
            if block.get("text"):
                self._text.append(block["text"])
                out.append(TextPiece(block["text"]))
            for citation in block.get("citations") or []:
                out.append(CitationDelta(citation))
        elif btype == "thinking":
            b = self._blocks[index] = _Block("thinking")
            if block.get("thinking"):
                out.append(ThoughtPiece(block["thinking"]))
            if block.get("signature"):
                b.signature.append(block["signature"])
        elif btype == "redacted_thinking":
            out.append(ThoughtDone(redacted=True, signature=block.get("data") or ""))
        elif btype == "tool_use":
            b = self._blocks[index] = _Block("tool_use", block, block.get("id") or f"toolu_{index}")
            out.append(ToolCallStart(id=b.id, name=block.get("name") or ""))
        else:
            self._blocks[index] = _Block("provider", dict(block))

    def _stop(self, block: _Block, out: list[ModelDelta]) -> None:
        kind = block.kind
        if kind == "thinking":
            out.append(ThoughtDone(signature="".join(block.signature) or None))
        elif kind == "tool_use":
            if block.json:
                out.append(ToolCallEnd(id=block.id))
            else:
                start_input = (block.data or {}).get("input")
                out.append(ToolCallEnd(id=block.id, arguments=dumps(start_input or {}).decode()))
        elif kind == "provider" and block.data is not None:
            data = block.data
            if block.json:
                try:
                    data["input"] = json.loads("".join(block.json))
                except ValueError:
                    data["input"] = "".join(block.json)
            out.append(
                ProviderBlock(
                    ProviderPart(provider=PROVIDER, type=str(data.get("type")), data=data)
                )
            )

    def _whole_block(self, block: dict[str, Any], out: list[ModelDelta], index: int) -> None:
        """A complete content block (non-streamed replies): it counts as its JSON's size."""
        self.meter.used += STRUCTURE_CHARS + len(dumps(block))
        btype = block.get("type")
        if btype == "text":
            if block.get("text"):
                self._text.append(block["text"])
                out.append(TextPiece(block["text"]))
            for citation in block.get("citations") or []:
                out.append(CitationDelta(citation))
        elif btype == "thinking":
            if block.get("thinking"):
                out.append(ThoughtPiece(block["thinking"]))
            out.append(ThoughtDone(signature=block.get("signature") or None))
        elif btype == "redacted_thinking":
            out.append(ThoughtDone(redacted=True, signature=block.get("data") or ""))
        elif btype == "tool_use":
            call_id = block.get("id") or f"toolu_{index}"
            out.append(ToolCallStart(id=call_id, name=block.get("name") or ""))
            out.append(ToolCallEnd(id=call_id, arguments=dumps(block.get("input") or {}).decode()))
        else:
            out.append(
                ProviderBlock(ProviderPart(provider=PROVIDER, type=str(btype), data=dict(block)))
            )

    def _usage(self, usage: dict[str, Any], out: list[ModelDelta]) -> None:
        if not usage:
            return
        if usage.get("input_tokens") is not None:
            self._input = usage["input_tokens"]
        if usage.get("cache_read_input_tokens") is not None:
            self._cache_read = usage["cache_read_input_tokens"]
        if usage.get("cache_creation_input_tokens") is not None:
            self._cache_write = usage["cache_creation_input_tokens"]
        if usage.get("output_tokens") is not None:
            self._output = usage["output_tokens"]
        details = usage.get("output_tokens_details") or {}
        if details.get("thinking_tokens") is not None:
            self._reasoning = details["thinking_tokens"]
        out.append(
            UsageDelta(
                Usage(
                    requests=1,
                    input_tokens=self._input + self._cache_read + self._cache_write,
                    output_tokens=self._output,
                    cache_read_tokens=self._cache_read,
                    cache_write_tokens=self._cache_write,
                    reasoning_tokens=self._reasoning,
                )
            )
        )

    def _finish(self, stop: str) -> FinishDelta:
        reason = _FINISH.get(stop, "stop")
        refusal = ("".join(self._text) or None) if reason == "refusal" else None
        return FinishDelta(reason=reason, raw=stop, refusal=refusal)

    def end(self, out: list[ModelDelta]) -> None:
        if not self._stopped:
            raise ModelConnectionError("the Anthropic stream ended before message_stop")

    def document(self, value: Any, out: list[ModelDelta]) -> None:
        """A whole ``message`` object."""
        if value.get("type") == "error":
            error = value.get("error") or {}
            raise stream_error(error.get("message"), error_type=error.get("type"), body=value)
        for index, block in enumerate(value.get("content") or []):
            self._whole_block(block, out, index)
        self._usage(value.get("usage") or {}, out)
        out.append(self._finish(value.get("stop_reason") or "end_turn"))
        self._stopped = True
