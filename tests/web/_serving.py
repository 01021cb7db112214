"""``create_app`` under uvicorn on a free loopback port, in the test's own event loop (asyncio:
uvicorn's loop), and a reader of server-sent event frames."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
from starlette.applications import Starlette


@asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1; its base URL. The server starts shutting down as soon as
    the block ends, where uvicorn's own loop would notice only at its next tick (every 0.1 s:
    a twentieth of a second of every test that serves, on average)."""
    import uvicorn

    stop = anyio.Event()

    class Server(uvicorn.Server):
        async def main_loop(self) -> None:
            await self.on_tick(0)  # the default headers, which its ticks keep up to date
            await stop.wait()

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]  # the test's
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110  uvicorn sets a flag, not an event
                await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            stop.set()


@dataclass
class Frame:
    id: str | None
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


async def frames(response: httpx2.Response, *, limit: int | None = None) -> list[Frame]:
    """The SSE frames of ``response`` (pings skipped), up to ``limit`` of them."""
    found: list[Frame] = []
    ident: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                found.append(Frame(ident, "\n".join(data)))
                if limit is not None and len(found) >= limit:
                    return found
            ident, data = None, []
        elif line.startswith("id:"):
            ident = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return found
