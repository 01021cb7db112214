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

from ._steps import ActionResult, PendingCall, RunErrorInfo, RunResult, Step
from .models._types import DiscardReason, FinishReason, ProviderPart, Usage

if TYPE_CHECKING:
    from pydantic import TypeAdapter


@dataclass(frozen=True, kw_only=True, slots=True)
class _Event:
    """The fields every event has (documented on ``Event``).

    Args:
        run_id: The id of the run that emitted it.
        parent_run_id: The parent run's id, for a sub-agent's run; else ``None``.
        branch: The run's branch (the agent's name; ``parent.child`` for a sub-agent's run;
            after a handoff, the agent handed over to takes the branch's last part).
        seq: The event's number, counted per root run (shared by its sub-runs).
        agent: The name of the agent the run is under when it emits it (it changes with a
            handoff).
        type: The event's kind (its JSON discriminator), fixed per class.
    """

    run_id: str
    parent_run_id: str | None = None
    branch: str
    seq: int
    agent: str = ""

    def to_json(self) -> str:
        """The event as JSON (``event_from_json`` reads it back)."""
        return _class_adapter(type(self)).dump_json(self).decode()

    @classmethod
    def from_json(cls, data: str | bytes, *, output_type: Any = None) -> Event:
        """The event serialised in ``data`` (any event type, as ``event_from_json``).

        Args:
            data: JSON written by ``to_json``.
            output_type: The agent's output type, to restore a ``RunFinished``'s typed answer.
        """
        return event_from_json(data, output_type=output_type)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted(_Event):
    """A run began (``agent`` is the agent it starts under: a session's active agent, after
    a handoff in an earlier run).

    Args:
        input: The run's input (empty for a resumed run).
    """

    input: str
    type: Literal["run_started"] = "run_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCallStarted(_Event):
    """An attempt opened a provider stream.

    Args:
        attempt: The attempt's number, counted per run (retries are new attempts).
        step: The step the call is for.
        model: The model's name.
    """

    attempt: int
    step: int
    model: str
    type: Literal["model_call_started"] = "model_call_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCallFinished(_Event):
    """An attempt's stream ended.

    Args:
        attempt: The attempt's number.
        finish_reason: Why the reply ended (``stop``, ``tool_calls``, ``length``, …).
        usage: The tokens the provider reported, if it did.
        error: Why the stream failed (``finish_reason="error"``), if it did: also when the
            reply so far was kept because its actions had started (it is never retried).
    """

    attempt: int
    finish_reason: FinishReason
    usage: Usage | None = None
    error: RunErrorInfo | None = None
    type: Literal["model_call_finished"] = "model_call_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta(_Event):
    """Text whose role is not known yet: it becomes the thought if the reply has actions,
    else the answer (``StepFinished`` says which).

    Args:
        attempt: The attempt that produced it (see ``AttemptDiscarded``).
        text: The new text.
    """

    attempt: int
    text: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ThoughtDelta(_Event):
    """Reasoning text: a ReAct thought, or the provider's thinking.

    Args:
        attempt: The attempt that produced it.
        text: The new text.
    """

    attempt: int
    text: str
    type: Literal["thought_delta"] = "thought_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerDelta(_Event):
    """Text of ReAct answer section ``section`` (from 0 within the attempt). A reply may write
    several answers; the last is the run's answer, the earlier ones become part of the thought,
    so a UI should show a new section in place of the previous one.

    Args:
        attempt: The attempt that produced it.
        text: The new text.
        section: The answer section it belongs to, from 0.
    """

    attempt: int
    text: str
    section: int = 0
    type: Literal["answer_delta"] = "answer_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class PartialOutput(_Event):
    """The structured answer (``output_type``) as far as it has streamed, validated: each one
    replaces the one before. Fields not yet streamed have their defaults; a string still
    streaming is cut where the stream is. Sent when the answer grew by a quarter since the
    last one (at least 64 characters), and when it is complete, so a long answer costs linear
    work. Withdrawn with its attempt (``AttemptDiscarded``).

    Args:
        attempt: The attempt that produced it.
        output: The partial answer, of the output type.
    """

    attempt: int
    output: Any
    type: Literal["partial_output"] = "partial_output"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionArgsDelta(_Event):
    """Arguments of action ``index`` of the attempt as they stream (``tag`` and ``name`` are
    ``None`` while a ReAct action object is still open).

    Args:
        attempt: The attempt that produced it.
        index: The action's position in the reply, from 0.
        tag: The action's tag, once known.
        name: The tool's name, once known.
        text: The new piece of the arguments' JSON.
    """

    attempt: int
    index: int
    tag: str | None = None
    name: str | None = None
    text: str
    type: Literal["action_args_delta"] = "action_args_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderEvent(_Event):
    """A provider block that is not an action (server-side web search, its results).

    Args:
        attempt: The attempt that produced it.
        part: The block, as the provider sent it.
    """

    attempt: int
    part: ProviderPart
    type: Literal["provider_event"] = "provider_event"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionStarted(_Event):
    """A tool started (often while the reply still streams).

    Args:
        attempt: The attempt whose reply held the action.
        tag: The action's tag.
        name: The tool's name.
        path: The toolkit activity, if any.
        input: The arguments the tool receives.
    """

    attempt: int
    tag: str
    name: str
    path: str | None = None
    input: Any = None
    type: Literal["action_started"] = "action_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionProgress(_Event):
    """A running tool said how far it is (``ToolContext.report_progress``; an MCP server's
    ``notifications/progress`` for a call). Between the action's ``ActionStarted`` and its
    ``ActionFinished``; a progress bar, not a record: it is not kept in the step.

    Args:
        attempt: The attempt whose reply held the action.
        tag: The action's tag.
        name: The tool's name.
        progress: How far it is (grows with each report; its unit is the tool's).
        total: What ``progress`` reaches when the tool is done, if the tool knows.
        message: What it is doing now, if it says.
    """

    attempt: int
    tag: str
    name: str
    progress: float
    total: float | None = None
    message: str | None = None
    type: Literal["action_progress"] = "action_progress"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionFinished(_Event):
    """A tool returned, or failed.

    Args:
        result: Its output or error.
    """

    result: ActionResult
    type: Literal["action_finished"] = "action_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionAwaiting(_Event):
    """A call awaits a decision: a tool that needs approval (asked of the agent's approver, or
    left pending for ``resume``), or an external tool's call (its result comes from the caller).

    Args:
        call: The call, with the ``id`` its decision is keyed by.
    """

    call: PendingCall
    type: Literal["action_awaiting"] = "action_awaiting"


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionDecided(_Event):
    """A pending call was decided (``ActionStarted`` follows for a call that runs).

    Args:
        call: The call decided.
        decision: ``approve``, ``deny``, ``edit`` or ``result`` (an external tool's result).
        by: Who decided: ``approver`` (the agent's, live), ``timeout`` (the approver did not
            answer in time: a denial) or ``resume`` (the caller's decisions).
        reason: A denial's reason.
        arguments: An edit's arguments.
    """

    call: PendingCall
    decision: Literal["approve", "deny", "edit", "result"]
    by: Literal["approver", "timeout", "resume"]
    reason: str | None = None
    arguments: Any = None
    type: Literal["action_decided"] = "action_decided"


