"""Concurrent actions, eager dispatch, sync tools in threads, and many runs of one agent."""

from __future__ import annotations

import random
import threading
import time

import anyio
import pytest

from agentloop import (
    ActionStarted,
    Agent,
    ModelCallFinished,
    ModelRequest,
    StepFinished,
    ToolLimits,
    tool,
)
from agentloop.models import ToolResultPart
from agentloop.testing import FunctionModel, Reply, ScriptedModel, call


@tool
async def sleep_for(seconds: float) -> float:
    """Sleep, then return the seconds slept."""
    await anyio.sleep(seconds)
    return seconds


@tool(eager=False)
async def sleep_later(seconds: float) -> float:
    """Like sleep_for, but waits for the whole reply before starting."""
    await anyio.sleep(seconds)
    return seconds


@pytest.mark.fake_clock
async def test_actions_of_one_step_run_concurrently(fake_time: bool, timescale: float) -> None:
    """A step with a 1 s and a 2 s action takes 2 s, not 3 s."""
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("sleep_for", {"seconds": 1.0 * timescale}),
                    call("sleep_for", {"seconds": 2.0 * timescale}),
                ]
            ),
            "done",
        ]
    )
    start = anyio.current_time()
    result = await Agent(model, tools=[sleep_for]).run("go")
    elapsed = anyio.current_time() - start
    assert [a.output for a in result.steps[0].actions] == [1.0 * timescale, 2.0 * timescale]
    if fake_time:
        assert elapsed == pytest.approx(2.0)
    else:
        assert elapsed < 3.0 * timescale + 1.0


async def _step_times(agent: Agent) -> tuple[list[float], list[str]]:
    """Times of StepFinished events, and the order of starts vs the end of the stream."""
    start = anyio.current_time()
    times: list[float] = []
    order: list[str] = []
    async with agent.stream("go") as run:
        async for event in run:
            if isinstance(event, StepFinished):
                times.append(anyio.current_time() - start)
            elif isinstance(event, ActionStarted):
                order.append(f"start:{event.tag}")
            elif isinstance(event, ModelCallFinished):
                order.append("stream-end")
    assert run.result.ok
    return times, order


def _timed_reply(tool_name: str, timescale: float) -> Reply:
    s = timescale
    return Reply(
        timeline=[
            (0.4 * s, call(tool_name, {"seconds": 1.0 * s}, id="a")),
            (1.0 * s, call(tool_name, {"seconds": 1.0 * s}, id="b")),
            (2.0 * s, ""),
        ]
    )


@pytest.mark.fake_clock
@pytest.mark.parametrize("mode", ["native", "react"])
async def test_eager_dispatch_overlaps_tools_with_the_stream(
    fake_time: bool, timescale: float, mode: str
) -> None:
    """Calls sealed at 0.4 s and 1.0 s of a 2.0 s stream, 1 s each: the step ends at 2.0 s."""
    model = ScriptedModel([_timed_reply("sleep_for", timescale), "done"])
    agent = Agent(model, tools=[sleep_for], tool_mode=mode)  # type: ignore[arg-type]
    times, order = await _step_times(agent)
    assert order == ["start:a", "start:b", "stream-end", "stream-end"]
    if fake_time:
        assert times[0] == pytest.approx(2.0)


@pytest.mark.fake_clock
@pytest.mark.parametrize("mode", ["native", "react"])
async def test_eager_false_waits_for_the_whole_reply(
    fake_time: bool, timescale: float, mode: str
) -> None:
    """The same reply with eager=False tools ends its step at 3.0 s."""
    model = ScriptedModel([_timed_reply("sleep_later", timescale), "done"])
    agent = Agent(model, tools=[sleep_later], tool_mode=mode)  # type: ignore[arg-type]
    times, order = await _step_times(agent)
    assert order == ["stream-end", "start:a", "start:b", "stream-end"]
    if fake_time:
        assert times[0] == pytest.approx(3.0)


@pytest.mark.fake_clock
async def test_react_actions_start_as_each_object_closes(fake_time: bool, timescale: float) -> None:
    """Three ReAct actions closing at 0.4, 0.7 and 1.0 s of a 2 s reply: step ends at 2.0 s."""
    s = timescale
    objects = [
        f'{{"tag": "{tag}", "name": "sleep_for", "path": "sleep_for", "input": {{"seconds": {s}}}}}'
        for tag in "abc"
    ]
    reply = Reply(
        timeline=[
            (0.0, "Thought: three at once\nActions: ["),
            (0.4 * s, objects[0]),
            (0.7 * s, ", " + objects[1]),
            (1.0 * s, ", " + objects[2] + "]"),
            (2.0 * s, "\n"),
        ]
    )
    agent = Agent(ScriptedModel([reply, "done"], native_tools=False), tools=[sleep_for])
    times, order = await _step_times(agent)
    assert order[:4] == ["start:a", "start:b", "start:c", "stream-end"]
    if fake_time:
        assert times[0] == pytest.approx(2.0)


