"""The loop: one ``while True`` with the limit check first.

Each turn derives the prompt from the run's state, sends it through the model middleware chain,
settles the returned reply (discarding superseded attempts, starting what has not started) and
records a ``Step``. A reply with actions continues the run, an answer ends it, and a reply with
neither is asked again.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

import agentloop._events as ev
import agentloop.models._types as mt

from . import _controls as controls
from ._actions import (
    Executor,
    Ordinals,
    PendingAction,
    Toolbox,
    action_of,
    error_result,
    make_terminal,
    refusal,
    success_result,
)
from ._decisions import Approve, Decision, Deny, Edit, ExternalResult
from ._errors import (
    GuardrailTripped,
    MaxStepsExceeded,
    OutputInvalid,
    RunDeadlineExceeded,
    RunError,
    UsageLimitExceeded,
)
from ._final import KEEP_GOING, REACT_REMINDER, final_text, finish_error, visible_thought
from ._middleware import ModelCall, ToolCall, compose
from ._plan import Plan, plan_run
from ._prompt import build_prompt, replay_step
from ._run import NO_ENTRIES, Launch, RunCore, run_of
from ._session_run import SessionScope
from ._steps import Action, ActionResult, PendingCall, RunErrorInfo, RunResult, Step
from ._tracing import tool_span, traced_model_call, traced_run
from ._turn import ModelTerminal
from ._waiting import (
    DecidedBy,
    DecisionError,
    ask,
    check_decisions,
    decision_needed,
    encode_state,
    pending_call,
    step_pending,
    subrun_waits,
)
from ._window import ContextFitter
from .models._types import DiscardReason, RunContext
from .tools._tool import Tool
from .tools._toolset import run_scope, tools_revision

if TYPE_CHECKING:
    from pydantic import ValidationError

logger = logging.getLogger("agentloop")


def execute(launch: Launch) -> Awaitable[RunResult]:
    """Run to the one terminal event. A failure is emitted as ``RunFailed`` and re-raised;
    cancellation emits nothing and propagates. With a session, the run holds its lease
    throughout and records how it ended (shielded, so that a cancelled run says so too).
    (Not a coroutine itself: an untraced run costs no extra frame.)"""
    if launch.instrument is not None:
        return traced_run(launch, _execute)
    return _execute(launch)


async def _execute(launch: Launch) -> RunResult:
    """The release (after ``end``, which releases with the end) is bounded and never raises: a
    cancelled run stays cancelled, a finished run finished."""
    logger.debug(
        "run %s started: agent %s, branch %s", launch.run_id, launch.agent.name, launch.branch
    )
    session: SessionScope | None = None
    spec = launch.session_spec
    if spec is not None:
        agent = launch.agent
        try:
            session = await SessionScope.open(
                spec,
                owner=launch.run_id,
                ttl=agent.lease_ttl,
                memory=agent.memory,
                parse_output=agent.parse_output,
            )
        except Exception as exc:
            refused = launch.start()  # a run that never held its session: it starts, and fails
            await refused.emit(ev.RunStarted, input=refused.user_input)
            await _failed(refused, exc)
            raise
    run = launch.start(session)
    del launch  # not held while the run is in flight: the run has what it needs of it
    if session is not None:
        controls.restore_agent(run)  # the agent the session's last handoff handed over to
    if run.handed is not None:
        controls.resume_handed(run, run.handed[0])  # resumed after a handoff: under its agent
    cancelled = False
    try:
        await run.emit(ev.RunStarted, input=run.user_input)
        if session is not None and session.earlier_result is not None:
            result = session.earlier_result  # its run_key names a finished run: never run twice
        else:
            result = await _with_deadline(run)
    except Exception as exc:
        if session is not None and not isinstance(exc, DecisionError):
            await session.end("failed", error=exc)  # bad decisions lose nothing: it still waits
        await _failed(run, exc)
        raise
    except BaseException as exc:
        cancelled = True
        # KeyboardInterrupt and SystemExit end the process, not just the run: like a crash,
        # they leave the run unended (resumable), not recorded as cancelled.
        if session is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                shed(exc)  # before its end is handed over, or waited for
            await session.end("cancelled")
        raise
    finally:
        if session is not None:
            await session.release(wait_for_store=not cancelled)
    logger.debug(
        "run %s finished: %d steps, %d model calls, %s",
        run.run_id,
        len(result.steps),
        result.usage.requests,
        result.error.kind if result.error is not None else "ok",
    )
    if result.pending:
        await run.emit(ev.RunWaiting, result=result)
    else:
        await run.emit(ev.RunFinished, result=result)
    return result


def shed(cancelled: BaseException) -> None:
    """Drop a cancellation's traceback and the exceptions chained to it (the run's task
    group's, with theirs): they hold the frames of the whole call chain it unwound, and with
    them the run, its session and everything they hold. Thousands of runs cancelled at once
    would keep all that alive: a trio task group keeps each task's exception until it exits,
    and an asyncio task that ends keeps it in a reference cycle, for the garbage collector to
    walk the whole heap to find. (Re-raised bare, it gains no frame where it is shed.)"""
    cancelled.__traceback__ = None
    cancelled.__cause__ = cancelled.__context__ = None


async def _failed(run: RunCore, exc: Exception) -> None:
    info = RunErrorInfo(kind=type(exc).__name__, message=str(exc))
    logger.debug("run %s failed: %s", run.run_id, info.kind)
    await run.emit(ev.RunFailed, error=info)


def _with_deadline(run: RunCore) -> Awaitable[RunResult]:
    """The run's body, within the agent's deadline if it has one. (Plain functions where
    nothing is awaited around the next layer: a coroutine frame each is held by every run in
    flight.)"""
    agent = run.agent
    body = _in_task_group(run, None if agent.toolsets else agent.static_tools, run.session)
    # Resumed after a handoff, the invocation's deadline is still the one it was given.
    deadline = (agent if run.handed is None else run.entry_agent).deadline
    if deadline is None:
        return body
    return _within(body, deadline)


async def _within(body: Awaitable[RunResult], deadline: float) -> RunResult:
    with anyio.move_on_after(deadline):
        return await body
    raise RunDeadlineExceeded(f"the run's deadline of {deadline:g}s passed")


async def _with_toolsets(run: RunCore) -> RunResult:
    async with AsyncExitStack() as stack:
        tools = await _resolve_tools(run, stack)
        return await _in_task_group(run, tools, None)


async def _in_task_group(
    run: RunCore, tools: Sequence[Tool] | None, session: SessionScope | None
) -> RunResult:
    """Own the run's task group; its tasks never raise, and the loop's error leaves it bare.

    The session's lease is renewed by the store's lease keeper when the store has one, else by
    a task of this group (no task group of its own per run: thousands of runs wait at once):
    a lease lost, or a store failing until it would expire, cancels the run and is raised
    instead. Toolsets (``tools`` is None) start inside it, so the lease is renewed meanwhile,
    and the loop gets a task group of its own within their scopes."""
    error: Exception | None = None
    exits: list[BaseException] = []  # KeyboardInterrupt/SystemExit from tools (they cancel tg)
    lost: list[Exception] = [] if session is not None else _NONE_LOST  # only a lease is lost
    renewal: anyio.CancelScope | None = None
    drop: Callable[[], None] | None = None
    try:
        async with anyio.create_task_group() as tg:
            if session is not None:
                drop = session.kept_by_store(functools.partial(_lost, tg.cancel_scope, lost))
                if drop is None:
                    # Shielded: the renewal ends when the run's body does (``finally`` below),
                    # never by the run's cancellation, which so reaches one task, not two.
                    renewal = anyio.CancelScope(shield=True)
                    tg.start_soon(_renew, session, renewal, tg.cancel_scope, lost)
            try:
                if tools is None:
                    return await _with_toolsets(run)
                return await _loop(run, tg, _toolbox(run, tools), exits)
            except Exception as exc:
                error = exc
                tg.cancel_scope.cancel()
            finally:
                if drop is not None:
                    drop()
                if renewal is not None:
                    renewal.cancel()
    except BaseExceptionGroup as group:
        _raise_exit(group)
        raise
    if exits:
        raise exits[0]
    if error is not None:
        raise error
    if lost:
        raise lost[0]
    raise RuntimeError("the run's task group was cancelled without an error")  # a fault of ours


_NONE_LOST: list[Exception] = []  # a run without a session: never appended to


def _toolbox(run: RunCore, tools: Sequence[Tool]) -> Toolbox:
    """The run's toolbox: the one its agent's runs share when ``tools`` are the agent's own."""
    stages = run.agent.stages
    kept = stages.toolbox
    if kept is not None and kept[0] is tools:
        return kept[1]
    toolbox = Toolbox(tools)
    if tools is run.agent.static_tools:
        stages.toolbox = (run.agent.static_tools, toolbox)
    return toolbox


