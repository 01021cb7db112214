"""Sessions with SQLite: two runs of one session; the second remembers the first.

Shows: ``open_store("sqlite:///…")`` (the embedded durable store); ``agent.run(..., session=ID,
store=store)``; conversation memory (the second run's request holds the first run's input and
answer); session state written by tools through ``ToolContext.state`` (``state.update`` is
atomic), persisted per step, and still there when the file is opened again by a new store, as
another process would; and the session's typed history records. Runs offline on a scripted model;
with ``OPENAI_API_KEY`` set it uses ``openai:gpt-4o-mini``.

Run: ``python examples/sessions_sqlite.py [path/to/sessions.db]`` (default: a temporary file)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from agentloop import Agent, ToolContext, tool
from agentloop.models import ModelRequest
from agentloop.sessions import open_store
from agentloop.testing import FunctionModel, Reply, call


@tool
async def remember(ctx: ToolContext, key: str, value: str) -> str:
    """Keep a fact about the user for later conversations.

    Args:
        key: what the fact is about, e.g. "name"
        value: the fact
    """
    ctx.state[f"user:{key}"] = value
    return f"remembered {key}"


@tool
async def recall(ctx: ToolContext, key: str) -> str:
    """Recall a fact kept with ``remember``.

    Args:
        key: what the fact is about
    """
    ctx.state.update("recalls", lambda n: n + 1, default=0)
    return str(ctx.state.get(f"user:{key}", "unknown"))


def scripted(request: ModelRequest) -> Reply | str:
    """Stands in for a real model: it reads the conversation it is given."""
    users = [m.text for m in request.messages if m.role == "user"]
    last = request.messages[-1]
    if last.role == "tool":
        result = last.parts[0].content  # type: ignore[union-attr]
        if result == "remembered name":
            return "Nice to meet you, Ada. I'll remember that."
        earlier = users[0] if len(users) > 1 else "(nothing)"
        return f"Your name is {result}. (Earlier you said: {earlier!r}.)"
    if "my name is" in last.text.lower():
        return Reply(calls=[call("remember", {"key": "name", "value": "Ada"})])
    return Reply(calls=[call("recall", {"key": "name"})])


def model() -> Any:
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    return FunctionModel(scripted)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tmp) / "sessions.db"
        url = f"sqlite:///{path.resolve()}"
        agent = Agent(
            model(),
            name="assistant",
            instructions="Remember facts about the user with your tools.",
            tools=[remember, recall],
        )
        async with agent, open_store(url) as store:
            first = await agent.run("Hi! My name is Ada.", session="ada", store=store)
            print(f"run 1: {first.output}")
            second = await agent.run("What is my name?", session="ada", store=store)
            print(f"run 2: {second.output}")

        # A new store on the same file, as another process would open it.
        async with open_store(url) as store:
            session = await store.get("ada")
            assert session is not None
            print(f"\nreopened {url}")
            print(f"  state:   {dict(session.state)}")
            print(f"  version: {session.version}")
            print(f"  history: {[type(record).__name__ for record in session.history]}")


if __name__ == "__main__":
    anyio.run(main)
