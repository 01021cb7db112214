"""``TemporalAgent``, an agent's durable face, and ``DurableRun``, a durable run as its caller
sees it: the events (by polling the workflow) and the result."""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Self, cast, final

import anyio
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from typing_extensions import TypeVar

import agentloop._errors as _errors
import agentloop._events as ev

from .._actions import SUBAGENT
from .._controls import reachable
from .._decisions import Approve, Deny, Edit, ExternalResult
from .._errors import AgentLoopError, UserError, as_given
from .._inputs import RunInput, input_message_parts
from .._session_run import check_stored_input, parts_to_json
from .._steps import RunResult
from .._time import new_id
from .._waiting import DecisionError
from ..goals import GoalToolSet
from . import _carry, _closed, _codec, _payloads
from ._options import ActivityOptions

if TYPE_CHECKING:
    from temporalio.api.history.v1 import HistoryEvent

    from .._agent import Agent
    from .._decisions import Decision
    from ..tools import Tool

OutputT = TypeVar("OutputT", default=str)

WORKFLOW_NAME = "agentloop.AgentRun"
EVENTS_UPDATE = "agentloop.events"
EVENTS_QUERY = "agentloop.peek"
DELTAS_SIGNAL = "agentloop.deltas"
PROGRESS_SIGNAL = "agentloop.progress"  # a tool activity's progress reports
ACK_SIGNAL = "agentloop.ack"
DECIDE_UPDATE = "agentloop.decide"
WAITING_QUERY = "agentloop.waiting"
NOT_WAITING = "the run is not waiting on decisions"  # how the decide update refuses
CONTINUING = "the run is continuing as new"  # ... while it does: the caller sends it again
# A continued run's start marks its fingerprint so: a worker of an agentloop before
# continuing-as-new (which would start the run over) ends it with AgentMismatch instead.
CONTINUED = "+continued"
STREAMING_QUERY = "agentloop.streaming"
MODEL_ACTIVITY = "agentloop.model"
CARRIED_ACTIVITY = "agentloop.carried"
TOOL_ACTIVITY = "agentloop.tool"
POLL_INTERVAL = 0.1  # the least time between two polls of one caller
IDLE_POLLS = 20  # empty queries in a row (2 s) before the caller polls less often
DECIDE_ATTEMPTS = 7  # sends of a decide refused unprocessed, or during a cut (6 s in all)
SIGNAL_ATTEMPTS = 5  # sends of an ack that reached a run just continued as new (0.75 s)
IDLE_INTERVAL = 0.5  # the least time between two polls of a run idle that long
CLOSED_READS = 5  # queries of a closed run (each answered by a replay) before its outcome
CALLER_CACHE_CHARS = 8 * 1024 * 1024  # of the strings one caller read back by reference
# The least ``continue_after``: a step takes some 20 history events.
MIN_CONTINUE_AFTER = 20
PREVIOUS_HOPS = 1000  # runs of a chain a caller goes back through for events it missed


class DurableRunFailed(AgentLoopError):
    """A durable run failed (``RunFailed``) with an error this process cannot rebuild as its
    own class, or its workflow failed (an agent definition mismatch, a cancelled run).

    Args:
        message: What went wrong.
        kind: The error's class name, as ``RunErrorInfo.kind``.
    """

    def __init__(self, message: str, *, kind: str = "DurableRunFailed") -> None:
        super().__init__(message)
        self.kind = kind


