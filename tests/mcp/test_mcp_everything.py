"""agentloop against ``@modelcontextprotocol/server-everything`` (the MCP project's reference
server, pinned in ``tests/js``), over stdio and loopback streamable HTTP, on asyncio and trio:
progress notifications, a tool list that changes, resources and prompts, sampling and
elicitation.

Nothing here mocks the SDK or the server: each test speaks to the real Node server through the
real ``mcp`` client. Not marked slow (each test takes under a second): CI's lowest-versions
stage runs them too, on the ``mcp`` SDK's floor.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentloop import Agent
from agentloop.testing import Reply, ScriptedModel, call

LIMIT = 30.0  # seconds: a bound on each test, never a synchronisation


async def test_progress_notifications_stream_as_action_progress_events(everything: Any) -> None:
    """A long-running tool's ``notifications/progress`` reach the caller while it runs: the
    call carries a progress token, each notification is an ``ActionProgress`` event between
    the action's start and its end."""
    model = ScriptedModel(
        [
            Reply(calls=[call("trigger-long-running-operation", {"duration": 0.3, "steps": 3})]),
            "done",
        ]
    )
    seen: list[tuple[str, Any]] = []
    with anyio.fail_after(LIMIT):
        async with everything(allow={"trigger-long-running-operation"}) as server:
            agent = Agent(model, tools=[server])
            async with agent.stream("go") as events:
                async for event in events:
                    if event.type == "action_progress":
                        seen.append((event.type, (event.progress, event.total, event.tag)))
                    elif event.type in ("action_started", "action_finished"):
                        seen.append((event.type, None))
    tag = "call_1"
    assert seen == [
        ("action_started", None),
        ("action_progress", (1.0, 3.0, tag)),
        ("action_progress", (2.0, 3.0, tag)),
        ("action_progress", (3.0, 3.0, tag)),
        ("action_finished", None),
    ]


async def _names(server: Any) -> set[str]:
    return {t.name for t in await server.list_tools()}


async def test_a_tool_list_changed_notification_refreshes_the_tools_of_the_next_model_call(
    everything: Any,
) -> None:
    """A call makes the server register a tool; its SDK sends
    ``notifications/tools/list_changed``. The run's next model call offers the new tool, and the
    model can call it. (The notification travels apart from the call's answer, so the test waits,
    bounded, until the connection has heard it before the run goes on.)"""

    async def after_registering(tool_call: Any, call_next: Any) -> Any:
        result = await call_next(tool_call)
        if tool_call.action.name == "register-late-tool":
            for _ in range(1000):  # 10 s at most: on main it never comes (the asserts say so)
                if "late-tool" in await _names(server):
                    break
                await anyio.sleep(0.01)
        return result

    model = ScriptedModel(
        [
            Reply(calls=[call("register-late-tool")]),
            Reply(calls=[call("late-tool", {"text": "hi"})]),
            "done",
        ]
    )
    with anyio.fail_after(LIMIT):
        async with everything() as server:
            before = await _names(server)
            agent = Agent(model, tools=[server], tool_middleware=[after_registering])
            result = await agent.run("go")
    assert "late-tool" not in before and "register-late-tool" in before
    offered = [{spec.name for spec in request.tools} for request in model.requests]
    assert "late-tool" not in offered[0]
    assert "late-tool" in offered[1]
    assert result.steps[1].actions[0].output == "late: hi"


