"""What the app refuses before it routes a request (DESIGN §8, "loopback is not a wall"): a
state-changing request from another origin or whose body is not declared JSON (a page on
another site, through the user's browser), and a ``Host`` that is neither a loopback name nor a
configured one (DNS rebinding), with a token or without. Over a real socket (uvicorn) on
asyncio; in-process on trio, where uvicorn does not run. Also the clean codes of issue 34: a
body nested beyond the bound is 400, and racing opens of one new thread are 409, never 500."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from starlette.applications import Starlette

from agentloop import Agent
from agentloop.sessions import InMemoryStore, SessionStore, SQLiteStore
from agentloop.testing import ProviderServer
from agentloop.web import bearer_token, create_app

from ._demo import DemoProvider, demo_agent
from ._serving import serving

POSTS = ["/api/runs", "/api/sessions/s1/resume", "/api/ag-ui", "/api/chat"]
RUN = {"input": "Paris or Oslo?"}


@pytest.fixture
async def provider() -> AsyncIterator[ProviderServer]:
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as server:
        yield server


@asynccontextmanager
async def _client(app: Starlette, anyio_backend: str) -> AsyncIterator[httpx2.AsyncClient]:
    """A client of ``app``: over a loopback socket under uvicorn on asyncio, in-process on trio."""
    if anyio_backend == "asyncio":
        async with serving(app) as base, httpx2.AsyncClient(base_url=base, timeout=30) as client:
            yield client
        return
    transport = httpx2.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000", timeout=30) as c,
    ):
        yield c


@asynccontextmanager
async def _served(
    provider: ProviderServer,
    anyio_backend: str,
    *,
    store: SessionStore | None = None,
    **options: Any,
) -> AsyncIterator[tuple[httpx2.AsyncClient, Agent[Any, Any], Starlette]]:
    agent = demo_agent(provider.url, store=store or InMemoryStore())
    app = create_app(agent, **options)
    try:
        async with _client(app, anyio_backend) as client:
            yield client, agent, app
    finally:
        await agent.model.aclose()  # type: ignore[union-attr]


def _own_origin(client: httpx2.AsyncClient) -> str:
    return str(client.base_url).rstrip("/")


async def test_a_body_not_declared_json_is_415_and_starts_nothing(
    provider: ProviderServer, anyio_backend: str
) -> None:
    """The bodies a page on another site can send without a preflight (text/plain, a form,
    multipart, none declared) are refused whatever they hold, at every endpoint that acts."""
    store = InMemoryStore()
    body = json.dumps({**RUN, "messages": [{"role": "user", "content": "hi"}]})
    async with _served(provider, anyio_backend, store=store) as (client, _, app):
        statuses: dict[tuple[str, str | None], int] = {}
        for path in POSTS:
            for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
                response = await client.post(path, content=body, headers={"content-type": kind})
                statuses[path, kind] = response.status_code
            bare = await client.post(path, content=body)  # no content-type at all
            statuses[path, None] = bare.status_code
        runs = dict(app.state.hub._logs)
    assert set(statuses.values()) == {415}, statuses
    assert runs == {}
    assert provider.requests == []


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "null"},  # a sandboxed frame, a file:// page
        {"origin": "http://localhost:1"},  # another port on this machine is another origin
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ],
    ids=["foreign", "null", "other-port", "cross-site", "same-site"],
)
async def test_a_request_from_another_origin_is_403_and_starts_nothing(
    provider: ProviderServer, anyio_backend: str, headers: dict[str, str]
) -> None:
    async with _served(provider, anyio_backend) as (client, _, app):
        statuses = [
            (await client.post(path, json=RUN, headers=headers)).status_code for path in POSTS
        ]
        cancel = await client.delete("/api/runs/abc", headers=headers)
        runs = dict(app.state.hub._logs)
    assert statuses == [403] * len(POSTS)
    assert cancel.status_code == 403
    assert runs == {} and provider.requests == []


async def test_the_own_origin_and_configured_ones_are_admitted(
    provider: ProviderServer, anyio_backend: str
) -> None:
    allowed = "https://app.example"
    async with _served(provider, anyio_backend, allow_origins=[allowed]) as (client, _, _app):
        own = await client.post("/api/runs", json=RUN, headers={"origin": _own_origin(client)})
        configured = await client.post("/api/runs", json=RUN, headers={"origin": allowed})
        same = await client.post("/api/runs", json=RUN, headers={"sec-fetch-site": "same-origin"})
        typed = await client.post("/api/runs", json=RUN, headers={"sec-fetch-site": "none"})
        program = await client.post(  # no Origin, no Sec-Fetch-Site: not a browser
            "/api/runs", json=RUN, headers={"content-type": "application/json; charset=utf-8"}
        )
    assert [r.status_code for r in (own, configured, same, typed, program)] == [201] * 5


@pytest.mark.parametrize("token", [False, True], ids=["no-token", "token"])
async def test_a_foreign_host_is_refused_before_routing(
    provider: ProviderServer,
    anyio_backend: str,
    token: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding: a page on ``evil.example`` whose name now points at 127.0.0.1 sends its
    own name as ``Host``. Every path is refused, routed or not, and nothing runs."""
    options: dict[str, Any] = {}
    auth: dict[str, str] = {}
    if token:
        monkeypatch.setenv("AGENTLOOP_TEST_TOKEN", "s3cret")
        options["auth"] = bearer_token("AGENTLOOP_TEST_TOKEN")
        auth = {"authorization": "Bearer s3cret"}
    async with _served(provider, anyio_backend, **options) as (client, _, app):
        port = client.base_url.port or 80
        foreign = {"host": f"evil.example:{port}", **auth}
        refused = [
            (await client.post("/api/runs", json=RUN, headers=foreign)).status_code,
            (await client.post("/api/ag-ui", json={"messages": []}, headers=foreign)).status_code,
            (await client.get("/api/sessions/s1", headers=foreign)).status_code,
            (await client.get("/api/runs/r1/events", headers=foreign)).status_code,
            (await client.get("/", headers=foreign)).status_code,
            (await client.get("/no/such/route", headers=foreign)).status_code,
        ]
        admitted = [
            (await client.post("/api/runs", json=RUN, headers={"host": h, **auth})).status_code
            for h in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost")
        ]
        runs = len(app.state.hub._logs)
    assert refused == [400] * len(refused)
    assert admitted == [201] * 4
    assert runs == 4


