"""Reliability tests: unclosed resources are errors here too (the suite's filterwarnings), and
the collector runs at the end of each module so that one held in a reference cycle warns too.

``pg_dsn``: a PostgreSQL server, as for tests/sessions (``AGENTLOOP_PG_DSN``, else a throwaway
cluster; skipped without one unless ``AGENTLOOP_REQUIRE_PG=1``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import NoReturn

import pytest

from ._support import collect_garbage


@pytest.fixture(autouse=True, scope="module")
def _collect_garbage_at_the_end() -> Iterator[None]:
    yield
    collect_garbage()


def _pg_unavailable(reason: str) -> NoReturn:
    if os.environ.get("AGENTLOOP_REQUIRE_PG") == "1":
        pytest.fail(f"PostgreSQL is required (AGENTLOOP_REQUIRE_PG=1) but {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
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

    schema = f"agentloop_rel_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield make_conninfo(pg_dsn, options=f"-c search_path={schema}")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
