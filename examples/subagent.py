"""A sub-agent: one agent used as a tool of another with ``agent.as_tool(...)``.

Shows: ``researcher.as_tool(name="researcher", description=...)`` gives the editor a tool that runs
the researcher as a sub-run, with its own model, tools, step limit and goal budget, on the branch
``editor.researcher`` (two calls at once get ``editor.researcher#<tag>``). The sub-runs' events
reach the editor's stream tagged with their branch and ``parent_run_id``; each sub-run's steps are
kept in the action's result (``subrun``) and its usage is added to the editor's. Runs offline on
scripted models; with ``OPENAI_API_KEY`` set both agents use ``openai:gpt-4o-mini``.

Run: ``python examples/subagent.py``
"""

from __future__ import annotations

import os
from typing import Any

import anyio

from agentloop import ActionFinished, ActionStarted, Agent, RunFinished, RunStarted, tool
from agentloop.models import ModelRequest
from agentloop.testing import FunctionModel, Reply, ScriptedModel, call

FACTS = {
    "Paris": "Paris: 2.1 million people; the Louvre is the most visited museum in the world.",
    "Oslo": "Oslo: 0.7 million people; the Munch museum holds 28,000 works by Edvard Munch.",
}


@tool
async def search(query: str) -> str:
    """Search the encyclopedia.

    Args:
        query: what to look for
    """
    await anyio.sleep(0.1)
    return next((fact for city, fact in FACTS.items() if city in query), "nothing found")


def researcher_reply(request: ModelRequest) -> Reply:
    """The researcher's scripted model: search for the task, then report what was found."""
    last = request.messages[-1]
    if last.role == "user":
        return Reply(calls=[call("search", {"query": last.text})])
    return Reply(text=f"Found: {last.parts[0].content}")  # type: ignore[union-attr]


def models() -> tuple[Any, Any]:
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini", "openai:gpt-4o-mini"
    editor = ScriptedModel(
        [
            Reply(
                text="I'll have the researcher look up both cities at once.",
                calls=[
                    call("researcher", {"task": "Key facts about Paris"}),
                    call("researcher", {"task": "Key facts about Oslo"}),
                ],
            ),
            "Paris (2.1 M) has the Louvre; Oslo (0.7 M) has the Munch museum. Both are worth a "
            "museum weekend.",
        ],
        chunk_size=8,
        delay=0.01,
    )
    return editor, FunctionModel(researcher_reply, chunk_size=8, delay=0.01)


async def main() -> None:
    editor_model, researcher_model = models()
    researcher = Agent(
        researcher_model,
        name="researcher",
        instructions="Research the task with the search tool; report facts only.",
        tools=[search],
        max_steps=4,
    )
    editor = Agent(
        editor_model,
        name="editor",
        instructions="Write short travel blurbs. Delegate fact-finding to the researcher.",
        tools=[
            researcher.as_tool(
                name="researcher", description="Find facts about a topic; returns a short report."
            )
        ],
    )
    # Leaving `editor` closes the models it made, and the researcher's (a tool of it).
    prompt = "A two-line blurb comparing Paris and Oslo museums."
    async with editor, editor.stream(prompt) as run:
        async for event in run:
            where = f"[{event.branch}]".ljust(28)
            if isinstance(event, RunStarted):
                print(f"{where} run started: {event.input}")
            elif isinstance(event, ActionStarted):
                print(f"{where} → {event.name}({event.input})")
            elif isinstance(event, ActionFinished):
                print(f"{where} ← {event.result.name}: {event.result.content[:70]}")
            elif isinstance(event, RunFinished):
                print(f"{where} run finished: {str(event.result.output)[:70]}")
    result = run.result
    print(f"\nAnswer: {result.output}")
    for action in result.steps[0].actions:
        sub = action.subrun
        if sub is not None:
            print(f"  {action.tag}: sub-run on {sub.branch!r}, {len(sub.steps)} steps")
    print(f"usage, sub-runs included: {result.usage.requests} model calls")


if __name__ == "__main__":
    anyio.run(main)
