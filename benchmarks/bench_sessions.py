"""Session stores: commits per second, and load time of a long session, per back end.

What it measures, for the in-memory store, an SQLite file (``synchronous=FULL``, the default, and
``NORMAL``) and PostgreSQL (a throwaway local cluster started from the installed binaries with
fsync off, or the server named by ``--pg-dsn`` / ``AGENTLOOP_PG_DSN``; skipped with a message when
neither is available):

- **commits/s**: sequential commits to one session, each appending a ~1 KB ``StepRecord`` and
  setting one state key, at the version the previous commit returned. Ratio: against the
  in-memory store measured in the same run.
- **load**: ``get()`` of a session holding 1,000 runs (each a ``RunRecord``, three ~1 KB
  ``StepRecord`` and a ``RunEndRecord``: 5,000 records), in full and with ``history_limit=10``
  (median of several loads). Ratio: full over limited.

Command::

    .venv/bin/python benchmarks/bench_sessions.py            # full (about a minute)
    .venv/bin/python benchmarks/bench_sessions.py --smoke    # a few seconds
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

import anyio

from agentloop.sessions import (
    InMemoryStore,
    PostgresStore,
    Record,
    RunEndRecord,
    RunRecord,
    SessionStore,
    SQLiteStore,
    StepRecord,
)

PAD = "x" * 1000


@dataclass
class Result:
    name: str
    commits_per_s: float
    full_ms: float
    limited_ms: float
    history: int
    limited_history: int


def run_records(n: int) -> list[Record]:
    run_id = f"run-{n}"
    return [
        RunRecord(run_id=run_id, agent="bench", branch="bench", input=f"question {n}"),
        *(
            StepRecord(run_id=run_id, index=i, step={"thought": f"t{i}", "pad": PAD})
            for i in range(3)
        ),
        RunEndRecord(run_id=run_id, status="finished", output=f"answer {n}", usage={"in": 10}),
    ]


async def measure(name: str, make: Callable[[], SessionStore], commits: int, runs: int) -> Result:
    async with make() as store:
        session = await store.create(state={"counter": 0})
        step = StepRecord(run_id="r", index=0, step={"pad": PAD})
        version = session.version
        start = perf_counter()
        for i in range(commits):
            version = await store.commit(
                session.id, expected_version=version, records=[step], set_state={"counter": i}
            )
        rate = commits / (perf_counter() - start)

        long = await store.create()
        version = long.version
        for n in range(runs):
            version = await store.commit(long.id, expected_version=version, records=run_records(n))

        async def load_ms(limit: int | None) -> tuple[float, int]:
            times, size = [], 0
            for _ in range(5):
                start = perf_counter()
                got = await store.get(long.id, history_limit=limit)
                times.append((perf_counter() - start) * 1000)
                assert got is not None
                size = len(got.history)
            return statistics.median(times), size

        full, full_size = await load_ms(None)
        limited, limited_size = await load_ms(10)
    return Result(name, rate, full, limited, full_size, limited_size)


def postgres_dsn(stack: ExitStack, given: str | None) -> str | None:
    """A DSN with a fresh schema on the given server, or a throwaway cluster; None if neither."""
    try:
        import psycopg
        from psycopg import sql
        from psycopg.conninfo import make_conninfo
    except ImportError:
        print(
            "PostgreSQL skipped: psycopg is not installed (pip install 'agentloop-runtime[postgres]')"
        )
        return None
    if given is None:
        from tests.support.postgres import PostgresUnavailable, start_cluster

        try:
            cluster = start_cluster()
        except PostgresUnavailable as exc:
            print(f"PostgreSQL skipped: {exc}")
            return None
        stack.callback(cluster.stop)
        given = cluster.url
    schema = sql.Identifier(f"agentloop_bench_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(given, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))

    def drop() -> None:
        with psycopg.connect(given, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))

    stack.callback(drop)
    return make_conninfo(given, options=f"-c search_path={schema.as_string()}")


def table(results: list[Result], runs: int) -> str:
    base = results[0].commits_per_s
    lines = [
        f"| back end | commits/s | vs memory | load {runs:,} runs, full (ms) "
        "| load, history_limit=10 (ms) | full / limited |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.commits_per_s:,.0f} | {r.commits_per_s / base:.2f} "
            f"| {r.full_ms:.1f} ({r.history:,} records) "
            f"| {r.limited_ms:.2f} ({r.limited_history} records) "
            f"| {r.full_ms / r.limited_ms:.0f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a small, quick run for CI")
    parser.add_argument("--pg-dsn", default=os.environ.get("AGENTLOOP_PG_DSN"))
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = parser.parse_args(argv)
    commits, runs = (100, 50) if args.smoke else (2000, 1000)

    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        dsn = postgres_dsn(stack, args.pg_dsn)
        backends: list[tuple[str, Callable[[], SessionStore]]] = [
            ("memory", InMemoryStore),
            ("SQLite file, FULL", lambda: SQLiteStore(Path(tmp) / "full.db")),
            ("SQLite file, NORMAL", lambda: SQLiteStore(Path(tmp) / "n.db", synchronous="NORMAL")),
        ]
        if dsn is not None:
            backends.append(("PostgreSQL", lambda: PostgresStore(dsn)))

        async def run_all() -> list[Result]:
            return [await measure(name, make, commits, runs) for name, make in backends]

        results = anyio.run(run_all, backend=args.backend)
    print(f"\nSession stores ({args.backend}; {commits} commits of ~1 KB; {runs} runs loaded)\n")
    print(table(results, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
