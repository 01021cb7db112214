"""Session ids, state keys and values, inputs and app/user names full of SQL are data: runs on
sessions named after injection payloads leave every other session and every table as they were,
on SQLite and PostgreSQL. (The store contract suite round-trips odd ids and keys on every back
end: tests/sessions/test_sessions_contract.py::test_odd_ids_and_keys_round_trip.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentloop import Agent, ToolContext, tool
from agentloop.sessions import PostgresStore, RunRecord, SessionStore, SQLiteStore
from agentloop.testing import Reply, ScriptedModel, call

PAYLOADS = [
    "'; DROP TABLE agentloop_sessions; --",
    "x' OR '1'='1",
    '"; DROP TABLE agentloop_records; --',
    "1; DELETE FROM agentloop_state WHERE 1=1; --",
    "') ON CONFLICT DO NOTHING; UPDATE agentloop_sessions SET version = 0; --",
    "$$; DROP SCHEMA public CASCADE; $$",
    "%s %(name)s $1 ? :name",
    "\\'; SELECT pg_sleep(10); --",
    "robert'); DROP TABLE students;--",
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    if request.param == "sqlite":
        opened: SessionStore = SQLiteStore(tmp_path / "s.db")
    else:
        opened = PostgresStore(request.getfixturevalue("pg_schema_dsn"))
    async with opened:
        yield opened


@tool
async def note(ctx: ToolContext, text: str) -> str:
    """Write the text under itself in the session state."""
    ctx.state[text] = text
    ctx.state["last"] = text
    return text


async def test_injection_payloads_in_sessions_are_data(store: SessionStore) -> None:
    """Runs on sessions named with SQL payloads store them verbatim and touch nothing else."""
    victim = await store.create("victim", app="app", user="ann", state={"secret": "keep"})
    agent = Agent(
        ScriptedModel([Reply(calls=[call("note", {"text": p})]) if i % 2 == 0 else "done"
                       for p in PAYLOADS for i in range(2)]),
        tools=[note],
        store=store,
    )  # fmt: skip
    for payload in PAYLOADS:
        await store.create(payload, app=payload, user=payload)
        result = await agent.run(payload, session=payload)
        assert result.output == "done"
    for payload in PAYLOADS:
        got = await store.get(payload)
        assert got is not None
        assert dict(got.state) == {payload: payload, "last": payload}
        runs = [r for r in got.history if isinstance(r, RunRecord)]
        assert [r.input for r in runs] == [payload]
        assert [s.id for s in await store.list(app=payload, user=payload)] == [payload]
    after = await store.get("victim")
    assert after is not None
    assert (dict(after.state), after.version, after.history) == ({"secret": "keep"}, 0, ())
    assert (after.app, after.user) == (victim.app, victim.user)
    listed = {s.id for s in await store.list(limit=100)}
    assert listed == {"victim", *PAYLOADS}
    assert await store.delete(PAYLOADS[0]) is True
    assert {s.id for s in await store.list(limit=100)} == {"victim", *PAYLOADS[1:]}
