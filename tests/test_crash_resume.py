"""Crash test: a process killed with SIGKILL mid-run; another process resumes the session."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

WORKER = Path(__file__).with_name("_crash_worker.py")


def _committed_steps(db: Path) -> int:
    try:
        with sqlite3.connect(db) as conn:
            row = conn.execute(
                "SELECT count(*) FROM agentloop_records WHERE type = 'step'"
            ).fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(row[0])


def test_a_killed_run_resumes_in_a_new_process_without_rerunning_committed_actions(
    tmp_path: Path,
) -> None:
    """Steps 0 and 1 were committed before the kill: they never run again; step 2 re-runs."""
    db, log = tmp_path / "s.db", tmp_path / "log.txt"
    worker = subprocess.Popen([sys.executable, str(WORKER), str(db), str(log), "run"])
    try:
        deadline = time.monotonic() + 30
        while not (log.exists() and "2\n" in log.read_text()):
            assert worker.poll() is None, "the worker ended before reaching step 2"
            assert time.monotonic() < deadline, "the worker never reached step 2"
            time.sleep(0.02)
        assert _committed_steps(db) == 2
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    assert worker.returncode == -signal.SIGKILL
    resumed = subprocess.run(
        [sys.executable, str(WORKER), str(db), str(log), "resume"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    output, steps = resumed.stdout.strip().splitlines()[-2:]
    assert output == "all 4 done"
    assert steps == "0,1,2,3,4"
    invocations = Counter(int(line) for line in log.read_text().split())
    assert invocations == Counter({0: 1, 1: 1, 2: 2, 3: 1})
    with sqlite3.connect(db) as conn:
        kinds = [r[0] for r in conn.execute("SELECT type FROM agentloop_records ORDER BY seq")]
        state = dict(conn.execute("SELECT key, value FROM agentloop_state"))
    assert kinds == ["run", "step", "step", "step", "step", "step", "run_end"]
    assert set(state) == {"done:0", "done:1", "done:2", "done:3"}
