"""Structured output: the answer is a validated pydantic model, not text.

Shows: ``Agent(output_type=Trip)`` sends the model the output's JSON schema (natively where the
provider supports it, else in the prompt); the answer is validated into a ``Trip``; an answer that
does not validate goes back to the model with the validation errors, and the run goes on until it
does (or ends with ``OutputInvalid``). ``result.unwrap()`` is the typed value (``result.output``
is a ``Trip``, or ``None`` when the run ended with an error). Runs offline on a scripted model
whose first answer is invalid; with ``OPENAI_API_KEY`` set it uses ``openai:gpt-4o-mini``.

Run: ``python examples/structured_output.py``
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import anyio
from pydantic import BaseModel, Field

from agentloop import Agent, StepFinished, tool
from agentloop.testing import Reply, ScriptedModel, call


class Leg(BaseModel):
    origin: str
    destination: str
    mode: Literal["train", "plane", "bus", "ferry"]
    hours: float = Field(gt=0)


class Trip(BaseModel):
    """A weekend trip plan."""

    destination: str
    legs: list[Leg]
    budget_eur: int = Field(ge=0)
    highlights: list[str] = Field(min_length=1, max_length=3)


@tool
async def train_time(origin: str, destination: str) -> float:
    """Hours by the fastest train.

    Args:
        origin: departure city
        destination: arrival city
    """
    return {"Paris": 2.3, "Brussels": 2.0}.get(destination, 6.0)


LEGS: list[dict[str, Any]] = [
    {"origin": "London", "destination": "Paris", "mode": "train", "hours": 2.3},
    {"origin": "Paris", "destination": "London", "mode": "train", "hours": 2.3},
]
TRIP: dict[str, Any] = {
    "destination": "Paris",
    "legs": LEGS,
    "budget_eur": 450,
    "highlights": ["Louvre", "Canal Saint-Martin"],
}


def model() -> Any:
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    invalid = {**TRIP, "legs": [{**LEGS[0], "mode": "hovercraft"}], "highlights": []}
    return ScriptedModel(
        [
            Reply(calls=[call("train_time", {"origin": "London", "destination": "Paris"})]),
            json.dumps(invalid),  # fails validation: the errors go back to the model
            "```json\n" + json.dumps(TRIP, indent=1) + "\n```",  # a fenced answer is accepted
        ],
        chunk_size=16,
        delay=0.005,
    )


async def main() -> None:
    agent = Agent(
        model(),
        instructions="Plan weekend trips from London. Check train times with the tool.",
        tools=[train_time],
        output_type=Trip,
    )
    async with agent, agent.stream("Plan me a weekend in Paris.") as run:
        async for event in run:
            if isinstance(event, StepFinished) and event.step.feedback:
                print("answer rejected; the model is told:")
                print("  " + event.step.feedback.strip().replace("\n", "\n  ")[:400])
    result = run.result
    trip = result.unwrap()  # a Trip, or the run's error (OutputInvalid, …) raised
    print(f"\n{type(trip).__name__} to {trip.destination}, budget €{trip.budget_eur}:")
    for leg in trip.legs:
        print(f"  {leg.origin} → {leg.destination} by {leg.mode}, {leg.hours} h")
    print(f"  highlights: {', '.join(trip.highlights)}")
    print(f"({len(result.steps)} steps, {result.usage.requests} model calls)")


if __name__ == "__main__":
    anyio.run(main)
