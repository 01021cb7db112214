"""A warm process for the test suite's forked commands (``tests/support/zygote.py``): started
once, ready when it says so, and ended with the children it still runs."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def warm_process(
    script: Path, socket: Path, *, env: Mapping[str, str], cwd: Path, timeout: float, what: str
) -> Iterator[None]:
    """``script`` run with the socket it serves on, for the block. It prints ``ready`` once it
    has imported what its children need; closing its standard input ends it and every child
    still running (killed if it does not exit within ``timeout``)."""
    zygote = subprocess.Popen(
        [sys.executable, str(script), str(socket)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=dict(env),
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    try:
        ready, _, _ = select.select([zygote.stdout], [], [], timeout)
        if not ready or zygote.stdout.readline().strip() != "ready":
            pytest.fail(f"{what} did not start (exit code {zygote.poll()})")
        yield
    finally:
        zygote.stdin.close()
        try:
            zygote.wait(timeout)
        finally:
            if zygote.poll() is None:
                zygote.kill()
                zygote.wait()
            zygote.stdout.close()
