"""The workflow: the engine's own loop, deciding; its model calls and tool calls are performed
by activities.

Only the effects differ from a run in-process. The agent's model is replaced by
``_WorkflowModel``, whose stream is fed by the model activity's signals (batches of deltas), so
the engine seals actions while the activity still streams, and starts each one at once as a
tool activity (``_ToolEffects``): eager dispatch survives durability. A sub-agent's run
(``Agent.as_tool``) runs here too, beside its parent's, with a model and effects of its own
that address the sub-agent's model and tools by its path. The workflow reads no
clock, randomness or I/O but Temporal's: anyio's time is the workflow's, its sleeps are durable
timers, and the engine's randomness and ids come from ``workflow.random()``/``uuid4()``.

Activities are never awaited inside an anyio cancel scope (that deadlocks a workflow): an
``anyio.Event`` set by the activity's done-callback is awaited instead, and the activity is
cancelled through its handle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

import agentloop._events as ev

from .._actions import SUBAGENT, Toolbox, error_result, make_terminal
from .._context import StateView
from .._controls import handed_from
from .._decisions import Decision, Deny, ExternalResult
from .._loop import emit_progress, execute
from .._middleware import compose
from .._run import Effects, Emitter, Launch, RunCore, run_of
from .._session_run import (
    Counts,
    Loaded,
    SessionSpec,
    parts_from_json,
    step_from_json,
    step_to_json,
)
from .._steps import ActionResult, RunResult, Step
from .._time import use_entropy
from .._waiting import DecisionError, check_decisions, decode_state
from ..models._base import Model
from ..models._types import ModelDelta, ModelProfile, ModelRequest, ModelStream, Usage
from . import _carry, _codec, _payloads, _progress
from ._durable import (
    ACK_SIGNAL,
    CARRIED_ACTIVITY,
    CONTINUED,
    CONTINUING,
    DECIDE_UPDATE,
    DELTAS_SIGNAL,
    EVENTS_QUERY,
    EVENTS_UPDATE,
    MAX_DECISION_BYTES,
    MAX_START_BYTES,
    MODEL_ACTIVITY,
    NOT_WAITING,
    PROGRESS_SIGNAL,
    STREAMING_QUERY,
    TOOL_ACTIVITY,
    WAITING_QUERY,
    WORKFLOW_NAME,
    mismatch,
)
from ._store import ActivityStore

if TYPE_CHECKING:
    from .._agent import Agent
    from .._middleware import ToolCall
    from .._plan import RunnableAgent
    from ._durable import TemporalAgent


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the workflow needs of the real model, read on the worker before any run."""

    name: str
    provider: str
    profile: ModelProfile


# Per agent, its model's facts and its sub-agents' (``Agent.as_tool``), by path ("" its own).
AgentFacts = Mapping[str, ModelFacts]

# The agents of the worker that runs the workflow, set by its interceptor for the workflow's
# task: context-local, so two workers of one process never see each other's agents.
SERVED: ContextVar[Mapping[str, tuple[TemporalAgent[Any], AgentFacts]] | None] = ContextVar(
    "agentloop_served_agents", default=None
)

EVENT_BUFFER = 256
POLL_SECONDS = 20.0  # a long poll returns empty after this, and the caller polls again
MAX_BATCH = 1000  # events in one poll's reply
# A run continues as new past this much history (or when Temporal suggests it, or past
# ``TemporalAgent.continue_after`` events): Temporal's own limit is 50 MB.
CONTINUE_BYTES = 16 * 1024 * 1024
# Patched: a run started before continuing-as-new existed never continues as new.
CONTINUE_PATCH = "agentloop-continue-as-new"
# Patched: a run whose start alone left no room for a carry went on uncut; now its start's
# fields go by reference too (``_carry.refer_start``).
START_PATCH = "agentloop-start-by-reference"
# Patched: a run handed over to another agent was not cut between steps; now it is.
HANDOFF_PATCH = "agentloop-continue-after-handoff"


class _Cut(Exception):
    """The run continues as new now, from the wait it was in."""


# A tool that raised one of these in its activity ends the run with it, as in-process.
_EXITS: dict[str, type[KeyboardInterrupt | SystemExit]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
}


def _exit_in(exc: BaseException) -> BaseException | None:
    """The ``KeyboardInterrupt`` or ``SystemExit`` that ``exc`` is or holds, if any."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in cast("BaseExceptionGroup[BaseException]", exc).exceptions:
            if (found := _exit_in(inner)) is not None:
                return found
        return None
    return exc if isinstance(exc, KeyboardInterrupt | SystemExit) else None


class AgentMismatch(ApplicationError):
    """The worker's agent is not the one the run was started with."""


class _Entropy:
    """The engine's randomness, ids and wall clock, from Temporal (replayed identically)."""

    def unix(self) -> float:
        return workflow.now().timestamp()

    def random(self) -> float:
        return workflow.random().random()

    def new_id(self) -> str:
        return workflow.uuid4().hex


class _Call:
    """One model activity: the batches of deltas its signals brought, in order."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.batches: dict[int, list[ModelDelta]] = {}
        self.wake = anyio.Event()

    def add(self, index: int, deltas: list[ModelDelta]) -> None:
        self.batches[index] = deltas
        self.wake.set()

    async def deltas(self, handle: workflow.ActivityHandle[Any]) -> AsyncIterator[ModelDelta]:
        taken = 0
        while True:
            while taken in self.batches:
                for delta in self.batches.pop(taken):
                    yield delta
                taken += 1
            if handle.done() and taken >= _batches_of(handle):
                for delta in _rest_of(handle):
                    yield delta
                return
            self.wake = anyio.Event()
            await self.wake.wait()


class _Running:
    """One tool activity in flight: the progress reports its signals brought, not yet
    streamed (the latest ``_progress.MAX_REPORTS``)."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.reports: list[_progress.Report] = []
        self.wake = anyio.Event()

    def add(self, reports: list[_progress.Report]) -> None:
        self.reports.extend(reports)
        del self.reports[: -_progress.MAX_REPORTS]
        self.wake.set()

    def take(self) -> list[_progress.Report]:
        reports, self.reports = self.reports, []
        return reports


