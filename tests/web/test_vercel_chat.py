"""The Vercel AI SDK UI message stream as ``useChat`` drives it: the SDK's own ``Chat`` (what
``useChat`` runs: ``@ai-sdk/react``'s for ``ai`` 7, ``AbstractChat`` for ``ai`` 5) over
``DefaultChatTransport``, against ``POST /api/chat`` on a loopback socket. A plain run rebuilds
its reasoning, tool calls and answer; the approval round trip continues the waiting run and
never runs the prompt again; one tool-call id throughout; ``finish`` carries its reason; and
``resumeStream`` rejoins a run whose connection dropped."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentloop import Agent
from agentloop.models.openai import OpenAIChatModel
from agentloop.sessions import InMemoryStore
from agentloop.testing import EmulatedCall, EmulatedProvider, EmulatedTurn, ProviderServer
from agentloop.web import create_app
from tests.support.node import node, run_script

from ._demo import FINAL, THOUGHT, DemoProvider, crunch, demo_agent, transfer
from ._serving import serving

pytestmark = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn's loop


PAY: list[EmulatedTurn | str] = [
    EmulatedTurn(text="Paying.", calls=[EmulatedCall("transfer", {"amount": 5, "to": "bob"})]),
    "Done.",
]


async def _drive(
    agent: Agent[Any, Any], package: str, chat: str, plan: list[dict[str, Any]]
) -> tuple[Any, list[dict[str, Any]]]:
    """The client's findings for ``plan`` on chat ``chat``, and the session's history after."""
    node()  # skip (or fail) before serving when the clients are missing
    app = create_app(agent)
    async with serving(app) as base:
        found = await run_script("vercel_chat.mjs", base, package, chat, json.dumps(plan))
        history = await app.state.hub.history("local", chat)
    return found, history


def _tool_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"].startswith("tool-")]


def _frames(found: Any) -> list[Any]:
    return [json.loads(f) for r in found["requests"] for f in r.get("frames", []) if f != "[DONE]"]


@pytest.fixture
async def demo() -> AsyncIterator[Agent[Any, Any]]:
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as server:
        agent = demo_agent(server.url, store=InMemoryStore())
        async with agent.model:  # type: ignore[union-attr]
            yield agent


@pytest.fixture
async def payer() -> AsyncIterator[Agent[Any, Any]]:
    async with ProviderServer(EmulatedProvider(script=PAY)) as server:
        model = OpenAIChatModel("emulated", base_url=server.url + "/v1", api_key="k")
        async with model:
            yield Agent(model, tools=[transfer], store=InMemoryStore())


@pytest.mark.parametrize("package", ["ai", "ai-v5"])
async def test_the_chat_rebuilds_a_run_and_its_finish_has_a_reason(
    demo: Agent[Any, Any], package: str
) -> None:
    found, _ = await _drive(demo, package, "chat-demo", [{"say": "Paris or Oslo?"}])
    assert found["errors"] == [] and found["status"] == "ready"
    user, assistant = found["messages"]
    assert user["role"] == "user" and assistant["role"] == "assistant"
    texts = [p["text"] for p in assistant["parts"] if p["type"] == "text"]
    assert texts[-1] == FINAL
    reasoning = [p["text"] for p in assistant["parts"] if p["type"] == "reasoning"]
    assert THOUGHT in reasoning
    tools = _tool_parts(assistant)
    assert [p["type"] for p in tools] == [
        "tool-create_goal",
        "tool-get_weather",
        "tool-update_goal",
    ]
    assert all(p["state"] == "output-available" for p in tools)
    assert len({p["toolCallId"] for p in tools}) == 3
    (finish,) = [f for f in _frames(found) if f["type"] == "finish"]
    assert finish["finishReason"] == "stop"
    if package == "ai":  # AI SDK 5's onFinish has no finishReason
        assert found["finishes"] == [{"finishReason": "stop", "isError": False, "isAbort": False}]


@pytest.mark.parametrize(
    ("approved", "state"), [(True, "output-available"), (False, "output-denied")]
)
async def test_the_sdks_approval_round_trip_continues_the_waiting_run(
    payer: Agent[Any, Any], approved: bool, state: str
) -> None:
    """``addToolApprovalResponse``, then the POST ``sendAutomaticallyWhen`` makes with the part
    in ``approval-responded``: the waiting run goes on (the prompt runs once), under one id."""
    plan: list[dict[str, Any]] = [{"say": "pay bob"}, {"approve": approved, "reason": "no"}]
    found, history = await _drive(payer, "ai", "chat-pay", plan)
    assert found["errors"] == [] and found["status"] == "ready"
    first, second = found["requests"]
    assert first["method"] == second["method"] == "POST"
    sent = second["body"]["messages"][-1]
    (responded,) = _tool_parts(sent)
    assert responded["state"] == "approval-responded"
    assert [r["type"] for r in history].count("run") == 1  # the prompt ran once
    _user, assistant = found["messages"]
    (part,) = _tool_parts(assistant)  # one call, one part
    assert part["toolCallId"] == responded["toolCallId"] and part["state"] == state
    if approved:
        assert part["output"] == "sent 5 to bob"
    assert [p["text"] for p in assistant["parts"] if p["type"] == "text"][-1] == "Done."
    ids = {f["toolCallId"] for f in _frames(found) if "toolCallId" in f}
    assert ids == {part["toolCallId"]}
    assert [f["finishReason"] for f in _frames(found) if f["type"] == "finish"] == [
        "tool-calls",
        "stop",
    ]


async def test_resume_stream_rejoins_a_run_whose_connection_dropped() -> None:
    """``useChat({resume: true})``'s convention: a fresh chat's ``resumeStream`` asks
    ``GET /api/chat/{id}/stream``, which replays the active run from its start to its end
    (the run went on without the dropped connection); with no run going on, 204."""
    async with ProviderServer(DemoProvider(chunk_delay=0.02)) as server:
        agent = demo_agent(server.url, store=InMemoryStore())
        async with agent.model:  # type: ignore[union-attr]
            plan: list[dict[str, Any]] = [
                {"post_and_drop": "Paris or Oslo?"},
                {"resume": True},
                {"resume": True},
            ]
            found, history = await _drive(agent, "ai", "chat-resume", plan)
    assert found["errors"] == [] and found["status"] == "ready"
    rejoined, again = found["requests"]
    assert (rejoined["method"], rejoined["url"]) == ("GET", "/api/chat/chat-resume/stream")
    assert rejoined["status"] == 200 and again["status"] == 204
    user, assistant = found["messages"]
    assert user["id"] == "dropped-user"
    texts = [p["text"] for p in assistant["parts"] if p["type"] == "text"]
    assert texts[-1] == FINAL
    assert [r["type"] for r in history].count("run") == 1


async def test_ai_sdk_5_has_no_approval_chunks(payer: Agent[Any, Any]) -> None:
    """What the guide says cannot be expressed: AI SDK 5 knows no ``tool-approval-request``,
    so a run that waits on an approval ends its stream in the client's schema error (the call
    and its pending decision are still in the ``data-agentloop-action-awaiting`` part)."""
    found, _ = await _drive(payer, "ai-v5", "chat-v5", [{"say": "pay bob"}])
    (error,) = found["errors"]
    assert "tool-approval-request" in error and found["status"] == "error"
    _user, assistant = found["messages"]
    (part,) = _tool_parts(assistant)
    assert part["state"] == "input-available"
    (awaiting,) = [p for p in assistant["parts"] if p["type"] == "data-agentloop-action-awaiting"]
    assert awaiting["data"]["call"]["id"] == "call_1_0"


@pytest.mark.parametrize("package", ["ai", "ai-v5"])
async def test_a_failed_run_is_the_chats_error(package: str) -> None:
    """A run the provider refuses streams ``error`` then ``finish`` (``finishReason:
    "error"``): the chat reports the run's message as its error."""
    from agentloop.testing import RecordedRequest, ScriptedResponse

    def refuse(request: RecordedRequest) -> ScriptedResponse:
        error = {"message": "no such model", "type": "invalid_request_error"}
        return ScriptedResponse.json({"error": error}, status=400)

    async with ProviderServer(refuse) as server:
        model = OpenAIChatModel("emulated", base_url=server.url + "/v1", api_key="k")
        async with model:
            agent: Agent[Any, Any] = Agent(model, store=InMemoryStore())
            found, _ = await _drive(agent, package, "chat-fail", [{"say": "hello"}])
    (error,) = found["errors"]
    assert "no such model" in error and found["status"] == "error"
    (finish,) = [f for f in _frames(found) if f["type"] == "finish"]
    assert finish["finishReason"] == "error"


