"""The run's record: actions, their results, steps and the final result (frozen values)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, cast

from typing_extensions import TypeVar

from ._errors import RUN_ERRORS, DecisionsPending, RunError
from ._generic import subscript_callable
from .models._types import ImagePart, Part, ThoughtPart, ToolCallPart, Usage

OutputT = TypeVar("OutputT", default=Any)

ActionErrorKind: TypeAlias = Literal[
    "invalid_action",  # the model's action could not be parsed (ReAct JSON, missing fields)
    "unknown_tool",  # no tool or activity of that name
    "invalid_arguments",  # the arguments failed the tool's schema
    "tool_error",  # the tool raised
    "timeout",  # the tool ran past its timeout
    "too_many_actions",  # the step asked for more actions than the limit allows
    "duplicate_tag",  # another action of the step has the same tag
    "not_run",  # the reply came on the run's last allowed step (max_steps): nothing ran
    "denied",  # a call that needed approval was denied (Deny, or an approver's timeout)
    "retry",  # the tool raised ModelRetry: the model is told why and may call it again
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Action:
    """One action the model asked for: ``name``/``path`` address a tool activity.

    Args:
        tag: The action's id within its step (the provider's call id, or the ReAct ``tag``).
        name: The tool's name.
        path: The activity of a toolkit (``None`` for a plain tool).
        input: The arguments (parsed JSON; the raw text when they did not parse).
        attempt: The model-call attempt whose reply held the action.
    """

    tag: str
    name: str
    path: str | None = None
    input: Any = None
    attempt: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionResult:
    """What an action produced: ``output`` (text or a JSON value), or ``error`` (a message the
    model sees next step) with its ``error_kind``.

    Args:
        tag: The action's id within its step.
        name: The tool's name.
        path: The activity of a toolkit (``None`` for a plain tool).
        input: The arguments the tool received (after validation).
        output: What the tool returned (``None`` on error).
        error: The error message the model is shown, or ``None``.
        error_kind: Why it failed: ``invalid_action``, ``unknown_tool``, ``invalid_arguments``,
            ``tool_error``, ``timeout``, ``too_many_actions``, ``duplicate_tag``, ``not_run``
            or ``denied``.
        attempt: The model-call attempt whose reply held the action.
        subrun: A sub-agent's run (``Agent.as_tool``), with its steps.
        images: Images the tool returned. A tool that returns an ``ImagePart``, or a list
            holding some (with text), gets them here and the text as ``output``.
    """

    tag: str
    name: str
    path: str | None = None
    input: Any = None
    output: Any = None
    error: str | None = None
    error_kind: ActionErrorKind | None = None
    attempt: int = 0
    subrun: RunResult | None = None
    images: tuple[ImagePart, ...] = ()

    @property
    def is_error(self) -> bool:
        return self.error is not None

    @property
    def content(self) -> str:
        """The result as text, as the model is shown it."""
        if self.error is not None:
            return self.error
        if isinstance(self.output, str):
            return self.output
        return json.dumps(self.output, ensure_ascii=False, default=str)

    def as_call(self) -> ToolCallPart:
        arguments = (
            self.input
            if isinstance(self.input, str)
            else json.dumps(self.input, ensure_ascii=False)
        )
        return ToolCallPart(id=self.tag, name=self.name, path=self.path, arguments=arguments)


def split_images(value: Any) -> tuple[Any, tuple[ImagePart, ...]]:
    """A tool's return value as its output and the images it holds: an ``ImagePart``, or a
    list or tuple holding some, gives its other items as text (a line each) and its images."""
    if isinstance(value, ImagePart):
        value = (value,)
    elif not (isinstance(value, list | tuple) and any(isinstance(v, ImagePart) for v in value)):
        return value, ()
    images = tuple(v for v in value if isinstance(v, ImagePart))
    text = "\n".join(
        v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
        for v in value
        if not isinstance(v, ImagePart)
    )
    return text or f"[{len(images)} image(s) attached]", images


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingCall:
    """A call the run waits on: a tool that needs approval, or an external tool's call.

    ``id`` keys its decision in ``Agent.resume(decisions=...)``: the call's tag, or, for a call
    of a sub-agent's run (``Agent.as_tool``), the parent's tag and the sub-run's id joined by
    ``/``.

    Args:
        id: The key of its decision.
        tag: The call's tag in its own run's step.
        name: The tool's name.
        path: The toolkit activity, if any.
        input: The arguments the model gave.
        kind: ``approval`` (approve, deny or edit it), ``external`` (supply its result) or
            ``elicitation``: the running call asked a question (``ToolContext.ask_approver``,
            an MCP server's elicitation, its ``input``) with no live approver to answer;
            ``Edit(values)`` answers it with those values, ``Approve()`` with none,
            ``Deny(reason)`` declines, and the call runs again to hear the answer.
        branch: The branch of the run that made the call.
    """

    id: str
    tag: str
    name: str
    path: str | None = None
    input: Any = None
    kind: Literal["approval", "external", "elicitation"] = "approval"
    branch: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One model turn and what came of it.

    ``thought`` is the visible reasoning (a ReAct ``Thought:``, or native text that came with
    actions); ``answer`` is set on the final step. ``carried`` holds actions that started in an
    attempt a middleware or retry discarded: they ran, so they are recorded and replayed before
    this step's own turn. ``feedback`` is the runtime's message to the model after this step
    (asking it to keep going, or the validation errors of an answer). ``parts`` is the reply as
    the provider sent it, replayed in native mode.

    Args:
        index: The step's number in its run, from 0.
        attempt: The model-call attempt whose reply this step is.
        thought: The visible reasoning that came with the actions.
        actions: The actions' results, in the model's order.
        carried: Results of actions started in a discarded attempt (see above).
        answer: The answer text, on the final step.
        feedback: The runtime's message to the model after this step.
        parts: The reply as the provider sent it.
        finish_reason: Why the reply ended (``stop``, ``tool_calls``, ``length``, …).
        usage: The tokens of this step's model call.
        pending: The calls it waits on (only the step in flight of a waiting run: ``actions``
            then holds the results so far).
    """

    index: int
    attempt: int
    thought: str = ""
    actions: tuple[ActionResult, ...] = ()
    carried: tuple[ActionResult, ...] = ()
    answer: str | None = None
    feedback: str | None = None
    parts: tuple[Part, ...] = ()
    finish_reason: str = "stop"
    usage: Usage | None = None
    pending: tuple[PendingCall, ...] = ()

    @property
    def reasoning(self) -> str:
        """Provider reasoning (thinking, reasoning summaries) of this step's reply."""
        return "".join(
            p.text for p in self.parts if isinstance(p, ThoughtPart) and p.provider is not None
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RunErrorInfo:
    """Why a run ended without a usable answer (``RunResult.error``).

    Args:
        kind: ``max_steps_exceeded``, ``output_invalid``, ``reply_too_large``, ``refused``,
            ``truncated``, ``content_filtered``, ``usage_limit_exceeded``,
            ``guardrail_tripped``, ``tool_retries_exceeded``, ``context_window_exceeded`` or
            ``payload_too_large`` (the ``RunError`` subclass it raises as).
        message: What happened, in words.
        details: What it is about, as data: a usage limit's ``limit``, ``allowed`` and
            ``used``; a guardrail's ``guardrail``, ``stage`` and ``info``.
    """

    kind: str
    message: str
    details: Mapping[str, Any] | None = None


@subscript_callable
@dataclass(frozen=True, kw_only=True, slots=True)
class RunResult(Generic[OutputT]):
    """The outcome of a run.

    ``output`` is the typed answer (``output_type``), the answer text, or — with
    ``reflect_on_tool_use=False`` — the first action step's results in model order. ``error`` is
    set when the run ended without a usable answer (step limit, invalid output, refusal, …), and
    then ``output`` is ``None``: an answer that never validated is not a value of the output type
    (the model's last text stays in ``text``). ``unwrap()`` returns the output or raises the
    matching ``RunError``. A run that waits on decisions (``pending``: approvals, external
    tools) has neither output nor error: ``status`` is ``"waiting"``, ``unwrap()`` raises
    ``DecisionsPending`` and ``raise_for_error()`` does not raise (waiting is no error); pass
    the decisions to ``Agent.resume``, with ``resume_state`` for a run without a session.
    ``usage`` counts every model call of the run and its sub-runs,
    discarded attempts included; ``usage_by_model`` splits it by ``"provider:model"`` (what
    ``PriceTable.cost`` prices).

    Args:
        run_id: The run's id.
        agent: The agent's name.
        branch: The run's branch (``parent.child`` for a sub-agent's run).
        output: The typed answer, the answer text, or the actions' results (see above);
            ``None`` when ``error`` is set.
        text: The answer as text.
        steps: Every step of the run, in order.
        usage: Tokens and requests of the run and its sub-runs.
        error: Why the run ended without a usable answer, or ``None``.
        state: The run's state at its end (a session's persistent keys, or ``state=``'s).
        usage_by_model: ``usage`` split by ``"provider:model"``.
        pending: The calls a waiting run waits on, each decided by its ``id``.
        resume_state: A waiting run without a session: what ``Agent.resume(resume_state=...)``
            continues it from (JSON-compatible; its size grows with the run's steps).
    """

    run_id: str
    agent: str
    branch: str
    output: OutputT | None = None
    text: str | None = None
    steps: tuple[Step, ...] = ()
    usage: Usage = field(default_factory=Usage)
    error: RunErrorInfo | None = None
    state: Mapping[str, Any] | None = None
    usage_by_model: Mapping[str, Usage] = field(default_factory=dict)
    pending: tuple[PendingCall, ...] = ()
    resume_state: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.error is not None and self.output is not None:
            raise ValueError(
                f"a result with an error ({self.error.kind}) has no output: its text goes in "
                "`text`, its output is None"
            )

    @property
    def ok(self) -> bool:
        """An answer: no error, and no call waiting on a decision."""
        return self.error is None and not self.pending

    @property
    def status(self) -> Literal["finished", "failed", "waiting"]:
        """``waiting`` (calls await decisions), ``failed`` (``error`` is set) or ``finished``."""
        if self.pending:
            return "waiting"
        return "failed" if self.error is not None else "finished"

    def raise_for_error(self) -> None:
        """``raise_on_error=True``: a result with an error raises the matching ``RunError``."""
        if self.error is not None:
            cls = RUN_ERRORS.get(self.error.kind, RunError)
            raise cls(self.error.message, result=self, details=self.error.details)

    def unwrap(self) -> OutputT:
        """The output, or the matching ``RunError`` raised when the run ended without one
        (``DecisionsPending`` when it waits on decisions)."""
        self.raise_for_error()
        if self.pending:
            ids = ", ".join(repr(p.id) for p in self.pending)
            raise DecisionsPending(
                f"the run waits on decisions for {ids}: pass them to Agent.resume", result=self
            )
        # Without an error the output is the run's answer: of the output type (or the text,
        # or the actions' results with reflect_on_tool_use=False).
        return cast("OutputT", self.output)
