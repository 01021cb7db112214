"""The activities: a model call streamed from the provider, and one tool call (tool middleware
included), both run on the worker with the worker's own agent objects."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast, final

import anyio
from temporalio import activity
from temporalio.client import WorkflowHandle, WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from .._actions import Toolbox, error_result, make_terminal
from .._context import StateView
from .._errors import ModelError, ModelTimeout, RunError, SessionStoreError, UserError
from .._final import final_text
from .._middleware import ToolCall, compose
from ..models._types import ModelDelta, ModelRequest, ModelResponse, RunContext, Usage
from . import _codec, _payloads
from ._batches import Batches
from ._durable import DELTAS_SIGNAL, PROGRESS_SIGNAL, STREAMING_QUERY
from ._progress import ProgressSender
from ._store import error_of_store, perform

if TYPE_CHECKING:
    from .._agent import Agent
    from ._durable import TemporalAgent

INPUTS_KEPT = 8  # runs whose input parts a worker keeps at hand (each under 2 MB)


class Activities:
    """The activities of the agents one worker serves (bound to them: no global registry)."""

    def __init__(self, agents: Mapping[str, TemporalAgent[Any]]) -> None:
        self._agents = agents
        # The input parts of the runs whose model activities ran here last, by workflow run
        # (read once from each run's history; the oldest dropped past ``INPUTS_KEPT``).
        self._inputs: OrderedDict[tuple[str, str], list[dict[str, Any]]] = OrderedDict()
        # The strings the runs sent by reference, read back by query (``_payloads``).
        self._reader = _payloads.BlobReader()

    def _agent(self, name: str) -> TemporalAgent[Any]:
        durable = self._agents.get(name)
        if durable is None:
            raise ApplicationError(
                f"this worker serves no agent named {name!r}", type="AgentMismatch"
            )
        return durable

    @activity.defn(name="agentloop.model")
    async def model(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Stream one reply; send its deltas to the workflow in batches as they come."""
        durable = self._agent(payload["agent"])
        model = _agent_at(durable, payload).resolved_model()
        info = activity.info()
        if info.workflow_id is None:
            raise ApplicationError("the model activity streams to its workflow: it has none")
        encoded = await self._reader.resolve(payload["request"], _blob_query(info))
        if payload.get("input_refs"):
            parts = await self._input_parts(info.workflow_id, info.workflow_run_id or "")
            encoded = _codec.resolve_inputs(encoded, parts)
        request = _codec.decode_request(encoded)
        handle = activity.client().get_workflow_handle(info.workflow_id)
        sender = _sender(handle, payload, request, _heartbeat_every(info))
        attempt, idle = payload.get("timeouts") or (None, None)  # the workflow's, when it set none
        failure: ApplicationError | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(sender.run)
            try:
                with anyio.fail_after(attempt):
                    async with model.stream(request) as deltas:
                        async for delta in _within(deltas, idle):
                            sender.add(delta)
            except TimeoutError:  # as the engine's own timeouts fail an attempt, in-process
                timeout = ModelTimeout(
                    "the model stream timed out", model=model.name, provider=model.provider
                )
                failure = ApplicationError(
                    str(timeout),
                    _codec.model_error_details(timeout),
                    type="agentloop.ModelError",
                    non_retryable=True,
                )
            except ModelError as exc:
                failure = ApplicationError(
                    str(exc),
                    _codec.model_error_details(exc),
                    type="agentloop.ModelError",
                    non_retryable=True,
                )
            except RunError as exc:  # the driver's ReplyTooLarge: the run ends with it, once
                failure = ApplicationError(
                    str(exc),
                    _payloads.run_error_details(exc),
                    type=_payloads.RUN_ERROR,
                    non_retryable=True,
                )
            except Exception as exc:  # the driver's own fault: the run fails, as in-process
                failure = ApplicationError(
                    f"{type(exc).__name__}: {exc}", type="agentloop.Fault", non_retryable=True
                )
            await sender.close()
        # What streamed before a failure goes too, by signal, as does everything for a
        # workflow of an earlier version (it reads no deltas from the result).
        rest = await sender.rest(signal=failure is not None or "stream" not in payload)
        if failure is not None:
            raise failure
        return {"batches": sender.sent, "deltas": rest}

    async def _input_parts(self, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
        """The run's input parts, from its start payload: the first event of its history."""
        key = (workflow_id, run_id)
        parts: list[dict[str, Any]] | None = self._inputs.get(key)
        if parts is None:
            client = activity.client()
            handle = client.get_workflow_handle(workflow_id, run_id=run_id or None)
            parts = []
            async for event in handle.fetch_history_events(page_size=1):
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                [start] = await client.data_converter.decode(payloads, [dict])
                found: list[dict[str, Any]] = cast("dict[str, Any]", start).get("input_parts") or []
                parts = list(found)
                break
            self._inputs[key] = parts
            while len(self._inputs) > INPUTS_KEPT:
                self._inputs.popitem(last=False)
        self._inputs.move_to_end(key)
        return parts

    @activity.defn(name="agentloop.carried")
    async def carried(self, payload: dict[str, Any]) -> list[str]:
        """The strings a run that continued as new carries by reference, read back from the
        run before it (by its run id, a worker replaying it): in order, as many as fit in one
        result (one at least); the workflow asks again for the rest."""
        info = activity.info()
        fetch = _blob_query(info, run_id=str(payload["previous"]))
        digests = [str(d) for d in payload["digests"]]
        refs = [{_payloads.BLOB_REF: d, "chars": 0} for d in digests]
        texts: list[str] = await self._reader.resolve(refs, fetch)
        taken: list[str] = []
        budget = _payloads.MAX_PAYLOAD_BYTES
        for text in texts:
            budget -= _payloads.size_of(text) + 1
            if budget < 0 and taken:
                break
            taken.append(text)
        return taken

    @activity.defn(name="agentloop.store")
    async def store(self, payload: dict[str, Any]) -> Any:
        """One call of a durable session run on the worker's session store."""
        payload = await self._reader.resolve(payload, _blob_query(activity.info()))
        durable = self._agent(payload["agent"])
        store = durable.agent.store
        if store is None:
            raise error_of_store(
                UserError(
                    f"agent {durable.name!r} has no store on this worker: a durable run with a "
                    "session needs Agent(store=...) on every worker"
                )
            )
        result = await perform(store, payload["op"], payload["args"])
        if _payloads.size_of(result) > _payloads.MAX_PAYLOAD_BYTES:  # a session's long history
            what = f"the session store's {payload['op']} result"
            hint = "a durable run records each store call: load less history (Memory)"
            raise error_of_store(
                SessionStoreError(_payloads.too_large(what), store=repr(store), hint=hint)
            )
        return result

    @activity.defn(name="agentloop.tool")
    async def tool(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Run one action through the agent's tool middleware and its tool."""
        payload = await self._reader.resolve(payload, _blob_query(activity.info()))
        durable = self._agent(payload["agent"])
        agent = _agent_at(durable, payload)
        action = _codec.decode_action(payload["action"])
        before: dict[str, Any] = payload["run"]["state"]
        state = StateView(before)
        run = _ActivityRun(payload["run"], state, agent.name, agent.max_steps)
        call = ToolCall(
            action=action, run=run, step=payload["step"], ordinal=payload.get("ordinal", 0)
        )
        toolbox = Toolbox(durable.tools(payload.get("path", "")))
        progress = _progress_of(payload)
        terminal = make_terminal(
            toolbox, agent.tool_limits, progress=None if progress is None else progress.report
        )
        invoke = compose(agent.tool_middleware, terminal)
        exit: KeyboardInterrupt | SystemExit | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(_heartbeat, _heartbeat_every(activity.info()))
            if progress is not None:
                tg.start_soon(progress.run)
            try:
                result = await invoke(call)
            except Exception as exc:  # a tool middleware failed: still one action's error
                message = f"tool middleware failed: {type(exc).__name__}: {exc}"
                result = error_result(action, "tool_error", message)
            except (KeyboardInterrupt, SystemExit) as exc:
                exit = exc
            if progress is not None:
                await progress.close()  # its last reports reach the workflow before the result
            tg.cancel_scope.cancel()
        if exit is not None:  # the tool's own doing, not a transient fault: never retried
            raise ApplicationError(
                f"the tool raised {type(exit).__name__}: {exit}",
                type=type(exit).__name__,
                non_retryable=True,
            )
        after = dict(state)
        outcome = _payloads.tool_outcome(
            {
                "result": _codec.encode_result(result),  # pyright: ignore[reportPossiblyUnboundVariable]  # the task group swallows nothing
                "set": {k: v for k, v in after.items() if k not in before or before[k] != v},
                "deleted": [k for k in before if k not in after],
            },
            payload["action"],
        )
        if _payloads.size_of(outcome) > _payloads.MAX_PAYLOAD_BYTES:
            # It ran, but its outcome cannot be recorded: the model sees why, not a retry.
            message = _payloads.too_large("the tool's output (and its state changes)")
            outcome = {
                "result": _codec.encode_result(error_result(action, "tool_error", message)),
                "set": {},
                "deleted": [],
            }
        return outcome


def _agent_at(durable: TemporalAgent[Any], payload: dict[str, Any]) -> Agent[Any, Any]:
    """The agent, or the sub-agent whose model or tool the activity calls (by its path)."""
    try:
        return durable.agent_at(payload.get("path", ""))
    except UserError as exc:
        raise ApplicationError(str(exc), type="AgentMismatch", non_retryable=True) from None


def _blob_query(info: activity.Info, run_id: str | None = None) -> _payloads.Fetch:
    """The ``agentloop.blob`` query of the activity's own workflow run (or of ``run_id``, an
    earlier run of its chain)."""
    handle = activity.client().get_workflow_handle(
        info.workflow_id or "", run_id=run_id or info.workflow_run_id
    )

    async def fetch(wants: list[list[Any]]) -> list[dict[str, Any]]:
        reply: list[dict[str, Any]] = await handle.query(
            _payloads.BLOB_QUERY, wants, result_type=list
        )
        return reply

    return fetch


def _heartbeat_every(info: activity.Info) -> float:
    timeout = info.heartbeat_timeout
    return timeout.total_seconds() / 3 if timeout else 10.0


def _asker(handle: WorkflowHandle[Any, Any]) -> Callable[[], Awaitable[bool | None]]:
    """Asks the workflow whether a caller streams it now (``None``: no answer now)."""

    async def ask() -> bool | None:
        try:
            return bool(await handle.query(STREAMING_QUERY, rpc_timeout=timedelta(seconds=5)))
        except (RPCError, WorkflowQueryFailedError):
            return None  # asked again later

    return ask


def _progress_of(payload: dict[str, Any]) -> ProgressSender | None:
    """Where the tool's progress reports go: to its workflow, by signal (``_progress``), when
    the workflow numbered the call for them (one from before this did not)."""
    number = payload.get("progress")
    info = activity.info()
    if not isinstance(number, int) or info.workflow_id is None:
        return None
    handle = activity.client().get_workflow_handle(info.workflow_id)

    async def send(batch: dict[str, Any]) -> None:
        try:
            await handle.signal(PROGRESS_SIGNAL, batch)
        except RPCError:
            pass  # a progress bar: these reports are lost, the tool's call is not

    return ProgressSender(
        number,
        info.workflow_run_id or "",
        send,
        streaming=bool(payload.get("stream")),
        ask=_asker(handle),
    )


def _sender(
    handle: WorkflowHandle[Any, Any], payload: dict[str, Any], request: ModelRequest, every: float
) -> Batches:
    """The call's deltas on their way to the workflow: batched while a caller streams (or a
    ReAct reply's text carries its tool calls), else held for the result but for seals."""

    async def send(batch: dict[str, Any]) -> None:
        await handle.signal(DELTAS_SIGNAL, batch)

    ask = _asker(handle)
    react = request.tool_mode == "react"  # its text carries its tool calls: always sent
    return Batches(
        payload["call"],
        send,
        streaming=bool(payload.get("stream", True)) or react,
        ask=None if react else ask,
        beat=activity.heartbeat,
        heartbeat=every,
    )


async def _within(
    deltas: AsyncIterator[ModelDelta], idle: float | None
) -> AsyncIterator[ModelDelta]:
    """The stream's deltas, each within ``idle`` seconds of the last (``TimeoutError``)."""
    iterator = deltas.__aiter__()
    while True:
        try:
            with anyio.fail_after(idle):
                delta = await iterator.__anext__()
        except StopAsyncIteration:
            return
        yield delta


async def _heartbeat(every: float) -> None:
    while True:
        activity.heartbeat()
        await anyio.sleep(every)


@final
class _ActivityRun(RunContext):
    """The run as a tool sees it inside its activity: the workflow's facts, and a copy of the
    state whose changes go back to the workflow with the result."""

    __slots__ = ("_facts", "_max_steps", "_name", "_scratch", "_state")

    def __init__(
        self, facts: dict[str, Any], state: StateView, agent_name: str, max_steps: int
    ) -> None:
        self._facts = facts
        self._state = state
        self._name = agent_name
        self._max_steps = max_steps
        self._scratch: dict[int, dict[str, Any]] = {}

    @property
    def run_id(self) -> str:
        return str(self._facts["run_id"])

    @property
    def parent_run_id(self) -> str | None:
        return self._facts.get("parent_run_id")

    @property
    def root_run_id(self) -> str:
        return str(self._facts["root_run_id"])

    @property
    def agent_name(self) -> str:
        return self._name

    @property
    def branch(self) -> str:
        return str(self._facts["branch"])

    @property
    def session_id(self) -> str | None:
        return self._facts.get("session_id")

    @property
    def state(self) -> StateView:
        return self._state

    @property
    def step(self) -> int:
        return int(self._facts.get("step", 0))

    @property
    def max_steps(self) -> int:
        return self._max_steps

    @property
    def last_step(self) -> bool:
        return bool(self._facts.get("last_step"))

    def is_final_answer(self, response: ModelResponse) -> bool:
        return final_text(response, accept_thought=False) is not None

    @property
    def deps(self) -> Any:
        return None

    @property
    def variables(self) -> Mapping[str, Any]:
        return dict(self._facts.get("variables") or {})

    @property
    def usage(self) -> Usage:
        return Usage(**(self._facts.get("usage") or {}))

    @property
    def tool_calls(self) -> int:
        return int(self._facts.get("tool_calls", 0))

    def scratch(self, owner: object) -> dict[str, Any]:
        return self._scratch.setdefault(id(owner), {})
