"""Request bodies read within bounds: their size, and how deep their JSON nests (a body nested
thousands deep exhausts the parser's recursion, and any recursive walk after it)."""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request


async def read_json(request: Request, *, max_bytes: int, max_depth: int) -> dict[str, Any]:
    """The request's JSON object; 413 past ``max_bytes``, 400 if it is not a JSON object or
    nests deeper than ``max_depth``.

    Args:
        request: The request.
        max_bytes: The largest body read.
        max_depth: The deepest nesting of arrays and objects admitted.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise HTTPException(413, f"request bodies are limited to {max_bytes} bytes")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > max_bytes:
            raise HTTPException(413, f"request bodies are limited to {max_bytes} bytes")
    if data.count(b"[") + data.count(b"{") > max_depth and _depth(bytes(data)) > max_depth:
        raise _too_deep(max_depth)
    try:
        parsed = json.loads(data or b"{}")
    except RecursionError:  # not reached past the scan above; kept as the last word
        raise _too_deep(max_depth) from None
    except ValueError:
        raise HTTPException(400, "the body must be JSON") from None
    if not isinstance(parsed, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return parsed


def _too_deep(max_depth: int) -> HTTPException:
    return HTTPException(400, f"the body nests deeper than {max_depth} levels")


def _depth(data: bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings, scanning without recursion
    (an upper bound for text that is not JSON; that fails to parse anyway)."""
    deepest = depth = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest
