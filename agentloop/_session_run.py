"""A run's hold on its session: the lease, the loaded history, and the commits.

The run record is committed before the first model call, each completed step right after it
(the step and the state keys it changed, nothing else), and the end of the run with its last
step. A crash loses at most the step in flight, which a resumed run does again: actions run
at least once, and ``ToolContext.idempotency_key`` lets tools with side effects act once.

The store's modules are imported where used (``import agentloop`` loads no pydantic), by
their absolute names: a relative import resolves its package with a Python call each time.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio

from . import _checks as checks
from ._context import StateView
from ._errors import (
    NothingToResume,
    SessionBusy,
    SessionConflict,
    SessionNotFound,
    UserError,
)
from ._steps import RunResult, Step
from .models._types import Message

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from pydantic import TypeAdapter

    from .models._types import InputPart, ModelResponse, Usage
    from .sessions import Lease, Record, RunEndRecord, RunRecord, Session, SessionStore
    from .sessions._base import BaseStore


_logger = logging.getLogger("agentloop")


@dataclass(frozen=True, kw_only=True, slots=True)
class Memory:
    """How much of a session's earlier runs a new run sees: at most ``max_runs`` runs, and at
    most ``max_tokens`` tokens (provider-reported where known, else characters / 4); the oldest
    are dropped first. Earlier runs are replayed as text: their images and files are kept in the
    session (a resumed run sends them again) but not sent again with every later run, whose
    tokens they would multiply.

    Args:
        max_runs: The most earlier runs replayed (0: none).
        max_tokens: The most tokens they may take (``None``: no token bound).
    """

    max_runs: int = 20
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        checks.count("Memory", "max_runs", self.max_runs)
        checks.optional_count("Memory", "max_tokens", self.max_tokens)


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionSpec:
    """What a run asked for: which session, in which store, and how to take it."""

    store: SessionStore
    session_id: str
    wait: float | None = None
    resume: bool = False
    run_key: str | None = None
    counts: Counts | None = None  # resuming between steps: the counters so far


MAX_STORED_INPUT_BYTES = 32 * 1024 * 1024
"""The most bytes of images and files (and URLs) a session run's input may hold: the largest
part any provider takes (a 32 MB PDF). Stored as base64, that is under 45 MB of record text,
far below SQLite's and PostgreSQL's 1 GB per value."""


def check_stored_input(parts: Sequence[InputPart] | None) -> None:
    """Refuse, before the session is touched, an input too large to keep in its run record."""
    if not parts:
        return
    from .models._types import FilePart, ImagePart

    size = 0
    for part in parts or ():
        if isinstance(part, ImagePart | FilePart):
            size += len(part.data) if part.data is not None else len(part.url or "")
    if size > MAX_STORED_INPUT_BYTES:
        raise UserError(
            f"a session run's images and files may hold up to {MAX_STORED_INPUT_BYTES // 2**20}"
            f" MB in all (its run record keeps them); this input holds {size / 2**20:.1f} MB"
        )


@functools.cache
def _parts_adapter() -> TypeAdapter[tuple[InputPart, ...]]:
    from pydantic import TypeAdapter

    from .models._types import InputPart

    return TypeAdapter(tuple[InputPart, ...])


def parts_to_json(parts: tuple[InputPart, ...] | None) -> list[dict[str, Any]] | None:
    """The input's parts as a run record keeps them (bytes as base64, as in a resume state)."""
    if parts is None:
        return None
    data: list[dict[str, Any]] = _parts_adapter().dump_python(parts, mode="json")
    return data


def parts_from_json(data: list[dict[str, Any]] | None) -> tuple[InputPart, ...] | None:
    return None if data is None else _parts_adapter().validate_python(data)


@functools.cache
def _step_adapter() -> TypeAdapter[Step]:
    from pydantic import TypeAdapter

    return TypeAdapter(Step)


def step_to_json(step: Step) -> dict[str, Any]:
    data: dict[str, Any] = _step_adapter().dump_python(step, mode="json")
    return data


def step_from_json(data: Any) -> Step:
    return _step_adapter().validate_python(data)


