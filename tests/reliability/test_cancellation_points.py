"""Cancellation at seeded random points of a session run — in the provider stream (real drivers
against the loopback server), in tools, in a session commit — on asyncio and trio: no task is left
running, no provider response is left open, the session stays consistent (lease released, version
equal to the commits applied, history well formed) and ``agent.resume`` finishes the run without
running a committed action again.

See also tests/test_cancellation.py (each way a host can cancel a scripted run) and
tests/test_crash_resume.py (a process killed with SIGKILL, resumed in another process).
"""

from __future__ import annotations

import functools
import random
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from agentloop import Agent, Event, ModelRequest, RunCancelled, ToolContext, UserError, tool
from agentloop.models import ToolResultPart
from agentloop.sessions import RunEndRecord
from agentloop.testing import (
    Chunk,
    EmulatedProvider,
    FunctionModel,
    ProviderServer,
    RecordedRequest,
    Reply,
    ScriptedResponse,
    call,
    slowed,
)

from ._support import (
    APIS,
    CountingStore,
    HistoryView,
    Invocations,
    check_session,
    leaked_tasks,
    make_model,
    task_ids,
)

ANSWER = "All done: a, b and 6."
DELTAS = ("text_delta", "thought_delta", "answer_delta", "action_args_delta")
HOW = ("run.cancel", "leave the stream", "host scope")


def _tools(log: Invocations) -> list[Any]:
    @tool
    async def fetch(ctx: ToolContext, key: str) -> str:
        """Fetch a key (slowly)."""
        log.record(ctx)
        ctx.state[f"fetched:{key}"] = True
        await anyio.sleep(0.003)
        return f"value of {key}"

    @tool
    def crunch(ctx: ToolContext, n: int) -> int:
        """Compute in a worker thread."""
        log.record(ctx)
        time.sleep(0.002)
        return n * 2

    return [fetch, crunch]


def _scripted_reply(request: ModelRequest) -> Reply:
    """Three steps: two parallel actions, one more, then the answer (streamed in pieces)."""
    results = sum(isinstance(p, ToolResultPart) for m in request.messages for p in m.parts)
    if results == 0:
        calls = [call("fetch", {"key": "a"}, id="f1"), call("crunch", {"n": 3}, id="c1")]
        return Reply(text="Looking both up.", calls=calls, chunk_size=4, delay=0.001)
    if results == 2:
        return Reply(calls=[call("fetch", {"key": "b"}, id="f2")], chunk_size=4, delay=0.001)
    return Reply(text=ANSWER, chunk_size=3, delay=0.001)


async def _finish_and_check(
    agent: Agent, store: CountingStore, session: str, log: Invocations
) -> HistoryView:
    """After the cancel: consistent session; resume (when a run is unfinished) to the answer;
    committed actions never run twice."""
    if await store.get(session) is None:
        # Cancelled before the run made its session: nothing was written and nothing ran.
        assert not [k for k in log.keys if k.startswith(f"{session}:")] and not store.applied
        await store.create(session)
    history = await check_session(store, session, applied=store.applied)
    committed = history.action_keys()
    assert log.duplicated(committed) == 0
    if history.unfinished:
        assert history.unfinished == [next(iter(history.runs))]
        result = await agent.resume(session=session)
        assert result.error is None and result.output == ANSWER
    elif history.runs:  # the cancel came after the last commit: the run is complete
        end = next(iter(history.runs.values())).finished
        assert end is not None and end.output == ANSWER
    else:  # cancelled before the run record was committed: nothing to resume, run again
        with pytest.raises(UserError, match="no unfinished run"):
            await agent.resume(session=session)
        result = await agent.run("go", session=session)
        assert result.output == ANSWER
    after = await check_session(store, session, applied=store.applied)
    assert not after.unfinished
    assert after.action_keys() >= committed
    # Actions committed before the cancel never ran again; every recorded action did run.
    assert log.duplicated(committed) == 0
    assert all(log.counts()[k] >= 1 for k in after.action_keys())
    return after


