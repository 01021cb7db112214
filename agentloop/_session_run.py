"""A run's hold on its session: the lease, the loaded history, and the commits.

The run record is committed before the first model call, each completed step right after it
(the step and the state keys it changed, nothing else), and the end of the run with its last
step. A crash loses at most the step in flight, which a resumed run does again: actions run
at least once, and ``ToolContext.idempotency_key`` lets tools with side effects act once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio

from ._context import StateView
from ._errors import SessionBusy, SessionConflict, SessionNotFound, UserError
from ._steps import RunResult, Step
from .models._types import Message

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from .sessions import Lease, Record, Session, SessionStore


@dataclass(frozen=True, kw_only=True, slots=True)
class Memory:
    """How much of a session's earlier runs a new run sees: at most ``max_runs`` runs, and at
    most ``max_tokens`` tokens (provider-reported where known, else characters / 4); the oldest
    are dropped first."""

    max_runs: int = 20
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_runs < 0:
            raise UserError("Memory.max_runs must be 0 or more")


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionSpec:
    """What a run asked for: which session, in which store, and how to take it."""

    store: SessionStore
    session_id: str
    wait: float | None = None
    resume: bool = False


@functools.cache
def _step_adapter() -> TypeAdapter[Step]:
    from pydantic import TypeAdapter

    return TypeAdapter(Step)


def step_to_json(step: Step) -> dict[str, Any]:
    data: dict[str, Any] = _step_adapter().dump_python(step, mode="json")
    return data


def step_from_json(data: Any) -> Step:
    return _step_adapter().validate_python(data)


@dataclass(kw_only=True, slots=True)
class Loaded:
    """What a run needs from the session it starts or resumes."""

    state: StateView
    memory: tuple[Message, ...]
    run_id: str | None = None
    user_input: str | None = None
    steps: tuple[Step, ...] = ()


class SessionBinding:
    """Holds the session's lease for one run and commits through it."""

    def __init__(self, store: SessionStore, lease: Lease, version: int, ttl: float) -> None:
        self.store = store
        self.lease = lease
        self.version = version
        self.ttl = ttl
        self.session_id = lease.session_id
        # Whether the history holds this run's record, and its end: a run that ends before its
        # record was written records nothing, and a recorded end is never followed by another.
        self.recorded = False
        self.ended = False

    @classmethod
    async def open(
        cls, spec: SessionSpec, *, owner: str, ttl: float, memory: Memory
    ) -> tuple[SessionBinding, Session]:
        store = spec.store
        try:
            await store.create(spec.session_id)
        except SessionConflict:
            pass  # it exists
        lease = await store.acquire_lease(
            spec.session_id,
            owner=owner,
            ttl=ttl,
            wait=spec.wait is not None,
            timeout=spec.wait,
        )
        try:
            # One more run than memory needs: the unfinished run a resume picks up.
            session = await store.get(spec.session_id, history_limit=memory.max_runs + 1)
            if session is None:
                raise SessionNotFound(f"session {spec.session_id!r} was deleted")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await store.release_lease(lease)
            raise
        return cls(store, lease, session.version, ttl), session

    async def commit(self, records: Sequence[Record], state: StateView) -> None:
        changed, deleted = state.take_changes()
        self.version = await self.store.commit(
            self.session_id,
            expected_version=self.version,
            records=records,
            set_state=changed,
            delete_state=deleted,
            lease=self.lease,
        )

    async def keep_alive(self) -> None:
        """Renew the lease until cancelled; a lost lease ends the run."""
        while True:
            await anyio.sleep(self.ttl / 3)
            self.lease = await self.store.renew_lease(self.lease, self.ttl)

    async def release(self) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.store.release_lease(self.lease)
            except SessionBusy:
                pass  # taken over already: nothing of ours to release


def load(session: Session, *, memory: Memory, resume: bool) -> Loaded:
    """State, memory and (when resuming) the unfinished run, from a loaded session."""
    from .sessions import RunEndRecord, RunRecord, StepRecord

    runs: dict[str, RunRecord] = {}
    ends: dict[str, RunEndRecord] = {}
    steps: dict[str, list[StepRecord]] = {}
    for record in session.history:
        if isinstance(record, RunRecord) and record.parent_run_id is None:
            runs[record.run_id] = record
        elif isinstance(record, RunEndRecord):
            ends[record.run_id] = record
        elif isinstance(record, StepRecord):
            steps.setdefault(record.run_id, []).append(record)
    order = list(runs)
    loaded = Loaded(state=StateView(session.state), memory=())
    if resume:
        unfinished = [r for r in order if ends.get(r) is None or ends[r].status != "finished"]
        if not unfinished:
            raise UserError(f"session {session.id!r} has no unfinished run to resume")
        run_id = unfinished[-1]
        loaded.run_id = run_id
        loaded.user_input = runs[run_id].input
        loaded.steps = tuple(step_from_json(s.step) for s in steps.get(run_id, ()))
        order = order[: order.index(run_id)]
    finished = [r for r in order if r in ends and ends[r].status == "finished"]
    loaded.memory = _memory([(runs[r], ends[r]) for r in finished], memory)
    return loaded


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
    from .sessions import RunEndRecord

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
        last = result.steps[-1].usage if result.steps else None
        if last is not None and last.output_tokens:
            usage["answer_tokens"] = last.output_tokens
    message = (
        str(error)
        if error is not None
        else (result.error.message if result and result.error else None)
    )
    return RunEndRecord(run_id=run_id, status=status, output=output, error=message, usage=usage)


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    try:
        return to_jsonable_python(value)
    except Exception:  # any value still gets recorded, as text
        return str(value)