async def _renew(
    session: SessionScope, renewal: anyio.CancelScope, run: anyio.CancelScope, lost: list[Exception]
) -> None:
    """Keep the lease until ``renewal`` is cancelled; if it is lost, cancel the ``run``."""
    with renewal:
        try:
            await session.keep_alive()
        except Exception as exc:
            _lost(run, lost, exc)


def _lost(run: anyio.CancelScope, lost: list[Exception], exc: Exception) -> None:
    """The lease was lost (or its renewal failed until it would expire): the run ends with it."""
    lost.append(exc)
    run.cancel()


def _raise_exit(group: BaseExceptionGroup[BaseException]) -> None:
    """A ``KeyboardInterrupt`` or ``SystemExit`` in ``group`` leaves as itself, not grouped."""
    exits = group.subgroup((KeyboardInterrupt, SystemExit))
    if exits is None:
        return
    exc: BaseException = exits
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    raise exc from None


def _loop(
    run: RunCore, tg: TaskGroup, toolbox: Toolbox, exits: list[BaseException]
) -> Awaitable[RunResult]:
    if not controls.hands_over_to_toolsets(run):
        return _steps(run, tg, toolbox, exits, None)
    return _steps_in_stack(run, tg, toolbox, exits)


async def _steps_in_stack(
    run: RunCore, tg: TaskGroup, toolbox: Toolbox, exits: list[BaseException]
) -> RunResult:
    async with AsyncExitStack() as stack:  # the scopes of toolsets of agents handed over to
        return await _steps(run, tg, toolbox, exits, stack)


