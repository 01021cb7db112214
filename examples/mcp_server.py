"""A small MCP server, written with the official SDK (``mcp.server.mcpserver.MCPServer``).

Shows: what an MCP server looks like from the other side — a notebook and a unit converter,
served over stdio. ``examples/mcp_tools.py`` starts it as a subprocess and gives its tools to an
agent; any MCP client can use it too. Started from a terminal it only says so and exits: a
stdio server talks to a client over its stdin, not to a person.

Run: ``python examples/mcp_tools.py`` (which runs this file)
"""

from __future__ import annotations

import sys
from typing import Literal

from mcp.server.mcpserver import MCPServer

server = MCPServer("notebook", log_level="WARNING")
notes: list[str] = []

Unit = Literal["km", "mi", "m", "ft"]  # an enum in the tool's input schema
_METRES = {"km": 1000.0, "mi": 1609.344, "m": 1.0, "ft": 0.3048}


@server.tool()
def convert(value: float, from_unit: Unit, to_unit: Unit) -> float:
    """Convert a length between km, mi, m and ft."""
    return round(value * _METRES[from_unit] / _METRES[to_unit], 3)


@server.tool()
def add_note(text: str) -> str:
    """Add a note to the notebook."""
    notes.append(text)
    return f"noted ({len(notes)} in the notebook)"


@server.tool(name="notes.search")
def search_notes(query: str) -> list[str]:
    """Notes that contain a word (case-insensitive)."""
    return [n for n in notes if query.lower() in n.lower()]


if __name__ == "__main__":
    if sys.stdin.isatty():
        print("This is an MCP server for stdio clients: run examples/mcp_tools.py.")
    else:
        server.run()  # until the client closes our stdin
