"""The owner id stored with each session (``bearer_token``) is always an HMAC of the token keyed
with the server's secret, never a bare hash that a leaked store lets anyone test guesses
against: the application's secret (``secret=``, ``AGENTLOOP_SECRET``), else one the server makes
and keeps in the session store, so replicas on one store and a restarted server agree. The
sessions stored under the former id stay readable by the token's holder."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest

from agentloop import UserError
from agentloop.sessions import InMemoryStore, SessionStore, SQLiteStore
from agentloop.testing import ProviderServer
from agentloop.web import bearer_token, create_app

from ._demo import DemoProvider, demo_agent

TOKEN = "s3cret-token"
SECRET = "server-secret-0123456789"
LEGACY = "bearer:" + hashlib.sha256(TOKEN.encode()).hexdigest()[:16]


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOOP_TEST_TOKEN", TOKEN)
    monkeypatch.delenv("AGENTLOOP_SECRET", raising=False)


def _keyed(secret: str) -> str:
    mac = hmac.new(secret.encode(), b"agentloop owner\0" + TOKEN.encode(), "sha256")
    return "bearer:k1:" + mac.hexdigest()[:32]


async def _owner_of_a_new_session(store: SessionStore, **options: Any) -> tuple[str, int]:
    """Serve one app on ``store``; start a run; the owner its session was stored under, and the
    status of reading the session ``old-session``."""
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as provider:
        agent = demo_agent(provider.url, store=store)
        app = create_app(agent, auth=bearer_token("AGENTLOOP_TEST_TOKEN"), **options)
        async with (
            agent.model,  # type: ignore[union-attr]
            app.router.lifespan_context(app),
            httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app),
                base_url="http://127.0.0.1",
                headers={"authorization": f"Bearer {TOKEN}"},
                timeout=30,
            ) as client,
        ):
            started = (await client.post("/api/runs", json={"input": "hi"})).json()
            old = await client.get("/api/sessions/old-session")
            await client.get(started["events"])
    stored = await store.get(started["session"])
    assert stored is not None
    return stored.user, old.status_code


def _not_from_the_token_alone(owner: str) -> None:
    assert owner != LEGACY and TOKEN not in owner
    assert owner.removeprefix("bearer:k1:") not in hashlib.sha256(TOKEN.encode()).hexdigest()


async def test_owner_ids_are_keyed_and_former_ones_stay_readable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTLOOP_SECRET", SECRET)
    store = InMemoryStore()
    await store.create("old-session", user=LEGACY)
    owner, old = await _owner_of_a_new_session(store)
    assert owner == _keyed(SECRET)
    _not_from_the_token_alone(owner)
    assert old == 200


async def test_one_secret_gives_one_owner_id_across_app_instances() -> None:
    first, _ = await _owner_of_a_new_session(InMemoryStore(), secret=SECRET)
    second, _ = await _owner_of_a_new_session(InMemoryStore(), secret=SECRET)
    assert first == second == _keyed(SECRET)
    other, _ = await _owner_of_a_new_session(InMemoryStore(), secret=SECRET + "-other")
    assert other != first


async def test_without_a_secret_the_store_keeps_one_so_a_restart_keeps_ownership(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    ids: list[str] = []
    for _ in range(2):  # a server, then the same server restarted on the same database
        async with SQLiteStore(path) as store:
            if not ids:
                await store.create("old-session", user=LEGACY)
            owner, old = await _owner_of_a_new_session(store)
            assert old == 200  # the former id stays readable
            ids.append(owner)
    assert ids[0] == ids[1]
    _not_from_the_token_alone(ids[0])


async def test_without_a_secret_an_in_memory_store_gets_a_key_of_its_own() -> None:
    first, _ = await _owner_of_a_new_session(InMemoryStore())
    second, _ = await _owner_of_a_new_session(InMemoryStore())
    _not_from_the_token_alone(first)
    assert first != second


async def test_the_kept_secret_is_no_session_a_request_can_reach() -> None:
    store = InMemoryStore()
    await _owner_of_a_new_session(store)
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as provider:
        agent = demo_agent(provider.url, store=store)
        app = create_app(agent)
        async with (
            agent.model,  # type: ignore[union-attr]
            app.router.lifespan_context(app),
            httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1"
            ) as client,
        ):
            kept = [info.id for info in await store.list() if info.app == "agentloop"]
            assert len(kept) == 1
            read = await client.get("/api/sessions/" + quote(kept[0]))
            joined = await client.post(
                "/api/ag-ui",
                json={"threadId": kept[0], "messages": [{"role": "user", "content": "hi"}]},
            )
    assert read.status_code == 404 and joined.status_code == 404


async def test_a_short_secret_is_refused() -> None:
    with pytest.raises(UserError, match="secret="):
        await _owner_of_a_new_session(InMemoryStore(), secret="short")