async def _steps(
    run: RunCore,
    tg: TaskGroup,
    toolbox: Toolbox,
    exits: list[BaseException],
    stack: AsyncExitStack | None,
) -> RunResult:
    plan, executor, model_call = _engine(run, tg, toolbox, exits)
    # One user message for the whole run: the same object in every step's prompt lets the
    # driver reuse its encoded JSON instead of encoding it again on every step.
    user = (
        mt.Message(role="user", parts=run.input_parts)
        if run.input_parts
        else mt.Message.user(run.user_input)
    )
    session = run.session
    window = plan.context_window
    fitter = ContextFitter(window) if window is not None else None
    if run.resumed:
        # The history the agent it is under was handed (``Handoff.history``), as before.
        handed_from = (
            controls.handed_from(run.entry_agent, run.steps)
            if run.handed is None
            else run.handed[1]
        )
        run.replayed = [replay_step(step, plan.tool_mode) for step in run.steps[handed_from:]]
        check_decisions(run.committed_reply, run.decisions, toolbox, prefix=run.call_prefix)
    elif run.decisions:
        check_decisions(None, run.decisions, toolbox, prefix=run.call_prefix)
    elif session is not None:
        await session.start(
            agent=plan.name,
            branch=run.branch,
            user_input=run.user_input,
            input_parts=run.input_parts,
        )
    while True:
        if len(run.steps) >= plan.max_steps:
            return await _ended(run, _limit_result(run))
        # Resuming, the reply of the step in flight may be committed: it is never asked again.
        response = run.take_committed_reply()
        if response is None and run.agent.toolsets and _tools_changed(run):
            # A toolset's tools changed (an MCP server's list_changed): this call sees the new
            # ones. Between steps no action runs, as at a handoff.
            relisted = await _relisted(run)
            if relisted is not None:
                mode = plan.tool_mode
                plan, executor, model_call = _engine(run, tg, relisted, exits)
                if plan.tool_mode != mode:
                    run.replayed = [replay_step(s, plan.tool_mode) for s in run.steps]
        if response is None:
            try:
                messages = await _prompt(run, plan, user, fitter)
            except RunError as exc:  # the prompt cannot fit the context window
                return await _ended(run, _result(run, error=exc))
            request = mt.ModelRequest(
                messages=messages,
                tools=plan.specs,
                tool_mode=plan.tool_mode,
                stop=plan.stop,
                output_schema=plan.output_schema,
                settings=_settings(run, plan),
                run=run.context,
                max_reply_chars=plan.max_reply_chars,
            )
            try:
                response = await executor.suspending(model_call(request))
            except RunError as exc:
                await _withdraw(run, exc)
                return await _ended(run, _result(run, error=exc))
            if fitter is not None:
                fitter.observe(response.usage)
        step, done = await executor.suspending(_settle(run, executor, response))
        executor.flush()  # none is left held: the step has every result
        if run.stopped is not None and (done is None or done.error is None) and not step.pending:
            done = _result(run, step=step, error=run.stopped)  # a control stopped the run
        if done is not None and done.pending:  # waits on decisions: the step stays in flight
            if session is not None:
                await session.commit_waiting(step)
            return done
        run.steps.append(step)
        run.replayed.append(replay_step(step, plan.tool_mode))
        if session is not None:
            await session.commit_step(step, done)
        await run.emit(ev.StepFinished, step=step)
        if done is not None:
            return done
        handoff = controls.handoff_called(step, plan)
        if handoff is not None:  # the run goes on under the other agent
            target = controls.hand_over(run, handoff)
            tools: Sequence[Tool] = target.static_tools
            if stack is not None and target.toolsets:
                tools = await _resolve_tools(run, stack)
            toolbox = Toolbox(tools)
            plan, executor, model_call = _engine(run, tg, toolbox, exits)
            run.replayed = (
                [replay_step(s, plan.tool_mode) for s in run.steps]
                if handoff.history == "full"
                else []
            )
            # The other agent's window, over the history it is handed.
            window = plan.context_window
            fitter = ContextFitter(window) if window is not None else None


