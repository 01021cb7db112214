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
from ._errors import NothingToResume, SessionBusy, SessionConflict, SessionNotFound, UserError
from ._steps import RunResult, Step
from .models._types import Message

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from ._agent import Agent
    from .sessions import Lease, Record, RunEndRecord, RunRecord, Session, SessionStore


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
    run_key: str | None = None


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
    reply: Step | None = None  # the committed reply of the step in flight, without results
    finished: tuple[RunRecord, RunEndRecord] | None = None  # the run a run_key names, if ended


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
            # One more run than memory needs: the unfinished run a resume picks up. A run key
            # may name any earlier run: then the whole history is read.
            limit = None if spec.run_key is not None else memory.max_runs + 1
            session = await store.get(spec.session_id, history_limit=limit)
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


def load(session: Session, *, memory: Memory, resume: bool, run_key: str | None = None) -> Loaded:
    """State, memory and, when resuming (or a ``run_key`` names an unfinished run), the
    unfinished run; or the finished run a ``run_key`` names."""
    from .sessions import ReplyRecord, RunEndRecord, RunRecord, StepRecord

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
    if target is not None:
        loaded.run_id = target
        loaded.user_input = runs[target].input
        loaded.steps = tuple(step_from_json(s.step) for s in steps.get(target, ()))
        reply = replies.get(target)
        if reply is not None and reply.index == len(loaded.steps):
            loaded.reply = step_from_json(reply.step)
        order = order[: order.index(target)]
    finished = [r for r in order if r in ends and ends[r].status == "finished"]
    loaded.memory = _memory([(runs[r], ends[r]) for r in finished], memory)
    return loaded


def unfinished_runs(session: Session) -> list[RunRecord]:
    """The session's root runs that never recorded a finished end, oldest first."""
    from .sessions import RunEndRecord, RunRecord

    finished = {
        r.run_id for r in session.history if isinstance(r, RunEndRecord) and r.status == "finished"
    }
    return [
        r
        for r in session.history
        if isinstance(r, RunRecord) and r.parent_run_id is None and r.run_id not in finished
    ]


def stored_result(agent: Agent, loaded: Loaded) -> RunResult:
    """The result of the finished run a ``run_key`` named, rebuilt from its records (the
    per-model usage split is not stored)."""
    from ._steps import RunErrorInfo
    from .models._types import Usage

    if loaded.finished is None:
        raise UserError("no finished run was loaded")
    run, end = loaded.finished
    text = end.output if isinstance(end.output, str) else None
    output: Any = end.output
    if text is not None and end.error is None:
        output = agent.parse_output(text)
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
