"""How a durable run's activities are scheduled: timeouts, heartbeats, retries."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy

from .._errors import UserError


def default_tool_retry() -> RetryPolicy:
    """Five attempts, 1 s apart and doubling to 30 s. A tool's own failures are error results
    the model sees, never activity failures: these retries are for lost workers and timeouts,
    and each attempt gets the same ``idempotency_key``."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=5,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivityOptions:
    """How one kind of activity is scheduled.

    Args:
        start_to_close: Seconds one attempt may take (``None``: a tool's own ``timeout`` plus
            30 s, else 300 s; a model call's ``RetryPolicy.attempt_timeout`` plus 30 s, else
            630 s).
        heartbeat: Seconds without a heartbeat after which the attempt counts as lost (its
            worker died) and is retried elsewhere. The activities heartbeat on their own, three
            times per period, however long the tool or the stream takes.
        retry: Temporal's retry policy for tool activities (``default_tool_retry``). A model
            activity is never retried by Temporal: the agent's own ``RetryPolicy`` retries it,
            so that the caller sees ``AttemptDiscarded``.
    """

    start_to_close: float | None = None
    heartbeat: float = 30.0
    retry: RetryPolicy = field(default_factory=default_tool_retry)

    def __post_init__(self) -> None:
        if self.start_to_close is not None and self.start_to_close <= 0:
            raise UserError("ActivityOptions.start_to_close must be positive")
        if self.heartbeat <= 0:
            raise UserError("ActivityOptions.heartbeat must be positive")

    def schedule(self, default_seconds: float, *, retry: bool = True) -> dict[str, Any]:
        """The keyword arguments of ``workflow.start_activity``.

        Args:
            default_seconds: ``start_to_close`` when it is not given.
            retry: Use ``retry`` (else never retry: a model activity).
        """
        seconds = self.start_to_close if self.start_to_close is not None else default_seconds
        return {
            "start_to_close_timeout": timedelta(seconds=seconds),
            "heartbeat_timeout": timedelta(seconds=self.heartbeat),
            "retry_policy": self.retry if retry else RetryPolicy(maximum_attempts=1),
        }
