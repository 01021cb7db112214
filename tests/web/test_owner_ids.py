"""The owner id stored with each session (``bearer_token``) is an HMAC of the token keyed with
the server's secret, not a bare hash that a leaked store lets anyone test guesses against; the
sessions stored under the former id stay readable by the token's holder."""

from __future__ import annotations

import hashlib
import hmac

import httpx2
import pytest

from agentloop.sessions import InMemoryStore
from agentloop.testing import ProviderServer
from agentloop.web import bearer_token, create_app

from ._demo import DemoProvider, demo_agent

TOKEN = "s3cret-token"
SECRET = "server-secret-0123456789"


async def test_owner_ids_are_keyed_and_former_ones_stay_readable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTLOOP_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("AGENTLOOP_SECRET", SECRET)
    store = InMemoryStore()
    legacy = "bearer:" + hashlib.sha256(TOKEN.encode()).hexdigest()[:16]
    await store.create("old-session", user=legacy)
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as provider:
        agent = demo_agent(provider.url, store=store)
        app = create_app(agent, auth=bearer_token("AGENTLOOP_TEST_TOKEN"))
        transport = httpx2.ASGITransport(app=app)
        headers = {"authorization": f"Bearer {TOKEN}"}
        async with (
            agent.model,  # type: ignore[union-attr]
            app.router.lifespan_context(app),
            httpx2.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", headers=headers, timeout=30
            ) as client,
        ):
            started = (await client.post("/api/runs", json={"input": "hi"})).json()
            old = await client.get("/api/sessions/old-session")
            await client.get(started["events"])
    stored = await store.get(started["session"])
    assert stored is not None
    keyed = hmac.new(SECRET.encode(), b"agentloop owner\0" + TOKEN.encode(), "sha256")
    assert stored.user != legacy
    assert stored.user == "bearer:k1:" + keyed.hexdigest()[:32]
    assert TOKEN not in stored.user
    assert old.status_code == 200