async def test_configured_hosts_are_admitted(provider: ProviderServer, anyio_backend: str) -> None:
    hosts = ["agent.example", "*.internal.example"]
    async with _served(provider, anyio_backend, allow_hosts=hosts) as (client, _, _app):
        statuses = [
            (await client.post("/api/runs", json=RUN, headers={"host": host})).status_code
            for host in (
                "agent.example",
                "a.internal.example:8443",
                "internal.example",
                "x.example",
            )
        ]
    assert statuses == [201, 201, 400, 400]


async def test_a_body_nested_beyond_the_bound_is_400(
    provider: ProviderServer, anyio_backend: str
) -> None:
    """40 KB nested 20,000 deep was a RecursionError (500); 65 deep is past the bound too."""
    deep = "[" * 20_000 + "]" * 20_000
    async with _served(provider, anyio_backend) as (client, _, _app):
        codes = []
        for body in (
            '{"input": "hi", "x": ' + deep + "}",
            '{"input": "hi", "x": ' + "[" * 65 + "]" * 65 + "}",
            '{"messages": ' + "[" * 30_000 + "]" * 30_000 + "}",
        ):
            headers = {"content-type": "application/json"}
            for path in ("/api/runs", "/api/ag-ui"):
                codes.append((await client.post(path, content=body, headers=headers)).status_code)
        shallow = await client.post("/api/runs", json={**RUN, "x": [[[[1]]]]})
    assert codes == [400] * 6
    assert shallow.status_code == 201


