"""Load with faults: 10,000 concurrent sessions against a provider that misbehaves.

The emulated provider runs in a separate process and injects faults from a seeded
``FaultProfile``: 5% of requests get a 429 with ``retry-after``, 1% have their connection reset
mid-stream, 1% stream slowly. Every session is a two-turn run (two parallel tool calls, then the
answer) of an agent with a session store, through the real drivers (Chat Completions, Responses
and Anthropic Messages in turn), all started at once. Afterwards each session is checked
(``agentloop.testing._load``): it answered; its stored history is complete; no tool action ran
twice (invocations counted by idempotency key and by call); no task was left running.

Run: ``python -m benchmarks.bench_load [--smoke] [--sessions 10000] [--store sqlite|memory]
[--backend asyncio|trio] [--seed 1]`` (``--smoke``: 200 sessions). The exit status is 1 when any
session was lost, any action duplicated or any task leaked.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import anyio

from agentloop.sessions import InMemoryStore, SessionStore, SQLiteStore
from agentloop.testing import FaultProfile, ProviderServerProcess, raise_fd_limit
from agentloop.testing._load import LoadReport, run_load


def _profile(seed: int) -> FaultProfile:
    return FaultProfile(rate_limit=0.05, reset=0.01, slow=0.01, seed=seed, retry_after=1.0)


async def _run(url: str, sessions: int, store: SessionStore) -> LoadReport:
    async with store:
        return await run_load(url, sessions=sessions, store=store)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_load")
    parser.add_argument("--smoke", action="store_true", help="200 sessions (CI)")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    sessions = 200 if args.smoke else args.sessions
    raise_fd_limit()
    profile = _profile(args.seed)
    command = "python -m benchmarks.bench_load" + (
        " --smoke" if args.smoke else f" --sessions {sessions}"
    )
    command += f" --store {args.store} --backend {args.backend} --seed {args.seed}"
    with tempfile.TemporaryDirectory() as tmp:
        store: SessionStore = (
            SQLiteStore(Path(tmp) / "load.db") if args.store == "sqlite" else InMemoryStore()
        )
        with ProviderServerProcess(faults=profile) as server:
            report = anyio.run(_run, server.url, sessions, store, backend=args.backend)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
