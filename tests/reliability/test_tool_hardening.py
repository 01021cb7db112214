"""Tool hardening: nulls for undeclared keys, stuck worker threads, daemon threads, tools that
block the event loop, exceptions that are not the tool's to raise, oversized error messages and
deeply nested arguments. Each is an error result on one action (or the documented behaviour),
never a hung or crashed run."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel

from agentloop import (
    ActionFinished,
    ActionStarted,
    Agent,
    RunDeadlineExceeded,
    ToolError,
    ToolLimits,
    tool,
)
from agentloop.sessions import InMemoryStore, RunEndRecord
from agentloop.testing import Reply, ScriptedModel, call

# -- A: nulls ------------------------------------------------------------------------------------


@tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Window(BaseModel):
    start: int
    end: int | None = None


@tool
async def report(city: str, window: Window) -> str:
    """A report for a city over a window."""
    return f"{city}:{window.start}-{window.end}"


async def test_a_null_for_an_undeclared_key_is_dropped_and_the_tool_runs() -> None:
    """{"city": "Oslo", "format": null} to weather(city) runs the tool; ActionStarted and the
    result show the input the tool received."""
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("weather", {"city": "Oslo", "format": None}),
                    call("report", {"city": "Oslo", "window": {"start": 1, "unit": None}}),
                ]
            ),
            "done",
        ]
    )
    agent = Agent(model, tools=[weather, report])
    async with agent.stream("go") as run:
        events = [event async for event in run]
    started = {e.name: e.input for e in events if isinstance(e, ActionStarted)}
    finished = {e.result.name: e.result for e in events if isinstance(e, ActionFinished)}
    assert {name: r.error for name, r in finished.items()} == {"weather": None, "report": None}
    assert finished["weather"].output == "sunny in Oslo"
    assert finished["report"].output == "Oslo:1-None"
    assert started == {
        "weather": {"city": "Oslo"},
        "report": {"city": "Oslo", "window": {"start": 1}},
    }
    assert {name: r.input for name, r in finished.items()} == started


async def test_a_non_null_undeclared_key_is_still_an_error_the_model_sees() -> None:
    model = ScriptedModel([Reply(calls=[call("weather", {"city": "Oslo", "format": "c"})]), "ok"])
    result = await Agent(model, tools=[weather]).run("go")
    action = result.steps[0].actions[0]
    assert action.error_kind == "invalid_arguments" and "format" in (action.error or "")


# -- B: stuck worker threads ---------------------------------------------------------------------


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown: threads blocked on it end, so the suite leaks none."""
    event = threading.Event()
    yield event
    event.set()


async def _wait_for(flag: threading.Event) -> None:
    with anyio.fail_after(5):
        while not flag.is_set():  # noqa: ASYNC110 - a worker thread sets it
            await anyio.sleep(0.01)


async def test_a_tools_timeout_covers_its_wait_for_a_worker_thread(
    release: threading.Event,
) -> None:
    """A sync tool whose thread limiter is busy times out after its own timeout."""
    busy_started = threading.Event()

    @tool
    def busy() -> str:
        """A test tool."""
        busy_started.set()
        release.wait()
        return "done"

    @tool(timeout=0.05)
    def quick() -> str:
        """A test tool."""
        return "quick"

    limits = ToolLimits(thread_limiter=anyio.CapacityLimiter(1))
    busy_agent = Agent(ScriptedModel([Reply(calls=[call("busy")]), "ok"]), tools=[busy])
    quick_agent = Agent(ScriptedModel([Reply(calls=[call("quick")]), "ok"]), tools=[quick])
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: busy_agent.replace(tool_limits=limits).run("go"))
        await _wait_for(busy_started)
        try:
            with anyio.fail_after(5):
                result = await quick_agent.replace(tool_limits=limits).run("go")
        finally:
            release.set()
    action = result.steps[0].actions[0]
    assert action.error_kind == "timeout", action
    assert "worker thread" in (action.error or "")


