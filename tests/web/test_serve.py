"""``agentloop serve``: closed by default. It refuses another address than loopback without a
token, and served with one (in a subprocess, on the emulated provider) it admits only requests
that bear it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys

import anyio
import httpx2
import pytest

from agentloop import UserError
from agentloop.cli import main
from agentloop.testing import ProviderServer
from agentloop.web import bearer_token, check_bind

from ._demo import FINAL, DemoProvider
from ._serving import frames


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.com"])
def test_serving_beyond_this_machine_without_auth_is_refused(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any address but loopback without a token: exit status 2, saying why, nothing served."""
    with pytest.raises(UserError, match="without authentication"):
        check_bind(host, None)
    assert main(["serve", "tests.web._served:agent", "--host", host]) == 2
    assert "refusing to listen on" in capsys.readouterr().err


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_needs_no_auth(host: str) -> None:
    check_bind(host, None)


def test_a_token_variable_that_is_unset_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTLOOP_TEST_TOKEN", raising=False)
    with pytest.raises(UserError, match="AGENTLOOP_TEST_TOKEN"):
        bearer_token("AGENTLOOP_TEST_TOKEN")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the server is a subprocess either way
async def test_agentloop_serve_with_a_token_admits_only_requests_that_bear_it() -> None:
    """``agentloop serve module:agent --host 0.0.0.0 --token-env VAR`` starts; a request
    without the token is 401, with a wrong one 401, with it the run streams to its answer."""
    port = _free_port()
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as provider:
        env = {
            **os.environ,
            "AGENTLOOP_TEST_PROVIDER_URL": provider.url,
            "AGENTLOOP_TEST_TOKEN": "s3cret-token",
        }
        command = [sys.executable, "-m", "agentloop", "serve", "tests.web._served:agent"]
        command += ["--host", "0.0.0.0", "--port", str(port), "--token-env", "AGENTLOOP_TEST_TOKEN"]
        process = await anyio.open_process(command, env=env, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            # Generous bounds: the first run imports the model SDK, slowly on a busy machine.
            async with httpx2.AsyncClient(base_url=base, timeout=60) as client:
                with anyio.fail_after(60):
                    while True:
                        try:
                            refused = await client.post("/api/runs", json={"input": "hi"})
                            break
                        except httpx2.ConnectError:
                            await anyio.sleep(0.05)
                assert refused.status_code == 401
                wrong = {"authorization": "Bearer nope"}
                assert (
                    await client.post("/api/runs", json={"input": "hi"}, headers=wrong)
                ).status_code == 401
                right = {"authorization": "Bearer s3cret-token"}
                started = await client.post("/api/runs", json={"input": "hi"}, headers=right)
                assert started.status_code == 201, started.text
                async with client.stream(
                    "GET", started.json()["events"], headers=right
                ) as response:
                    events = [f.json() for f in await frames(response)]
        finally:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
            await process.aclose()
    assert events[-1]["type"] == "run_finished" and events[-1]["result"]["output"] == FINAL


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the server is a subprocess either way
@pytest.mark.parametrize("access_log", [False, True])
async def test_agentloop_serve_logs_requests_only_when_asked(access_log: bool) -> None:
    """The access log is off by default (a line per request costs about 2% of a streamed run);
    ``--access-log`` turns it on."""
    port = _free_port()
    command = [sys.executable, "-m", "agentloop", "serve", "tests.web._served:agent"]
    command += ["--port", str(port), *(["--access-log"] if access_log else [])]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "AGENTLOOP_TEST_PROVIDER_URL": "http://127.0.0.1:9",
    }
    process = await anyio.open_process(command, env=env)
    try:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            with anyio.fail_after(60):
                while True:
                    try:
                        assert (await client.get("/app.js")).status_code == 200
                        break
                    except httpx2.ConnectError:
                        await anyio.sleep(0.05)
    finally:
        process.terminate()
        await process.wait()
    assert process.stdout is not None and process.stderr is not None
    logged = (await process.stdout.receive()).decode() if access_log else ""
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
        while True:
            logged += (await process.stdout.receive()).decode()
    assert ('"GET /app.js HTTP/1.1" 200' in logged) is access_log


def test_serve_tunes_the_collector_for_a_server() -> None:
    """What exists when serving starts is frozen, and the youngest generation is collected
    every 10,000 allocations: with 1,000 streams open the collector took 38% of the CPU."""
    code = (
        "import gc, anyio, uvicorn\n"
        "from agentloop.web import serve\n"
        "from tests.web._served import agent\n"
        "async def report(self, sockets=None):\n"
        "    print(gc.get_freeze_count() > 1000, gc.get_threshold()[0])\n"
        "uvicorn.Server.serve = report\n"
        "anyio.run(lambda: serve(agent, port=0))\n"
    )
    env = {**os.environ, "AGENTLOOP_TEST_PROVIDER_URL": "http://127.0.0.1:9"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["True", "10000"], done.stderr
