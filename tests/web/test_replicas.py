"""The web front on Temporal (issue 35, points 1 and 2): two uvicorn replicas over loopback, each
with its own hub and its own store connection (one SQLite file), and two workers, on a real
Temporal dev server. A run started on one replica streams, resumes with ``Last-Event-ID``, is
decided and read on the other, exactly; its owner holds on both, and nowhere else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import Process

from agentloop import Agent
from agentloop.models.openai import OpenAIChatModel
from agentloop.sessions import SQLiteStore
from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    ProviderServer,
    RecordedRequest,
    ScriptedResponse,
)
from agentloop.web import Auth, WebLimits, bearer_token
from tests.support.node import node, run_script
from tests.support.temporal import free_port, import_temporal

import_temporal()
from agentloop.durable_web import create_app  # noqa: E402
from agentloop.temporal import TemporalAgent, connect, worker  # noqa: E402

from ._demo import FINAL, DemoProvider, demo_agent, transfer  # noqa: E402
from ._serving import Frame, frames, serving  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

PAY: list[EmulatedTurn | str] = [
    EmulatedTurn(text="Paying.", calls=[EmulatedCall("transfer", {"amount": 5, "to": "bob"})]),
    "Done.",
]


def _payer(url: str, store: SQLiteStore) -> Agent[Any, Any]:
    model = OpenAIChatModel("emulated", base_url=url + "/v1", api_key="k")
    return Agent(model, name="payer", tools=[transfer], store=store)


@asynccontextmanager
async def fleet(
    temporal: str,
    make: Any,
    db: Path,
    *,
    auths: tuple[Auth | None, Auth | None] = (None, None),
    limits: WebLimits | None = None,
    secrets: tuple[str | None, str | None] = (None, None),
) -> AsyncIterator[tuple[str, str]]:
    """Two workers and two replicas of the agent ``make(store)`` builds, each with its own
    store on ``db`` (and the server secret of ``secrets``, else the store's): the replicas'
    base URLs."""
    queue = f"web-{uuid.uuid4().hex[:8]}"
    async with AsyncExitStack() as stack:
        for _ in range(2):  # two workers, each its own client, agent and store connection
            store = await stack.enter_async_context(SQLiteStore(db))
            agent = await stack.enter_async_context(make(store))  # closes its model after
            durable = TemporalAgent(agent, task_queue=queue)
            await stack.enter_async_context(
                worker(
                    await connect(temporal), [durable], sticky_queue_schedule_to_start_timeout=1.0
                )
            )
        bases = []
        for auth, secret in zip(auths, secrets, strict=True):  # sharing Temporal and the file
            store = await stack.enter_async_context(SQLiteStore(db))
            agent = await stack.enter_async_context(make(store))
            app = create_app(
                agent, temporal=temporal, task_queue=queue, auth=auth, limits=limits, secret=secret
            )
            bases.append(await stack.enter_async_context(serving(app)))
        yield bases[0], bases[1]


async def _start(client: httpx2.AsyncClient, base: str, text: str, **extra: Any) -> Any:
    response = await client.post(f"{base}/api/runs", json={"input": text, **extra})
    assert response.status_code == 201, response.text
    return response.json()


async def _read(
    client: httpx2.AsyncClient,
    url: str,
    *,
    after: str | None = None,
    limit: int | None = None,
    headers: dict[str, str] | None = None,
) -> list[Frame]:
    sent = {**(headers or {}), **({"last-event-id": after} if after else {})}
    with anyio.fail_after(60):
        async with client.stream("GET", url, headers=sent) as response:
            assert response.status_code == 200, await response.aread()
            return await frames(response, limit=limit)


@pytest.fixture
async def demo_url() -> AsyncIterator[str]:
    async with ProviderServer(DemoProvider(chunk_delay=0.02)) as server:
        yield server.url


async def test_a_run_started_on_one_replica_streams_whole_on_the_other(
    temporal_target: str, demo_url: str, tmp_path: Path
) -> None:
    """``POST /api/runs`` on replica A, its events on replica B: every event once, seqs
    1..n in order, ending with the answer, the same as A streams them."""
    async with (
        fleet(temporal_target, lambda s: demo_agent(demo_url, store=s), tmp_path / "s.db") as (
            a,
            b,
        ),
        httpx2.AsyncClient(timeout=60) as client,
    ):
        run = await _start(client, a, "Paris or Oslo?")
        on_b = await _read(client, b + run["events"])
        on_a = await _read(client, a + run["events"])
    events = [f.json() for f in on_b]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [f.id for f in on_b] == [str(e["seq"]) for e in events]
    assert events[-1]["type"] == "run_finished"
    assert events[-1]["result"]["output"] == FINAL
    assert [f.data for f in on_a] == [f.data for f in on_b]


async def test_last_event_id_on_the_other_replica_goes_on_exactly_after_it(
    temporal_target: str, demo_url: str, tmp_path: Path
) -> None:
    """A client reads part of a run on A and drops; with ``Last-Event-ID`` on B it gets
    exactly the events after that one (no gap, no duplicate), in each protocol: the encoder
    rebuilt on B from the workflow's events sends what A would have sent next."""
    async with (
        fleet(temporal_target, lambda s: demo_agent(demo_url, store=s), tmp_path / "s.db") as (
            a,
            b,
        ),
        httpx2.AsyncClient(timeout=60) as client,
    ):
        for protocol in ("agentloop", "ag-ui", "vercel"):
            run = await _start(client, a, "Paris or Oslo?")
            url = run["events"] + f"?protocol={protocol}"
            first = await _read(client, a + url, limit=7)  # mid-run: it streams for a while
            while first[-1].id is None:  # an event's messages end with the one bearing its id
                first.pop()
            last = first[-1].id
            rest = await _read(client, b + url, after=last)
            whole = await _read(client, a + url)  # the run has ended: all of it, from A
            assert [f.data for f in first] + [f.data for f in rest] == [f.data for f in whole]
            ids = [int(f.id) for f in [*first, *rest] if f.id is not None]
            assert ids == sorted(set(ids)), protocol


async def test_a_run_started_on_one_replica_is_decided_on_the_other(
    temporal_target: str, tmp_path: Path
) -> None:
    """The run waits for an approval, streamed on A; ``resume`` with the decision on B
    continues the same workflow, and B's stream goes on from the wait: the tool runs once."""
    async with ProviderServer(EmulatedProvider(script=PAY)) as server:
        async with (
            fleet(temporal_target, lambda s: _payer(server.url, s), tmp_path / "s.db") as (a, b),
            httpx2.AsyncClient(timeout=60) as client,
        ):
            run = await _start(client, a, "pay bob")
            waited = [f.json() for f in await _read(client, a + run["events"])]
            assert waited[-1]["type"] == "run_waiting"
            (pending,) = waited[-1]["result"]["pending"]
            response = await client.post(
                f"{b}/api/sessions/{run['session']}/resume",
                json={"decisions": {pending["id"]: {"decision": "approve"}}},
            )
            assert response.status_code == 201, response.text
            resumed = response.json()
            assert resumed["run"] == run["run"]  # the same durable run, going on
            rest = [f.json() for f in await _read(client, b + resumed["events"])]
            history = (await client.get(f"{b}/api/sessions/{run['session']}")).json()
    assert rest[0]["seq"] == waited[-1]["seq"] + 1
    finished = [e for e in rest if e["type"] == "action_finished"]
    assert [e["result"]["output"] for e in finished] == ["sent 5 to bob"]
    assert rest[-1]["type"] == "run_finished" and rest[-1]["result"]["output"] == "Done."
    assert history["history"][0]["type"] == "run"


async def test_a_run_started_on_one_replica_is_stopped_from_the_other(
    temporal_target: str, demo_url: str, tmp_path: Path
) -> None:
    """``DELETE /api/runs/{run}`` on B cancels the workflow A started: A's stream ends without
    an answer, and the session takes a new message on B (its run no longer holds it)."""
    async with (
        fleet(temporal_target, lambda s: demo_agent(demo_url, store=s), tmp_path / "s.db") as (
            a,
            b,
        ),
        httpx2.AsyncClient(timeout=60) as client,
    ):
        run = await _start(client, a, "Paris or Oslo?")
        first = await _read(client, a + run["events"], limit=3)
        stopped = await client.delete(f"{b}/api/runs/{run['run']}")
        assert stopped.status_code == 204
        rest = await _read(client, a + run["events"], after=first[-1].id)
        again = await _start(client, b, "And Oslo?", session=run["session"])
        answered = await _read(client, b + again["events"])
    assert "run_finished" not in [f.json()["type"] for f in rest]
    assert answered[-1].json()["type"] == "run_finished"


async def test_a_new_question_on_the_other_replica_ends_the_run_that_waits(
    temporal_target: str, tmp_path: Path
) -> None:
    """The run waits for an approval, started on A; a new message in the session on B starts
    at once and ends the waiting run, ``abandoned`` in the history: a decision sent for it
    later, on either replica, is 409 and runs nothing."""
    pay, weather = EmulatedProvider(script=PAY), EmulatedProvider(script=["It is sunny."])

    def by_question(request: RecordedRequest) -> ScriptedResponse:
        asked = [m for m in request.json["messages"] if m["role"] == "user"]
        return (weather if "weather" in asked[-1]["content"] else pay)(request)

    async with ProviderServer(by_question) as server:
        async with (
            fleet(temporal_target, lambda s: _payer(server.url, s), tmp_path / "s.db") as (a, b),
            httpx2.AsyncClient(timeout=60) as client,
        ):
            run = await _start(client, a, "pay bob")
            waited = [f.json() for f in await _read(client, a + run["events"])]
            assert waited[-1]["type"] == "run_waiting"
            (pending,) = waited[-1]["result"]["pending"]
            again = await _start(client, b, "and the weather?", session=run["session"])
            answered = [f.json() for f in await _read(client, b + again["events"])]
            late = [
                await client.post(
                    f"{base}/api/sessions/{run['session']}/resume",
                    json={"decisions": {pending["id"]: {"decision": "approve"}}},
                )
                for base in (a, b)
            ]
            history = (await client.get(f"{a}/api/sessions/{run['session']}")).json()["history"]
    assert answered[-1]["type"] == "run_finished", answered[-1]
    assert answered[-1]["result"]["output"] == "It is sunny."
    assert [r.status_code for r in late] == [409, 409], [r.text for r in late]
    ends = {r["run_id"]: r["status"] for r in history if r["type"] == "run_end"}
    assert ends.get(waited[0]["run_id"]) == "abandoned", history
    ran = [r for r in history if r["type"] == "step" for a in r["step"]["actions"]]
    assert ran == [], history  # the transfer never ran


async def test_the_runs_a_caller_has_going_are_bounded_across_replicas(
    temporal_target: str, tmp_path: Path
) -> None:
    """With ``max_runs_per_owner=1``, a caller whose run waits on A is refused a second run
    on B (429): Temporal counts the caller's runs going on, whichever replica started them.
    Once decided and finished, B starts the next."""
    async with ProviderServer(EmulatedProvider(script=PAY)) as server:
        async with (
            fleet(
                temporal_target,
                lambda s: _payer(server.url, s),
                tmp_path / "s.db",
                limits=WebLimits(max_runs_per_owner=1),
            ) as (a, b),
            httpx2.AsyncClient(timeout=60) as client,
        ):
            run = await _start(client, a, "pay bob")
            waited = [f.json() for f in await _read(client, a + run["events"])]
            temporal = await connect(temporal_target)
            visible = f'WorkflowId = "{run["run"]}"'
            with anyio.fail_after(30):  # Temporal's visibility may lag a start by a moment
                while not (await temporal.count_workflows(visible)).count:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            refused = await client.post(f"{b}/api/runs", json={"input": "and eve"})
            assert refused.status_code == 429, refused.text
            (pending,) = waited[-1]["result"]["pending"]
            response = await client.post(
                f"{b}/api/sessions/{run['session']}/resume",
                json={"decisions": {pending["id"]: {"decision": "approve"}}},
            )
            await _read(client, b + response.json()["events"])
            closed = visible + ' AND ExecutionStatus = "Completed"'
            with anyio.fail_after(30):
                while not (await temporal.count_workflows(closed)).count:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            assert (
                await client.post(f"{b}/api/runs", json={"input": "and eve"})
            ).status_code == 201


async def test_owners_hold_on_every_replica_that_shares_the_secret(
    temporal_target: str, demo_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owner ids are an HMAC of the token keyed with the server's secret: B, sharing A's
    secret, serves A's caller its run and refuses another token's caller everything about it
    (404, as for no run); a replica with another secret refuses even A's caller."""
    monkeypatch.setenv("TOKEN_ALICE", "alice-token")
    monkeypatch.setenv("TOKEN_MALLORY", "mallory-token")
    alice, mallory = bearer_token("TOKEN_ALICE"), bearer_token("TOKEN_MALLORY")

    async def either(request: Any) -> str | None:
        return await alice(request) or await mallory(request)

    shared, another = "the replicas' secret", "another secret, not the replicas'"
    as_alice = {"authorization": "Bearer alice-token"}
    as_mallory = {"authorization": "Bearer mallory-token"}
    async with (
        fleet(
            temporal_target,
            lambda s: demo_agent(demo_url, store=s),
            tmp_path / "s.db",
            auths=(either, either),
            secrets=(shared, another),
        ) as (a, other),
        fleet(
            temporal_target,
            lambda s: demo_agent(demo_url, store=s),
            tmp_path / "s.db",
            auths=(either, either),
            secrets=(shared, shared),
        ) as (_, b),
        httpx2.AsyncClient(timeout=60) as client,
    ):
        response = await client.post(
            f"{a}/api/runs", json={"input": "Paris or Oslo?"}, headers=as_alice
        )
        assert response.status_code == 201, response.text
        run = response.json()
        events, session = run["events"], f"/api/sessions/{run['session']}"
        for base, who in ((b, as_mallory), (other, as_alice)):
            assert (await client.get(base + events, headers=who)).status_code == 404
            assert (await client.get(base + session, headers=who)).status_code == 404
            assert (
                await client.delete(base + f"/api/runs/{run['run']}", headers=who)
            ).status_code == 404
            resumed = await client.post(base + session + "/resume", json={}, headers=who)
            assert resumed.status_code == 404
            again = await client.post(
                base + "/api/runs", json={"input": "hi", "session": run["session"]}, headers=who
            )
            assert again.status_code == 404
        seen = await _read(client, b + events, headers=as_alice)
        assert seen[-1].json()["type"] == "run_finished"
        assert (await client.get(b + session, headers=as_alice)).status_code == 200


def _tool_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"].startswith("tool-")]


async def test_ag_ui_http_agent_runs_on_one_replica_and_resumes_on_the_other(
    temporal_target: str, tmp_path: Path
) -> None:
    """``@ag-ui/client``'s ``HttpAgent`` (its verifier on) asks A, which waits on an
    interrupt; it resumes on B (the decision reaches the workflow from B, and B streams the
    rest under the same call id), then asks A again in the same thread."""
    node()
    async with ProviderServer(EmulatedProvider(script=PAY)) as server:
        async with fleet(temporal_target, lambda s: _payer(server.url, s), tmp_path / "s.db") as (
            a,
            b,
        ):
            plan = [
                {"say": "pay bob", "url": a + "/api/ag-ui"},
                {"resume": {"status": "resolved"}, "url": b + "/api/ag-ui"},
                {"say": "thanks", "url": a + "/api/ag-ui"},
            ]
            found = await run_script(
                "ag_ui_client.mjs", a + "/api/ag-ui", "thread-replicas", json.dumps(plan)
            )
    waited, resumed, after = found["steps"]
    for step in found["steps"]:
        assert step["error"] is None, step["error"]
    (interrupt,) = waited["interrupts"]
    assert waited["events"][-1]["outcome"]["type"] == "interrupt"
    (result,) = [e for e in resumed["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == interrupt["toolCallId"] and result["content"] == "sent 5 to bob"
    assert not [e for e in resumed["events"] if e["type"] == "TOOL_CALL_START"]
    assert after["events"][-1]["type"] == "RUN_FINISHED"
    calls = [c for m in found["messages"] for c in m.get("toolCalls") or []]
    assert [c["id"] for c in calls] == [interrupt["toolCallId"]]


async def test_the_vercel_chat_approves_on_the_other_replica(
    temporal_target: str, tmp_path: Path
) -> None:
    """The AI SDK's ``Chat`` sends the prompt to A, which waits on the approval; its
    approval round trip goes to B, which continues the same run (the prompt ran once)."""
    node()
    async with ProviderServer(EmulatedProvider(script=PAY)) as server:
        async with fleet(temporal_target, lambda s: _payer(server.url, s), tmp_path / "s.db") as (
            a,
            b,
        ):
            plan = [{"say": "pay bob", "base": a}, {"approve": True, "base": b}]
            found = await run_script("vercel_chat.mjs", a, "ai", "chat-replicas", json.dumps(plan))
    assert found["errors"] == [] and found["status"] == "ready"
    first, second = found["requests"]
    assert (first["base"], second["base"]) == (a, b)
    _user, assistant = found["messages"]
    (part,) = _tool_parts(assistant)
    assert part["state"] == "output-available" and part["output"] == "sent 5 to bob"
    assert [p["text"] for p in assistant["parts"] if p["type"] == "text"][-1] == "Done."


async def test_the_vercel_chat_rejoins_on_the_other_replica(
    temporal_target: str, demo_url: str, tmp_path: Path
) -> None:
    """A tab posts to A and drops its connection; a fresh chat's ``resumeStream`` on B
    replays the run (it went on in its workflow) from its start to its end."""
    node()
    async with fleet(
        temporal_target, lambda s: demo_agent(demo_url, store=s), tmp_path / "s.db"
    ) as (a, b):
        plan = [{"post_and_drop": "Paris or Oslo?", "base": a}, {"resume": True, "base": b}]
        found = await run_script("vercel_chat.mjs", a, "ai", "chat-rejoin", json.dumps(plan))
    assert found["errors"] == [] and found["status"] == "ready"
    (rejoined,) = found["requests"]
    assert (rejoined["base"], rejoined["status"]) == (b, 200)
    _user, assistant = found["messages"]
    texts = [p["text"] for p in assistant["parts"] if p["type"] == "text"]
    assert texts[-1] == FINAL


@pytest.mark.slow
async def test_agentloop_serve_temporal_and_agentloop_worker_as_processes(
    temporal_target: str, tmp_path: Path
) -> None:
    """``agentloop worker AGENT --temporal ADDRESS`` twice and ``agentloop serve AGENT
    --temporal ADDRESS`` twice, as processes sharing a token, a secret and a SQLite store: a
    run started on one replica streams on the other, read on from where a first read left."""
    ports = [free_port(), free_port()]
    queue = f"cli-{uuid.uuid4().hex[:8]}"
    shared = ["--temporal", temporal_target, "--task-queue", queue]
    shared += ["--store", f"sqlite:///{tmp_path / 's.db'}"]
    agent = "tests.web._served:agent"
    async with ProviderServer(DemoProvider(chunk_delay=0.02)) as provider:
        env = {
            **os.environ,
            "AGENTLOOP_TEST_PROVIDER_URL": provider.url,
            "AGENTLOOP_TEST_TOKEN": "s3cret-token",
            "AGENTLOOP_SECRET": "the replicas' secret",
        }
        commands = [[*AGENTLOOP, "worker", agent, *shared] for _ in range(2)]
        served = [*AGENTLOOP, "serve", agent, *shared, "--token-env", "AGENTLOOP_TEST_TOKEN"]
        commands += [[*served, "--port", str(port)] for port in ports]
        async with AsyncExitStack() as stack:
            for command in commands:
                process = await anyio.open_process(command, env=env, stderr=subprocess.DEVNULL)
                stack.push_async_callback(_stop, process)
            a, b = (f"http://127.0.0.1:{port}" for port in ports)
            right = {"authorization": "Bearer s3cret-token"}
            async with httpx2.AsyncClient(timeout=60, headers=right) as client:
                await _until_up(client, a)
                await _until_up(client, b)
                run = await _start(client, a, "Paris or Oslo?")
                first = await _read(client, a + run["events"], limit=5)
                rest = await _read(client, b + run["events"], after=first[-1].id)
    events = [f.json() for f in [*first, *rest]]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "run_finished" and events[-1]["result"]["output"] == FINAL


AGENTLOOP = [sys.executable, "-m", "agentloop"]


async def _until_up(client: httpx2.AsyncClient, base: str) -> None:
    with anyio.fail_after(60):  # the first start imports the SDKs, slowly on a busy machine
        while True:
            try:
                await client.get(base + "/api/sessions/none")
                return
            except httpx2.ConnectError:
                await anyio.sleep(0.05)


async def _stop(process: Process) -> None:
    process.terminate()
    with anyio.move_on_after(10):
        await process.wait()
    await process.aclose()
