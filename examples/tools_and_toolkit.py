"""Tools and a toolkit: plain ``@tool`` functions and a ``Toolkit`` with several activities.

Shows: an async tool, a sync tool (it runs in a worker thread, never on the event loop), a
``Toolkit`` whose ``@activity`` methods share the instance's state, a tool that reads the run's
``ToolContext``, the names the model sees (``notes__add`` for the ``add`` activity of ``notes``),
parallel actions in one step, and a bad call coming back to the model as an error result instead of
an exception. Runs offline on a scripted model; with ``OPENAI_API_KEY`` set it uses
``openai:gpt-4o-mini``.

Run: ``python examples/tools_and_toolkit.py``
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import anyio

from agentloop import (
    ActionFinished,
    ActionStarted,
    Agent,
    TextDelta,
    ToolContext,
    Toolkit,
    activity,
    tool,
)
from agentloop.testing import Reply, ScriptedModel, call


@tool
async def weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: the city's English name
    """
    await anyio.sleep(0.2)  # an HTTP call in real life
    return {"Paris": "sunny, 21 °C", "Oslo": "rain, 4 °C"}.get(city, "cloudy, 15 °C")


@tool
def days_until(date: str) -> int:
    """Days from today until a date (a sync function: it runs in a worker thread).

    Args:
        date: an ISO date, YYYY-MM-DD
    """
    return (dt.date.fromisoformat(date) - dt.date.today()).days


class Notes(Toolkit):
    """A notebook: add notes, list them, search them."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    @activity
    async def add(self, ctx: ToolContext, text: str) -> dict[str, Any]:
        """Add a note.

        Args:
            text: the note
        """
        self.notes.append(text)
        return {"saved": text, "count": len(self.notes), "by_run": ctx.run_id[:8]}

    @activity(name="list")  # the activity's name need not be the method's
    async def list_notes(self) -> list[str]:
        """Every note, oldest first."""
        return self.notes

    @activity
    async def search(self, query: str, limit: int = 3) -> list[str]:
        """Notes that contain a word.

        Args:
            query: the word to look for (case-insensitive)
            limit: at most this many notes
        """
        return [n for n in self.notes if query.lower() in n.lower()][:limit]


def model() -> Any:
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    return ScriptedModel(
        [
            # Three actions in one reply: they start as each is sealed and run in parallel.
            Reply(
                text="Saving both notes and checking the weather at once.",
                calls=[
                    call("notes", {"text": "Pack an umbrella for Oslo"}, path="add"),
                    call("notes", {"text": "Book the Paris train"}, path="add"),
                    call("weather", {"city": "Oslo"}),
                ],
            ),
            # A mistake: the model forgets the required argument. It gets an error result back.
            Reply(calls=[call("notes", {"limit": 2}, path="search")]),
            Reply(calls=[call("notes", {"query": "oslo"}, path="search")]),
            "Saved 2 notes. Oslo has rain at 4 °C, and your Oslo note says: pack an umbrella.",
        ],
        chunk_size=6,
        delay=0.01,
    )


async def main() -> None:
    notes = Notes()
    agent = Agent(
        model(),
        instructions="You keep the user's notes. Use the tools; say what you did.",
        tools=[weather, days_until, notes],
    )
    print("The tools as the model sees them:")
    for t in (weather, days_until, notes.tool):
        for spec in t.specs():
            print(f"  {spec.name:<14} {spec.description.splitlines()[0]}")
    print()
    prompt = (
        "Note 'Pack an umbrella for Oslo' and 'Book the Paris train', then tell me Oslo's weather."
    )
    async with agent, agent.stream(prompt) as run:
        mid_line = False
        async for event in run:
            if isinstance(event, TextDelta):
                print(event.text, end="", flush=True)
                mid_line = True
                continue
            if mid_line:
                print()
                mid_line = False
            if isinstance(event, ActionStarted):
                where = f"{event.name}.{event.path}" if event.path else event.name
                print(f"  → {where}({event.input})")
            elif isinstance(event, ActionFinished):
                r = event.result
                status = f"ERROR {r.error_kind}" if r.is_error else "ok"
                print(f"  ← {r.tag}: {status}: {r.content[:90]}")
    result = run.result
    print(f"\nAnswer: {result.output}")
    print(f"Notes now: {notes.notes}")
    print(f"{len(result.steps)} steps, {result.usage.requests} model calls")


if __name__ == "__main__":
    anyio.run(main)
