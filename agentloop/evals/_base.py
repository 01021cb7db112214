"""The evaluator seam: ``Evaluator`` (what every check implements) and ``Check`` (a function)."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from .. import UserError
from ._case import Case
from ._context import EvalContext
from ._result import EvalResult


class Evaluator(ABC):
    """Scores one run of a case: ``await evaluate(ctx)`` returns an ``EvalResult``, or ``None``
    when it does not apply (an ``Equals`` without an expected value): a skipped check counts
    neither way.

    ``needs_events`` and ``needs_spans`` ask ``evaluate`` to record the run's events or its
    OpenTelemetry spans for ``ctx.events`` and ``ctx.spans`` (each costs a little per run, so
    only the runs of datasets with such evaluators pay it).
    """

    @property
    def name(self) -> str:
        """Names the check in reports (unique within a dataset's evaluators)."""
        return type(self).__name__

    @property
    def needs_events(self) -> bool:
        return False

    @property
    def needs_spans(self) -> bool:
        return False

    def applies_to(self, case: Case) -> bool:
        """Whether it scores ``case`` (every case, unless it says otherwise).

        Args:
            case: The case.
        """
        return True

    @abstractmethod
    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        """Score the run.

        Args:
            ctx: The run of the case.
        """


class Builtin(BaseModel, Evaluator):
    """A built-in evaluator: a pydantic model, so datasets can list it in YAML or JSON by its
    ``kind``.

    Attributes:
        label: Its name in reports (default: from its kind and settings).
        tags: Score only the cases with one of these tags (none: every case).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str | None = None
    tags: list[str] = Field(default_factory=list)

    def applies_to(self, case: Case) -> bool:
        return not self.tags or not set(self.tags).isdisjoint(case.tags)

    @property
    def name(self) -> str:
        return self.label or self.default_name()

    def default_name(self) -> str:
        kind: str = getattr(self, "kind", type(self).__name__)
        return kind

    def _result(self, passed: bool, reason: str | None = None) -> EvalResult:
        return EvalResult.of(self.name, passed, reason)


CheckValue: TypeAlias = "bool | float | EvalResult | tuple[bool, str] | None"


class Check(Evaluator):
    """A custom check: a sync or async function of the ``EvalContext``.

    It returns ``True``/``False``, a score from 0 to 1 (passing at ``threshold``), a
    ``(passed, reason)`` pair, an ``EvalResult``, or ``None`` (does not apply). An exception it
    raises fails the check, with the exception as the reason.

    Args:
        function: The check.
        name: Its name in reports (default: the function's).
        threshold: The lowest score that passes.
    """

    def __init__(
        self,
        function: Callable[[EvalContext], CheckValue | Awaitable[CheckValue]],
        *,
        name: str | None = None,
        threshold: float = 1.0,
    ) -> None:
        if not callable(function):
            raise UserError(f"Check needs a function, not {function!r}")
        if not 0.0 <= threshold <= 1.0:
            raise UserError("Check threshold must be from 0 to 1")
        self._function = function
        self._name: str = name or getattr(function, "__name__", None) or "check"
        self._threshold = threshold

    @property
    def name(self) -> str:
        return self._name

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        value: Any = self._function(ctx)
        if inspect.isawaitable(value):
            value = await value
        if value is None or isinstance(value, EvalResult):
            return value
        if isinstance(value, bool):
            return EvalResult.of(self._name, value)
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool):
            return EvalResult.of(self._name, value[0], str(value[1]))
        if isinstance(value, int | float):
            score = min(1.0, max(0.0, float(value)))
            return EvalResult(name=self._name, score=score, passed=score >= self._threshold)
        raise TypeError(
            f"check {self._name!r} returned {type(value).__name__}: return a bool, a score, "
            "(passed, reason), an EvalResult or None"
        )

    def __repr__(self) -> str:
        return f"Check({self._name!r})"
