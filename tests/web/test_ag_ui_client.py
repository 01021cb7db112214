"""AG-UI as its own client reads it: ``@ag-ui/client``'s ``HttpAgent`` (its verifier on, as
always) drives ``POST /api/ag-ui`` over a loopback socket, through text, reasoning, tool calls
and their results, a failing tool, a failed run, and an interrupt resumed by approve, deny and
edit; one id per tool call throughout, and the messages it rebuilds are the session's. Each on
the newest client (``@ag-ui/client`` 1.0.0) and the lowest one supported (0.0.59, the npm alias
``ag-ui-client-v0``: the first whose verifier accepts sub-agent events), which differ in what
they accept: 0.0.59's ``RUN_FINISHED`` has no ``cancelled`` outcome."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentloop import Agent, tool
from agentloop.sessions import InMemoryStore
from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    ProviderServer,
    RecordedRequest,
    ScriptedResponse,
)
from agentloop.web import create_app
from tests.support.node import node, run_script

from ._demo import DRAFT, FINAL, THOUGHT, DemoProvider, crunch, demo_agent, transfer
from ._serving import serving

pytestmark = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn's loop

NEWEST, LOWEST = "@ag-ui/client", "ag-ui-client-v0"  # 1.0.0, and 0.0.59 by an npm alias


@pytest.fixture(params=[NEWEST, LOWEST])
def client(request: pytest.FixtureRequest) -> str:
    """The AG-UI client package the test drives."""
    return str(request.param)


@tool
async def explode(why: str) -> str:
    """Always fails.

    Args:
        why: the reason
    """
    raise RuntimeError(f"boom: {why}")


async def _drive(
    agent: Agent[Any, Any], thread: str, plan: list[dict[str, Any]], client: str
) -> Any:
    """The client's findings for ``plan`` on ``thread``, and the session's history after it."""
    node()  # skip (or fail) before serving when the clients are missing
    app = create_app(agent)
    async with serving(app) as base:
        url = base + "/api/ag-ui"
        found = await run_script("ag_ui_client.mjs", url, thread, json.dumps(plan), client)
        history = await app.state.hub.history("local", thread)
    return found, history


def _ok(step: dict[str, Any]) -> list[dict[str, Any]]:
    assert step["error"] is None, step["error"]
    events: list[dict[str, Any]] = step["events"]
    return events


def _calls(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    by_id: dict[str, list[str]] = {}
    for event in events:
        if event["type"].startswith("TOOL_CALL"):
            by_id.setdefault(event["toolCallId"], []).append(event["type"])
    return by_id


def _rebuilt(found: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The client's messages as (kind, what), less the drafts ``agentloop.attempt_discarded``
    named (AG-UI cannot take a message back: the front end drops them, as the guide says).
    Each result is checked to answer the call just before it, by id."""
    dropped = {
        ident
        for step in found["steps"]
        for e in step["events"]
        if e["type"] == "CUSTOM" and e["name"] == "agentloop.attempt_discarded"
        for ident in e["value"]["message_ids"]
    }
    out: list[tuple[Any, ...]] = []
    last_call = None
    for m in found["messages"]:
        if m["id"] in dropped:
            continue
        if m["role"] in ("user", "assistant", "reasoning") and m.get("content"):
            out.append((m["role"], m["content"]))
        for call in m.get("toolCalls") or []:
            fn = call["function"]
            last_call = call["id"]
            out.append(("call", fn["name"], json.loads(fn["arguments"])))
        if m["role"] == "tool":
            assert m["toolCallId"] == last_call
            out.append(("result", m["content"]))
    return out


