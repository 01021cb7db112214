"""Evaluate agents the way code is tested: a ``Dataset`` of ``Case`` values, evaluators that
score each run (answer, typed output, tool trajectory, budget, goal, an LLM judge, spans, or a
function of your own), ``evaluate`` to run the cases concurrently, each on a fresh session,
and a ``Report`` to print, save, export as JUnit XML and ``compare`` with the last one.

Everything runs offline on ``agentloop.testing``'s scripted models and emulated provider, and
on a real provider unchanged. The guide *Evaluating agents* walks through it.
"""

from __future__ import annotations

from ._base import Check as Check
from ._base import Evaluator as Evaluator
from ._case import Case as Case
from ._case import SimulatedUser as SimulatedUser
from ._case import ToolCallSpec as ToolCallSpec
from ._checks import Budget as Budget
from ._checks import Contains as Contains
from ._checks import Equals as Equals
from ._checks import GoalOutcome as GoalOutcome
from ._checks import OutputValid as OutputValid
from ._checks import Regex as Regex
from ._compare import Change as Change
from ._compare import Comparison as Comparison
from ._compare import compare as compare
from ._context import EvalContext as EvalContext
from ._context import SpanRecord as SpanRecord
from ._dataset import Dataset as Dataset
from ._evaluate import durable as durable
from ._evaluate import evaluate as evaluate
from ._judge import LLMJudge as LLMJudge
from ._judge import Verdict as Verdict
from ._pytest import assert_case as assert_case
from ._pytest import parametrize as parametrize
from ._report import CaseReport as CaseReport
from ._report import CaseRun as CaseRun
from ._report import Report as Report
from ._result import EvalResult as EvalResult
from ._spans import HasSpan as HasSpan
from ._spans import SpanCount as SpanCount
from ._trajectory import ToolTrajectory as ToolTrajectory

__all__ = [
    "Budget",
    "Case",
    "CaseReport",
    "CaseRun",
    "Change",
    "Check",
    "Comparison",
    "Contains",
    "Dataset",
    "Equals",
    "EvalContext",
    "EvalResult",
    "Evaluator",
    "GoalOutcome",
    "HasSpan",
    "LLMJudge",
    "OutputValid",
    "Regex",
    "Report",
    "SimulatedUser",
    "SpanCount",
    "SpanRecord",
    "ToolCallSpec",
    "ToolTrajectory",
    "Verdict",
    "assert_case",
    "compare",
    "durable",
    "evaluate",
    "parametrize",
]
