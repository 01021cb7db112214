"""Before authentication (DESIGN §8): ``agentloop serve`` (a subprocess, on the emulated
provider) closes a connection whose request head is unfinished after ``--head-timeout``
seconds, on arrival and between requests of a kept-alive connection, and holds at most a
bounded number of connections without a head, so that 200 stalled heads never stop a client
that sends its head at once from being served: at the real open-file limit and at a lowered
one (``resource.setrlimit`` in the server's process). The clients run on asyncio and trio."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream

from agentloop.testing import ProviderServer

from ._demo import FINAL, DemoProvider
from ._serving import frames

PARTIAL = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def _agentloop_serve(*options: str, nofile: int | None = None) -> AsyncIterator[str]:
    """``agentloop serve tests.web._served:agent`` in a subprocess (its open-file limit lowered
    to ``nofile`` first); its base URL once it answers."""
    port = _free_port()
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as provider:
        env = {**os.environ, "AGENTLOOP_TEST_PROVIDER_URL": provider.url}
        argv = ["serve", "tests.web._served:agent", "--port", str(port), *options]
        code = (
            "import resource, sys\n"
            f"if {nofile!r} is not None:\n"
            f"    resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile!r}, {nofile!r}))\n"
            "from agentloop.cli import main\n"
            f"sys.exit(main({argv!r}))\n"
        )
        process = await anyio.open_process(
            [sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL
        )
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx2.AsyncClient(base_url=base, timeout=30) as client:
                with anyio.fail_after(60):
                    while True:
                        try:
                            if (await client.get("/")).status_code == 200:
                                break
                        except httpx2.TransportError:
                            await anyio.sleep(0.05)
            yield base
        finally:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
            await process.aclose()


async def _closed_within(stream: SocketStream, seconds: float) -> bool:
    """Whether the server closes this connection within ``seconds`` (it sends nothing else)."""
    with anyio.move_on_after(seconds):
        try:
            while True:
                await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return True
    return False


async def test_an_unfinished_request_head_is_closed_after_the_bound() -> None:
    """A head that never ends is closed after ``--head-timeout`` (1 s here), not before; so is
    a kept-alive connection that starts a second head and stops."""
    async with _agentloop_serve("--head-timeout", "1") as base:
        port = int(base.rsplit(":", 1)[1])
        async with await anyio.connect_tcp("127.0.0.1", port) as fresh:
            await fresh.send(PARTIAL)
            early = await _closed_within(fresh, 0.4)  # the server never closes before its bound
            fresh_closed = await _closed_within(fresh, 15)
        async with await anyio.connect_tcp("127.0.0.1", port) as kept:
            await kept.send(b"GET /app.css HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            with anyio.fail_after(10):
                while b"\r\n\r\n" not in answer:
                    answer += await kept.receive()
            await kept.send(PARTIAL)
            kept_closed = await _closed_within(kept, 15)
    assert not early
    assert answer.startswith(b"HTTP/1.1 200")
    assert fresh_closed, "an unfinished head was still open 15 s after a 1 s bound"
    assert kept_closed, "an unfinished second head was still open 15 s after a 1 s bound"


@pytest.mark.parametrize("nofile", [None, 128], ids=["real-fd-limit", "fd-limit-128"])
async def test_stalled_heads_never_stop_a_client_from_being_served(nofile: int | None) -> None:
    """200 connections that send half a head and stall (the default 10 s bound never passes
    here): a client that sends its request at once still starts a run and streams it to the
    answer, and no more than the cap of stalled ones (64, or a quarter of 128) is held."""
    cap = 64
    options = ["--max-pending-connections", str(cap)]
    async with _agentloop_serve(*options, nofile=nofile) as base:
        port = int(base.rsplit(":", 1)[1])
        stalled: list[SocketStream] = []
        try:
            for _ in range(200):
                stream = await anyio.connect_tcp("127.0.0.1", port)
                stalled.append(stream)
                await stream.send(PARTIAL)
            with anyio.fail_after(30):
                async with httpx2.AsyncClient(base_url=base, timeout=30) as client:
                    started = await client.post("/api/runs", json={"input": "Paris or Oslo?"})
                    assert started.status_code == 201, started.text
                    async with client.stream("GET", started.json()["events"]) as response:
                        events = [f.json() for f in await frames(response)]
            held = 0
            for stream in stalled:
                held += not await _closed_within(stream, 0.005)
        finally:
            for stream in stalled:
                await stream.aclose()
    assert events[-1]["type"] == "run_finished" and events[-1]["result"]["output"] == FINAL
    assert held <= (cap if nofile is None else nofile // 4), held
