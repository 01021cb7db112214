"""The error tree. Every error agentloop raises is an ``AgentLoopError``.

::

    AgentLoopError
    ├── UserError                  misuse: bad configuration, a tool signature that is not a schema
    ├── ModelError                 the model call failed (after retries); carries provider context
    │   ├── ModelConnectionError   the connection failed or broke before a response was complete
    │   ├── ModelTimeout           no answer (or no chunk) within the deadline
    │   ├── ModelStreamError       the provider reported an error inside a 200 stream, or sent garbage
    │   └── ModelHTTPError         the provider answered with an error status
    │       ├── ModelBadRequest        400, 422: the request is wrong; never retried
    │       ├── ModelAuthError         401, 403: the key is missing, wrong or not allowed
    │       ├── ModelNotFound          404: unknown model or endpoint
    │       ├── ModelRateLimited       429: retried, honouring retry-after
    │       ├── ModelOverloaded        529 (Anthropic) and 503: retried
    │       └── ModelServerError       other 5xx, 408 and 409: retried
    ├── RunError                   a run ended without a usable answer (``raise_on_error=True``)
    │   ├── MaxStepsExceeded       the step limit was reached
    │   ├── OutputInvalid          the answer never validated against ``output_type``
    │   ├── ReplyTooLarge          a reply exceeded the size limit
    │   ├── ModelRefused           the model refused (finish outcome ``refusal``)
    │   ├── ReplyTruncated         the reply was cut by a token limit (``length``, ``incomplete``)
    │   ├── ContentFiltered        the provider's content filter stopped the reply
    │   ├── UsageLimitExceeded     a ``UsageLimits`` limit (tokens, requests, tool calls, cost)
    │   ├── GuardrailTripped       an input, output or tool guardrail tripped
    │   └── ToolRetriesExceeded    a tool raised ``ModelRetry`` more often than its budget
    ├── RunDeadlineExceeded        the run's own deadline passed
    ├── RunCancelled               ``run.cancel(reason)`` stopped a streamed run
    ├── ToolError                  raised by a tool to hand the model a clean error message
    └── SessionError               the session store refused an operation
        ├── SessionNotFound
        ├── SessionConflict        the session changed under us (optimistic concurrency)
        ├── SessionBusy            another run holds the session's lease
        └── SessionStoreError      the store's database failed: unreachable, corrupt, read-only,
                                   full; names the store and gives a hint

``ModelRetry`` is a control signal, not a failure: a tool or an output validator raises it to
ask the model again, so it is outside the tree.

Cancellation is never an ``AgentLoopError``: it stays the host's own cancellation exception.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any


class AgentLoopError(Exception):
    """Base class of every error agentloop raises."""


class AgentLoopWarning(UserWarning):
    """A likely mistake in how agentloop is used, told to the developer when it is made (a
    tool without a description, a parameter without a type). Errors in our own test suite."""


def warn(message: str) -> None:
    """Warn with ``AgentLoopWarning``, attributed to the first caller outside agentloop (the
    line that defined the tool or made the agent), however deep inside the library we are."""
    frame = inspect.currentframe()  # this function's (None without Python frames)
    frame = frame.f_back if frame is not None else None  # its caller's
    level = 2
    while frame is not None and _ours(frame.f_globals.get("__name__", "")) and frame.f_back:
        level, frame = level + 1, frame.f_back
    warnings.warn(message, AgentLoopWarning, stacklevel=level)


def as_given(value: object) -> object:
    """``value`` as what a caller may really pass, any object, whatever its annotation says:
    for the checks that turn a wrong argument into a ``UserError`` (to a type checker, an
    ``isinstance`` of an annotated value is always true)."""
    return value


def _ours(module: str) -> bool:
    # functools: the frame of ``Toolkit.tool``'s cached_property, between us and the caller.
    return module in ("agentloop", "functools") or module.startswith("agentloop.")


class UserError(AgentLoopError):
    """The library was used in a way it does not support; the message says how to fix it."""


class NothingToResume(UserError):
    """``resume`` found no unfinished run in the session (``Agent.unfinished_run`` asks first)."""


class ModelError(AgentLoopError):
    """A model call failed. Carries the provider's context where there is one.

    Args:
        message: What went wrong.
        provider: The provider's name (``"openai"``, ``"anthropic"``), when known.
        model: The model's name, when known.
        status: The HTTP status of the response, if there was one.
        request_id: The provider's request id (its ``x-request-id``), for its support.
        body: The error body the provider sent (decoded JSON or text, bounded).
        retry_after: Seconds the provider asked to wait before retrying (``retry-after``).
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        model: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
        body: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.model = model
        self.status = status
        self.request_id = request_id
        self.body = body
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = ", ".join(
            f"{k}={v}"
            for k, v in (
                ("provider", self.provider),
                ("status", self.status),
                ("request_id", self.request_id),
            )
            if v is not None
        )
        return f"{self.message} ({where})" if where else self.message


class ModelConnectionError(ModelError):
    retryable = True


class ModelTimeout(ModelError):
    retryable = True