def _entry_of(path: str) -> str:
    """The path of the agent a run under the agent at ``path`` started with: a handoff's
    target (``<path>@<name>``) is under its entry's run (``"@billing"``: ``""``)."""
    head, sep, last = path.rpartition("/")
    return head + sep + last.partition("@")[0]


def _batches_of(handle: workflow.ActivityHandle[Any]) -> int:
    """How many batches the finished model activity sent; its failure as a ``ModelError``."""
    try:
        outcome = handle.result()
    except ActivityError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == "agentloop.ModelError":
            raise _codec.model_error_of(cause.details[0]) from None
        if isinstance(cause, ApplicationError) and cause.type == "agentloop.Fault":
            raise RuntimeError(f"the model driver failed: {cause.message}") from None
        if isinstance(cause, ApplicationError) and cause.type == _payloads.RUN_ERROR:
            raise _payloads.run_error_of(cause.details[0]) from None  # reply_too_large, …
        raise _codec.worker_lost(str(exc if cause is None else cause)) from None
    return int(outcome["batches"])


def _rest_of(handle: workflow.ActivityHandle[Any]) -> list[ModelDelta]:
    """The deltas the finished model activity's result carries (after its signalled ones)."""
    return [_codec.decode_delta(d) for d in handle.result().get("deltas") or ()]


class _WorkflowModel(Model):
    """The agent's model inside the workflow: each ``stream`` is a model activity, its deltas
    arriving by signal while it runs."""

    def __init__(
        self, host: AgentRunWorkflow, durable: TemporalAgent[Any], facts: ModelFacts, path: str
    ) -> None:
        self._host = host
        self._durable = durable
        self._facts = facts
        self._path = path  # the sub-agent's whose model this is ("" the agent's own)
        self.provider = facts.provider  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]  # the real model's, per instance

    @property
    def name(self) -> str:
        return self._facts.name

    @property
    def profile(self) -> ModelProfile:
        return self._facts.profile

    def stream(self, request: ModelRequest) -> ModelStream:
        return self._stream(request)

    @asynccontextmanager
    async def _stream(
        self, request: ModelRequest
    ) -> AsyncGenerator[AsyncIterator[ModelDelta], None]:
        host = self._host
        if not _entry_of(self._path):  # the run's own agent, or one it handed over to
            await host.cut_between_steps(request)  # returns unless the run continues as new
        attempt_timeout = self._durable.agent_at(self._path).retry.attempt_timeout
        encoded = _codec.encode_request(request)
        payload: dict[str, Any] = {
            "agent": self._durable.name,
            "path": self._path,
            "stream": host.streamed,  # else text and thoughts come with its result
        }
        if host.timeouts_in_activity:
            retry = self._durable.agent_at(self._path).retry
            payload["timeouts"] = [retry.attempt_timeout, retry.idle_timeout]
        if host.input_refs:
            referred = _codec.refer_inputs(encoded, host.input_parts, host.input_refs)
            if referred != encoded:
                payload["input_refs"] = True  # the activity reads them from the start payload
            encoded = referred
        # The conversation by reference (``_payloads``): the activity reads it back.
        payload["request"] = _payloads.fit_request(host.blobs, encoded)
        call = self._host.open_call()
        payload["call"] = call.number
        handle = workflow.start_activity(
            MODEL_ACTIVITY,
            payload,
            result_type=dict,
            **self._durable.model_activity.schedule((attempt_timeout or 600.0) + 30.0, retry=False),
        )
        handle.add_done_callback(lambda _: call.wake.set())
        try:
            yield call.deltas(handle)
        finally:
            self._host.close_call(call.number)
            if not handle.done():
                handle.cancel()  # a cut ReAct reply, a cancelled run: the provider stops


class _ToolEffects:
    """Each action's tool call (middleware and tool) as a tool activity; a sub-agent tool's
    (``Agent.as_tool``) here in the workflow, as its sub-run needs its parent's live run."""

    def __init__(
        self, host: AgentRunWorkflow, durable: TemporalAgent[Any], facts: AgentFacts, path: str
    ) -> None:
        self._host = host
        self._durable = durable
        self._facts = facts
        self._path = path  # the agent's whose runs these effects serve ("" the root's)

    def tool_call(self, toolbox: Toolbox) -> Callable[[ToolCall], Awaitable[ActionResult]]:
        composed: dict[str, Callable[[ToolCall], Awaitable[ActionResult]]] = {}

        def perform(call: ToolCall) -> Awaitable[ActionResult]:
            found = toolbox.find(call.action.name, call.action.path)
            if isinstance(found, tuple) and getattr(found[1].fn, SUBAGENT, None) is not None:
                path = self._path_of(call)
                in_workflow = composed.get(path)
                if in_workflow is None:
                    agent = self._durable.agent_at(path)
                    terminal = make_terminal(toolbox, agent.tool_limits)
                    in_workflow = composed[path] = compose(agent.tool_middleware, terminal)
                return in_workflow(call)
            return self._call(call)

        return perform

    def _path_of(self, call: ToolCall) -> str:
        """The path of the agent the call's run is under: these effects' own, or, after a
        handoff, the agent's it handed over to (``<path>@<name>``)."""
        run = run_of(call.run)
        name = run.agent.name
        return self._path if name == run.entry_agent.name else f"{self._path}@{name}"

    def sub_agent(self, agent: RunnableAgent, tool_name: str) -> tuple[RunnableAgent, Effects]:
        # Under these effects' agent, or under one it handed over to: the path that holds it.
        durable = self._durable
        path = next(
            (
                p
                for p in durable.agent_paths()
                if p.rpartition("/")[2] == tool_name
                and _entry_of(p.rpartition("/")[0]) == self._path
                and durable.agent_at(p) is agent
            ),
            f"{self._path}/{tool_name}" if self._path else tool_name,
        )
        return self._host.sub_agent(durable, self._facts, path)

    async def _call(self, call: ToolCall) -> ActionResult:
        action = call.action
        run = call.run
        found = self._durable.tool_options(action.name)
        path = self._path_of(call)
        tool = next((t for t in self._durable.tools(path) if t.name == action.name), None)
        timeout = None
        if tool is not None:
            activity = tool.activity(action.path)
            timeout = activity.timeout if activity is not None else None
        state = run.state
        encoded = _codec.encode_action(action)
        host = self._host
        running = host.open_tool()
        payload = host.blobs.fit(
            {
                "agent": self._durable.name,
                "path": path,
                "progress": running.number,  # its reports' signals say which call they are of
                "stream": host.streamed,  # else they go only once a caller streams
                "action": encoded,
                "step": call.step,
                "ordinal": call.ordinal,  # for the idempotency key
                "run": {
                    "step": call.step,
                    "run_id": run.run_id,
                    "parent_run_id": run.parent_run_id,
                    "root_run_id": run.root_run_id,
                    "branch": run.branch,
                    "session_id": run.session_id,
                    "max_steps": run.max_steps,
                    "last_step": run.last_step,
                    "variables": dict(run.variables),
                    "state": dict(state),
                    "usage": dataclasses.asdict(run.usage),
                    "tool_calls": run.tool_calls,
                },
            }
        )
        if payload is None:  # refused before anything is recorded: the model is told why
            host.close_tool(running.number)
            return error_result(action, "tool_error", _payloads.too_large("the call's input"))
        handle = workflow.start_activity(
            TOOL_ACTIVITY,
            payload,
            result_type=dict,
            **found.schedule(timeout + 30.0 if timeout is not None else 300.0),
        )
        handle.add_done_callback(lambda _: running.wake.set())
        core = run_of(run)
        try:
            while True:
                # Its reports as events, between the action's start and its finish (a signal's
                # handler runs before the activity's result is taken, in the same activation).
                for progress, total, message in running.take():
                    await emit_progress(core, action, progress, total, message)
                if handle.done():
                    break
                running.wake = anyio.Event()
                await running.wake.wait()
        finally:
            host.close_tool(running.number)
            if not handle.done():
                handle.cancel()  # the run was cancelled: so is the tool's activity
        try:
            outcome = handle.result()
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type in _EXITS:
                raise _EXITS[cause.type](cause.message) from None  # ends the run, as in-process
            message = f"the tool's activity failed: {exc if cause is None else cause}"
            return error_result(action, "tool_error", message)
        for key in outcome["deleted"]:
            state.pop(key, None)
        for key, value in outcome["set"].items():
            state[key] = value
        return _codec.decode_result(_payloads.with_input(outcome, encoded))


