"""``ToolLimits``: the bounds a caller sets on a run's actions, and the shared default limiters."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from anyio.lowlevel import RunVar

from .. import _checks as checks
from .._errors import UserError

DEFAULT_TOOL_CONCURRENCY = 256
DEFAULT_THREAD_CONCURRENCY = 32

_tool_limiter: RunVar[anyio.CapacityLimiter] = RunVar("agentloop_tool_limiter")
_thread_limiter: RunVar[anyio.CapacityLimiter] = RunVar("agentloop_thread_limiter")


def default_tool_limiter() -> anyio.CapacityLimiter:
    """The process-wide (per event loop) limit on actions running at once."""
    try:
        return _tool_limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(DEFAULT_TOOL_CONCURRENCY)
        _tool_limiter.set(limiter)
        return limiter


def default_thread_limiter() -> anyio.CapacityLimiter:
    """The per event loop limit on worker threads running sync tools."""
    try:
        return _thread_limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(DEFAULT_THREAD_CONCURRENCY)
        _thread_limiter.set(limiter)
        return limiter


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolLimits:
    """The bounds on a run's actions (``Agent(tool_limits=...)``).

    Args:
        max_actions_per_step: Actions one reply may ask for; the rest are
            ``too_many_actions`` error results.
        max_parallel_actions: Actions of one run that run at once.
        max_output_chars: The longest tool output (and error message) the model is shown;
            longer ones are truncated.
        tool_limiter: Actions of all runs at once (default: 256 per event loop,
            ``default_tool_limiter()``).
        thread_limiter: Worker threads for sync tools (default: 32 per event loop,
            ``default_thread_limiter()``).
        max_retries: How often each tool may raise ``ModelRetry`` in one run (each time the
            model is told why and may call it again); one more ends the run with
            ``tool_retries_exceeded``.
    """

    max_actions_per_step: int = 64
    max_parallel_actions: int = 16
    max_output_chars: int = 100_000
    tool_limiter: anyio.CapacityLimiter | None = None
    thread_limiter: anyio.CapacityLimiter | None = None
    max_retries: int = 3

    def __post_init__(self) -> None:
        for name in ("max_actions_per_step", "max_parallel_actions", "max_output_chars"):
            checks.count("ToolLimits", name, getattr(self, name), minimum=1)
        checks.count("ToolLimits", "max_retries", self.max_retries)
        for name in ("tool_limiter", "thread_limiter"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, anyio.CapacityLimiter):
                raise UserError(
                    f"ToolLimits.{name} must be an anyio.CapacityLimiter, not {value!r}"
                )
