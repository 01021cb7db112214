"""``evaluate``: concurrency, isolation, repeat, deadlines, and cases that fail or raise."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from agentloop import Agent, ModelRequest, RunResult, UserError
from agentloop.evals import Case, Check, Contains, Dataset, EvalContext, Report, evaluate
from agentloop.sessions import InMemoryStore
from agentloop.testing import FunctionModel
from tests.evals.support import weather_agent

pytestmark = pytest.mark.anyio


async def test_a_failing_raising_or_hanging_case_never_stops_the_others() -> None:
    dataset = Dataset(
        cases=[
            Case(name="ok", input="hi", expected_output="echo: hi"),
            Case(name="raises", input="boom"),
            Case(name="hangs", input="slow"),
            Case(name="wrong", input="hi", expected_output="echo: bye"),
            Case(name="ok too", input="hey", expected_output="echo: hey"),
        ],
        evaluators=[Contains()],
    )
    report = await evaluate(weather_agent(), dataset, timeout=0.5, concurrency=2)
    assert {c.name: c.pass_rate for c in report.cases} == {
        "ok": 1.0,
        "raises": 0.0,
        "hangs": 0.0,
        "wrong": 0.0,
        "ok too": 1.0,
    }
    assert report.case("raises").runs[0].error == "RuntimeError: the model broke"
    assert report.case("hangs").runs[0].error == "timed out after 0.5s"
    assert report.case("hangs").runs[0].results == []  # no evaluator scores a run that failed
    assert not report.passed


async def test_concurrency_bounds_the_runs_in_flight() -> None:
    running = 0
    most = 0

    async def reply(request: ModelRequest) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await anyio.sleep(0.01)
        running -= 1
        return "ok"

    agent = Agent(FunctionModel(reply))
    dataset = Dataset(cases=[Case(name=str(i), input="x") for i in range(12)])
    report = await evaluate(agent, dataset, concurrency=3, repeat=2)
    assert most == 3
    assert report.runs == 24 and report.pass_rate == 1.0


async def test_repeat_gives_each_case_a_pass_rate() -> None:
    """A flaky agent: every third answer is wrong. With repeat the flakiness shows as a rate."""
    counter = itertools.count()
    agent = Agent(FunctionModel(lambda request: "no" if next(counter) % 3 == 2 else "yes"))
    dataset = Dataset(cases=[Case(name="flaky", input="x")], evaluators=[Contains(value="yes")])
    report = await evaluate(agent, dataset, repeat=6, concurrency=1)
    case = report.case("flaky")
    assert [r.repetition for r in case.runs] == [0, 1, 2, 3, 4, 5]
    assert case.pass_rate == pytest.approx(4 / 6)
    assert case.rate("contains('yes')") == pytest.approx(4 / 6)


def remembers(request: ModelRequest) -> str:
    """Answers with every user message it was shown, so memory across turns is visible."""
    return " | ".join(m.text for m in request.messages if m.role == "user")


async def test_each_run_of_a_case_has_a_fresh_session_and_its_turns_share_it() -> None:
    agent = Agent(FunctionModel(remembers))
    dataset = Dataset(
        cases=[
            Case(name="a", input="I am Ada", turns=["who am I?"]),
            Case(name="b", input="I am Bob", turns=["who am I?"]),
        ]
    )
    seen: list[tuple[str, int, str, int]] = []

    def record(ctx: EvalContext) -> bool:
        seen.append((ctx.case.name, ctx.repetition, ctx.text, len(ctx.results)))
        return True

    await evaluate(agent, dataset, evaluators=[Check(record)], repeat=2)
    assert sorted(seen) == [
        ("a", 0, "I am Ada | who am I?", 2),
        ("a", 1, "I am Ada | who am I?", 2),
        ("b", 0, "I am Bob | who am I?", 2),
        ("b", 1, "I am Bob | who am I?", 2),
    ]


async def test_the_agents_own_store_holds_the_sessions() -> None:
    async with InMemoryStore() as store:
        agent = Agent(FunctionModel(remembers), store=store)
        await evaluate(agent, Dataset(cases=[Case(name="a", input="x", turns=["y"])]))
        (info,) = await store.list()
        assert info.id.startswith("eval-")


async def test_a_case_of_one_message_runs_on_a_session_only_in_the_agents_store() -> None:
    dataset = Dataset(cases=[Case(name="a", input="x"), Case(name="b", input="y")])
    async with InMemoryStore() as store:
        await evaluate(Agent(FunctionModel(remembers), store=store), dataset)
        assert len(await store.list()) == 2
    sessions: list[str] = []

    async def target(message: Any, session: str) -> RunResult[Any]:
        sessions.append(session)
        return await Agent(FunctionModel(remembers)).run(message)

    await evaluate(target, dataset)
    assert len(set(sessions)) == 2 and all(s.startswith("eval-") for s in sessions)


async def test_a_failed_turn_ends_the_conversation() -> None:
    agent = weather_agent(max_steps=1)  # the weather calls need a second step
    dataset = Dataset(cases=[Case(name="a", input="weather", turns=["hi"])])
    report = await evaluate(agent, dataset)
    (run,) = report.case("a").runs
    assert run.turns == 1 and run.passed  # no evaluator: the run still finished


async def test_a_function_target_plays_each_turn() -> None:
    calls: list[tuple[str, str]] = []
    agent = weather_agent()

    async def target(message: Any, session: str) -> RunResult[Any]:
        calls.append((message, session))
        return await agent.run(message)

    dataset = Dataset(
        cases=[Case(name="a", input="hi", turns=["there"], expected_output="echo: there")]
    )
    report = await evaluate(target, dataset, evaluators=[Contains()])
    assert report.passed
    assert [m for m, _ in calls] == ["hi", "there"]
    assert calls[0][1] == calls[1][1]


async def test_cancelling_evaluate_cancels_its_runs() -> None:
    dataset = Dataset(cases=[Case(name=str(i), input="slow") for i in range(4)])
    with anyio.move_on_after(0.2) as scope:
        await evaluate(weather_agent(), dataset, timeout=None)
    assert scope.cancelled_caught


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"repeat": 0}, "repeat"),
        ({"timeout": 0}, "timeout"),
        ({"evaluators": [Contains(value="x"), Contains(value="x")]}, "share a name"),
    ],
)
async def test_wrong_options_are_user_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        await evaluate(weather_agent(), Dataset(cases=[Case(name="a", input="x")]), **options)


async def test_not_a_target_is_a_user_error() -> None:
    with pytest.raises(UserError, match="TemporalAgent"):
        await evaluate(object(), Dataset(cases=[Case(name="a", input="x")]))  # type: ignore[arg-type]


async def test_the_report_records_each_run() -> None:
    dataset = Dataset(cases=[Case(name="w", input="weather")])
    report = await evaluate(weather_agent(), dataset)
    assert isinstance(report, Report)
    (run,) = report.case("w").runs
    assert run.tool_calls == ["weather", "weather"]
    assert (run.turns, run.steps, run.requests) == (1, 2, 2)
    assert run.text == "Paris and Rome are sunny (weather)"
    assert run.output == run.text


async def test_a_timeout_error_of_the_run_is_not_the_cases_deadline() -> None:
    async def target(message: Any, session: str) -> RunResult[Any]:
        raise TimeoutError("the tool's socket")

    report = await evaluate(target, Dataset(cases=[Case(name="a", input="x")]), timeout=5)
    assert report.cases[0].runs[0].error == "TimeoutError: the tool's socket"


async def test_a_hanging_evaluator_times_out_and_the_others_still_score() -> None:
    async def hangs(ctx: EvalContext) -> bool:
        await anyio.sleep_forever()
        return True

    dataset = Dataset(cases=[Case(name="a", input="hi", expected_output="echo: hi")])
    report = await evaluate(
        weather_agent(), dataset, evaluators=[Check(hangs), Contains()], timeout=0.2
    )
    assert [(r.name, r.passed, r.reason) for r in report.cases[0].runs[0].results] == [
        ("hangs", False, "timed out after 0.2s"),
        ("contains", True, None),
    ]
