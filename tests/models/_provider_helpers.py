"""Helpers for the provider-driver tests: fixtures, recorded request to ``ModelRequest``, and a
normalisation that lets a sent body be compared with a recorded one.

The conversion runs the opposite way to the drivers (wire format to agentloop values) and is
written independently of them; comparing ``driver(convert(recorded))`` with ``recorded`` is a
round trip through both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentloop.models import (
    Message,
    ModelDelta,
    ModelRequest,
    ModelSettings,
    OutputSchema,
    ProviderPart,
    ResponseBuilder,
    TextPart,
    ThoughtPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from agentloop.models._transport import internals_checked, turned_off
from agentloop.models._types import ModelResponse, Part, split_wire_tool_name
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "provider-streams"
SYNTHETIC = Path(__file__).resolve().parent.parent / "fixtures" / "synthetic"
APIS = ("openai-chat", "openai-responses", "anthropic")

# The direct paths run only on the versions in ``_transport.CHECKED``. On others (the floors, in
# the lowest-versions CI stage) their tests skip and "aiohttp" sends through the SDK's own
# aiohttp client; test_transport_internals fails when CI's pinned versions leave CHECKED.
direct_paths_only = pytest.mark.skipif(
    not internals_checked(), reason="the direct paths are off on versions outside CHECKED"
)


def check_transport(model: Any, wanted: str) -> None:
    """The transport the driver sent on (``model.transport``, read after a request) is the one
    asked for; for ``"aiohttp"`` the SDK's own aiohttp client only where the driver turned the
    direct path off for that SDK's version (and said so: ``_transport.turned_off``), whatever
    the installed versions are."""
    used = model.transport
    if wanted != "aiohttp" or used == "aiohttp":
        assert used == wanted
        return
    assert used == "aiohttp-sdk", used
    sdk = model.provider.partition("-")[0]  # "openai-responses" runs on the openai SDK
    assert sdk in turned_off(), (model.provider, turned_off())


@dataclass(frozen=True)
class Recording:
    api: str
    name: str
    meta: dict[str, Any]
    request: dict[str, Any]
    body: bytes
    sse: bool

    @property
    def key(self) -> str:
        return f"{self.api}/{self.name}"

    @property
    def streamed_request(self) -> bool:
        return bool(self.request.get("stream"))


def fixture_keys() -> list[str]:
    """Every recorded fixture, as ``api/name`` (from the files on disk)."""
    return sorted(
        f"{api}/{p.name.removesuffix('.meta.json')}"
        for api in APIS
        for p in (FIXTURES / api).glob("*.meta.json")
    )


def load(key: str) -> Recording:
    api, name = key.split("/")
    base = FIXTURES / api / name
    sse = base.with_name(name + ".response.sse")
    body_path = sse if sse.exists() else base.with_name(name + ".response.json")
    return Recording(
        api=api,
        name=name,
        meta=json.loads(base.with_name(name + ".meta.json").read_text()),
        request=json.loads(base.with_name(name + ".request.json").read_text()),
        body=body_path.read_bytes(),
        sse=sse.exists(),
    )


def base_url(api: str, server_url: str) -> str:
    return server_url if api == "anthropic" else server_url + "/v1"


def make_model(api: str, server_url: str, **kwargs: Any) -> Any:
    cls = {
        "openai-chat": OpenAIChatModel,
        "openai-responses": OpenAIResponsesModel,
        "anthropic": AnthropicModel,
    }[api]
    kwargs.setdefault("api_key", "test-key")
    model_name = kwargs.pop("model_name", "test-model")
    return cls(model_name, base_url=base_url(api, server_url), **kwargs)


def build(deltas: list[ModelDelta], provider: str) -> ModelResponse:
    builder = ResponseBuilder(provider=provider)
    for delta in deltas:
        builder.add(delta)
    return builder.build()


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _tool_call(call_id: str, wire_name: str, arguments: str) -> ToolCallPart:
    name, path = split_wire_tool_name(wire_name)
    return ToolCallPart(id=call_id, name=name, path=path, arguments=arguments)


def _result(call_id: str, names: dict[str, str], content: Any, is_error: bool = False) -> Part:
    if isinstance(content, list):
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    name, path = split_wire_tool_name(names.get(call_id, "tool"))
    return ToolResultPart(id=call_id, name=name, path=path, content=content, is_error=is_error)


def _settings(extra: dict[str, Any], **fields: Any) -> ModelSettings:
    return ModelSettings(**{k: v for k, v in fields.items() if v is not None}, extra=extra)


# -- recorded request -> ModelRequest ------------------------------------------------------------


def request_from_recorded(api: str, body: dict[str, Any]) -> tuple[ModelRequest, dict[str, Any]]:
    """A ``ModelRequest`` (and driver keyword arguments) that make the driver send ``body``."""
    body = _drop_none(body)
    if api == "openai-chat":
        return _chat_request(body)
    if api == "openai-responses":
        return _responses_request(body)
    return _anthropic_request(body)


_CHAT_MODELED = {
    "model", "messages", "tools", "stop", "response_format", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "seed", "reasoning_effort", "stream",
    "stream_options",
}  # fmt: skip


def _chat_request(body: dict[str, Any]) -> tuple[ModelRequest, dict[str, Any]]:
    names: dict[str, str] = {}
    messages: list[Message] = []
    for m in body["messages"]:
        role = m["role"]
        if role == "tool":
            part = _result(m["tool_call_id"], names, m["content"])
            if messages and messages[-1].role == "tool":
                messages[-1] = Message(role="tool", parts=(*messages[-1].parts, part))
            else:
                messages.append(Message(role="tool", parts=(part,)))
        elif role == "assistant":
            parts: list[Part] = []
            if m.get("content"):
                parts.append(TextPart(text=m["content"]))
            for call in m.get("tool_calls", []):
                names[call["id"]] = call["function"]["name"]
                parts.append(
                    _tool_call(call["id"], call["function"]["name"], call["function"]["arguments"])
                )
            messages.append(Message(role="assistant", parts=tuple(parts)))
        else:
            messages.append(Message(role=role, parts=(TextPart(text=m["content"]),)))
    tools = tuple(
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description", ""),
            parameters=t["function"]["parameters"],
        )
        for t in body.get("tools", [])
    )
    fmt = body.get("response_format")
    schema = None
    if fmt and fmt.get("type") == "json_schema":
        schema = OutputSchema(
            name=fmt["json_schema"]["name"], json_schema=fmt["json_schema"]["schema"]
        )
    extra = {k: v for k, v in body.items() if k not in _CHAT_MODELED}
    settings = _settings(
        extra,
        max_tokens=body.get("max_tokens", body.get("max_completion_tokens")),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        seed=body.get("seed"),
        reasoning_effort=body.get("reasoning_effort"),
    )
    request = ModelRequest(
        messages=tuple(messages),
        tools=tools,
        stop=tuple(body.get("stop", ())),
        output_schema=schema,
        settings=settings,
    )
    kwargs = {
        "model_name": body["model"],
        "stream": bool(body.get("stream")),
        "legacy_max_tokens": "max_tokens" in body,
    }
    return request, kwargs


_RESPONSES_MODELED = {
    "model", "input", "instructions", "tools", "max_output_tokens", "temperature", "top_p",
    "stream", "include", "text", "reasoning",
}  # fmt: skip


def _responses_request(body: dict[str, Any]) -> tuple[ModelRequest, dict[str, Any]]:
    names: dict[str, str] = {}
    messages: list[Message] = []
    if "instructions" in body:
        messages.append(Message.system(body["instructions"]))

    def add(role: Any, part: Part) -> None:
        if messages and messages[-1].role == role and role in ("assistant", "tool"):
            messages[-1] = Message(role=role, parts=(*messages[-1].parts, part))
        else:
            messages.append(Message(role=role, parts=(part,)))

    for item in body["input"]:
        kind = item.get("type", "message")
        if kind == "message":
            role = {"developer": "system"}.get(item["role"], item["role"])
            add(role, TextPart(text=item["content"]))
        elif kind == "function_call":
            names[item["call_id"]] = item["name"]
            add("assistant", _tool_call(item["call_id"], item["name"], item["arguments"]))
        elif kind == "function_call_output":
            add("tool", _result(item["call_id"], names, item["output"]))
        elif kind == "reasoning":
            text = "\n\n".join(s["text"] for s in item.get("summary", []))
            add(
                "assistant",
                ThoughtPart(
                    text=text,
                    signature=item.get("encrypted_content", ""),
                    id=item["id"],
                    provider="openai-responses",
                ),
            )
        else:
            add("assistant", ProviderPart(provider="openai-responses", type=kind, data=item))
    extra = {k: v for k, v in body.items() if k not in _RESPONSES_MODELED}
    function_tools = [t for t in body.get("tools", []) if t.get("type") == "function"]
    if len(function_tools) != len(body.get("tools", [])):
        extra["tools"] = body["tools"]
        function_tools = []
    tools = tuple(
        ToolSpec(name=t["name"], description=t.get("description", ""), parameters=t["parameters"])
        for t in function_tools
    )
    reasoning = body.get("reasoning", {})
    effort = reasoning.get("effort")
    if set(reasoning) - {"effort"}:
        extra["reasoning"] = reasoning
        effort = None
    schema = None
    fmt = body.get("text", {}).get("format")
    if fmt and fmt.get("type") == "json_schema":
        schema = OutputSchema(name=fmt["name"], json_schema=fmt["schema"])
    elif "text" in body:
        extra["text"] = body["text"]
    settings = _settings(
        extra,
        max_tokens=body.get("max_output_tokens"),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        reasoning_effort=effort,
    )
    request = ModelRequest(
        messages=tuple(messages), tools=tools, output_schema=schema, settings=settings
    )
    kwargs = {
        "model_name": body["model"],
        "stream": bool(body.get("stream")),
        "encrypted_reasoning": "reasoning.encrypted_content" in body.get("include", []),
    }
    return request, kwargs


_ANTHROPIC_MODELED = {
    "model", "messages", "system", "tools", "max_tokens", "temperature", "top_p",
    "stop_sequences", "stream", "thinking", "output_config",
}  # fmt: skip


def _anthropic_request(body: dict[str, Any]) -> tuple[ModelRequest, dict[str, Any]]:
    names: dict[str, str] = {}
    messages: list[Message] = []
    system = body.get("system")
    if isinstance(system, list):
        system = "\n\n".join(b["text"] for b in system)
    if system is not None:
        messages.append(Message.system(system))
    for m in body["messages"]:
        content = m["content"]
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else content
        )
        parts: list[Part] = []
        for b in blocks:
            kind = b["type"]
            if kind == "text":
                parts.append(TextPart(text=b["text"]))
            elif kind == "tool_use":
                names[b["id"]] = b["name"]
                parts.append(_tool_call(b["id"], b["name"], json.dumps(b["input"])))
            elif kind == "tool_result":
                parts.append(
                    _result(b["tool_use_id"], names, b["content"], b.get("is_error", False))
                )
            elif kind == "thinking":
                parts.append(
                    ThoughtPart(text=b["thinking"], signature=b["signature"], provider="anthropic")
                )
            elif kind == "redacted_thinking":
                parts.append(
                    ThoughtPart(text="", signature=b["data"], redacted=True, provider="anthropic")
                )
            else:
                parts.append(ProviderPart(provider="anthropic", type=kind, data=b))
        role = m["role"]
        if role == "user" and all(isinstance(p, ToolResultPart) for p in parts):
            role = "tool"
        messages.append(Message(role=role, parts=tuple(parts)))
    extra = {k: v for k, v in body.items() if k not in _ANTHROPIC_MODELED}
    tools: tuple[ToolSpec, ...] = ()
    if any("type" in t for t in body.get("tools", [])):
        extra["tools"] = body["tools"]
    else:
        tools = tuple(
            ToolSpec(
                name=t["name"], description=t.get("description", ""), parameters=t["input_schema"]
            )
            for t in body.get("tools", [])
        )
    thinking = body.get("thinking")
    budget = None
    if thinking is not None:
        if set(thinking) == {"type", "budget_tokens"} and thinking["type"] == "enabled":
            budget = thinking["budget_tokens"]
        else:
            extra["thinking"] = thinking
    effort = None
    config = body.get("output_config")
    if config is not None:
        if set(config) == {"effort"}:
            effort = config["effort"]
        else:
            extra["output_config"] = config
    settings = _settings(
        extra,
        max_tokens=body.get("max_tokens"),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        thinking_budget=budget,
        reasoning_effort=effort,
    )
    request = ModelRequest(
        messages=tuple(messages),
        tools=tools,
        stop=tuple(body.get("stop_sequences", ())),
        settings=settings,
    )
    return request, {"model_name": body["model"], "stream": bool(body.get("stream"))}


# -- body normalisation ---------------------------------------------------------------------------


def _strip(value: Any, keys: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_strip(v, keys) for v in value]
    return value


def normalize(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """What must agree between a recorded body and the body a driver sent for it.

    Differences that carry no meaning are removed: ``null`` fields, key order, ``cache_control``
    markers (agentloop does not model prompt caching), ``strict`` flags (the drivers decide them
    from the schema), ``stream_options`` and ``n`` (the drivers always ask for usage and one
    choice), and equivalent spellings (a string user content or its one text block; Responses
    ``instructions`` or a leading system/developer item).
    """
    body = _strip(_drop_none(body), frozenset({"cache_control", "strict"}))
    body.pop("stream_options", None)
    body.pop("n", None)
    if not body.get("stream"):
        body.pop("stream", None)
    for tool in body.get("tools", []):
        target = tool.get("function", tool)
        if not target.get("description"):
            target.pop("description", None)
    if api == "openai-responses":
        items = []
        if "instructions" in body:
            items.append({"role": "system", "content": body.pop("instructions")})
        for item in body.get("input", []):
            item = dict(item)
            if item.get("type") == "message" and "role" in item:
                del item["type"]
            if item.get("role") == "developer":
                item["role"] = "system"
            if item.get("type") == "function_call":
                item.pop("id", None)
                item.pop("status", None)
            items.append(item)
        body["input"] = items
    elif api == "anthropic":
        if isinstance(body.get("system"), list):
            body["system"] = "\n\n".join(b["text"] for b in body["system"])
        for m in body.get("messages", []):
            if isinstance(m["content"], str):
                m["content"] = [{"type": "text", "text": m["content"]}]
    elif api == "openai-chat":
        for m in body.get("messages", []):
            if m.get("role") == "assistant" and not m.get("content"):
                m.pop("content", None)
    return body
