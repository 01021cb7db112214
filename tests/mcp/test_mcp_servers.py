"""Real MCP servers (``server.py``) over stdio and loopback HTTP, on asyncio and trio: listing,
concurrent calls, errors, a server that dies mid-call, both lifetimes, timeouts, cancellation.

Nothing waits for time to pass: concurrency is proven by tools that return only once their
partner has arrived, and a test that needs a call to be in flight waits for the server to say
so. Every server-side wait is bounded, so a regression fails instead of hanging.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from agentloop import (
    ActionFinished,
    ActionResult,
    Agent,
    ModelRequest,
    RunCancelled,
    RunResult,
    UserError,
)
from agentloop.mcp import MCPHttpServer, MCPServerError, MCPStdioServer
from agentloop.testing import FunctionModel, Reply, ScriptedModel, call

LIMIT = 20.0  # seconds: a bound on each test, never a synchronisation


def _actions(result: RunResult, step: int) -> dict[str, ActionResult]:
    return {a.name: a for a in result.steps[step].actions}


async def _task_ids() -> set[int]:
    await anyio.lowlevel.checkpoint()
    return {task.id for task in anyio.get_running_tasks()}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_the_servers_tools_are_listed_with_their_schemas(make_server: Any) -> None:
    """Names (a dotted one made safe), descriptions and input schemas; prefix and filters."""
    async with make_server(prefix="t", deny={"crash", "block"}) as server:
        tools = {t.name: t for t in await server.list_tools()}
        assert await server.list_tools() is await server.list_tools()  # listed once
    assert set(tools) == {
        "t_add",
        "t_echo",
        "t_files_read",
        "t_fail",
        "t_chart",
        "t_meet",
        "t_wait_for",
        "t_pid",
    }
    add = next(tools["t_add"].specs())
    assert add.description == "Add two integers."
    assert add.parameters == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    assert next(tools["t_files_read"].specs()).description == "Read a file"  # its title
    echo = next(tools["t_echo"].specs()).parameters
    assert echo["properties"]["times"] == {"type": "integer", "default": 1}


async def test_an_agent_calls_two_mcp_tools_at_once(make_server: Any) -> None:
    """Two calls in one step that each wait for the other on the server: they can only both
    return if they ran at the same time. Structured, text and image results come back."""
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("meet", {"me": "left", "other": "right"}),
                    call("meet", {"me": "right", "other": "left"}),
                    call("add", {"a": 2, "b": 3}),
                    call("chart"),
                    call("files_read", {"path": "/etc/motd"}),
                ]
            ),
            "done",
        ]
    )
    with anyio.fail_after(LIMIT):
        async with make_server(allow={"meet", "add", "chart", "files.read"}) as server:
            result = await Agent(model, tools=[server]).run("go")
    left, right, add, chart, read = result.steps[0].actions
    assert (left.output, right.output) == (
        {"result": "left met right"},
        {"result": "right met left"},
    )
    assert add.output == {"result": 5}
    assert chart.output == "Sales by month\n\n[image: image/png, 108 bytes]"
    assert [(i.media_type, len(i.data or b"")) for i in chart.images] == [("image/png", 108)]
    assert read.output == {"result": "contents of /etc/motd"}
    assert result.output == "done"


async def test_is_error_and_bad_arguments_are_results_the_model_sees(http_url: str) -> None:
    """A tool that answers isError, arguments its schema refuses, an unknown tool: the run goes
    on and the model reads each error."""
    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("fail", {"message": "the disk is full"}),
                    call("add", {"a": "two"}),
                    call("echo", {"text": "still here"}),
                ]
            ),
            "done",
        ]
    )
    with anyio.fail_after(LIMIT):
        async with MCPHttpServer(http_url) as server:
            result = await Agent(model, tools=[server]).run("go")
    fail, add, echo = result.steps[0].actions
    assert fail.error_kind == "tool_error" and fail.error is not None
    assert fail.error.endswith("the disk is full")
    assert add.error_kind == "invalid_arguments"
    assert add.error == (
        "invalid arguments: (arguments): 'b' is a required property; "
        "a: 'two' is not of type 'integer'"
    )
    assert echo.output == {"result": "still here"}
    tool_message = model.requests[1].messages[-1]
    assert "the disk is full" in str(tool_message)


async def test_a_server_that_dies_mid_call_becomes_error_results(
    transport: str, stdio_server: Any, start_http_server: Any
) -> None:
    """The server exits while a call is in flight: that call and the crashing one are error
    results, not a hang; the next call fails saying the server is disconnected; and a run that
    starts on the dead connection fails with MCPServerError."""
    model = ScriptedModel(
        [
            Reply(calls=[call("block", {"key": "k"}), call("crash", {"after": "k"})]),
            Reply(calls=[call("echo", {"text": "hello?"})]),
            "the server is gone",
        ]
    )
    before = await _task_ids()
    with anyio.fail_after(LIMIT):
        if transport == "stdio":
            async with stdio_server() as server:
                result = await Agent(model, tools=[server]).run("go")
                with pytest.raises(MCPServerError, match="is disconnected"):
                    await Agent(ScriptedModel([]), tools=[server]).run("again")
        else:
            with start_http_server() as (url, process):
                async with MCPHttpServer(url) as server:
                    result = await Agent(model, tools=[server]).run("go")
                    assert process.wait() == 3
                    with pytest.raises(MCPServerError, match="is disconnected"):
                        await Agent(ScriptedModel([]), tools=[server]).run("again")
    blocked, crashed = result.steps[0].actions
    for action in (blocked, crashed):
        assert action.error_kind == "tool_error"
        assert "is disconnected" in str(action.error) or "lost the connection" in str(action.error)
    (echo,) = result.steps[1].actions
    assert echo.error_kind == "tool_error" and "is disconnected" in str(echo.error)
    assert result.output == "the server is gone"
    assert await _task_ids() == before


async def test_without_async_with_each_run_connects_for_itself(stdio_server: Any) -> None:
    """Given un-entered, the server is connected by each run and closed when it ends: two
    concurrent runs get two server processes, and both are gone afterwards."""
    server = stdio_server()

    def reply(request: ModelRequest) -> Reply | str:
        done = any(m.role == "tool" for m in request.messages)
        return "done" if done else Reply(calls=[call("pid")])

    agent = Agent(FunctionModel(reply), tools=[server])
    results: list[RunResult] = []

    async def run() -> None:
        results.append(await agent.run("go"))

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            tg.start_soon(run)
    pids = [r.steps[0].actions[0].output["result"] for r in results]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert all(_gone(pid) for pid in pids)
    with pytest.raises(UserError, match="not connected"):
        await server.list_tools()


async def test_an_entered_server_is_one_session_shared_by_concurrent_runs(
    stdio_server: Any,
) -> None:
    """Two runs at once on one entered stdio server meet on it: one process serves both."""

    def model(me: str, other: str) -> ScriptedModel:
        return ScriptedModel([Reply(calls=[call("meet", {"me": me, "other": other})]), "met"])

    outputs: list[Any] = []
    with anyio.fail_after(LIMIT):
        async with stdio_server() as server:

            async def run(me: str, other: str) -> None:
                result = await Agent(model(me, other), tools=[server]).run("go")
                outputs.append(result.steps[0].actions[0].output)

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "run1", "run2")
                tg.start_soon(run, "run2", "run1")
    assert sorted(o["result"] for o in outputs) == ["run1 met run2", "run2 met run1"]


async def test_cancelling_a_run_cancels_its_mcp_calls_and_closes_the_server(
    stdio_server: Any,
) -> None:
    """A run cancelled while a call waits on the server ends at once: the call is abandoned,
    the run's own connection closes and its process is gone; nothing leaks."""
    model = ScriptedModel(
        [Reply(calls=[call("block", {"key": "k"}), call("wait_for", {"key": "k"}), call("pid")])]
    )
    agent = Agent(model, tools=[stdio_server()])
    finished: dict[str, ActionResult] = {}
    before = await _task_ids()
    with anyio.fail_after(LIMIT):
        async with agent.stream("go") as run:
            async for event in run:
                if isinstance(event, ActionFinished):
                    finished[event.result.name] = event.result
                    if {"wait_for", "pid"} <= finished.keys():  # block is on the server now
                        run.cancel("enough")
    with pytest.raises(RunCancelled, match="enough"):
        _ = run.result
    assert "block" not in finished
    assert _gone(finished["pid"].output["result"])
    assert await _task_ids() == before