@dataclass(frozen=True, kw_only=True, slots=True)
class Counts:
    """A run's counters that its steps do not hold: what a run resumed between two steps (a
    durable run continuing as new) goes on counting from."""

    usage_by_model: Mapping[str, Usage]
    tool_calls: int
    tool_retries: Mapping[str, int]
    output_retries: int
    # After a handoff: the agent handed over to (the run goes on under it), and the first
    # step its prompt replays (``Handoff(history="input")``: the steps from the handoff on).
    agent: str | None = None
    replay_from: int = 0


@dataclass(kw_only=True, slots=True)
class Loaded:
    """What a run needs from the session it starts or resumes."""

    state: StateView
    memory: tuple[Message, ...]
    run_id: str | None = None
    user_input: str | None = None
    input_parts: tuple[InputPart, ...] | None = None  # an input of images or files
    steps: tuple[Step, ...] = ()
    reply: Step | None = None  # the committed reply of the step in flight, without results
    finished: tuple[RunRecord, RunEndRecord] | None = None  # the run a run_key names, if ended
    abandoned: tuple[str, ...] = ()  # waiting runs a new run ends (their calls never run)
    counts: Counts | None = None  # resumed between steps: the counters so far
    # Resuming a wait that began after a handoff: the agent handed over to, and the first
    # step its prompt replays (as ``Counts.agent`` and ``Counts.replay_from``).
    handed: tuple[str, int] | None = None