async def test_resources_and_prompts_are_listed_and_read(everything: Any) -> None:
    """The server's static resources, its resource templates and its prompts are listed; a
    text resource reads as text, a blob one as bytes; a prompt renders as agentloop messages,
    its embedded resource described in text."""
    from agentloop.mcp import MCPPromptArgument, MCPServer

    with anyio.fail_after(LIMIT):
        async with everything() as server:
            assert isinstance(server, MCPServer)
            listed = {r.name: r for r in await server.list_resources()}
            templates = {t.name: t for t in await server.list_resource_templates()}
            doc = listed["architecture.md"]
            read = await server.read_resource(doc.uri)
            text = await server.read_resource("demo://resource/dynamic/text/7")
            blob = await server.read_resource("demo://resource/dynamic/blob/7")
            prompts = {p.name: p for p in await server.list_prompts()}
            simple = await server.get_prompt("simple-prompt")
            weather = await server.get_prompt("args-prompt", {"city": "Oslo"})
            embedded = await server.get_prompt(
                "resource-prompt", {"resourceType": "Text", "resourceId": "3"}
            )
    assert doc.uri == "demo://resource/static/document/architecture.md"
    assert doc.mime_type == "text/markdown"
    assert [c.uri for c in read] == [doc.uri] and read[0].text and read[0].data is None
    assert templates["Dynamic Text Resource"].uri_template == (
        "demo://resource/dynamic/text/{resourceId}"
    )
    assert text[0].text is not None and text[0].text.startswith("Resource 7: This is a plaintext")
    assert blob[0].text is None and blob[0].data is not None
    assert blob[0].data.startswith(b"Resource 7: This is a base64 blob")
    assert prompts["args-prompt"].arguments == (
        MCPPromptArgument(name="city", description="Name of the city", required=True),
        # (zod's .optional() drops the .describe() before it: the server sends none)
        MCPPromptArgument(name="state", description=None, required=False),
    )
    assert [(m.role, m.text) for m in simple.messages] == [
        ("user", "This is a simple prompt without arguments.")
    ]
    assert [m.text for m in weather.messages] == ["What's weather in Oslo?"]
    first, second = embedded.messages
    assert first.text.startswith("This prompt includes the Text resource with id: 3")
    assert second.text.startswith("[resource <demo://resource/dynamic/text/3>]\nResource 3:")


async def test_a_prompt_or_resource_the_server_refuses_is_an_mcp_server_error(
    everything: Any,
) -> None:
    from agentloop.mcp import MCPServerError

    with anyio.fail_after(LIMIT):
        async with everything() as server:
            with pytest.raises(
                MCPServerError, match="could not render the prompt 'resource-prompt'"
            ):
                await server.get_prompt(
                    "resource-prompt", {"resourceType": "Video", "resourceId": "1"}
                )
            with pytest.raises(MCPServerError, match="could not read the resource"):
                await server.read_resource("demo://resource/dynamic/text/0")


async def test_sampling_and_elicitation_are_answered_by_the_callers_callbacks(
    everything: Any,
) -> None:
    """Given callbacks, the client offers sampling and elicitation, so the server offers its
    tools that need them; their requests reach the callbacks as agentloop values, and the
    answers reach the tool."""
    from agentloop.mcp import (
        MCPElicitation,
        MCPElicitationReply,
        MCPSamplingReply,
        MCPSamplingRequest,
    )

    sampled: list[MCPSamplingRequest] = []
    elicited: list[MCPElicitation] = []

    async def sample(request: MCPSamplingRequest) -> MCPSamplingReply:
        sampled.append(request)
        return MCPSamplingReply(text="forty-two", model="test-model")

    async def elicit(asked: MCPElicitation) -> MCPElicitationReply | dict[str, Any] | None:
        elicited.append(asked)
        if len(elicited) == 1:
            return {"name": "Ada Lovelace", "integer": 7}
        return MCPElicitationReply(action="cancel")

    model = ScriptedModel(
        [
            Reply(
                calls=[
                    call("trigger-sampling-request", {"prompt": "the answer?", "maxTokens": 20}),
                    call("trigger-elicitation-request"),
                ]
            ),
            Reply(calls=[call("trigger-elicitation-request")]),
            "done",
        ]
    )
    with anyio.fail_after(LIMIT):
        async with everything(sampling=sample, elicitation=elicit) as server:
            result = await Agent(model, tools=[server]).run("go")
    sampling, accepted = result.steps[0].actions
    (cancelled,) = result.steps[1].actions
    (request,) = sampled
    assert request.system == "You are a helpful test server."
    assert request.max_tokens == 20
    assert [(m.role, m.text) for m in request.messages] == [
        ("user", "Resource trigger-sampling-request context: the answer?")
    ]
    assert '"text": "forty-two"' in sampling.output and '"model": "test-model"' in sampling.output
    form = elicited[0]
    assert form.mode == "form" and form.message == "Please provide inputs for the following fields:"
    assert form.schema is not None and form.schema["required"] == ["name"]
    assert "- Name: Ada Lovelace" in accepted.output
    assert "- Favorite Integer: 7" in accepted.output
    assert "User cancelled the elicitation dialog" in cancelled.output


