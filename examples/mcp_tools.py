"""Tools from an MCP server: mount ``examples/mcp_server.py`` over stdio and let an agent use it.

Shows: ``MCPStdioServer`` runs the server as a subprocess and its tools become the agent's, with
their names made safe for providers and a ``prefix`` (``notes.search`` becomes
``kb_notes_search``); ``async with server:`` keeps one connection for several runs, while a
server given to an agent un-entered is connected for each run and closed after it; two MCP
calls in one step run at once; an argument the server's input schema refuses is caught before
the call is sent and comes back to the model as an error result. Runs offline on a scripted
model; with ``OPENAI_API_KEY`` set it uses ``openai:gpt-4o-mini``.

Run: ``python examples/mcp_tools.py``
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio

from agentloop import ActionFinished, ActionStarted, Agent, TextDelta
from agentloop.mcp import MCPStdioServer
from agentloop.testing import Reply, ScriptedModel, call

SERVER = Path(__file__).with_name("mcp_server.py")


def notebook() -> MCPStdioServer:
    return MCPStdioServer(sys.executable, [str(SERVER)], name="notebook", prefix="kb")


def model(*script: Reply | str) -> Any:
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    return ScriptedModel(list(script), chunk_size=8, delay=0.01)


async def show(agent: Agent, question: str) -> None:
    print(f"\n> {question}")
    async with agent.stream(question) as run:
        mid_line = False
        async for event in run:
            if isinstance(event, TextDelta):
                print(event.text, end="", flush=True)
                mid_line = True
                continue
            if mid_line:
                print()
                mid_line = False
            if isinstance(event, ActionStarted):
                print(f"  → {event.name}({event.input})")
            elif isinstance(event, ActionFinished):
                r = event.result
                print(f"  ← {'ERROR ' + str(r.error_kind) if r.is_error else 'ok'}: {r.content}")
    print(f"\nAnswer: {run.result.output}")


async def main() -> None:
    instructions = "You keep the user's notebook and convert lengths. Use the tools."
    # One connection (one server process) for both runs below.
    async with notebook() as server:
        print("The server's tools as the model sees them:")
        for t in await server.list_tools():
            print(f"  {t.name:<16} {t.description}")
        first = model(
            Reply(
                text="Converting and noting at once.",
                calls=[
                    call("kb_convert", {"value": 42.195, "from_unit": "km", "to_unit": "mi"}),
                    call("kb_add_note", {"text": "Marathon: 42.195 km"}),
                ],
            ),
            Reply(calls=[call("kb_convert", {"value": 5, "from_unit": "km", "to_unit": "yd"})]),
            "A marathon is 42.195 km, about 26.219 miles; I noted it. Yards are not supported.",
        )
        async with Agent(first, instructions=instructions, tools=[server]) as agent:
            await show(agent, "How long is a marathon in miles, and in yards? Note the distance.")
        second = model(
            Reply(calls=[call("kb_notes_search", {"query": "marathon"})]),
            "Your note says: Marathon: 42.195 km.",
        )
        async with Agent(second, instructions=instructions, tools=[server]) as agent:
            await show(agent, "What did I note about the marathon?")
    # Un-entered: this run starts its own server process and stops it when it ends (a new
    # process, so the notebook starts empty).
    third = model(
        Reply(calls=[call("kb_notes_search", {"query": "marathon"})]),
        "This notebook is new: it has no marathon notes.",
    )
    async with Agent(third, instructions=instructions, tools=[notebook()]) as agent:
        await show(agent, "Any marathon notes in a fresh notebook?")


if __name__ == "__main__":
    anyio.run(main)