def _history(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The session's history in the same terms."""
    out: list[tuple[Any, ...]] = []
    for record in records:
        if record["type"] == "run" and record["parent_run_id"] is None:
            out.append(("user", record["input"]))
        if record["type"] != "step":
            continue
        actions = {action["tag"]: action for action in record["step"]["actions"]}
        for part in record["step"]["parts"]:
            if part["kind"] in ("thought", "text") and part["text"]:
                out.append(
                    ("reasoning" if part["kind"] == "thought" else "assistant", part["text"])
                )
            elif part["kind"] == "tool_call":
                action = actions[part["id"]]
                out.append(("call", action["name"], json.loads(part["arguments"])))
                error, output = action["error"], action["output"]
                shown = output if isinstance(output, str) else json.dumps(output)
                out.append(("result", f"error: {error}" if error else shown))
    return out


@pytest.fixture
async def demo() -> AsyncIterator[Agent[Any, Any]]:
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as server:
        agent = demo_agent(server.url, store=InMemoryStore())
        async with agent.model:  # type: ignore[union-attr]
            yield agent


async def test_http_agent_reads_a_run_with_reasoning_tools_and_a_withdrawn_draft(
    demo: Agent[Any, Any], client: str
) -> None:
    found, history = await _drive(demo, "thread-demo", [{"say": "Paris or Oslo?"}], client)
    (step,) = found["steps"]
    events = _ok(step)
    assert step["result"] == FINAL
    types = [e["type"] for e in events]
    assert types.count("STEP_STARTED") == types.count("STEP_FINISHED") == 3
    for sequence in _calls(events).values():
        assert sequence[0] == "TOOL_CALL_START" and sequence[-1] == "TOOL_CALL_RESULT"
    reasoning = [m["content"] for m in found["messages"] if m["role"] == "reasoning"]
    assert THOUGHT in reasoning
    assert DRAFT in [m.get("content") for m in found["messages"]]  # until it is dropped
    assert _rebuilt(found) == _history(history)
    assert found["state"] == {}


def _approval_agent(url: str) -> Agent[Any, Any]:
    from agentloop.models.openai import OpenAIChatModel

    model = OpenAIChatModel("emulated", base_url=url + "/v1", api_key="k")
    return Agent(model, tools=[transfer, explode], store=InMemoryStore())


PAY: list[EmulatedTurn | str] = [
    EmulatedTurn(text="Paying.", calls=[EmulatedCall("transfer", {"amount": 5, "to": "bob"})]),
    "Done.",
]


@pytest.mark.parametrize(
    ("answer", "output"),
    [
        ({"status": "resolved"}, "sent 5 to bob"),
        ({"status": "resolved", "payload": {"decision": "deny", "reason": "no"}}, None),
        ({"status": "cancelled"}, None),
        (
            {
                "status": "resolved",
                "payload": {"decision": "edit", "arguments": {"amount": 3, "to": "bob"}},
            },
            "sent 3 to bob",
        ),
    ],
    ids=["approve", "deny", "cancel", "edit"],
)
async def test_an_interrupt_resumed_by_the_client_keeps_one_id_per_call(
    answer: dict[str, Any], output: str | None, client: str
) -> None:
    """A call that needs approval ends the run with an interrupt naming the call's id; the
    client's resume (approve, deny, cancel, edit) continues it under that same id, and the
    messages the client holds after both runs are the session's."""
    async with ProviderServer(EmulatedProvider(script=PAY)) as server:
        agent = _approval_agent(server.url)
        async with agent.model:  # type: ignore[union-attr]
            found, history = await _drive(
                agent,
                "thread-pay",
                [{"say": "pay bob"}, {"resume": answer}, {"say": "thanks"}],
                client,
            )
    waited, resumed, after = found["steps"]
    first, second = _ok(waited), _ok(resumed)
    _ok(after)
    (interrupt,) = waited["interrupts"]
    assert interrupt["reason"] == "approval"
    started = [e["toolCallId"] for e in first if e["type"] == "TOOL_CALL_START"]
    assert started == [interrupt["toolCallId"]]
    assert first[-1]["outcome"]["type"] == "interrupt"
    (result,) = [e for e in second if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == interrupt["toolCallId"]  # one call, not two
    assert not [e for e in second if e["type"] == "TOOL_CALL_START"]  # announced once
    calls = [c for m in found["messages"] for c in m.get("toolCalls") or []]
    assert [c["id"] for c in calls] == [interrupt["toolCallId"]]
    if output is None:
        assert result["content"].startswith("error:")
    else:
        assert result["content"] == output
    assert resumed["result"] == "Done." and resumed["interrupts"] == []
    assert _rebuilt(found) == _history(history)


async def test_a_failing_tool_and_a_failed_run_reach_the_client(client: str) -> None:
    """A tool's error is its call's result; a run the provider refuses is a ``RUN_ERROR`` the
    client reports as the run's failure."""
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("explode", {"why": "test"})]),
        "It failed.",
    ]
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        agent = _approval_agent(server.url)
        async with agent.model:  # type: ignore[union-attr]
            found, history = await _drive(agent, "thread-boom", [{"say": "explode"}], client)

    def refuse(request: RecordedRequest) -> ScriptedResponse:
        error = {"message": "no such model", "type": "invalid_request_error"}
        return ScriptedResponse.json({"error": error}, status=400)

    async with ProviderServer(refuse) as server:
        agent = _approval_agent(server.url)
        async with agent.model:  # type: ignore[union-attr]
            failed, _ = await _drive(agent, "thread-fail", [{"say": "hello"}], client)
    (step,) = found["steps"]
    events = _ok(step)
    (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"].startswith("error:") and "boom: test" in result["content"]
    assert step["result"] == "It failed."
    assert _rebuilt(found) == _history(history)
    (refused,) = failed["steps"]
    assert refused["error"] is None  # the verifier took it: a run's error is no protocol's
    last = refused["events"][-1]
    assert last["type"] == "RUN_ERROR" and "no such model" in last["message"]


async def test_a_run_stopped_mid_thought_ends_as_the_verifier_requires(client: str) -> None:
    """``DELETE`` mid-reply: the stream read from its start ends the open reasoning and step,
    then ``RUN_FINISHED`` with a cancelled outcome, which the client's verifier accepts; 0.0.59,
    whose outcomes are ``success`` and ``interrupt`` only, refuses it (the guide says so)."""
    import anyio
    import httpx2

    from agentloop import ThoughtDelta

    node()
    async with ProviderServer(DemoProvider(chunk_delay=0.2)) as server:
        agent = demo_agent(server.url, store=InMemoryStore())
        async with agent.model:  # type: ignore[union-attr]
            app = create_app(agent)
            async with serving(app) as base, httpx2.AsyncClient(base_url=base) as http:
                run = (await http.post("/api/runs", json={"input": "Paris or Oslo?"})).json()
                log = app.state.hub.log("local", run["run"])
                with anyio.fail_after(10):
                    async for _, event in log.follow(0):  # until the thought streams
                        if isinstance(event, ThoughtDelta):
                            break
                assert (await http.delete(f"/api/runs/{run['run']}")).status_code == 204
                plan = [{"read": run["events"] + "?protocol=ag-ui"}]
                url, session = base + "/api/ag-ui", run["session"]
                found = await run_script("ag_ui_client.mjs", url, session, json.dumps(plan), client)
    (step,) = found["steps"]
    if client == LOWEST:  # its verifier knows no cancelled outcome
        assert "Expected 'success' | 'interrupt'" in step["error"]
        assert '"outcome"' in step["error"] and step["result"] is None
        return
    types = [e["type"] for e in _ok(step)]
    assert types[-4:] == ["REASONING_MESSAGE_END", "REASONING_END", "STEP_FINISHED", "RUN_FINISHED"]
    assert step["events"][-1]["outcome"] == {"type": "cancelled"}


async def test_a_sub_agents_run_is_a_subagent_the_verifier_accepts(client: str) -> None:
    """An agent used as a tool streams between ``SUBAGENT_STARTED`` and ``SUBAGENT_FINISHED``,
    its own step and messages marked with its ``subagentRunId``."""
    from agentloop.models.openai import OpenAIChatModel

    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("helper", {"task": "say hi"})]),
        "The helper said hi.",
    ]

    def by_agent(request: RecordedRequest) -> ScriptedResponse:
        body = request.json if isinstance(request.json, dict) else {}
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        return (parent if "helper" in tools else child)(request)

    parent = EmulatedProvider(script=script)
    child = EmulatedProvider(script=["hi"])
    async with ProviderServer(by_agent) as server:
        model = OpenAIChatModel("emulated", base_url=server.url + "/v1", api_key="k")
        helper: Agent[Any, Any] = Agent(model, name="helper")
        agent: Agent[Any, Any] = Agent(model, tools=[helper.as_tool()], store=InMemoryStore())
        async with model:
            found, _ = await _drive(agent, "thread-sub", [{"say": "ask the helper"}], client)
    (step,) = found["steps"]
    events = _ok(step)
    types = [e["type"] for e in events]
    assert types.count("SUBAGENT_STARTED") == types.count("SUBAGENT_FINISHED") == 1
    sub = events[types.index("SUBAGENT_STARTED")]["subagentRunId"]
    inner = events[types.index("SUBAGENT_STARTED") + 1 : types.index("SUBAGENT_FINISHED")]
    assert inner and all(e.get("subagentRunId") == sub for e in inner)
    assert step["result"] == "The helper said hi."