async def test_without_callbacks_the_server_offers_no_sampling_or_elicitation_tools(
    everything: Any,
) -> None:
    with anyio.fail_after(LIMIT):
        async with everything() as server:
            names = await _names(server)
    assert "trigger-sampling-request" not in names
    assert "trigger-elicitation-request" not in names


async def test_an_elicitation_becomes_a_decision_of_the_runs_approver(everything: Any) -> None:
    """With ``elicitation="approver"`` and no callback, the server's elicitation is asked of
    the approver of the run whose call it is in, as an approval (``ActionAwaiting``, then
    ``ActionDecided``): ``Edit`` accepts with its values, ``Deny`` declines."""
    from agentloop import Deny, Edit, PendingCall, RunContext

    asked: list[PendingCall] = []

    async def approver(pending: PendingCall, ctx: RunContext) -> Edit | Deny:
        asked.append(pending)
        if len(asked) == 1:
            return Edit({"name": "Grace Hopper", "check": True})
        return Deny("not today")

    def script() -> ScriptedModel:
        return ScriptedModel(
            [
                Reply(calls=[call("trigger-elicitation-request")]),
                Reply(calls=[call("trigger-elicitation-request")]),
                "done",
            ]
        )

    events: list[str] = []
    with anyio.fail_after(LIMIT):
        async with everything(elicitation="approver") as server:
            agent = Agent(script(), tools=[server], approver=approver)
            async with agent.stream("go") as run:
                async for event in run:
                    if event.type in ("action_awaiting", "action_decided"):
                        events.append(event.type)
            result = run.result
    assert result is not None
    accepted, declined = (s.actions[0] for s in result.steps[:2])
    assert "- Name: Grace Hopper" in accepted.output
    assert "- Agreed to terms: true" in accepted.output
    assert "User declined to provide the requested information" in declined.output
    first = asked[0]
    assert first.tag == "call_1" and first.name == "trigger-elicitation-request"
    assert first.input["elicitation"] == "Please provide inputs for the following fields:"
    assert first.input["schema"]["required"] == ["name"]
    assert events == ["action_awaiting", "action_decided"] * 2