async def test_a_slow_call_times_out_and_the_connection_stays_usable(http_url: str) -> None:
    """tool_timeout bounds each call (a timeout error result); the session is still fine. The
    bound leaves the echo after it room on a loaded machine: it applies to every call."""
    model = ScriptedModel(
        [
            Reply(calls=[call("block", {"key": "slow"})]),
            Reply(calls=[call("echo", {"text": "after"})]),
            "done",
        ]
    )
    with anyio.fail_after(LIMIT):
        async with MCPHttpServer(http_url, tool_timeout=1.0) as server:
            result = await Agent(model, tools=[server]).run("go")
    (slow,) = result.steps[0].actions
    assert slow.error_kind == "timeout" and slow.error == "timed out after 1s"
    assert result.steps[1].actions[0].output == {"result": "after"}


async def test_a_server_that_cannot_start_or_answer_is_a_clear_error(tmp_path: Any) -> None:
    """A missing command, a process that never answers the handshake (bounded by timeout, then
    closed), and a URL where nothing listens: MCPServerError naming the server."""
    with anyio.fail_after(LIMIT):
        with pytest.raises(MCPServerError, match="could not connect to MCP server 'nope'"):
            async with MCPStdioServer(str(tmp_path / "no-such-command"), name="nope"):
                pass
        silent = MCPStdioServer(
            sys.executable, ["-c", "import sys; sys.stdin.read()"], name="silent", timeout=0.5
        )
        with pytest.raises(
            MCPServerError, match=r"'silent' did not finish connecting within 0\.5s"
        ):
            async with silent:
                pass
        with socket.socket() as sock:  # a port nothing listens on
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with pytest.raises(MCPServerError, match="could not connect"):
            async with MCPHttpServer(f"http://127.0.0.1:{port}/mcp"):
                pass
