"""The pytest helper: a test per case of a dataset, each asserting that its case passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentloop import evals
from agentloop.evals import Case, Contains, Dataset
from tests.evals.support import weather_agent

pytestmark = pytest.mark.anyio

DATASET = Dataset(
    name="weather",
    cases=[
        Case(name="hello", input="hi", expected_output="echo: hi", tags=["quick"]),
        Case(name="weather", input="weather", expected_output="sunny"),
    ],
    evaluators=[Contains()],
)


@evals.parametrize(DATASET)
async def test_each_case_passes(case: Case) -> None:
    report = await evals.assert_case(weather_agent(), case, DATASET)
    assert report.name == case.name


@evals.parametrize(DATASET, tags=("quick",), argname="quick")
def test_tags_select_the_cases(quick: Case) -> None:
    assert quick.name == "hello"


async def test_a_failing_case_raises_an_assertion_error_saying_why() -> None:
    case = Case(name="wrong", input="hi", expected_output="bye")
    with pytest.raises(AssertionError) as caught:
        await evals.assert_case(weather_agent(), case, DATASET, repeat=2)
    assert str(caught.value) == (
        "case 'wrong' passed 0 of 2 runs (needs 100%):\n  contains: 'bye' not in echo: hi"
    )


async def test_min_pass_rate_tolerates_flaky_cases() -> None:
    case = Case(name="wrong", input="hi", expected_output="bye")
    report = await evals.assert_case(weather_agent(), case, DATASET, min_pass_rate=0.0)
    assert report.pass_rate == 0.0


def test_a_dataset_file_gives_test_ids_named_after_its_cases(tmp_path: Path) -> None:
    DATASET.save(tmp_path / "weather.yaml")
    (tmp_path / "test_suite.py").write_text(
        "from agentloop import evals\n\n"
        "@evals.parametrize('weather.yaml')\n"
        "def test_case(case):\n"
        "    assert case.input\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n0",
            "--collect-only",
            "-q",
            "test_suite.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "test_suite.py::test_case[hello]" in done.stdout, done.stdout + done.stderr
    assert "test_suite.py::test_case[weather]" in done.stdout
