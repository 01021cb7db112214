"""Load with faults: 500 concurrent sessions against the emulated provider in a separate process
that injects faults (5% 429 with retry-after, 1% connection resets mid-stream, 1% slow streams),
with a SQLite session store. Every session answers, no action runs twice, nothing is lost, no
task is left behind. ``benchmarks/bench_load.py`` runs the 10,000-session version."""

from __future__ import annotations

from pathlib import Path

import anyio

from agentloop.sessions import SQLiteStore
from agentloop.testing import FaultProfile
from tests.support.load import run_load
from tests.support.provider_process import ProviderServerProcess

SESSIONS = 500
PROFILE = FaultProfile(
    rate_limit=0.05, reset=0.01, slow=0.01, seed=8, retry_after=0.5, slow_delay=0.05
)


async def test_500_sessions_with_injected_faults_lose_nothing(tmp_path: Path) -> None:
    """500 concurrent sessions through the real drivers survive injected 429s, resets and slow
    streams: all answer, with complete histories, no duplicated action and no leaked task."""
    server = ProviderServerProcess(faults=PROFILE, min_fds=2 * SESSIONS)
    await anyio.to_thread.run_sync(server.start)
    try:
        async with SQLiteStore(tmp_path / "load.db") as store:
            report = await run_load(server.url, sessions=SESSIONS, store=store)
    finally:
        await anyio.to_thread.run_sync(server.stop)
    faults = server.stats["faults"]
    assert report.ok, report
    assert (report.answered, report.lost, report.duplicated, report.tasks_leaked) == (
        SESSIONS,
        0,
        0,
        0,
    )
    assert report.actions >= 2 * SESSIONS - faults["reset"]  # a reset may cut the second call
    assert faults["rate_limit"] > 0 and faults["reset"] > 0 and faults["slow"] > 0
    assert report.model_requests >= 2 * SESSIONS + faults["rate_limit"]
