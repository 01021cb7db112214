"""A finished run is freed by reference counting alone.

Cyclic garbage waits for the collector, whose passes cost CPU in proportion to the heap: with
thousands of concurrent sessions in one process, a run that leaves its objects in a cycle makes
every session pay for every other's (issue 22). So a run leaves none: not its own objects, not
its steps, messages or events.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentloop import Agent, RunResult
from agentloop.models import ModelRequest
from agentloop.models.openai import OpenAIChatModel
from agentloop.testing import EmulatedProvider, FunctionModel, ProviderServer, Reply, call
from tests.reliability._support import clock, weather


def _reply(request: ModelRequest) -> Reply:
    if not any(m.role == "assistant" for m in request.messages):
        return Reply(calls=[call("weather", {"query": "Paris"}), call("clock", {"query": "Oslo"})])
    return Reply(text="Sunny in Paris, noon in Oslo.")


@contextmanager
def collector_off() -> Iterator[None]:
    """The collector stopped, with nothing left over from before: what runs leave in cycles
    meanwhile is then exactly what ``gc.collect()`` finds afterwards."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _run(agent: Agent[None, str], streamed: bool) -> RunResult[str]:
    if not streamed:
        return await agent.run("weather and time?")
    async with agent.stream("weather and time?") as run:
        async for _ in run:
            pass
    return run.result


@pytest.mark.parametrize("tool_mode", ["native", "react"])
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "stream"])
async def test_a_finished_run_leaves_no_cyclic_garbage(tool_mode: str, streamed: bool) -> None:
    model = FunctionModel(_reply, chunk_size=8, native_tools=tool_mode == "native")
    agent = Agent(model, tools=[weather, clock], tool_mode=tool_mode)  # type: ignore[arg-type]
    await _run(agent, streamed)  # the first run's one-time work (imports, caches) is not a run's
    model.requests.clear()
    with collector_off():
        for _ in range(3):
            result = await _run(agent, streamed)
            assert result.output == "Sunny in Paris, noon in Oslo."
            assert len(result.steps) == 2
            model.requests.clear()  # the test model keeps each request, and with it the run
        del result
        assert gc.collect() == 0


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "stream"])
async def test_a_run_on_a_real_driver_over_a_socket_leaves_no_cyclic_garbage(
    streamed: bool,
) -> None:
    with ProviderServer(EmulatedProvider(answer="Sunny in Paris, noon in Oslo.")) as server:
        async with OpenAIChatModel("m", base_url=server.url + "/v1", api_key="k") as model:
            agent = Agent(model, tools=[weather, clock])
            await _run(agent, streamed)
            with collector_off():
                for _ in range(3):
                    result = await _run(agent, streamed)
                    assert result.output == "Sunny in Paris, noon in Oslo."
                    assert len(result.steps) == 2
                del result
                assert gc.collect() == 0
