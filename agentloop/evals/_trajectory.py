"""Tool-trajectory matching: the calls the model made against the calls a case expects."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from .. import ActionResult
from ._base import Builtin
from ._case import ToolCallSpec
from ._context import EvalContext
from ._result import EvalResult

_MATCHERS = frozenset({"$any", "$regex", "$contains", "$in"})


def value_matches(expected: Any, actual: Any, mode: Literal["subset", "exact"]) -> bool:
    """Whether an actual argument value satisfies an expected one (a literal or a matcher)."""
    if callable(expected):
        return bool(expected(actual))
    if isinstance(expected, Mapping) and len(expected) == 1 and next(iter(expected)) in _MATCHERS:
        ((op, arg),) = expected.items()
        if op == "$any":
            return bool(arg)
        if op == "$regex":
            text = actual if isinstance(actual, str) else str(actual)
            return re.search(str(arg), text) is not None
        if op == "$contains":
            if isinstance(actual, str):
                return isinstance(arg, str) and arg in actual
            return isinstance(actual, list | tuple) and arg in actual
        return isinstance(arg, list) and actual in arg  # $in
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and args_match(expected, actual, mode)
    if isinstance(expected, list):
        return (
            isinstance(actual, list | tuple)
            and len(expected) == len(actual)
            and all(value_matches(e, a, mode) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual)


def args_match(
    expected: Mapping[str, Any], actual: Mapping[str, Any], mode: Literal["subset", "exact"]
) -> bool:
    if mode == "exact" and set(expected) != set(actual):
        return False
    return all(k in actual and value_matches(v, actual[k], mode) for k, v in expected.items())


def call_matches(spec: ToolCallSpec, call: ActionResult) -> bool:
    if spec.name != call.name or (spec.path is not None and spec.path != call.path):
        return False
    if spec.args is None:
        return True
    actual = call.input if isinstance(call.input, Mapping) else {}
    return args_match(spec.args, actual, spec.args_mode)


def _in_order(specs: Sequence[ToolCallSpec], calls: Sequence[ActionResult]) -> int:
    """The most expected calls matched in order by distinct actual calls (an LCS)."""
    previous = [0] * (len(calls) + 1)
    for spec in specs:
        row = [0] * (len(calls) + 1)
        for j, call in enumerate(calls, 1):
            row[j] = max(
                row[j - 1],
                previous[j],
                previous[j - 1] + 1 if call_matches(spec, call) else 0,
            )
        previous = row
    return previous[-1]


def _any_order(specs: Sequence[ToolCallSpec], calls: Sequence[ActionResult]) -> int:
    """The most expected calls matched to distinct actual calls (a bipartite matching: a
    loose spec must not take the one call a stricter spec needs)."""
    options = [[j for j, c in enumerate(calls) if call_matches(s, c)] for s in specs]
    owner: dict[int, int] = {}

    def assign(i: int, seen: set[int]) -> bool:
        for j in options[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or assign(owner[j], seen):
                owner[j] = i
                return True
        return False

    return sum(1 for i in range(len(specs)) if assign(i, set()))


def _names(calls: Sequence[ActionResult]) -> str:
    return "[" + ", ".join(c.name for c in calls) + "]"


class ToolTrajectory(Builtin):
    """The tool calls the model made match the expected ones (``calls``, else the case's
    ``expected_tools``; skipped when neither is given).

    The calls compared are in the order the model emitted them in its replies, step after
    step (``EvalContext.tool_calls``), not the order they started or finished in: actions run
    concurrently, and eagerly, each as soon as its part of the reply is sealed. Modes:

    - ``exact``: the same calls in the same order, no others;
    - ``in_order``: the expected calls appear in that order, others in between allowed;
    - ``any_order``: each expected call appears, in any order, others allowed.

    The score is the share of expected calls matched (for ``exact``, 1 or 0).

    Attributes:
        kind: ``tool_trajectory``.
        mode: ``exact``, ``in_order`` or ``any_order``.
        calls: The expected calls (default: the case's ``expected_tools``).
    """

    kind: Literal["tool_trajectory"] = "tool_trajectory"
    mode: Literal["exact", "in_order", "any_order"] = "exact"
    calls: list[ToolCallSpec] | None = None

    def default_name(self) -> str:
        return f"tool_trajectory({self.mode})"

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        specs = ctx.case.expected_tools if self.calls is None else self.calls
        if specs is None:
            return None
        calls = ctx.tool_calls
        if self.mode == "exact":
            ok = len(specs) == len(calls) and all(
                call_matches(s, c) for s, c in zip(specs, calls, strict=True)
            )
            matched = len(specs) if ok else 0
        else:
            count: Callable[..., int] = _in_order if self.mode == "in_order" else _any_order
            matched = count(specs, calls)
            ok = matched == len(specs)
        score = 1.0 if not specs else matched / len(specs)
        if self.mode == "exact":
            score = 1.0 if ok else 0.0
        reason = None
        if not ok:
            want = "[" + ", ".join(s.name for s in specs) + "]"
            reason = f"expected {want} ({self.mode}), the model called {_names(calls)}"
            if self.mode != "exact":
                reason += f": {matched} of {len(specs)} matched"
        return EvalResult(name=self.name, score=score, passed=ok, reason=reason)