@dataclass(frozen=True, kw_only=True, slots=True)
class StepFinished(_Event):
    """A turn is complete: thought, actions with their results, answer.

    Args:
        step: The step, as recorded.
    """

    step: Step
    type: Literal["step_finished"] = "step_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptDiscarded(_Event):
    """Withdraw the text deltas of ``attempt`` (never its actions).

    Args:
        attempt: The attempt withdrawn.
        reason: ``retry`` (the stream failed and is asked again), ``goal`` (goal enforcement),
            ``middleware`` (a model middleware discarded it), ``fallback`` (the model failed
            and the next fallback model is asked), ``guardrail`` (a guardrail tripped on it)
            or ``limit`` (a usage limit was reached while it streamed).
        error: For a ``retry`` or a ``fallback``, why the attempt failed.
        retry_in: For a ``retry`` or a ``fallback``, the seconds before the next attempt.
    """

    attempt: int
    reason: DiscardReason
    error: RunErrorInfo | None = None
    retry_in: float | None = None
    type: Literal["attempt_discarded"] = "attempt_discarded"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished(_Event):
    """The run ended with a result (``result.error`` set when it has no usable answer).

    Args:
        result: The run's result.
    """

    result: RunResult
    type: Literal["run_finished"] = "run_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunWaiting(_Event):
    """The run waits on decisions (``result.pending``): this invocation ends here, holding no
    task and no lease. ``Agent.resume`` with the decisions continues it; a run ends with
    exactly one of ``RunFinished``, ``RunFailed`` or ``RunWaiting``.

    Args:
        result: The run's result so far: ``status == "waiting"``, with ``pending``.
    """

    result: RunResult
    type: Literal["run_waiting"] = "run_waiting"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFailed(_Event):
    """The run failed: a model error after retries, its deadline, or a runtime fault.

    Args:
        error: What failed.
    """

    error: RunErrorInfo
    type: Literal["run_failed"] = "run_failed"


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextTrimmed(_Event):
    """The next request's prompt was trimmed to fit the agent's ``ContextWindow``: older tool
    results elided, then older steps summarised (or dropped, without a summarizer). It comes
    before that request's ``ModelCallStarted``. Token counts are estimates, corrected by the
    provider's reported usage.

    Args:
        step: The step whose request was trimmed.
        elided_results: Tool results (or ReAct result turns) elided by this trim.
        summarized_steps: Earlier steps folded into the summary (or dropped) by this trim.
        tokens_before: The prompt's estimated tokens before the trim.
        tokens_after: Its estimated tokens after.
        max_tokens: The window's budget.
    """

    step: int
    elided_results: int
    summarized_steps: int
    tokens_before: int
    tokens_after: int
    max_tokens: int
    type: Literal["context_trimmed"] = "context_trimmed"