@final
class TemporalAgent(Generic[OutputT]):
    """An ``Agent`` that runs as a Temporal workflow: each model call and each tool call is an
    activity, on any worker serving ``task_queue`` (``worker(...)``). The agent is the same
    object as in-process: tools and middleware do not change.

    Args:
        agent: The agent. Its toolsets must be ``GoalToolSet`` (an MCP server's tools are not
            durable yet); ``deps`` are not available to durable runs' tools. Its sub-agents
            (``Agent.as_tool``) run in its workflow, their model and tool calls activities.
        task_queue: The task queue its runs are scheduled on.
        model_activity: How model calls are scheduled (never retried by Temporal: the agent's
            ``retry`` policy retries them and the caller sees ``AttemptDiscarded``).
        tool_activity: How tool calls are scheduled (timeouts, heartbeats, retry policy).
        tool_activities: Per tool name, options that replace ``tool_activity``.
        linger: Seconds a finished run waits for a streaming caller to read its last events
            (only while that caller holds its ``stream_lease``).
        stream_lease: Seconds a caller counts as streaming the run after its last ack (a
            streaming caller acks every third of it while it reads): the text deltas of a
            caller that stops reading or dies stop going into the history about a second
            after its lease lapses.
        workflow_task_timeout: Seconds a worker may hold one workflow task (Temporal's default
            is 10): after a worker dies in the middle of one, its run waits this long before
            another worker takes over.
        store_seconds: Seconds one call of a session run on the worker's store may take.
        decision_timeout: Seconds a run that waits on decisions waits for them (``None``: for
            as long as it takes, days if need be; it holds no worker meanwhile). When they
            pass, each call that needs approval is denied and each external call fails, the
            reason saying so, and the run goes on.
        version: Your name for this version of the agent's code, part of its fingerprint:
            change it when a tool's or middleware's behaviour changes in a way a run in
            flight must not see (its name, tools, schemas, instructions and middleware names
            are in the fingerprint anyway).
        continue_after: History events after which a run continues as new (Temporal's
            continue-as-new) at its next safe point, between two steps or while it waits on
            decisions; it does so too when Temporal suggests it, or past 16 MB of history.
            Temporal fails a run at 51,200 events or 50 MB.
    """

    def __init__(
        self,
        agent: Agent[Any, OutputT],
        *,
        task_queue: str = "agentloop",
        model_activity: ActivityOptions | None = None,
        tool_activity: ActivityOptions | None = None,
        tool_activities: Mapping[str, ActivityOptions] | None = None,
        linger: float = 60.0,
        stream_lease: float = 30.0,
        workflow_task_timeout: float = 10.0,
        store_seconds: float = 30.0,
        decision_timeout: float | None = None,
        version: str | None = None,
        continue_after: int = 10_000,
    ) -> None:
        given = as_given(continue_after)
        if not isinstance(given, int) or isinstance(given, bool) or given < MIN_CONTINUE_AFTER:
            raise UserError(
                f"continue_after must be an int >= {MIN_CONTINUE_AFTER} (history events), "
                f"not {continue_after!r}"
            )
        if decision_timeout is not None and not decision_timeout > 0:
            raise UserError(f"decision_timeout must be positive seconds, not {decision_timeout!r}")
        self._agents = _agents_of(agent)
        self.agent = agent
        self.name = agent.name
        self.task_queue = task_queue
        self.model_activity = model_activity or ActivityOptions()
        self.tool_activity = tool_activity or ActivityOptions()
        self.tool_activities = dict(tool_activities or {})
        unknown = set(self.tool_activities) - {
            t.name for path in self._agents for t in self.tools(path)
        }
        if unknown:
            raise UserError(f"tool_activities names unknown tools: {', '.join(sorted(unknown))}")
        if not stream_lease > 0:
            raise UserError(f"stream_lease must be positive seconds, not {stream_lease!r}")
        self.linger = linger
        self.stream_lease = stream_lease
        self.workflow_task_timeout = workflow_task_timeout
        self.store_seconds = store_seconds
        self.decision_timeout = decision_timeout
        self.version = version
        self.continue_after = continue_after
        self.fingerprint = _fingerprint(self)

    def tools(self, path: str = "") -> list[Tool]:
        """Every tool a run of the agent has (the goal tools included), or a sub-agent's.

        Args:
            path: The sub-agent's path (``agent_at``); ``""``: the agent's own tools.
        """
        agent = self.agent_at(path)
        tools = list(agent.static_tools)
        for toolset in agent.toolsets:
            if isinstance(toolset, GoalToolSet):
                tools.extend(toolset._tools)  # pyright: ignore[reportPrivateUsage]  # list_tools wants a run
        return tools

    def agent_at(self, path: str) -> Agent[Any, Any]:
        """The agent, or one of its sub-agents (``Agent.as_tool``) by the names of the tools
        that lead to it, ``/``-separated: the activities find a sub-run's model and tools so.

        Args:
            path: ``""`` for the agent itself, ``"helper"``, ``"helper/inner"``, …
        """
        agent = self._agents.get(path)
        if agent is None:
            raise UserError(f"agent {self.name!r} has no sub-agent at {path!r}")
        return agent

    def agent_paths(self) -> list[str]:
        """The paths of the agent (``""``) and of every sub-agent under it."""
        return list(self._agents)

    def may_wait(self) -> bool:
        """Whether a run may wait on decisions (a tool that needs approval, or an external
        one): its workflow then has no execution timeout, as it waits for as long as it takes
        (the agent's ``deadline`` still bounds each invocation)."""
        return any(
            a.may_wait
            for path in self._agents
            for t in self.tools(path)
            for a in t.activities.values()
        )

    async def decide(self, client: Client, run_id: str, decisions: Mapping[str, Decision]) -> None:
        """Decide the calls a durable run waits on (``attach(...).decide(...)``).

        Args:
            client: A Temporal client.
            run_id: The run's id.
            decisions: One per pending call, by ``PendingCall.id``.
        """
        await self.attach(client, run_id).decide(decisions)

    def tool_options(self, name: str) -> ActivityOptions:
        """How the tool's activities are scheduled.

        Args:
            name: The tool's name.
        """
        return self.tool_activities.get(name, self.tool_activity)

    async def start(
        self,
        client: Client,
        input: RunInput,
        *,
        run_id: str | None = None,
        session: str | None = None,
        wait_for_session: float | None = None,
        state: Mapping[str, Any] | None = None,
        variables: Mapping[str, Any] | None = None,
        memo: Mapping[str, Any] | None = None,
    ) -> DurableRun[OutputT]:
        """Start a durable run; its id is the workflow's id. Iterate the returned run for its
        events, or ``await run.result()``.

        Args:
            client: A Temporal client (``connect(...)``).
            input: The user's message: text, or a sequence of text, ``ImagePart`` and
                ``FilePart`` (as ``Agent.run``). The start payload carries it, bytes as base64,
                within Temporal's 2 MB payload limit: give large images and files by URL.
            run_id: The run's id (default: a fresh one). Starting a second run with the id of
                a running one fails: the id makes the submission idempotent.
            session: The session the run continues, in the workers' store (``Agent.store`` on
                every worker): its lease, state, memory and goal, as in-process.
            wait_for_session: Seconds to wait for a session another run holds (``None``:
                ``SessionBusy`` at once).
            state: The starting state of a run without a session.
            variables: Template variables for the instructions.
            memo: Temporal's memo of the workflow: what anyone who can describe the run may
                read without replaying it (the web front keeps the run's owner there).
        """
        text, parts = input_message_parts(input)
        if session is not None and state is not None:
            raise UserError("state= is for runs without a session; a session has its own")
        if session is not None:
            check_stored_input(parts)
        run_id = run_id or f"agentloop-{self.name}-{new_id()}"
        start: dict[str, Any] = {
            "agent": self.name,
            "fingerprint": self.fingerprint,
            "run_id": run_id,
            "input": text,
            "state": dict(state or {}),
            "variables": dict(variables or {}),
            "session": None if session is None else {"id": session, "wait": wait_for_session},
        }
        if parts is not None:  # a text run's start payload stays as it was
            start["input_parts"] = parts_to_json(parts)
        _check_start(start, parts is not None)
        handle: WorkflowHandle[Any, str] = await client.start_workflow(
            WORKFLOW_NAME,
            start,
            id=run_id,
            task_queue=self.task_queue,
            result_type=str,
            memo=dict(memo) if memo else None,
            task_timeout=timedelta(seconds=self.workflow_task_timeout),
            execution_timeout=None
            if self.agent.deadline is None or self.may_wait()
            else timedelta(seconds=self.agent.deadline + 60.0),
        )
        return DurableRun(self, handle, client=client)

    async def run(
        self,
        client: Client,
        input: RunInput,
        *,
        run_id: str | None = None,
        session: str | None = None,
        wait_for_session: float | None = None,
        state: Mapping[str, Any] | None = None,
        variables: Mapping[str, Any] | None = None,
    ) -> RunResult[OutputT]:
        """Start a durable run and wait for its result (options as for ``start``).

        Args:
            client: A Temporal client.
            input: The user's message (text, images, files: as for ``start``).
            run_id: The run's id (default: a fresh one).
            session: The session the run continues, in the workers' store.
            wait_for_session: Seconds to wait for a session another run holds.
            state: The starting state of a run without a session.
            variables: Template variables for the instructions.
        """
        run = await self.start(
            client,
            input,
            run_id=run_id,
            session=session,
            wait_for_session=wait_for_session,
            state=state,
            variables=variables,
        )
        return await run.result()

    def attach(self, client: Client, run_id: str, *, after_seq: int = 0) -> DurableRun[OutputT]:
        """A run started earlier, maybe by another process: its events after ``after_seq``
        (the last ``seq`` the caller saw) and its result.

        Args:
            client: A Temporal client.
            run_id: The run's id (``DurableRun.run_id``).
            after_seq: The ``seq`` of the last event already seen (0: from the start).
        """
        seen = as_given(after_seq)
        if not isinstance(seen, int) or isinstance(seen, bool) or after_seq < 0:
            raise UserError(
                f"after_seq must be a seq already seen (an int >= 0), not {after_seq!r}"
            )
        handle: WorkflowHandle[Any, str] = client.get_workflow_handle(run_id, result_type=str)
        return DurableRun(self, handle, after_seq=after_seq, client=client)

    def __repr__(self) -> str:
        return f"TemporalAgent({self.name!r}, task_queue={self.task_queue!r})"


