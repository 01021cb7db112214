"""Fixtures for the session store tests: a fresh store per back end, and a PostgreSQL server.

PostgreSQL: ``AGENTLOOP_PG_DSN`` names a server to use; otherwise a throwaway cluster is started
from the installed binaries for the test session (as the ``postgres`` user when running as root)
and removed at the end. Each test gets its own schema on it. Without a server the PostgreSQL tests
skip, unless ``AGENTLOOP_REQUIRE_PG=1``, which makes them fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from agentloop.sessions import SessionStore

from ._session_helpers import ManualClock, StoreSpec


def _pg_unavailable(reason: str) -> NoReturn:
    if os.environ.get("AGENTLOOP_REQUIRE_PG") == "1":
        pytest.fail(f"PostgreSQL is required (AGENTLOOP_REQUIRE_PG=1) but {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A PostgreSQL server for this test session (``AGENTLOOP_PG_DSN`` or a throwaway cluster)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _pg_unavailable("psycopg is not installed (pip install 'agentloop[postgres]')")
    given = os.environ.get("AGENTLOOP_PG_DSN")
    if given:
        yield given
        return
    from agentloop.sessions._pg_testing import PostgresUnavailable, start_cluster

    try:
        cluster = start_cluster()
    except PostgresUnavailable as exc:
        _pg_unavailable(f"no server could be started: {exc}")
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def pg_schema_dsn(pg_dsn: str) -> Iterator[str]:
    """A DSN whose ``search_path`` is a fresh schema, dropped after the test."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    schema = f"agentloop_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield make_conninfo(pg_dsn, options=f"-c search_path={schema}")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


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
