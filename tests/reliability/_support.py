"""Shared checks for the reliability tests: leaked tasks, well-formed sessions, tools that count
their invocations, a store that counts (and can interrupt) its commits, the real drivers
pointed at the loopback provider server, and the two tools the emulated provider calls."""

from __future__ import annotations

import builtins
import gc
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from agentloop import ToolContext, tool
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel
from agentloop.sessions import (
    Lease,
    RunEndRecord,
    RunRecord,
    Session,
    SessionStore,
    SQLiteStore,
    StepRecord,
)
from agentloop.sessions._base import Finish
from agentloop.sessions._codec import EncodedRecord, StateDelta
from tests.support.load import step_keys

APIS = ("openai-chat", "openai-responses", "anthropic")


@tool
async def weather(query: str) -> str:
    """The weather for a query."""
    return f"sunny in {query}"


@tool
async def clock(query: str) -> str:
    """The time for a query."""
    return f"noon in {query}"


def make_model(api: str, server_url: str, **kwargs: Any) -> Any:
    """A real driver for ``api`` talking to the loopback server at ``server_url``."""
    kwargs.setdefault("api_key", "test-key")
    if api == "anthropic":
        return AnthropicModel("emulated", base_url=server_url, **kwargs)
    cls = OpenAIChatModel if api == "openai-chat" else OpenAIResponsesModel
    return cls("emulated", base_url=server_url + "/v1", **kwargs)


# -- tasks ---------------------------------------------------------------------------------------


async def task_ids() -> set[int]:
    await anyio.lowlevel.checkpoint()
    return {task.id for task in anyio.get_running_tasks()}


async def leaked_tasks(before: set[int], *, settle: float = 1.0) -> set[int]:
    """Tasks running now that were not running before, once the loop had time to settle."""
    extra: set[int] = set()
    with anyio.move_on_after(settle):
        while True:
            extra = await task_ids() - before
            if not extra:
                break
            await anyio.sleep(0.01)
    return extra


def collect_garbage() -> None:
    """Run the collector so an unclosed resource warns (an error in this suite) in this test."""
    for _ in range(2):
        gc.collect()


# -- tools that count ------------------------------------------------------------------------------


@dataclass
class Invocations:
    """Each tool invocation, by idempotency key (``session:run:step:tool:arguments:ordinal``)."""

    keys: list[str] = field(default_factory=list)

    def record(self, ctx: ToolContext) -> None:
        self.keys.append(ctx.idempotency_key)

    def counts(self) -> Counter[str]:
        return Counter(self.keys)

    def duplicated(self, keys: set[str] | None = None) -> int:
        """Invocations beyond the first of each key (of ``keys`` only, when given)."""
        return sum(n - 1 for k, n in self.counts().items() if n > 1 and (keys is None or k in keys))


# -- a store that counts its commits ---------------------------------------------------------------

CommitHook = Callable[[str, int], Awaitable[None]]


class CountingStore(SQLiteStore):
    """A SQLite store that counts the commits it applied and calls ``hook(phase, n)`` around
    the n-th commit (``phase`` is ``"before"`` or ``"after"`` the write), where a test can
    cancel the run that is committing. The end of a failed or cancelled run, committed with
    the release of its lease (``finish_run``), is counted without a hook."""

    def __init__(self, path: str, hook: CommitHook | None = None) -> None:
        super().__init__(path)
        self.hook = hook
        self.applied = 0
        self.attempted = 0

    async def _do_commit(
        self,
        session_id: str,
        expected_version: int,
        records: builtins.list[EncodedRecord],
        delta: StateDelta,
        lease: Lease | None,
        now: float,
    ) -> int:
        self.attempted += 1
        n = self.attempted
        if self.hook is not None:
            await self.hook("before", n)
        version = await super()._do_commit(session_id, expected_version, records, delta, lease, now)
        self.applied += 1
        if self.hook is not None:
            await self.hook("after", n)
        return version

    async def _do_finish(self, batch: builtins.list[Finish], now: float) -> None:
        """A run's end is committed with its lease's release, in a batch: counted, no hook."""
        self.attempted += sum(item.expected_version is not None for item in batch)
        await super()._do_finish(batch, now)
        self.applied += sum(item.version is not None for item in batch)


# -- sessions --------------------------------------------------------------------------------------


@dataclass
class RunView:
    """One root run as its records tell it."""

    run_id: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    ends: list[RunEndRecord] = field(default_factory=list)

    @property
    def finished(self) -> RunEndRecord | None:
        last = self.ends[-1] if self.ends else None
        return last if last is not None and last.status == "finished" else None


@dataclass
class HistoryView:
    session: Session
    runs: dict[str, RunView]

    @property
    def unfinished(self) -> list[str]:
        return [r for r, view in self.runs.items() if view.finished is None]

    def action_keys(self) -> set[str]:
        """Idempotency keys of every committed action (own and carried)."""
        return {
            key
            for run_id, view in self.runs.items()
            for step in view.steps
            for key in step_keys(
                self.session.id,
                run_id,
                step["index"],
                [*step.get("actions", []), *step.get("carried", [])],
            )
        }


def check_history(session: Session) -> HistoryView:
    """Assert that a session's history is well formed and return it by run.

    Sequence numbers run 1..n; each root run starts with its run record; its steps have indices
    0..k-1 in order, none twice; an end record comes after every step it closes, and a run that
    ended ``finished`` has nothing after that: no end record of a run that was never recorded
    (cancelled before its run record was committed) and no ``cancelled`` end after a
    ``finished`` one (cancelled just after its final commit).
    """
    assert [r.seq for r in session.history] == list(range(1, len(session.history) + 1))
    runs: dict[str, RunView] = {}
    for record in session.history:
        if isinstance(record, RunRecord):
            assert record.run_id not in runs, f"run {record.run_id} recorded twice"
            runs[record.run_id] = RunView(record.run_id)
        elif isinstance(record, StepRecord):
            view = runs[record.run_id]
            assert view.finished is None, f"a step after run {record.run_id} finished"
            assert record.index == len(view.steps) == record.step["index"], "steps out of order"
            view.steps.append(record.step)
        elif isinstance(record, RunEndRecord):
            assert record.run_id in runs, f"an end record of run {record.run_id}, never recorded"
            view = runs[record.run_id]
            assert view.finished is None, f"run {record.run_id} ended again after it finished"
            view.ends.append(record)
    return HistoryView(session, runs)


async def check_session(
    store: SessionStore, session_id: str, *, applied: int | None = None
) -> HistoryView:
    """The session after a run ended (or was cancelled): lease released, version equal to the
    commits applied (when counted), history well formed."""
    session = await store.get(session_id)
    assert session is not None
    assert session.lease is None, f"the lease was left behind: {session.lease}"
    if applied is not None:
        assert session.version == applied, (session.version, applied)
    return check_history(session)
