"""The app itself on asyncio and trio (an ASGI server on trio, such as Hypercorn, serves it
there; here the test's client calls it in-process), with the model on a loopback socket: a run
streams, a busy session is 409, and a stream resumed after seq n holds the events after n."""

from __future__ import annotations

import json
from typing import Any

import httpx2

from agentloop.sessions import InMemoryStore
from agentloop.testing import ProviderServer
from agentloop.web import create_app

from ._demo import FINAL, DemoProvider, demo_agent


async def _events(client: httpx2.AsyncClient, url: str, **headers: str) -> list[Any]:
    response = await client.get(url, headers=headers)
    assert response.status_code == 200
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


async def test_the_app_runs_on_either_backend() -> None:
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as provider:
        agent = demo_agent(provider.url, store=InMemoryStore())
        app = create_app(agent)
        transport = httpx2.ASGITransport(app=app)
        async with (
            agent.model,  # type: ignore[union-attr]
            app.router.lifespan_context(app),
            httpx2.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", timeout=30
            ) as client,
        ):
            run = (await client.post("/api/runs", json={"input": "Paris or Oslo?"})).json()
            busy = await client.post("/api/runs", json={"input": "x", "session": run["session"]})
            whole = await _events(client, run["events"])
            tail = await _events(client, run["events"], **{"last-event-id": "5"})
    assert busy.status_code == 409
    assert whole[-1]["type"] == "run_finished" and whole[-1]["result"]["output"] == FINAL
    assert tail == [e for e in whole if e["seq"] > 5]
