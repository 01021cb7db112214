"""``agentloop demo``: the whole loop, offline, on a scripted model with streaming latency."""

from __future__ import annotations

import sys

import anyio

from .. import _events as ev
from .._agent import Agent
from ..testing import Reply, ScriptedModel, call
from ..tools import tool


@tool
async def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city."""
    await anyio.sleep(0.6)
    table = {"Paris": (21, "sunny"), "Oslo": (4, "rain")}
    celsius, sky = table.get(city, (15, "cloudy"))
    return {"city": city, "celsius": celsius, "sky": sky}


def demo_agent(speed: float = 1.0) -> Agent:
    """An agent whose model streams a realistic two-step conversation."""
    t = 1.0 / speed
    model = ScriptedModel(
        [
            Reply(
                timeline=[
                    (0.0 * t, "I'll check both cities at once."),
                    (0.5 * t, call("get_weather", {"city": "Paris"}, id="w1")),
                    (0.9 * t, call("get_weather", {"city": "Oslo"}, id="w2")),
                    (1.2 * t, ""),
                ]
            ),
            Reply(
                text="Paris is sunny at 21°C; Oslo has rain at 4°C. Pack an umbrella for Oslo.",
                chunk_size=6,
                delay=0.04 * t,
            ),
        ],
        name="demo-scripted",
    )
    return Agent(model, name="demo", tools=[get_weather], instructions="Answer weather questions.")


async def run_demo(speed: float = 1.0) -> int:
    out = sys.stdout
    start = anyio.current_time()

    def stamp() -> str:
        return f"[{anyio.current_time() - start:5.2f}s]"

    async with demo_agent(speed).stream("Weather in Paris and Oslo?") as run:
        streaming = False
        async for event in run:
            if isinstance(event, ev.TextDelta | ev.AnswerDelta | ev.ThoughtDelta):
                if not streaming:
                    out.write(f"{stamp()} model: ")
                    streaming = True
                out.write(event.text)
                out.flush()
                continue
            if streaming:
                out.write("\n")
                streaming = False
            if isinstance(event, ev.ActionStarted):
                out.write(f"{stamp()} ▶ {event.name}({event.input}) started while the reply streams\n")
            elif isinstance(event, ev.ActionFinished):
                out.write(f"{stamp()} ✔ {event.result.name} → {event.result.content}\n")
            elif isinstance(event, ev.RunFinished):
                out.write(f"{stamp()} answer: {event.result.output}\n")
    result = run.result
    out.write(
        f"done in {anyio.current_time() - start:.2f}s: {len(result.steps)} steps, "
        f"{result.usage.requests} model calls\n"
    )
    return 0 if result.ok else 1
