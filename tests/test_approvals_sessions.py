"""Waiting session runs: pending calls are committed and survive a restart, the lease is
released while the run waits, and a second resume of the same decisions runs nothing twice;
on every store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from agentloop import (
    Agent,
    Approve,
    Deny,
    Edit,
    NothingToResume,
    PendingCall,
    RunContext,
    ToolContext,
    UserError,
    tool,
)
from agentloop._session_run import step_from_json
from agentloop.sessions import (
    InMemoryStore,
    PostgresStore,
    ReplyRecord,
    RunEndRecord,
    SessionStore,
    SQLiteStore,
)
from agentloop.testing import Reply, ScriptedModel, call
from agentloop.tools._context import call_identity

ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    ran.clear()


@tool(requires_approval=True, side_effects=True)
async def transfer(ctx: ToolContext, amount: int) -> str:
    """Move money.

    Args:
        amount: How much.
    """
    ran[f"transfer:{amount}"] += 1
    ran[ctx.idempotency_key] += 1
    return f"sent {amount}"


@tool
async def lookup(name: str) -> str:
    """Look up an account.

    Args:
        name: Whose.
    """
    ran[f"lookup:{name}"] += 1
    return f"{name} exists"


StoreMaker = Callable[[], AbstractAsyncContextManager[SessionStore]]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreMaker:
    """Opens the same store's data again each time it is called (a restart): the in-memory
    store is one object, kept."""
    kind: str = request.param
    if kind == "memory":
        memory = InMemoryStore()

        @asynccontextmanager
        async def kept() -> AsyncIterator[SessionStore]:
            yield memory

        return kept
    if kind == "sqlite":
        return lambda: SQLiteStore(tmp_path / "s.db")
    dsn = request.getfixturevalue("pg_schema_dsn")
    return lambda: PostgresStore(dsn)


def _agent(store: SessionStore, script: Sequence[Reply | str]) -> Agent:
    return Agent(ScriptedModel(script), tools=[lookup, transfer], store=store)


async def test_a_waiting_run_survives_a_restart_and_resumes_once(make_store: StoreMaker) -> None:
    first = [
        Reply(
            calls=[
                call("lookup", {"name": "bob"}, id="l"),
                call("transfer", {"amount": 5}, id="a"),
                call("transfer", {"amount": 6}, id="b"),
            ]
        )
    ]
    async with make_store() as store:
        waiting = await _agent(store, first).run("pay", session="s")
        assert [p.id for p in waiting.pending] == ["a", "b"]
        assert waiting.resume_state is None  # the session keeps it
        # The lease is released while the run waits: another owner takes it at once.
        lease = await store.acquire_lease("s", owner="someone", ttl=5.0)
        await store.release_lease(lease)
        session = await store.get("s")
        assert session is not None
        replies = [r for r in session.history if isinstance(r, ReplyRecord)]
        assert step_from_json(replies[-1].step).pending[0].id == "a"
        assert not any(isinstance(r, RunEndRecord) for r in session.history)
        versions = session.version
    assert ran == Counter({"lookup:bob": 1})

    async with make_store() as store:  # a new process would open it so
        agent = _agent(store, ["done"])
        unfinished = await agent.unfinished_run(session="s")
        assert unfinished is not None and unfinished.run_id == waiting.run_id
        with pytest.raises(UserError, match="waits on decisions for 'b'"):
            await agent.resume(session="s", decisions={"a": Approve()})
        with pytest.raises(UserError, match="edit of 'a' is not valid"):
            await agent.resume(session="s", decisions={"a": Edit({"amount": "x"}), "b": Approve()})
        session = await store.get("s")
        assert session is not None and session.version == versions  # nothing lost, nor added
        result = await agent.resume(session="s", decisions={"a": Approve(), "b": Deny("no")})
        assert result.output == "done" and result.run_id == waiting.run_id
        assert [a.output or a.error for a in result.steps[0].actions] == [
            "bob exists",
            "sent 5",
            "denied: no",
        ]
        with pytest.raises(NothingToResume):
            await agent.resume(session="s", decisions={"a": Approve(), "b": Deny("no")})
    assert ran["transfer:5"] == 1 and ran["transfer:6"] == 0 and ran["lookup:bob"] == 1
    (key,) = [k for k in ran if k.startswith("s:")]
    assert key == f"s:{waiting.run_id}:0:{call_identity('transfer', None, {'amount': 5})}:0"


async def test_a_session_run_that_waits_again_is_resumed_by_the_new_calls_only(
    make_store: StoreMaker,
) -> None:
    script: list[Reply | str] = [
        Reply(calls=[call("transfer", {"amount": 1}, id="a")]),
        Reply(calls=[call("transfer", {"amount": 2}, id="b")]),
        "done",
    ]
    model = ScriptedModel(script)
    async with make_store() as store:
        agent = Agent(model, tools=[transfer], store=store)
        first = await agent.run("pay twice", session="s")
        second = await agent.resume(session="s", decisions={"a": Approve()})
        assert [p.id for p in second.pending] == ["b"]
        with pytest.raises(UserError, match="unknown calls: 'a'"):
            await agent.resume(session="s", decisions={"a": Approve()})  # decided before
        third = await agent.resume(session="s", decisions={"b": Approve()})
        assert third.output == "done" and first.run_id == second.run_id == third.run_id
    assert ran["transfer:1"] == 1 and ran["transfer:2"] == 1


async def test_a_sub_agent_that_waits_is_kept_by_the_parents_session(
    make_store: StoreMaker,
) -> None:
    """The parent's session commits the waiting sub-run with the parent's step; another
    process resumes the parent, and through it the sub-run."""

    def parent(store: SessionStore, child_says: Reply | str, parent_says: Reply | str) -> Agent:
        child = Agent(ScriptedModel([child_says]), name="payer", tools=[transfer])
        return Agent(
            ScriptedModel([parent_says]), name="lead", tools=[child.as_tool()], store=store
        )

    async with make_store() as store:
        first = parent(
            store,
            Reply(calls=[call("transfer", {"amount": 8}, id="t")]),
            Reply(calls=[call("payer", {"task": "pay 8"}, id="d")]),
        )
        waiting = await first.run("go", session="s")
        assert [p.id for p in waiting.pending] == ["d/t"]
    async with make_store() as store:  # each model is asked only what is left
        later = parent(store, "child paid", "parent done")
        result = await later.resume(session="s", decisions={"d/t": Approve()})
    assert result.output == "parent done"
    assert result.steps[0].actions[0].output == "child paid"
    assert ran["transfer:8"] == 1


async def test_a_live_approver_decides_in_a_session_run_without_waiting() -> None:
    async def approver(pending: PendingCall, ctx: RunContext) -> Approve:
        return Approve()

    store = InMemoryStore()
    agent = Agent(
        ScriptedModel([Reply(calls=[call("transfer", {"amount": 3}, id="a")]), "ok"]),
        tools=[transfer],
        store=store,
        approver=approver,
    )
    result = await agent.run("pay", session="s")
    assert result.output == "ok" and ran["transfer:3"] == 1


WORKER = Path(__file__).with_name("_approval_worker.py")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def crash_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "s.db")
    return "postgres", request.getfixturevalue("pg_schema_dsn")


@pytest.mark.slow
def test_a_process_that_dies_while_its_run_waits_loses_nothing(
    tmp_path: Path, crash_store: tuple[str, str]
) -> None:
    """The process is killed after its run waits; a new process resumes with the approval (the
    lease was released, so no wait for it), and the approved call runs once."""
    kind, target = crash_store
    log = tmp_path / "log.txt"
    args = [sys.executable, str(WORKER), kind, target, str(log)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    died = subprocess.run([*args, "wait"], capture_output=True, text=True, timeout=60, env=env)
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert died.stdout.split() == ["waiting", "t1"]
    assert not log.exists()
    resumed = subprocess.run(
        [*args, "resume"], capture_output=True, text=True, timeout=60, env=env, check=True
    )
    assert resumed.stdout.split() == ["finished", "paid"]
    (key,) = log.read_text().split()
    assert key.startswith("s:") and ":0:transfer:" in key and key.endswith(":0")
