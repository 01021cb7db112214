"""A worker process for ``bench_temporal``'s throughput measurement.

Usage (internal): ``python -m benchmarks._temporal_worker TARGET TASK_QUEUE PROVIDER_URL``.
Serves ``bench_agent`` until killed; prints ``ready`` once it polls.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from agentloop import Agent, tool
from agentloop.models.openai import OpenAIChatModel


def bench_agent(url: str, queue: str) -> Any:
    """Two steps: two parallel tool calls, then a short answer (the emulated provider's
    script)."""
    from agentloop.temporal import TemporalAgent

    @tool
    async def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: the key
        """
        return f"value of {key}"

    model = OpenAIChatModel("emulated", base_url=url + "/v1", api_key="k")
    return TemporalAgent(Agent(model, name="bench", tools=[lookup]), task_queue=queue)


async def main(target: str, queue: str, url: str) -> None:
    from agentloop.temporal import connect, worker

    client = await connect(target)
    durable = bench_agent(url, queue)
    async with worker(client, [durable], max_concurrent_activities=200):
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    target, queue, url = sys.argv[1:4]
    anyio.run(main, target, queue, url)