async def test_a_tools_progress_reaches_the_client_as_a_custom_event(client: str) -> None:
    """``ToolContext.report_progress`` is ``agentloop.action_progress``, a ``CUSTOM`` event
    naming the call by its AG-UI id, between the call's end and its result: the verifier
    takes it, and the messages rebuilt keep no trace of it."""
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("crunch", {"n": 3})]),
        "Crunched.",
    ]
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        from agentloop.models.openai import OpenAIChatModel

        model = OpenAIChatModel("emulated", base_url=server.url + "/v1", api_key="k")
        async with model:
            agent = Agent(model, tools=[crunch], store=InMemoryStore())
            found, history = await _drive(agent, "thread-crunch", [{"say": "crunch"}], client)
    (step,) = found["steps"]
    events = _ok(step)
    types = [e["type"] for e in events]
    progress = [e for e in events if e["type"] == "CUSTOM"]
    (end,) = [e for e in events if e["type"] == "TOOL_CALL_END"]
    assert [e["name"] for e in progress] == ["agentloop.action_progress"] * 3
    assert [e["value"] for e in progress] == [
        {"toolCallId": end["toolCallId"], "name": "crunch", "progress": float(i), "total": 3.0,
         "message": f"item {i}"}
        for i in (1, 2, 3)
    ]  # fmt: skip
    first, last = types.index("CUSTOM"), len(types) - 1 - types[::-1].index("CUSTOM")
    assert types.index("TOOL_CALL_END") < first and last < types.index("TOOL_CALL_RESULT")
    assert step["result"] == "Crunched."
    assert _rebuilt(found) == _history(history)
