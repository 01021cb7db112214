"""Span-based evaluators over the OpenTelemetry spans of each case's runs."""

from __future__ import annotations

import pytest

from agentloop.evals import Case, Check, Dataset, EvalContext, HasSpan, SpanCount, evaluate
from tests.evals.support import weather_agent

pytestmark = pytest.mark.anyio


async def test_span_evaluators_see_the_runs_spans() -> None:
    checks = [
        HasSpan(name_contains="execute_tool", attributes={"gen_ai.tool.name": "weather"}),
        HasSpan(name_contains="execute_tool clock", absent=True),
        SpanCount(name_contains="execute_tool", min=2, max=2, label="two tools"),
        SpanCount(name_contains="chat", max=1, label="one model call"),
        SpanCount(name_is="invoke_agent weather", min=1, max=1, label="one run"),
    ]
    report = await evaluate(
        weather_agent(), Dataset(cases=[Case(name="w", input="weather")]), evaluators=checks
    )
    (run,) = report.cases[0].runs
    assert [(r.name, r.passed) for r in run.results] == [
        ("has_span(name~'execute_tool', gen_ai.tool.name='weather')", True),
        ("no_span(name~'execute_tool clock')", True),
        ("two tools", True),
        ("one model call", False),
        ("one run", True),
    ]
    assert run.results[3].reason == "2 spans match (name~'chat'), not in [, 1]"


async def test_concurrent_cases_each_see_only_their_own_spans() -> None:
    counts: dict[str, list[int]] = {}
    parents: set[str | None] = set()

    def record(ctx: EvalContext) -> bool:
        assert ctx.spans is not None
        runs = [s for s in ctx.spans if s.name.startswith("invoke_agent")]
        counts.setdefault(ctx.case.name, []).append(len(runs))
        parents.update(s.parent for s in runs)
        return True

    cases = [Case(name=f"c{i}", input="hi", turns=["again"] * i) for i in range(4)]
    await evaluate(
        weather_agent(),
        Dataset(cases=cases),
        evaluators=[Check(record), HasSpan(name_contains="invoke_agent")],
        concurrency=4,
        repeat=2,
    )
    assert counts == {"c0": [1, 1], "c1": [2, 2], "c2": [3, 3], "c3": [4, 4]}
    assert parents == {"eval_case c0", "eval_case c1", "eval_case c2", "eval_case c3"}


async def test_without_span_evaluators_no_spans_are_recorded() -> None:
    seen: list[object] = []
    await evaluate(
        weather_agent(),
        Dataset(cases=[Case(name="w", input="hi")]),
        evaluators=[Check(lambda ctx: seen.append(ctx.spans), name="spans")],
    )
    assert seen == [None]
