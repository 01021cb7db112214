"""A writer process for the multi-process test (run as a script, not collected by pytest).

    python _writer.py KIND TARGET SESSION_ID WRITERS INCREMENTS MAX_RETRIES BACKEND

Opens the store (KIND ``sqlite`` with a file path, or ``postgres`` with a DSN), prints ``ready``,
waits for a line on stdin, then runs WRITERS tasks that each make INCREMENTS read-modify-write
increments of the ``counter`` key, committing with ``expected_version`` and retrying on
``SessionConflict`` up to MAX_RETRIES times per increment. Prints a JSON summary line.
"""

from __future__ import annotations

import json
import os
import random
import sys

import anyio
import anyio.to_thread

from agentloop._errors import SessionConflict
from agentloop.sessions import PostgresStore, SessionStore, SQLiteStore, StateChangeRecord

# Backoff after a conflict: full jitter over a window that doubles from 1 ms up to half a second.
# Fifty writers on one row: a window that grew only linearly (1 ms per attempt, to 20 ms) kept
# them all retrying together, and on PostgreSQL 200 commits cost some 3,000 conflicts and 12 s.
_FIRST_WINDOW, _LAST_WINDOW = 0.001, 0.5


def _backoff(attempt: int, rng: random.Random) -> float:
    """Seconds to wait before retry ``attempt + 1`` (bounded by ``_LAST_WINDOW``)."""
    return rng.uniform(0, min(_LAST_WINDOW, _FIRST_WINDOW * 2 ** min(attempt, 20)))


async def main(
    kind: str, target: str, sid: str, writers: int, increments: int, retries: int
) -> None:
    store: SessionStore = SQLiteStore(target) if kind == "sqlite" else PostgresStore(target)
    rng = random.Random(os.getpid())
    counts: dict[str, int] = {"ok": 0, "conflicts": 0, "gave_up": 0}
    async with store:
        await store.get(sid)  # connected and schema checked before the start signal
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)

        async def writer(n: int) -> None:
            for i in range(increments):
                for attempt in range(retries):
                    session = await store.get(sid, history_limit=0)
                    assert session is not None
                    value = session.state.get("counter", 0)
                    assert isinstance(value, int)
                    note = f"{os.getpid()}:{n}:{i}"
                    try:
                        await store.commit(
                            sid,
                            expected_version=session.version,
                            records=[StateChangeRecord(changes={"counter": value + 1}, note=note)],
                            set_state={"counter": value + 1},
                        )
                    except SessionConflict:
                        counts["conflicts"] += 1
                        await anyio.sleep(_backoff(attempt, rng))
                        continue
                    counts["ok"] += 1
                    break
                else:
                    counts["gave_up"] += 1

        async with anyio.create_task_group() as tg:
            for n in range(writers):
                tg.start_soon(writer, n)
        stats = store.stats
        counts["store_conflicts"] = stats.conflicts
        counts["busy_timeouts"] = stats.busy_timeouts
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    kind, target, sid, writers, increments, retries, backend = sys.argv[1:]
    anyio.run(main, kind, target, sid, int(writers), int(increments), int(retries), backend=backend)