@final
class DurableRun(Generic[OutputT]):
    """A durable run, as its caller sees it: ``async for event in run`` (the events after the
    last one seen; a caller that reconnects with ``TemporalAgent.attach(after_seq=...)`` goes
    on from there), then ``await run.result()``.

    The events come in batches from a workflow query, polled at most every 0.1 s, every 0.5 s
    after 2 s without events (a query is not recorded and has no per-run limit, so any number
    of callers can stream one run; a long-poll update, recorded and limited to a few in
    flight, is used only while no worker answers queries). ``RunWaiting``
    does not end the iteration: the run goes on once decided (``decide``). A finished run
    waits up to ``TemporalAgent.linger`` seconds for a caller that streams it to read its
    last event (a caller that stops reading at ``RunWaiting`` is not waited for once the run
    is decided). Made by ``TemporalAgent.start`` and ``TemporalAgent.attach``.

    A run that continued as new (``TemporalAgent(continue_after=...)``) is followed by its
    workflow id: its events go on in the next run of the chain, and events from before the
    next run's are read from the run that has them.

    Args:
        durable: The agent the run is of.
        handle: The run's workflow.
        after_seq: The ``seq`` of the last event the caller has seen.
        client: The client ``handle`` is of (to read the earlier runs of a run that continued
            as new).
    """

    def __init__(
        self,
        durable: TemporalAgent[OutputT],
        handle: WorkflowHandle[Any, str],
        after_seq: int = 0,
        *,
        client: Client | None = None,
    ) -> None:
        self._durable = durable
        self._handle = handle
        self._client = client
        self._reading = handle  # the run of the chain the last events came from (its blobs)
        self.run_id = handle.id
        self.last_seq = after_seq
        self._batch: deque[ev.Event] = deque()
        self._ended = False
        self._streamed = False
        self._terminal_event: ev.Event | None = None
        self._last_poll = -POLL_INTERVAL
        self._renew_at = 0.0  # when this caller acks again, to keep its ``stream_lease``
        self._empty_polls = 0
        self._announced = False
        self._rearm = False
        self._reader = _payloads.BlobReader(CALLER_CACHE_CHARS)
        # What the caller learnt of the chain (a run that continued as new): each run's base
        # and the run before it, by base (the events up to it are in that run or before). A
        # caller behind goes straight to the run that has its events, not hop by hop again.
        self._before: dict[int, str] = {}

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ev.Event:
        self._streamed = True
        while not self._batch:
            if self._ended:
                raise StopAsyncIteration
            await self._poll()
        event = self._batch.popleft()
        self.last_seq = event.seq
        if self._rearm and not isinstance(event, ev.RunWaiting):
            self._rearm = False
            await self._ack()  # past the wait: this caller still streams (see ``decide``)
        if isinstance(event, ev.RunWaiting) and event.parent_run_id is None:
            self._rearm = True
        if isinstance(event, ev.RunFinished | ev.RunFailed) and event.parent_run_id is None:
            self._ended = True
            self._terminal_event = event
            self._batch.clear()
            await self._ack()
        return event

    async def _poll(self) -> None:
        idle = self._empty_polls >= IDLE_POLLS
        wait = self._last_poll + (IDLE_INTERVAL if idle else POLL_INTERVAL) - anyio.current_time()
        if wait > 0:
            await anyio.sleep(wait)
        self._last_poll = anyio.current_time()
        if not self._announced:
            self._announced = True
            await self._ack()  # a caller streams: the finished run lingers for it
        elif self._last_poll >= self._renew_at and not self._rearm:
            await self._ack()  # still streaming (not while the run waits: no model calls)
        # By query, also once the run closed (a worker replays it): a caller slower than the
        # one whose ack ended the linger still reads every event, not just the terminal one.
        self._reading = self._handle
        earlier = self._earlier_run(self.last_seq)
        if earlier is not None:  # before the latest run's events: from the run that has them
            await self._read_earlier(earlier)
            return
        reply = await self._peek()
        if reply is None:  # no worker answered now (as after a crash): long-poll for one
            try:
                polled: dict[str, Any] | None = await self._handle.execute_update(
                    EVENTS_UPDATE, self.last_seq, result_type=dict
                )
            except Exception as exc:  # the workflow closed between two polls
                if not await self._closed():
                    # Or it continued as new meanwhile: the next run answers.
                    polled = await self._peek()
                    if polled is None:
                        raise DurableRunFailed(f"polling the run's events failed: {exc}") from exc
                else:
                    polled = await self._peek_closed()
            if polled is None:  # no worker replays it: the end is all there is to read
                await self._end_from_outcome()
                return
            reply = await self._earlier(polled)
        await self._take(reply)

    async def _read_earlier(self, run_id: str) -> None:
        reply = await self._earlier({"events": [], "end": False, "previous": run_id})
        await self._take(reply)

    async def _take(self, reply: dict[str, Any]) -> None:
        if reply["end"] and not reply["events"]:  # it ended with no terminal event (cancelled)
            await self._end_from_outcome()
            return
        self._empty_polls = 0 if reply["events"] else self._empty_polls + 1
        self._batch = deque([await self._event(e) for e in reply["events"]])

    def _earlier_run(self, seq: int) -> str | None:
        """The earlier run of the chain known to hold the events after ``seq`` (or to lead
        to it), if any: the one before the run of the least base above ``seq``."""
        bases = [b for b in self._before if b > seq]
        return self._before[min(bases)] if bases else None

    async def _event(self, data: str) -> ev.Event:
        """An event as the workflow keeps it, its large strings read back (``_payloads``)."""
        whole = await self._reader.event(data, self._blob)
        return ev.event_from_json(whole, output_type=self._durable.agent.output_type)

    async def _blob(self, wants: list[list[Any]]) -> list[dict[str, Any]]:
        reading = self._reading

        async def send() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = await reading.query(
                _payloads.BLOB_QUERY, wants, result_type=list
            )
            return found

        if reading.run_id is None or self._client is None:  # the latest run: maybe open
            return await send()
        reply: list[dict[str, Any]] = await _closed.reads_of(self._client).ask(
            self.run_id, reading.run_id, _payloads.BLOB_QUERY, wants, send
        )
        return reply

    async def _end_from_outcome(self) -> None:
        """The end as the workflow's outcome tells it: its terminal event, unless the caller
        has seen it; a run that failed without one (cancelled) raises its error."""
        self._batch = deque(e for e in [await self._terminal()] if e.seq > self.last_seq)
        if not self._batch:
            self._ended = True

    async def _peek(self) -> dict[str, Any] | None:
        """The events after the last seen, by query (``None``: no worker answered now, as
        after a crash: the caller long-polls, which waits for one)."""
        from temporalio.client import WorkflowQueryFailedError

        try:
            reply: dict[str, Any] = await self._handle.query(
                EVENTS_QUERY, self.last_seq, result_type=dict
            )
        except (RPCError, WorkflowQueryFailedError):
            return None
        return await self._earlier(reply)

    async def _earlier(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The reply, or, when it says the events the caller wants are before its run's (the
        run continued as new), the reply of the earlier run of the chain that has them: read
        by its run id (a worker replays it; the process asks each question of a closed run
        once: ``_closed``), its references read from it too."""
        from temporalio.client import WorkflowQueryFailedError

        for _ in range(PREVIOUS_HOPS):
            previous = reply.get("previous")
            if previous is None:
                return reply
            if self._client is None:
                raise DurableRunFailed("a run that continued as new is read with its client")
            base = reply.get("base")
            if isinstance(base, int) and not isinstance(base, bool):
                self._before[base] = str(previous)
            handle: WorkflowHandle[Any, str] = self._client.get_workflow_handle(
                self.run_id, run_id=str(previous), result_type=str
            )
            reads = _closed.reads_of(self._client)
            after = self.last_seq

            async def send(
                handle: WorkflowHandle[Any, str] = handle, after: int = after
            ) -> dict[str, Any]:
                found: dict[str, Any] = await handle.query(EVENTS_QUERY, after, result_type=dict)
                return found

            for attempt in range(CLOSED_READS):  # replayed to answer: a busy worker is slow
                try:
                    reply = await reads.ask(self.run_id, str(previous), EVENTS_QUERY, after, send)
                    break
                except (RPCError, WorkflowQueryFailedError) as exc:
                    if attempt + 1 == CLOSED_READS:
                        raise DurableRunFailed(
                            f"the events after seq {self.last_seq} of run {self.run_id!r} are "
                            f"in its run {previous} (it continued as new since), which could "
                            f"not be read: {exc}"
                        ) from exc
                    await anyio.sleep(0.2 * 2**attempt)
            self._reading = handle
        raise DurableRunFailed(f"run {self.run_id!r} continued as new over {PREVIOUS_HOPS} times")

    async def _peek_closed(self) -> dict[str, Any] | None:
        """The events after the last seen, from a run that has closed: a worker answers by
        replaying its history, which a busy worker (a hundred callers reading at once) may
        not do in a query's time. Asked again before giving up, so a slow replay does not
        make the caller skip from the last event it saw to the terminal one."""
        for attempt in range(CLOSED_READS):
            reply = await self._peek()
            if reply is not None:
                return reply
            await anyio.sleep(0.2 * 2**attempt)
        return None

    async def _closed(self) -> bool:
        try:
            description = await self._handle.describe()
        except RPCError:
            return False
        return description.close_time is not None

    async def _ack(self) -> None:
        """Say how far this caller read. A signal sent as the run continues as new may reach
        the run that just closed, which answers "already completed" (``NOT_FOUND``): while
        the run goes on by its workflow id, it is sent again (a few times), and the next run
        of the chain takes it."""
        from temporalio.service import RPCStatusCode

        self._renew_at = anyio.current_time() + self._durable.stream_lease / 3
        for attempt in range(SIGNAL_ATTEMPTS):
            try:
                await self._handle.signal(ACK_SIGNAL, self.last_seq)
                return
            except RPCError as exc:
                if (
                    exc.status != RPCStatusCode.NOT_FOUND
                    or attempt + 1 == SIGNAL_ATTEMPTS
                    or await self._closed()
                ):
                    return  # the run ended already (it stops waiting after ``linger`` anyway)
            await anyio.sleep(0.05 * 2**attempt)

    async def _terminal(self) -> ev.Event:
        from temporalio.client import WorkflowFailureError

        try:
            data = await self._handle.result()
        except WorkflowFailureError as exc:
            cause = exc.cause
            kind = getattr(cause, "type", None) or type(cause).__name__  # ApplicationError's type
            if NONDETERMINISM in str(cause):  # a worker replayed it with another definition
                changed = mismatch(await self._start(), self._durable)
                if changed is not None:
                    raise DurableRunFailed(f"{changed} ({cause})", kind="AgentMismatch") from exc
            raise DurableRunFailed(str(cause), kind=kind) from exc
        self._reading = self._handle
        return await self._event(data)

    async def _start(self) -> Any:
        """The run's start, as its history's first event recorded it."""
        async for event in self._handle.fetch_history_events(page_size=1):
            return start_of(event)
        return None

    async def result(self) -> RunResult[OutputT]:
        """The run's result (waiting for the end): what ``Agent.run`` returns in-process. A
        run that failed raises its error (as its class when it is agentloop's, else
        ``DurableRunFailed``). A caller that has been streaming reads the rest of the events
        first (so the run need not wait for it to)."""
        if self._streamed and not self._ended:
            async for _ in self:
                pass
        terminal = self._terminal_event or await self._terminal()
        if isinstance(terminal, ev.RunFinished):
            result: RunResult[OutputT] = terminal.result
            return result
        if isinstance(terminal, ev.RunFailed):
            raise _error_of(terminal.error.kind, terminal.error.message)
        raise DurableRunFailed(f"the run ended with {terminal.type}")

    async def waiting(self) -> RunResult[OutputT] | None:
        """The run's result so far while it waits on decisions (``result.pending`` names the
        calls), else ``None`` (it runs, or has ended). It asks the workflow; it never waits."""
        data = await self._handle.query(
            WAITING_QUERY,
            result_type=str | None,  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]  # the SDK converts to a union too
        )
        if data is None:
            return None
        self._reading = self._handle
        event = await self._event(data)
        if not isinstance(event, ev.RunWaiting):  # a fault of ours if so
            raise DurableRunFailed(f"the run's waiting state is a {event.type} event")
        result: RunResult[OutputT] = event.result
        return result

    async def decide(self, decisions: Mapping[str, Decision]) -> None:
        """Decide the calls the run waits on (``RunWaiting``'s ``result.pending``), one
        decision per call by its ``id``: the run goes on in its workflow, and a caller
        streaming it sees the rest of its events. Decisions the run cannot take (an unknown
        or missing call, the wrong kind, an edit that fails the tool's schema, a run not
        waiting) raise ``UserError`` and are not recorded: the run still waits.

        Args:
            decisions: ``{call.id: Approve() | Deny(reason) | Edit(arguments) |
                ExternalResult(output=...)}``.
        """
        from temporalio.client import WorkflowUpdateFailedError
        from temporalio.exceptions import ApplicationError

        if not isinstance(as_given(decisions), Mapping):
            raise UserError("decisions must be a mapping of pending call ids to decisions")
        for key, decision in decisions.items():
            if not isinstance(as_given(decision), Approve | Deny | Edit | ExternalResult):
                raise DecisionError(
                    f"the decision for {key!r} must be Approve(), Deny(reason), "
                    f"Edit(arguments) or ExternalResult(...), not {decision!r}"
                )
        data = _codec.encode_decisions(decisions)
        size = len(json.dumps(data, separators=(",", ":"), default=str).encode())
        if size > MAX_DECISION_BYTES:
            raise UserError(
                f"decisions must fit in {MAX_DECISION_BYTES // 1024} KiB to be recorded within "
                f"Temporal's payload limit; these are {size / 2**20:.2f} MB (an Edit's arguments "
                "or an ExternalResult's output): pass large values by reference"
            )
        self._empty_polls = 0  # the run goes on now: this caller polls at the busy pace
        for retry in (True, False):
            try:
                await self._decide_update(data)
                return
            except WorkflowUpdateFailedError as exc:
                cause = exc.cause
                if not (isinstance(cause, ApplicationError) and cause.type == "DecisionError"):
                    raise DurableRunFailed(f"deciding failed: {cause}") from exc
                # A worker that has just taken the run over (its last one killed) may check
                # the update before it has replayed up to the wait, both in one activation;
                # it has caught up once it answered, so a run that waits is asked once more.
                if not (retry and cause.message.startswith(NOT_WAITING) and await self.waiting()):
                    raise DecisionError(cause.message) from None
            except RPCError as exc:
                if await self._closed():
                    raise DecisionError(f"{NOT_WAITING}: it has ended") from None
                raise DurableRunFailed(f"deciding failed: {exc}") from exc

    async def _decide_update(self, data: dict[str, Any]) -> None:
        """The ``decide`` update, sent again (a bounded number of times) when the server
        rejects it unprocessed, as it may while many callers query the run, or the run was
        continuing as new (the next run of the chain takes it). A rejected update was not
        recorded, and each send has the same update id (Temporal takes one once), so sending
        it again cannot decide twice."""
        from temporalio.client import WorkflowUpdateFailedError

        update_id = f"agentloop-decide-{new_id()}"
        for attempt in range(DECIDE_ATTEMPTS):
            last = attempt + 1 == DECIDE_ATTEMPTS
            try:
                await self._handle.execute_update(DECIDE_UPDATE, data, id=update_id)
                return
            except WorkflowUpdateFailedError as exc:
                cause = exc.cause
                again = "UnprocessedUpdate" in str(cause) or (
                    getattr(cause, "message", None) == CONTINUING
                )
                if last or not again:
                    raise
            except RPCError:
                if last or await self._closed():  # a run that ended: ``decide`` says so
                    raise
            await anyio.sleep(0.1 * 2**attempt)

    async def cancel(self) -> None:
        """Ask Temporal to cancel the run (its activities are cancelled too)."""
        await self._handle.cancel()

    def __repr__(self) -> str:
        return f"DurableRun({self.run_id!r}, last_seq={self.last_seq})"


def _error_of(kind: str, message: str) -> Exception:
    cls = getattr(_errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, AgentLoopError):
        try:
            return cls(message)
        except TypeError:
            pass
    return DurableRunFailed(message, kind=kind)


def _fingerprint(durable: TemporalAgent[Any]) -> str:
    """What a worker and a caller must agree on: the agent's name, its tools' names and
    schemas, its instructions, its middleware's names and its ``version``, and the same of each
    sub-agent. A run started with one definition never runs on a worker with another."""
    agents = [[path, *_definition(durable, path)] for path in durable.agent_paths()]
    text = json.dumps([durable.name, durable.version, agents], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _definition(durable: TemporalAgent[Any], path: str) -> list[Any]:
    agent = durable.agent_at(path)
    middleware = [*agent.model_middleware, *agent.tool_middleware]
    definition: list[Any] = [
        sorted(_specs(durable.tools(path))),
        agent.instructions,
        [_name(m) for m in middleware],
    ]
    if agent.handoff_targets:  # (an agent without has the fingerprint it always had)
        definition.append([[h.target_name, h.history] for h in agent.handoff_targets])
    return definition


def _name(thing: object) -> str:
    named = thing if hasattr(thing, "__qualname__") else type(thing)
    return f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', '?')}"


# How Temporal's core names the failure of a history the worker's code did not replay.
NONDETERMINISM = "Nondeterminism error"


def start_of(event: HistoryEvent) -> Any:
    """The workflow's start argument from its history's first event (``None`` if not JSON)."""
    payloads = event.workflow_execution_started_event_attributes.input.payloads
    try:
        return json.loads(payloads[0].data) if payloads else None
    except ValueError:
        return None


def mismatch(start: Any, durable: TemporalAgent[Any]) -> str | None:
    """Why a run started with ``start`` cannot go on with ``durable``'s definition (``None``:
    it can): the message an ``AgentMismatch`` carries."""
    started = start.get("fingerprint") if isinstance(start, dict) else None
    if isinstance(started, str):
        started = started.removesuffix(CONTINUED)
    if started is None or started == durable.fingerprint:
        return None
    return (
        f"the run was started with agent {durable.name!r} at fingerprint {started}, and this "
        f"agent's is {durable.fingerprint}: its tools, their schemas, its instructions, its "
        "middleware or its version changed. Serve each version of an agent under its own name "
        "or task queue, and let runs in flight finish on the old one"
    )


def _specs(tools: list[Tool]) -> list[tuple[str, str, str]]:
    return [
        (spec.name, spec.description, json.dumps(spec.parameters, sort_keys=True, default=str))
        for tool in tools
        for spec in tool.specs()
    ]


MAX_SUBAGENT_DEPTH = 8


def _agents_of(agent: Agent[Any, Any]) -> dict[str, Agent[Any, Any]]:
    """The agent (path ``""``), its sub-agents by path, and the agents each of those reaches
    through handoffs (at ``<path>@<name>``), each checked as durable runs need: tools every
    worker knows, and no live approver."""
    found: dict[str, Agent[Any, Any]] = {}

    def visit(path: str, current: Agent[Any, Any], chain: tuple[int, ...], entry: bool) -> None:
        if current.approver is not None:
            raise UserError(
                "a durable run cannot ask a live approver: it would run inside the workflow, "
                "where a person's answer is not replayable; drop approver= and decide the "
                "waiting calls with DurableRun.decide (a UI can call it at once)"
                + (f" (the sub-agent at {path!r} has one)" if path else "")
            )
        for toolset in current.toolsets:
            if not isinstance(toolset, GoalToolSet):
                raise UserError(
                    f"{toolset!r}: a durable run's tools must be known to every worker; of the "
                    "toolsets only GoalToolSet is supported (list the tools instead)"
                )
        found[path] = current
        if entry:  # a run starts under it: the agents it may hand over to, by name
            reached = reachable(current)
            for each in reached.values():
                for handoff in each.handoff_targets:
                    target = handoff.agent
                    if not isinstance(target, str) and reached[target.name] is not target:
                        raise UserError(
                            f"two agents named {target.name!r} are reached through handoffs"
                            + (f" from the sub-agent at {path!r}" if path else "")
                            + ": a durable run finds the agent handed over to by its name"
                        )
            for name, target in reached.items():
                if target is not current:
                    visit(f"{path}@{name}", cast("Agent[Any, Any]", target), chain, False)
        for tool in current.static_tools:
            for activity in tool.activities.values():
                child = getattr(activity.fn, SUBAGENT, None)
                if child is None:
                    continue
                if id(child) in chain or len(chain) >= MAX_SUBAGENT_DEPTH:
                    raise UserError(
                        f"tool {tool.name!r} of the agent at {path!r}: sub-agents nest in a "
                        f"cycle or deeper than {MAX_SUBAGENT_DEPTH}, which a durable run cannot "
                        "address"
                    )
                visit(
                    f"{path}/{tool.name}" if path else tool.name, child, (*chain, id(child)), True
                )

    visit("", agent, (id(agent),), True)
    return found


# Temporal refuses a payload over its blob size limit (2 MiB by default, ``limit.blobSize.error``;
# the dev server's too): the run's start payload must fit, with room for the converter's framing.
MAX_START_BYTES = 2 * 1024 * 1024 - 16 * 1024
# A decision is recorded in the update that carries it, then again in the events and the tool
# activity's input it leads to: it gets a quarter of the limit.
MAX_DECISION_BYTES = 512 * 1024


def _check_start(start: dict[str, Any], media: bool) -> None:
    """Refuse, before anything starts, a start payload that is not JSON or would not fit in
    Temporal's payload limit (which would fail the start, or a later history event)."""
    try:
        encoded = json.dumps(start, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise UserError(f"a durable run's input, state and variables must be JSON: {exc}") from None
    size = len(encoded.encode())
    if size > MAX_START_BYTES:
        advice = (
            "give large images and files by URL (ImagePart(url=...), FilePart(url=...)), "
            "which the provider fetches"
            if media
            else "pass less state or fewer variables"
        )
        raise UserError(
            f"a durable run's start payload must fit in Temporal's 2 MB payload limit "
            f"(at most {MAX_START_BYTES / 2**20:.2f} MB here, images and files as base64); "
            f"this one is {size / 2**20:.2f} MB: {advice}"
        )
    if _carry.refer_start(_payloads.Blobs(), start) is None:
        raise UserError(
            "a durable run's start must be able to continue as new, its long strings by "
            f"reference in at most {_carry.MAX_START_BY_REFERENCE // 1024} KiB; this one is "
            f"{size / 2**20:.2f} MB of many small values (input, state or variables): pass "
            "fewer, or hold them in a few long strings"
        )