@pytest.mark.parametrize("path", ["/api/ag-ui", "/api/chat"])
async def test_racing_opens_of_one_new_thread_are_409_not_500(
    provider: ProviderServer, anyio_backend: str, path: str, tmp_path: Path
) -> None:
    """Eight opens of one new thread at once on SQLite: one runs, the others are refused with
    409 (the thread is being made, or is busy), none is a 500."""
    store = SQLiteStore(tmp_path / "sessions.db")
    thread = "thread-raced"

    def request(n: int) -> dict[str, Any]:
        message = {"id": f"m{n}", "role": "user", "content": "hi"}
        if path == "/api/chat":
            return {
                "id": thread,
                "messages": [{**message, "parts": [{"type": "text", "text": "hi"}]}],
            }
        return {"threadId": thread, "runId": f"r{n}", "messages": [message], "tools": [],
                "context": [], "state": {}, "forwardedProps": {}}  # fmt: skip

    async with store, _served(provider, anyio_backend, store=store) as (client, _, _app):
        codes: list[int] = []

        async def post(n: int) -> None:
            async with client.stream("POST", path, json=request(n)) as response:
                codes.append(response.status_code)
                await response.aread()

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(post, n)
    assert 500 not in codes, codes
    assert set(codes) <= {200, 409}, codes
    assert codes.count(200) >= 1


CROSS_SITE = [
    {"origin": "http://evil.example"},  # EventSource, fetch, XHR from another site
    {"origin": "null"},
    {"origin": "http://localhost:1"},
    {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"},  # <img>, <script>, <link>
    {"sec-fetch-site": "same-site", "sec-fetch-mode": "no-cors"},
    {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "iframe"},
    {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "document"},
]


async def _reads(client: httpx2.AsyncClient, headers: dict[str, str]) -> list[int]:
    """A run started by a program, then the statuses of the GETs that read it with ``headers``:
    its events (SSE), its session's history and the chat stream that rejoins it."""
    started = (await client.post("/api/runs", json=RUN)).json()
    codes = []
    for path in (
        started["events"],
        started["events"] + "?protocol=ag-ui",
        f"/api/sessions/{started['session']}",
        f"/api/chat/{started['session']}/stream",
    ):
        async with client.stream("GET", path, headers=headers) as response:
            await response.aread()
            codes.append(response.status_code)
    return codes


@pytest.mark.parametrize(
    "headers",
    CROSS_SITE,
    ids=["foreign", "null", "other-port", "no-cors", "same-site", "frame", "link"],
)
async def test_a_read_from_another_origin_is_403_and_opens_no_stream(
    provider: ProviderServer, anyio_backend: str, headers: dict[str, str]
) -> None:
    """A page on another site cannot read run data through the user's browser: not its events
    (an EventSource sends no preflight; each open stream holds one of the caller's stream
    slots), not a session's history, not even the page-less answer's status or timing."""
    async with _served(provider, anyio_backend) as (client, _, app):
        codes = await _reads(client, headers)
        streams = dict(app.state.hub._streams)
    assert codes == [403] * 4
    assert not any(streams.values()), streams


async def test_reads_from_the_own_origin_programs_and_links_to_the_page_are_admitted(
    provider: ProviderServer, anyio_backend: str
) -> None:
    """The page's own reads, a program's (no ``Origin``, no ``Sec-Fetch-Site``) and a typed
    address pass; a link from another site opens the page, which holds no run data."""
    allowed = "https://app.example"
    async with _served(provider, anyio_backend, allow_origins=[allowed]) as (client, _, _app):
        admitted = [
            await _reads(client, headers)
            for headers in (
                {"origin": _own_origin(client)},
                {"origin": allowed},
                {"sec-fetch-site": "same-origin"},
                {"sec-fetch-site": "none"},
                {},
            )
        ]
        link = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"}
        page = await client.get("/", headers={**link, "sec-fetch-dest": "document"})
    assert all(code in (200, 204) for codes in admitted for code in codes), admitted
    assert page.status_code == 200


async def test_reads_are_checked_under_the_prefix_an_app_is_mounted_at(
    provider: ProviderServer, anyio_backend: str
) -> None:
    """Mounted at ``/agent``, the API's reads are still the API's; the page is still open."""
    from starlette.routing import Mount

    agent = demo_agent(provider.url, store=InMemoryStore())
    outer = Starlette(routes=[Mount("/agent", app=create_app(agent))])
    cross = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"}
    try:
        async with _client(outer, anyio_backend) as client:
            read = await client.get("/agent/api/sessions/s1", headers=cross)
            page = await client.get("/agent/", headers={**cross, "sec-fetch-mode": "navigate"})
    finally:
        await agent.model.aclose()  # type: ignore[union-attr]
    assert (read.status_code, page.status_code) == (403, 200)