class ModelStreamError(ModelError):
    """An error event inside a 200 stream, or a stream we could not decode.

    Args:
        message: What went wrong.
        retryable: Whether a new attempt may succeed (a provider's transient stream error).
        **kwargs: The provider's context, as for ``ModelError``.
    """

    def __init__(self, message: str, *, retryable: bool = False, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retryable = retryable


class ModelHTTPError(ModelError):
    retryable = False


class ModelBadRequest(ModelHTTPError):
    pass


class ModelAuthError(ModelHTTPError):
    pass


class ModelNotFound(ModelHTTPError):
    pass


class ModelRateLimited(ModelHTTPError):
    retryable = True


class ModelOverloaded(ModelHTTPError):
    retryable = True


class ModelServerError(ModelHTTPError):
    retryable = True


def model_error_for_status(status: int) -> type[ModelHTTPError]:
    """The error class for an HTTP status, which also decides whether it is retried."""
    if status == 429:
        return ModelRateLimited
    if status in (503, 529):
        return ModelOverloaded
    if status in (401, 403):
        return ModelAuthError
    if status == 404:
        return ModelNotFound
    if status in (408, 409) or status >= 500:
        return ModelServerError
    return ModelBadRequest


class RunError(AgentLoopError):
    """A run ended without a usable answer. ``result`` is the run's ``RunResult``.

    Args:
        message: Why the run has no usable answer.
        result: The run's ``RunResult``, with its steps and usage.
        details: What the error is about, as data (``RunErrorInfo.details``): the limit and
            the figures of a ``UsageLimitExceeded``, the name and information of a
            ``GuardrailTripped``.
    """

    kind: str = "run_error"

    def __init__(
        self, message: str, *, result: Any = None, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.result = result
        self.details: Mapping[str, Any] = dict(details or {})


class MaxStepsExceeded(RunError):
    kind = "max_steps_exceeded"


class OutputInvalid(RunError):
    kind = "output_invalid"


class ReplyTooLarge(RunError):
    kind = "reply_too_large"


class ModelRefused(RunError):
    kind = "refused"


class ReplyTruncated(RunError):
    kind = "truncated"


class ContentFiltered(RunError):
    kind = "content_filtered"


class DecisionsPending(RunError):
    """``RunResult.unwrap()`` of a run that waits on decisions (``result.pending``): it has no
    output yet. Pass the decisions to ``Agent.resume``."""

    kind = "decisions_pending"


class UsageLimitExceeded(RunError):
    """A ``UsageLimits`` limit was reached: ``details`` names the ``limit``, its ``allowed``
    value and the figure (``used``) that passed it, or would have with the next call."""

    kind = "usage_limit_exceeded"


class ContextWindowExceeded(RunError):
    """What a ``ContextWindow`` never trims (the system message, memory and the input) is over
    its budget: the run ends before the call, as no trim could make the prompt fit.
    ``details`` hold ``max_tokens`` and the estimated ``tokens``."""

    kind = "context_window_exceeded"


class GuardrailTripped(RunError):
    """A guardrail tripped: ``details`` holds its ``guardrail`` name, its ``stage``
    (``input``, ``output``, ``tool_call`` or ``tool_result``) and its ``info``."""

    kind = "guardrail_tripped"


class ToolRetriesExceeded(RunError):
    """A tool raised ``ModelRetry`` more often than its budget (``ToolLimits.max_retries``)."""

    kind = "tool_retries_exceeded"


class ModelRetry(Exception):
    """Raise in a tool or an output validator to reject what the model sent: ``message`` is
    fed back to it and it tries again, within the tool's or the validators' retry budget.

    Args:
        message: Why, in words the model can act on.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PayloadTooLarge(RunError):
    """A value a durable run would record (``agentloop.temporal``) does not fit in Temporal's
    payload limit, even with its large strings by reference: the run ends with this error
    before recording it, and what it committed stays."""

    kind = "payload_too_large"


RUN_ERRORS: dict[str, type[RunError]] = {
    cls.kind: cls
    for cls in (
        MaxStepsExceeded,
        OutputInvalid,
        ReplyTooLarge,
        ModelRefused,
        ReplyTruncated,
        ContentFiltered,
        UsageLimitExceeded,
        GuardrailTripped,
        ToolRetriesExceeded,
        ContextWindowExceeded,
        PayloadTooLarge,
    )
}


class RunDeadlineExceeded(AgentLoopError):
    """The run's deadline (``Agent(deadline=...)``) passed."""


class RunCancelled(AgentLoopError):
    """A streamed run was stopped with ``run.cancel(reason)``.

    Args:
        reason: The reason given to ``cancel``.
    """

    def __init__(self, reason: str = "cancelled") -> None:
        super().__init__(reason)
        self.reason = reason


class ToolError(AgentLoopError):
    """Raise inside a tool to give the model this message as the action's error result."""


class SessionError(AgentLoopError):
    """The session store refused an operation."""


class SessionNotFound(SessionError):
    pass


class SessionConflict(SessionError):
    """The session's version moved since it was read; nothing was written."""


class SessionBusy(SessionError):
    """Another run holds this session's lease."""


class SessionStoreError(SessionError):
    """The store's database failed: unreachable, corrupt, read-only or full. ``store`` names
    the store (an SQLite path, "PostgreSQL"), ``hint`` says what to check; the driver's own
    exception is the ``__cause__``.

    Args:
        message: What failed.
        store: The store: an SQLite path, or ``"PostgreSQL"``.
        hint: What to check (reachable, corrupt, read-only, full).
    """

    def __init__(self, message: str, *, store: str, hint: str) -> None:
        super().__init__(f"{store}: {message} (hint: {hint})")
        self.store = store
        self.hint = hint
