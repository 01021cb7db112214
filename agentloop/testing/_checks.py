"""The emulated provider's request checks: what each API documents it refuses with a 400.

A request the real API would refuse must not pass the emulator: a tool result without its call
(or a call left without its result), a content part of a shape the API does not take, an image
of a type it does not take, more Anthropic cache breakpoints than it allows.
"""

from __future__ import annotations

from typing import Any

from ._json import is_dict, is_list

__all__ = ["request_problem"]

_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_ANTHROPIC_BREAKPOINTS = 4


def request_problem(api: str, body: dict[str, Any]) -> str | None:
    """Why the API would refuse this body, or ``None``."""
    if api == "chat":
        return _chat(body)
    if api == "responses":
        return _responses(body)
    return _anthropic(body)


def _chat(body: dict[str, Any]) -> str | None:
    messages = body.get("messages")
    if not is_list(messages) or not messages:
        return "messages must be a non-empty array"
    open_calls: set[Any] = set()
    for i, m in enumerate(messages):
        if not is_dict(m):
            return f"messages[{i}] must be an object"
        role = m.get("role")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in open_calls:
                return (
                    f"messages[{i}]: a message with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls' (tool_call_id {call_id!r})"
                )
            open_calls.discard(call_id)
            if not isinstance(m.get("content"), str):
                return f"messages[{i}].content of a tool message must be text"
            continue
        if open_calls:
            return (
                "an assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id' (missing: {', '.join(sorted(open_calls))})"
            )
        if role == "assistant":
            open_calls = {c.get("id") for c in m.get("tool_calls") or () if is_dict(c)}
        elif role in ("user", "system", "developer"):
            problem = _chat_content(m.get("content"), f"messages[{i}].content")
            if problem:
                return problem
        else:
            return f"messages[{i}].role {role!r} is not a role"
    return None


def _chat_content(content: Any, where: str) -> str | None:
    if isinstance(content, str):
        return None
    if not is_list(content):
        return f"{where} must be text or an array of content parts"
    for j, part in enumerate(content):
        kind = part.get("type") if is_dict(part) else None
        if kind == "text" and isinstance(part.get("text"), str):
            continue
        if kind == "image_url" and isinstance((part.get("image_url") or {}).get("url"), str):
            problem = _data_url(part["image_url"]["url"], f"{where}[{j}]")
            if problem:
                return problem
            continue
        if kind == "file":
            file = part.get("file") or {}
            if isinstance(file.get("file_data"), str) or isinstance(file.get("file_id"), str):
                continue
        return f"{where}[{j}]: invalid content part {kind!r}"
    return None


def _data_url(url: str, where: str) -> str | None:
    if url.startswith("data:"):
        media_type = url[5:].partition(";")[0]
        if media_type not in _IMAGE_TYPES:
            return f"{where}: image type {media_type!r} is not supported"
    elif not url.startswith(("https://", "http://")):
        return f"{where}: image url must be http(s) or a data URL"
    return None


_RESPONSES_INPUT = frozenset({"input_text", "input_image", "input_file"})


def _responses(body: dict[str, Any]) -> str | None:
    items = body.get("input")
    if isinstance(items, str):
        return None
    if not is_list(items):
        return "input must be text or an array of items"
    calls: set[Any] = set()
    for i, item in enumerate(items):
        if not is_dict(item):
            return f"input[{i}] must be an object"
        kind = item.get("type")
        if kind == "function_call":
            calls.add(item.get("call_id"))
        elif kind == "function_call_output":
            if item.get("call_id") not in calls:
                return f"No tool call found for function call output with call_id {item.get('call_id')!r}"
            output = item.get("output")
            if not isinstance(output, str):
                problem = _responses_content(output, f"input[{i}].output")
                if problem:
                    return problem
        elif item.get("role") in ("user", "system", "developer"):
            content = item.get("content")
            if not isinstance(content, str):
                problem = _responses_content(content, f"input[{i}].content")
                if problem:
                    return problem
    return None