async def _cancel_after_checkpoints(agent: Agent, session: str, how: str, checkpoints: int) -> None:
    """Run, and cancel it (``how``) after the host has passed ``checkpoints`` checkpoints
    (the run may also have ended by then)."""
    async with anyio.create_task_group() as tg:

        async def canceller(cancel: Any) -> None:
            for _ in range(checkpoints):
                await anyio.lowlevel.checkpoint()
            cancel()

        if how == "host scope":
            with anyio.CancelScope() as scope:
                tg.start_soon(canceller, scope.cancel)
                await agent.run("go", session=session)
        else:
            async with agent.stream("go", session=session) as run:
                tg.start_soon(canceller, lambda: run.cancel("seeded stop"))
                async for _ in run:
                    pass
            try:
                assert run.result.output == ANSWER
            except RunCancelled:
                pass
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("seed", range(12))
async def test_cancel_at_a_seeded_random_checkpoint(seed: int, tmp_path: Path) -> None:
    """Cancelled after a random number of host checkpoints (lease, commits, stream, tools in
    tasks and threads), a session run leaves no task, a consistent session, and resumes."""
    rng = random.Random(seed)
    log = Invocations()
    store = CountingStore(str(tmp_path / "s.db"))
    async with store:
        agent = Agent(FunctionModel(_scripted_reply), tools=_tools(log), store=store)
        # How long a whole run is, in host checkpoints, to draw a point inside it.
        reference = CountingStore(str(tmp_path / "ref.db"))
        async with reference:
            ticks = 0
            async with anyio.create_task_group() as tg:

                async def tick() -> None:
                    nonlocal ticks
                    while True:
                        await anyio.lowlevel.checkpoint()
                        ticks += 1

                tg.start_soon(tick)
                await agent.replace(store=reference).run("go", session="ref")
                tg.cancel_scope.cancel()
        before = await task_ids()
        how = ("run.cancel", "host scope")[seed % 2]
        await _cancel_after_checkpoints(agent, "s", how, rng.randint(0, ticks))
        assert await leaked_tasks(before) == set()
        await _finish_and_check(agent, store, "s", log)


@pytest.mark.parametrize("seed", range(8))
async def test_cancel_inside_a_session_commit(seed: int, tmp_path: Path) -> None:
    """Cancelled inside the n-th commit, before or after its write reached the database, the
    run leaves the session consistent (version counts the commits applied) and resumable."""
    rng = random.Random(seed)
    log = Invocations()
    target = rng.randint(1, 4)  # the run record, step 0, step 1, step 2 with the run's end
    phase = rng.choice(["before", "after"])
    how = ("run.cancel", "host scope")[seed % 2]
    scope = anyio.CancelScope()
    stream_run: list[Any] = []
    hit: list[tuple[str, int]] = []

    async def hook(at: str, n: int) -> None:
        if (at, n) == (phase, target) and not hit:
            hit.append((at, n))
            if stream_run:
                stream_run[0].cancel("cancelled in a commit")
            else:
                scope.cancel()
            await anyio.lowlevel.checkpoint()  # the cancel lands here, inside the commit

    store = CountingStore(str(tmp_path / "s.db"), hook)
    async with store:
        agent = Agent(FunctionModel(_scripted_reply), tools=_tools(log), store=store)
        before = await task_ids()
        if how == "host scope":
            with scope:
                await agent.run("go", session="s")
        else:
            async with agent.stream("go", session="s") as run:
                stream_run.append(run)
                async for _ in run:
                    pass
        assert hit == [(phase, target)]
        assert await leaked_tasks(before) == set()
        store.hook = None
        await _finish_and_check(agent, store, "s", log)


@pytest.mark.parametrize("seed", range(6))
async def test_cancel_while_tools_run(seed: int, tmp_path: Path) -> None:
    """Cancelled when the k-th action starts (async and threaded tools in flight), the run's
    tool tasks are cancelled with it and the session resumes without re-running what was
    committed."""
    rng = random.Random(seed)
    log = Invocations()
    k = rng.randint(1, 3)
    how = HOW[seed % 3]
    store = CountingStore(str(tmp_path / "s.db"))
    async with store:
        agent = Agent(FunctionModel(_scripted_reply), tools=_tools(log), store=store)
        before = await task_ids()
        started = 0
        with anyio.CancelScope() as scope:
            async with agent.stream("go", session="s") as run:
                async for event in run:
                    if event.type == "action_started":
                        started += 1
                        if started == k:
                            if how == "run.cancel":
                                run.cancel("stop during tools")
                            elif how == "host scope":
                                scope.cancel()
                            else:
                                break
        assert started >= k  # after run.cancel, buffered events still arrive
        assert await leaked_tasks(before) == set()
        await _finish_and_check(agent, store, "s", log)


# -- in the provider stream, through the real drivers -------------------------------------------

TAIL = 0.1  # the server holds each reply open this long after its last event


def _slow_provider(emulated: EmulatedProvider, resumed: list[bool]) -> Any:
    """Every reply streams one event per 5 ms, then stays open ``TAIL`` seconds: a client that
    is cancelled while reading must close it (the server sees that), or it would complete.
    Once ``resumed`` holds True (the cancel is over), replies end with their last event."""

    def handler(request: RecordedRequest) -> ScriptedResponse:
        reply = slowed(emulated(request), 0.005)
        assert isinstance(reply.body, list)
        return ScriptedResponse.sse([*reply.body] if resumed else [*reply.body, Chunk(b"", TAIL)])

    return handler


