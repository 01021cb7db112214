"""Each evaluator, on runs of scripted and function models (asyncio and trio)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from agentloop import Agent, ModelPrice, PriceTable
from agentloop.evals import (
    Budget,
    Case,
    Check,
    Contains,
    Dataset,
    Equals,
    EvalContext,
    EvalResult,
    Evaluator,
    GoalOutcome,
    OutputValid,
    Regex,
    ToolCallSpec,
    ToolTrajectory,
    evaluate,
)
from agentloop.goals import setup_goal
from agentloop.testing import FunctionModel, Reply, ScriptedModel, call
from tests.evals.support import weather_agent

pytestmark = pytest.mark.anyio


async def results_of(
    agent: Agent[Any, Any], case: Case, *checks: Evaluator, **options: Any
) -> list[EvalResult]:
    """What each evaluator said of one run of the case."""
    report = await evaluate(agent, Dataset(cases=[case]), evaluators=checks, **options)
    (run,) = report.cases[0].runs
    assert run.error is None, run.error
    return run.results


async def test_equals_contains_and_regex_read_the_answer() -> None:
    agent = weather_agent()
    case = Case(name="hi", input="hello there", expected_output="echo: hello there")
    results = await results_of(
        agent,
        case,
        Equals(),
        Equals(value="echo: nope", label="equals nope"),
        Contains(value="HELLO", case_sensitive=False),
        Contains(value="HELLO", label="case matters"),
        Regex(pattern=r"^echo: \w+ there$"),
        Regex(pattern="^hello"),
    )
    assert [(r.name, r.passed) for r in results] == [
        ("equals", True),
        ("equals nope", False),
        ("contains('HELLO')", True),
        ("case matters", False),
        ("regex('^echo: \\\\w+ there$')", True),
        ("regex('^hello')", False),
    ]
    assert results[1].reason == "expected echo: nope, got echo: hello there"


async def test_an_evaluator_without_an_expected_value_is_skipped() -> None:
    results = await results_of(weather_agent(), Case(name="x", input="hi"), Equals(), Contains())
    assert results == []


class City(BaseModel):
    name: str
    population: int


async def test_typed_output_is_compared_as_json_and_validated() -> None:
    model = FunctionModel(lambda request: '{"name": "Paris", "population": 2100000}')
    agent = Agent(model, output_type=City)
    case = Case(name="city", input="x", expected_output={"name": "Paris", "population": 2100000})
    results = await results_of(agent, case, Equals(), OutputValid())
    assert [r.passed for r in results] == [True, True]


async def test_output_valid_fails_a_run_whose_answer_never_validated() -> None:
    agent = Agent(FunctionModel(lambda request: '{"name": "Paris"}'), output_type=City)
    (result,) = await results_of(agent, Case(name="city", input="x"), OutputValid())
    assert not result.passed
    assert result.reason is not None and "output_invalid" in result.reason


def spec(name: str, **args: Any) -> ToolCallSpec:
    return ToolCallSpec(name=name, args=args or None)


@pytest.mark.parametrize(
    ("mode", "calls", "passed", "score"),
    [
        ("exact", [spec("weather", city="Paris"), spec("weather", city="Rome")], True, 1.0),
        ("exact", [spec("weather", city="Rome"), spec("weather", city="Paris")], False, 0.0),
        ("exact", [spec("weather")], False, 0.0),
        ("in_order", [spec("weather", city="Paris"), spec("weather", city="Rome")], True, 1.0),
        ("in_order", [spec("weather", city="Rome"), spec("weather", city="Paris")], False, 0.5),
        ("in_order", [spec("weather", city="Rome")], True, 1.0),
        ("any_order", [spec("weather", city="Rome"), spec("weather", city="Paris")], True, 1.0),
        ("any_order", [spec("weather", city="Rome"), spec("clock")], False, 0.5),
        # A loose spec must not take the one call the strict one needs.
        ("any_order", [spec("weather"), spec("weather", city="Paris")], True, 1.0),
    ],
)
async def test_tool_trajectory_modes(
    mode: Any, calls: list[ToolCallSpec], passed: bool, score: float
) -> None:
    case = Case(name="w", input="weather?", expected_tools=calls)
    (result,) = await results_of(weather_agent(), case, ToolTrajectory(mode=mode))
    assert (result.passed, result.score) == (passed, score), result.reason


async def test_the_trajectory_is_the_reply_order_not_the_finish_order() -> None:
    """The two weather calls run concurrently, each started as soon as the streaming reply
    sealed it; Paris's finishes last. The trajectory is the order of the reply."""
    agent = weather_agent()
    finished: list[str] = []
    async with agent.stream("weather?") as run:
        async for event in run:
            if event.type == "action_finished":
                finished.append(event.result.input["city"])
    assert finished == ["Rome", "Paris"]  # finish order
    seen: list[tuple[str, ...]] = []

    def record(ctx: EvalContext) -> bool:
        seen.append(tuple(c.input["city"] for c in ctx.tool_calls))
        return True

    exact = ToolTrajectory(calls=[spec("weather", city="Paris"), spec("weather", city="Rome")])
    results = await results_of(agent, Case(name="w", input="weather?"), exact, Check(record))
    assert seen == [("Paris", "Rome")]
    assert results[0].passed


