"""Runs that outlive their HTTP connection: each runs in the hub's task group and appends its
events to a bounded log, so a client that reconnects reads on from the ``seq`` it last saw and
the prompt never runs twice: events have a log wherever they must outlive a connection.

``RunBackend`` is what the web app asks of a hub: ``RunHub`` runs in this process; a hub whose
runs are durable workflows (``agentloop.durable_web``) keeps nothing in the replica.
"""

from __future__ import annotations

import bisect
import secrets
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Protocol, Self, final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from agentloop import (
    Agent,
    AgentLoopError,
    Decision,
    Event,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWaiting,
    SessionBusy,
    SessionNotFound,
    UserError,
)
from agentloop.sessions import InMemoryStore, Session, SessionStore

from ._secret import server_secret

TERMINAL = (RunFinished, RunFailed, RunWaiting)
_BATCH = 256  # events a follower takes at one wake-up


@dataclass(frozen=True, kw_only=True, slots=True)
class WebLimits:
    """What one server allows, so that no caller can exhaust it.

    Args:
        max_body_bytes: The largest request body read; a larger one is 413.
        max_input_chars: The longest run input; a longer one is 413.
        max_runs_per_owner: Runs one owner may have going at once; one more is 429.
        max_streams_per_owner: Event streams one owner may hold open at once; one more is 429.
        max_events_per_run: Events a run's log keeps; older ones are dropped, and a client
            resuming from before them gets 410.
        finished_runs_kept: Ended runs whose logs stay readable (oldest forgotten first).
        max_json_depth: The deepest nesting of a JSON body; deeper is 400.
        head_timeout: Seconds a connection may take to send a request head (also between
            requests on a kept-alive one); then it is closed (``serve`` only).
        max_pending_connections: Connections that have not sent a request head yet; one more
            closes the longest waiting (``serve`` only; at most a quarter of the open-file limit).
    """

    max_body_bytes: int = 64 * 1024
    max_input_chars: int = 32_000
    max_runs_per_owner: int = 8
    max_streams_per_owner: int = 32
    max_events_per_run: int = 20_000
    finished_runs_kept: int = 1_000
    max_json_depth: int = 64
    head_timeout: float = 10.0
    max_pending_connections: int = 128

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "max_input_chars",
            "max_runs_per_owner",
            "max_streams_per_owner",
            "max_events_per_run",
            "finished_runs_kept",
            "max_json_depth",
            "max_pending_connections",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"WebLimits.{name} must be a positive integer, not {value!r}")
        if not _positive_seconds(self.head_timeout):
            raise UserError(
                "WebLimits.head_timeout must be a positive number of seconds, "
                f"not {self.head_timeout!r}"
            )


