"""What an evaluator sees of one run of a case (``EvalContext``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .. import ActionResult, Event, Model, RunResult, Step, Usage
from ._case import Case


@dataclass(frozen=True, kw_only=True, slots=True)
class SpanRecord:
    """One finished span of a case's runs.

    Args:
        name: The span's name (``invoke_agent support``, ``chat gpt-4o``, ``execute_tool x``).
        attributes: Its attributes.
        status: ``ok``, ``error`` or ``unset``.
        duration: Seconds it lasted.
        parent: The name of its parent span (``None`` for the case's own span).
    """

    name: str
    attributes: Mapping[str, Any]
    status: str
    duration: float
    parent: str | None = None


@dataclass(frozen=True, kw_only=True)
class EvalContext:
    """One run of a case, for its evaluators.

    A multi-turn case has one ``RunResult`` per user message (``results``); ``output``,
    ``text`` and ``result`` are the last one's, ``steps`` and ``usage`` add up all of them.

    Args:
        case: The case.
        results: Each turn's result, in order.
        transcript: The conversation as ``(role, text)`` pairs (``user`` and ``agent``).
        latency: Seconds from the first message to the last result.
        cost: The runs' total cost (``None`` without ``evaluate(prices=...)``).
        cost_complete: Every model call of the runs was priced from reported usage.
        output_type: The agent's ``output_type`` (``None``: text, or not known).
        events: The runs' events, when an evaluator asked for them (``needs_events``).
        spans: The runs' spans, when an evaluator asked for them (``needs_spans``).
        repetition: Which repetition of the case this is, from 0.
        judge_model: The model of judges that name none (``evaluate(judge_model=...)``).
    """

    case: Case
    results: tuple[RunResult[Any], ...]
    transcript: tuple[tuple[str, str], ...] = ()
    latency: float = 0.0
    cost: float | None = None
    cost_complete: bool = True
    output_type: Any = None
    events: Sequence[Event] | None = None
    spans: Sequence[SpanRecord] | None = None
    repetition: int = 0
    judge_model: Model | str | None = None

    @property
    def result(self) -> RunResult[Any] | None:
        """The last turn's result."""
        return self.results[-1] if self.results else None

    @property
    def output(self) -> Any:
        """The last turn's output (typed with ``output_type``)."""
        result = self.result
        return None if result is None else result.output

    @property
    def text(self) -> str:
        """The last turn's answer as text (``""`` when it has none)."""
        result = self.result
        return (result.text or "") if result is not None else ""

    @cached_property
    def steps(self) -> tuple[Step, ...]:
        """Every turn's steps, in order."""
        return tuple(s for r in self.results for s in r.steps)

    @cached_property
    def usage(self) -> Usage:
        """The runs' usage added up."""
        return sum((r.usage for r in self.results), Usage())

    @cached_property
    def tool_calls(self) -> tuple[ActionResult, ...]:
        """The tool calls in the order the model emitted them in its replies.

        Step by step; in a step, the actions carried over from a discarded attempt (they were
        emitted first) and then the step's own, each in the order of the reply. This is not the
        order they started or finished in: a step's actions run concurrently, and each starts
        as soon as the streaming reply seals it.
        """
        return tuple(a for s in self.steps for a in (*s.carried, *s.actions))