async def test_abandoned_threads_do_not_starve_sync_tools(
    release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """When every token is held by an abandoned thread, a sync call is an error result naming
    the stuck tools at once, not a hang; each abandonment is a warning naming the tool."""
    stuck_count = 0

    @tool(timeout=0.05)
    def stuck() -> str:
        """A test tool."""
        nonlocal stuck_count
        stuck_count += 1
        release.wait()
        return "late"

    @tool
    def fine() -> str:
        """A test tool."""
        return "fine"

    limiter = anyio.CapacityLimiter(2)
    model = ScriptedModel(
        [
            Reply(calls=[call("stuck", id="s1"), call("stuck", id="s2")]),
            Reply(calls=[call("fine")]),
            "done",
        ]
    )
    agent = Agent(model, tools=[stuck, fine], tool_limits=ToolLimits(thread_limiter=limiter))
    with caplog.at_level(logging.WARNING, logger="agentloop"), anyio.fail_after(5):
        result = await agent.run("go")
    assert [a.error_kind for a in result.steps[0].actions] == ["timeout", "timeout"]
    action = result.steps[1].actions[0]
    assert action.error_kind == "tool_error", action
    assert "2 worker threads are stuck" in (action.error or "") and "stuck" in (action.error or "")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("'stuck'" in w and "abandoned" in w for w in warnings) == 2, warnings
    assert limiter.borrowed_tokens == 2  # the abandoned threads still hold theirs
    release.set()
    with anyio.fail_after(5):
        while limiter.borrowed_tokens:  # noqa: ASYNC110 - the threads give them back
            await anyio.sleep(0.01)
    again = await Agent(
        ScriptedModel([Reply(calls=[call("fine")]), "done"]),
        tools=[fine],
        tool_limits=ToolLimits(thread_limiter=limiter),
    ).run("go")
    assert again.steps[0].actions[0].output == "fine"


async def test_a_call_waiting_for_a_thread_fails_when_the_last_token_gets_stuck(
    release: threading.Event,
) -> None:
    """A sync call (no timeout) waits while a working thread holds the only token; when that
    thread is abandoned, the waiting call becomes an error result instead of waiting on."""
    started = threading.Event()

    @tool(timeout=0.3)
    def hangs() -> str:
        """A test tool."""
        started.set()
        release.wait()
        return "late"

    @tool
    def patient() -> str:
        """A test tool."""
        return "ran"

    limits = ToolLimits(thread_limiter=anyio.CapacityLimiter(1))
    first = Agent(ScriptedModel([Reply(calls=[call("hangs")]), "ok"]), tools=[hangs])
    second = Agent(ScriptedModel([Reply(calls=[call("patient")]), "ok"]), tools=[patient])
    outcomes: dict[str, Any] = {}

    async def run_first() -> None:
        outcomes["first"] = await first.replace(tool_limits=limits).run("go")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_first)
            await _wait_for(started)
            outcomes["second"] = await second.replace(tool_limits=limits).run("go")
    assert outcomes["first"].steps[0].actions[0].error_kind == "timeout"
    action = outcomes["second"].steps[0].actions[0]
    assert action.error_kind == "tool_error", action
    assert "1 worker thread is stuck" in (action.error or "") and "'hangs'" in (action.error or "")


# -- C: abandoned threads never keep the interpreter alive ---------------------------------------


