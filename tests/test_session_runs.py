"""Runs with a session: commits per step, memory, state, leases and resume."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import Agent, Memory, ModelRequest, SessionBusy, ToolContext, tool
from agentloop.models import ToolResultPart
from agentloop.sessions import (
    InMemoryStore,
    ReplyRecord,
    RunEndRecord,
    RunRecord,
    SessionStore,
    SQLiteStore,
    StepRecord,
)
from agentloop.testing import FunctionModel, Reply, ScriptedModel, call
from agentloop.tools._context import call_identity


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made: SessionStore = (
        InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    )
    async with made:
        yield made


def _types(history: Any) -> list[str]:
    return [r.type for r in history]


async def test_the_run_record_is_committed_before_the_first_model_call(store: Any) -> None:
    """When the model is first called, the store already holds the run record."""
    seen: list[list[str]] = []

    async def reply(request: ModelRequest) -> str:
        session = await store.get("s1")
        seen.append(_types(session.history))
        return "hi"

    await Agent(FunctionModel(reply), store=store).run("hello", session="s1")
    assert seen == [["run"]]
    session = await store.get("s1")
    assert _types(session.history) == ["run", "step", "run_end"]
    end = session.history[-1]
    assert isinstance(end, RunEndRecord) and end.status == "finished" and end.output == "hi"


async def test_each_completed_step_is_committed_with_its_state_changes(store: Any) -> None:
    """During step 2 the store holds step 1 and the key it set, and no temp: key."""
    snapshots: list[tuple[list[str], dict[str, Any]]] = []

    @tool
    async def remember(ctx: ToolContext, value: str) -> str:
        """A test tool."""
        ctx.state[f"k{ctx.step}"] = value
        ctx.state["temp:scratch"] = value
        session = await store.get(ctx.session_id)
        snapshots.append((_types(session.history), dict(session.state)))
        return "ok"

    model = ScriptedModel(
        [
            Reply(calls=[call("remember", {"value": "a"})]),
            Reply(calls=[call("remember", {"value": "b"})]),
            "done",
        ]
    )
    result = await Agent(model, tools=[remember], store=store).run("go", session="s2")
    assert snapshots == [(["run"], {}), (["run", "step"], {"k0": "a"})]
    session = await store.get("s2")
    assert session.state == {"k0": "a", "k1": "b"}
    assert _types(session.history) == ["run", "step", "step", "step", "run_end"]
    assert result.state == {"k0": "a", "k1": "b"}


async def test_memory_replays_earlier_runs_right_after_the_system_message(store: Any) -> None:
    """A second run sees the first run's input and answer, bounded by Memory."""
    model = ScriptedModel(["first answer", "second answer", "third answer"])
    agent = Agent(model, store=store, instructions="sys", memory=Memory(max_runs=1))
    await agent.run("first question", session="s3")
    await agent.run("second question", session="s3")
    await agent.run("third question", session="s3")
    second = [m.text for m in model.requests[1].messages]
    assert second == ["sys", "first question", "first answer", "second question"]
    third = [m.text for m in model.requests[2].messages]
    assert third == ["sys", "second question", "second answer", "third question"]


async def test_memory_token_budget_drops_the_oldest_runs(store: Any) -> None:
    """Each earlier run costs 15 tokens here (input / 4 + reported answer tokens): 20 fit one."""
    model = ScriptedModel(["a" * 40, "b" * 40, "c"])
    agent = Agent(model, store=store, memory=Memory(max_tokens=20))
    await agent.run("q1" * 10, session="s4")
    await agent.run("q2" * 10, session="s4")
    await agent.run("q3", session="s4")
    texts = [m.text for m in model.requests[2].messages]
    assert texts == ["q2" * 10, "b" * 40, "q3"]


async def test_runs_of_a_session_raise_no_conflict(store: Any) -> None:
    """A session's first run creates it and later runs find it: no ``SessionConflict`` is
    raised and caught on the way (``stats.conflicts`` counts real conflicts only)."""
    agent = Agent(ScriptedModel(["one", "two", "three"]), store=store)
    for text in ("a", "b", "c"):
        await agent.run(text, session="s-plain")
    assert store.stats.conflicts == 0
    session = await store.get("s-plain")
    assert [r.type for r in session.history].count("run_end") == 3


async def test_a_second_concurrent_run_of_a_session_is_busy(store: Any) -> None:
    """One run per session at a time: the second gets SessionBusy, or waits when asked."""
    release = anyio.Event()
    started = anyio.Event()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await release.wait()
        return "slow done"

    agent = Agent(FunctionModel(slow), store=store)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.run, "one", session="s5"))
        await started.wait()
        quick = Agent(ScriptedModel(["quick"]), store=store)
        with pytest.raises(SessionBusy):
            await quick.run("two", session="s5")
        release.set()
        result = await quick.run("two", session="s5", wait_for_session=5.0)
    assert result.output == "quick"