Event: TypeAlias = (
    RunStarted
    | ModelCallStarted
    | ModelCallFinished
    | TextDelta
    | ThoughtDelta
    | AnswerDelta
    | PartialOutput
    | ActionArgsDelta
    | ProviderEvent
    | ActionStarted
    | ActionProgress
    | ActionFinished
    | ActionAwaiting
    | ActionDecided
    | StepFinished
    | AttemptDiscarded
    | RunFinished
    | RunWaiting
    | RunFailed
    | ContextTrimmed
)
"""Any event a run streams. Every event has ``run_id``, ``parent_run_id`` (a sub-agent's
parent run, else ``None``), ``branch``, ``seq`` (counted per root run, shared by its sub-runs)
and ``type`` (its JSON discriminator); ``to_json()`` serialises it."""

EVENT_TYPES: tuple[type[_Event], ...] = (
    RunStarted,
    ModelCallStarted,
    ModelCallFinished,
    TextDelta,
    ThoughtDelta,
    AnswerDelta,
    PartialOutput,
    ActionArgsDelta,
    ProviderEvent,
    ActionStarted,
    ActionProgress,
    ActionFinished,
    ActionAwaiting,
    ActionDecided,
    StepFinished,
    AttemptDiscarded,
    RunFinished,
    RunWaiting,
    RunFailed,
    ContextTrimmed,
)


@functools.cache
def _adapter() -> TypeAdapter[Event]:
    from pydantic import Field, TypeAdapter  # built on first use: events are plain dataclasses

    return TypeAdapter(Annotated[Event, Field(discriminator="type")])


_CLASS_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _class_adapter(cls: type) -> TypeAdapter[Any]:
    """One event class's own adapter: the same JSON as the union's (``_adapter``), without
    pydantic-core's dispatch over the union's members, which cost nearly as much again as
    writing the event. A class outside the union (a subclass) goes through the union."""
    adapter = _CLASS_ADAPTERS.get(cls)
    if adapter is None:
        from pydantic import TypeAdapter

        adapter = TypeAdapter(cls) if cls in EVENT_TYPES else _adapter()
        _CLASS_ADAPTERS[cls] = adapter
    return adapter


def event_from_json(data: str | bytes, *, output_type: Any = None) -> Event:
    """Parse an event serialised with ``to_json()``.

    JSON holds a typed output in its JSON form (a pydantic model or a dataclass is a dict).
    Given the agent's ``output_type``, the answer of a root run's ``RunFinished`` is validated
    back into that type (a sub-run's output, and a result with an error, stay as they are).

    Args:
        data: The JSON text.
        output_type: The agent's output type, to restore a ``RunFinished``'s typed answer.
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
