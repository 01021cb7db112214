"""How model calls are retried: which errors, how long to wait (``_turn.call_model`` loops)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ._errors import UserError


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
        if self.max_attempts < 1:
            raise UserError("RetryPolicy.max_attempts must be at least 1")
        for name in ("deadline", "attempt_timeout", "idle_timeout"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UserError(f"RetryPolicy.{name} must be positive")

    def wait_for(self, error: BaseException | None, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after >= 0:
            return float(min(retry_after, self.max_retry_after))
        base: float = min(self.max_wait, self.initial_wait * 2.0 ** (attempt - 1))
        return base * (1 - self.jitter * random.random())