@pytest.mark.parametrize("held_by", ["session", "caller"])
async def test_without_a_live_approver_an_elicitation_is_a_decision_the_run_waits_on(
    everything: Any, held_by: str
) -> None:
    """A run with no approver (a session run served over the web, say): the server's
    elicitation becomes a pending call of kind ``elicitation`` carrying the form, and the run
    waits (the server hears ``cancel`` meanwhile, and that result is set aside). Resumed with
    ``Edit(values)`` the call runs again and the server gets those values; a second elicitation
    waits in turn, and ``Deny`` declines it. A decision of the wrong kind is refused."""
    from agentloop import Deny, Edit, ExternalResult, UserError
    from agentloop.sessions import InMemoryStore

    model = ScriptedModel(
        [
            Reply(calls=[call("trigger-elicitation-request")]),
            Reply(calls=[call("trigger-elicitation-request")]),
            "done",
        ]
    )
    store = InMemoryStore() if held_by == "session" else None
    session = "s-1" if store is not None else None
    kinds: list[tuple[str, str, str | None]] = []
    with anyio.fail_after(LIMIT):
        async with everything(elicitation="approver") as server:
            agent = Agent(model, tools=[server], store=store)

            async def resume(decision: Any, waiting: Any) -> Any:
                (call_id,) = (p.id for p in waiting.pending)
                async with agent.stream_resume(
                    session=session,
                    resume_state=waiting.resume_state,
                    decisions={call_id: decision},
                ) as run:
                    async for event in run:
                        if event.type in ("action_awaiting", "action_decided"):
                            kinds.append((event.type, event.call.kind, event.call.id))
                return run.result

            async with agent.stream("go", session=session) as run:
                async for event in run:
                    if event.type == "action_awaiting":
                        kinds.append((event.type, event.call.kind, event.call.id))
            first = run.result
            assert first.status == "waiting"
            (pending,) = first.pending
            with pytest.raises(UserError, match="running call's question"):
                await agent.resume(
                    session=session,
                    resume_state=first.resume_state,
                    decisions={pending.id: ExternalResult(output="x")},
                )
            second = await resume(Edit({"name": "Grace Hopper", "check": True}), first)
            assert second is not None and second.status == "waiting"
            (again,) = second.pending
            done = await resume(Deny("not today"), second)
    assert pending.kind == "elicitation" and pending.id == "call_1"
    assert pending.name == "trigger-elicitation-request"
    assert pending.input["elicitation"] == "Please provide inputs for the following fields:"
    assert pending.input["schema"]["required"] == ["name"]
    assert first.steps == ()  # the cancelled answer is no result of the call
    assert again.kind == "elicitation" and len(second.steps) == 1
    assert done is not None and done.output == "done"
    accepted, declined = (s.actions[0] for s in done.steps[:2])
    assert "- Name: Grace Hopper" in accepted.output
    assert "- Agreed to terms: true" in accepted.output
    assert "User declined to provide the requested information" in declined.output
    assert all("cancelled" not in s.actions[0].output for s in done.steps[:2])
    assert kinds == [
        ("action_awaiting", "elicitation", "call_1"),
        ("action_decided", "elicitation", "call_1"),
        ("action_awaiting", "elicitation", "call_1"),
        ("action_decided", "elicitation", "call_1"),
    ]


async def test_an_elicitation_in_a_run_served_over_the_web_waits_for_the_resume(
    everything: Any,
) -> None:
    """Over the web API (no approver: nobody is at the server), the server's elicitation is an
    ``action_awaiting`` of kind ``elicitation`` with its form, the run waits, and the client's
    ``POST /api/sessions/{id}/resume`` with an edit answers it: the tool gets the values."""
    import json

    import httpx2

    from agentloop.sessions import InMemoryStore
    from agentloop.web import create_app

    def events(body: str) -> list[dict[str, Any]]:
        lines = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
        return [json.loads(line) for line in lines]

    model = ScriptedModel([Reply(calls=[call("trigger-elicitation-request")]), "done"])
    with anyio.fail_after(LIMIT):
        async with everything(elicitation="approver") as server:
            app = create_app(Agent(model, tools=[server]), store=InMemoryStore())
            async with (
                app.router.lifespan_context(app),
                httpx2.AsyncClient(
                    transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1"
                ) as client,
            ):
                run = (await client.post("/api/runs", json={"input": "go"})).json()
                first = events((await client.get(run["events"])).text)
                (asked,) = [e for e in first if e["type"] == "action_awaiting"]
                values = {"name": "Ada Lovelace", "check": True}
                decision = {"decision": "edit", "arguments": values}
                resumed = await client.post(
                    f"/api/sessions/{run['session']}/resume",
                    json={"decisions": {asked["call"]["id"]: decision}},
                )
                assert resumed.status_code == 201, resumed.text
                second = events((await client.get(resumed.json()["events"])).text)
    assert asked["call"]["kind"] == "elicitation"
    assert asked["call"]["input"]["schema"]["required"] == ["name"]
    assert first[-1]["type"] == "run_waiting"
    (finished,) = [e for e in second if e["type"] == "action_finished"]
    assert "- Name: Ada Lovelace" in finished["result"]["output"]
    assert second[-1]["type"] == "run_finished"