def _engine(
    run: RunCore, tg: TaskGroup, toolbox: Toolbox, exits: list[BaseException]
) -> tuple[Plan, Executor, ModelCall]:
    """The run's plan under its agent, its action executor and its model call chain (made
    again when a handoff changes the agent)."""
    plan = run.plan = plan_run(run.agent, toolbox, run.variables)
    run.toolbox = toolbox
    tool_middleware = plan.tool_middleware
    control_tool = controls.tool_middleware(plan)
    if control_tool is not None:
        tool_middleware = (*tool_middleware, control_tool)
    if run.instrument is not None:
        tool_middleware = (tool_span(run), *tool_middleware)
    effects = run.effects
    if effects is None:
        call = compose(tool_middleware, _terminal(toolbox, plan))
    else:  # the tool and its middleware are another driver's effect; the controls stay here
        controls_only = () if control_tool is None else (control_tool,)
        call = compose(controls_only, effects.tool_call(toolbox))
    executor = Executor(
        run=run,
        task_group=tg,
        toolbox=toolbox,
        call=call,
        limits=plan.tool_limits,
        exits=exits,
        # A durable run's calls are its workflow's activities, scheduled as they always were.
        defer=effects is None,
    )

    untraced: ModelCall = ModelTerminal(run, executor)
    model_terminal = untraced
    if run.instrument is not None:
        model_terminal = traced_model_call(run, untraced)
    model_middleware = plan.model_middleware
    check_input = controls.input_middleware(plan.input_guardrails)
    if check_input is not None:
        model_middleware = (*model_middleware, check_input)
    return plan, executor, compose(model_middleware, model_terminal)


def _terminal(toolbox: Toolbox, plan: Plan) -> Callable[[ToolCall], Awaitable[ActionResult]]:
    """The innermost tool call on ``toolbox``, made once per toolbox and limits: progress and
    questions find their run from the call's, so the runs sharing the toolbox share it."""
    limits = plan.tool_limits
    kept = toolbox.terminal
    if kept is None or kept[0] is not limits:
        terminal = make_terminal(toolbox, limits, _action_progress, _ask_while_running)
        kept = toolbox.terminal = (limits, terminal)
    return kept[1]


async def _withdraw(run: RunCore, error: RunError) -> None:
    """A control ended the run during a model call: what its attempts streamed is withdrawn
    (a usage limit's cut, a tripped guardrail's cancelled call); their actions still run."""
    reason: DiscardReason
    if isinstance(error, UsageLimitExceeded):
        reason = "limit"
    elif isinstance(error, GuardrailTripped):
        reason = "guardrail"
    else:
        return  # another result error (a reply too large) keeps what it streamed, as before
    for record in run.attempts.values():
        if record.streamed:
            run.discard(record.n, reason)
    run.attempts.clear()
    await run.flush_discards()


def _settings(run: RunCore, plan: Plan) -> mt.ModelSettings:
    """The plan's settings; a forced ``tool_choice`` (``required``, or a tool's name) holds
    until a tool has been called, then the model may answer (else it could never end)."""
    settings = plan.settings
    if settings.tool_choice in (None, "auto", "none") or not any(s.actions for s in run.steps):
        return settings
    return dataclasses.replace(settings, tool_choice=None)


async def _prompt(
    run: RunCore, plan: Plan, user: mt.Message, fitter: ContextFitter | None
) -> tuple[mt.Message, ...]:
    """The step's prompt; under a ``ContextWindow``, trimmed to it (and the trim reported)."""
    if fitter is None:
        return build_prompt(
            system=plan.system, memory=run.memory, user_input=user, replayed=run.replayed
        )
    head = (plan.system, *run.memory) if plan.system is not None else run.memory
    messages, trim = await fitter.fit(head, user, run.replayed, run.context)
    if trim is not None:
        await run.emit(
            ev.ContextTrimmed,
            step=len(run.steps),
            elided_results=trim.elided_results,
            summarized_steps=trim.summarized_steps,
            tokens_before=trim.tokens_before,
            tokens_after=trim.tokens_after,
            max_tokens=fitter.window.max_tokens,
        )
    return messages


