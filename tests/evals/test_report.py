"""Reports: the table, JSON, JUnit XML, and ``compare``."""

from __future__ import annotations

import io
import itertools
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from agentloop import Agent, ModelPrice, PriceTable
from agentloop.evals import Case, Contains, Dataset, Equals, Report, compare, evaluate
from agentloop.testing import FunctionModel
from tests.evals.support import weather_agent

pytestmark = pytest.mark.anyio

DATASET = Dataset(
    name="smoke",
    cases=[
        Case(name="hi", input="hi", expected_output="echo: hi"),
        Case(name="weather", input="weather", expected_output="Paris"),
        Case(name="broken", input="boom"),
    ],
    evaluators=[Equals(), Contains()],
)
PRICES = PriceTable({"test:function": ModelPrice(input="1", output="2")})


async def report_of(agent: Agent | None = None, **options: object) -> Report:
    return await evaluate(agent or weather_agent(), DATASET, prices=PRICES, **options)  # type: ignore[arg-type]


async def test_the_table_shows_pass_rates_per_case_and_evaluator() -> None:
    report = await report_of(repeat=2)
    rows = report.rows()
    assert rows[0] == ["case", "pass", "equals", "contains", "latency", "cost"]
    assert [r[:4] for r in rows[1:]] == [
        ["hi", "100%", "100%", "100%"],
        ["weather", "0%", "0%", "100%"],
        ["broken", "0%", "-", "-"],
        ["all", "33%", "50%", "100%"],
    ]
    text = report.render()
    assert text.startswith("smoke: 33% of 6 runs passed\n")
    assert "broken:\n  RuntimeError: the model broke" in text
    assert "weather:\n  equals: expected Paris, got Paris and Rome are sunny (weather)" in text
    cost = report.case("hi").cost
    assert cost is not None and cost > 0


async def test_print_uses_rich_when_installed() -> None:
    report = await report_of()
    out = io.StringIO()
    report.print(Console(file=out, width=120, color_system=None))
    printed = out.getvalue()
    assert "smoke: 33% of 3 runs passed" in printed
    assert "┃ case" in printed and "RuntimeError: the model broke" in printed


async def test_a_report_saves_and_loads_as_json(tmp_path: Path) -> None:
    report = await report_of()
    path = tmp_path / "report.json"
    report.save(path)
    loaded = Report.load(path)
    assert loaded == report
    assert loaded.rows() == report.rows()
    assert report.to_json()["cases"][0]["runs"][0]["results"][0]["name"] == "equals"


async def test_junit_xml_has_a_test_case_per_case() -> None:
    report = await report_of(repeat=2)
    root = ET.fromstring(report.junit_xml())
    (suite,) = root
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("smoke", "3", "2")
    cases = {c.get("name"): c for c in suite}
    assert cases["hi"].find("failure") is None
    failure = cases["broken"].find("failure")
    assert failure is not None
    assert failure.get("message") == "passed 0 of 2 runs"
    assert failure.text == "RuntimeError: the model broke"


async def test_compare_shows_regressions_improvements_and_cost_and_latency() -> None:
    old = await report_of()
    answers = itertools.cycle(["echo: nope", "Paris"])

    def reply(request: object) -> str:
        return next(answers)

    newer = Agent(FunctionModel(reply, name="function"))
    dataset = DATASET.model_copy(
        update={"cases": [*DATASET.cases[:2], Case(name="new", input="x")]}
    )
    new = await evaluate(newer, dataset, prices=PRICES, concurrency=1, name="newer")
    diff = compare(old, new)
    assert [c.describe() for c in diff.regressions] == [
        "hi: 100% -> 0%",
        "hi / equals: 100% -> 0%",
        "hi / contains: 100% -> 0%",
    ]
    assert [c.describe() for c in diff.improvements] == [
        "weather: 0% -> 100%",
        "weather / equals: 0% -> 100%",
    ]
    assert (diff.added, diff.removed) == (["new"], ["broken"])
    assert diff.regressed
    assert diff.cost_change is not None and diff.cost_change < 0  # shorter prompts
    text = diff.render()
    assert text.startswith("smoke -> newer: pass rate +")
    assert "regressions:\n  hi: 100% -> 0%" in text
    assert "new cases: new" in text and "removed cases: broken" in text


async def test_compare_of_a_report_with_itself_is_empty() -> None:
    report = await report_of()
    diff = compare(report, report)
    assert (diff.regressions, diff.improvements, diff.added, diff.removed) == ([], [], [], [])
    assert diff.latency_change == 0.0 and diff.cost_change == 0.0
