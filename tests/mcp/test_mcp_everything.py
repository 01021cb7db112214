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
