"""Quick start: an agent with two tools, streamed.

Shows: defining tools with ``@tool``, running an ``Agent`` while streaming its events, and the
typed result. Runs offline on a scripted model; with ``OPENAI_API_KEY`` set it uses
``openai:gpt-4o-mini`` instead.

Run: ``python examples/quickstart.py``
"""

from __future__ import annotations

import os

import anyio

from agentloop import ActionFinished, ActionStarted, Agent, TextDelta, tool
from agentloop.testing import Reply, ScriptedModel, call


@tool
async def get_temperature(city: str) -> float:
    """The current temperature in a city, in °C."""
    await anyio.sleep(0.1)  # a real tool would call a weather API here
    return {"Paris": 21.0, "Oslo": 4.0}.get(city, 15.0)


@tool
def convert(celsius: float) -> float:
    """Convert °C to °F. (A plain function: it runs in a worker thread.)"""
    return celsius * 9 / 5 + 32


def model() -> object:
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    return ScriptedModel(
        [
            Reply(text="Looking it up.", calls=[call("get_temperature", {"city": "Paris"})]),
            Reply(calls=[call("convert", {"celsius": 21.0})]),
            "It is 21 °C (69.8 °F) in Paris.",
        ],
        chunk_size=4,
        delay=0.02,
    )


async def main() -> None:
    agent = Agent(
        model(),  # type: ignore[arg-type]
        instructions="Answer with both °C and °F.",
        tools=[get_temperature, convert],
    )
    async with agent:  # at the end, closes the HTTP client of a model made from a string
        async with agent.stream("How warm is it in Paris?") as run:
            async for event in run:
                if isinstance(event, TextDelta):
                    print(event.text, end="", flush=True)
                elif isinstance(event, ActionStarted):
                    print(f"\n→ {event.name}({event.input})")
                elif isinstance(event, ActionFinished):
                    print(f"← {event.result.content}")
    print(f"\nAnswer: {run.result.output}  ({run.result.usage.requests} model calls)")


if __name__ == "__main__":
    anyio.run(main)