async def test_sync_tools_do_not_block_the_event_loop() -> None:
    """A heartbeat keeps ticking while a plain-def tool sleeps in a worker thread."""
    thread_ids: list[int] = []

    @tool
    def blocking(seconds: float) -> str:
        """A test tool."""
        thread_ids.append(threading.get_ident())
        time.sleep(seconds)
        return "slept"

    ticks = 0
    model = ScriptedModel([Reply(calls=[call("blocking", {"seconds": 0.3})]), "done"])

    async with anyio.create_task_group() as tg:

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await anyio.sleep(0.01)
                ticks += 1

        tg.start_soon(heartbeat)
        result = await Agent(model, tools=[blocking]).run("go")
        tg.cancel_scope.cancel()
    assert result.steps[0].actions[0].output == "slept"
    assert thread_ids and thread_ids[0] != threading.get_ident()
    assert ticks >= 5


async def test_abandoned_sync_tool_keeps_its_limiter_token_until_its_thread_ends() -> None:
    """On timeout the run goes on at once; the thread's token is held until it returns."""
    release = threading.Event()
    finished = threading.Event()

    @tool(timeout=0.05)
    def stuck() -> str:
        """A test tool."""
        try:
            release.wait(10)
            return "late"
        finally:
            finished.set()

    limiter = anyio.CapacityLimiter(1)
    model = ScriptedModel([Reply(calls=[call("stuck", {})]), "gave up"])
    agent = Agent(model, tools=[stuck], tool_limits=ToolLimits(thread_limiter=limiter))
    result = await agent.run("go")
    assert result.steps[0].actions[0].error_kind == "timeout"
    assert result.output == "gave up"
    assert not finished.is_set()
    assert limiter.borrowed_tokens == 1
    release.set()
    with anyio.fail_after(5):
        while limiter.borrowed_tokens:  # noqa: ASYNC110 - the thread releases it, not a task
            await anyio.sleep(0.01)
    assert finished.is_set()


async def test_abandoned_sync_tool_sees_read_only_state() -> None:
    """After abandonment a sync tool can no longer write the run's state."""
    from agentloop import ToolContext, UserError

    release = threading.Event()
    outcome: list[str] = []

    @tool(timeout=0.05)
    def writer(ctx: ToolContext) -> str:
        """A test tool."""
        release.wait(10)
        try:
            ctx.state["late"] = True
        except UserError:
            outcome.append("refused")
        return "x"

    model = ScriptedModel([Reply(calls=[call("writer", {})]), "done"])
    result = await Agent(model, tools=[writer]).run("go")
    release.set()
    with anyio.fail_after(5):
        while not outcome:  # noqa: ASYNC110 - a worker thread appends to it
            await anyio.sleep(0.01)
    assert outcome == ["refused"] and "late" not in (result.state or {})


async def test_a_hundred_concurrent_runs_of_one_agent_do_not_cross_talk() -> None:
    """Each run sees only its own input, tool results and answer."""

    @tool
    async def echo(value: str) -> str:
        """A test tool."""
        await anyio.sleep(random.random() / 100)
        return f"echo:{value}"

    async def reply(request: ModelRequest) -> Reply | str:
        await anyio.sleep(random.random() / 100)
        user = next(m.text for m in request.messages if m.role == "user")
        results = [
            p.content
            for m in request.messages
            if m.role == "tool"
            for p in m.parts
            if isinstance(p, ToolResultPart)
        ]
        if not results:
            return Reply(calls=[call("echo", {"value": user})])
        return f"{user} -> {results[0]}"

    agent = Agent(FunctionModel(reply, chunk_size=3), tools=[echo])
    outputs: dict[int, str] = {}

    async def one(i: int) -> None:
        outputs[i] = (await agent.run(f"run-{i}")).unwrap()

    async with anyio.create_task_group() as tg:
        for i in range(100):
            tg.start_soon(one, i)
    assert outputs == {i: f"run-{i} -> echo:run-{i}" for i in range(100)}