async def _admit(
    run: RunCore,
    executor: Executor,
    pending: PendingAction,
    step: int,
    earlier: ActionResult | None,
) -> Literal["run", "approval", "external"] | None:
    """How an admitted action of the reply goes on: ``run``; it waits for a decision
    (``approval``, ``external``); or ``None``, settled here: a result from before the run
    waited, or the decision a resume brought."""
    if earlier is not None and not subrun_waits(earlier):
        _settled(pending, earlier)  # it ran before the run waited: never again
        return None
    key = f"{run.call_prefix}{pending.action.tag}"
    decision = run.decisions.pop(key, None)
    if decision is not None and _asked_before(run, key):
        if run.answers is NO_ENTRIES:
            run.answers = {}
        run.answers[pending.action.tag] = decision  # the call runs again, and hears it
        return "run"
    if decision is not None:
        await _apply(run, executor, pending, step, decision, "resume")
        return None
    if earlier is not None and earlier.subrun is not None:
        # A sub-agent's run that waits: run the action again, and it resumes the sub-run with
        # the decisions on its calls.
        prefix = f"{key}/"
        decisions = {k: run.decisions.pop(k) for k in list(run.decisions) if k.startswith(prefix)}
        if run.subrun_resumes is NO_ENTRIES:
            run.subrun_resumes = {}
        run.subrun_resumes[pending.action.tag] = (earlier.subrun, decisions)
        return "run"
    kind = await decision_needed(executor.toolbox, pending.action, run.context)
    return "run" if kind is None else kind


async def _decide(
    run: RunCore,
    executor: Executor,
    deciding: list[tuple[PendingAction, Literal["approval", "external"]]],
    step: int,
) -> list[tuple[PendingAction, Literal["approval", "external"]]]:
    """Announce each call that waits for a decision; ask the live approver, if the run has
    one, about those that need approval (one at a time: a person answers them in turn, while
    the step's other actions run). Returns the calls left undecided: the run waits on them."""
    undecided: list[tuple[PendingAction, Literal["approval", "external"]]] = []
    for pending, kind in deciding:
        call = pending_call(pending.action, kind, prefix=run.call_prefix, branch=run.branch)
        await run.emit(ev.ActionAwaiting, call=call)
        if kind == "approval" and run.approver is not None:
            decision, by = await ask(run.approver, call, run.context, run.approval_timeout)
            if decision is not None:
                await _apply(run, executor, pending, step, decision, by)
                continue
        undecided.append((pending, kind))
    return undecided


async def _apply(
    run: RunCore,
    executor: Executor,
    pending: PendingAction,
    step: int,
    decision: Decision,
    by: DecidedBy,
) -> None:
    """Carry out a decision: the call runs (approved, or with the edited arguments), or it is
    settled without running (denied: an error result with the reason; an external result)."""
    action = pending.action
    kind: Literal["approval", "external"] = "external" if decision.kind == "result" else "approval"
    call = pending_call(action, kind, prefix=run.call_prefix, branch=run.branch)
    await _said(run, call, decision, by)
    arguments = dict(decision.arguments) if isinstance(decision, Edit) else None
    result: ActionResult | None = None
    if isinstance(decision, Deny):
        result = error_result(action, "denied", f"denied: {decision.reason}")
    elif isinstance(decision, Edit):
        pending.action = dataclasses.replace(action, input=arguments)
    elif isinstance(decision, ExternalResult):
        if decision.error is not None:
            result = error_result(action, "tool_error", decision.error)
        else:
            limit = run.plan.tool_limits.max_output_chars
            result = success_result(action, decision.output, limit)
    await executor.start(pending, step=step, error=result)


def _settled(pending: PendingAction, result: ActionResult) -> PendingAction:
    """The action, finished with a result it had before the run waited."""
    pending.started = True
    pending.result = result
    pending.set_finished()
    return pending


def _action(result: ActionResult) -> Action:
    return Action(
        tag=result.tag,
        name=result.name,
        path=result.path,
        input=result.input,
        attempt=result.attempt,
    )


def _waiting_result(run: RunCore, held: Step) -> RunResult:
    """The result of a run that waits on ``held``'s pending calls: with the state to resume
    it from, when it has no session to keep it."""
    resume_state = None
    if run.session is None:
        resume_state = encode_state(
            run_id=run.run_id,
            agent=run.agent.name,
            branch=run.branch,
            user_input=run.user_input,
            steps=run.steps,
            waiting=held,
            state=run.state.snapshot(),
            memory=run.memory,
            input_parts=run.input_parts,
        )
    return dataclasses.replace(_result(run), pending=held.pending, resume_state=resume_state)


async def _ended(run: RunCore, result: RunResult) -> RunResult:
    """The run ends without a step of its own (out of steps, or a model call that failed):
    its end goes to the session."""
    if run.session is not None:
        await run.session.commit_step(None, result)
    return result


async def _resolve_tools(run: RunCore, stack: AsyncExitStack) -> list[Tool]:
    for toolset in run.agent.toolsets:
        scope = run_scope(toolset, run.context)
        if scope is not None:
            await stack.enter_async_context(scope)
    return await _list_tools(run)