@pytest.mark.parametrize("seed", range(6))
async def test_cancel_in_a_provider_stream(seed: int, tmp_path: Path, monkeypatch: Any) -> None:
    """Cancelled at the k-th streamed delta of a real driver's reply, the run closes the HTTP
    response at once (the server sees the client go), leaves no task, and resumes."""
    rng = random.Random(seed)
    api = APIS[seed % 3]
    how = HOW[rng.randrange(3)]
    k = rng.randint(1, 12)
    log = Invocations()

    @tool
    async def weather(ctx: ToolContext, query: str) -> str:
        """The weather."""
        log.record(ctx)
        await anyio.sleep(0.01)
        return f"sunny in {query}"

    @tool
    async def clock(ctx: ToolContext, query: str) -> str:
        """The time."""
        log.record(ctx)
        return f"noon in {query}"

    emulated = EmulatedProvider(answer=ANSWER)
    store = CountingStore(str(tmp_path / "s.db"))
    resumed: list[bool] = []
    async with ProviderServer(_slow_provider(emulated, resumed)) as server, store:
        model = make_model(api, server.url)
        opened: list[Any] = []
        stream = model.stream

        def recording_stream(request: ModelRequest) -> Any:
            opened.append(stream(request))
            return opened[-1]

        monkeypatch.setattr(model, "stream", recording_stream)
        agent = Agent(model, tools=[weather, clock], store=store, event_buffer=4)
        before = await task_ids()
        seen: list[Event] = []
        deltas = 0
        with anyio.CancelScope() as scope:
            async with agent.stream("go", session="s") as run:
                async for event in run:  # after run.cancel, what was buffered still arrives
                    seen.append(event)
                    deltas += event.type in DELTAS
                    if deltas == k and event.type in DELTAS:
                        if how == "run.cancel":
                            run.cancel("stop mid-stream")
                        elif how == "host scope":
                            scope.cancel()
                        else:
                            break
        assert deltas >= k, [e.type for e in seen]
        assert "run_finished" not in [e.type for e in seen]
        assert await leaked_tasks(before) == set()
        # Client side: every response the driver opened is closed; server side: the client
        # closed the one it was reading before the reply ended.
        assert opened and all(s._closed is True for s in opened)
        closed = await anyio.to_thread.run_sync(
            server.wait_until, lambda s: s.client_closed >= 1, 5.0
        )
        assert closed, server.stats
        resumed.append(True)
        await _finish_and_check_real(agent, store, log)
        await model.aclose()
        gone = await anyio.to_thread.run_sync(
            server.wait_until, lambda s: s.open_connections == 0, 5.0
        )
        assert gone, server.stats


async def _finish_and_check_real(agent: Agent, store: CountingStore, log: Invocations) -> None:
    history = await check_session(store, "s", applied=store.applied)
    committed = history.action_keys()
    assert log.duplicated(committed) == 0
    assert history.unfinished  # the answer streams last: a cancel in any stream leaves it open
    result = await agent.resume(session="s")
    assert result.error is None and result.text == ANSWER
    after = await check_session(store, "s", applied=store.applied)
    assert not after.unfinished
    assert log.duplicated(committed) == 0


async def test_a_run_cancelled_before_its_record_leaves_no_end_record(tmp_path: Path) -> None:
    """A run cancelled before its run record was committed writes nothing to the session."""
    gate = anyio.Event()

    async def hook(at: str, n: int) -> None:
        if (at, n) == ("before", 1):
            gate.set()
            await anyio.sleep_forever()  # cancelled here, before the run record is written

    store = CountingStore(str(tmp_path / "s.db"), hook)
    async with store:
        agent = Agent(FunctionModel(_scripted_reply), tools=_tools(Invocations()), store=store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(agent.run, "go", session="s"))
            await gate.wait()
            tg.cancel_scope.cancel()
        session = await store.get("s")
        assert session is not None
        assert session.history == ()


async def test_a_run_cancelled_after_its_final_commit_stays_finished(tmp_path: Path) -> None:
    """A cancel delivered just after the run's end was committed leaves it finished."""
    scope = anyio.CancelScope()

    async def hook(at: str, n: int) -> None:
        if (at, n) == ("after", 4):  # the last step and the run's end are written
            scope.cancel()  # delivered at the run's next checkpoint, after the commit returns

    store = CountingStore(str(tmp_path / "s.db"), hook)
    async with store:
        agent = Agent(FunctionModel(_scripted_reply), tools=_tools(Invocations()), store=store)
        with scope:
            await agent.run("go", session="s")
        session = await store.get("s")
        assert session is not None
        ends = [r.status for r in session.history if isinstance(r, RunEndRecord)]
        assert ends == ["finished"]
