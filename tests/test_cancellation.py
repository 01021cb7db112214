"""Cancelling a run, each way a host can: nothing is left running and the host's cancellation
state stays its own."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import anyio
import pytest
import sniffio
from anyio.lowlevel import checkpoint

from agentloop import ActionStarted, Agent, RunCancelled, tool
from agentloop.testing import Reply, ScriptedModel, call


class Probe:
    """A tool that signals when it starts and records how it ended."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.outcome: str | None = None

    def tool(self) -> Any:
        @tool
        async def hang() -> str:
            """A test tool."""
            self.started.set()
            try:
                await anyio.sleep(3600)
            except anyio.get_cancelled_exc_class():
                self.outcome = "cancelled"
                raise
            self.outcome = "finished"
            return "never"

        return hang


def _agent(probe: Probe) -> Agent:
    model = ScriptedModel([Reply(text="working", calls=[call("hang", {})]), "unused"])
    return Agent(model, tools=[probe.tool()])


async def _tasks() -> set[Any]:
    await checkpoint()
    return {task.id for task in anyio.get_running_tasks()}


async def _settled_tasks(before: set[Any]) -> set[Any]:
    """Running tasks that were not there before (after the loop has had time to settle)."""
    for _ in range(200):
        extra = await _tasks() - before
        if not extra:
            return extra
        await anyio.sleep(0.01)
    return extra


async def test_leaving_the_stream_early_cancels_the_run() -> None:
    """Breaking out of `async with agent.stream()` cancels the tool; no task survives."""
    probe = Probe()
    before = await _tasks()
    async with _agent(probe).stream("go") as run:
        async for event in run:
            if isinstance(event, ActionStarted):
                await probe.started.wait()
                break
    assert probe.outcome == "cancelled"
    assert await _settled_tasks(before) == set()
    with pytest.raises(RunCancelled, match="left the stream"):
        run.result  # noqa: B018


async def test_run_cancel_from_another_task() -> None:
    """run.cancel(reason) from another task ends the stream; result raises RunCancelled."""
    probe = Probe()
    before = await _tasks()
    seen: list[str] = []
    async with anyio.create_task_group() as tg, _agent(probe).stream("go") as run:

        async def stopper() -> None:
            await probe.started.wait()
            run.cancel("user pressed stop")

        tg.start_soon(stopper)
        async for event in run:
            seen.append(event.type)
    assert probe.outcome == "cancelled"
    assert "run_finished" not in seen and "run_failed" not in seen
    with pytest.raises(RunCancelled, match="user pressed stop"):
        run.result  # noqa: B018
    assert await _settled_tasks(before) == set()


async def test_host_deadline_cancels_the_run_and_keeps_the_host_state() -> None:
    """asyncio.timeout() (or a trio deadline) cancels the run; the host sees its own timeout."""
    probe = Probe()
    before = await _tasks()
    agent = _agent(probe)

    async def run_and_arm(arm: Any) -> None:
        # The deadline is set once the tool runs, so a slow start cannot fail the test.
        async with anyio.create_task_group() as tg:

            async def arm_when_started() -> None:
                await probe.started.wait()
                arm()

            tg.start_soon(arm_when_started)
            await agent.run("go")

    if sniffio.current_async_library() == "asyncio":
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(30) as timeout:
                await run_and_arm(lambda: timeout.reschedule(loop.time() + 0.05))
        current = asyncio.current_task()
        assert current is not None and current.cancelling() == 0
    else:
        import trio

        with trio.move_on_after(30) as scope:
            await run_and_arm(lambda: setattr(scope, "deadline", trio.current_time() + 0.05))
        assert scope.cancelled_caught
    assert probe.outcome == "cancelled"
    assert await _settled_tasks(before) == set()


async def test_cancelling_the_host_task() -> None:
    """task.cancel() (or cancelling the enclosing scope on trio) cancels the run cleanly."""
    probe = Probe()
    before = await _tasks()
    if sniffio.current_async_library() == "asyncio":
        task = asyncio.ensure_future(_agent(probe).run("go"))
        await probe.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        current = asyncio.current_task()
        assert current is not None and current.cancelling() == 0
    else:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_agent(probe).run, "go")
            await probe.started.wait()
            tg.cancel_scope.cancel()
    assert probe.outcome == "cancelled"
    assert await _settled_tasks(before) == set()


async def test_cancel_scope_around_a_stream() -> None:
    """A cancel scope around the whole `async with` cancels the run and is caught by the host."""
    probe = Probe()
    before = await _tasks()
    with anyio.CancelScope() as scope:
        async with _agent(probe).stream("go") as run:
            async for event in run:
                if isinstance(event, ActionStarted):
                    await probe.started.wait()
                    scope.cancel()
    assert scope.cancelled_caught
    assert probe.outcome == "cancelled"
    assert await _settled_tasks(before) == set()


async def test_cancelling_during_the_model_stream_closes_it() -> None:
    """A cancel while the reply streams closes the model stream (no leftover generator)."""
    closed = anyio.Event()
    streaming = anyio.Event()

    class SlowModel(ScriptedModel):
        async def _deltas(self, reply: Any, request: Any) -> Any:
            try:
                async with aclosing(super()._deltas(reply, request)) as inner:
                    async for delta in inner:
                        streaming.set()
                        yield delta
            finally:
                closed.set()

    model = SlowModel([Reply(text="a long reply " * 50)], chunk_size=5, delay=0.01)
    async with anyio.create_task_group() as tg:
        tg.start_soon(Agent(model).run, "go")
        await streaming.wait()
        tg.cancel_scope.cancel()
    assert closed.is_set()


async def test_result_after_the_host_cancelled_the_stream_says_so() -> None:
    """A host cancel scope that stops a streamed run: ``result`` then raises RunCancelled saying
    the host cancelled it (not a hint to iterate the events)."""
    probe = Probe()
    with anyio.CancelScope() as host:
        async with _agent(probe).stream("go") as run:
            async for event in run:
                if isinstance(event, ActionStarted):
                    await probe.started.wait()
                    host.cancel()
    assert host.cancelled_caught and probe.outcome == "cancelled"
    assert run.done
    with pytest.raises(RunCancelled, match="host"):
        run.result  # noqa: B018


async def test_result_after_the_host_cancelled_before_iterating_says_so() -> None:
    """Cancelled by the host before any event was read: still a clear RunCancelled."""
    probe = Probe()
    with anyio.CancelScope() as host:
        async with _agent(probe).stream("go") as run:
            host.cancel()
            await checkpoint()
    assert host.cancelled_caught
    with pytest.raises(RunCancelled, match="host"):
        run.result  # noqa: B018
