"""MCP fixtures: the test server (``server.py``) over stdio, and over loopback streamable HTTP.

The HTTP server is one process for the whole test session (a test that kills its server starts
its own with the ``start_http_server`` fixture). It is ready once it prints its port: it prints
it after its socket is listening, so a connection made from then on waits in the backlog, never
refused.

This directory has no ``__init__.py`` on purpose: as a package it would be imported as ``mcp``
and shadow the SDK. Helpers are fixtures, so no test module imports another.
"""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentloop.mcp import MCPHttpServer, MCPStdioServer

SERVER = Path(__file__).with_name("server.py")
START_TIMEOUT = 30.0


def _stdio_server(**kwargs: Any) -> MCPStdioServer:
    return MCPStdioServer(sys.executable, [str(SERVER)], **kwargs)


@contextmanager
def _http_server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start the test server on a free loopback port; its URL and process. Killed at the end."""
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
        line = proc.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            pytest.fail(f"the MCP test server did not start (exit code {proc.poll()})")
        yield f"http://127.0.0.1:{int(line)}/mcp", proc
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture(scope="session")
def http_url() -> Iterator[str]:
    with _http_server() as (url, _):
        yield url


@pytest.fixture
def stdio_server() -> Any:
    """A factory of ``MCPStdioServer`` running the test server."""
    return _stdio_server


@pytest.fixture
def start_http_server() -> Any:
    """``with start_http_server() as (url, process):`` a test server of one's own."""
    return _http_server


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_server(transport: str, request: pytest.FixtureRequest) -> Any:
    """A factory of servers on the parametrised transport (the HTTP one shares one process)."""
    if transport == "stdio":
        return _stdio_server
    url = request.getfixturevalue("http_url")
    return lambda **kwargs: MCPHttpServer(url, **kwargs)