async def test_calls_carried_from_a_discarded_attempt_come_first() -> None:
    """A goal interception discards the attempt whose answer looked final; calls that reply
    started count before the next reply's, in the order the model emitted them."""
    script: list[Reply | str] = [
        Reply(calls=[call("create_goal", {"objective": "ship"})]),
        "all done",  # intercepted: the goal is active
        Reply(calls=[call("update_goal", {"status": "complete"})]),
        "shipped",
    ]
    agent = setup_goal(Agent(ScriptedModel(script), name="shipper"))
    case = Case(
        name="goal",
        input="ship it",
        expected_tools=[spec("create_goal"), spec("update_goal", status="complete")],
    )
    results = await results_of(
        agent,
        case,
        ToolTrajectory(),
        GoalOutcome(status="complete"),
        GoalOutcome(status="complete", max_interceptions=1, label="at most one"),
        GoalOutcome(status="complete", max_interceptions=0, label="none"),
        GoalOutcome(status="blocked", label="blocked"),
    )
    assert [(r.name, r.passed) for r in results] == [
        ("tool_trajectory(exact)", True),
        ("goal", True),
        ("at most one", True),
        ("none", False),
        ("blocked", False),
    ]
    assert results[3].reason == "intercepted 1 times (> 0)"
    assert results[4].reason == "the goal is complete, not blocked"


async def test_goal_outcome_without_a_goal_fails() -> None:
    (result,) = await results_of(weather_agent(), Case(name="x", input="hi"), GoalOutcome())
    assert (result.passed, result.reason) == (False, "the session has no goal")


@pytest.mark.parametrize(
    ("args", "passed"),
    [
        ({"city": {"$regex": "^Pa"}}, True),
        ({"city": {"$regex": "^Ro"}}, False),
        ({"city": {"$in": ["Paris", "Lyon"]}}, True),
        ({"city": {"$contains": "ari"}}, True),
        ({"city": {"$any": True}}, True),
        ({"city": "Paris", "units": "C"}, False),
        ({"city": lambda v: v.startswith("P")}, True),
    ],
)
async def test_argument_matchers(args: dict[str, Any], passed: bool) -> None:
    calls = [ToolCallSpec(name="weather", args=args), ToolCallSpec(name="weather")]
    (result,) = await results_of(
        weather_agent(), Case(name="w", input="weather"), ToolTrajectory(calls=calls)
    )
    assert result.passed is passed


async def test_exact_arguments_allow_no_others() -> None:
    exact = ToolCallSpec(name="weather", args={}, args_mode="exact")
    subset = ToolCallSpec(name="weather", args={})
    results = await results_of(
        weather_agent(),
        Case(name="w", input="weather"),
        ToolTrajectory(calls=[exact], mode="in_order", label="exact"),
        ToolTrajectory(calls=[subset], mode="in_order", label="subset"),
    )
    assert [r.passed for r in results] == [False, True]


async def test_budget_counts_steps_requests_tokens_cost_and_latency() -> None:
    prices = PriceTable({"test:function": ModelPrice(input="1000000", output="1000000")})
    case = Case(name="w", input="weather", turns=["weather again"])
    results = await results_of(
        weather_agent(),
        case,
        Budget(max_steps=4, max_requests=4, max_latency=30, label="ok"),
        Budget(max_steps=3, label="steps"),
        Budget(max_tokens=1, label="tokens"),
        Budget(max_cost=0.000001, label="cost"),
        prices=prices,
    )
    assert [(r.name, r.passed) for r in results] == [
        ("ok", True),
        ("steps", False),
        ("tokens", False),
        ("cost", False),
    ]
    assert results[1].reason == "steps 4 > 3"


async def test_a_cost_budget_without_prices_fails_saying_why() -> None:
    (result,) = await results_of(weather_agent(), Case(name="x", input="hi"), Budget(max_cost=1))
    assert result.reason is not None and "prices" in result.reason


async def test_custom_checks_sync_or_async() -> None:
    async def slow(ctx: EvalContext) -> float:
        return 0.4

    def boom(ctx: EvalContext) -> bool:
        raise ValueError("no")

    results = await results_of(
        weather_agent(),
        Case(name="x", input="hi", metadata={"want": "echo"}),
        Check(lambda ctx: ctx.case.metadata["want"] in ctx.text, name="meta"),
        Check(slow),
        Check(slow, name="lenient", threshold=0.3),
        Check(lambda ctx: (False, "because"), name="pair"),
        Check(lambda ctx: None, name="skipped"),
        Check(boom),
    )
    assert [(r.name, r.score, r.passed, r.reason) for r in results] == [
        ("meta", 1.0, True, None),
        ("slow", 0.4, False, None),
        ("lenient", 0.4, True, None),
        ("pair", 0.0, False, "because"),
        ("boom", 0.0, False, "raised ValueError: no"),
    ]


async def test_events_are_recorded_only_when_an_evaluator_needs_them() -> None:
    seen: list[Any] = []

    class Events(Evaluator):
        def __init__(self, needs: bool) -> None:
            self._needs = needs

        @property
        def name(self) -> str:
            return f"events {self._needs}"

        @property
        def needs_events(self) -> bool:
            return self._needs

        async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
            seen.append(None if ctx.events is None else [type(e).__name__ for e in ctx.events])
            return None

    await results_of(weather_agent(), Case(name="x", input="hi"), Events(False))
    await results_of(weather_agent(), Case(name="x", input="hi"), Events(True))
    assert seen[0] is None
    assert seen[1][0] == "RunStarted" and seen[1][-1] == "RunFinished"
    assert "TextDelta" not in seen[1]  # deltas are not kept