@pytest.mark.parametrize("package", ["ai", "ai-v5"])
async def test_a_tools_progress_reaches_on_data_and_stays_out_of_the_message(
    package: str,
) -> None:
    """``ToolContext.report_progress`` is a transient ``data-agentloop-action-progress`` part
    naming the call by its id: the chat hands each to ``onData`` and keeps none in the
    assistant's message, whose tool part ends with the output."""
    script: list[EmulatedTurn | str] = [
        EmulatedTurn(calls=[EmulatedCall("crunch", {"n": 3})]),
        "Crunched.",
    ]
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        model = OpenAIChatModel("emulated", base_url=server.url + "/v1", api_key="k")
        async with model:
            agent = Agent(model, tools=[crunch], store=InMemoryStore())
            found, _ = await _drive(agent, package, "chat-crunch", [{"say": "crunch"}])
    assert found["errors"] == [] and found["status"] == "ready"
    _, assistant = found["messages"]
    (part,) = _tool_parts(assistant)
    assert part["type"] == "tool-crunch" and part["state"] == "output-available"
    progress = [d for d in found["data"] if d["type"] == "data-agentloop-action-progress"]
    assert [d["data"] for d in progress] == [
        {"toolCallId": part["toolCallId"], "name": "crunch", "progress": float(i), "total": 3.0,
         "message": f"item {i}"}
        for i in (1, 2, 3)
    ]  # fmt: skip
    assert not [p for p in assistant["parts"] if p["type"].startswith("data-")]