async def _list_tools(run: RunCore) -> list[Tool]:
    """The agent's tools, its toolsets' as they list them now (their scopes entered). Each
    toolset's revision is read before it lists: a change meanwhile is seen next time."""
    tools = list(run.agent.static_tools)
    revisions = run.tool_revisions = {}
    for toolset in run.agent.toolsets:
        revisions[id(toolset)] = tools_revision(toolset, run.context)
        tools.extend(await toolset.list_tools(run.context))
    return tools  # the run's Toolbox checks that their names are unique


async def _relisted(run: RunCore) -> Toolbox | None:
    """The run's tools listed again, or ``None`` (logged) when that fails: a server gone
    meanwhile, a new name that collides. The run goes on with the tools it had."""
    try:
        return Toolbox(await _list_tools(run))
    except Exception as exc:
        logger.warning(
            "run %s: its tools changed, but listing them again failed (%s: %s); it goes on "
            "with the tools it had",
            run.run_id,
            type(exc).__name__,
            exc,
        )
        return None


def _tools_changed(run: RunCore) -> bool:
    """Whether a toolset's tools changed since they were listed (``Toolset.tools_revision``)."""
    revisions = run.tool_revisions
    return any(
        tools_revision(toolset, run.context) != revisions.get(id(toolset))
        for toolset in run.agent.toolsets
    )


async def _action_progress(
    context: RunContext, action: Action, progress: float, total: float | None, message: str | None
) -> None:
    """A running tool's progress report (``ToolContext.report_progress``), as an event."""
    await emit_progress(run_of(context), action, progress, total, message)


async def emit_progress(
    run: RunCore, action: Action, progress: float, total: float | None, message: str | None
) -> None:
    """``ActionProgress`` for ``action``, when the run emits events (durable runs too)."""
    if run.emitting:
        await run.emit(
            ev.ActionProgress,
            attempt=action.attempt,
            tag=action.tag,
            name=action.name,
            progress=progress,
            total=total,
            message=message,
        )


async def _ask_while_running(
    context: RunContext, action: Action, about: Any
) -> Approve | Deny | Edit | None:
    """A running tool asks a question (``ToolContext.ask_approver``), with ``about`` as the
    call's input: the run's live approver decides it as an approval. With none, or left
    undecided, the tool hears ``None`` and the question becomes a pending call of kind
    ``elicitation`` that the run waits on (``_settle``); resumed with its decision, the call
    runs again and hears that decision when it asks again."""
    run = run_of(context)
    kind: Literal["approval", "elicitation"] = "approval" if run.approver else "elicitation"
    call = dataclasses.replace(
        pending_call(action, kind, prefix=run.call_prefix, branch=run.branch), input=about
    )
    answer = run.answers.pop(action.tag, None)
    if answer is not None and not isinstance(answer, ExternalResult):
        await _said(run, dataclasses.replace(call, kind="elicitation"), answer, "resume")
        return answer
    decision: Approve | Deny | Edit | None = None
    if run.approver is not None:
        await run.emit(ev.ActionAwaiting, call=call)
        decision, by = await ask(run.approver, call, run.context, run.approval_timeout)
        if decision is not None:
            await _said(run, call, decision, by)
    if decision is None and action.tag not in run.asked:  # the first question waits
        if run.asked is NO_ENTRIES:
            run.asked = {}
        run.asked[action.tag] = about
        if kind == "elicitation":
            await run.emit(ev.ActionAwaiting, call=call)
    return decision


async def _said(run: RunCore, call: PendingCall, decision: Decision, by: DecidedBy) -> None:
    await run.emit(
        ev.ActionDecided,
        call=call,
        decision=decision.kind,
        by=by,
        reason=decision.reason if isinstance(decision, Deny) else None,
        arguments=dict(decision.arguments) if isinstance(decision, Edit) else None,
    )


def _asked_before(run: RunCore, key: str) -> bool:
    """Whether the waiting step's pending call ``key`` is a question its running call asked."""
    waiting = run.waiting_step
    pending = waiting.pending if waiting is not None else ()
    return any(p.id == key and p.kind == "elicitation" for p in pending)


def _questions(run: RunCore, results: list[ActionResult]) -> list[PendingCall]:
    """The questions the step's calls asked with nobody to answer: each such call waits, its
    result set aside (the call runs again on resume, and hears the decision)."""
    asked, run.asked = run.asked, NO_ENTRIES
    return [
        dataclasses.replace(
            pending_call(_action(r), "elicitation", prefix=run.call_prefix, branch=run.branch),
            input=asked[r.tag],
        )
        for r in results
        if r.tag in asked
    ]


