"""A small load: 50 concurrent SSE clients against the app on the emulated provider all reach
their run's end, each having seen a delta first. (``benchmarks/bench_web.py`` runs 1,000 against
``agentloop serve`` and reports the time to first delta.)"""

from __future__ import annotations

import anyio
import httpx2
import pytest

from agentloop import Agent
from agentloop.models.openai import OpenAIChatModel
from agentloop.testing import EmulatedProvider, ProviderServer
from agentloop.web import WebLimits, create_app

from ._serving import frames, serving

CLIENTS = 50


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn's loop
async def test_fifty_concurrent_sse_clients_all_complete() -> None:
    finished: list[tuple[str, str]] = []
    async with ProviderServer(EmulatedProvider(answer="Hello there, web.")) as provider:
        model = OpenAIChatModel("emulated", base_url=provider.url + "/v1", api_key="k")
        agent = Agent(model)
        limits = WebLimits(max_runs_per_owner=CLIENTS, max_streams_per_owner=CLIENTS)
        async with (
            model,
            serving(create_app(agent, limits=limits)) as base,
            httpx2.AsyncClient(
                base_url=base, timeout=60, limits=httpx2.Limits(max_connections=CLIENTS)
            ) as client,
        ):

            async def one() -> None:
                started = await client.post("/api/runs", json={"input": "hi"})
                assert started.status_code == 201, started.text
                async with client.stream("GET", started.json()["events"]) as response:
                    types = [f.json()["type"] for f in await frames(response)]
                first_delta = next(t for t in types if t.endswith("_delta"))
                finished.append((first_delta, types[-1]))

            async with anyio.create_task_group() as tg:
                for _ in range(CLIENTS):
                    tg.start_soon(one)
    assert finished == [("text_delta", "run_finished")] * CLIENTS