async def test_per_step_parallelism_is_bounded() -> None:
    """No more than max_parallel_actions actions of a run run at once."""
    running = peak = 0

    @tool
    async def busy() -> str:
        """A test tool."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01)
        running -= 1
        return "ok"

    model = ScriptedModel([Reply(calls=[call("busy", {}, id=f"c{i}") for i in range(10)]), "done"])
    agent = Agent(model, tools=[busy], tool_limits=ToolLimits(max_parallel_actions=3))
    result = await agent.run("go")
    assert len(result.steps[0].actions) == 10 and peak == 3


async def test_a_parallel_slot_handed_to_a_cancelled_waiter_goes_to_the_next() -> None:
    """The run's parallel slots (no limiter object per run): first come, first served, and a
    slot given to a waiter cancelled before it ran again is passed on, not lost."""
    from agentloop._actions import _Slots  # pyright: ignore[reportPrivateUsage]

    slots = _Slots(1)
    assert slots.take_nowait() and not slots.take_nowait()
    got: list[str] = []

    async def wait(name: str, scope: anyio.CancelScope) -> None:
        with scope:
            await slots.take()
            got.append(name)
            slots.give()

    first, second = anyio.CancelScope(), anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, "first", first)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(wait, "second", second)
        await anyio.wait_all_tasks_blocked()
        slots.give()  # to the first waiter...
        first.cancel()  # ...cancelled before it runs (trio lets it take the slot first)
    assert got[-1] == "second" and got in (["second"], ["first", "second"])
    assert slots.take_nowait() and not slots.take_nowait()  # the one slot, back and free


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_full_limiter_raising_trios_would_block_has_no_token_free() -> None:
    """anyio before 4.15 passes a trio limiter's own ``WouldBlock`` on (its limiter wraps
    ``trio.CapacityLimiter``, as this test uses it directly): that means "none free" too, so an
    action waits for a token instead of failing with "WouldBlock"."""
    import trio

    from agentloop._threads import borrow_nowait

    limiter = trio.CapacityLimiter(1)
    assert borrow_nowait(limiter, "first")  # type: ignore[arg-type]
    assert not borrow_nowait(limiter, "second")  # type: ignore[arg-type]
    limiter.release_on_behalf_of("first")
    assert borrow_nowait(limiter, "second")  # type: ignore[arg-type]


async def test_actions_beyond_the_per_step_limit_are_not_run() -> None:
    """A reply with more actions than allowed gets error results for the excess."""
    count = 0

    @tool
    async def tick() -> int:
        """A test tool."""
        nonlocal count
        count += 1
        return count

    model = ScriptedModel([Reply(calls=[call("tick", {}, id=f"c{i}") for i in range(5)]), "done"])
    agent = Agent(model, tools=[tick], tool_limits=ToolLimits(max_actions_per_step=3))
    result = await agent.run("go")
    kinds = [a.error_kind for a in result.steps[0].actions]
    assert kinds == [None, None, None, "too_many_actions", "too_many_actions"]
    assert count == 3


async def test_tools_that_return_at_once_take_no_task_of_their_own() -> None:
    """Two calls whose tools return without suspending run in the run's own task, one after
    the other (a task each would run no sooner): a tool call costs no task, cancel scope and
    event when it never waits."""
    tasks: list[int] = []

    @tool
    async def where(n: int) -> int:
        """The task this call runs in."""
        tasks.append(anyio.get_current_task().id)
        return n

    model = ScriptedModel([Reply(calls=[call("where", {"n": 1}), call("where", {"n": 2})]), "ok"])
    result = await Agent(model, tools=[where]).run("go")
    assert [a.output for a in result.steps[0].actions] == [1, 2]
    assert tasks[0] == tasks[1]


async def test_a_tool_that_waits_in_the_runs_task_does_not_hold_up_the_others() -> None:
    """The first call waits for the second to run: the second starts the moment the first
    suspends (else the step would never end)."""
    met = anyio.Event()

    @tool
    async def wait_for_other() -> str:
        """Waits until the other call ran."""
        with anyio.fail_after(5):
            await met.wait()
        return "met"

    @tool
    async def meet() -> str:
        """Lets the other call go on."""
        met.set()
        return "here"

    model = ScriptedModel([Reply(calls=[call("wait_for_other", {}), call("meet", {})]), "ok"])
    result = await Agent(model, tools=[wait_for_other, meet]).run("go")
    assert [a.output for a in result.steps[0].actions] == ["met", "here"]


async def test_a_context_variable_a_tool_sets_stays_its_own() -> None:
    """A tool runs in a copy of the run's context, as in a task of its own: what it sets is
    seen neither by the other calls nor by the run."""
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    @tool
    async def set_var(value: str) -> str:
        """Sets the variable; returns what it was."""
        seen.append(var.get())
        var.set(value)
        return value

    model = ScriptedModel(
        [Reply(calls=[call("set_var", {"value": "a"}), call("set_var", {"value": "b"})]), "ok"]
    )
    assert (await Agent(model, tools=[set_var]).run("go")).ok
    assert seen == ["unset", "unset"]
    assert var.get() == "unset"
