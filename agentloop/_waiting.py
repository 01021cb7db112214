"""Runs that wait: which calls need a decision, checking the decisions a resume brings, asking
a live approver, and the state a run without a session is resumed from.

Waiting is a state, not a blocked task: the step in flight is kept (committed to the session,
or in ``RunResult.resume_state``) with the results of its actions that ran and its pending
calls; the next invocation continues from that reply, running only its undecided actions, with
the same tags and so the same idempotency keys.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio

from ._decisions import Approve, Deny, Edit, ExternalResult
from ._errors import UserError, as_given
from ._session_run import Loaded, step_from_json, step_to_json
from ._steps import PendingCall, Step

# The resume state's fields: pydantic reads them at run time.
from .models._types import InputPart, Message

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from ._actions import Toolbox
    from ._context import StateView
    from ._decisions import Approver, Decision
    from ._steps import Action, ActionResult
    from .models._types import RunContext

logger = logging.getLogger("agentloop")

STATE_VERSION = 1
"""The form of ``RunResult.resume_state``; a state of another form is refused."""

DecidedBy = Literal["approver", "timeout", "resume"]


class DecisionError(UserError):
    """Decisions a resume cannot take (unknown, missing, of the wrong kind, an edit that fails
    the tool's schema): raised before anything runs or is recorded, so nothing is lost."""


async def decision_needed(
    toolbox: Toolbox, action: Action, context: RunContext
) -> Literal["approval", "external"] | None:
    """Whether the call waits for a decision, and which kind. A predicate that fails counts
    as needing approval: a call that might need one never runs unasked."""
    found = toolbox.find(action.name, action.path)
    if not isinstance(found, tuple):
        return None  # an unknown tool: its error result needs no decision
    activity = found[1]
    if activity.external:
        return "external"
    rule = activity.requires_approval
    if rule is False:
        return None
    if rule is True:
        return "approval"
    try:
        needed = rule(action, context)
        if inspect.isawaitable(needed):
            needed = await needed
    except Exception as exc:
        logger.warning(
            "the requires_approval predicate of tool %r failed (%s: %s); the call waits for "
            "approval",
            action.name,
            type(exc).__name__,
            exc,
        )
        return "approval"
    return "approval" if needed else None


def pending_call(
    action: Action,
    kind: Literal["approval", "external", "elicitation"],
    *,
    prefix: str,
    branch: str,
) -> PendingCall:
    return PendingCall(
        id=f"{prefix}{action.tag}",
        tag=action.tag,
        name=action.name,
        path=action.path,
        input=action.input,
        kind=kind,
        branch=branch,
    )


def check_decisions(
    waiting: Step | None, decisions: Mapping[str, Decision], toolbox: Toolbox, *, prefix: str
) -> None:
    """Every pending call of the ``waiting`` step has a decision of its kind, no decision is
    for another call, and every edit passes its tool's schema (a sub-agent's tool's too); else
    ``DecisionError``, before anything runs. ``prefix``: the run's pending call ids'."""
    pending = waiting.pending if waiting is not None else ()
    wanted = {p.id: p for p in pending}
    unknown = [k for k in decisions if k not in wanted]
    if unknown:
        known = ", ".join(repr(k) for k in wanted) or "none (the run is not waiting)"
        raise DecisionError(
            f"decisions for unknown calls: {', '.join(repr(k) for k in unknown)}; the calls "
            f"waiting are: {known} (a call decided before has run, and is not decided again)"
        )
    missing = [k for k in wanted if k not in decisions]
    if missing:
        raise DecisionError(
            f"the run waits on decisions for {', '.join(repr(k) for k in missing)}: decide "
            "every pending call (result.pending) in one resume"
        )
    for key, decision in decisions.items():
        call = wanted[key]
        if not isinstance(as_given(decision), Approve | Deny | Edit | ExternalResult):
            raise DecisionError(
                f"the decision for {key!r} must be Approve(), Deny(reason), Edit(arguments) or "
                f"ExternalResult(...), not {decision!r}"
            )
        if call.kind == "external" and not isinstance(decision, ExternalResult):
            raise DecisionError(
                f"{key!r} is a call of the external tool {call.name!r}: its decision is its "
                "result, ExternalResult(output=...)"
            )
        if call.kind == "approval" and isinstance(decision, ExternalResult):
            raise DecisionError(
                f"{key!r} is a call that needs approval: Approve(), Deny(reason) or "
                "Edit(arguments), not a result"
            )
        if call.kind == "elicitation":
            if isinstance(decision, ExternalResult):
                raise DecisionError(
                    f"{key!r} is a running call's question: Edit(values) answers it, Approve() "
                    "accepts with none, Deny(reason) declines; not a result"
                )
            continue  # an edit's values answer the question: they are no tool arguments
        if isinstance(decision, Edit) and waiting is not None:
            tools = _toolbox_of(key.removeprefix(prefix), waiting, toolbox)
            if tools is None or isinstance(tools.find(call.name, call.path), str):
                continue  # a tool found when the sub-run starts (a toolset's): it checks it
            problem = tools.check_arguments(call.name, call.path, decision.arguments)
            if problem is not None:
                raise DecisionError(f"the edit of {key!r} is not valid: {problem}")


def _toolbox_of(path: str, step: Step, toolbox: Toolbox) -> Toolbox | None:
    """The tools of the run that made the call ``path`` names: this run's, or a waiting
    sub-run's (``tag/tag/...``), through the sub-agent tools' agents; ``None`` if unknown."""
    from ._actions import SUBAGENT, Toolbox

    while "/" in path:
        tag, path = path.split("/", 1)
        result = next((r for r in step.actions if r.tag == tag), None)
        subrun = result.subrun if result is not None else None
        if result is None or subrun is None or subrun.resume_state is None:
            return None
        found = toolbox.find(result.name, result.path)
        child = getattr(found[1].fn, SUBAGENT, None) if isinstance(found, tuple) else None
        tools = getattr(child, "static_tools", None)
        if tools is None:
            return None
        toolbox = Toolbox(tools)
        step = step_from_json(subrun.resume_state["reply"])
    return toolbox


async def ask(
    approver: Approver, call: PendingCall, context: RunContext, within: float | None
) -> tuple[Approve | Deny | Edit | None, DecidedBy]:
    """The live approver's decision; no answer ``within`` seconds is a denial saying so, and so
    is an approver that fails or answers something else (logged: that is a bug to fix)."""
    timeout = within
    decision: object = None
    with anyio.move_on_after(timeout) as scope:
        try:
            decision = as_given(await approver(call, context))  # a callback of the user's
        except Exception as exc:
            logger.warning(
                "the approver failed on call %r (%s: %s); the call is denied",
                call.id,
                type(exc).__name__,
                exc,
            )
            return Deny(f"the approver failed: {type(exc).__name__}: {exc}"), "approver"
    if scope.cancelled_caught:
        return Deny(f"no decision within {timeout:g}s (the approval timed out)"), "timeout"
    if decision is None or isinstance(decision, Approve | Deny | Edit):
        return decision, "approver"
    logger.warning("the approver answered %r for call %r; the call is denied", decision, call.id)
    return Deny(f"the approver answered {type(decision).__name__}, not a decision"), "approver"


def subrun_waits(result: ActionResult) -> bool:
    """The action is a sub-agent's run that waits on decisions: the step waits with it."""
    return result.subrun is not None and bool(result.subrun.pending)


def step_pending(results: Sequence[ActionResult], own: Sequence[PendingCall]) -> list[PendingCall]:
    """The calls a step waits on: its own, and those its waiting sub-runs wait on."""
    calls = list(own)
    for result in results:
        if result.subrun is not None:
            calls.extend(result.subrun.pending)
    return calls


# -- the state of a run without a session ------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumeState:
    """``RunResult.resume_state``: a waiting run's identity, its steps, the step in flight
    (its reply, the results so far, its pending calls), state and memory."""

    version: int
    run_id: str
    agent: str
    branch: str
    input: str
    steps: tuple[dict[str, Any], ...]
    reply: dict[str, Any]
    state: dict[str, Any]
    memory: tuple[Message, ...] = ()
    input_parts: tuple[InputPart, ...] | None = None  # an input of images or files


@functools.cache
def _state_adapter() -> TypeAdapter[ResumeState]:
    from pydantic import TypeAdapter

    return TypeAdapter(ResumeState)


def encode_state(
    *,
    run_id: str,
    agent: str,
    branch: str,
    user_input: str,
    steps: Sequence[Step],
    waiting: Step,
    state: Mapping[str, Any],
    memory: Sequence[Message],
    input_parts: tuple[InputPart, ...] | None = None,
) -> dict[str, Any]:
    """The JSON-compatible state a run without a session resumes from."""
    value = ResumeState(
        version=STATE_VERSION,
        run_id=run_id,
        agent=agent,
        branch=branch,
        input=user_input,
        steps=tuple(step_to_json(s) for s in steps),
        reply=step_to_json(waiting),
        state=dict(state),
        memory=tuple(memory),
        input_parts=input_parts,
    )
    encoded: dict[str, Any] = _state_adapter().dump_python(value, mode="json")
    return encoded


def decode_state(data: object, *, agent: str, state: StateView | None = None) -> Loaded:
    """What a run continues from, read from a ``resume_state``; ``state``: a sub-run's, which
    is its parent's (never the copy in the resume state)."""
    from pydantic import ValidationError

    from ._context import StateView

    if not isinstance(data, Mapping) or cast("Mapping[str, Any]", data).get("version") != (
        STATE_VERSION
    ):
        raise UserError(
            "resume_state must be the resume_state of a waiting RunResult (a JSON object of "
            f"version {STATE_VERSION})"
        )
    try:
        value = _state_adapter().validate_python(data)
        steps = tuple(step_from_json(s) for s in value.steps)
        reply = step_from_json(value.reply)
    except ValidationError as exc:
        raise UserError(f"resume_state is not a valid resume state: {exc}") from None
    if value.agent != agent:
        raise UserError(
            f"resume_state is of a run of agent {value.agent!r}, not of {agent!r}: resume it "
            "with the agent that ran it"
        )
    return Loaded(
        state=state if state is not None else StateView(value.state),
        memory=value.memory,
        run_id=value.run_id,
        user_input=value.input,
        input_parts=value.input_parts,
        steps=steps,
        reply=reply,
    )