def _responses_content(content: Any, where: str) -> str | None:
    if not is_list(content):
        return f"{where} must be text or an array of input items"
    for j, part in enumerate(content):
        kind = part.get("type") if is_dict(part) else None
        if kind not in _RESPONSES_INPUT:
            return f"{where}[{j}]: invalid input item type {kind!r}"
        if kind == "input_image":
            url = part.get("image_url")
            problem = _data_url(url, f"{where}[{j}]") if isinstance(url, str) else "no image_url"
            if problem:
                return problem
        if kind == "input_file" and not any(
            isinstance(part.get(k), str) for k in ("file_data", "file_url", "file_id")
        ):
            return f"{where}[{j}]: input_file needs file_data, file_url or file_id"
        if kind == "input_file" and "file_data" in part and not part.get("filename"):
            return f"{where}[{j}]: input_file with file_data needs a filename"
    return None


_ANTHROPIC_USER = frozenset({"text", "image", "document", "tool_result"})


def _anthropic(body: dict[str, Any]) -> str | None:
    messages = body.get("messages")
    if not is_list(messages) or not messages:
        return "messages: at least one message is required"
    breakpoints = _count_breakpoints(body.get("system")) + _count_breakpoints(body.get("tools"))
    open_calls: set[Any] = set()
    for i, m in enumerate(messages):
        content = m.get("content") if is_dict(m) else None
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not is_list(content) or not content:
            return f"messages.{i}: content must be a non-empty array"
        breakpoints += _count_breakpoints(content)
        if m.get("role") == "assistant":
            if open_calls:
                return f"messages.{i}: tool_use ids were found without tool_result blocks"
            open_calls = {b.get("id") for b in content if b.get("type") == "tool_use"}
            continue
        answered = [b.get("tool_use_id") for b in content if b.get("type") == "tool_result"]
        if set(answered) != open_calls:
            return (
                f"messages.{i}: each tool_use must have a tool_result block in the next "
                "message, and each tool_result must answer a tool_use of the previous one"
            )
        kinds = [b.get("type") for b in content]
        if answered and kinds[: len(answered)] != ["tool_result"] * len(answered):
            return f"messages.{i}: tool_result blocks must come first in the content"
        open_calls = set()
        for j, block in enumerate(content):
            problem = _anthropic_block(block, f"messages.{i}.content.{j}")
            if problem:
                return problem
    if breakpoints > _ANTHROPIC_BREAKPOINTS:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
    return None


def _anthropic_block(block: dict[str, Any], where: str) -> str | None:
    kind = block.get("type")
    if kind not in _ANTHROPIC_USER:
        return f"{where}: a user turn cannot hold a {kind!r} block"
    if kind == "text" and not block.get("text"):
        return f"{where}: text content blocks must be non-empty"
    if kind in ("image", "document"):
        source = block.get("source") or {}
        stype = source.get("type")
        if stype == "base64":
            allowed = _IMAGE_TYPES if kind == "image" else {"application/pdf"}
            if source.get("media_type") not in allowed or not source.get("data"):
                return f"{where}.source: media_type {source.get('media_type')!r} not supported"
        elif stype == "url":
            if not str(source.get("url", "")).startswith(("https://", "http://")):
                return f"{where}.source.url must be an http(s) URL"
        elif not (kind == "document" and stype == "text" and isinstance(source.get("data"), str)):
            return f"{where}.source: invalid source type {stype!r}"
    if kind == "tool_result" and is_list(block.get("content")):
        for k, inner in enumerate(block["content"]):
            if not is_dict(inner) or inner.get("type") not in ("text", "image"):
                return f"{where}.content.{k}: a tool_result holds text and image blocks"
            problem = _anthropic_block(inner, f"{where}.content.{k}")
            if problem:
                return problem
    return None


def _count_breakpoints(blocks: Any) -> int:
    if not is_list(blocks):
        return 0
    return sum(1 for b in blocks if is_dict(b) and "cache_control" in b)
