"""A small MCP server for the tests, built with the SDK's ``MCPServer``.

``python server.py`` serves over stdio. ``python server.py --http`` listens on a free loopback
port, prints the port on stdout once the socket is listening, and serves streamable HTTP at
``/mcp``. ``python server.py --zygote SOCKET`` (with the repository root on ``PYTHONPATH``)
imports all that once, then forks one server (stdio, or HTTP with ``--http``) for each launcher
(``tests/support/zygote.py``) that connects to the Unix socket ``SOCKET``: a server process a
test starts costs a fork, not the second and a half of importing the SDK.

Tools that prove things without timing: ``meet`` returns only once its partner has arrived too
(two calls that meet ran at once), ``block`` arrives and never returns, ``wait_for`` returns
when someone has arrived, ``crash`` exits the process once someone has arrived. Every wait is
bounded, so a broken test fails instead of hanging.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from collections import defaultdict
from typing import NoReturn

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

from tests.support.zygote import Request
from tests.support.zygote import serve as serve_forks

WAIT = 10.0

server = MCPServer("agentloop-test", log_level="WARNING")
_arrived: defaultdict[str, anyio.Event] = defaultdict(anyio.Event)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Repeat a text."""
    return " ".join([text] * times)


@server.tool(name="files.read", title="Read a file")
def read_file(path: str) -> str:
    return f"contents of {path}"


@server.tool()
def fail(message: str) -> str:
    """Always fails with the given message."""
    raise ToolError(message)


@server.tool(structured_output=False)
def chart() -> list[str | Image]:
    """A caption and a picture."""
    return ["Sales by month", Image(data=b"\x89PNG\r\n\x1a\n" + bytes(100), format="png")]


@server.tool()
async def meet(me: str, other: str) -> str:
    """Arrive as `me`, then wait until `other` has arrived too."""
    _arrived[me].set()
    with anyio.fail_after(WAIT):
        await _arrived[other].wait()
    return f"{me} met {other}"


@server.tool()
async def block(key: str) -> str:
    """Arrive as `key`, then never return."""
    _arrived[key].set()
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
async def wait_for(key: str) -> str:
    """Return once `key` has arrived."""
    with anyio.fail_after(WAIT):
        await _arrived[key].wait()
    return f"{key} arrived"


@server.tool()
async def crash(after: str) -> str:
    """Once `after` has arrived, exit the server process at once."""
    with anyio.fail_after(WAIT):
        await _arrived[after].wait()
    os._exit(3)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


def serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)  # connections queue from here on
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


def serve(args: list[str]) -> None:
    if "--http" in args:
        serve_http()
    else:
        server.run()


def _become_server(request: Request) -> NoReturn:
    """In the forked child, on the launcher's streams: serve; exit with the server's status
    (never return into the zygote's loop)."""
    code = 0
    try:
        serve(request.args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zygote"]:
        serve_forks(sys.argv[2], _become_server)
    else:
        serve(sys.argv[1:])