async def test_idempotency_key_names_session_run_step_tool_arguments_and_ordinal(
    store: Any,
) -> None:
    """ToolContext.idempotency_key is session:run:step:tool:arguments:ordinal (no call id)."""
    keys: list[str] = []

    @tool
    async def side_effect(ctx: ToolContext) -> str:
        """A test tool."""
        keys.append(ctx.idempotency_key)
        return "ok"

    model = ScriptedModel([Reply(calls=[call("side_effect", {}, id="t9")]), "done"])
    result = await Agent(model, tools=[side_effect], store=store).run("go", session="s6")
    assert keys == [f"s6:{result.run_id}:0:{call_identity('side_effect', None, {})}:0"]


async def test_a_cancelled_run_resumes_without_rerunning_committed_actions(store: Any) -> None:
    """Cancelled in step 2: resume skips step 1's action and re-runs step 2's."""
    counter: Counter[str] = Counter()
    stop_in_step_2 = True
    entered = anyio.Event()

    @tool
    async def work(ctx: ToolContext, label: str) -> str:
        """A test tool."""
        counter[label] += 1
        if label == "second" and stop_in_step_2:
            entered.set()
            await anyio.sleep_forever()
        return f"did {label}"

    def reply(request: ModelRequest) -> Reply | str:
        results = [p for m in request.messages for p in m.parts if isinstance(p, ToolResultPart)]
        if not results:
            return Reply(calls=[call("work", {"label": "first"}, id="w1")])
        if len(results) == 1:
            return Reply(calls=[call("work", {"label": "second"}, id="w2")])
        return f"finished after {len(results)} results"

    agent = Agent(FunctionModel(reply), tools=[work], store=store)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.run, "task", session="s7"))
        await entered.wait()
        tg.cancel_scope.cancel()
    session = await store.get("s7")
    assert _types(session.history) == ["run", "step", "run_end"]
    assert session.history[-1].status == "cancelled"
    stop_in_step_2 = False
    result = await agent.resume(session="s7")
    assert result.output == "finished after 2 results"
    assert counter == Counter({"first": 1, "second": 2})
    assert result.run_id == session.history[0].run_id
    assert [s.index for s in result.steps] == [0, 1, 2]
    session = await store.get("s7")
    assert _types(session.history)[-3:] == ["step", "step", "run_end"]
    runs = [r for r in session.history if isinstance(r, RunRecord)]
    steps = [r for r in session.history if isinstance(r, StepRecord)]
    assert len(runs) == 1 and [s.index for s in steps] == [0, 1, 2]


async def test_resume_without_an_unfinished_run_is_a_clear_error(store: Any) -> None:
    """Nothing to resume: a UserError that says so."""
    from agentloop import UserError

    agent = Agent(ScriptedModel(["done"]), store=store)
    await agent.run("x", session="s8")
    with pytest.raises(UserError, match="no unfinished run"):
        await agent.resume(session="s8")


async def test_a_session_needs_a_store() -> None:
    """session= without any store is a clear UserError."""
    from agentloop import UserError

    with pytest.raises(UserError, match="needs a store"):
        await Agent(ScriptedModel([])).run("x", session="nowhere")


@pytest.mark.fake_clock
async def test_a_long_run_keeps_its_lease_alive(fake_time: bool) -> None:
    """With a 1 s lease, a 3 s step still holds the session at 2 s: the lease is renewed (in
    real time, on asyncio, at half that scale)."""
    scale = 1.0 if fake_time else 0.5
    store = InMemoryStore(clock=lambda: 1_000.0 + anyio.current_time())
    entered = anyio.Event()

    @tool
    async def slow(ctx: ToolContext) -> str:
        """A test tool."""
        entered.set()
        await anyio.sleep(3.0 * scale)
        return "slow done"

    model = ScriptedModel([Reply(calls=[call("slow", {})]), "finished"])
    agent = Agent(model, tools=[slow], store=store, lease_ttl=1.0 * scale)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.run, "go", session="lease"))
        await entered.wait()
        await anyio.sleep(2.0 * scale)
        with pytest.raises(SessionBusy):
            await Agent(ScriptedModel(["x"]), store=store).run("steal", session="lease")
    session = await store.get("lease")
    assert session is not None and session.history[-1].type == "run_end"


