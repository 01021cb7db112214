"""How model calls are retried: which errors, how many times, how long to wait.

``_turn.call_model`` is a plain loop; after a failed attempt it asks ``RetryPolicy.next_wait``,
where tenacity's strategies decide. They run only after a failure: tenacity's own loop around
every attempt measured about 60 µs per successful model call, a fifth of a run's CPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import _checks as checks
from ._errors import ModelError
from ._time import random_fraction

if TYPE_CHECKING:
    from tenacity import Retrying


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How model calls are retried. The SDKs' own retries are always off.

    Retried: connection errors, timeouts, 408, 409, 429, 5xx, Anthropic 529 and retryable stream
    errors; never 400, 401, 403, 404, 422. Waits back off exponentially with jitter, or follow
    the provider's ``retry-after`` (capped at ``max_retry_after``). ``deadline`` bounds all
    attempts and waits of one model call together; ``attempt_timeout`` one attempt, however
    its bytes trickle in (600 s by default: keep-alives cannot hold an attempt forever);
    ``idle_timeout`` the silence between two deltas of a stream (off by default: it costs a
    timer per delta; the drivers' HTTP read timeout already bounds the silence between bytes).

    Args:
        max_attempts: Attempts of one model call, the first included (1: never retry).
        initial_wait: Seconds before the first retry; doubled for each one after.
        max_wait: The longest backoff wait, in seconds.
        max_retry_after: The longest ``retry-after`` honoured, in seconds.
        jitter: The share of each backoff wait taken off at random (0..1).
        deadline: Seconds for all attempts and waits of one model call together.
        attempt_timeout: Seconds for one attempt, however its bytes trickle in.
        idle_timeout: Seconds of silence allowed between two deltas of a stream.
    """

    max_attempts: int = 4
    initial_wait: float = 0.5
    max_wait: float = 20.0
    max_retry_after: float = 60.0
    jitter: float = 0.5
    deadline: float | None = None
    attempt_timeout: float | None = 600.0
    idle_timeout: float | None = None

    def __post_init__(self) -> None:
        checks.count("RetryPolicy", "max_attempts", self.max_attempts, minimum=1)
        for name in ("initial_wait", "max_wait", "max_retry_after"):
            checks.number("RetryPolicy", name, getattr(self, name))
        checks.number("RetryPolicy", "jitter", self.jitter, maximum=1.0)
        for name in ("deadline", "attempt_timeout", "idle_timeout"):
            checks.optional_number("RetryPolicy", name, getattr(self, name), positive=True)

    def wait_for(self, error: BaseException | None, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1``.

        Args:
            error: The error of the attempt that failed (its ``retry_after`` is honoured).
            attempt: The number of the attempt that failed, from 1.
        """
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after >= 0:
            return float(min(retry_after, self.max_retry_after))
        base: float = min(self.max_wait, self.initial_wait * 2.0 ** (attempt - 1))
        return base * (1 - self.jitter * random_fraction())

    def next_wait(self, error: BaseException, attempt: int) -> float | None:
        """After attempt number ``attempt`` failed with ``error``: the seconds to wait before
        the next one, or ``None`` when the policy gives up (the error is not retryable, or no
        attempt is left).

        Args:
            error: The error of the attempt that failed.
            attempt: The number of the attempt that failed, from 1.
        """
        from tenacity import RetryCallState, retry_if_exception, stop_after_attempt

        state = RetryCallState(_retrying(), None, (), {})
        state.attempt_number = attempt
        state.set_exception((type(error), error, error.__traceback__))
        if not retry_if_exception(_is_retryable)(state):
            return None
        if stop_after_attempt(self.max_attempts)(state):
            return None
        return self.wait_for(error, attempt)


def _is_retryable(error: BaseException) -> bool:
    return isinstance(error, ModelError) and error.retryable


@functools.cache
def _retrying() -> Retrying:
    """The ``Retrying`` a tenacity call state refers to (the loop is ours: it is never run)."""
    from tenacity import Retrying

    return Retrying()
