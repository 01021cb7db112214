"""The built-in checks of a run's answer, budget and goal."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from .. import AttemptDiscarded
from ..goals import get_goal_record
from ._base import Builtin
from ._context import EvalContext
from ._result import EvalResult

_SHOWN = 200  # characters of a value shown in a reason


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _failed_run(ctx: EvalContext) -> str | None:
    result = ctx.result
    if result is None:
        return "the case has no result"
    if result.error is not None:
        return f"the run ended with {result.error.kind}: {result.error.message}"
    if result.pending:
        return "the run waits on decisions"
    return None


class Equals(Builtin):
    """The output equals ``value``, else the case's ``expected_output`` (skipped when neither
    is given). Typed outputs compare as JSON, so a dataset file can hold them.

    Attributes:
        kind: ``equals``.
        value: The expected output (default: the case's).
    """

    kind: Literal["equals"] = "equals"
    value: Any = None

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        expected = ctx.case.expected_output if self.value is None else self.value
        if expected is None:
            return None
        if (why := _failed_run(ctx)) is not None:
            return self._result(False, why)
        actual = to_jsonable_python(ctx.output)
        if actual == to_jsonable_python(expected):
            return self._result(True)
        return self._result(False, f"expected {_show(expected)}, got {_show(actual)}")


class Contains(Builtin):
    """The answer's text contains ``value``, else the case's ``expected_output`` (text only).

    Attributes:
        kind: ``contains``.
        value: The text to find (default: the case's expected output).
        case_sensitive: Whether case matters.
    """

    kind: Literal["contains"] = "contains"
    value: str | None = None
    case_sensitive: bool = True

    def default_name(self) -> str:
        return "contains" if self.value is None else f"contains({self.value!r})"

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        expected = ctx.case.expected_output if self.value is None else self.value
        if not isinstance(expected, str):
            return None
        text = ctx.text
        found = expected in text if self.case_sensitive else expected.lower() in text.lower()
        if found:
            return self._result(True)
        return self._result(False, f"{expected!r} not in {_show(text)}")


class Regex(Builtin):
    """The answer's text matches ``pattern`` (``re.search``).

    Attributes:
        kind: ``regex``.
        pattern: A Python regular expression.
        ignore_case: Match without regard to case.
    """

    kind: Literal["regex"] = "regex"
    pattern: str
    ignore_case: bool = False

    def default_name(self) -> str:
        return f"regex({self.pattern!r})"

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        flags = re.IGNORECASE if self.ignore_case else 0
        if re.search(self.pattern, ctx.text, flags):
            return self._result(True)
        return self._result(False, f"/{self.pattern}/ does not match {_show(ctx.text)}")


class OutputValid(Builtin):
    """The run answered with a value of the agent's ``output_type`` (text for an agent
    without one): no ``output_invalid`` or other error, and the value validates.

    Attributes:
        kind: ``output_valid``.
    """

    kind: Literal["output_valid"] = "output_valid"

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        if (why := _failed_run(ctx)) is not None:
            return self._result(False, why)
        kind = ctx.output_type if ctx.output_type is not None else str
        try:
            TypeAdapter(kind).validate_python(ctx.output)
        except ValidationError as exc:
            return self._result(False, f"not a {getattr(kind, '__name__', kind)}: {exc}")
        return self._result(True)


class Budget(Builtin):
    """The run stayed within each limit given (all turns of the case added up).

    Attributes:
        kind: ``budget``.
        max_steps: Steps (model turns that were kept).
        max_requests: Model requests, retried and discarded attempts included.
        max_tokens: Input and output tokens.
        max_input_tokens: Input tokens.
        max_output_tokens: Output tokens.
        max_cost: Cost, in the price table's currency (needs ``evaluate(prices=...)``).
        max_latency: Seconds from the first message to the last answer.
    """

    kind: Literal["budget"] = "budget"
    max_steps: int | None = Field(default=None, ge=0)
    max_requests: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)
    max_input_tokens: int | None = Field(default=None, ge=0)
    max_output_tokens: int | None = Field(default=None, ge=0)
    max_cost: float | None = Field(default=None, ge=0)
    max_latency: float | None = Field(default=None, gt=0)

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        usage = ctx.usage
        used: dict[str, tuple[float | None, float | None]] = {
            "steps": (len(ctx.steps), self.max_steps),
            "requests": (usage.requests, self.max_requests),
            "tokens": (usage.total_tokens, self.max_tokens),
            "input tokens": (usage.input_tokens, self.max_input_tokens),
            "output tokens": (usage.output_tokens, self.max_output_tokens),
            "cost": (ctx.cost, self.max_cost),
            "latency": (ctx.latency, self.max_latency),
        }
        over: list[str] = []
        for what, (value, limit) in used.items():
            if limit is None:
                continue
            if value is None:
                over.append(f"{what} unknown (evaluate(prices=...) prices the runs)")
            elif value > limit:
                over.append(f"{what} {value:g} > {limit:g}")
        if self.max_cost is not None and ctx.cost is not None and not ctx.cost_complete:
            over.append("cost incomplete (a model without a price, or unreported usage)")
        return self._result(not over, "; ".join(over) or None)


class GoalOutcome(Builtin):
    """The session's goal (``agentloop.goals``) ended as ``status``, and goal enforcement
    intercepted a final-looking answer at most ``max_interceptions`` times.

    Attributes:
        kind: ``goal``.
        status: The goal's status at the end: ``complete``, ``blocked`` or ``active``.
        max_interceptions: The most answers enforcement may have withdrawn (``None``: any);
            counting them records the run's events.
        state_key_prefix: As ``GoalOptions.state_key_prefix``.
    """

    kind: Literal["goal"] = "goal"
    status: Literal["complete", "blocked", "active"] = "complete"
    max_interceptions: int | None = Field(default=None, ge=0)
    state_key_prefix: str = "goal"

    @property
    def needs_events(self) -> bool:
        return self.max_interceptions is not None

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        result = ctx.result
        if result is None:
            return self._result(False, "the case has no result")
        goal = get_goal_record(
            result.state or {}, branch=result.branch, prefix=self.state_key_prefix
        )
        problems: list[str] = []
        if goal is None:
            problems.append("the session has no goal")
        elif goal.status.value != self.status:
            problems.append(f"the goal is {goal.status.value}, not {self.status}")
        if self.max_interceptions is not None:
            if ctx.events is None:
                problems.append("interceptions unknown: the run's events were not recorded")
            else:
                n = sum(
                    1 for e in ctx.events if isinstance(e, AttemptDiscarded) and e.reason == "goal"
                )
                if n > self.max_interceptions:
                    problems.append(f"intercepted {n} times (> {self.max_interceptions})")
        return self._result(not problems, "; ".join(problems) or None)
