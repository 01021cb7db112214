"""Span-based evaluators: checks over the OpenTelemetry spans a case's runs recorded."""

from __future__ import annotations

import random
import time
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any, Literal

from pydantic import Field

from .. import Instrumentation, UserError
from ._base import Builtin
from ._context import EvalContext, SpanRecord
from ._result import EvalResult

MAX_SPANS_PER_CASE = 10_000  # more are dropped (and counted): memory stays bounded


class SpanCollector:
    """Records the spans of each run of a case, for span-based evaluators.

    A small OpenTelemetry tracer provider of its own (the API's, not the SDK's: nothing is
    exported, a span is a few attributes kept until its case is scored). A case's span is the
    root of a trace; the spans of its runs, children of it, are kept with it by trace id.
    """

    def __init__(self) -> None:
        try:
            from opentelemetry import trace
        except ImportError:
            raise UserError(
                "span-based evaluators need OpenTelemetry: pip install 'agentloop-runtime[otel]'"
            ) from None
        self._by_trace: dict[int, list[SpanRecord]] = {}
        self.dropped = 0
        self.provider = _provider(trace, self._by_trace, self)
        self.instrumentation = Instrumentation(tracer_provider=self.provider)

    @contextmanager
    def case(self, name: str) -> Generator[list[SpanRecord]]:
        """A span for one run of a case, current for the block: its runs' spans are its
        children. The list it yields is filled as they end."""
        from opentelemetry import trace

        span = self.provider.get_tracer("agentloop.evals").start_span(f"eval_case {name}")
        trace_id = span.get_span_context().trace_id
        records = self._by_trace[trace_id] = []
        try:
            with trace.use_span(span, end_on_exit=True):
                yield records
        finally:
            self._by_trace.pop(trace_id, None)

    def shutdown(self) -> None:
        self._by_trace.clear()


def _provider(trace: Any, by_trace: dict[int, list[SpanRecord]], owner: SpanCollector) -> Any:
    """The tracer provider (classes made here: the OpenTelemetry API is imported on need)."""
    from opentelemetry.trace import SpanContext, StatusCode, TraceFlags

    sampled = TraceFlags(TraceFlags.SAMPLED)

    class _Span(trace.Span):  # type: ignore[misc]
        __slots__ = (
            "_attributes",
            "_context",
            "_ended",
            "_parent",
            "_start",
            "_status",
            "span_name",
        )

        def __init__(self, name: str, context: Any, parent: str | None, attributes: Any) -> None:
            self.span_name = name
            self._context = context
            self._parent = parent
            self._attributes: dict[str, Any] = dict(attributes or {})
            self._status = "unset"
            self._start = time.perf_counter()
            self._ended = False

        def get_span_context(self) -> Any:
            return self._context

        def set_attributes(self, attributes: Any) -> None:
            self._attributes.update(attributes)

        def set_attribute(self, key: str, value: Any) -> None:
            self._attributes[key] = value

        def add_event(self, name: str, attributes: Any = None, timestamp: Any = None) -> None:
            pass

        def update_name(self, name: str) -> None:
            self.span_name = name

        def is_recording(self) -> bool:
            return not self._ended

        def set_status(self, status: Any, description: str | None = None) -> None:
            code = getattr(status, "status_code", status)
            self._status = "error" if code is StatusCode.ERROR else "ok"

        def record_exception(self, exception: BaseException, *args: Any, **kwargs: Any) -> None:
            pass

        def end(self, end_time: int | None = None) -> None:
            if self._ended:
                return
            self._ended = True
            kept = by_trace.get(self._context.trace_id)
            if kept is None:
                return  # not a case's trace (its case was scored)
            if len(kept) >= MAX_SPANS_PER_CASE:
                owner.dropped += 1
                return
            kept.append(
                SpanRecord(
                    name=self.span_name,
                    attributes=self._attributes,
                    status=self._status,
                    duration=time.perf_counter() - self._start,
                    parent=self._parent,
                )
            )

    class _Tracer(trace.Tracer):  # type: ignore[misc]
        def start_span(self, name: str, context: Any = None, *args: Any, **kwargs: Any) -> Any:
            parent = trace.get_current_span(context)
            found = parent.get_span_context()
            trace_id = found.trace_id if found.is_valid else random.getrandbits(128) or 1
            span_context = SpanContext(
                trace_id=trace_id,
                span_id=random.getrandbits(64) or 1,
                is_remote=False,
                trace_flags=sampled,
            )
            parent_name = parent.span_name if isinstance(parent, _Span) else None
            return _Span(name, span_context, parent_name, kwargs.get("attributes"))

        @contextmanager
        def start_as_current_span(self, name: str, *args: Any, **kwargs: Any) -> Any:
            end_on_exit = kwargs.pop("end_on_exit", True)
            span = self.start_span(name, *args, **kwargs)
            with trace.use_span(span, end_on_exit=end_on_exit):
                yield span

    tracer = _Tracer()

    class _Provider(trace.TracerProvider):  # type: ignore[misc]
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            return tracer

    return _Provider()


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