async def _settle(
    run: RunCore, executor: Executor, response: mt.ModelResponse
) -> tuple[Step, RunResult | None]:
    """Turn the reply the middleware chain accepted into a step (and maybe the result)."""
    plan = run.plan
    attempt = response.attempt
    if attempt is None or attempt not in run.attempts:
        attempt = run.fresh_attempt_number()
        response = response.replace(attempt=attempt)
    # Every other attempt of this turn is discarded; its started actions are carried.
    carried: list[PendingAction] = []
    for record in run.attempts.values():
        if record.n != attempt:
            run.discard(record.n, "middleware")
            carried.extend(p for p in record.actions if p.started)
    own = run.attempts.get(attempt)
    sealed: dict[str, list[PendingAction]] = {}
    for p in own.actions if own is not None else ():
        sealed.setdefault(p.part.id, []).append(p)
    step_index = len(run.steps)
    out_of_steps = run.last_step and plan.reflect_on_tool_use
    if not out_of_steps and run.session is not None and _commits_reply(run, executor, response):
        await run.session.commit_reply(step_index, response)
    waiting = run.waiting_step if response.attempt == run.committed_attempt else None
    earlier = {r.tag: r for r in waiting.actions} if waiting is not None else {}
    if waiting is not None:
        carried.extend(_settled(PendingAction(r.as_call(), _action(r)), r) for r in waiting.carried)
    pendings: list[PendingAction] = []
    deciding: list[tuple[PendingAction, Literal["approval", "external"]]] = []
    seen: set[str] = set()
    limit = plan.tool_limits.max_actions_per_step
    ordinals = Ordinals()  # as the stream counted them: equal calls in reply order
    for part in response.tool_calls:
        same_id = sealed.get(part.id)
        pending = same_id.pop(0) if same_id else None
        if pending is None or (
            pending.part is not part and pending.part != part and not pending.started
        ):
            action = action_of(part, attempt)
            pending = PendingAction(part, action, ordinals.next(action))
        else:
            ordinals.next(pending.action)
        pendings.append(pending)
        refused = refusal(
            pending,
            count=len(pendings),
            limit=limit,
            duplicate=part.id in seen,
            out_of_steps=out_of_steps,
        )
        seen.add(part.id)
        if refused is None and not pending.started:
            kind = await _admit(run, executor, pending, step_index, earlier.get(part.id))
            if kind is None:
                continue
            if kind != "run":
                deciding.append((pending, kind))
                continue
        await executor.start(pending, step=step_index, error=refused)
    undecided = await _decide(run, executor, deciding, step_index) if deciding else []
    carried.extend(p for rest in sealed.values() for p in rest if p.started)
    run.attempts.clear()
    await run.flush_discards()

    waits = {id(p) for p, _ in undecided}
    results = await _results_of(executor, [p for p in pendings if id(p) not in waits])
    carried_results = tuple(await _results_of(executor, carried))
    questions = _questions(run, results) if run.asked else []  # none asked: no approvals
    if questions:
        results = [r for r in results if r.tag not in {q.tag for q in questions}]
    if undecided or questions or any(subrun_waits(r) for r in results):
        asked = [
            pending_call(p.action, kind, prefix=run.call_prefix, branch=run.branch)
            for p, kind in undecided
        ]
        asked += questions
        calls = tuple(step_pending(results, asked))
        held = Step(
            index=step_index,
            attempt=attempt,
            parts=response.parts,
            finish_reason=response.finish_reason,
            usage=response.usage,
            carried=carried_results,
            thought=_thought(response, with_text=True),
            actions=tuple(results),
            pending=calls,
        )
        return held, _waiting_result(run, held)

    def step(**fields: Any) -> Step:
        fields.setdefault("parts", response.parts)
        return Step(
            index=step_index,
            attempt=attempt,
            finish_reason=response.finish_reason,
            usage=response.usage,
            carried=carried_results,
            **fields,
        )

    if results or carried_results:
        done = step(thought=_thought(response, with_text=True), actions=tuple(results))
        if not plan.reflect_on_tool_use and results:
            outputs = [r.error if r.is_error else r.output for r in results]
            return done, _result(run, step=done, output=outputs)
        if out_of_steps and results:
            return done, _result(run, step=done, error=_max_steps_error(run))
        return done, None
    thought = visible_thought(response)
    if response.finish_reason == "pause_turn":
        return step(thought=thought), None
    error = finish_error(response)
    if error is not None:
        answer = response.refusal or response.text
        done = step(thought=thought, answer=answer)
        return done, _result(run, step=done, text=answer, error=error)
    text = final_text(response, accept_thought=run.accepts_thought())
    if text is None:
        feedback = REACT_REMINDER if plan.tool_mode == "react" and thought.strip() else KEEP_GOING
        return step(thought=thought, feedback=feedback), None
    if not response.text.strip():
        thought = ""  # the thought is the answer
    try:
        output = plan.parse_output(text)
    except Exception as exc:
        # pydantic is imported only by agents with an output type, the only ones whose
        # parse_output can fail validation.
        from pydantic import ValidationError

        if not isinstance(exc, ValidationError):
            raise
        # The same budget as the validators' ModelRetry: a model that cannot produce the type
        # is asked again output_retries times, not until max_steps.
        run.output_retries += 1
        if run.output_retries > plan.output_retries:
            problems = _output_problems(exc)
            error = OutputInvalid(
                f"the answer did not match the output type after output_retries="
                f"{plan.output_retries} retries: {problems}",
                details={"reason": problems},
            )
            done = step(thought=thought, answer=text)
            return done, _result(run, step=done, text=text, error=error)
        return step(thought=thought, answer=text, feedback=_output_feedback(exc)), None
    if controls.has_answer_checks(plan):
        output, rejection, error = await controls.check_answer(run, output)
        if rejection is not None:
            return step(thought=thought, answer=text, feedback=rejection), None
        if error is not None:
            if isinstance(error, GuardrailTripped) and own is not None and own.streamed:
                run.attempts[attempt] = own  # withdrawn: the answer it streamed is not the run's
                run.discard(attempt, "guardrail")
                run.attempts.clear()
                await run.flush_discards()
            if isinstance(error, GuardrailTripped):
                # What it tripped on goes nowhere: not in the step, its events or the session.
                done = step(parts=())
            else:
                done = step(thought=thought, answer=text)
            return done, _result(run, step=done, error=error)
    done = step(thought=thought, answer=text)
    return done, _result(run, step=done, text=text, output=output)


