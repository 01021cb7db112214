"""agentloop against ``@modelcontextprotocol/server-everything`` (the MCP project's reference
server, pinned in ``tests/js``), over stdio and loopback streamable HTTP, on asyncio and trio:
progress notifications, a tool list that changes, resources and prompts, sampling and
elicitation.

Nothing here mocks the SDK or the server: each test speaks to the real Node server through the
real ``mcp`` client.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentloop import Agent
from agentloop.testing import Reply, ScriptedModel, call

LIMIT = 30.0  # seconds: a bound on each test, never a synchronisation

pytestmark = pytest.mark.slow


async def test_progress_notifications_stream_as_action_progress_events(everything: Any) -> None:
    """A long-running tool's ``notifications/progress`` reach the caller while it runs: the
    call carries a progress token, each notification is an ``ActionProgress`` event between
    the action's start and its end."""
    model = ScriptedModel(
        [
            Reply(calls=[call("trigger-long-running-operation", {"duration": 0.3, "steps": 3})]),
            "done",
        ]
    )
    seen: list[tuple[str, Any]] = []
    with anyio.fail_after(LIMIT):
        async with everything(allow={"trigger-long-running-operation"}) as server:
            agent = Agent(model, tools=[server])
            async with agent.stream("go") as events:
                async for event in events:
                    if event.type == "action_progress":
                        seen.append((event.type, (event.progress, event.total, event.tag)))
                    elif event.type in ("action_started", "action_finished"):
                        seen.append((event.type, None))
    tag = "call_1"
    assert seen == [
        ("action_started", None),
        ("action_progress", (1.0, 3.0, tag)),
        ("action_progress", (2.0, 3.0, tag)),
        ("action_progress", (3.0, 3.0, tag)),
        ("action_finished", None),
    ]


async def _names(server: Any) -> set[str]:
    return {t.name for t in await server.list_tools()}


async def test_a_tool_list_changed_notification_refreshes_the_tools_of_the_next_model_call(
    everything: Any,
) -> None:
    """A call makes the server register a tool; its SDK sends
    ``notifications/tools/list_changed``. The run's next model call offers the new tool, and the
    model can call it. (The notification travels apart from the call's answer, so the test waits,
    bounded, until the connection has heard it before the run goes on.)"""

    async def after_registering(tool_call: Any, call_next: Any) -> Any:
        result = await call_next(tool_call)
        if tool_call.action.name == "register-late-tool":
            for _ in range(1000):  # 10 s at most: on main it never comes (the asserts say so)
                if "late-tool" in await _names(server):
                    break
                await anyio.sleep(0.01)
        return result

    model = ScriptedModel(
        [
            Reply(calls=[call("register-late-tool")]),
            Reply(calls=[call("late-tool", {"text": "hi"})]),
            "done",
        ]
    )
    with anyio.fail_after(LIMIT):
        async with everything() as server:
            before = await _names(server)
            agent = Agent(model, tools=[server], tool_middleware=[after_registering])
            result = await agent.run("go")
    assert "late-tool" not in before and "register-late-tool" in before
    offered = [{spec.name for spec in request.tools} for request in model.requests]
    assert "late-tool" not in offered[0]
    assert "late-tool" in offered[1]
    assert result.steps[1].actions[0].output == "late: hi"
