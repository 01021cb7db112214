"""A small MCP server for the tests, built with the SDK's ``MCPServer``.

``python server.py`` serves over stdio. ``python server.py --http`` listens on a free loopback
port, prints the port on stdout once the socket is listening, and serves streamable HTTP at
``/mcp``. ``python server.py --zygote SOCKET`` imports all that once, then forks one server (stdio,
or HTTP with ``--http``) for each ``launch.py`` that connects to the Unix socket ``SOCKET``: a
server process a test starts costs a fork, not the second and a half of importing the SDK.

Tools that prove things without timing: ``meet`` returns only once its partner has arrived too
(two calls that meet ran at once), ``block`` arrives and never returns, ``wait_for`` returns
when someone has arrived, ``crash`` exits the process once someone has arrived. Every wait is
bounded, so a broken test fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import sys
import traceback
from collections import defaultdict

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

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


_INT = struct.Struct("!i")


def serve_zygote(path: str) -> None:
    """Fork a server for each launcher that connects to ``path`` with its standard streams;
    tell it the server's pid, then its exit status. A launcher that goes away takes its server
    with it; the end of our standard input ends us and every server still running."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno())
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # so that SIGCHLD wakes us
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_read, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    launchers: dict[int, socket.socket] = {}  # a running server's pid: its launcher

    def drop(pid: int, status: int | None) -> None:
        conn = launchers.pop(pid)
        if conn in (key.fileobj for key in selector.get_map().values()):
            selector.unregister(conn)
        if status is not None:
            try:
                conn.sendall(_INT.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
        conn.close()

    print("ready", flush=True)
    try:
        while True:
            for key, _ in selector.select():
                if key.data == "accept":
                    conn, _ = listener.accept()
                    message, fds, _, _ = socket.recv_fds(conn, 4096, 3)
                    pid = os.fork()
                    if pid == 0:  # the server: it never returns
                        for own in (listener, wake_read, wake_write, conn, *launchers.values()):
                            own.close()
                        selector.close()
                        _become_server(json.loads(message), fds)
                    for fd in fds:
                        os.close(fd)
                    launchers[pid] = conn
                    selector.register(conn, selectors.EVENT_READ, pid)
                    conn.sendall(_INT.pack(pid))
                elif key.data == "reap":
                    try:
                        while wake_read.recv(4096):  # drain the signal bytes
                            pass
                    except BlockingIOError:
                        pass
                    while launchers:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                        if pid == 0:
                            break
                        if pid in launchers:
                            drop(pid, status)
                elif key.data == "stdin":
                    if not os.read(sys.stdin.fileno(), 4096):
                        return
                elif launchers.get(key.data) is key.fileobj:  # not dropped earlier in this batch
                    # A launcher's connection is readable only once the launcher is gone.
                    selector.unregister(key.fileobj)
                    os.kill(key.data, signal.SIGKILL)  # then reaped (and dropped) as any other
    finally:
        for pid in launchers:
            os.kill(pid, signal.SIGKILL)


def _become_server(args: list[str], fds: list[int]) -> None:
    """In the forked child: the launcher's streams become ours, then serve; exit with the
    server's status (never return into the zygote's loop)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    code = 0
    try:
        serve(args)
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
        serve_zygote(sys.argv[2])
    else:
        serve(sys.argv[1:])
