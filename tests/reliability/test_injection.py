"""Data is never template source: user input, tool output, model text, variables and session
state reach the model as the text they are."""

from __future__ import annotations

import json

import pytest

from agentloop import Agent, ToolContext, UserError, tool
from agentloop.goals import GoalOptions, GoalRecord, setup_goal
from agentloop.goals._record import encode_goal
from agentloop.sessions import InMemoryStore
from agentloop.testing import Reply, ScriptedModel, call

PAYLOADS = [
    "{{ 7*7 }}",
    "{% for x in range(3) %}{{ x }}{% endfor %}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ config }}{{ self }}{{ lipsum.__globals__ }}",
    "{objective} {attempt} {0}",
]


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_payloads_in_every_channel_stay_literal(payload: str) -> None:
    """Input, tool output, model text, variables and state are passed through unrendered."""

    @tool
    async def fetch(ctx: ToolContext) -> str:
        """A test tool."""
        ctx.state["note"] = payload
        return f"page says {payload}"

    model = ScriptedModel(
        [Reply(text=f"thinking {payload}", calls=[call("fetch", {})]), f"answer {payload}"],
        native_tools=False,
    )
    agent = Agent(
        model, tools=[fetch], instructions="Help {{ name }}.", variables={"name": payload}
    )
    result = await agent.run(f"question {payload}")
    second = model.requests[1]
    assert second.messages[0].text.startswith(f"Help {payload}.")
    assert second.messages[1].text == f"question {payload}"
    assert f"Thought: thinking {payload}" in second.messages[2].text
    assert (
        payload in second.messages[3].text or payload.replace('"', '\\"') in second.messages[3].text
    )
    assert result.output == f"answer {payload}"
    assert (result.state or {})["note"] == payload
    assert "49" not in "".join(m.text for m in second.messages)


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_goal_objectives_are_data_in_the_nudge(payload: str) -> None:
    """A goal objective full of template syntax is quoted as it is."""
    model = ScriptedModel(["early", "final"])
    agent = setup_goal(Agent(model, name="w"), GoalOptions(max_retries=1))
    state = {"goal:w": encode_goal(GoalRecord.new(payload))}
    store = InMemoryStore()
    await store.create("s", state=state)
    await agent.replace(store=store).run("go", session="s")
    nudge = model.requests[1].messages[-1].text
    assert f"Objective: {payload}" in nudge


def test_author_templates_cannot_escape_the_sandbox() -> None:
    """Instructions that reach for Python internals are refused when rendered."""
    agent = Agent(ScriptedModel([]), instructions="{{ ().__class__.__base__.__subclasses__() }}")
    with pytest.raises(UserError):
        agent.render_instructions({})


def test_template_syntax_errors_are_user_errors_at_construction() -> None:
    """A broken instructions template fails when the Agent is built, naming the line."""
    with pytest.raises(UserError, match="line 1"):
        Agent(ScriptedModel([]), instructions="{% if %}")


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_payloads_reach_a_real_provider_as_data(api: str) -> None:
    """Through a real driver, template payloads in input, instructions variables, session
    state and tool output are sent to the provider verbatim, never rendered."""
    from agentloop.testing import EmulatedProvider, ProviderServer

    from ._support import make_model

    payload = "{{ 7*7 }} {% raw %}x{% endraw %} {{ ''.__class__.__mro__ }}"

    @tool
    async def weather(ctx: ToolContext, query: str) -> str:
        """The weather."""
        ctx.state["note"] = payload
        return f"page says {payload}"

    @tool
    async def clock(query: str) -> str:
        """The time."""
        return payload

    store = InMemoryStore()
    await store.create("s", state={"seed": payload})
    async with ProviderServer(EmulatedProvider()) as server:
        async with make_model(api, server.url) as model:
            agent = Agent(
                model,
                tools=[weather, clock],
                instructions="Help {{ name }}.",
                variables={"name": payload},
                store=store,
            )
            result = await agent.run(f"question {payload}", session="s")
        bodies = [json.dumps(r.json, ensure_ascii=False) for r in server.requests]
    assert result.error is None
    session = await store.get("s")
    assert session is not None and dict(session.state) == {"seed": payload, "note": payload}
    wire_payload = json.dumps(payload, ensure_ascii=False)[1:-1]
    assert wire_payload in bodies[0] and bodies[1].count(wire_payload) >= 4
    assert all("49 x" not in body and "{{ 7*7 }}" in body for body in bodies)
