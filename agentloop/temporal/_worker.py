"""Serving durable runs: ``worker`` (the workflow and the activities of a set of agents),
``replayer`` (the same, to replay recorded histories), ``connect`` (a client, failing in
bounded time when the server is unreachable)."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import anyio
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowReplayResult,
    WorkflowReplayResults,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import NondeterminismError

from .._errors import AgentLoopError, UserError
from ._activities import Activities
from ._durable import TemporalAgent, mismatch, start_of
from ._workflow import SERVED, AgentFacts, AgentRunWorkflow, ModelFacts

# Passed through Temporal's sandbox: imported once, outside it. The workflow's code is
# deterministic by construction (it reads time, randomness and ids only through Temporal);
# re-importing these per run would cost far more than the sandbox protects here.
PASSTHROUGH = (
    "agentloop",
    "anyio",
    "sniffio",
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_extensions",
    "jinja2",
    "markupsafe",
    "tenacity",
    "httpx2",
    "httpcore2",
    "openai",
    "anthropic",
)


class TemporalUnavailable(AgentLoopError):
    """The Temporal server could not be reached in time."""


async def connect(target: str = "127.0.0.1:7233", *, within: float = 10.0, **kwargs: Any) -> Client:
    """A Temporal client (``Client.connect``), or ``TemporalUnavailable`` after ``within``
    seconds when the server cannot be reached. (Temporal's Python SDK is asyncio-only.)

    Args:
        target: The server's ``host:port``.
        within: Seconds to keep trying.
        **kwargs: Passed to ``Client.connect`` (``namespace``, ``tls``, …).
    """
    _require_asyncio()
    try:
        with anyio.fail_after(within):
            return await Client.connect(target, **kwargs)
    except TimeoutError:
        raise TemporalUnavailable(
            f"no Temporal server answered at {target} within {within:g}s "
            "(start one: temporal server start-dev)"
        ) from None
    except RuntimeError as exc:  # the SDK's "Failed client connect: …"
        raise TemporalUnavailable(f"cannot connect to Temporal at {target}: {exc}") from exc


def worker(
    client: Client,
    agents: Sequence[TemporalAgent[Any] | str],
    *,
    task_queue: str | None = None,
    sticky_queue_schedule_to_start_timeout: float = 10.0,
    **kwargs: Any,
) -> Worker:
    """A Temporal ``Worker`` serving durable runs of ``agents``: ``async with worker(...)`` or
    ``await worker(...).run()``. Run as many as you like, on any machines.

    Agents given as ``"module:attribute"`` are imported now: a tool that the worker cannot
    import is an error here, not a stuck run.

    Args:
        client: A Temporal client.
        agents: ``TemporalAgent`` objects, or their import paths.
        task_queue: The task queue (default: the agents', which must then agree).
        sticky_queue_schedule_to_start_timeout: Seconds before a run's next task leaves a
            worker that stopped answering for another; lower it to carry runs on sooner after
            a crash.
        **kwargs: Passed to ``Worker`` (``max_concurrent_activities``, …; ``interceptors``
            go after agentloop's own).
    """
    _require_asyncio()
    served = _served(agents)
    queues = {durable.task_queue for durable, _ in served.values()}
    if task_queue is None:
        if len(queues) != 1:
            raise UserError(f"the agents use several task queues ({sorted(queues)}): give one")
        task_queue = queues.pop()
    activities = Activities({name: durable for name, (durable, _) in served.items()})
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentRunWorkflow],
        activities=[activities.model, activities.tool, activities.store, activities.carried],
        interceptors=[_Serve(served), *kwargs.pop("interceptors", ())],
        workflow_runner=sandbox(),
        sticky_queue_schedule_to_start_timeout=timedelta(
            seconds=sticky_queue_schedule_to_start_timeout
        ),
        **kwargs,
    )


def replayer(agents: Sequence[TemporalAgent[Any] | str], **kwargs: Any) -> Replayer:
    """A ``Replayer`` of durable runs of ``agents``: ``await replayer(...).replay_workflow(h)``
    fails on any nondeterminism in a recorded history ``h``; where the agent's definition
    changed since the run started, the failure (``AgentChanged``) names both fingerprints.

    Args:
        agents: As for ``worker``.
        **kwargs: Passed to ``Replayer`` (``interceptors`` go after agentloop's own).
    """
    served = _served(agents)
    return _Replayer(
        {name: durable for name, (durable, _) in served.items()},
        workflows=[AgentRunWorkflow],
        interceptors=[_Serve(served), *kwargs.pop("interceptors", ())],
        workflow_runner=sandbox(),
        **kwargs,
    )


class AgentChanged(NondeterminismError):
    """A recorded run does not replay because its agent's definition changed since it
    started (its fingerprint says how to tell)."""


class _Replayer(Replayer):
    """Temporal's replayer, which first checks each history's agent: one whose definition
    changed since the run started fails with ``AgentChanged`` and is not replayed (the
    workflow fails runs that do not replay, and a replayer would wait on such a run)."""

    def __init__(self, agents: Mapping[str, TemporalAgent[Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._agents = agents

    async def replay_workflow(
        self, history: WorkflowHistory, *, raise_on_replay_failure: bool = True
    ) -> WorkflowReplayResult:
        changed = self._changed(history)
        if changed is None:
            return await super().replay_workflow(
                history, raise_on_replay_failure=raise_on_replay_failure
            )
        if raise_on_replay_failure:
            raise changed
        return WorkflowReplayResult(history=history, replay_failure=changed)

    async def replay_workflows(
        self, histories: AsyncIterator[WorkflowHistory], *, raise_on_replay_failure: bool = True
    ) -> WorkflowReplayResults:
        failures: dict[str, Exception] = {}

        async def unchanged() -> AsyncIterator[WorkflowHistory]:
            async for history in histories:
                changed = self._changed(history)
                if changed is None:
                    yield history
                elif raise_on_replay_failure:
                    raise changed
                else:
                    failures[history.run_id] = changed

        replayed = await super().replay_workflows(
            unchanged(), raise_on_replay_failure=raise_on_replay_failure
        )
        return WorkflowReplayResults(replay_failures={**failures, **replayed.replay_failures})

    def _changed(self, history: WorkflowHistory) -> AgentChanged | None:
        start = start_of(history.events[0]) if history.events else None
        durable = self._agents.get(str(start.get("agent"))) if isinstance(start, dict) else None
        changed = None if durable is None else mismatch(start, durable)
        # A run refused at its start (AgentMismatch) did nothing: it replays as it ran.
        acted = any(e.HasField("activity_task_scheduled_event_attributes") for e in history.events)
        return None if changed is None or not acted else AgentChanged(changed)


def sandbox() -> SandboxedWorkflowRunner:
    """Temporal's sandbox, with the libraries the engine uses passed through."""
    importlib.import_module(
        "anyio._backends._asyncio"
    )  # anyio loads it lazily: never in a workflow

    # anyio's lazy attributes, looked up once here, outside any workflow.
    _ = (anyio.Event, anyio.Lock, anyio.CancelScope, anyio.create_task_group)
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    return SandboxedWorkflowRunner(restrictions=restrictions)


def _served(
    agents: Sequence[TemporalAgent[Any] | str],
) -> dict[str, tuple[TemporalAgent[Any], AgentFacts]]:
    served: dict[str, tuple[TemporalAgent[Any], AgentFacts]] = {}
    for item in agents:
        durable = _import(item) if isinstance(item, str) else item
        if not isinstance(durable, TemporalAgent):
            raise UserError(f"{item!r} is not a TemporalAgent")
        if durable.name in served and served[durable.name][0] is not durable:
            raise UserError(f"two agents named {durable.name!r}: a worker serves one of each")
        _check_tools(durable)
        facts: dict[str, ModelFacts] = {}
        for path in durable.agent_paths():  # the agent's model, and each sub-agent's
            model = durable.agent_at(path).resolved_model()
            facts[path] = ModelFacts(
                name=model.name, provider=model.provider, profile=model.profile
            )
        served[durable.name] = (durable, facts)
    if not served:
        raise UserError("a worker needs at least one agent")
    return served


def _import(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise UserError(f"an agent's import path is 'module:attribute', not {path!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UserError(
            f"cannot import the agent {path!r} on this worker: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UserError(f"module {module_name!r} has no attribute {attribute!r}") from None


def _check_tools(durable: TemporalAgent[Any]) -> None:
    """Each tool's function must be importable from its module on this worker, so another
    worker (which imports the same module) runs the same code."""
    for tool in (t for path in durable.agent_paths() for t in durable.tools(path)):
        for activity in tool.activities.values():
            fn = getattr(activity.fn, "__wrapped__", activity.fn)
            module_name = getattr(fn, "__module__", None)
            if module_name is None:
                continue
            try:
                importlib.import_module(module_name)
            except Exception as exc:
                raise UserError(
                    f"tool {tool.name!r} of agent {durable.name!r}: its module {module_name!r} "
                    f"cannot be imported on this worker: {type(exc).__name__}: {exc}"
                ) from exc


def _require_asyncio() -> None:
    import sniffio

    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return
    if library != "asyncio":
        raise UserError(
            f"durable runs need asyncio: Temporal's Python SDK is asyncio-only (this is {library})"
        )


class _Serve(Interceptor):
    """Gives the workflows of one worker its agents (a context variable of the workflow's
    task), instead of a registry every worker of the process would share."""

    def __init__(self, served: Mapping[str, tuple[TemporalAgent[Any], AgentFacts]]) -> None:
        self._served = served

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        served = self._served

        class _Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                SERVED.set(served)
                return await super().execute_workflow(input)

        return _Inbound
