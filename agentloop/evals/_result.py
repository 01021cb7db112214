"""The typed outcome of an evaluator (``EvalResult``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvalResult(BaseModel):
    """What one evaluator says of one run of a case.

    Attributes:
        name: The evaluator's name.
        score: From 0 to 1 (a pass/fail check scores 1 or 0).
        passed: Whether the run passes this check.
        reason: Why, in words (shown for a failure).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    score: float = Field(ge=0.0, le=1.0)
    passed: bool
    reason: str | None = None

    @classmethod
    def of(cls, name: str, passed: bool, reason: str | None = None) -> EvalResult:
        """A pass/fail result (score 1 or 0).

        Args:
            name: The evaluator's name.
            passed: Whether it passed.
            reason: Why.
        """
        return cls(name=name, score=1.0 if passed else 0.0, passed=passed, reason=reason)
