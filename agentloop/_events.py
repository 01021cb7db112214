"""The public events a run streams.

Every event carries ``run_id``, ``parent_run_id``, ``branch`` and ``seq`` (one counter per root
run, shared by its sub-runs), and a ``type``. Deltas carry the number of the ``attempt`` (one
opening of a provider stream) that produced them, so that ``AttemptDiscarded`` can withdraw them.
Events are data: ``to_json()`` / ``event_from_json()`` round-trip them.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from ._steps import ActionResult, RunErrorInfo, RunResult, Step
from .models._types import FinishReason, ProviderPart, Usage

if TYPE_CHECKING:
    from pydantic import TypeAdapter


@dataclass(frozen=True, kw_only=True, slots=True)
class _Event:
    run_id: str
    parent_run_id: str | None = None
    branch: str
    seq: int

    def to_json(self) -> str:
        return _adapter().dump_json(self).decode()  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, data: str | bytes, *, output_type: Any = None) -> Event:
        return event_from_json(data, output_type=output_type)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted(_Event):
    agent: str
    input: str
    type: Literal["run_started"] = "run_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCallStarted(_Event):
    attempt: int
    step: int
    model: str
    type: Literal["model_call_started"] = "model_call_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCallFinished(_Event):
    attempt: int
    finish_reason: FinishReason
    usage: Usage | None = None
    type: Literal["model_call_finished"] = "model_call_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta(_Event):
    """Text whose role is not known yet: it becomes the thought if the reply has actions,
    else the answer (``StepFinished`` says which)."""

    attempt: int
    text: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ThoughtDelta(_Event):
    attempt: int
    text: str
    type: Literal["thought_delta"] = "thought_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerDelta(_Event):
    """Text of ReAct answer section ``section`` (from 0 within the attempt). A reply may write
    several answers; the last is the run's answer, the earlier ones become part of the thought,
    so a UI should show a new section in place of the previous one."""

    attempt: int
    text: str
    section: int = 0
    type: Literal["answer_delta"] = "answer_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionArgsDelta(_Event):
    """Arguments of action ``index`` of the attempt as they stream (``tag`` and ``name`` are
    ``None`` while a ReAct action object is still open)."""

    attempt: int
    index: int
    tag: str | None = None
    name: str | None = None
    text: str
    type: Literal["action_args_delta"] = "action_args_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderEvent(_Event):
    """A provider block that is not an action (server-side web search, its results)."""

    attempt: int
    part: ProviderPart
    type: Literal["provider_event"] = "provider_event"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionStarted(_Event):
    attempt: int
    tag: str
    name: str
    path: str | None = None
    input: Any = None
    type: Literal["action_started"] = "action_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionFinished(_Event):
    result: ActionResult
    type: Literal["action_finished"] = "action_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class StepFinished(_Event):
    step: Step
    type: Literal["step_finished"] = "step_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptDiscarded(_Event):
    """Withdraw the text deltas of ``attempt`` (never its actions). For a ``retry``, ``error``
    says why the attempt failed and ``retry_in`` how many seconds pass before the next one."""

    attempt: int
    reason: Literal["retry", "goal", "middleware"]
    error: RunErrorInfo | None = None
    retry_in: float | None = None
    type: Literal["attempt_discarded"] = "attempt_discarded"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished(_Event):
    result: RunResult
    type: Literal["run_finished"] = "run_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFailed(_Event):
    error: RunErrorInfo
    type: Literal["run_failed"] = "run_failed"


Event: TypeAlias = (
    RunStarted
    | ModelCallStarted
    | ModelCallFinished
    | TextDelta
    | ThoughtDelta
    | AnswerDelta
    | ActionArgsDelta
    | ProviderEvent
    | ActionStarted
    | ActionFinished
    | StepFinished
    | AttemptDiscarded
    | RunFinished
    | RunFailed
)

EVENT_TYPES: tuple[type[_Event], ...] = (
    RunStarted,
    ModelCallStarted,
    ModelCallFinished,
    TextDelta,
    ThoughtDelta,
    AnswerDelta,
    ActionArgsDelta,
    ProviderEvent,
    ActionStarted,
    ActionFinished,
    StepFinished,
    AttemptDiscarded,
    RunFinished,
    RunFailed,
)


@functools.cache
def _adapter() -> TypeAdapter[Event]:
    from pydantic import Field, TypeAdapter  # built on first use: events are plain dataclasses

    return TypeAdapter(Annotated[Event, Field(discriminator="type")])


def event_from_json(data: str | bytes, *, output_type: Any = None) -> Event:
    """Parse an event serialised with ``to_json()``.

    JSON holds a typed output in its JSON form (a pydantic model or a dataclass is a dict).
    Given the agent's ``output_type``, the answer of a root run's ``RunFinished`` is validated
    back into that type (a sub-run's output, and a result with an error, stay as they are).
    """
    event = _adapter().validate_json(data)
    if output_type is None or not isinstance(event, RunFinished) or event.parent_run_id:
        return event
    result = event.result
    if result.error is not None or result.output is None:
        return event
    output = _output_adapter(output_type).validate_python(result.output)
    return dataclasses.replace(event, result=dataclasses.replace(result, output=output))


def _output_adapter(output_type: Any) -> TypeAdapter[Any]:
    try:
        return _cached_output_adapter(output_type)
    except TypeError:  # an unhashable type expression
        from pydantic import TypeAdapter

        return TypeAdapter(output_type)


@functools.lru_cache(maxsize=32)
def _cached_output_adapter(output_type: Any) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(output_type)


def event_to_dict(event: Event) -> dict[str, Any]:
    """The event as a JSON-compatible dict (the form ``to_json`` writes)."""
    result: dict[str, Any] = _adapter().dump_python(event, mode="json")
    return result
