"""``agentloop demo``: the whole loop, offline, on a scripted model with streaming latency.

The script plays a trip-planning agent that sets itself a goal, streams its reasoning, starts
four tools while its reply is still streaming, then tries to answer before it has closed its goal:
goal enforcement withdraws that draft and asks again; the model closes the goal and answers.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import anyio

from .. import Agent
from ..goals import setup_goal
from ..testing import Reply, ScriptedModel, Thought, call
from ..tools import Toolkit, activity, tool
from ._follow import Style, follow, make_view
from ._plain import timing_lines
from ._track import Tracker

PROMPT = "I'm in London with a free weekend. Paris or Oslo?"

_WEATHER = {"Paris": (21, "sunny"), "Oslo": (4, "rain")}
_TRAINS = {"Paris": ("Eurostar", 2.3, 0), "Oslo": ("Eurostar + flight", 5.5, 1)}


def demo_agent(speed: float = 1.0) -> Agent:
    """The demo's agent: two kinds of tools, goals, and a model that streams like a real one."""
    pace = 1.0 / speed

    @tool
    async def get_weather(city: str) -> dict[str, Any]:
        """The weekend forecast for a city.

        Args:
            city: the city's English name
        """
        await anyio.sleep(0.9 * pace)  # a real tool would call a weather API here
        celsius, sky = _WEATHER.get(city, (15, "cloudy"))
        return {"city": city, "celsius": celsius, "sky": sky}

    class TravelDesk(Toolkit):
        """Trains and hotels."""

        @activity
        async def train(self, origin: str, destination: str) -> dict[str, Any]:
            """The fastest train between two cities.

            Args:
                origin: where the trip starts
                destination: where it ends
            """
            await anyio.sleep(1.1 * pace)
            name, hours, changes = _TRAINS.get(destination, ("train", 4.0, 1))
            return {
                "route": f"{origin}→{destination}",
                "by": name,
                "hours": hours,
                "changes": changes,
            }

    model = ScriptedModel(_script(pace), name="demo-scripted")
    agent = Agent(
        model,
        name="demo",
        instructions="You plan short trips. Check the facts with your tools before you answer.",
        tools=[get_weather, TravelDesk()],
    )
    return setup_goal(agent)


def _typed(text: str, start: float, seconds: float, size: int = 5) -> list[tuple[float, str]]:
    """``text`` arriving in small chunks, evenly over ``seconds`` from ``start``."""
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    return [(start + seconds * i / len(pieces), p) for i, p in enumerate(pieces)]


def _script(pace: float) -> list[Reply]:
    def at(items: list[tuple[float, Any]]) -> list[tuple[float, Any]]:
        return [(t * pace, item) for t, item in items]

    objective = "Compare the weekend weather and the train from London for Paris and Oslo"
    thinking = (
        "Comparing two cities needs several lookups, so I'll set a goal first and only "
        "answer once it is met."
    )
    checking = "I'll check the weather and the trains for both cities at once."
    premature = "Paris it is: sunny and 21 °C, two hours by Eurostar. Have a lovely weekend!"
    closing = "Right, the goal is still open. The comparison is done: closing it."
    final = (
        "**Go to Paris.**\n\n"
        "- Paris: sunny, 21 °C; Eurostar, 2 h 18, direct.\n"
        "- Oslo: rain, 4 °C; 5 h 30 with a change.\n\n"
        "Paris wins on both counts. Pack sunglasses."
    )
    return [
        Reply(
            timeline=at(
                [
                    *((t, Thought(c)) for t, c in _typed(thinking, 0.0, 0.8)),
                    (0.95, call("create_goal", {"objective": objective}, id="goal-1")),
                    (1.0, ""),
                ]
            )
        ),
        Reply(
            timeline=at(
                [
                    *_typed(checking, 0.0, 0.5),
                    (0.6, call("get_weather", {"city": "Paris"}, id="w-paris")),
                    (0.8, call("get_weather", {"city": "Oslo"}, id="w-oslo")),
                    (
                        1.0,
                        call(
                            "travel_desk",
                            {"origin": "London", "destination": "Paris"},
                            path="train",
                            id="t-paris",
                        ),
                    ),
                    (
                        1.2,
                        call(
                            "travel_desk",
                            {"origin": "London", "destination": "Oslo"},
                            path="train",
                            id="t-oslo",
                        ),
                    ),
                    (1.4, ""),
                ]
            )
        ),
        Reply(timeline=at(_typed(premature, 0.0, 0.9))),
        Reply(
            timeline=at(
                [
                    *_typed(closing, 0.0, 0.5),
                    (0.6, call("update_goal", {"status": "complete"}, id="goal-2")),
                ]
            )
        ),
        Reply(timeline=at(_typed(final, 0.0, 1.0))),
    ]


async def run_demo(speed: float = 1.0, *, style: Style = "auto", out: TextIO | None = None) -> int:
    """Run the demo with a view; returns the exit status."""
    stream: TextIO = out or sys.stdout
    agent = demo_agent(speed)
    tracker = Tracker()
    if style != "json":
        stream.write(
            f"agentloop demo · offline scripted model with realistic latency (speed ×{speed:g})"
            " · goals on\n\n"
        )
        stream.flush()
    view = make_view(style, tracker, out=stream)
    async with agent.stream(PROMPT) as run:
        await follow(run, view, tracker)
    result = run.result
    if style != "json":
        stream.write("\ntiming\n")
        for line in timing_lines(tracker.timing()):
            stream.write(f"  {line}\n")
        stream.flush()
    if result.error is not None:  # the view leaves the run's own failure to this line
        print(
            f"agentloop: error: the run ended without an answer: {result.error.message}",
            file=sys.stderr,
        )
        return 1
    return 0
