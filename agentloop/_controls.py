"""The run's controls on the engine's seams: input guardrails as the innermost model
middleware; tool guardrails, the tool-call limit and ``ModelRetry`` budgets as the innermost
tool middleware (``ModelRetry`` budgets are counted as actions finish, ``RunCore``); output validators and guardrails where the loop settles an answer. A control
that ends the run from inside an action (where errors are the model's to see) asks the run to
stop (``RunCore.stop``); the loop ends it once the step's actions are done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ._actions import error_result
from ._errors import ModelRetry, OutputInvalid, RunError, UserError
from ._guardrails import InputGuardrail, ToolGuardrail, Tripwire, outcome, tripped
from ._handoff import ACTIVE_AGENT_KEY, Handoff
from ._run import run_of

if TYPE_CHECKING:
    from ._middleware import ModelCall, ModelMiddleware, ToolCall, ToolCallNext, ToolMiddleware
    from ._plan import Plan, RunnableAgent
    from ._run import RunCore
    from ._steps import ActionResult, Step
    from .models._types import ModelRequest, ModelResponse

_INPUT_CHECKED = "input_checked"


def input_middleware(guardrails: Sequence[InputGuardrail]) -> ModelMiddleware | None:
    """The model middleware that checks the run's input on its first model call."""
    if not guardrails:
        return None
    blocking = [g for g in guardrails if not g.concurrent]
    concurrent = [g for g in guardrails if g.concurrent]

    async def check_input(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        context = request.run
        if context is None:
            return await call_next(request)
        run = run_of(context)
        scratch = context.scratch(check_input)
        if scratch.get(_INPUT_CHECKED) or run.steps:
            return await call_next(request)
        scratch[_INPUT_CHECKED] = True
        for guardrail in blocking:
            await _check_input(run, guardrail)
        if not concurrent:
            return await call_next(request)
        # Nothing but a cancellation leaves the task group (its errors would come out grouped):
        # a trip, or a failure of a check or of the call, is kept and raised after it.
        failures: list[Exception] = []
        response: ModelResponse | None = None
        async with anyio.create_task_group() as tg:
            for guardrail in concurrent:
                tg.start_soon(_check_concurrently, run, guardrail, failures, tg.cancel_scope)
            try:
                response = await call_next(request)
            except Exception as exc:
                failures.append(exc)
                tg.cancel_scope.cancel()
        if failures:
            raise failures[0]  # the first: a trip that cancelled the call comes before it
        if response is None:  # a fault of ours: the call was cancelled by nothing we know
            raise RuntimeError("the model call was cancelled without a trip")
        return response

    return check_input


async def _check_input(run: RunCore, guardrail: InputGuardrail) -> None:
    wire = await outcome(guardrail.check(run.context, run.user_input))
    if isinstance(wire, Tripwire):
        raise tripped(guardrail.name, "input", wire)


async def _check_concurrently(
    run: RunCore, guardrail: InputGuardrail, failures: list[Exception], scope: anyio.CancelScope
) -> None:
    try:
        await _check_input(run, guardrail)
    except Exception as exc:  # a trip, or the check failed: either stops the model call
        failures.append(exc)
        scope.cancel()  # its draft is withdrawn by the loop


def tool_middleware(plan: Plan) -> ToolMiddleware | None:
    """The innermost tool middleware: the tool-call limit and tool guardrails (none without
    either: an action pays for no control it does not use)."""
    limits = plan.usage_limits
    guardrails = plan.tool_guardrails
    counted = limits is not None and limits.tool_calls is not None

    async def control_tool(call: ToolCall, call_next: ToolCallNext) -> ActionResult:
        run = run_of(call.run)
        action = call.action
        if counted and limits is not None:
            exceeded = limits.before_tool_call(run.tool_calls)
            if exceeded is not None:
                run.stop(exceeded)
                return error_result(action, "not_run", str(exceeded))
        run.tool_calls += 1
        checks = [g for g in guardrails if g.applies_to(action.name)]
        for guardrail in checks:
            if guardrail.before is not None:
                wire = await outcome(guardrail.before(call))
                if isinstance(wire, Tripwire):
                    return _blocked(run, call, guardrail, "tool_call", wire)
        result = await call_next(call)
        for guardrail in checks:
            if guardrail.after is not None:
                wire = await outcome(guardrail.after(call, result))
                if isinstance(wire, Tripwire):
                    return _blocked(run, call, guardrail, "tool_result", wire)
        return result

    if not counted and not guardrails:
        return None
    return control_tool


def _blocked(
    run: RunCore, call: ToolCall, guardrail: ToolGuardrail, stage: Any, wire: Tripwire
) -> ActionResult:
    error = tripped(guardrail.name, stage, wire)
    run.stop(error)
    return error_result(call.action, "denied", str(error))


async def check_answer(run: RunCore, output: Any) -> tuple[Any, str | None, RunError | None]:
    """An answer about to end the run, through the output validators and then the output
    guardrails: ``(output, feedback, error)``, with ``feedback`` to ask the model again with
    (a validator's ``ModelRetry``, within ``output_retries``), or ``error`` to end the run."""
    plan = run.plan
    for validator in plan.output_validators:
        try:
            output = await validator(run.context, output)
        except ModelRetry as exc:
            run.output_retries += 1
            if run.output_retries > plan.output_retries:
                message = (
                    f"the answer was rejected more than output_retries={plan.output_retries} "
                    f"times: {exc.message}"
                )
                return output, None, OutputInvalid(message, details={"reason": exc.message})
            return output, f"Your answer was rejected: {exc.message}. Reply again.", None
    for guardrail in plan.output_guardrails:
        wire = await outcome(guardrail.check(run.context, output))
        if isinstance(wire, Tripwire):
            return output, None, tripped(guardrail.name, "output", wire)
    return output, None, None


def has_answer_checks(plan: Plan) -> bool:
    return bool(plan.output_validators or plan.output_guardrails)


# -- handoffs ------------------------------------------------------------------------------------

_MAX_AGENTS = 256  # agents one run may reach through handoffs (a bound on the walk)


def handoff_called(step: Step, plan: Plan) -> Handoff | None:
    """The handoff whose transfer tool the step called (the first, in model order)."""
    if not plan.handoffs:
        return None
    for action in step.actions:
        if not action.is_error:
            handoff = plan.handoffs.get(action.name)
            if handoff is not None:
                return handoff
    return None


def hand_over(run: RunCore, handoff: Handoff) -> RunnableAgent:
    """Switch the run to the agent ``handoff`` names; a session remembers it for its next run."""
    target = handoff.agent
    if isinstance(target, str):
        found = reachable(run.entry_agent).get(target)
        if found is None:
            raise UserError(
                f"handoff to {target!r}: no agent of that name is reachable through handoffs "
                f"from {run.entry_agent.name!r}"
            )
        target = found
    switch_agent(run, target)
    if run.session is not None:
        run.state[ACTIVE_AGENT_KEY + run.entry_branch] = target.name
    return target  # type: ignore[no-any-return]


def restore_agent(run: RunCore) -> None:
    """A session run starts under the agent an earlier run handed over to, when the agent it
    is started with still reaches it."""
    if not run.agent.handoff_targets:
        return
    name = run.state.get(ACTIVE_AGENT_KEY + run.branch)
    if not isinstance(name, str) or name == run.agent.name:
        return
    agent = reachable(run.agent).get(name)
    if agent is not None:
        switch_agent(run, agent)


def resume_handed(run: RunCore, name: str) -> None:
    """A run resumed after a handoff (between steps, or in a wait) goes on under the agent
    handed over to (``UserError`` if its entry agent no longer reaches it)."""
    if name == run.agent.name:
        return
    agent = reachable(run.entry_agent).get(name)
    if agent is None:
        raise UserError(
            f"the run was handed over to {name!r}, which {run.entry_agent.name!r} no longer "
            "reaches through handoffs"
        )
    switch_agent(run, agent)


def handed_from(entry: RunnableAgent, steps: Sequence[Step]) -> int:
    """The first of ``steps`` the agent the run is under replays: after the step of the last
    handoff when it was ``history="input"``, else the first (0)."""
    if not entry.handoff_targets:
        return 0
    handoffs = {h.tool_name: h for a in reachable(entry).values() for h in a.handoff_targets}
    for position in range(len(steps) - 1, -1, -1):
        called = [
            handoffs[a.name]
            for a in steps[position].actions
            if a.name in handoffs and not a.is_error
        ]
        if called:  # the step's first transfer, as ``handoff_called`` takes it
            return position + 1 if called[0].history == "input" else 0
    return 0


def hands_over_to_toolsets(run: RunCore) -> bool:
    """Whether the run may hand over to an agent with toolsets (their scopes need a stack)."""
    entry = run.entry_agent
    if not entry.handoff_targets and run.agent is entry:
        return False
    return any(agent.toolsets for agent in reachable(entry).values())


def switch_agent(run: RunCore, agent: RunnableAgent) -> None:
    """The run goes on under ``agent``, on the branch named for it (its goal, its budget)."""
    run.agent = agent
    head, _, _ = run.branch.rpartition(".")
    run.branch = f"{head}.{agent.name}" if head else agent.name
    if agent.approver is not None:
        run.approver, run.approval_timeout = agent.approver, agent.approval_timeout


def reachable(entry: RunnableAgent) -> dict[str, RunnableAgent]:
    """Every agent ``entry`` reaches through handoffs to agents (not names), by name."""
    found: dict[str, RunnableAgent] = {entry.name: entry}
    todo = [entry]
    while todo and len(found) < _MAX_AGENTS:
        for handoff in todo.pop().handoff_targets:
            agent = handoff.agent
            if not isinstance(agent, str) and agent.name not in found:
                found[agent.name] = agent
                todo.append(agent)
    return found