class SessionScope:
    """One run's hold on its session, from the lease to its release.

    ``open`` takes the lease and loads the history; the run is built from what it loaded
    (``run_id``, ``loaded``, ``earlier_result``: its identity is decided here, once). Then
    ``start`` records the run, ``commit_reply`` and ``commit_step`` commit its progress (the
    run's end goes with its last step), and ``end`` records a failed or cancelled end.

    An end goes out with the release of the lease, batched with the other runs ending at the
    same time on stores that can (``BaseStore.finish_run``); ``release`` alone follows an end
    committed with the last step. Both are shielded, bounded and best effort: transient store
    errors are retried within the bound, and what still fails is logged, never raised, so a
    cancelled run stays cancelled and a finished run finished. A cancelled run hands its end
    and release to the store (``BaseStore.hand_over_finish``) and returns without waiting for
    it, unless it is the one writing the batch. A lease left behind expires by itself after
    ``ttl``; an end left unrecorded leaves the run unfinished in the history, which a resume
    picks up."""

    release_timeout = 2.0
    """Seconds a release, or a cancelled run's end and release, may take."""
    end_timeout = 10.0
    """Seconds a failed run's end and release may take (retrying transient errors)."""
    retry_first = 0.05
    retry_max = 1.0

    def __init__(
        self,
        store: SessionStore,
        lease: Lease,
        ttl: float,
        *,
        run_id: str,
        run_key: str | None = None,
        acquired_at: float | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        self.version = 0
        self.ttl = ttl
        self.session_id = lease.session_id
        self.run_id = run_id
        self.run_key = run_key
        self.loaded = Loaded(state=StateView(None), memory=())
        self.earlier_result: RunResult | None = None  # the run_key names a finished run
        # Whether the history holds this run's record, and its end: a run that ends before its
        # record was written records nothing, and a recorded end is never followed by another.
        self.recorded = False
        self.ended = False
        self.released = False
        # Until when (anyio's clock) the lease is surely valid: from before it was last taken.
        start = anyio.current_time() if acquired_at is None else acquired_at
        self.valid_until = start + ttl

    @classmethod
    async def open(
        cls,
        spec: SessionSpec,
        *,
        owner: str,
        ttl: float,
        memory: Memory,
        parse_output: Callable[[str], Any],
    ) -> SessionScope:
        """Take the session's lease as ``owner`` and load what the run needs: resuming, the
        unfinished run (whose id the run takes); with a ``run_key`` of a finished run, its
        result."""
        store = spec.store
        acquired_at = anyio.current_time()
        acquire = functools.partial(
            store.acquire_lease,
            spec.session_id,
            owner=owner,
            ttl=ttl,
            wait=spec.wait is not None,
            timeout=spec.wait,
        )
        try:  # most runs find their session: only a first run pays for creating it
            lease = await acquire()
        except SessionNotFound:
            try:
                await store.create(spec.session_id)
            except SessionConflict:
                pass  # another run created it meanwhile
            lease = await acquire()
        scope = cls(store, lease, ttl, run_id=owner, run_key=spec.run_key, acquired_at=acquired_at)
        try:
            # One more run than memory needs: the unfinished run a resume picks up. A run key
            # may name any earlier run: then the whole history is read.
            limit = None if spec.run_key is not None else memory.max_runs + 1
            session = await store.get(spec.session_id, history_limit=limit)
            if session is None:
                raise SessionNotFound(f"session {spec.session_id!r} was deleted")
            scope.version = session.version
            loaded = load(session, memory=memory, resume=spec.resume, run_key=spec.run_key)
            if loaded.finished is not None:
                scope.earlier_result = stored_result(parse_output, loaded)
        except BaseException:
            await scope.release()
            raise
        scope.loaded = loaded
        if loaded.run_id is not None:  # resuming: the run is the unfinished one, recorded
            scope.run_id = loaded.run_id
            scope.recorded = True
            loaded.counts = spec.counts
        return scope

    def leave(self) -> None:
        """Leave the session as a crash would: the run unended (for a resume) and the lease
        held, which its owner takes again at once (a durable run continuing as new, whose next
        run has the same id)."""
        self.ended = self.released = True

    @property
    def resumed(self) -> bool:
        """The run goes on from an unfinished run of the history."""
        return self.loaded.run_id is not None

    async def start(
        self,
        *,
        agent: str,
        branch: str,
        user_input: str,
        input_parts: tuple[InputPart, ...] | None = None,
    ) -> None:
        """Record the run, before its first model call (a resumed run is recorded already)."""
        from agentloop.sessions._records import RunEndRecord, RunRecord

        record = RunRecord(
            run_id=self.run_id,
            agent=agent,
            branch=branch,
            input=user_input,
            input_parts=parts_to_json(input_parts),
            run_key=self.run_key,
        )
        why = "a new run began in the session before its pending calls were decided"
        ends = [
            RunEndRecord(run_id=run, status="abandoned", error=why, error_kind="Abandoned")
            for run in self.loaded.abandoned
        ]
        await self._commit([*ends, record])
        self.recorded = True

    async def commit_reply(self, index: int, response: ModelResponse) -> None:
        """Commit the reply of step ``index`` before its actions with side effects run: after a
        crash, resume runs them from this reply, with the same idempotency keys."""
        from agentloop.sessions._records import ReplyRecord, step_record

        reply = Step(
            index=index,
            attempt=response.attempt or 0,
            parts=response.parts,
            finish_reason=response.finish_reason,
            usage=response.usage,
        )
        record = step_record(ReplyRecord, self.run_id, index, step_to_json(reply))
        await self._commit([record])

    async def commit_waiting(self, step: Step) -> None:
        """Commit the step in flight of a run that waits on decisions: its reply, the results
        of its actions that ran and its pending calls. The run stays unfinished in the
        history; ``Agent.resume`` with the decisions continues it from this step."""
        from agentloop.sessions._records import ReplyRecord, step_record

        record = step_record(ReplyRecord, self.run_id, step.index, step_to_json(step))
        await self._commit([record])

    async def commit_step(self, step: Step | None, done: RunResult | None = None) -> None:
        """Commit a completed step, and the end of the run (``done``) with its last step."""
        from agentloop.sessions._records import StepRecord, step_record

        records: list[Record] = []
        if step is not None:
            step_json = step_to_json(step)
            records.append(step_record(StepRecord, self.run_id, step.index, step_json))
        if done is not None:
            records.append(end_record(self.run_id, "finished", result=done))
        await self._commit(records)
        self.ended = done is not None

    async def _commit(self, records: Sequence[Record]) -> None:
        changed, deleted = self.loaded.state.take_changes()
        self.version = await self.store.commit(
            self.session_id,
            expected_version=self.version,
            records=records,
            set_state=changed,
            delete_state=deleted,
            lease=self.lease,
        )

    @staticmethod
    def transient(exc: Exception) -> bool:
        """Whether a store error may pass if tried again: not a lost lease, a missing session,
        a moved version, a misuse or a batch given up on (a database busy past its timeout is
        transient)."""
        from agentloop.sessions._base import retryable

        return retryable(exc)

    def kept_by_store(self, lost: Callable[[Exception], None]) -> Callable[[], None] | None:
        """Hand the renewal of the lease to the store's lease keeper, when it has one (it is
        entered with ``async with``): the keeper renews it with the other runs' leases, and
        hands ``lost`` the error that ends it. Returns what takes the lease back once the run
        ends; None when the run renews its own (``keep_alive``)."""
        store = self._base_store()
        keeper = store.lease_keeper if store is not None else None
        if keeper is None:
            return None
        holding = keeper.hold(
            self.lease,
            self.ttl,
            valid_until=self.valid_until,
            renewed=self._renewed,
            lost=lost,
            retry_first=self.retry_first,
            retry_max=self.retry_max,
        )
        return holding.drop

    def _renewed(self, lease: Lease) -> None:
        self.lease = lease

    async def keep_alive(self) -> None:
        """Renew the lease until cancelled. A transient store error is retried with backoff
        while the lease is still valid; a lost lease (``SessionBusy``), or a store still failing
        as the lease is about to expire, ends the run with that error."""
        margin = self.ttl / 10  # stop retrying this long before the lease could expire
        while True:
            await anyio.sleep(self.ttl / 3)
            delay = min(self.retry_first, self.ttl / 30)
            while True:
                started = anyio.current_time()
                try:
                    self.lease = await self.store.renew_lease(self.lease, self.ttl)
                except Exception as exc:
                    now = anyio.current_time()
                    if not self.transient(exc) or now + delay >= self.valid_until - margin:
                        raise
                    _logger.warning(
                        "renewing the lease of session %r failed (%s: %s); retrying in %.3gs,"
                        " %.3gs before it expires",
                        self.session_id,
                        type(exc).__name__,
                        exc,
                        delay,
                        self.valid_until - now,
                    )
                    await anyio.sleep(delay)
                    delay = min(delay * 2, self.retry_max, self.ttl / 6)
                    continue
                self.valid_until = started + self.ttl
                break

    async def end(
        self, status: Literal["failed", "cancelled"], *, error: BaseException | None = None
    ) -> None:
        """Record how the run ended and release the lease, in one store operation batched with
        the other runs ending at once; shielded and bounded (a cancelled run:
        ``release_timeout``, so cancellation stays fast; a failed one: ``end_timeout``), with
        transient errors retried within the bound. A cancelled run on a ``BaseStore`` hands
        the end over and does not wait for it (the store writes and reports it). An end not
        recorded is logged as a warning: the run stays unfinished in the history, for a resume.
        Nothing is written for a run whose record never reached the history, nor after its end
        was committed (a cancel that arrives just after the final commit leaves the run
        finished)."""
        if not self.recorded or self.ended:
            return
        changed, deleted = self.loaded.state.take_changes()
        records = [end_record(self.run_id, status, error=error)]
        store = self._base_store()
        if status == "cancelled" and store is not None:
            self.ended = self.released = True
            await self._hand_over(
                store,
                functools.partial(_end_reported, self.run_id, self.session_id, self.ttl),
                expected_version=self.version,
                records=records,
                set_state=changed,
                delete_state=deleted,
            )
            return
        within = self.release_timeout if status == "cancelled" else self.end_timeout
        parts: dict[str, Any] = {
            "expected_version": self.version,
            "records": records,
            "set_state": changed,
            "delete_state": deleted,
        }
        outcome = await self._finish(
            within,
            lambda left: self._finish_once(left, **parts),
            at_once=functools.partial(self._finish_at_once, **parts),
        )
        if isinstance(outcome, int):
            self.version = outcome
            self.ended = True
        else:
            _not_recorded(self.run_id, status, self.session_id, self.ttl, str(outcome))

    async def release(self, *, wait_for_store: bool = False) -> None:
        """Release the lease (once), shielded and best effort: a failure is logged, never
        raised; the lease expires by itself after ``ttl``. It takes ``release_timeout`` at most
        (a cancelled run's, so cancellation stays fast; on a ``BaseStore`` it is handed over,
        without waiting); ``wait_for_store`` (a run that was not cancelled) waits for a busy
        store as long as the lease lasts (then it has expired by itself), at least
        ``end_timeout``, and retries a failing one for ``end_timeout``."""
        if self.released:
            return
        store = self._base_store()
        if not wait_for_store and store is not None:
            self.released = True
            await self._hand_over(
                store, functools.partial(_release_reported, self.session_id, self.ttl)
            )
            return
        bound, retry_for = self.release_timeout, None
        if wait_for_store:
            bound, retry_for = max(self.end_timeout, self.ttl), self.end_timeout
        outcome = await self._finish(
            bound,
            self._finish_once,
            busy_ok=True,
            retry_for=retry_for,
            at_once=self._finish_at_once,
        )
        if isinstance(outcome, str):
            _not_released(self.session_id, self.ttl, outcome)

    def _base_store(self) -> BaseStore | None:
        """The store, if it is one of ours: it batches finishes and takes them handed over."""
        from agentloop.sessions._base import BaseStore

        return self.store if isinstance(self.store, BaseStore) else None

    async def _hand_over(
        self,
        store: BaseStore,
        report: Callable[[int | Exception | None], None],
        *,
        expected_version: int | None = None,
        records: Sequence[Record] = (),
        set_state: Any = None,
        delete_state: Iterable[str] = (),
    ) -> None:
        """A cancelled run's end and release, or its release, handed to the store: written in
        a batch with the others handed over at once, ``report``ed when settled, bounded by
        ``release_timeout``; the run waits only if it is the one that writes the batches."""
        await store.hand_over_finish(
            self.lease,
            report=report,
            within=self.release_timeout,
            expected_version=expected_version,
            records=records,
            set_state=set_state,
            delete_state=delete_state,
            retry_first=self.retry_first,
            retry_max=self.retry_max,
        )

    def _finish_at_once(
        self,
        *,
        expected_version: int | None = None,
        records: Sequence[Record] = (),
        set_state: Any = None,
        delete_state: Iterable[str] = (),
    ) -> tuple[bool, int | None]:
        """``_finish_once`` without awaiting, on a store that writes it at once
        (``BaseStore.finish_at_once``); ``(False, None)`` where it cannot."""
        store = self._base_store()
        if store is None:
            return False, None
        return store.finish_at_once(
            self.lease,
            expected_version=expected_version,
            records=records,
            set_state=set_state,
            delete_state=delete_state,
        )

    async def _finish_once(
        self,
        within: float,
        *,
        expected_version: int | None = None,
        records: Sequence[Record] = (),
        set_state: Any = None,
        delete_state: Iterable[str] = (),
    ) -> int | None:
        from agentloop.sessions._base import BaseStore

        store = self.store
        if isinstance(store, BaseStore):
            return await store.finish_run(
                self.lease,
                expected_version=expected_version,
                records=records,
                set_state=set_state,
                delete_state=delete_state,
                within=within,
            )
        version = None  # another SessionStore: its commit, then its release
        if expected_version is not None:
            version = await store.commit(
                self.session_id,
                expected_version=expected_version,
                records=records,
                set_state=set_state,
                delete_state=delete_state,
                lease=self.lease,
            )
        await store.release_lease(self.lease)
        return version

    async def _finish(
        self,
        within: float,
        attempt: Callable[[float], Awaitable[int | None]],
        *,
        busy_ok: bool = False,
        retry_for: float | None = None,
        at_once: Callable[[], tuple[bool, int | None]] | None = None,
    ) -> int | str | None:
        """``attempt(seconds left)`` until it succeeds, shielded, within ``within`` seconds,
        retrying transient errors for ``retry_for`` of them (default: all): its answer, or why it
        failed (a message). A slow store may take the whole bound; a failing one is given up on
        sooner. ``at_once``, when given, is tried first: a store that writes the finish without
        awaiting (in memory) needs no shield nor bound around it. The lease counts
        as released either way: what is left of it expires by itself. A batching store counts
        the bound in its own time (``BaseStore.finish_run``), so a busy event loop does not
        make it give up."""
        self.released = True
        if at_once is not None:  # a store that writes it at once: no shield nor bound needed
            try:
                written, version = at_once()
            except SessionBusy:
                return None if busy_ok else "the lease was lost (taken over)"
            except Exception as exc:
                if not self.transient(exc):
                    return f"{type(exc).__name__}: {exc}"
                written, version = False, None  # tried again below, within the bound
            if written:
                return version
        failure = f"the store did not answer within {within:g}s"
        delay = self.retry_first
        deadline = anyio.current_time() + within
        retry_until = deadline if retry_for is None else anyio.current_time() + retry_for
        with anyio.CancelScope(shield=True), anyio.move_on_after(within):
            while True:
                try:
                    return await attempt(max(deadline - anyio.current_time(), 0.0))
                except SessionBusy:
                    # Taken over already: nothing of ours to release, nor to end.
                    return None if busy_ok else "the lease was lost (taken over)"
                except Exception as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                    if not self.transient(exc) or anyio.current_time() + delay > retry_until:
                        return failure
                await anyio.sleep(delay)
                delay = min(delay * 2, self.retry_max)
        return failure


def _why(outcome: Exception) -> str:
    if isinstance(outcome, SessionBusy):
        return "the lease was lost (taken over)"
    return f"{type(outcome).__name__}: {outcome}"


def _not_recorded(run_id: str, status: str, session_id: str, ttl: float, why: str) -> None:
    _logger.warning(
        "the end of run %s (%s) was not recorded in session %r: %s; the run stays"
        " unfinished in the history, to resume (its lease expires by itself within %gs)",
        run_id,
        status,
        session_id,
        why,
        ttl,
    )


def _not_released(session_id: str, ttl: float, why: str) -> None:
    _logger.warning(
        "could not release the lease of session %r: %s; it expires by itself within %gs",
        session_id,
        why,
        ttl,
    )


def _end_reported(
    run_id: str, session_id: str, ttl: float, outcome: int | Exception | None
) -> None:
    """The store settled a cancelled run's end handed over to it: a failure is logged."""
    if isinstance(outcome, Exception):
        _not_recorded(run_id, "cancelled", session_id, ttl, _why(outcome))


def _release_reported(session_id: str, ttl: float, outcome: int | Exception | None) -> None:
    """The store settled a release handed over to it: a lease taken over is not ours to
    release; another failure is logged."""
    if isinstance(outcome, Exception) and not isinstance(outcome, SessionBusy):
        _not_released(session_id, ttl, _why(outcome))


def load(session: Session, *, memory: Memory, resume: bool, run_key: str | None = None) -> Loaded:
    """State, memory and, when resuming (or a ``run_key`` names an unfinished run), the
    unfinished run; or the finished run a ``run_key`` names."""
    from agentloop.sessions._records import ReplyRecord, RunEndRecord, RunRecord, StepRecord

    runs: dict[str, RunRecord] = {}
    ends: dict[str, RunEndRecord] = {}
    steps: dict[str, list[StepRecord]] = {}
    replies: dict[str, ReplyRecord] = {}
    for record in session.history:
        if isinstance(record, RunRecord) and record.parent_run_id is None:
            runs[record.run_id] = record
        elif isinstance(record, RunEndRecord):
            ends[record.run_id] = record
        elif isinstance(record, StepRecord):
            steps.setdefault(record.run_id, []).append(record)
        elif isinstance(record, ReplyRecord):
            replies[record.run_id] = record
    order = list(runs)
    loaded = Loaded(state=StateView(session.state), memory=())
    target: str | None = None
    if run_key is not None:
        keyed = [r for r in order if runs[r].run_key == run_key]
        if keyed:
            target = keyed[-1]
            end = ends.get(target)
            if end is not None and end.status == "finished":
                loaded.finished = (runs[target], end)
                loaded.steps = tuple(step_from_json(s.step) for s in steps.get(target, ()))
                return loaded
    elif resume:
        unfinished = unfinished_runs(session)
        if not unfinished:
            raise NothingToResume(f"session {session.id!r} has no unfinished run to resume")
        target = unfinished[-1].run_id
    elif order and order[-1] not in ends:  # a new run ends the run that waits on decisions
        reply = replies.get(order[-1])
        if reply is not None and reply.step.get("pending"):
            loaded.abandoned = (order[-1],)
    if target is not None:
        loaded.run_id = target
        loaded.user_input = runs[target].input
        loaded.input_parts = parts_from_json(runs[target].input_parts)
        loaded.steps = tuple(step_from_json(s.step) for s in steps.get(target, ()))
        reply = replies.get(target)
        if reply is not None and reply.index == len(loaded.steps):
            loaded.reply = step_from_json(reply.step)
        order = order[: order.index(target)]
    finished = [r for r in order if r in ends and ends[r].status == "finished"]
    loaded.memory = _memory([(runs[r], ends[r]) for r in finished], memory)
    return loaded


def unfinished_runs(session: Session) -> list[RunRecord]:
    """The session's root runs that never recorded a finished (or abandoned) end, oldest
    first."""
    from agentloop.sessions._records import RunEndRecord, RunRecord

    finished = {
        r.run_id
        for r in session.history
        if isinstance(r, RunEndRecord) and r.status in ("finished", "abandoned")
    }
    return [
        r
        for r in session.history
        if isinstance(r, RunRecord) and r.parent_run_id is None and r.run_id not in finished
    ]


def stored_result(parse_output: Callable[[str], Any], loaded: Loaded) -> RunResult:
    """The result of the finished run a ``run_key`` named, rebuilt from its records (the
    per-model usage split is not stored)."""
    from ._steps import RunErrorInfo
    from .models._types import Usage

    if loaded.finished is None:
        raise UserError("no finished run was loaded")
    run, end = loaded.finished
    text = end.output if isinstance(end.output, str) else None
    output: Any = None  # a run that ended with an error has no output (RunResult)
    if end.error is None:
        output = parse_output(text) if text is not None else end.output
    usage = Usage(**{k: v for k, v in end.usage.items() if k in _USAGE_FIELDS})
    error = None
    if end.error is not None:
        error = RunErrorInfo(kind=end.error_kind or "error", message=end.error)
    return RunResult(
        run_id=run.run_id,
        agent=run.agent,
        branch=run.branch,
        output=output,
        text=text,
        steps=loaded.steps,
        usage=usage,
        error=error,
        state=loaded.state.snapshot(),
    )


_USAGE_FIELDS = frozenset({"requests", "input_tokens", "output_tokens", "unknown"})


def _memory(pairs: list[tuple[Any, Any]], policy: Memory) -> tuple[Message, ...]:
    pairs = pairs[-policy.max_runs :] if policy.max_runs else []
    budget = policy.max_tokens
    kept: list[tuple[Message, Message]] = []
    for run, end in reversed(pairs):
        answer = end.output if isinstance(end.output, str) else json.dumps(end.output)
        tokens = len(run.input) // 4 + int(end.usage.get("answer_tokens", len(answer) // 4))
        if budget is not None:
            if tokens > budget:
                break
            budget -= tokens
        kept.append((Message.user(run.input), Message.assistant(answer)))
    return tuple(m for pair in reversed(kept) for m in pair)


def end_record(
    run_id: str,
    status: Literal["finished", "failed", "cancelled"],
    *,
    result: RunResult | None = None,
    error: BaseException | None = None,
) -> Record:
    from agentloop.sessions._records import RunEndRecord

    output: Any = None
    usage: dict[str, int] = {}
    if result is not None:
        output = result.text if result.text is not None else _jsonable(result.output)
        u = result.usage
        usage = {
            "requests": u.requests,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "unknown": u.unknown,
        }
        if u.stream_errors:
            usage["stream_errors"] = u.stream_errors
        last = result.steps[-1].usage if result.steps else None
        if last is not None and last.output_tokens:
            usage["answer_tokens"] = last.output_tokens
    message = (
        str(error)
        if error is not None
        else (result.error.message if result and result.error else None)
    )
    kind = (
        type(error).__name__
        if error is not None
        else (result.error.kind if result and result.error else None)
    )
    return RunEndRecord(
        run_id=run_id, status=status, output=output, error=message, error_kind=kind, usage=usage
    )


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    try:
        return to_jsonable_python(value)
    except Exception:  # any value still gets recorded, as text
        return str(value)
