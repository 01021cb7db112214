"""Fixtures for the session store tests: a fresh store per back end (PostgreSQL through the
suite-wide ``pg_schema_dsn`` fixture of tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentloop.sessions import SessionStore

from ._session_helpers import ManualClock, StoreSpec

BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    kind: str = request.param
    if kind == "sqlite":
        return StoreSpec(kind, str(tmp_path / "sessions.db"))
    if kind == "postgres":
        return StoreSpec(kind, request.getfixturevalue("pg_schema_dsn"))
    return StoreSpec(kind)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(store_spec: StoreSpec, clock: ManualClock) -> AsyncIterator[SessionStore]:
    """A fresh, open store of each back end, on a manual wall clock."""
    async with store_spec.open(clock=clock) as opened:
        yield opened
