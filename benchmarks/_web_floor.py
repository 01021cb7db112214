"""``bench_web``'s floor: a bare Starlette app under uvicorn that relays the emulated provider's
stream as server-sent events, with no engine. ``POST /relay`` makes the model call an agent's
run makes (aiohttp, ``stream: true``, against ``AGENTLOOP_BENCH_PROVIDER_URL``) and sends each
text delta as one ``text_delta`` event, then ``run_finished``: the least a web path can do.

Run: ``python -m benchmarks._web_floor PORT``
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

_URL = os.environ.get("AGENTLOOP_BENCH_PROVIDER_URL", "http://127.0.0.1:9") + "/v1"
_session: aiohttp.ClientSession | None = None


async def _relay(request: Request) -> StreamingResponse:
    text = (await request.json())["input"]
    body = {"model": "emulated", "stream": True, "messages": [{"role": "user", "content": text}]}
    return StreamingResponse(_deltas(body), media_type="text/event-stream")


async def _deltas(body: dict[str, Any]) -> AsyncIterator[bytes]:
    assert _session is not None
    headers = {"authorization": "Bearer bench"}
    async with _session.post(f"{_URL}/chat/completions", json=body, headers=headers) as response:
        async for raw in response.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            choices = json.loads(line[5:])["choices"]
            delta = choices[0].get("delta", {}).get("content") if choices else None
            if delta:
                event = json.dumps({"type": "text_delta", "text": delta})
                yield f"data: {event}\n\n".encode()
    yield b'data: {"type":"run_finished"}\n\n'


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    global _session
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as _session:
        yield


app = Starlette(routes=[Route("/relay", _relay, methods=["POST"])], lifespan=_lifespan)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
