"""``TemporalHub``: the web app's runs as durable workflows, found again by any replica.

A replica keeps nothing a caller needs. A run's id is its workflow's id (after a hash of its
owner's id, by which Temporal counts the owner's runs going on); its owner and session are in
the workflow's memo; its events are the workflow's (``DurableRun``: the history replayed
on a worker), so a stream resumed with ``Last-Event-ID`` on any replica reads on exactly after
that ``seq``. A session's run is the last one its store's history left unfinished (the store
the replicas and the workers share). The owner is what the auth says: an HMAC of the token
keyed with the server's secret, the same on every replica that shares the secret.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Final, Self, final

import anyio
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from agentloop import (
    Agent,
    Decision,
    Event,
    NothingToResume,
    RunFailed,
    RunFinished,
    RunWaiting,
    SessionBusy,
    SessionNotFound,
    UserError,
)
from agentloop.sessions import SessionStore
from agentloop.temporal import DurableRunFailed, TemporalAgent, connect
from agentloop.temporal._durable import EVENTS_QUERY, WAITING_QUERY
from agentloop.web import TooMany, WebLimits
from agentloop.web._hub import is_owner, owned_session, plausible_id, session_for
from agentloop.web._secret import server_secret

OWNER_MEMO = "agentloop.owner"
SESSION_MEMO = "agentloop.session"
ABANDON_WAIT: Final = 10.0  # seconds a waiting run's workflow has to close for a new message
_ENDS = (RunFinished, RunFailed, RunWaiting)  # an invocation's terminal events


def durable_agent(
    agent: Agent[Any, Any] | TemporalAgent[Any], *, task_queue: str | None = None
) -> TemporalAgent[Any]:
    """``agent`` as a ``TemporalAgent`` on ``task_queue`` (a ``TemporalAgent`` keeps its own
    options; a different ``task_queue`` is a ``UserError``).

    Args:
        agent: An agent, or one made durable already.
        task_queue: The task queue (default: the ``TemporalAgent``'s, else ``agentloop``).
    """
    if isinstance(agent, TemporalAgent):
        if task_queue is not None and task_queue != agent.task_queue:
            raise UserError(
                f"the agent's TemporalAgent runs on task queue {agent.task_queue!r}, not "
                f"{task_queue!r}: give one"
            )
        return agent
    return TemporalAgent(agent, task_queue=task_queue or "agentloop")


@final
class TemporalHub:
    """A ``RunBackend`` whose runs are durable workflows on Temporal, served by
    ``worker``s anywhere (``agentloop worker``): any replica starts, streams, resumes,
    decides and stops any run its caller owns. Use it as an async context manager (the web
    app does, in its lifespan): entering connects to Temporal.

    Args:
        agent: The agent (made a ``TemporalAgent`` on ``task_queue``), or a ``TemporalAgent``.
        temporal: The Temporal server's ``host:port``, or a connected client.
        namespace: The Temporal namespace.
        task_queue: The task queue the workers serve.
        store: The session store the workers use too (default: the agent's ``store``).
        limits: The server's bounds (the stream bound is this replica's).
        secret: The server's secret, which keys owner ids (``agentloop.web.create_app``): the
            same on every replica, given or kept in the store they share.
    """

    def __init__(
        self,
        agent: Agent[Any, Any] | TemporalAgent[Any],
        *,
        temporal: str | Client,
        namespace: str = "default",
        task_queue: str | None = None,
        store: SessionStore | None = None,
        limits: WebLimits | None = None,
        secret: bytes | str | None = None,
    ) -> None:
        self.durable = durable_agent(agent, task_queue=task_queue)
        found = store or self.durable.agent.store
        if found is None:
            raise UserError(
                "a web front on Temporal needs the session store its workers use: "
                "Agent(store=...) or store= (SQLiteStore on one machine, PostgresStore across "
                "machines), the same for every replica and worker"
            )
        self.store: SessionStore = found
        self.limits = limits or WebLimits()
        self._temporal = temporal
        self._namespace = namespace
        self._client = temporal if isinstance(temporal, Client) else None
        self._streams: dict[str, int] = defaultdict(int)
        self._given_secret = secret
        self._secret: bytes | None = None

    async def __aenter__(self) -> Self:
        if self._client is None:
            self._client = await connect(str(self._temporal), namespace=self._namespace)
        self._secret = await server_secret(self.store, self._given_secret)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return None  # the runs go on, on the workers

    @property
    def secret(self) -> bytes:
        """The server's secret (known once the hub is entered), to key owner ids with."""
        if self._secret is None:
            raise UserError("the hub's secret is known once it is entered (the app's lifespan)")
        return self._secret

    @property
    def client(self) -> Client:
        """The Temporal client (once entered)."""
        if self._client is None:
            raise UserError("use the hub as `async with TemporalHub(...) as hub:`")
        return self._client

    # -- starting ---------------------------------------------------------------------------

    async def start(self, owner: str, input: str, *, session: str | None = None) -> DurableLog:
        """Start a durable run on ``session`` (a new session when ``None``): errors as for
        ``RunHub.start``; ``SessionBusy`` while the session's last run goes on. A run that
        waits on decisions is ended (``abandoned``, its calls never run), as in process.

        Args:
            owner: Who asks (what the auth said).
            input: The user's message.
            session: The owner's session to continue; ``None`` makes a new one.
        """
        session = await session_for(self.store, self.limits, owner, input, session)
        last = await self._unfinished(session)
        if last is not None and await self._running(handle := self._handle(last)):
            if await self._waiting(handle) is None:
                raise SessionBusy(f"a run holds session {session!r}")
            await self._abandon(handle)
        prefix = f"{self.durable.name}-web-{hashlib.sha256(owner.encode()).hexdigest()[:16]}-"
        await self._within_bound(prefix)
        run_id = prefix + secrets.token_hex(16)
        await self.durable.start(
            self.client,
            input,
            run_id=run_id,
            session=session,
            memo={OWNER_MEMO: str(owner), SESSION_MEMO: session},
        )
        return DurableLog(self, run_id, session)

    async def resume(
        self, owner: str, session: str, *, decisions: Mapping[str, Decision] | None = None
    ) -> DurableLog:
        """Decide the calls the session's run waits on: it goes on in its workflow, and the
        returned log streams on from its wait. ``NothingToResume`` if no run of the session
        waits, ``SessionBusy`` if it runs; ``DecisionError`` for decisions it cannot take.

        Args:
            owner: Who asks.
            session: The owner's session.
            decisions: The decisions on its pending calls, by ``PendingCall.id``.
        """
        await owned_session(self.store, owner, session, history_limit=0)
        last = await self._unfinished(session)
        if last is None:
            raise NothingToResume(f"session {session!r} has no run waiting on decisions")
        handle = self._handle(last)
        waiting = await self._waiting(handle)
        if waiting is None:
            if await self._running(handle):
                raise SessionBusy(f"the run of session {session!r} is going, not waiting")
            raise NothingToResume(f"session {session!r} has no run waiting on decisions")
        await self.durable.attach(self.client, last).decide(decisions or {})
        return DurableLog(self, last, session, begins_after=waiting)

    async def history(self, owner: str, session: str) -> list[dict[str, Any]]:
        """The session's records, oldest first, as JSON values.

        Args:
            owner: Who asks.
            session: The owner's session.
        """
        found = await owned_session(self.store, owner, session)
        return [record.model_dump(mode="json") for record in found.history]

    # -- reading ----------------------------------------------------------------------------

    async def find(self, owner: str, run: str) -> DurableLog:
        """The owner's run, by its workflow's memo; else ``SessionNotFound``.

        Args:
            owner: Who asks.
            run: The run's id (its workflow's).
        """
        memo = await self._memo(run) if plausible_id(run) else None
        stored, session = (memo or {}).get(OWNER_MEMO), (memo or {}).get(SESSION_MEMO)
        if not isinstance(stored, str) or not isinstance(session, str):
            raise SessionNotFound(f"no run {run!r}")
        if not is_owner(owner, stored):
            raise SessionNotFound(f"no run {run!r}")  # another's is as good as none
        return DurableLog(self, run, session)

    async def find_active(self, owner: str, session: str) -> DurableLog | None:
        """The run going on in the owner's session, from the start of its current
        invocation, if any (not one that waits on decisions).

        Args:
            owner: Who asks.
            session: The session.
        """
        await owned_session(self.store, owner, session, history_limit=0)
        last = await self._unfinished(session)
        if last is None:
            return None
        handle = self._handle(last)
        if not await self._running(handle) or await self._waiting(handle) is not None:
            return None
        return DurableLog(self, last, session, begins_after=await self._resumed_after(handle))

    async def stop(self, owner: str, run: str) -> None:
        """Cancel the owner's run (its workflow, and so its activities).

        Args:
            owner: Who asks.
            run: The run's id.
        """
        await self.find(owner, run)
        await self.client.get_workflow_handle(run).cancel()

    def open_stream(self, owner: str) -> None:
        """Count an event stream the owner opens on this replica; ``TooMany`` at the bound.

        Args:
            owner: Who opens it.
        """
        if self._streams[owner] >= self.limits.max_streams_per_owner:
            raise TooMany(f"at most {self.limits.max_streams_per_owner} open streams per caller")
        self._streams[owner] += 1

    def close_stream(self, owner: str) -> None:
        """Count an event stream the owner closed.

        Args:
            owner: Who had it open.
        """
        self._streams[owner] -= 1
        if not self._streams[owner]:
            del self._streams[owner]

    # -- Temporal ---------------------------------------------------------------------------

    async def _within_bound(self, prefix: str) -> None:
        """``TooMany`` when the owner's runs going on (their ids start with ``prefix``), on
        any replica, reach ``max_runs_per_owner``: counted by Temporal's visibility, which
        may lag a run's start by a moment, and counts a run that waits on decisions."""
        query = f'WorkflowId STARTS_WITH "{prefix}" AND ExecutionStatus = "Running"'
        going = await self.client.count_workflows(query)
        if going.count >= self.limits.max_runs_per_owner:
            raise TooMany(f"at most {self.limits.max_runs_per_owner} runs at once per caller")

    async def _abandon(self, handle: WorkflowHandle[Any, Any]) -> None:
        """End the run that waits on decisions, as a new message does in process: its workflow
        is cancelled (its calls never run), and the new run records it ``abandoned`` when it
        loads the session. Waits (``ABANDON_WAIT`` at most) for the workflow to close, so that
        it no longer holds the session; ``SessionBusy`` if it will not."""
        await handle.cancel()
        with anyio.move_on_after(ABANDON_WAIT):
            with contextlib.suppress(WorkflowFailureError):  # it ends cancelled, as asked
                await handle.result()
            return
        raise SessionBusy(f"the run {handle.id!r} that waits on decisions would not end")

    def _handle(self, run: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(run)

    async def _unfinished(self, session: str) -> str | None:
        """The id of the session's last run that did not finish (its workflow's)."""
        found = await self.durable.agent.unfinished_run(session=session, store=self.store)
        return None if found is None else found.run_id

    async def _memo(self, run: str) -> Mapping[str, Any] | None:
        try:
            description = await self._handle(run).describe()
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return None
            raise
        return await description.memo()

    async def _running(self, handle: WorkflowHandle[Any, Any]) -> bool:
        try:
            description = await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return description.status == WorkflowExecutionStatus.RUNNING

    async def _waiting(self, handle: WorkflowHandle[Any, Any]) -> int | None:
        """The seq of the ``RunWaiting`` the run waits at, or ``None`` (it does not wait)."""
        try:
            data = await handle.query(WAITING_QUERY, result_type=str | None)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]  # the SDK converts to a union too
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        if data is None:
            return None
        seq: int = json.loads(data)["seq"]
        return seq

    async def _resumed_after(self, handle: WorkflowHandle[Any, Any]) -> int | None:
        """The seq of the run's last wait so far (its current invocation follows), if any."""
        after, last_wait = 0, None
        while True:
            reply: dict[str, Any] = await handle.query(EVENTS_QUERY, after, result_type=dict)
            for data in reply["events"]:
                # Its seq and type only: a large event's strings stay by reference here.
                event = json.loads(data)
                after = event["seq"]
                if event["type"] == "run_waiting" and event.get("parent_run_id") is None:
                    last_wait = after
            if not reply["events"] or reply["end"]:
                return last_wait


@final
class DurableLog:
    """One invocation of a durable run, as a stream reads it (an ``EventLog``): its events
    come from the workflow, wherever it runs, until the invocation's terminal event.

    Args:
        hub: The hub it belongs to.
        id: The run's id (its workflow's).
        session: Its session.
        begins_after: The seq its stream starts after (``None``: from the run's start).
    """

    def __init__(
        self, hub: TemporalHub, id: str, session: str, *, begins_after: int | None = None
    ) -> None:
        self._hub = hub
        self.id = id
        self.session = session
        self.begins_after = begins_after

    def replay(self, after: int | None) -> AsyncIterator[tuple[Event, bool]]:
        """The run's events (those up to ``after`` marked as seen), until the terminal event
        of the invocation that follows ``after``.

        Args:
            after: The seq the reader last saw (``None``: none).
        """
        run = self._hub.durable.attach(self._hub.client, self.id)

        async def events() -> AsyncIterator[tuple[Event, bool]]:
            try:
                async for event in run:
                    new = after is None or event.seq > after
                    yield event, new
                    if new and event.parent_run_id is None and isinstance(event, _ENDS):
                        return
            except DurableRunFailed:
                return  # cancelled, or failed without a terminal event: the stream ends

        return events()

    def __repr__(self) -> str:
        return f"DurableLog({self.id!r}, session={self.session!r})"
