"""Two OS processes, 25 writer tasks each, on one session: no update is lost.

One process runs on asyncio, the other on trio. Each writer does read-modify-write increments
with ``expected_version`` and retries on ``SessionConflict`` up to a bound; every conflict is
counted. Afterwards the counter equals the number of successful commits, and the history holds
exactly one record per successful commit, numbered without gaps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop.sessions import PostgresStore, Session, SessionStore, SQLiteStore

WRITER = Path(__file__).with_name("_writer.py")
REPO = Path(__file__).resolve().parents[2]
WRITERS, INCREMENTS, RETRIES = 25, 4, 2000


def _open(kind: str, target: str) -> SessionStore:
    return SQLiteStore(target) if kind == "sqlite" else PostgresStore(target)


def _run_writers(kind: str, target: str) -> tuple[Session, list[dict[str, Any]]]:
    async def create() -> None:
        async with _open(kind, target) as store:
            await store.create("shared", state={"counter": 0})

    anyio.run(create)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    args = [kind, target, "shared", str(WRITERS), str(INCREMENTS), str(RETRIES)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRITER), *args, backend],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for backend in ("asyncio", "trio")
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", (line, proc.stderr.read() if proc.stderr else "")
        for proc in procs:  # both are connected: start them together
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    async def load() -> Session:
        async with _open(kind, target) as store:
            session = await store.get("shared")
            assert session is not None
            return session

    return anyio.run(load), results


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "shared.db")
    return "postgres", request.getfixturevalue("pg_schema_dsn")


@pytest.mark.slow
def test_two_processes_lose_no_update(target: tuple[str, str]) -> None:
    """Counter == successful increments and one history record per commit, across processes."""
    session, results = _run_writers(*target)
    ok = sum(r["ok"] for r in results)
    conflicts = sum(r["conflicts"] for r in results)
    gave_up = sum(r["gave_up"] for r in results)
    busy = sum(r["busy_timeouts"] for r in results)
    report = (
        f"{target[0]}: {ok} increments committed, {conflicts} conflicts retried"
        f" ({busy} of them database busy timeouts), {gave_up} gave up after {RETRIES} tries"
    )
    print(report)
    assert session.state["counter"] == ok, report
    assert session.version == ok, report
    assert len(session.history) == ok, report
    assert [r.seq for r in session.history] == list(range(1, ok + 1)), report
    assert ok + gave_up == 2 * WRITERS * INCREMENTS, report
    assert gave_up == 0, report
    assert all(r["ok"] > 0 for r in results), results  # both processes really wrote
    assert all(r["store_conflicts"] == r["conflicts"] for r in results), results
