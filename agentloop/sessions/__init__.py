"""Sessions: state and run history that outlive a run, in memory, SQLite or PostgreSQL.

A ``SessionStore`` keeps each session's state (a flat JSON mapping; ``temp:`` keys are never
stored) and its history of typed records. ``commit`` is atomic and versioned: it applies only at
the expected version, so two writers never lose an update. A lease (owner, expiry, fence) keeps
one run per session at a time, across processes.

``import agentloop.sessions`` never imports psycopg; ``PostgresStore`` does when made.
"""

from __future__ import annotations

from ._memory import InMemoryStore as InMemoryStore
from ._postgres import PostgresStore as PostgresStore
from ._records import Record as Record
from ._records import ReplyRecord as ReplyRecord
from ._records import RunEndRecord as RunEndRecord
from ._records import RunRecord as RunRecord
from ._records import StateChangeRecord as StateChangeRecord
from ._records import StepRecord as StepRecord
from ._records import record_from_json as record_from_json
from ._records import record_to_json as record_to_json
from ._sqlite import SQLiteStore as SQLiteStore
from ._types import JSON as JSON
from ._types import Lease as Lease
from ._types import Session as Session
from ._types import SessionInfo as SessionInfo
from ._types import SessionStore as SessionStore
from ._types import StoreStats as StoreStats
from ._url import open_store as open_store

__all__ = [
    "JSON",
    "InMemoryStore",
    "Lease",
    "PostgresStore",
    "Record",
    "ReplyRecord",
    "RunEndRecord",
    "RunRecord",
    "SQLiteStore",
    "Session",
    "SessionInfo",
    "SessionStore",
    "StateChangeRecord",
    "StepRecord",
    "StoreStats",
    "open_store",
    "record_from_json",
    "record_to_json",
]


def _show_names_here() -> None:
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith("agentloop.sessions._"):
            try:
                obj.__module__ = __name__
            except (AttributeError, TypeError):
                pass


_show_names_here()
del _show_names_here
