"""LLM-as-judge on a scripted judge model, and simulated users on one session."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import Agent, ModelRequest
from agentloop.evals import (
    Case,
    Check,
    Dataset,
    EvalContext,
    LLMJudge,
    SimulatedUser,
    evaluate,
)
from agentloop.testing import FunctionModel, ScriptedModel
from tests.evals.support import weather_agent

pytestmark = pytest.mark.anyio

VERDICT = '{"passed": true, "score": 0.75, "reason": "it answers politely"}'


async def only_run(agent: Agent[Any, Any], case: Case, *checks: Any, **options: Any) -> Any:
    report = await evaluate(agent, Dataset(cases=[case]), evaluators=checks, **options)
    (run,) = report.cases[0].runs
    return run


async def test_the_judge_reads_the_conversation_the_expected_answer_and_the_rubric() -> None:
    judge = ScriptedModel([VERDICT])
    case = Case(name="hi", input="hello", expected_output="a greeting")
    run = await only_run(weather_agent(), case, LLMJudge(rubric="Be polite.", model=judge))
    (result,) = run.results
    assert (result.name, result.score, result.passed, result.reason) == (
        "llm_judge",
        0.75,
        True,
        "it answers politely",
    )
    (request,) = judge.requests
    prompt = request.messages[-1].text
    assert "USER: hello\nAGENT: echo: hello" in prompt
    assert "# Expected answer\na greeting" in prompt
    assert prompt.endswith("# Rubric\nBe polite.")
    assert "grade an AI agent" in (request.system or "")


async def test_a_threshold_decides_from_the_score() -> None:
    judge = FunctionModel(lambda request: VERDICT)
    strict = LLMJudge(rubric="r", model=judge, threshold=0.8, label="strict")
    lenient = LLMJudge(rubric="r", model=judge, threshold=0.5, label="lenient")
    run = await only_run(weather_agent(), Case(name="x", input="x"), strict, lenient)
    assert [(r.name, r.passed) for r in run.results] == [("strict", False), ("lenient", True)]


async def test_a_judge_without_a_verdict_fails_the_check() -> None:
    judge = FunctionModel(lambda request: "I think it is fine")
    run = await only_run(
        weather_agent(), Case(name="x", input="x"), LLMJudge(rubric="r", model=judge)
    )
    (result,) = run.results
    assert not result.passed
    assert result.reason is not None and result.reason.startswith("the judge gave no verdict")


async def test_the_judge_model_may_come_from_evaluate() -> None:
    judge = FunctionModel(lambda request: VERDICT)
    run = await only_run(
        weather_agent(), Case(name="x", input="x"), LLMJudge(rubric="r"), judge_model=judge
    )
    assert run.results[0].passed
    run = await only_run(weather_agent(), Case(name="x", input="x"), LLMJudge(rubric="r"))
    assert run.results[0].reason.startswith("raised UserError: LLMJudge has no model")


def customer(request: ModelRequest) -> str:
    """A simulated customer: asks for a refund, gives the order number, then is done."""
    said = sum(1 for m in request.messages if m.role == "assistant")
    return ["I want a refund", "Order 42", "Thanks! DONE"][min(said, 2)]


def support(request: ModelRequest) -> str:
    """The agent under test: remembers every user message of its session."""
    users = [m.text for m in request.messages if m.role == "user"]
    return f"heard {len(users)}: {users[-1]}"


async def test_a_simulated_user_talks_until_it_says_its_stop_phrase() -> None:
    agent = Agent(FunctionModel(support))
    user = SimulatedUser(instructions="You bought a broken kettle.", max_turns=5)
    transcripts: list[tuple[tuple[str, str], ...]] = []

    def record(ctx: EvalContext) -> bool:
        transcripts.append(ctx.transcript)
        return len(ctx.results) == 2

    customer_model = FunctionModel(customer)
    run = await only_run(
        agent, Case(name="refund", user=user), Check(record), user_model=customer_model
    )
    assert run.passed and run.turns == 2
    assert transcripts == [
        (
            ("user", "I want a refund"),
            ("agent", "heard 1: I want a refund"),
            ("user", "Order 42"),
            ("agent", "heard 2: Order 42"),  # one session: the agent remembers the first turn
        )
    ]
    first, _, third = customer_model.requests
    assert "You bought a broken kettle." in (first.system or "")
    assert "reply with DONE alone" in (first.system or "")
    # The roles swap: the agent's replies are the simulated user's input.
    assert [(m.role, m.text) for m in third.messages if m.role != "system"] == [
        ("assistant", "I want a refund"),
        ("user", "heard 1: I want a refund"),
        ("assistant", "Order 42"),
        ("user", "heard 2: Order 42"),
    ]


async def test_a_simulated_user_stops_at_max_turns_and_starts_from_the_input() -> None:
    agent = Agent(FunctionModel(support))
    user = SimulatedUser(instructions="i", max_turns=2, stop="NEVER")
    talker = FunctionModel(lambda request: "more")
    run = await only_run(agent, Case(name="c", input="hello", user=user), user_model=talker)
    assert run.turns == 2
    assert run.text == "heard 2: more"
    assert len(talker.requests) == 1  # the input was the first message; max_turns ends it


async def test_until_ends_the_conversation_early() -> None:
    agent = Agent(FunctionModel(support))
    user = SimulatedUser(
        instructions="i", max_turns=10, stop="NEVER", until=lambda t: "heard 3" in t[-1][1]
    )
    run = await only_run(
        agent, Case(name="c", input="a", user=user), user_model=FunctionModel(lambda r: "b")
    )
    assert run.turns == 3


async def test_a_simulated_user_needs_a_model() -> None:
    run = await only_run(weather_agent(), Case(name="c", user=SimulatedUser(instructions="i")))
    assert run.error is not None and "needs a model" in run.error


async def test_the_simulated_users_model_may_be_a_string() -> None:
    user = SimulatedUser(instructions="i", max_turns=2, model="test:echo")
    run = await only_run(Agent(FunctionModel(support)), Case(name="c", input="ping", user=user))
    assert run.turns == 2  # the echo model repeats the agent's reply back to it
    assert run.text == "heard 2: heard 1: ping"
