"""A session run's input keeps its images and files: the run record stores its parts in every
store, a run resumed after an interruption sends them again (asserted at the emulated provider),
``Memory`` replays earlier runs as text, old records (schema version 1) read as text, and the
stored size is bounded."""

from __future__ import annotations

import base64
import functools
import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentloop import Agent, Memory, ToolContext, UserError, tool
from agentloop.models import FilePart, ImagePart
from agentloop.models.openai import OpenAIResponsesModel
from agentloop.sessions import RunRecord, SessionStore, SQLiteStore
from agentloop.sessions._sql import SCHEMA_VERSION
from agentloop.testing import EmulatedProvider, ProviderServer, ScriptedModel

# A 1x1 transparent PNG, and the head of a PDF.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
INPUT: list[str | ImagePart | FilePart] = [
    "What is in the picture and the report?",
    ImagePart(data=PNG, media_type="image/png"),
    ImagePart(url="https://example.com/cat.jpg"),
    FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
]


def _user_content(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The first user message's content of a Responses request body."""
    first = next(item for item in body["input"] if item.get("role") == "user")
    content: list[dict[str, Any]] = first["content"]
    return content


async def _history(store: SessionStore, session_id: str) -> tuple[Any, ...]:
    session = await store.get(session_id)
    assert session is not None
    return session.history


async def test_the_run_record_keeps_the_input_parts_in_every_store(store: SessionStore) -> None:
    """Images and files round-trip through the store: bytes, URLs, order and text."""
    model = ScriptedModel(["seen"])
    await Agent(model, store=store).run(INPUT, session="s")
    record = (await _history(store, "s"))[0]
    assert isinstance(record, RunRecord)
    assert record.input == "What is in the picture and the report?"
    assert record.input_parts is not None
    assert [p["kind"] for p in record.input_parts] == ["text", "image", "image", "file"]
    image, url_image, pdf = record.input_parts[1:]
    assert base64.urlsafe_b64decode(str(image["data"])) == PNG
    assert url_image["url"] == "https://example.com/cat.jpg"
    assert base64.urlsafe_b64decode(str(pdf["data"])) == PDF
    assert pdf["filename"] == "report.pdf"


async def test_a_text_input_stores_no_parts(store: SessionStore) -> None:
    """Text stays text: no parts are stored for an input without images or files."""
    await Agent(ScriptedModel(["ok"]), store=store).run(["just", "text"], session="s")
    record = (await _history(store, "s"))[0]
    assert isinstance(record, RunRecord)
    assert record.input == "just\ntext" and record.input_parts is None


async def test_an_interrupted_run_resumes_with_its_images_and_files(store: SessionStore) -> None:
    """Interrupted inside its first step's tool, the run is resumed: the request the provider
    gets on resume carries the image, the image URL and the PDF of the input."""
    interrupt = True
    entered = anyio.Event()

    @tool
    async def look(ctx: ToolContext, query: str) -> str:
        """Look something up."""
        if interrupt:
            entered.set()
            await anyio.sleep_forever()
        return f"looked up {query}"

    async with ProviderServer(EmulatedProvider()) as server:
        async with OpenAIResponsesModel(
            "test-model", base_url=server.url + "/v1", api_key="test-key"
        ) as model:
            agent = Agent(model, tools=[look], tool_mode="native", store=store)
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(agent.run, INPUT, session="s"))
                await entered.wait()
                tg.cancel_scope.cancel()
            assert len(server.requests) == 1
            interrupt = False
            result = await agent.resume(session="s")
        bodies = [r.json for r in server.requests]
    assert result.error is None and len(bodies) > 1
    resumed = _user_content(bodies[1])
    assert [c["type"] for c in resumed] == [
        "input_text",
        "input_image",
        "input_image",
        "input_file",
    ]
    assert resumed[1]["image_url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert resumed[2]["image_url"] == "https://example.com/cat.jpg"
    assert resumed[3]["filename"] == "report.pdf"
    assert all(_user_content(body) == resumed for body in bodies)


async def test_memory_replays_earlier_runs_as_text(store: SessionStore) -> None:
    """Memory sends an earlier run's input text, not its images again (they would cost their
    tokens on every later run); the run that had them sent them."""
    model = ScriptedModel(["a cat", "it was a cat"])
    agent = Agent(model, store=store, memory=Memory(max_runs=5))
    await agent.run(INPUT, session="s")
    await agent.run("What was in the picture?", session="s")
    first, second = model.requests
    assert [type(p).__name__ for p in first.messages[-1].parts] == [
        "TextPart",
        "ImagePart",
        "ImagePart",
        "FilePart",
    ]
    assert [m.text for m in second.messages] == [
        "What is in the picture and the report?",
        "a cat",
        "What was in the picture?",
    ]
    parts = [type(p).__name__ for m in second.messages for p in m.parts]
    assert set(parts) == {"TextPart"}


async def test_a_session_input_too_large_to_store_is_refused_before_the_session(
    store: SessionStore,
) -> None:
    """More than 32 MB of images and files is refused with a UserError; nothing is written."""
    big = FilePart(data=b"%PDF" + bytes(32 * 1024 * 1024), media_type="application/pdf")
    model = ScriptedModel(["never"])
    with pytest.raises(UserError, match="up to 32 MB"):
        await Agent(model, store=store).run(["read this", big], session="s")
    assert model.requests == []
    assert [s.id for s in await store.list()] == []


# The version-1 schema and a run record as agentloop wrote them before run records kept parts.
_V1_SCHEMA = [
    """CREATE TABLE agentloop_schema (version INTEGER NOT NULL)""",
    """CREATE TABLE agentloop_sessions (
        id TEXT NOT NULL PRIMARY KEY, app TEXT NOT NULL, user_id TEXT NOT NULL,
        version INTEGER NOT NULL, last_seq INTEGER NOT NULL, created_at REAL NOT NULL,
        updated_at REAL NOT NULL, lease_owner TEXT, lease_fence INTEGER NOT NULL DEFAULT 0,
        lease_expires_at REAL)""",
    "CREATE INDEX agentloop_sessions_updated ON agentloop_sessions (updated_at)",
    "CREATE INDEX agentloop_sessions_app ON agentloop_sessions (app, user_id, updated_at)",
    "CREATE INDEX agentloop_sessions_user ON agentloop_sessions (user_id, updated_at)",
    """CREATE TABLE agentloop_records (
        session_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, run_id TEXT,
        at REAL NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session_id, seq))""",
    """CREATE INDEX agentloop_records_runs ON agentloop_records (session_id, seq)
        WHERE type = 'run'""",
    """CREATE TABLE agentloop_state (
        session_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (session_id, key))""",
    "INSERT INTO agentloop_schema (version) VALUES (1)",
]
_V1_RUN_BODY = {
    "at": 1_700_000_000.0,
    "type": "run",
    "run_id": "old-run",
    "agent": "agent",
    "branch": "agent",
    "input": "the old question",
    "parent_run_id": None,
    "run_key": None,
}


def _old_database(path: Path) -> None:
    raw = sqlite3.connect(path)
    with raw:
        for statement in _V1_SCHEMA:
            raw.execute(statement)
        raw.execute(
            "INSERT INTO agentloop_sessions VALUES ('old', '', '', 1, 1, 1.7e9, 1.7e9, NULL, 0,"
            " NULL)"
        )
        raw.execute(
            "INSERT INTO agentloop_records VALUES ('old', 1, 'run', 'old-run', 1.7e9, ?)",
            (json.dumps(_V1_RUN_BODY),),
        )
    raw.close()


async def test_a_version_1_database_opens_and_its_runs_resume_as_text(tmp_path: Path) -> None:
    """A database of the old schema is migrated on open; its unfinished run (a record without
    parts) resumes with its text, and new runs store their parts."""
    path = tmp_path / "old.db"
    _old_database(path)
    model = ScriptedModel(["old answer", "new answer"])
    async with SQLiteStore(path) as store:
        agent = Agent(model, store=store)
        resumed = await agent.resume(session="old")
        assert resumed.run_id == "old-run" and resumed.output == "old answer"
        assert [m.text for m in model.requests[0].messages] == ["the old question"]
        await agent.run(INPUT, session="old")
        history = await _history(store, "old")
    old, new = (r for r in history if isinstance(r, RunRecord))
    assert old.input_parts is None
    assert new.input_parts is not None and len(new.input_parts) == 4
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT version FROM agentloop_schema").fetchall() == [(SCHEMA_VERSION,)]
    raw.close()
    assert SCHEMA_VERSION == 2


@pytest.mark.postgres
async def test_a_version_1_postgres_database_opens_and_reads_old_runs_as_text(
    pg_schema_dsn: str,
) -> None:
    """The same on PostgreSQL: tables of schema version 1 with a run record without parts are
    migrated on open, and the record reads as text."""
    import psycopg

    from agentloop.sessions import PostgresStore
    from agentloop.sessions._postgres import _MIGRATIONS  # pyright: ignore[reportPrivateUsage]

    with psycopg.connect(pg_schema_dsn, autocommit=True) as raw:
        raw.execute("CREATE TABLE agentloop_schema (version integer NOT NULL)")
        for statement in _MIGRATIONS[1]:
            raw.execute(statement)  # pyright: ignore[reportCallIssue, reportArgumentType]
        raw.execute("INSERT INTO agentloop_schema (version) VALUES (1)")
        raw.execute(
            "INSERT INTO agentloop_sessions VALUES ('old', '', '', 1, 1, 1.7e9, 1.7e9, NULL, 0,"
            " NULL)"
        )
        raw.execute(
            "INSERT INTO agentloop_records VALUES ('old', 1, 'run', 'old-run', 1.7e9, %s)",
            (json.dumps(_V1_RUN_BODY),),
        )
    async with PostgresStore(pg_schema_dsn) as store:
        (old,) = await _history(store, "old")
    assert isinstance(old, RunRecord)
    assert old.input == "the old question" and old.input_parts is None
    with psycopg.connect(pg_schema_dsn, autocommit=True) as raw:
        versions = raw.execute("SELECT version FROM agentloop_schema").fetchall()
    assert versions == [(SCHEMA_VERSION,)]
