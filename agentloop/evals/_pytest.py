"""pytest helpers: a test per case of a dataset, and an assertion that a case passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import Agent, UserError
from ._base import Evaluator
from ._case import Case
from ._dataset import Dataset
from ._evaluate import Target, evaluate
from ._report import CaseReport


def parametrize(
    dataset: Dataset | str | Path, *, argname: str = "case", tags: tuple[str, ...] = ()
) -> Any:
    """``@evals.parametrize(dataset)``: the test runs once per case, named after it, with the
    ``Case`` as its ``case`` argument.

    Args:
        dataset: The dataset, or its file.
        argname: The test's parameter that receives the case.
        tags: Only the cases with one of these tags.
    """
    try:
        import pytest
    except ImportError:  # pragma: no cover - pytest runs this
        raise UserError("evals.parametrize is for pytest: pip install pytest") from None
    if not isinstance(dataset, Dataset):
        dataset = Dataset.load(dataset)
    cases = dataset.select(tags=tags).cases
    return pytest.mark.parametrize(argname, cases, ids=[c.name for c in cases])


async def assert_case(
    target: Agent[Any, Any] | Target,
    case: Case,
    dataset: Dataset | None = None,
    *,
    evaluators: tuple[Evaluator, ...] = (),
    repeat: int = 1,
    min_pass_rate: float = 1.0,
    **options: Any,
) -> CaseReport:
    """Run one case with its dataset's evaluators (and ``evaluators``); ``AssertionError``
    saying why unless its pass rate reaches ``min_pass_rate``. Returns the case's report.

    Args:
        target: The agent, or ``(message, session) -> RunResult``.
        case: The case.
        dataset: Its dataset, for its evaluators.
        evaluators: More evaluators.
        repeat: Runs of the case.
        min_pass_rate: The share of runs that must pass.
        **options: Passed to ``evaluate`` (``timeout``, ``prices``, ``judge_model``, …).
    """
    checks = list(dataset.evaluators) if dataset is not None else []
    name = dataset.name if dataset is not None else "dataset"
    one = Dataset(name=name, cases=[case], evaluators=checks)
    report = await evaluate(target, one, evaluators=evaluators, repeat=repeat, **options)
    result = report.cases[0]
    if result.pass_rate < min_pass_rate:
        passed = sum(r.passed for r in result.runs)
        why = "\n".join(f"  {line}" for line in result.errors())
        raise AssertionError(
            f"case {case.name!r} passed {passed} of {len(result.runs)} runs "
            f"(needs {min_pass_rate:.0%}):\n{why}"
        )
    return result