_HANGING_SCRIPT = """
import threading, sys
from agentloop import Agent, tool
from agentloop.testing import Reply, ScriptedModel, call

@tool(timeout=0.2)
def hang() -> str:
    threading.Event().wait()  # a socket read without a timeout
    return "never"

model = ScriptedModel([Reply(calls=[call("hang")]), "gave up"])
result = Agent(model, tools=[hang]).run_sync("go", backend=sys.argv[1])
print(result.steps[0].actions[0].error_kind, result.output, flush=True)
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_abandoned_thread_does_not_keep_the_process_alive(backend: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HANGING_SCRIPT, backend],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["timeout", "gave", "up"]


# -- D: async tools that block the event loop ----------------------------------------------------


@tool(timeout=0.05)
async def blocks_past_its_timeout() -> str:
    """Blocks the event loop (time.sleep in async def)."""
    time.sleep(0.3)  # noqa: ASYNC251 - the point: it blocks the loop
    return "late"


async def test_late_output_of_a_blocking_async_tool_is_a_timeout() -> None:
    model = ScriptedModel([Reply(calls=[call("blocks_past_its_timeout")]), "done"])
    result = await Agent(model, tools=[blocks_past_its_timeout]).run("go")
    action = result.steps[0].actions[0]
    assert action.error_kind == "timeout" and action.output is None, action


async def test_late_output_after_the_runs_deadline_is_not_accepted() -> None:
    @tool
    async def blocking() -> str:
        """A test tool."""
        time.sleep(0.3)  # noqa: ASYNC251 - the point: it blocks the loop
        return "late"

    model = ScriptedModel([Reply(calls=[call("blocking")]), "done"])
    agent = Agent(model, tools=[blocking], deadline=0.05)
    events: list[Any] = []
    try:
        async with agent.stream("go") as run:
            async for event in run:
                events.append(event)
    except RunDeadlineExceeded:
        pass  # the run ends at its deadline; what matters is what its action reported
    outputs = [e.result.output for e in events if isinstance(e, ActionFinished)]
    assert "late" not in outputs


async def test_a_tool_that_blocks_the_loop_is_named_in_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool
    async def hog() -> str:
        """A test tool."""
        await anyio.lowlevel.checkpoint()
        time.sleep(0.2)  # noqa: ASYNC251 - the point: it blocks the loop
        return "hogged"

    @tool
    async def polite() -> str:
        """A test tool."""
        await anyio.sleep(0.2)
        return "slept"

    model = ScriptedModel([Reply(calls=[call("hog"), call("polite")]), "done"])
    with caplog.at_level(logging.WARNING, logger="agentloop"):
        result = await Agent(model, tools=[hog, polite]).run("go")
    assert [a.output for a in result.steps[0].actions] == ["hogged", "slept"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'hog'" in w and "blocked the event loop" in w for w in warnings), warnings
    assert not any("'polite'" in w for w in warnings), warnings


# -- E: exceptions that are not the tool's to raise ----------------------------------------------


def _spurious_cancel() -> BaseException:
    cancelled = anyio.get_cancelled_exc_class()
    if cancelled.__module__.startswith("trio"):
        return cancelled._create()  # type: ignore[attr-defined,no-any-return]
    return cancelled()


async def test_a_cancelled_error_raised_by_a_tool_is_an_error_result() -> None:
    """Nobody cancelled: a CancelledError (trio.Cancelled) from a tool is that action's error."""

    @tool
    async def confused() -> str:
        """A test tool."""
        raise _spurious_cancel()

    @tool
    def confused_sync() -> str:
        """A test tool."""
        raise _spurious_cancel()

    model = ScriptedModel(
        [
            Reply(calls=[call("confused"), call("confused_sync"), call("weather", {"city": "A"})]),
            "ok",
        ]
    )
    result = await Agent(model, tools=[confused, confused_sync, weather]).run("go")
    kinds = [a.error_kind for a in result.steps[0].actions]
    assert kinds == ["tool_error", "tool_error", None], result.steps[0].actions
    assert "Cancel" in (result.steps[0].actions[0].error or "")
    assert result.output == "ok"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_system_exit_from_a_tool_propagates_bare_and_is_not_recorded_cancelled(
    sync: bool,
) -> None:
    if sync:

        @tool
        def leave() -> str:
            """A test tool."""
            raise SystemExit(3)

    else:

        @tool
        async def leave() -> str:
            """A test tool."""
            raise SystemExit(3)

    store = InMemoryStore()
    model = ScriptedModel([Reply(calls=[call("leave"), call("weather", {"city": "A"})]), "ok"])
    agent = Agent(model, tools=[leave, weather], store=store)
    with pytest.raises(SystemExit) as info:
        await agent.run("go", session="s")
    assert info.value.code == 3
    session = await store.get("s")
    assert session is not None
    ends = [r for r in session.history if isinstance(r, RunEndRecord)]
    assert not any(r.status == "cancelled" for r in ends), ends


