"""Span-based evaluators: checks over the OpenTelemetry spans a case's runs recorded."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from .. import Instrumentation, UserError
from ._base import Builtin
from ._context import EvalContext, SpanRecord
from ._result import EvalResult

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

MAX_SPANS_PER_CASE = 10_000  # more are dropped (and counted): memory stays bounded


class SpanCollector:
    """An OpenTelemetry SDK tracer provider whose finished spans are kept per case (by trace),
    for ``evaluate`` to hand to span-based evaluators."""

    def __init__(self) -> None:
        try:
            from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
        except ImportError:
            raise UserError(
                "span-based evaluators need the OpenTelemetry SDK: pip install opentelemetry-sdk"
            ) from None
        collector = self
        self._lock = threading.Lock()
        self._by_trace: dict[int, list[ReadableSpan]] = {}
        self.dropped = 0

        class _Keep(SpanProcessor):
            def on_end(self, span: ReadableSpan) -> None:
                collector._keep(span)

        self.provider = TracerProvider()
        self.provider.add_span_processor(_Keep())
        self.instrumentation = Instrumentation(tracer_provider=self.provider)

    def _keep(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None:
            return
        with self._lock:
            kept = self._by_trace.get(context.trace_id)
            if kept is None:
                return  # not a case's trace
            if len(kept) >= MAX_SPANS_PER_CASE:
                self.dropped += 1
                return
            kept.append(span)

    @contextmanager
    def case(self, name: str) -> Generator[list[SpanRecord]]:
        """A span for one run of a case, current for the block: its runs' spans are its
        children. The list it yields is filled when the block ends."""
        from opentelemetry import trace

        span = self.provider.get_tracer("agentloop.evals").start_span(f"eval_case {name}")
        trace_id = span.get_span_context().trace_id
        with self._lock:
            self._by_trace[trace_id] = []
        records: list[SpanRecord] = []
        try:
            with trace.use_span(span, end_on_exit=True):
                yield records
        finally:
            with self._lock:
                spans = self._by_trace.pop(trace_id, [])
            records.extend(_records(spans))

    def shutdown(self) -> None:
        self.provider.shutdown()


def _records(spans: list[ReadableSpan]) -> Iterator[SpanRecord]:
    names = {s.context.span_id: s.name for s in spans if s.context is not None}
    for s in spans:
        start, end = s.start_time or 0, s.end_time or 0
        yield SpanRecord(
            name=s.name,
            attributes=dict(s.attributes or {}),
            status=s.status.status_code.name.lower(),
            duration=max(0, end - start) / 1e9,
            parent=names.get(s.parent.span_id) if s.parent is not None else None,
        )


class _SpanQuery(Builtin):
    name_is: str | None = None
    name_contains: str | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)

    @property
    def needs_spans(self) -> bool:
        return True

    def _matches(self, span: SpanRecord) -> bool:
        if self.name_is is not None and span.name != self.name_is:
            return False
        if self.name_contains is not None and self.name_contains not in span.name:
            return False
        return all(span.attributes.get(k) == v for k, v in self.attributes.items())

    def _count(self, ctx: EvalContext) -> int | None:
        if ctx.spans is None:
            return None
        return sum(1 for s in ctx.spans if self._matches(s))

    def query(self) -> str:
        parts = [f"name={self.name_is!r}"] if self.name_is is not None else []
        if self.name_contains is not None:
            parts.append(f"name~{self.name_contains!r}")
        parts += [f"{k}={v!r}" for k, v in self.attributes.items()]
        return ", ".join(parts) or "any"


class HasSpan(_SpanQuery):
    """A span of the case's runs matches: its name (``name_is``, ``name_contains``) and
    attributes (each equal). The runs' spans follow OpenTelemetry's GenAI conventions:
    ``invoke_agent``, ``chat`` and ``execute_tool`` spans with ``gen_ai.*`` attributes.

    Attributes:
        kind: ``has_span``.
        name_is: The span's exact name.
        name_contains: Text in the span's name.
        attributes: Attributes the span has, with these values.
        absent: Pass when no span matches instead.
    """

    kind: Literal["has_span"] = "has_span"
    absent: bool = False

    def default_name(self) -> str:
        return f"{'no_span' if self.absent else 'has_span'}({self.query()})"

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        n = self._count(ctx)
        if n is None:
            return self._result(False, "the runs' spans were not recorded")
        if self.absent:
            return self._result(n == 0, f"{n} spans match ({self.query()})" if n else None)
        return self._result(n > 0, None if n else f"no span matches ({self.query()})")


class SpanCount(_SpanQuery):
    """The number of matching spans is within ``min`` and ``max`` (``HasSpan``'s query).

    Attributes:
        kind: ``span_count``.
        name_is: The span's exact name.
        name_contains: Text in the span's name.
        attributes: Attributes the span has, with these values.
        min: The fewest matching spans.
        max: The most matching spans.
    """

    kind: Literal["span_count"] = "span_count"
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    def default_name(self) -> str:
        return f"span_count({self.query()})"

    async def evaluate(self, ctx: EvalContext) -> EvalResult | None:
        n = self._count(ctx)
        if n is None:
            return self._result(False, "the runs' spans were not recorded")
        low = self.min is None or n >= self.min
        high = self.max is None or n <= self.max
        bounds = f"[{'' if self.min is None else self.min}, {'' if self.max is None else self.max}]"
        why = None if low and high else f"{n} spans match ({self.query()}), not in {bounds}"
        return self._result(low and high, why)