# A history this worker's code cannot replay (an agent changed while its run was in flight)
# fails the run, rather than failing its workflow task again and again for ever.
@workflow.defn(name=WORKFLOW_NAME, failure_exception_types=[workflow.NondeterminismError])
class AgentRunWorkflow:
    """One durable run of an agent the worker serves."""

    def __init__(self) -> None:
        self._log: list[str] = []  # the events, as JSON; event seq n is at index n - 1 - base
        self._base = 0  # the seq before the log's first (the runs before this one had those)
        self._previous: str | None = None  # the run this one continued (its Temporal run id)
        self._log_bytes: list[int] = []  # each one's size in a reply (``_payloads.within``)
        # The large strings sent by reference, which the ``agentloop.blob`` query reads.
        self.blobs = _payloads.Blobs()
        self._terminal: str | None = None  # the run's RunFinished or RunFailed, once out
        self._finished = False
        self._polled = False
        self._acked = 0
        # When a streaming caller last acked (workflow time), and how long that holds.
        self._acked_at = 0.0
        self._lease = 30.0
        self._calls: dict[int, _Call] = {}
        self._call_count = 0
        self._tools: dict[int, _Running] = {}  # the tool activities in flight, by number
        self._tool_count = 0
        # While the run waits on decisions: the step it waits in, and its RunWaiting event.
        self._waiting_step: Step | None = None
        self._waiting_event: str | None = None
        self._waiting_whole: str | None = None  # the same, with no references (a cut carries it)
        self._waited_since: float | None = None  # a wait carried over: when it began
        self._toolbox: Toolbox | None = None
        self._decided: dict[str, Decision] | None = None
        # The sub-agents' agents as the workflow runs them, by path (made once each).
        self._sub_agents: dict[str, tuple[RunnableAgent, Effects]] = {}
        self._in_workflow: dict[str, Agent[Any, Any]] = {}  # ... and every agent, by path
        # The input's images and files as the start payload has them, and the large ones'
        # data to their index: model activities get those by reference (``_codec.refer_inputs``).
        self.input_parts: list[dict[str, Any]] = []
        self.input_refs: dict[str, int] = {}
        # The model activities time their attempts (``_untimed``), not durable timers here.
        self.timeouts_in_activity = False
        # Continuing as new (``_carry``): the start it continues with, once a cut is made; the
        # engine's scope, cancelled by a cut between steps; events counted since the last step
        # (the engine makes them again in the next run, which drops them); the last step whose
        # model call was asked for; events to drop (seq up to this).
        self._start: dict[str, Any] = {}
        self._continue_after = 10_000
        self._cutting: _carry.Carry | None = None
        # A continued run has taken up where the run before stopped (it waits again, or its
        # engine runs): until then a ``decide`` is refused as during the cut, and sent again.
        self._taken_up = False
        self._uncut = False  # a cut cannot be made (an old history, a carry too large)
        self._engine: anyio.CancelScope | None = None
        self._since_step: int | None = None
        self._asked_step = -1
        self._drop_through = 0
        self._continued = 0
        self._floor = 0
        # The engine's invocation in flight: when it began here, and the seconds of its
        # deadline the runs before spent (a cut between steps carries them).
        self._invoked_at = 0.0
        self._spent = 0.0

    def open_call(self) -> _Call:
        self._call_count += 1
        call = self._calls[self._call_count] = _Call(self._call_count)
        return call

    def close_call(self, number: int) -> None:
        self._calls.pop(number, None)

    def open_tool(self) -> _Running:
        self._tool_count += 1
        running = self._tools[self._tool_count] = _Running(self._tool_count)
        return running

    def close_tool(self, number: int) -> None:
        self._tools.pop(number, None)

    def sub_agent(
        self, durable: TemporalAgent[Any], facts: AgentFacts, path: str
    ) -> tuple[RunnableAgent, Effects]:
        """The sub-agent at ``path`` as the workflow runs it: its model the workflow's
        activity-backed one, its tool calls activities, tracing off (as the agent's own)."""
        made = self._sub_agents.get(path)
        if made is None:
            agent = self.in_workflow(durable, facts, path)
            made = self._sub_agents[path] = (agent, _ToolEffects(self, durable, facts, path))
        return made

    def in_workflow(
        self, durable: TemporalAgent[Any], facts: AgentFacts, path: str
    ) -> Agent[Any, Any]:
        """The agent at ``path`` as the workflow runs it: its model the workflow's
        activity-backed one, tracing off, and so the agents it hands over to (made once each,
        so that a handoff finds the same agent by name or by object)."""
        made = self._in_workflow.get(path)
        if made is None:
            agent = durable.agent_at(path)
            entry = _entry_of(path)
            handoffs = [
                h
                if isinstance(h.agent, str)
                else dataclasses.replace(
                    h, agent=self.in_workflow(durable, facts, f"{entry}@{h.target_name}")
                )
                for h in agent.handoff_targets
            ]
            model = _WorkflowModel(self, durable, facts[path], path)
            changed = (
                agent.replace(model=model, instrument=False, handoffs=handoffs)
                if handoffs
                else agent.replace(model=model, instrument=False)
            )
            made = self._in_workflow[path] = self._untimed(changed)
        return made

    def _untimed(self, agent: Agent[Any, Any]) -> Agent[Any, Any]:
        """The agent without the retry policy's attempt and idle timeouts, which its model
        activities enforce instead: here each would be a durable timer, two history events
        per model call (per delta, for ``idle_timeout``)."""
        retry = agent.retry
        if not self.timeouts_in_activity or (retry.attempt_timeout, retry.idle_timeout) == (
            None,
            None,
        ):
            return agent
        return agent.replace(
            retry=dataclasses.replace(retry, attempt_timeout=None, idle_timeout=None)
        )

    @workflow.signal(name=DELTAS_SIGNAL)
    def deltas(self, batch: Any) -> None:
        """A model activity's batch of deltas (a finished call's late ones are dropped). A
        batch no activity of ours sends is dropped too, with a warning: raising here would fail
        every replay of the run."""
        try:
            number, index, decoded = _codec.decode_batch(batch)
        except (KeyError, TypeError, ValueError) as exc:
            workflow.logger.warning("dropped a malformed %s signal: %s", DELTAS_SIGNAL, exc)
            return
        call = self._calls.get(number)
        if call is not None:
            call.add(index, decoded)

    @workflow.signal(name=PROGRESS_SIGNAL)
    def progress(self, batch: Any) -> None:
        """A tool activity's progress reports (those of a call no longer running, or of
        another run of the chain, are dropped; a malformed batch too, with a warning)."""
        try:
            run_id, number, reports = _progress.decode(batch)
        except (KeyError, TypeError, ValueError) as exc:
            workflow.logger.warning("dropped a malformed %s signal: %s", PROGRESS_SIGNAL, exc)
            return
        running = self._tools.get(number)
        if running is not None and run_id == workflow.info().run_id:
            running.add(reports)

    @workflow.signal(name=ACK_SIGNAL)
    def ack(self, seq: int) -> None:
        """The streaming caller has read up to ``seq`` (its first ack says it streams: the
        finished run then lingers for it to read the end; the later ones renew its lease)."""
        self._polled = True
        self._acked = max(self._acked, seq)
        self._acked_at = workflow.now().timestamp()

    @property
    def streamed(self) -> bool:
        """Whether a caller streams the run: one said so by a poll, and has acked within
        ``stream_lease`` (workflow time: replayed alike; a query reads the time of the last
        workflow task). A caller gone stops costing text deltas' signals."""
        return self._polled and workflow.now().timestamp() - self._acked_at <= self._lease

    @workflow.query(name=STREAMING_QUERY)
    def streaming(self) -> bool:
        """Whether a caller streams the run: a model activity started before one did asks,
        to send its text as it comes from then on."""
        return self.streamed

    @property
    def _last_seq(self) -> int:
        return self._base + len(self._log)

    def _after(self, after: int) -> dict[str, Any]:
        """A poll's reply: the events after seq ``after`` (within a reply's bounds), whether
        that is the end; for events before this run's, the run that has them."""
        if after < self._base and self._previous is not None:
            return {"events": [], "end": False, "previous": self._previous, "base": self._base}
        at = max(after - self._base, 0)
        batch = self._log[at : at + _payloads.within(self._log_bytes, at, MAX_BATCH)]
        return {"events": batch, "end": self._finished and at + len(batch) >= len(self._log)}

    @workflow.query(name=EVENTS_QUERY)
    def peek(self, after: int) -> dict[str, Any]:
        """The events after seq ``after``, at once (maybe none). A query is not recorded in
        the history and has no per-run limit, unlike an update: a caller streaming a busy
        run polls this, and long-polls ``events`` only while the run is idle."""
        return self._after(after)

    # A poll left waiting when the workflow fails (an agent mismatch) is abandoned: its
    # caller falls back to the workflow's outcome.
    @workflow.update(name=EVENTS_UPDATE, unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def events(self, after: int) -> dict[str, Any]:
        """The events after seq ``after``, once there are any (or the run ended, or a poll's
        time passed: then none)."""
        self._polled = True
        self._acked = max(self._acked, after)
        self._acked_at = workflow.now().timestamp()
        try:
            await workflow.wait_condition(
                lambda: self._last_seq > after or self._finished or self._cutting is not None,
                timeout=timedelta(seconds=POLL_SECONDS),
            )
        except TimeoutError:
            pass
        return self._after(after)  # continuing as new: maybe none, and the caller asks again

    @workflow.update(name=DECIDE_UPDATE)
    def decide(self, decisions: dict[str, Any]) -> None:
        """The decisions on the calls the run waits on (checked by ``check_decide`` first):
        the run goes on with them."""
        self._decided = _codec.decode_decisions(decisions)
        self._waiting_step = None
        # A caller that streamed until the wait may have gone: one still streaming says so
        # again once it reads past the wait, so the finished run lingers only for it. (Patched:
        # a run decided before this change replays as it ran.)
        if workflow.patched("agentloop-decide-rearms-linger"):
            self._polled = False

    @decide.validator
    def check_decide(self, decisions: dict[str, Any]) -> None:
        """Refuse decisions the run cannot take (the engine's own ``check_decisions``): a
        refused update is not recorded, so the run still waits and nothing is lost."""
        if len(json.dumps(decisions, separators=(",", ":"), default=str)) > MAX_DECISION_BYTES:
            raise ApplicationError(
                f"decisions must fit in {MAX_DECISION_BYTES // 1024} KiB",
                type="DecisionError",
                non_retryable=True,
            )
        taking_up = workflow.info().continued_run_id is not None and not self._taken_up
        if self._cutting is not None or (taking_up and not self._finished):
            # The caller sends it again: to the next run, or once this one waits again.
            raise ApplicationError(CONTINUING, type="DecisionError", non_retryable=True)
        step, toolbox = self._waiting_step, self._toolbox
        if step is None or toolbox is None or self._decided is not None:
            raise ApplicationError(
                f"{NOT_WAITING} (it has not waited yet, was decided already, or has ended)",
                type="DecisionError",
                non_retryable=True,
            )
        try:
            check_decisions(step, _codec.decode_decisions(decisions), toolbox, prefix="")
        except DecisionError as exc:
            raise ApplicationError(str(exc), type="DecisionError", non_retryable=True) from None

    @workflow.query(name=_payloads.BLOB_QUERY)
    def blob(self, wants: list[Any]) -> list[dict[str, Any]]:
        """Slices of strings sent by reference (``_payloads.Blobs.read``)."""
        return self.blobs.read(wants)

    @workflow.query(name=WAITING_QUERY)
    def waiting(self) -> str | None:
        """The ``RunWaiting`` event of the run while it waits on decisions, as JSON."""
        return self._waiting_event if self._waiting_step is not None else None

    @workflow.run
    async def run(self, start: Any) -> str:
        """The run; a workflow that fails (a bad start, ``AgentMismatch``, a fault) has
        ended too, for the callers that poll it: they read its failure, not nothing for
        ever. (A cut is no end: the next run goes on.)"""
        try:
            return await self._run(start)
        except workflow.ContinueAsNewError:
            raise
        except BaseException:
            self._finished = True
            raise

    async def _run(self, start: Any) -> str:
        # Patched, first of all (a run that fails at once must still meet its marker): a run
        # started before this change replays with its timers.
        self.timeouts_in_activity = workflow.patched("agentloop-timeouts-in-activity")
        try:
            _codec.check_start_shape(start)
            carry = None if start.get("carry") is None else _carry.decode(start["carry"])
            counts = None if carry is None or carry.at == "wait" else _counts_of(carry.counts)
        except (KeyError, TypeError, ValueError) as exc:
            raise ApplicationError(
                f"not a start agentloop sends ({exc}): start durable runs with TemporalAgent.start",
                type="BadStart",
                non_retryable=True,
            ) from None
        served = SERVED.get()
        if served is None or start["agent"] not in served:
            known = ", ".join(sorted(served or ())) or "none"
            raise AgentMismatch(
                f"this worker serves no agent named {start['agent']!r} (it serves: {known})",
                type="AgentMismatch",
                non_retryable=True,
            )
        durable, facts = served[start["agent"]]
        self._lease = durable.stream_lease
        self._continue_after = durable.continue_after
        changed = mismatch(start, durable)
        if changed is not None:
            raise AgentMismatch(changed, type="AgentMismatch", non_retryable=True)
        self._start = {k: v for k, v in start.items() if k != "carry"}
        self._start["fingerprint"] = str(start["fingerprint"]).removesuffix(CONTINUED)
        try:
            terminal = await self._execute(durable, facts, start, carry, counts)
        except (KeyboardInterrupt, SystemExit, BaseExceptionGroup) as exc:
            found = _exit_in(exc)  # a tool raised it (see ``_EXITS``): the run ends with it
            if found is None:
                raise
            self._finished = True
            raise ApplicationError(
                str(found) or type(found).__name__, type=type(found).__name__, non_retryable=True
            ) from None
        except asyncio.CancelledError:
            # Cancelled, the run has no terminal event: a caller streaming it learns at its
            # next poll that it ended (and reads the outcome), not after polling it idle.
            self._finished = True
            raise
        if isinstance(terminal, _carry.Carry):  # a cut: it goes on in the next run of its chain
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(self._next_start(terminal), memo=workflow.memo())
        self._finished = True
        if self._polled and self._acked < self._last_seq:
            # Patched: a run that ended before this change replays with its one timer.
            if workflow.patched("agentloop-linger-within-lease"):
                await self._linger(durable.linger)
            else:
                try:
                    await workflow.wait_condition(
                        lambda: self._acked >= self._last_seq,
                        timeout=timedelta(seconds=durable.linger),
                    )
                except TimeoutError:
                    pass
        await workflow.wait_condition(workflow.all_handlers_finished)
        return terminal

    async def _linger(self, linger: float) -> None:
        """Wait, up to ``linger`` seconds, for the streaming caller to read the end: only while
        it holds its ``stream_lease`` (each ack renews it), so a caller that stopped reading
        or went away holds the run no longer than its lease."""
        until = workflow.now().timestamp() + linger
        while self._acked < self._last_seq:
            now = workflow.now().timestamp()
            wait = min(until, self._acked_at + self._lease) - now
            if wait <= 0:
                return
            try:
                await workflow.wait_condition(
                    lambda: self._acked >= self._last_seq, timeout=timedelta(seconds=wait)
                )
            except TimeoutError:
                pass

    async def _execute(
        self,
        durable: TemporalAgent[Any],
        facts: AgentFacts,
        start: dict[str, Any],
        carry: _carry.Carry | None,
        counts: Counts | None,
    ) -> str | _carry.Carry:
        """The run's terminal event, or the cut's carry, to continue as new."""
        use_entropy(_Entropy())
        # Tracing stays off inside the workflow: the OpenTelemetry SDK reads the environment
        # and the clock, which a workflow may not (the activities' own code may trace).
        agent = self.in_workflow(durable, facts, "")
        send, receive = anyio.create_memory_object_stream[ev.Event](EVENT_BUFFER)
        emitter = Emitter(send)
        loaded = None
        waited: RunResult[Any] | None = None
        first = agent  # the agent of the first invocation here
        by_reference = False  # this run's start fields came by reference, not in its start
        if carry is not None:
            carry = await self._whole(carry)
            if carry.start is not None:
                start, by_reference = self._take_start(start, carry.start), True
            # What this run's start took (its carried strings read back): a run that waits is
            # cut again only once its history grew by ``continue_after`` from here.
            self._floor = workflow.info().get_current_history_length()
            emitter = Emitter(send, seq=self._restore(carry))
            if counts is not None:  # between steps: the engine goes on from the steps so far
                deadline = agent.deadline
                if deadline is not None:  # what is left of it (workflow time, as the engine's)
                    self._spent = carry.elapsed
                    first = agent.replace(deadline=max(deadline - carry.elapsed, 0.001))
            if counts is not None and start["session"] is None:  # a session's are in its store
                loaded = Loaded(
                    state=StateView(carry.state),
                    memory=(),
                    run_id=start["run_id"],
                    user_input=start["input"],
                    input_parts=parts_from_json(start.get("input_parts")),
                    steps=tuple(step_from_json(s) for s in carry.steps),
                    counts=counts,
                )
            elif counts is None:  # in a wait: for its decisions, as the run before waited
                waited = self._restore_wait(carry, durable)
        session = start.get("session")
        spec = None
        if session is not None:
            store = ActivityStore(durable.name, seconds=durable.store_seconds, blobs=self.blobs)
            spec = SessionSpec(
                store=store,
                session_id=session["id"],
                wait=session["wait"],
                resume=counts is not None,  # cut between steps: its unfinished run goes on
                counts=counts,
            )
        self.input_parts = list(start.get("input_parts") or ())
        # The model activity reads the large parts from this run's start: not when it holds
        # none (they go by ``_payloads`` reference then, as any long string).
        self.input_refs = {} if by_reference else _codec.input_refs(self.input_parts)
        launch = Launch(
            agent=first,
            run_id=start["run_id"],
            user_input=start["input"],
            input_parts=parts_from_json(start.get("input_parts")),
            branch=agent.name,
            emitter=emitter,
            state=StateView(start["state"]),
            variables=start["variables"],
            session_spec=spec,
            loaded=loaded,
            effects=_ToolEffects(self, durable, facts, ""),
        )
        self._toolbox = Toolbox(durable.tools())
        error: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keep, receive)
            async with send:
                try:
                    # A cut between steps cancels the engine (``cut_between_steps``).
                    with anyio.CancelScope() as self._engine:
                        self._taken_up = self._taken_up or waited is None
                        self._invoked_at = workflow.now().timestamp()
                        result = waited if waited is not None else await execute(launch)
                        # A run that waits on decisions waits here, durably (for days if
                        # need be), then goes on in this workflow: one stream of events.
                        while result.pending:
                            decided = await self._wait_for_decisions(durable, result)
                            launch = _resumed(launch, agent, result, decided, spec)
                            self._invoked_at, self._spent = workflow.now().timestamp(), 0.0
                            result = await execute(launch)
                except _Cut:
                    pass  # in a wait
                except Exception as exc:
                    workflow.logger.debug("run %s failed", start["run_id"], exc_info=True)
                    error = exc
        if self._cutting is not None:
            return self._cutting
        terminal = self._terminal
        if terminal is None:
            # The engine ends every run with RunFinished or RunFailed; failing without one is a
            # fault of ours: the workflow fails, saying so, rather than retrying its task.
            raise ApplicationError(
                f"the run ended without its terminal event: {error!r}",
                type="agentloop.Fault",
                non_retryable=True,
            )
        return terminal

    async def _wait_for_decisions(
        self, durable: TemporalAgent[Any], result: RunResult[Any]
    ) -> dict[str, Decision]:
        """The decisions a ``decide`` update brings; none within ``decision_timeout``: each
        approval is denied and each external call fails, saying so."""
        reply = result.resume_state["reply"] if result.resume_state is not None else None
        self._waiting_step = (
            step_from_json(reply)
            if reply is not None
            else Step(index=len(result.steps), attempt=0, pending=result.pending)
        )
        self._taken_up = True
        within = durable.decision_timeout
        since, self._waited_since = self._waited_since or workflow.now().timestamp(), None
        if not await self._decided_within(within, since):
            why = f"no decision within {within:g}s (the run's decision_timeout)"
            self._decided = {
                p.id: Deny(why) if p.kind == "approval" else ExternalResult(error=why)
                for p in result.pending
            }
        decided, self._decided = self._decided or {}, None
        self._waiting_step = None
        return decided

    async def _decided_within(self, within: float | None, since: float) -> bool:
        """Whether the decisions came within ``within`` seconds of ``since``. The run may
        continue as new meanwhile (``_Cut``), before any decision is taken: the next run waits
        on, for what is left of the time."""
        if not workflow.patched(CONTINUE_PATCH):  # a run waiting from before, as it waited
            self._uncut = True
            try:
                await workflow.wait_condition(
                    lambda: self._decided is not None,
                    timeout=None if within is None else timedelta(seconds=within),
                )
            except TimeoutError:
                return False
            return True
        while self._decided is None:
            left = None if within is None else within - (workflow.now().timestamp() - since)
            if left is not None and left <= 0:
                return False
            try:
                await workflow.wait_condition(
                    lambda: (
                        self._decided is not None
                        or (self._waiting_whole is not None and self._cut_wanted())
                    ),
                    timeout=None if left is None else timedelta(seconds=left),
                )
            except TimeoutError:
                return False
            if self._decided is None:
                cut = self._fits(self._cut_of("wait", waiting=self._waiting_whole, since=since))
                if cut is not None:
                    self._cutting = cut
                    raise _Cut
        return True

    def _cut_wanted(self) -> bool:
        """Whether the run should continue as new at its next safe point: Temporal suggests
        it, or its history passed ``continue_after`` events (beyond what its start took) or
        ``CONTINUE_BYTES``."""
        if self._uncut or self._cutting is not None:
            return False
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() - self._floor >= self._continue_after
            or info.get_current_history_size() >= CONTINUE_BYTES
        )

    async def cut_between_steps(self, request: ModelRequest) -> None:
        """Before the run's first model call of a step (no activity in flight, the steps so far
        settled): when the run should continue as new, the engine is cancelled here, and the
        next run goes on from its steps (a session's from its store, where its steps are
        committed: the session is left as a crash leaves it, for the next run to resume). After
        a handoff, the carry says under which agent it goes on, and from which step its
        history starts (``_counts_json``)."""
        if request.run is None:
            return
        run = run_of(request.run)
        step = len(run.steps)
        first, self._asked_step = step != self._asked_step, step
        if (
            not first
            or self._since_step is None  # no step finished in this run yet
            or self._engine is None
            or run.parent_run_id is not None
            or not self._cut_wanted()
        ):
            return
        if run.agent.name != self._start["agent"] and not workflow.patched(HANDOFF_PATCH):
            return  # a run from before, handed over: it is not cut, as it was not
        if not workflow.patched(CONTINUE_PATCH):  # a run from before: it never continues as new
            self._uncut = True
            return
        session = run.session
        cut = self._fits(
            self._cut_of(
                "step",
                steps=[step_to_json(s) for s in run.steps] if session is None else [],
                state=run.state.snapshot() if session is None else {},
                counts=_counts_json(run),
                elapsed=self._spent + workflow.now().timestamp() - self._invoked_at,
            )
        )
        if cut is None:
            return
        self._cutting = cut
        if session is not None:
            session.leave()
        self._engine.cancel()
        await anyio.Event().wait()  # cancelled (a workflow has no infinite sleep: no timer)

    def _cut_of(
        self,
        at: Literal["step", "wait"],
        *,
        steps: list[dict[str, Any]] | None = None,
        state: dict[str, Any] | None = None,
        counts: dict[str, Any] | None = None,
        waiting: str | None = None,
        since: float = 0.0,
        elapsed: float = 0.0,
    ) -> _carry.Carry:
        """The carry of a cut made now; its events and counts are taken at the cut itself
        (``_next_start``), once the engine's last events are in the log."""
        return _carry.Carry(
            previous=workflow.info().run_id,
            base=0,
            tail=[],
            calls=0,
            caller=(False, 0, 0.0),
            at=at,
            replayed=0,
            steps=steps or [],
            state=state or {},
            counts=counts or {},
            waiting=waiting,
            waited_since=since,
            elapsed=elapsed,
            continued=self._continued + 1,
        )

    def _fits(self, carry: _carry.Carry) -> _carry.Carry | None:
        """``carry`` if the next run's start holds it (with room for a tail) within Temporal's
        payload limit, whole or else with its large strings by reference (the next run reads
        them back from this one: ``_whole``); else ``None``, and the run goes on uncut (it may
        meet the history's limit), with a warning."""
        size = self._size_of(carry)
        if size > MAX_START_BYTES:
            waiting = None if carry.waiting is None else json.loads(carry.waiting)
            carry = dataclasses.replace(
                carry,
                steps=self.blobs.refer(carry.steps),
                state=self.blobs.refer(carry.state),
                waiting=None if waiting is None else json.dumps(self.blobs.refer(waiting)),
            )
            size = self._size_of(carry)
            if size > MAX_START_BYTES and workflow.patched(START_PATCH):
                fields = _carry.refer_start(self.blobs, self._start)
                if fields is not None:  # else made of many small values: it cannot go
                    carry = dataclasses.replace(carry, start=fields)
                    size = self._size_of(carry)
            largest = max(
                (self.blobs.size(d) for d in _payloads.digests_in(_carry.encode(carry))),
                default=0,
            )
            size = max(size, largest)  # each string must fit in the result that reads it back
        if size <= MAX_START_BYTES:
            return carry
        workflow.logger.warning(
            "run %s cannot continue as new: what it carries is %.2f MB, over the payload limit",
            self._start.get("run_id"),
            size / 2**20,
        )
        self._uncut = True
        return None

    def _size_of(self, carry: _carry.Carry) -> int:
        """The next run's start with ``carry``, in bytes, and room for a tail of events."""
        start = {**self._fields_for(carry), "carry": _carry.encode(carry)}
        return _payloads.size_of(start) + _carry.TAIL_BYTES + 4096

    def _fields_for(self, carry: _carry.Carry) -> dict[str, Any]:
        """The start fields of the next run with ``carry``: this run's, or, when the carry
        holds them by reference, with those emptied."""
        return self._start if carry.start is None else _carry.emptied(self._start)

    async def _whole(self, carry: _carry.Carry) -> _carry.Carry:
        """``carry`` with the strings it holds by reference read back (``agentloop.carried``,
        from the run before: its result records them in this run's history, so a replay has
        them too), and kept here, as the strings this run refers to must be."""
        waiting = carry.waiting
        value = (
            None if waiting is None or _payloads.BLOB_REF not in waiting else json.loads(waiting)
        )
        todo = _payloads.digests_in([carry.steps, carry.state, value, carry.start])
        while todo:
            texts: list[str] = await workflow.execute_activity(
                CARRIED_ACTIVITY,
                {"previous": carry.previous, "digests": todo},
                result_type=list,
                start_to_close_timeout=timedelta(seconds=120),
                retry_policy=RetryPolicy(maximum_attempts=5),
            )
            try:
                if not texts:
                    raise ValueError("none read back")
                for digest, text in zip(todo, texts, strict=False):
                    self.blobs.hold(digest, text)
            except ValueError as exc:
                raise ApplicationError(
                    f"the strings the run carried from run {carry.previous}: {exc}",
                    type="agentloop.Fault",
                    non_retryable=True,
                ) from None
            todo = todo[len(texts) :]
        return dataclasses.replace(
            carry,
            steps=self.blobs.whole(carry.steps),
            state=self.blobs.whole(carry.state),
            waiting=waiting if value is None else json.dumps(self.blobs.whole(value)),
            start=None if carry.start is None else self.blobs.whole(carry.start),
        )

    def _next_start(self, cut: _carry.Carry) -> dict[str, Any]:
        """The start of the next run of the chain: the start fields and the cut's carry, with
        the last events (dropped if they would not fit) and the counts as they are now."""
        tail = _carry.tail_of(self._log, self._log_bytes)
        carry = dataclasses.replace(
            cut,
            base=self._last_seq - len(tail),
            tail=tail,
            calls=self._call_count,
            caller=(self._polled, self._acked, self._acked_at),
            replayed=(self._since_step or 0) if cut.at == "step" else 0,
        )
        fingerprint = f"{self._start['fingerprint']}{CONTINUED}"
        start: dict[str, Any] = {**self._fields_for(carry), "fingerprint": fingerprint}
        start["carry"] = _carry.encode(carry)
        if _payloads.size_of(start) > MAX_START_BYTES:
            carry = dataclasses.replace(carry, base=self._last_seq, tail=[])
            start["carry"] = _carry.encode(carry)
        return start

    def _take_start(self, start: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        """``start`` with its fields as the run before carried them by reference, read back;
        checked as a start is, and kept for the next run's."""
        fields = {k: v for k, v in fields.items() if k in _carry.START_FIELDS}
        whole = {**start, **fields}
        try:
            _codec.check_start_shape(whole)
        except (KeyError, TypeError, ValueError) as exc:
            raise ApplicationError(
                f"not a start agentloop sends (the start carried by reference: {exc})",
                type="BadStart",
                non_retryable=True,
            ) from None
        self._start = {**self._start, **fields}
        return whole

    def _restore(self, carry: _carry.Carry) -> int:
        """This run goes on from the run before's cut: its events' numbering and tail, its
        model calls' numbering, its caller's lease. The seq the engine's events go on from
        (less those it makes again, going on between steps: they are dropped)."""
        self._previous, self._base = carry.previous, carry.base
        self._log = list(carry.tail)
        self._log_bytes = [_payloads.size_of(e) for e in carry.tail]
        self._call_count = carry.calls
        self._polled, self._acked, self._acked_at = carry.caller
        self._continued = carry.continued
        if carry.at == "wait":
            self._waited_since = carry.waited_since
            return self._last_seq
        self._drop_through = self._last_seq
        return self._last_seq - carry.replayed - 1  # and its RunStarted

    def _restore_wait(self, carry: _carry.Carry, durable: TemporalAgent[Any]) -> RunResult[Any]:
        waiting = carry.waiting or ""
        why = ""
        try:
            event = ev.event_from_json(waiting, output_type=durable.agent.output_type)
        except (KeyError, TypeError, ValueError) as exc:
            event, why = None, str(exc)
        if not isinstance(event, ev.RunWaiting):
            raise ApplicationError(
                f"not a start agentloop sends (the carried wait is no RunWaiting: {why})"
                if event is None
                else f"not a start agentloop sends (the carried wait is a {event.type} event)",
                type="BadStart",
                non_retryable=True,
            )
        self._waiting_whole = waiting
        self._waiting_event = self.blobs.event(waiting)
        return event.result

    async def _keep(self, receive: Any) -> None:
        async with receive:
            async for event in receive:
                if event.seq <= self._drop_through:
                    continue  # the run before had it: the engine made it again, going on
                whole = event.to_json()
                data = self.blobs.event(whole)
                self._log.append(data)
                self._log_bytes.append(_payloads.size_of(data))
                if self._since_step is not None:
                    self._since_step += 1
                if event.parent_run_id:
                    continue
                if isinstance(event, ev.RunFinished | ev.RunFailed):
                    self._terminal = data
                elif isinstance(event, ev.RunWaiting):
                    self._waiting_event, self._waiting_whole = data, whole
                elif isinstance(event, ev.RunStarted):
                    self._waiting_event = self._waiting_whole = None  # it waits no more
                elif isinstance(event, ev.StepFinished):
                    self._since_step = 0


def _waited_from(state: Any, entry: RunnableAgent) -> Loaded:
    """What a run without a session resumes its wait from (its resume state); when it
    waited under an agent its entry handed over to, under that agent, its prompt replaying
    from the step the handoff gave it (``Handoff(history="input")``: the steps after the
    step that handed over)."""
    name = state.get("agent") if isinstance(state, dict) else None
    if not isinstance(name, str) or name == entry.name:
        return decode_state(state, agent=entry.name)
    loaded = decode_state(state, agent=name)
    return dataclasses.replace(loaded, handed=(name, handed_from(entry, loaded.steps)))


def _counts_json(run: RunCore) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "usage": {model: dataclasses.asdict(u) for model, u in run.usage_by_model.items()},
        "tool_calls": run.tool_calls,
        "tool_retries": dict(run.tool_retries),
        "output_retries": run.output_retries,
    }
    replay_from = len(run.steps) - len(run.replayed)  # ``Handoff(history="input")``: > 0
    if run.agent is not run.entry_agent or replay_from:  # handed over: under whom, from where
        counts["agent"], counts["replay_from"] = run.agent.name, replay_from
    return counts


