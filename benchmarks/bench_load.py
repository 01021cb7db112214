"""Load with faults: 10,000 concurrent sessions against a provider that misbehaves.

The emulated provider runs in a separate process and injects faults from a seeded
``FaultProfile``: 5% of requests get a 429 with ``retry-after``, 1% have their connection reset
mid-stream, 1% stream slowly. Every session is a two-turn run (two parallel tool calls, then the
answer) of an agent with a session store, through the real drivers (Chat Completions, Responses
and Anthropic Messages in turn), all started at once. Afterwards each session is checked
(``tests/support/load.py``): it answered; its stored history is complete; no tool action ran
twice (invocations counted by idempotency key and by call); no task was left running.

Then the time to cancel: 5,000 session runs (``--cancel``; 200 with ``--smoke``) on a fresh store
of the same kind, each waiting in its model call, are cancelled at once; the figure is the time
from the cancel until every run has returned, and each run must have raised the cancellation,
recorded its end as ``cancelled`` and released its lease (``run_cancel_load``). A cancelled run
hands its end to the store and returns; the one that writes the batch returns once it is
written, so the figure includes the writes.

Run: ``python -m benchmarks.bench_load [--smoke] [--sessions 10000] [--cancel 5000]
[--store sqlite|memory] [--backend asyncio|trio] [--seed 1]`` (``--smoke``: 200 sessions). The
exit status is 1 when any session was lost, any action duplicated or any task leaked, or a
cancelled run did not end cleanly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import anyio

from agentloop.sessions import InMemoryStore, SessionStore, SQLiteStore
from agentloop.testing import FaultProfile
from tests.support.load import CancelReport, LoadReport, run_cancel_load, run_load
from tests.support.provider_process import ProviderServerProcess, raise_fd_limit


def _profile(seed: int) -> FaultProfile:
    return FaultProfile(rate_limit=0.05, reset=0.01, slow=0.01, seed=seed, retry_after=1.0)


async def _run(url: str, sessions: int, store: SessionStore) -> LoadReport:
    async with store:
        return await run_load(url, sessions=sessions, store=store)


async def _cancel(sessions: int, store: SessionStore) -> CancelReport:
    async with store:
        return await run_cancel_load(store, sessions=sessions)


def _store(kind: str, path: Path) -> SessionStore:
    return SQLiteStore(path) if kind == "sqlite" else InMemoryStore()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_load")
    parser.add_argument("--smoke", action="store_true", help="200 sessions (CI)")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--cancel", type=int, default=5_000, help="runs cancelled at once")
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    sessions = 200 if args.smoke else args.sessions
    cancelling = 200 if args.smoke else args.cancel
    raise_fd_limit()
    profile = _profile(args.seed)
    command = "python -m benchmarks.bench_load" + (
        " --smoke" if args.smoke else f" --sessions {sessions} --cancel {cancelling}"
    )
    command += f" --store {args.store} --backend {args.backend} --seed {args.seed}"
    with tempfile.TemporaryDirectory() as tmp:
        store = _store(args.store, Path(tmp) / "load.db")
        with ProviderServerProcess(faults=profile) as server:
            report = anyio.run(_run, server.url, sessions, store, backend=args.backend)
        store = _store(args.store, Path(tmp) / "cancel.db")
        cancel = anyio.run(_cancel, cancelling, store, backend=args.backend)
    stats = server.stats
    faults = stats.get("faults", {})
    injected = sum(faults.values())
    rows = [
        ("sessions run", f"{report.sessions:,}"),
        ("sessions answered", f"{report.answered:,}"),
        (
            "faults injected",
            f"{injected:,} ({faults.get('rate_limit', 0):,} × 429 with retry-after, "
            f"{faults.get('reset', 0):,} resets mid-stream, "
            f"{faults.get('slow', 0):,} slow streams)",
        ),
        ("requests served", f"{stats.get('requests', 0):,}"),
        ("tool actions run", f"{report.actions:,}"),
        ("actions duplicated", str(report.duplicated)),
        ("sessions lost", str(report.lost)),
        ("tasks leaked", str(report.tasks_leaked)),
        ("wall time", f"{report.seconds:.1f} s"),
        (
            f"time to cancel {cancel.sessions:,} waiting runs at once",
            f"{cancel.seconds:.2f} s (started in {cancel.start_seconds:.1f} s)",
        ),
        ("cancelled runs without a `cancelled` end record", str(cancel.no_end)),
        ("cancelled runs still leased afterwards", str(cancel.leased)),
        (
            "cancelled runs that raised something else",
            str(sum(cancel.errors.values()) or 0),
        ),
    ]
    print(
        f"\nLoad with faults ({sessions:,} concurrent sessions, {args.store} store, "
        f"{args.backend}; faults: 5% 429, 1% resets, 1% slow)\n"
    )
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    print(f"\nCommand: `{command}`")
    if not report.ok:
        print(f"\nFAILED: {dict(report.errors)} {report.problems}")
        return 1
    if not cancel.ok or cancel.leased:
        print(f"\nFAILED to cancel cleanly: {cancel}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
