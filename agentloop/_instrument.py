"""How runs are traced (``Agent(instrument=...)``), apart from the spans themselves, so that a
run can decide whether it is traced without importing the tracing code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ._errors import UserError, as_given

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer, TracerProvider


@dataclass(frozen=True, kw_only=True, slots=True)
class Instrumentation:
    """How runs are traced. ``tracer_provider`` defaults to OpenTelemetry's global provider;
    ``include_content`` records prompts, replies, tool arguments and results in spans and
    debug logs (off by default: they may hold personal data).

    Args:
        tracer_provider: The OpenTelemetry ``TracerProvider`` spans go to (``None``: the
            global one).
        include_content: Record prompts, replies, tool arguments and results.
    """

    tracer_provider: TracerProvider | None = None
    include_content: bool = False
    _tracer: list[Tracer] = field(default_factory=list, init=False, repr=False, compare=False)

    def tracer(self) -> Tracer:
        if not self._tracer:
            try:
                from opentelemetry import trace
            except ImportError:
                raise UserError(
                    "tracing needs OpenTelemetry: pip install 'agentloop-runtime[otel]'"
                ) from None
            from ._version import __version__

            provider = self.tracer_provider or trace.get_tracer_provider()
            self._tracer.append(provider.get_tracer("agentloop", __version__))
        return self._tracer[0]


def coerce(setting: Instrumentation | bool | None) -> Instrumentation | Literal[False] | None:
    if setting is True:
        return Instrumentation()
    if setting is None or setting is False or isinstance(as_given(setting), Instrumentation):
        return setting
    raise UserError(f"instrument must be an Instrumentation, True, False or None, not {setting!r}")


def resolve(
    own: Instrumentation | Literal[False] | None, inherited: Instrumentation | None
) -> Instrumentation | None:
    """A run's instrumentation: its agent's, else its parent run's."""
    if own is None:
        return inherited
    return own or None
