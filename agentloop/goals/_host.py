"""Host side: set a session's goal before a run (``/goal``, config-driven tasks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import SessionConflict, UserError
from ._record import DEFAULT_PREFIX, GoalRecord, encode_goal, state_key

if TYPE_CHECKING:
    from .._agent import Agent
    from ..sessions import SessionStore

_ATTEMPTS = 5


async def start_goal(
    store: SessionStore,
    *,
    session_id: str,
    objective: str,
    branch: str | None = None,
    agent: Agent | None = None,
    state_key_prefix: str = DEFAULT_PREFIX,
    app: str = "",
    user: str = "",
) -> GoalRecord:
    """Give a session branch a fresh active goal, so the model need not call ``create_goal``.

    ``branch`` is the full branch (default: ``agent.name``, the root run's branch). The session
    is created when missing; an existing goal is replaced by one with a new id. The change is
    recorded in the session's history as a host state change.
    """
    from ..sessions import StateChangeRecord

    objective = objective.strip()
    if not objective:
        raise UserError("start_goal: the objective must not be blank")
    if branch is None:
        if agent is None:
            raise UserError("start_goal needs branch=... or agent=... (whose name is the branch)")
        branch = agent.name
    key = state_key(state_key_prefix, branch)
    goal = GoalRecord.new(objective)
    value = encode_goal(goal)
    for _ in range(_ATTEMPTS):
        session = await store.get(session_id, history_limit=0)
        if session is None:
            try:
                session = await store.create(session_id, app=app, user=user)
            except SessionConflict:
                continue  # created concurrently: read it again
        record = StateChangeRecord(
            changes={key: value}, source="host", note=f"goal started on branch {branch!r}"
        )
        try:
            await store.commit(
                session_id,
                expected_version=session.version,
                records=[record],
                set_state={key: value},
            )
        except SessionConflict:
            continue
        return goal
    raise SessionConflict(f"start_goal: session {session_id!r} kept changing; try again")
