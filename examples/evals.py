"""Evaluating an agent: a dataset of cases, evaluators, a report, and what changed.

Shows: a ``Dataset`` written to YAML and read back, evaluators of the answer, the tool
trajectory, the budget and an LLM judge, ``evaluate`` running every case concurrently (each
repeated, so flaky behaviour shows as a pass rate), the report's table, JUnit XML, and
``compare`` against the report of a previous version of the agent. Runs offline in well under
a second on function models; with ``OPENAI_API_KEY`` set the agent and the judge use
``openai:gpt-4o-mini`` instead (the same suite, live).

Run: ``python examples/evals.py``; or, without the judge, on the command line:
``agentloop eval examples/evals_cases.yaml --agent examples/evals.py:agent``
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import anyio

from agentloop import Agent, ModelRequest, tool
from agentloop.evals import Dataset, LLMJudge, compare, evaluate
from agentloop.testing import FunctionModel, Reply, call

LIVE = bool(os.environ.get("OPENAI_API_KEY"))
TEMPERATURES = {"Paris": 21, "Oslo": 4, "Rome": 25}


@tool
async def get_temperature(city: str) -> int:
    """The current temperature in a city, in °C.

    Args:
        city: The city's name.
    """
    return TEMPERATURES.get(city, 15)


def offline_agent_model(careless: bool) -> FunctionModel:
    """Looks up each city the user names (in parallel), then answers from the results. The
    careless version skips the lookup when asked about one city."""

    def reply(request: ModelRequest) -> Reply | str:
        question = next(m.text for m in reversed(request.messages) if m.role == "user")
        cities = [c for c in TEMPERATURES if c in question]
        results = [m for m in request.messages if m.role == "tool"]
        if cities and not results and not (careless and len(cities) == 1):
            return Reply(calls=[call("get_temperature", {"city": c}) for c in cities])
        if not cities:
            return "Which city do you mean?"
        return ", ".join(f"{c}: {TEMPERATURES[c]} °C" for c in cities) + "."

    return FunctionModel(reply, name="support")


def make_agent(careless: bool = False) -> Agent[Any, str]:
    model: Any = "openai:gpt-4o-mini" if LIVE else offline_agent_model(careless)
    return Agent(
        model,
        name="weather",
        instructions="Answer with the temperature of each city asked about, in °C.",
        tools=[get_temperature],
    )


agent = make_agent()  # what `agentloop eval ... --agent examples/evals.py:agent` runs

# The cases and their evaluators live in a file beside this one (its JSON Schema:
# agentloop/evals/dataset.schema.json); the judge is added in code, with its model.
CASES = Path(__file__).with_name("evals_cases.yaml")
JUDGE = LLMJudge(rubric="The answer gives a temperature in °C, or asks which city is meant.")


def judge_model() -> Any:
    if LIVE:
        return "openai:gpt-4o-mini"
    return FunctionModel(
        lambda request: '{"passed": true, "score": 1, "reason": "answers in °C"}', name="judge"
    )


async def main() -> None:
    dataset = Dataset.load(CASES)
    options: dict[str, Any] = {"evaluators": [JUDGE], "judge_model": judge_model(), "repeat": 2}
    async with make_agent(careless=True) as before, make_agent() as after:
        old = await evaluate(before, dataset, name="before", **options)
        new = await evaluate(after, dataset, name="after", **options)
    new.print()
    with tempfile.TemporaryDirectory() as tmp:
        new.save_junit(Path(tmp) / "junit.xml")  # for CI systems
    print()
    print(compare(old, new).render(), end="")


if __name__ == "__main__":
    anyio.run(main)