def _counts_of(data: dict[str, Any]) -> Counts:
    """``_counts_json``'s, read back (``TypeError``/``ValueError`` for counts it never made)."""
    usage = data["usage"]
    retries = data["tool_retries"]
    if not isinstance(usage, dict) or not isinstance(retries, dict):
        raise TypeError("a carry's counts hold objects")
    usage_by_model = {str(k): Usage(**cast("dict[str, Any]", v)) for k, v in usage.items()}
    agent = data.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise TypeError("a carry's agent is a name")
    return Counts(
        usage_by_model=usage_by_model,
        tool_calls=int(data["tool_calls"]),
        tool_retries={str(k): int(v) for k, v in cast("dict[str, Any]", retries).items()},
        output_retries=int(data["output_retries"]),
        agent=agent,
        replay_from=int(data.get("replay_from", 0)),
    )


def _resumed(
    launch: Launch,
    agent: RunnableAgent,
    result: RunResult[Any],
    decisions: dict[str, Decision],
    spec: SessionSpec | None,
) -> Launch:
    """The next invocation of a run that waited: from its session, or from its resume state,
    with the decisions; its events numbered on in the same stream."""
    loaded = None
    if spec is not None:
        spec = SessionSpec(
            store=spec.store, session_id=spec.session_id, wait=spec.wait, resume=True
        )
    else:
        loaded = _waited_from(result.resume_state, agent)
    return Launch(
        agent=agent,
        run_id=launch.run_id,
        user_input="",
        branch=launch.branch,
        emitter=launch.emitter,
        state=StateView(dict(result.state or {})),
        variables=launch.variables,
        session_spec=spec,
        loaded=loaded,
        decisions=decisions,
        effects=launch.effects,
    )