class _Counting:
    """A model's validator that counts its calls (and validates as before)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def validate_python(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.inner.validate_python(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_run_does_not_validate_again_the_records_it_serialised(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step record holds the step's JSON as the runtime dumped it: checking it again, value by
    value, cost more than the rest of the commit. What the store gives back is the same."""
    counted = {}
    for cls in (StepRecord, ReplyRecord):
        counted[cls] = _Counting(cls.__pydantic_validator__)
        monkeypatch.setattr(cls, "__pydantic_validator__", counted[cls])
    result = await Agent(FunctionModel(lambda request: "hi")).run(
        "hello", session="s1", store=store
    )
    assert {cls.__name__: c.calls for cls, c in counted.items()} == {
        "StepRecord": 0,
        "ReplyRecord": 0,
    }
    monkeypatch.undo()
    session = await store.get("s1")
    _run, step, end = session.history
    assert isinstance(step, StepRecord) and isinstance(end, RunEndRecord)
    assert step == StepRecord(**step.model_dump())
    assert end == RunEndRecord(**end.model_dump())
    assert (step.run_id, step.index, end.status, end.output) == (result.run_id, 0, "finished", "hi")
    assert (
        step.model_dump_json()
        == StepRecord.model_validate_json(step.model_dump_json()).model_dump_json()
    )


async def test_a_run_ends_on_an_in_memory_store_without_a_cancel_scope(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An in-memory store writes a lone finish at once, so a run's release and failed end need
    no shield nor bound around it (two cancel scopes and a timer per run). What is written is the
    same: the lease is free, a failed end recorded."""
    from agentloop._session_run import Memory as RunMemory
    from agentloop._session_run import SessionScope, SessionSpec

    store = InMemoryStore()
    scopes = 0
    real = anyio.CancelScope

    def counting(*args: Any, **kwargs: Any) -> anyio.CancelScope:
        nonlocal scopes
        scopes += 1
        return real(*args, **kwargs)

    async with store:
        for session, ending in (("s1", "release"), ("s2", "failed")):
            spec = SessionSpec(store=store, session_id=session)
            scope = await SessionScope.open(
                spec, owner=f"run-{session}", ttl=30, memory=RunMemory(), parse_output=str
            )
            await scope.start(agent="a", branch="main", user_input="hello")
            monkeypatch.setattr(anyio, "CancelScope", counting)
            monkeypatch.setattr(anyio, "move_on_after", lambda *a, **k: counting())
            if ending == "failed":
                await scope.end("failed", error=RuntimeError("boom"))
            await scope.release(wait_for_store=True)
            monkeypatch.undo()
            assert scopes == 0, ending
            lease = await store.acquire_lease(session, owner="next", ttl=30)
            assert lease.owner == "next"
        found = await store.get("s2")
        assert found is not None
        end = found.history[-1]
        assert isinstance(end, RunEndRecord)
        assert (end.status, end.error, end.error_kind) == ("failed", "boom", "RuntimeError")


async def test_an_open_stores_operations_await_no_helper() -> None:
    """Each operation of a served run (create, lease, get, commit, finish) on an open store with
    nothing handed over runs its back end's step straight away: no coroutine to check the
    store is open, none to wait for a handed-over finish, no context manager to count
    conflicts. Conflicts are still counted."""
    import sys

    from agentloop import SessionConflict

    store = InMemoryStore()
    entered: list[str] = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if (
            event == "call"
            and code.co_filename.endswith("_base.py")
            and code.co_name
            in (
                "_ready",
                "_after_handed",
                "_counting",
                "__enter__",
                "__exit__",
            )
        ):
            entered.append(code.co_name)

    async with store:
        record = RunRecord(run_id="r", agent="a", branch="main", input="hi")
        sys.setprofile(watch)
        try:
            await store.create("s")
            lease = await store.acquire_lease("s", owner="o", ttl=30)
            await store.get("s", history_limit=21)
            version = await store.commit("s", expected_version=0, records=[record], lease=lease)
            await store.finish_run(lease, expected_version=version, within=2.0)
        finally:
            sys.setprofile(None)
        assert entered == []
        with pytest.raises(SessionConflict):
            await store.create("s")
        assert store.stats.conflicts == 1


async def test_a_session_run_resolves_no_relative_import_as_it_goes(store: Any) -> None:
    """The session's records are imported in the functions that use them (``import agentloop``
    loads no pydantic); a relative import there resolves its package with a Python call each
    time (importlib's ``parent``, and ``_handle_fromlist`` for a package), so they name the
    module absolutely."""
    import sys

    agent = Agent(FunctionModel(lambda request: "hi"))
    await agent.run("warm", session="s0", store=store)
    resolved: list[str] = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_name in ("parent", "_handle_fromlist"):
            caller = frame.f_back
            if caller is not None and caller.f_code.co_filename.endswith("_session_run.py"):
                resolved.append(caller.f_code.co_name)

    sys.setprofile(watch)
    try:
        await agent.run("hello", session="s1", store=store)
    finally:
        sys.setprofile(None)
    assert resolved == []
