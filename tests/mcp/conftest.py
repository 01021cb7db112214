"""MCP fixtures: the test server (``server.py``) over stdio, and over loopback streamable HTTP.

The HTTP server is one process for the whole test session (a test that kills its server starts
its own with the ``start_http_server`` fixture). It is ready once it prints its port: it prints
it after its socket is listening, so a connection made from then on waits in the backlog, never
refused.

Every server process is started by the launcher of ``tests/support/zygote.py``, which has it
forked by a zygote (``server.py --zygote``, one per test session) that imported the SDK once: the process a test starts is
still a server of its own on real pipes or a real socket, but it starts in milliseconds, where
importing the SDK takes a second and a half of CPU. Without ``fork`` (Windows) each server
process is started from scratch.

This directory has no ``__init__.py`` on purpose: as a package it would be imported as ``mcp``
and shadow the SDK. Helpers are fixtures, so no test module imports another.
"""

from __future__ import annotations

import functools
import os
import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentloop.mcp import MCPHttpServer, MCPStdioServer

SERVER = Path(__file__).with_name("server.py")
ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = [sys.executable, "-S", str(ROOT / "tests" / "support" / "zygote.py")]
START_TIMEOUT = 30.0

HttpServer = Callable[[], AbstractContextManager[tuple[str, "subprocess.Popen[str]"]]]


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
    return proc.stdout.readline() if ready else ""


@pytest.fixture(scope="session")
def server_command(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The command that starts a test server (add ``--http`` for HTTP): the launcher and the
    socket of a zygote started here, or (without ``fork``) ``server.py`` itself."""
    if not hasattr(os, "fork"):
        yield [sys.executable, str(SERVER)]
        return
    path = tmp_path_factory.mktemp("mcp") / "zygote.sock"
    zygote = subprocess.Popen(
        [sys.executable, str(SERVER), "--zygote", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        if _first_line(zygote).strip() != "ready":
            pytest.fail(f"the MCP test zygote did not start (exit code {zygote.poll()})")
        yield [*LAUNCHER, str(path)]
    finally:
        assert zygote.stdin is not None and zygote.stdout is not None
        zygote.stdin.close()  # its end: it kills the servers still running and exits
        try:
            zygote.wait(START_TIMEOUT)
        finally:
            zygote.kill()
            zygote.wait()
            zygote.stdout.close()


@contextmanager
def _port_server(
    command: list[str], port_of: Callable[[str], int | None], what: str
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start a server that prints its free loopback port first (``port_of`` reads it from
    that line); its MCP URL and process. Killed at the end."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        line = _first_line(proc)
        port = port_of(line)
        if port is None:
            pytest.fail(f"{what} did not start (exit code {proc.poll()}): {line!r}")
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _http_server(command: list[str]) -> AbstractContextManager[tuple[str, subprocess.Popen[str]]]:
    """The test server on a free loopback port; its URL and process."""
    return _port_server(
        [*command, "--http"],
        lambda line: int(line) if line.strip().isdigit() else None,
        "the MCP test server",
    )


@pytest.fixture(scope="session")
def http_url(server_command: list[str]) -> Iterator[str]:
    with _http_server(server_command) as (url, _):
        yield url


@pytest.fixture
def stdio_server(server_command: list[str]) -> Callable[..., MCPStdioServer]:
    """A factory of ``MCPStdioServer`` running the test server."""
    return functools.partial(MCPStdioServer, server_command[0], server_command[1:])


@pytest.fixture
def start_http_server(server_command: list[str]) -> HttpServer:
    """``with start_http_server() as (url, process):`` a test server of one's own."""
    return functools.partial(_http_server, server_command)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_server(transport: str, request: pytest.FixtureRequest) -> Any:
    """A factory of servers on the parametrised transport (the HTTP one shares one process)."""
    if transport == "stdio":
        return request.getfixturevalue("stdio_server")
    url = request.getfixturevalue("http_url")
    return lambda **kwargs: MCPHttpServer(url, **kwargs)


# --- @modelcontextprotocol/server-everything (tests/js), the reference server of the MCP project


def _everything_script() -> list[str]:
    from tests.support.node import JS, node

    return [node(), str(JS / "mcp-everything.mjs")]


@contextmanager
def _everything_http(*flags: str) -> Iterator[str]:
    """server-everything over streamable HTTP on a free loopback port; its URL."""

    def port_of(line: str) -> int | None:
        return int(line.split()[1]) if line.startswith("port ") else None

    command = [*_everything_script(), "http", *flags]
    with _port_server(command, port_of, "server-everything") as (url, _):
        yield url


@pytest.fixture(scope="session")
def everything_url() -> Iterator[str]:
    """One server-everything over HTTP for the session (with ``--late-tool``: each session of
    the server has its own tools, so a test that adds one changes no other test's)."""
    with _everything_http("--late-tool") as url:
        yield url


@pytest.fixture
def everything(transport: str, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """A factory of ``MCPServer`` speaking to server-everything on the parametrised
    transport (a process per connection over stdio)."""
    if transport == "http":
        url = request.getfixturevalue("everything_url")
        return lambda **kwargs: MCPHttpServer(url, **kwargs)
    command, *args = _everything_script()

    def stdio(**kwargs: Any) -> MCPStdioServer:
        return MCPStdioServer(command, [*args, "stdio", "--late-tool"], **kwargs)

    return stdio


# The mcp SDK's streamable HTTP client, on trio, leaves the async generators of the GET stream
# that server-everything holds open (httpx2's and httpcore2's) to the garbage collector when
# the connection closes: trio then warns. Known to happen on main with a bare connect and list
# (no agentloop code is between them); the SDK's to fix, so tolerated here for those tests only.
_SDK_TRIO_GC = pytest.mark.filterwarnings(
    "ignore:Exception ignored in.*async_generator:pytest.PytestUnraisableExceptionWarning"
)


_TURNS: dict[str, int] = {}


@pytest.hookimpl(tryfirst=True)  # before the fixtures' own parameters are applied
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """server-everything over stdio is a Node process per test (a third of a second of CPU,
    most of a second's wait): each of its tests runs over stdio on one backend, asyncio and
    trio in turn down the file, and over HTTP (one process for the session) on both. Every
    test still meets both transports, and each transport both backends."""
    if metafunc.definition.path.name != "test_mcp_everything.py":
        return
    turn = _TURNS.setdefault(metafunc.definition.originalname, len(_TURNS)) % 2
    stdio = ("asyncio", "trio")[turn]
    metafunc.parametrize(
        ("anyio_backend", "transport"),
        [("asyncio", "http"), ("trio", "http"), (stdio, "stdio")],
        ids=lambda value: str(value),
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name == "test_mcp_everything.py" and "trio-http" in item.name:
            item.add_marker(_SDK_TRIO_GC)
