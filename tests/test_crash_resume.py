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

import pytest

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


@pytest.mark.slow
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


IDEMPOTENT_WORKER = Path(__file__).with_name("_idempotent_worker.py")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def crash_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "s.db")
    return "postgres", request.getfixturevalue("pg_schema_dsn")


@pytest.mark.slow
def test_a_tool_with_side_effects_acts_once_across_a_crash_with_fresh_provider_call_ids(
    tmp_path: Path, crash_store: tuple[str, str]
) -> None:
    """The model mints a new call id on every call. SIGKILL lands after the tool acted but
    before the step was committed; resume re-runs it from the committed reply, with the same
    idempotency key, so a tool that deduplicates by key acts exactly once."""
    kind, target = crash_store
    log = tmp_path / "log.txt"
    ledger = Path(str(log) + ".ledger")
    argv = [sys.executable, str(IDEMPOTENT_WORKER), kind, target, str(log)]
    worker = subprocess.Popen([*argv, "run"])
    try:
        deadline = time.monotonic() + 30
        while not (ledger.exists() and ledger.read_text().strip()):
            assert worker.poll() is None, "the worker ended before the tool acted"
            assert time.monotonic() < deadline, "the tool never acted"
            time.sleep(0.02)
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    resumed = subprocess.run(
        [*argv, "resume"], capture_output=True, text=True, timeout=60, check=True
    )
    assert resumed.stdout.strip().splitlines()[-1] == "paid"
    calls = log.read_text().split("\n")
    keys = [line.removeprefix("call ") for line in calls if line]
    assert len(keys) == 2 and keys[0] == keys[1], keys
    assert ledger.read_text().split() == [keys[0]]
