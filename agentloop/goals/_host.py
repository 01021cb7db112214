"""Host side: set a session's goal before a run (``/goal``, config-driven tasks)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import anyio

from .. import SessionBusy, SessionConflict, SessionNotFound, UserError
from ._record import DEFAULT_PREFIX, GoalRecord, encode_goal, state_key

if TYPE_CHECKING:
    from .. import Agent
    from ..sessions import SessionStore

# How long start_goal's lease lasts: it is held only for one read and one commit.
_LEASE_TTL = 30.0


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
    wait_for_session: float | None = None,
) -> GoalRecord:
    """Give a session branch a fresh active goal, so the model need not call ``create_goal``.

    ``branch`` is the full branch (default: ``agent.name``, the root run's branch). The session
    is created when missing; an existing goal is replaced by one with a new id. The change is
    recorded in the session's history as a host state change.

    Like a run, it takes the session's lease to commit (and releases it at once): while a run
    holds the session it raises ``SessionBusy``, or waits up to ``wait_for_session`` seconds
    for the lease. A ``temp:`` prefix is refused (``UserError``): the goal must persist.

    Args:
        store: The session store.
        session_id: The session.
        objective: What "done" means, in words the model reads.
        branch: The branch the goal is for (default: ``agent.name``).
        agent: The agent whose root branch gets the goal (when ``branch`` is not given).
        state_key_prefix: As ``GoalOptions.state_key_prefix``.
        app: The application of a session created here.
        user: The user of a session created here.
        wait_for_session: Seconds to wait for a lease a run holds (``None``: ``SessionBusy``
            at once).
    """
    from ..sessions import StateChangeRecord

    if state_key_prefix.startswith("temp:"):
        raise UserError("a goal's state key must persist: do not use a 'temp:' prefix")
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
    try:
        await store.create(session_id, app=app, user=user)
    except SessionConflict:
        pass  # it exists
    lease = await store.acquire_lease(
        session_id,
        owner=f"start_goal-{uuid.uuid4().hex}",
        ttl=_LEASE_TTL,
        wait=wait_for_session is not None,
        timeout=wait_for_session,
    )
    try:
        session = await store.get(session_id, history_limit=0)
        if session is None:
            raise SessionNotFound(f"session {session_id!r} was deleted")
        record = StateChangeRecord(
            changes={key: value}, source="host", note=f"goal started on branch {branch!r}"
        )
        # Under the lease no one else commits, so the version read just now is still current.
        await store.commit(
            session_id,
            expected_version=session.version,
            records=[record],
            set_state={key: value},
            lease=lease,
        )
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await store.release_lease(lease)
            except SessionBusy:
                pass  # taken over already: nothing of ours to release
    return goal
