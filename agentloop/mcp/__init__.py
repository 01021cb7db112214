"""Tools from MCP servers: ``MCPStdioServer`` (a subprocess) and ``MCPHttpServer`` (a URL).

Either is a ``Toolset``: give it to an agent as one of its tools. Enter it yourself
(``async with server:``) to share one connection between runs, or let each run connect it for
its own duration. Needs the ``mcp`` extra (``pip install 'agentloop-runtime[mcp]'``): importing this
module does not import the SDK, making a server does.
"""

from __future__ import annotations

from ._server import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from ._server import DEFAULT_TOOL_TIMEOUT as DEFAULT_TOOL_TIMEOUT
from ._server import MCPHttpServer as MCPHttpServer
from ._server import MCPServer as MCPServer
from ._server import MCPServerError as MCPServerError
from ._server import MCPStdioServer as MCPStdioServer

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_TOOL_TIMEOUT",
    "MCPHttpServer",
    "MCPServer",
    "MCPServerError",
    "MCPStdioServer",
]

MCPServerError.__module__ = __name__  # tracebacks show the public path
