"""The evaluators a dataset file may list (by ``kind``), and any ``Evaluator`` in code."""

from __future__ import annotations

from typing import Annotated, TypeAlias

from pydantic import Field, InstanceOf
from pydantic.json_schema import SkipJsonSchema

from ._base import Evaluator
from ._checks import Budget, Contains, Equals, GoalOutcome, OutputValid, Regex
from ._judge import LLMJudge
from ._spans import HasSpan, SpanCount
from ._trajectory import ToolTrajectory

BuiltinSpec: TypeAlias = Annotated[
    Equals
    | Contains
    | Regex
    | OutputValid
    | ToolTrajectory
    | Budget
    | GoalOutcome
    | LLMJudge
    | HasSpan
    | SpanCount,
    Field(discriminator="kind"),
]

# A file lists built-in evaluators by kind; code may add any Evaluator (a Check, a class of
# its own), which a saved file cannot hold.
EvaluatorSpec: TypeAlias = BuiltinSpec | SkipJsonSchema[InstanceOf[Evaluator]]
