"""``GoalRecord``: one persistent goal per session branch, stored as camelCase JSON."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

DEFAULT_PREFIX = "goal"


class GoalStatus(StrEnum):
    """``complete`` and ``blocked`` are terminal: a terminal goal never changes."""

    ACTIVE = "active"
    COMPLETE = "complete"
    BLOCKED = "blocked"

    @property
    def terminal(self) -> bool:
        return self is not GoalStatus.ACTIVE


class GoalRecord(BaseModel):
    """A session goal. Persisted (and shown to the model) with camelCase field names.

    Attributes:
        id: The goal's id (a new one for each goal set).
        objective: What "done" means.
        status: ``active``, ``complete`` or ``blocked``.
        created_at_unix: When it was set, in unix seconds.
        updated_at_unix: When its status last changed.
        terminal_at_unix: When it became complete or blocked, if it did.
    """

    model_config = ConfigDict(
        frozen=True, alias_generator=to_camel, populate_by_name=True, extra="ignore"
    )

    id: str
    objective: str
    status: GoalStatus
    created_at_unix: int
    updated_at_unix: int
    terminal_at_unix: int | None = None

    @classmethod
    def new(cls, objective: str, *, now: int | None = None) -> GoalRecord:
        """A fresh active goal.

        Args:
            objective: What "done" means.
            now: The time, in unix seconds (default: now).
        """
        at = int(time.time()) if now is None else now
        return cls(
            id=uuid.uuid4().hex,
            objective=objective,
            status=GoalStatus.ACTIVE,
            created_at_unix=at,
            updated_at_unix=at,
        )

    def with_status(self, status: GoalStatus, *, now: int | None = None) -> GoalRecord:
        """This goal with a new status (a terminal one stamps ``terminal_at_unix``).

        Args:
            status: The new status.
            now: The time, in unix seconds (default: now).
        """
        at = int(time.time()) if now is None else now
        return self.model_copy(
            update={
                "status": status,
                "updated_at_unix": at,
                "terminal_at_unix": at if status.terminal else None,
            }
        )

    def to_camel(self) -> dict[str, Any]:
        """The record as the model and the store see it."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def state_key(prefix: str = DEFAULT_PREFIX, branch: str | None = None) -> str:
    """``goal`` or ``goal:<branch>`` (never a ``temp:`` key: goals persist)."""
    return f"{prefix}:{branch}" if branch else prefix


def encode_goal(goal: GoalRecord) -> str:
    """The JSON text stored under the goal's state key."""
    return json.dumps(goal.to_camel(), separators=(",", ":"), ensure_ascii=False)


def decode_goal(value: Any) -> GoalRecord | None:
    """The goal stored in a state value; ``None`` for anything that is not one (never raises)."""
    try:
        if isinstance(value, str | bytes):
            value = json.loads(value)
        if not isinstance(value, Mapping):
            return None
        return GoalRecord.model_validate(value)
    except (ValueError, TypeError, ValidationError):
        return None


def get_goal_record(
    session: Any, *, branch: str | None = None, prefix: str = DEFAULT_PREFIX
) -> GoalRecord | None:
    """The goal of a session (anything with a ``state`` mapping, or the mapping itself).

    Args:
        session: A ``Session``, a ``StateView``, or a state mapping.
        branch: The branch whose goal to read (``None``: the key ``<prefix>`` alone).
        prefix: As ``GoalOptions.state_key_prefix``.
    """
    state = getattr(session, "state", session)
    if not isinstance(state, Mapping):
        return None
    return decode_goal(state.get(state_key(prefix, branch)))


_ICONS = {GoalStatus.ACTIVE: "🎯", GoalStatus.COMPLETE: "✅", GoalStatus.BLOCKED: "⛔"}


def render_goal(goal: GoalRecord | None) -> str:
    """A short status card for logs, demos and REST answers.

    Args:
        goal: The goal, or ``None`` (rendered as no goal).
    """
    if goal is None:
        return "(no goal)"
    lines = [
        f"{_ICONS[goal.status]} Goal [{goal.status.value}]",
        f"   objective: {goal.objective}",
        f"   created:   {_utc(goal.created_at_unix)}",
    ]
    if goal.terminal_at_unix is not None:
        lines.append(f"   terminal:  {_utc(goal.terminal_at_unix)}")
    return "\n".join(lines)


def _utc(unix: int) -> str:
    """A person reads a date, not epoch seconds (the record keeps the seconds)."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