def _commits_reply(run: RunCore, executor: Executor, response: mt.ModelResponse) -> bool:
    """A session run commits a reply before its actions when one has side effects: after a
    crash, resume runs them from the committed reply, with the same idempotency keys. A
    resumed reply is committed already."""
    if response.attempt == run.committed_attempt:
        return False
    toolbox = executor.toolbox
    return any(toolbox.has_side_effects(p.name, p.path) for p in response.tool_calls)


def _thought(response: mt.ModelResponse, *, with_text: bool) -> str:
    """The step's visible thought: ReAct thoughts, and the reply's text when it has actions."""
    thought = visible_thought(response)
    if with_text and response.text.strip():
        thought = f"{thought}\n{response.text}" if thought else response.text
    return thought


async def _results_of(executor: Executor, pendings: list[PendingAction]) -> list[ActionResult]:
    """The actions' results, in order, once all have finished (those the executor still holds
    run here first). When they all finished already this is one cancellation point for the
    batch, and no scheduling round trip (26 K instructions, 2% of a turn): the run's next
    model call suspends on its socket at once."""
    await executor.run_held(pendings)
    if pendings and all(p.finished for p in pendings):
        await anyio.lowlevel.checkpoint_if_cancelled()
    results: list[ActionResult] = []
    for pending in pendings:
        await pending.wait_finished()
        result = pending.result
        if result is None:  # finished always comes with a result; a fault of ours if not
            raise RuntimeError(f"action {pending.action.tag!r} finished without a result")
        results.append(result)
    return results


def _output_problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(answer)'}: {e['msg']}"
        for e in exc.errors(include_url=False)[:10]
    )


def _output_feedback(exc: ValidationError) -> str:
    problems = _output_problems(exc)
    return (
        f"Your answer did not match the required output schema: {problems}. "
        "Reply again with only the corrected answer."
    )


def _limit_result(run: RunCore) -> RunResult:
    last = run.steps[-1] if run.steps else None
    if last is not None and last.answer is not None and last.feedback:
        error: RunError = OutputInvalid(
            f"the answer did not validate within max_steps={run.plan.max_steps}: {last.feedback}"
        )
        return _result(run, text=last.answer, error=error)
    return _result(run, error=_max_steps_error(run))


def _max_steps_error(run: RunCore) -> MaxStepsExceeded:
    return MaxStepsExceeded(f"the run reached max_steps={run.plan.max_steps} without an answer")


def _result(
    run: RunCore,
    *,
    step: Step | None = None,
    text: str | None = None,
    output: Any = None,
    error: RunError | None = None,
) -> RunResult:
    steps = tuple(run.steps) + ((step,) if step is not None else ())
    return RunResult(
        run_id=run.run_id,
        agent=run.plan.name,
        branch=run.branch,
        output=output,
        text=text,
        steps=steps,
        usage=run.usage,
        usage_by_model=dict(run.usage_by_model),
        error=_error_info(error) if error is not None else None,
        state=run.state.snapshot(),
    )


def _error_info(error: RunError) -> RunErrorInfo:
    return RunErrorInfo(kind=error.kind, message=str(error), details=dict(error.details) or None)
