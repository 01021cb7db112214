"""Helpers shared by the session store tests (imported by path: tests are not a package)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


class ManualClock:
    """A wall clock that moves only when told: lease expiry without sleeping."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def run_records(run_id: str, *, steps: int = 1, step_size: int = 0) -> list[Record]:
    """The records of one finished run: a RunRecord, ``steps`` StepRecords, a RunEndRecord."""
    pad = "x" * step_size
    return [
        RunRecord(run_id=run_id, agent="agent", branch="agent", input=f"input of {run_id}"),
        *(
            StepRecord(run_id=run_id, index=i, step={"thought": f"step {i}", "pad": pad})
            for i in range(steps)
        ),
        RunEndRecord(run_id=run_id, status="finished", output=f"answer {run_id}", usage={"in": 1}),
    ]


@dataclass
class StoreSpec:
    """How to open a store of one back end; SQL back ends open the same data every time."""

    kind: str
    target: str = ""

    @property
    def shared(self) -> bool:
        return self.kind != "memory"

    def open(self, **options: Any) -> SessionStore:
        if self.kind == "memory":
            return InMemoryStore(**options)
        if self.kind == "sqlite":
            return SQLiteStore(self.target, **options)
        return PostgresStore(self.target, **options)
