"""``agentloop eval``: a dataset file against a module's agent, its report, JUnit XML,
``--compare``, and the progress bar on a terminal."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentloop.cli import main
from agentloop.evals import Report
from tests.cli._proc import run_in_terminal

APP = """
from agentloop import Agent
from agentloop.testing import FunctionModel

def reply(request):
    text = next(m.text for m in reversed(request.messages) if m.role == "user")
    return "Paris" if "capital" in text else "I do not know"

agent = Agent(FunctionModel(reply), name="geo")
"""

DATASET = """\
name: geo
cases:
  - name: capital
    input: What is the capital of France?
    expected_output: Paris
    tags: [easy]
  - name: river
    input: Which river runs through Paris?
    expected_output: Seine
evaluators:
  - kind: contains
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "geo.yaml").write_text(DATASET)
    return tmp_path


def test_eval_prints_the_table_and_exits_1_when_a_case_fails(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit, saved = suite / "junit.xml", suite / "report.json"
    args = ["eval", str(suite / "geo.yaml"), "--agent", f"{suite / 'app.py'}:agent"]
    code = main([*args, "--repeat", "2", "--junit", str(junit), "--report", str(saved)])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("geo: 50% of 4 runs passed\n")
    assert re.search(r"^capital +100% +100%", out, re.M)
    assert re.search(r"^river +0% +0%", out, re.M)
    assert "river:\n  contains: 'Seine' not in I do not know" in out
    suite_xml = ET.parse(junit).getroot()[0]
    assert (suite_xml.get("tests"), suite_xml.get("failures")) == ("2", "1")
    assert Report.load(saved).case("capital").pass_rate == 1.0


def test_eval_exits_0_when_every_run_passes(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", str(suite / "geo.yaml"), "--agent", f"{suite / 'app.py'}:agent"]
    assert main([*args, "--tag", "easy"]) == 0
    assert capsys.readouterr().out.startswith("geo: 100% of 1 runs passed")


def test_compare_shows_the_changes_and_a_regression_fails(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = suite / "before.json"
    args = ["eval", str(suite / "geo.yaml"), "--agent", f"{suite / 'app.py'}:agent"]
    main([*args, "--report", str(saved), "--tag", "easy"])
    capsys.readouterr()
    # --model swaps the agent's model: the echo model answers with the question.
    code = main([*args, "--tag", "easy", "--compare", str(saved), "-m", "test:echo"])
    out = capsys.readouterr().out
    assert code == 1
    assert "geo -> geo: pass rate -100%" in out
    assert "regressions:\n  capital: 100% -> 0%\n  capital / contains: 100% -> 0%" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.yaml", "--agent", "app.py:agent"], "no such file"),
        (["bad.yaml", "--agent", "app.py:agent"], "bad.yaml: 1 validation error"),
        (["geo.yaml", "--agent", "app.py:nothing"], "has no attribute 'nothing'"),
        (["geo.yaml", "--agent", "app.py:reply"], "is a function, not an Agent"),
    ],
)
def test_mistakes_are_one_line_and_exit_2(
    suite: Path,
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(suite)
    (suite / "bad.yaml").write_text(json.dumps({"cases": [{"name": "x"}]}))
    assert main(["eval", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentloop: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_a_terminal_shows_a_live_progress_bar_then_the_table(suite: Path) -> None:
    done = run_in_terminal(
        ["eval", str(suite / "geo.yaml"), "--agent", f"{suite / 'app.py'}:agent", "--repeat", "3"],
        env={"COLUMNS": "110"},
    )
    assert done.code == 1, done.err
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", done.out)
    assert "evaluating" in out  # the bar, drawn while the cases run
    assert "┃ case" in out and "geo: 50% of 6 runs passed" in out