_INTERRUPT_SCRIPT = """
import sys
from agentloop import Agent, tool
from agentloop.testing import Reply, ScriptedModel, call

@tool
async def interrupt() -> str:
    raise KeyboardInterrupt

@tool
def interrupt_sync() -> str:
    raise KeyboardInterrupt

name = sys.argv[2]
model = ScriptedModel([Reply(calls=[call(name)]), "ok"])
try:
    Agent(model, tools=[interrupt, interrupt_sync]).run_sync("go", backend=sys.argv[1])
except KeyboardInterrupt:
    print("KeyboardInterrupt")
except BaseException as exc:
    print("other", type(exc).__name__, repr(exc))
"""


@pytest.mark.parametrize("name", ["interrupt", "interrupt_sync"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_keyboard_interrupt_from_a_tool_propagates_bare(backend: str, name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_SCRIPT, backend, name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "KeyboardInterrupt", (done.stdout, done.stderr)


# -- F: error messages are truncated like outputs ------------------------------------------------


async def test_error_messages_are_truncated_like_outputs() -> None:
    @tool
    async def loud() -> str:
        """A test tool."""
        raise ToolError("e" * 5000)

    @tool
    def crash() -> str:
        """A test tool."""
        raise ValueError("v" * 5000)

    async def rewrite(call_: Any, call_next: Any) -> Any:
        result = await call_next(call_)
        if call_.action.name == "weather":
            from dataclasses import replace

            return replace(result, output=None, error="m" * 5000, error_kind="tool_error")
        return result

    model = ScriptedModel(
        [Reply(calls=[call("loud"), call("crash"), call("weather", {"city": "A"})]), "ok"]
    )
    agent = Agent(
        model,
        tools=[loud, crash, weather],
        tool_middleware=[rewrite],
        tool_limits=ToolLimits(max_output_chars=100),
    )
    result = await agent.run("go")
    errors = [a.error or "" for a in result.steps[0].actions]
    assert errors[0] == "e" * 100 + "\n…[truncated 4900 characters]"
    assert errors[1].startswith("ValueError: v") and errors[1].endswith(
        "…[truncated 4912 characters]"
    )
    assert len(errors[1]) == 100 + len("\n…[truncated 4912 characters]")
    assert errors[2] == "m" * 100 + "\n…[truncated 4900 characters]"
    replayed = json.dumps([m.text for m in model.requests[1].messages])
    assert "e" * 101 not in replayed


# -- G: deeply nested arguments ------------------------------------------------------------------


class Node(BaseModel):
    child: Node | None = None


@tool
async def take(data: Any = None) -> str:
    """Take anything."""
    return "took"


@tool
async def tree(node: Node) -> str:
    """Take a tree."""
    return "tree"


DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    "arguments",
    [
        '{"data": ' + DEEP + "}",
        '{"data": ' + "[" * 100 + "]" * 100 + "}",
        DEEP,
    ],
    ids=["5000-deep", "100-deep", "deep-not-an-object"],
)
async def test_deeply_nested_native_arguments_are_invalid_arguments(arguments: str) -> None:
    model = ScriptedModel([Reply(calls=[call("take", arguments)]), "done"])
    store = InMemoryStore()
    result = await Agent(model, tools=[take], store=store).run("go", session="s")
    action = result.steps[0].actions[0]
    assert action.error_kind == "invalid_arguments", action.error_kind
    assert "nested" in (action.error or "") and len(action.error or "") < 500
    assert result.output == "done"
    session = await store.get("s")
    assert session is not None
    assert [r.status for r in session.history if isinstance(r, RunEndRecord)] == ["finished"]


async def test_deep_arguments_for_a_recursive_schema_are_invalid_arguments() -> None:
    arguments = '{"node": ' + '{"child": ' * 600 + "null" + "}" * 600 + "}"
    model = ScriptedModel([Reply(calls=[call("tree", arguments)]), "done"])
    result = await Agent(model, tools=[tree]).run("go")
    action = result.steps[0].actions[0]
    assert action.error_kind == "invalid_arguments", action.error_kind


@pytest.mark.parametrize("depth", [100, 5000])
async def test_deeply_nested_react_input_is_an_error_result(depth: int) -> None:
    data = "[" * depth + "]" * depth
    text = (
        "Thought: x\nActions: ["
        '{"tag": "a", "name": "take", "path": "take", "input": {"data": ' + data + "}}]"
    )
    model = ScriptedModel(
        [Reply(timeline=[(0.0, text)]), Reply(timeline=[(0.0, "Answer: done")])],
        native_tools=False,
    )
    result = await Agent(model, tools=[take]).run("go")
    action = result.steps[0].actions[0]
    expected = "invalid_arguments" if depth == 100 else "invalid_action"
    assert action.error_kind == expected, action.error_kind
    assert result.output == "done"


# -- G: sync tools keep anyio's worker-thread contract -------------------------------------------


async def test_a_sync_tool_reaches_the_event_loop_through_anyio_from_thread() -> None:
    """A sync tool runs as anyio documents for worker threads: ``anyio.from_thread.run_sync``
    and ``anyio.from_thread.run`` reach the run's event loop, with no token passed."""
    loop_thread = threading.get_ident()

    def where() -> int:
        return threading.get_ident()

    async def where_async() -> tuple[int, str]:
        await anyio.lowlevel.checkpoint()
        import sniffio

        return threading.get_ident(), sniffio.current_async_library()

    @tool
    def calls_back() -> str:
        """A test tool."""
        import anyio.from_thread

        in_thread = threading.get_ident()
        sync_ident = anyio.from_thread.run_sync(where)
        async_ident, library = anyio.from_thread.run(where_async)
        return json.dumps([in_thread != loop_thread, sync_ident, async_ident, library])

    model = ScriptedModel([Reply(calls=[call("calls_back")]), "done"])
    with anyio.fail_after(5):
        result = await Agent(model, tools=[calls_back]).run("go")
    action = result.steps[0].actions[0]
    assert action.error is None, action.error
    off_loop, sync_ident, async_ident, library = json.loads(str(action.output))
    import sniffio

    assert off_loop and sync_ident == loop_thread and async_ident == loop_thread
    assert library == sniffio.current_async_library()


async def test_a_sync_tool_calling_back_still_holds_the_thread_bounds(
    release: threading.Event,
) -> None:
    """The worker thread that calls back into the loop is still one of the limiter's: a second
    call waits for its token, and the token is given back when the tool ends."""
    limiter = anyio.CapacityLimiter(1)
    peak = 0

    def note() -> None:
        nonlocal peak
        peak = max(peak, int(limiter.borrowed_tokens))

    @tool
    def calls_back(n: int) -> str:
        """A test tool."""
        import anyio.from_thread

        anyio.from_thread.run_sync(note)
        return str(n)

    model = ScriptedModel(
        [
            Reply(
                calls=[call("calls_back", {"n": 1}, id="a"), call("calls_back", {"n": 2}, id="b")]
            ),
            "done",
        ]
    )
    agent = Agent(model, tools=[calls_back], tool_limits=ToolLimits(thread_limiter=limiter))
    with anyio.fail_after(5):
        result = await agent.run("go")
    assert [a.output for a in result.steps[0].actions] == ["1", "2"]
    assert peak == 1 and limiter.borrowed_tokens == 0