def _positive_seconds(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 < value < float("inf")


class TooMany(AgentLoopError):
    """An owner is at one of its ``WebLimits`` (HTTP 429)."""


class LogTrimmed(AgentLoopError):
    """The events after the client's ``Last-Event-ID`` are no longer kept (HTTP 410)."""


class EventLog(Protocol):
    """One invocation's events as a stream reads them (``sse_response``)."""

    @property
    def id(self) -> str:
        """The invocation's id (what the HTTP API calls the run)."""
        ...

    @property
    def session(self) -> str:
        """The session it runs in."""
        ...

    @property
    def begins_after(self) -> int | None:
        """The seq a stream of it starts after (``None``: its first event is its own)."""
        ...

    def replay(self, after: int | None) -> AsyncIterator[tuple[Event, bool]]:
        """The invocation's events, each with whether it comes after ``after`` (the ones before
        rebuild an encoder's state), until it ends; ``LogTrimmed`` at once if those are gone.

        Args:
            after: The seq the reader last saw (``None``: none).
        """
        ...


class RunBackend(Protocol):
    """What the web app asks of a hub: start, resume and find runs, each held to its owner.
    ``RunHub`` runs them in this process; any such hub serves ``create_app(hub=...)``."""

    @property
    def limits(self) -> WebLimits:
        """The server's bounds."""
        ...

    @property
    def store(self) -> SessionStore:
        """Where sessions live."""
        ...

    @property
    def secret(self) -> bytes:
        """The server's secret, which keys owner ids (known once the hub is entered)."""
        ...

    async def start(self, owner: str, input: str, *, session: str | None = None) -> EventLog:
        """Start a run (``RunHub.start``).

        Args:
            owner: The caller's owner id.
            input: The user's message.
            session: The session to go on; a new one when None.
        """
        ...

    async def resume(
        self, owner: str, session: str, *, decisions: Mapping[str, Decision] | None = None
    ) -> EventLog:
        """Resume the session's waiting run (``RunHub.resume``).

        Args:
            owner: The caller's owner id.
            session: The waiting session.
            decisions: A decision per waiting call id.
        """
        ...

    async def history(self, owner: str, session: str) -> list[dict[str, Any]]:
        """The session's records (``RunHub.history``).

        Args:
            owner: The caller's owner id.
            session: The session.
        """
        ...

    async def find(self, owner: str, run: str) -> EventLog:
        """The owner's run (``RunHub.log``); else ``SessionNotFound``.

        Args:
            owner: The caller's owner id.
            run: The run's id.
        """
        ...

    async def find_active(self, owner: str, session: str) -> EventLog | None:
        """The run going on in the owner's session (``RunHub.active``).

        Args:
            owner: The caller's owner id.
            session: The session.
        """
        ...

    async def stop(self, owner: str, run: str) -> None:
        """Stop the owner's run (``RunHub.cancel``).

        Args:
            owner: The caller's owner id.
            run: The run's id.
        """
        ...

    def open_stream(self, owner: str) -> None:
        """Count a stream the owner opens; ``TooMany`` at the bound.

        Args:
            owner: The caller's owner id.
        """
        ...

    def close_stream(self, owner: str) -> None:
        """Count a stream the owner closed.

        Args:
            owner: The caller's owner id.
        """
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...


@final
class RunLog:
    """One invocation's events, in order, readable from any ``seq`` while it runs and after.

    Args:
        id: The invocation's id (what the HTTP API calls the run).
        session: The session it runs in.
        owner: Who started it.
        max_events: The events kept; older ones are dropped.
    """

    def __init__(self, *, id: str, session: str, owner: str, max_events: int) -> None:
        self.id = id
        self.session = session
        self.owner = owner
        self._max = max_events
        self._events: list[Event] = []
        self._seqs: list[int] = []
        self._dropped = 0
        self._changed: anyio.Event | None = None  # made when a reader waits: most appends wake none
        self._ended = anyio.Event()
        self.done = False
        self.cancel_scope = anyio.CancelScope()
        self.begins_after: int | None = None  # its first event is its own

    def append(self, event: Event) -> None:
        """Add the run's next event, dropping the oldest beyond the bound.

        Args:
            event: The event.
        """
        self._events.append(event)
        self._seqs.append(event.seq)
        if len(self._events) > self._max:
            cut = len(self._events) - self._max
            del self._events[:cut], self._seqs[:cut]
            self._dropped += cut
        self._wake()

    def close(self) -> None:
        self.done = True
        self._ended.set()
        self._wake()

    async def wait_done(self) -> None:
        """Wait until the run has ended (its last event is in the log)."""
        await self._ended.wait()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def changed(self) -> None:
        """Wait for the log's next change (an event appended, or the run's end)."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def events(self) -> list[Event]:
        """The events kept so far (for encoders that rebuild their state)."""
        return list(self._events)

    def start_index(self, after: int | None) -> int:
        """Where a reader that last saw ``after`` goes on; ``LogTrimmed`` if that is gone.

        Args:
            after: The seq the reader last saw (``None``: from the start).
        """
        if after is None:
            if self._dropped:
                raise LogTrimmed(f"the first {self._dropped} events of this run are not kept")
            return 0
        if self._dropped and (not self._seqs or after < self._seqs[0] - 1):
            raise LogTrimmed(f"the events after {after} are no longer kept")
        return bisect.bisect_right(self._seqs, after)

    def replay(self, after: int | None) -> AsyncIterator[tuple[Event, bool]]:
        """The events kept (the ones up to ``after`` marked as seen), then the new ones until
        the run ends; ``LogTrimmed`` now if the events after ``after`` are gone.

        Args:
            after: The seq the reader last saw (``None``: from the start).
        """
        start = self.start_index(after)
        seen = self._events[:start]

        async def events() -> AsyncIterator[tuple[Event, bool]]:
            for event in seen:
                yield event, False
            async for _, batch in self._follow_batches(start):
                for event in batch:
                    yield event, True

        return events()

    async def follow(self, index: int) -> AsyncIterator[tuple[int, Event]]:
        """The events from position ``index`` on, waiting for new ones until the run ends.

        Args:
            index: Where to start (``start_index``).
        """
        async for absolute, batch in self._follow_batches(index):
            for offset, event in enumerate(batch):
                yield absolute + offset - self._dropped, event

    async def _follow_batches(self, index: int) -> AsyncIterator[tuple[int, list[Event]]]:
        """``follow``, the events there at each wake-up together (at most ``_BATCH``), each
        batch with the position of its first event counted from the run's first event."""
        absolute = index + self._dropped
        while True:
            batch = self.batch(absolute)
            if batch:
                yield absolute, batch
                absolute += len(batch)
                continue
            if self.done:
                return
            await self.changed()

    def position(self, index: int) -> int:
        """Index ``index`` of the events kept (``start_index``) counted from the run's first
        event, as ``batch`` takes it: trimming the log does not move it.

        Args:
            index: An index into the events kept.
        """
        return index + self._dropped

    def batch(self, position: int) -> list[Event]:
        """The events kept from ``position`` on, at most ``_BATCH``, without waiting: none
        when the reader is at the end; ``LogTrimmed`` if it fell behind the log's bound.

        Args:
            position: Where the reader is, counted from the run's first event.
        """
        local = position - self._dropped
        if local < 0:
            raise LogTrimmed("the reader fell behind the run's event log bound")
        return self._events[local : local + _BATCH]


@final
class RunHub:
    """Starts and resumes an agent's runs for HTTP callers, keeps their event logs, and holds
    each caller to its own sessions and to the ``WebLimits``. Use it as an async context
    manager (the web app does, in its lifespan): leaving it cancels the runs still going.

    Args:
        agent: The agent that serves every run.
        store: Where sessions live (default: the agent's store, else a new ``InMemoryStore``,
            whose lease keeper runs while the hub is entered: ``InMemoryStore.keeping_leases``).
        limits: The server's bounds.
        secret: The server's secret, which keys owner ids (default: ``AGENTLOOP_SECRET``, else
            one made once and kept in ``store``, shared by every server on it).
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        store: SessionStore | None = None,
        limits: WebLimits | None = None,
        secret: bytes | str | None = None,
    ) -> None:
        self.agent = agent
        # A store the hub made is its own: while the hub is entered, one lease keeper renews
        # every run's lease, not a task per run (a store it was given is its owner's to enter).
        self._own_store: InMemoryStore | None = None
        self._keeping: AbstractAsyncContextManager[object] | None = None
        found = store or agent.store
        if found is None:
            found = self._own_store = InMemoryStore()
        self.store: SessionStore = found
        self.limits = limits or WebLimits()
        self._given_secret = secret
        self._secret: bytes | None = None
        self._logs: dict[str, RunLog] = {}
        self._ended: list[str] = []
        self._running: dict[str, int] = defaultdict(int)
        self._streams: dict[str, int] = defaultdict(int)
        self._busy: set[str] = set()
        self._tg: TaskGroup | None = None

    @property
    def secret(self) -> bytes:
        """The server's secret (known once the hub is entered), to key owner ids with."""
        if self._secret is None:
            raise UserError("the hub's secret is known once it is entered (the app's lifespan)")
        return self._secret

    async def __aenter__(self) -> Self:
        self._secret = await server_secret(self.store, self._given_secret)
        if self._own_store is not None:  # around the runs' task group
            self._keeping = self._own_store.keeping_leases()
            await self._keeping.__aenter__()
        self._tg = anyio.create_task_group()
        try:
            await self._tg.__aenter__()
        except BaseException:
            keeping, self._keeping = self._keeping, None
            if keeping is not None:
                await keeping.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._tg is None:
            raise RuntimeError("RunHub left without being entered")
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            keeping, self._keeping = self._keeping, None
            if keeping is not None:
                await keeping.__aexit__(None, None, None)

    # -- starting ---------------------------------------------------------------------------

    async def start(self, owner: str, input: str, *, session: str | None = None) -> RunLog:
        """Start a run on ``session`` (a new session when ``None``) once its first event is in
        the log. ``SessionBusy`` if a run holds the session, ``SessionNotFound`` if it is not
        the owner's, ``TooMany`` at the owner's run bound, ``UserError`` for a bad input.

        Args:
            owner: Who asks (what the auth said).
            input: The user's message.
            session: The owner's session to continue; ``None`` makes a new one.
        """
        session = await session_for(self.store, self.limits, owner, input, session)
        return await self._launch(owner, session, "run", input=input)

    async def resume(
        self, owner: str, session: str, *, decisions: Mapping[str, Decision] | None = None
    ) -> RunLog:
        """Resume the session's waiting or unfinished run (with ``decisions`` for its pending
        calls); errors as for ``start``, and ``NothingToResume``.

        Args:
            owner: Who asks.
            session: The owner's session.
            decisions: The decisions on its pending calls, by ``PendingCall.id``.
        """
        await owned_session(self.store, owner, session)
        return await self._launch(owner, session, "resume", decisions=decisions)

    async def history(self, owner: str, session: str) -> list[dict[str, Any]]:
        """The session's records, oldest first, as JSON values.

        Args:
            owner: Who asks.
            session: The owner's session.
        """
        found = await owned_session(self.store, owner, session)
        return [record.model_dump(mode="json") for record in found.history]

    async def _launch(
        self,
        owner: str,
        session: str,
        kind: Literal["run", "resume"],
        *,
        input: str = "",
        decisions: Mapping[str, Decision] | None = None,
    ) -> RunLog:
        if self._tg is None:
            raise UserError("use the hub as `async with RunHub(agent) as hub:`")
        if session in self._busy:
            raise SessionBusy(f"a run holds session {session!r}")
        if self._running[owner] >= self.limits.max_runs_per_owner:
            raise TooMany(f"at most {self.limits.max_runs_per_owner} runs at once per caller")
        log = RunLog(
            id=secrets.token_hex(16),
            session=session,
            owner=owner,
            max_events=self.limits.max_events_per_run,
        )
        self._busy.add(session)
        self._running[owner] += 1  # both undone by _drive, however it ends
        await self._tg.start(self._drive, log, kind, input, decisions)
        return log

    async def _drive(
        self,
        log: RunLog,
        kind: Literal["run", "resume"],
        input: str,
        decisions: Mapping[str, Decision] | None,
        *,
        task_status: TaskStatus[None],
    ) -> None:
        """The run, in this task, its events appended to its log as it emits them: no stream
        and no task of ``Agent.stream``'s between the run and the log (the log is bounded by
        dropping old events, so the run never waits for it)."""
        sink = _LogSink(log, self._logs, task_status)
        try:
            with log.cancel_scope:
                try:
                    await self.agent._run_into(  # pyright: ignore[reportPrivateUsage]  # the seam
                        sink,
                        input,
                        session=log.session,
                        store=self.store,
                        resume=kind == "resume",
                        decisions=decisions,
                    )
                except (UserError, SessionBusy):
                    if not sink.started:
                        raise  # why the run never began (busy, …): the caller's answer
                except Exception:  # a run that failed: its RunFailed says how
                    pass
                sink.start()  # a run that ended at its start: stream what it held
        finally:
            log.close()
            self._busy.discard(log.session)
            self._running[log.owner] -= 1
            if not self._running[log.owner]:
                del self._running[log.owner]
            if sink.started:
                self._ended.append(log.id)
                while len(self._ended) > self.limits.finished_runs_kept:
                    self._logs.pop(self._ended.pop(0), None)

    # -- reading ----------------------------------------------------------------------------

    def log(self, owner: str, run: str) -> RunLog:
        """The run's log, if the owner's; else ``SessionNotFound``.

        Args:
            owner: Who asks.
            run: The run's id (``RunLog.id``).
        """
        found = self._logs.get(run)
        if found is None or found.owner != owner:
            raise SessionNotFound(f"no run {run!r}")
        return found

    async def find(self, owner: str, run: str) -> RunLog:
        """``log``, for ``RunBackend``.

        Args:
            owner: Who asks.
            run: The run's id.
        """
        return self.log(owner, run)

    async def find_active(self, owner: str, session: str) -> RunLog | None:
        """``active``, for ``RunBackend``.

        Args:
            owner: Who asks.
            session: The session.
        """
        return self.active(owner, session)

    async def stop(self, owner: str, run: str) -> None:
        """``cancel``, for ``RunBackend``.

        Args:
            owner: Who asks.
            run: The run's id.
        """
        self.cancel(owner, run)

    def active(self, owner: str, session: str) -> RunLog | None:
        """The run going on in the owner's session, if any (what a client that lost its
        stream rejoins: the AI SDK's ``resumeStream``).

        Args:
            owner: Who asks.
            session: The session.
        """
        for log in reversed(self._logs.values()):
            if log.session == session and log.owner == owner and not log.done:
                return log
        return None

    def cancel(self, owner: str, run: str) -> None:
        """Stop the owner's run (its tools and model stream are cancelled).

        Args:
            owner: Who asks.
            run: The run's id.
        """
        self.log(owner, run).cancel_scope.cancel()

    def open_stream(self, owner: str) -> None:
        """Count an event stream the owner opens; ``TooMany`` at the bound.

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
            del self._streams[owner]  # one entry per caller with streams open, no more


@final
class _LogSink:
    """Where a hub's run emits (``EventSink``): its log, the events of its start held until
    the run is past it (a start may be refused: a busy session, a bad input); then the log
    joins the hub's ``logs`` and the hub's start returns."""

    __slots__ = ("_held", "_log", "_logs", "_status", "started")

    def __init__(self, log: RunLog, logs: dict[str, RunLog], status: TaskStatus[None]) -> None:
        self._log = log
        self._logs = logs
        self._status = status
        self._held: list[Event] = []
        self.started = False

    def send_nowait(self, item: Event) -> None:
        if not self.started:
            if isinstance(item, RunStarted | RunFailed):
                self._held.append(item)
                return
            self.start()
        self._log.append(item)

    async def send(self, item: Event) -> None:
        self.send_nowait(item)

    def start(self) -> None:
        """The run is past its start (or ended at it): its log is the hub's, held events in."""
        if not self.started:
            self.started = True
            self._logs[self._log.id] = self._log
            for event in self._held:
                self._log.append(event)
            self._status.started()


async def session_for(
    store: SessionStore, limits: WebLimits, owner: str, input: str, session: str | None
) -> str:
    """The session a run of ``input`` starts in: the owner's ``session``, or a new one made
    theirs; ``UserError`` for an empty or too long input.

    Args:
        store: Where sessions live.
        limits: The server's bounds.
        owner: Who asks.
        input: The user's message.
        session: The owner's session to continue; ``None`` makes a new one.
    """
    if not input.strip():
        raise UserError("input must be a non-empty string")
    if len(input) > limits.max_input_chars:
        raise UserError(f"input is longer than {limits.max_input_chars} characters")
    if session is None:
        session = secrets.token_hex(16)  # unguessable: owning it is knowing it, and more
        await store.create(session, user=owner)
    else:
        await owned_session(store, owner, session)
    return session


async def owned_session(
    store: SessionStore, owner: str, session: str, *, history_limit: int | None = None
) -> Session:
    """The owner's session; another's, or none, is ``SessionNotFound`` (the same to them).

    Args:
        store: Where sessions live.
        owner: Who asks.
        session: The session's id.
        history_limit: How many of its last runs' records to load (all when ``None``).
    """
    found = await store.get(session, history_limit=history_limit) if plausible_id(session) else None
    if found is None or not is_owner(owner, found.user):
        raise SessionNotFound(f"no session {session!r}")  # another's is as good as none
    return found


def is_owner(owner: str, stored: str) -> bool:
    """Whether ``owner`` (what the auth said) is the owner stored as ``stored``."""
    return stored == owner or stored in _formerly(owner)


def _formerly(owner: str) -> tuple[str, ...]:
    """The ids the owner's credentials were stored under before (see ``bearer_token``)."""
    formerly: tuple[str, ...] = getattr(owner, "formerly", ())
    return formerly


def plausible_id(session: str) -> bool:
    """Whether ``session`` could be an id (bounded, printable): worth looking up."""
    return 0 < len(session) <= 200 and session.isprintable()
