"""Streaming runs to web clients: ``agentloop.web`` on Starlette, with resumable server-sent events.

Shows: ``create_app(agent)``, a Starlette app whose ``POST /api/runs`` (``Accept:
text/event-stream``) starts a run and answers with its stream (``?protocol=ag-ui`` or ``vercel``
for those front ends; each frame's ``id:`` is the event's seq); a client that drops reconnects to
the run's events URL (``Content-Location``, ``GET /api/runs/{run}/events``) with
``Last-Event-ID`` and reads on where it stopped, and the prompt is not run again; a second run on
a busy session gets 409; the built-in page at ``/`` shows thoughts, tools, the goal and the
answer.

The model is the emulated provider (``agentloop.testing``) on a loopback port, offline, speaking
OpenAI's API to the real driver. ``python examples/web_streaming.py`` serves the page at
http://127.0.0.1:8000 until Ctrl-C. With ``CI=true`` (or ``--clients N``) it starts the server on
a free port, runs N concurrent clients (each one drops halfway and resumes), checks every stream,
and exits. ``agentloop serve module:agent`` serves any agent the same way.

Run: ``python examples/web_streaming.py`` (serve) or ``python examples/web_streaming.py --clients 50``
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import uvicorn

from agentloop import Agent, tool
from agentloop.goals import setup_goal
from agentloop.models.openai import OpenAIChatModel
from agentloop.sessions import InMemoryStore
from agentloop.testing import EmulatedCall, EmulatedProvider, EmulatedTurn, ProviderServer
from agentloop.web import WebLimits, create_app


@tool
async def get_weather(city: str) -> dict[str, Any]:
    """The weekend forecast for a city.

    Args:
        city: the city's English name
    """
    await anyio.sleep(0.1)  # a real tool would call a weather API here
    return {"city": city, "celsius": 21, "sky": "sunny"}


SCRIPT: list[EmulatedTurn | str] = [
    EmulatedTurn(
        text="Thought: I will set myself a goal, then check the weather in Paris.\n",
        calls=[
            EmulatedCall("create_goal", {"objective": "Pick a city for the weekend"}),
            EmulatedCall("get_weather", {"city": "Paris"}),
        ],
    ),
    EmulatedTurn(
        text="Thought: The weather is known; the goal is met.\n",
        calls=[EmulatedCall("update_goal", {"status": "complete"})],
    ),
    "Thought: Time to answer.\nAnswer: Go to Paris: 21°C and sunny.",
]


def make_agent(provider_url: str) -> Agent[Any, Any]:
    model = OpenAIChatModel("emulated", base_url=provider_url + "/v1", api_key="offline")
    agent: Agent[Any, Any] = Agent(
        model, name="web", tools=[get_weather], tool_mode="react", store=InMemoryStore()
    )
    return setup_goal(agent)


@contextlib.asynccontextmanager
async def serving(
    agent: Agent[Any, Any], port: int, limits: WebLimits | None = None
) -> AsyncIterator[str]:
    """``create_app(agent)`` under uvicorn on 127.0.0.1; yields its base URL."""
    app = create_app(agent, limits=limits)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        while not server.started:  # noqa: ASYNC110  uvicorn sets a flag, not an event
            await anyio.sleep(0.01)
        bound = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{bound}"
        finally:
            server.should_exit = True


async def read_frames(
    response: httpx2.Response, *, stop_after: int = 0
) -> list[tuple[str, dict[str, Any]]]:
    """The (id, event) frames of a run's stream; with ``stop_after``, stop reading then."""
    response.raise_for_status()
    found: list[tuple[str, dict[str, Any]]] = []
    ident = ""
    async for line in response.aiter_lines():
        if line.startswith("id:"):
            ident = line[3:].strip()
        elif line.startswith("data:"):
            found.append((ident, json.loads(line[5:])))
            if stop_after and len(found) == stop_after:
                break  # the client goes away mid-run
    return found


async def one_client(client: httpx2.AsyncClient, i: int) -> None:
    """Start a run, its stream the POST's answer; drop halfway, reconnect with Last-Event-ID,
    check nothing was lost."""
    body = {"input": f"Paris or Oslo? ({i})"}
    sse = {"accept": "text/event-stream"}
    async with client.stream("POST", "/api/runs", json=body, headers=sse) as response:
        session = response.headers["x-agentloop-session"]
        events = response.headers["content-location"]  # where the stream goes on
        busy = await client.post("/api/runs", json={"input": "again", "session": session})
        assert busy.status_code == 409, busy.status_code  # the session is busy: refused
        first = await read_frames(response, stop_after=8)
    after = {"last-event-id": first[-1][0]}
    async with client.stream("GET", events, headers=after) as response:
        rest = await read_frames(response)
    seqs = [event["seq"] for _, event in first + rest]
    assert seqs == list(range(1, len(seqs) + 1)), seqs  # each event once, in order
    final = rest[-1][1]
    assert final["type"] == "run_finished", final
    assert final["result"]["output"] == "Go to Paris: 21°C and sunny."


async def run_clients(n: int) -> None:
    provider = EmulatedProvider(script=SCRIPT, chunk_delay=0.01)
    async with ProviderServer(provider) as server:
        agent = make_agent(server.url)
        # Every client here is one caller (no auth on 127.0.0.1): let it run n at once, and
        # open 2n streams (a reconnect may come before the server has seen its drop).
        limits = WebLimits(max_runs_per_owner=n, max_streams_per_owner=2 * n)
        async with agent.model, serving(agent, 0, limits) as base:  # type: ignore[union-attr]
            pool = httpx2.Limits(max_connections=2 * n)
            async with httpx2.AsyncClient(base_url=base, limits=pool, timeout=30) as client:
                async with anyio.create_task_group() as clients:
                    for i in range(n):
                        clients.start_soon(one_client, client, i)
                ag_ui = await client.post(
                    "/api/ag-ui",
                    json={
                        "threadId": "t1",
                        "runId": "r1",
                        "messages": [{"id": "m1", "role": "user", "content": "Paris or Oslo?"}],
                    },
                )
                kinds = [
                    json.loads(line[5:])["type"]
                    for line in ag_ui.text.splitlines()
                    if line.startswith("data:")
                ]
        requests = server.stats.requests
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
    print(f"{n} clients: every stream resumed after a drop, each event once; 409 for busy sessions")
    print(f"the model was asked {requests} times: 3 per run, none again for a reconnect")
    print(f"AG-UI: {len(kinds)} events, {kinds[0]} … {kinds[-1]}")


async def main() -> None:
    if "--clients" in sys.argv:
        await run_clients(int(sys.argv[sys.argv.index("--clients") + 1]))
        return
    if os.environ.get("CI") == "true":
        await run_clients(20)
        return
    provider = EmulatedProvider(script=SCRIPT, chunk_delay=0.05)
    async with ProviderServer(provider) as server:
        agent = make_agent(server.url)
        async with agent.model, serving(agent, 8000) as base:  # type: ignore[union-attr]
            print(f"serving {base} (Ctrl-C to stop)")
            await anyio.sleep_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(main)
