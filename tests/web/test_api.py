"""The HTTP API over a real socket (uvicorn, so asyncio only), on the emulated provider: runs
start with a POST, stream as SSE with ``id:`` = seq, resume with ``Last-Event-ID`` without
running the prompt again, refuse a busy session with 409, and keep callers to their own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from starlette.requests import Request

from agentloop import Agent, tool
from agentloop.sessions import InMemoryStore
from agentloop.testing import ProviderServer
from agentloop.web import WebLimits, create_app

from ._demo import FINAL, DemoProvider, demo_agent
from ._serving import frames, serving

pytestmark = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn's loop


@pytest.fixture
async def provider() -> AsyncIterator[ProviderServer]:
    async with ProviderServer(DemoProvider(chunk_delay=0.005)) as server:
        yield server


@pytest.fixture
async def agent(provider: ProviderServer) -> AsyncIterator[Agent[Any, Any]]:
    served = demo_agent(provider.url, store=InMemoryStore())
    try:
        yield served
    finally:
        await served.model.aclose()  # type: ignore[union-attr]  # the caller's model


async def _by_user(request: Request) -> str | None:
    return request.headers.get("x-user")


async def _events(client: httpx2.AsyncClient, url: str, **headers: str) -> list[Any]:
    async with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        return [(f.id, f.json()) for f in await frames(response)]


async def test_a_post_starts_a_run_whose_frames_carry_each_events_seq(
    agent: Agent[Any, Any],
) -> None:
    """POST /api/runs → 201 with the run and a new unguessable session; the SSE frames are the
    events' JSON, each with ``id:`` its seq, ending with the answer."""
    async with (
        serving(create_app(agent)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        started = await client.post("/api/runs", json={"input": "Paris or Oslo?"})
        assert started.status_code == 201, started.text
        body = started.json()
        assert len(body["session"]) == 32 and body["events"] == f"/api/runs/{body['run']}/events"
        events = await _events(client, body["events"])
    assert [ident for ident, _ in events] == [str(e["seq"]) for _, e in events]
    assert events[0][1]["type"] == "run_started"
    assert events[-1][1]["type"] == "run_finished"
    assert events[-1][1]["result"]["output"] == FINAL


async def test_a_client_that_reconnects_with_last_event_id_resumes_and_nothing_runs_again(
    agent: Agent[Any, Any], provider: ProviderServer
) -> None:
    """A client that drops after a few frames and reconnects with ``Last-Event-ID`` gets the
    rest, each event once; the model was asked only as often as one run asks (4 calls)."""
    async with (
        serving(create_app(agent)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        body = (await client.post("/api/runs", json={"input": "Paris or Oslo?"})).json()
        async with client.stream("GET", body["events"]) as response:
            first = await frames(response, limit=5)
        last = first[-1].id
        assert last is not None
        rest = await _events(client, body["events"], **{"last-event-id": last})
        again = await _events(client, body["events"])  # a new reader gets the whole run
    seqs = [int(f.id or 0) for f in first] + [int(i) for i, _ in rest]
    assert seqs == list(range(1, len(seqs) + 1))
    assert rest[-1][1]["type"] == "run_finished"
    assert [int(i) for i, _ in again] == seqs
    assert provider.stats.requests == 4  # two steps, the withdrawn answer and its rewrite


async def test_a_busy_session_answers_409_not_a_failed_run(agent: Agent[Any, Any]) -> None:
    """A second run on a session that a run holds is refused with 409 before anything runs."""
    async with (
        serving(create_app(agent)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        body = (await client.post("/api/runs", json={"input": "one"})).json()
        second = await client.post("/api/runs", json={"input": "two", "session": body["session"]})
        assert second.status_code == 409, second.text
        await _events(client, body["events"])  # the first run ends
        third = await client.post("/api/runs", json={"input": "three", "session": body["session"]})
        assert third.status_code == 201
        await _events(client, third.json()["events"])


async def test_callers_reach_only_their_own_sessions_and_runs(agent: Agent[Any, Any]) -> None:
    """With an auth dependency, no owner is 401; another owner's session and run are 404
    (reading, resuming, streaming and stopping alike); the owner reads its history."""
    app = create_app(agent, auth=_by_user)
    async with serving(app) as base, httpx2.AsyncClient(base_url=base, timeout=30) as client:
        assert (await client.post("/api/runs", json={"input": "hi"})).status_code == 401
        alice = {"x-user": "alice"}
        body = (await client.post("/api/runs", json={"input": "hi"}, headers=alice)).json()
        await _events(client, body["events"], **alice)
        session, run = body["session"], body["run"]
        bob = {"x-user": "bob"}
        assert (await client.get(f"/api/sessions/{session}", headers=bob)).status_code == 404
        assert (await client.get(f"/api/runs/{run}/events", headers=bob)).status_code == 404
        assert (await client.delete(f"/api/runs/{run}", headers=bob)).status_code == 404
        resumed = await client.post(f"/api/sessions/{session}/resume", json={}, headers=bob)
        assert resumed.status_code == 404
        taken = {"input": "mine now", "session": session}
        assert (await client.post("/api/runs", json=taken, headers=bob)).status_code == 404
        history = await client.get(f"/api/sessions/{session}", headers=alice)
    assert history.status_code == 200
    kinds = [r["type"] for r in history.json()["history"]]
    assert kinds[0] == "run" and kinds[-1] == "run_end"


async def test_a_post_that_accepts_only_event_streams_is_answered_with_the_runs_stream(
    agent: Agent[Any, Any],
) -> None:
    """``Accept: text/event-stream``: one request where ``EventSource`` needs two. The POST's
    answer is the run's stream, its run and session in headers; ``Content-Location`` resumes it
    with ``Last-Event-ID``; a stream over the caller's bound is 429 and starts no run."""
    stream = {"accept": "text/event-stream"}
    limits = WebLimits(max_streams_per_owner=1)
    async with (
        serving(create_app(agent, limits=limits)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        async with client.stream(
            "POST", "/api/runs", json={"input": "Paris?"}, headers=stream
        ) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith(
                "text/event-stream"
            )
            run, session = r.headers["x-agentloop-run"], r.headers["x-agentloop-session"]
            assert r.headers["content-location"] == f"/api/runs/{run}/events"
            over = await client.post("/api/runs", json={"input": "Oslo?"}, headers=stream)
            assert over.status_code == 429
            events = [(f.id, f.json()) for f in await frames(r)]
        assert events[0][1]["type"] == "run_started" and events[-1][1]["type"] == "run_finished"
        assert events[-1][1]["result"]["output"] == FINAL
        after = events[2][0]
        assert after is not None
        resumed = await _events(client, f"/api/runs/{run}/events", **{"last-event-id": after})
        assert resumed == events[3:]
        assert agent.store is not None
        assert [found.id for found in await agent.store.list(user="local")] == [
            session
        ]  # 429: none
        plain = await client.post("/api/runs", json={"input": "again", "session": session})
        assert plain.status_code == 201  # JSON, as before, for any other Accept


async def test_bodies_inputs_runs_and_streams_are_bounded(agent: Agent[Any, Any]) -> None:
    """A body over the bound and an input over the bound are 413; a run and a stream beyond
    the caller's bounds are 429."""
    limits = WebLimits(
        max_body_bytes=2_000, max_input_chars=100, max_runs_per_owner=1, max_streams_per_owner=1
    )
    async with (
        serving(create_app(agent, limits=limits)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        big = await client.post(
            "/api/runs",
            content=b'{"input": "' + b"x" * 3000 + b'"}',
            headers={"content-type": "application/json"},
        )
        assert big.status_code == 413
        long = await client.post("/api/runs", json={"input": "y" * 101})
        assert long.status_code == 413
        body = (await client.post("/api/runs", json={"input": "hi"})).json()
        assert (await client.post("/api/runs", json={"input": "more"})).status_code == 429
        async with client.stream("GET", body["events"]) as first:
            assert first.status_code == 200
            second = await client.get(body["events"])
            assert second.status_code == 429
            await frames(first)
        assert (await client.post("/api/runs", json={"input": "next"})).status_code == 201


async def test_cors_is_off_unless_configured(agent: Agent[Any, Any]) -> None:
    """A cross-origin preflight gets no CORS grant by default, and one for a configured origin."""
    preflight = {
        "origin": "https://evil.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type",
    }
    async with (
        serving(create_app(agent)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        closed = await client.options("/api/runs", headers=preflight)
    assert "access-control-allow-origin" not in closed.headers
    app = create_app(agent, cors_origins=["https://app.example"])
    async with serving(app) as base, httpx2.AsyncClient(base_url=base, timeout=30) as client:
        allowed = await client.options(
            "/api/runs", headers={**preflight, "origin": "https://app.example"}
        )
        denied = await client.options("/api/runs", headers=preflight)
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-origin" not in denied.headers


async def test_the_page_is_served_with_a_strict_content_security_policy(
    agent: Agent[Any, Any],
) -> None:
    """The page and its script come with a CSP that allows only this origin's script."""
    async with (
        serving(create_app(agent)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        page = await client.get("/")
        script = await client.get("/app.js")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    sinks = ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "DOMParser"]
    sinks += ["eval(", "Function(", "srcdoc", "createContextualFragment"]
    assert [s for s in sinks if s in script.text] == []  # it builds nodes; it never parses HTML


@tool(requires_approval=True)
async def transfer(amount: int, to: str) -> str:
    """Send money.

    Args:
        amount: how much
        to: to whom
    """
    return f"sent {amount} to {to}"


async def test_approval_decisions_go_through_the_api(provider: ProviderServer) -> None:
    """A run that needs approval ends its stream waiting; a POST of the decision resumes it as
    a new stream that runs the call and answers; bad decisions are 400 and lose nothing."""
    from agentloop.models.openai import OpenAIChatModel
    from agentloop.testing import EmulatedCall, EmulatedProvider, EmulatedTurn

    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("transfer", {"amount": 5, "to": "bob"})]),
        "Done.",
    ]
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        model = OpenAIChatModel("emulated", base_url=server.url + "/v1", api_key="k")
        agent = Agent(model, tools=[transfer], store=InMemoryStore())
        async with model:
            async with (
                serving(create_app(agent)) as base,
                httpx2.AsyncClient(base_url=base, timeout=30) as client,
            ):
                body = (await client.post("/api/runs", json={"input": "pay bob"})).json()
                events = [e for _, e in await _events(client, body["events"])]
                assert events[-1]["type"] == "run_waiting"
                (call,) = events[-1]["result"]["pending"]
                async with client.stream("GET", body["events"] + "?protocol=vercel") as response:
                    vercel = [f.json() for f in await frames(response) if f.data != "[DONE]"]
                (asked,) = [p for p in vercel if p["type"] == "tool-approval-request"]
                started = [p for p in vercel if p["type"] == "tool-input-available"]
                assert asked["approvalId"] == call["id"]
                assert asked["toolCallId"] == started[0]["toolCallId"]
                url = f"/api/sessions/{body['session']}/resume"
                bad = await client.post(url, json={"decisions": {"nope": {"decision": "approve"}}})
                assert bad.status_code == 400
                odd = await client.post(url, json={"decisions": {call["id"]: {"decision": "?"}}})
                assert odd.status_code == 400
                decided = await client.post(
                    url, json={"decisions": {call["id"]: {"decision": "approve"}}}
                )
                assert decided.status_code == 201, decided.text
                resumed = [e for _, e in await _events(client, decided.json()["events"])]
                # The same through AG-UI: its interrupt, answered by a resume entry.
                body = (await client.post("/api/runs", json={"input": "pay bob again"})).json()
                async with client.stream("GET", body["events"] + "?protocol=ag-ui") as response:
                    waited = [f.json() for f in await frames(response)]
                (interrupt,) = waited[-1]["outcome"]["interrupts"]
                answer = {
                    "threadId": body["session"],
                    "runId": "r2",
                    "messages": [],
                    "resume": [{"interruptId": interrupt["id"], "status": "resolved"}],
                }
                async with client.stream("POST", "/api/ag-ui", json=answer) as response:
                    via_ag_ui = [f.json() for f in await frames(response)]
    assert waited[-1]["type"] == "RUN_FINISHED" and interrupt["reason"] == "approval"
    results = [m["content"] for m in via_ag_ui if m["type"] == "TOOL_CALL_RESULT"]
    assert results == ["sent 5 to bob"] and via_ag_ui[-1]["result"] == "Done."
    types = [e["type"] for e in resumed]
    assert "action_decided" in types and "action_started" in types
    finished = [e for e in resumed if e["type"] == "action_finished"]
    assert finished[0]["result"]["output"] == "sent 5 to bob"
    assert resumed[-1]["type"] == "run_finished" and resumed[-1]["result"]["output"] == "Done."


async def test_ag_ui_and_vercel_clients_post_their_own_requests(agent: Agent[Any, Any]) -> None:
    """``POST /api/ag-ui`` takes a RunAgentInput and answers in AG-UI (its threadId the
    session, continued on the next request); ``POST /api/chat`` takes useChat's body and
    answers with the UI message stream and its header; either stream resumes by protocol."""
    from ag_ui.core import RunAgentInput, UserMessage

    run_input = RunAgentInput(
        thread_id="thread-1",
        run_id="r1",
        state=None,
        messages=[UserMessage(id="m1", role="user", content="Paris or Oslo?")],
        tools=[],
        context=[],
        forwarded_props=None,
    )
    body = run_input.model_dump(mode="json", by_alias=True)
    chat = {
        "id": "chat-1",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}],
    }
    async with (
        serving(create_app(agent)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        async with client.stream("POST", "/api/ag-ui", json=body) as response:
            ag_ui = [f.json() for f in await frames(response)]
        again = await client.post("/api/ag-ui", json=body)  # the same thread, a second run
        async with client.stream("POST", "/api/chat", json=chat) as response:
            assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
            vercel = [f.data for f in await frames(response)]
        history = await client.get("/api/sessions/thread-1")
        run = (await client.post("/api/runs", json={"input": "hi"})).json()
        async with client.stream("GET", run["events"] + "?protocol=vercel") as response:
            whole = await frames(response)
        cut = next(f for f in whole if f.id is not None and int(f.id) > 10)
        headers = {"last-event-id": cut.id or ""}
        url = run["events"] + "?protocol=vercel"
        async with client.stream("GET", url, headers=headers) as response:
            tail = await frames(response)
    assert ag_ui[0]["type"] == "RUN_STARTED" and ag_ui[0]["threadId"] == "thread-1"
    assert ag_ui[-1]["type"] == "RUN_FINISHED" and ag_ui[-1]["result"] == FINAL
    assert again.status_code == 200
    assert [r["type"] for r in history.json()["history"]].count("run") == 2
    assert vercel[0].startswith('{"type":"start"') and vercel[-1] == "[DONE]"
    assert [f.data for f in tail] == [f.data for f in whole][whole.index(cut) + 1 :]


async def test_a_stopped_run_ends_each_protocol_as_stopped(agent: Agent[Any, Any]) -> None:
    """``DELETE`` stops a run: its AG-UI stream ends with a cancelled outcome, its Vercel
    stream with ``abort`` and ``[DONE]``; another caller cannot stop it."""
    async with (
        serving(create_app(agent)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        run = (await client.post("/api/runs", json={"input": "hi"})).json()
        stopped = await client.delete(f"/api/runs/{run['run']}")
        assert stopped.status_code == 204
        async with client.stream("GET", run["events"] + "?protocol=ag-ui") as response:
            ag_ui = [f.json() for f in await frames(response)]
        async with client.stream("GET", run["events"] + "?protocol=vercel") as response:
            vercel = [f.data for f in await frames(response)]
    assert ag_ui[-1]["type"] == "RUN_FINISHED" and ag_ui[-1]["outcome"] == {"type": "cancelled"}
    assert vercel[-2:] == ['{"type":"abort","reason":"the run was stopped"}', "[DONE]"]


async def test_a_new_question_ends_the_run_that_waits_and_its_calls_never_run() -> None:
    """A new message in a session whose run waits for decisions starts at once (the page
    offers the old calls no more) and ends the waiting run in the history, ``abandoned``:
    decisions sent for it later are 409 and run nothing, and it is not in later memory."""
    from agentloop.models import ModelRequest
    from agentloop.testing import FunctionModel, Reply, call

    sent: list[str] = []
    asked: list[str] = []

    @tool(requires_approval=True)
    async def transfer(amount: int, to: str) -> str:
        """Send money.

        Args:
            amount: how much
            to: to whom
        """
        sent.append(to)
        return f"sent {amount} to {to}"

    def reply(request: ModelRequest) -> Reply | str:
        asked.append(repr(request.messages))
        if len(asked) == 1:
            return Reply(calls=[call("transfer", {"amount": 5, "to": "bob"}, id="t")])
        return "It is sunny."

    agent = Agent(FunctionModel(reply), tools=[transfer], store=InMemoryStore())
    async with (
        serving(create_app(agent)) as base,
        httpx2.AsyncClient(base_url=base, timeout=30) as client,
    ):
        first = (await client.post("/api/runs", json={"input": "pay bob"})).json()
        waited = [e for _, e in await _events(client, first["events"])]
        session = first["session"]
        second = await client.post(
            "/api/runs", json={"input": "and the weather?", "session": session}
        )
        assert second.status_code == 201, second.text
        answered = [e for _, e in await _events(client, second.json()["events"])]
        late = await client.post(
            f"/api/sessions/{session}/resume", json={"decisions": {"t": {"decision": "approve"}}}
        )
        assert late.status_code == 409, late.text  # on main: the old call ran, after the new run
        history = (await client.get(f"/api/sessions/{session}")).json()["history"]
        third = await client.post("/api/runs", json={"input": "more?", "session": session})
        await _events(client, third.json()["events"])
    assert waited[-1]["type"] == "run_waiting"
    assert answered[-1]["type"] == "run_finished"
    ends = {r["run_id"]: r for r in history if r["type"] == "run_end"}
    assert ends[waited[0]["run_id"]]["status"] == "abandoned", history
    assert sent == []
    assert "and the weather?" in asked[-1] and "pay bob" not in asked[-1]
