"""End to end, per provider: an ``Agent`` with two tools runs a two-step conversation against the
loopback server through each real driver, in native tool mode and in ReAct mode; the requests the
driver sent carry the tools, the tool results, and (in ReAct mode) the stop sequence."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import Agent, tool
from agentloop.testing._scenarios import EmulatedProvider
from agentloop.testing._server import ProviderServer
from tests.support.notices import without_sdk_notice

from ._provider_helpers import make_model

CALLS: list[tuple[str, str]] = []


@tool
async def weather(query: str) -> str:
    """The weather for a query."""
    CALLS.append(("weather", query))
    return f"sunny in {query}"


@tool
async def clock(query: str) -> str:
    """The time for a query."""
    CALLS.append(("clock", query))
    return f"noon in {query}"


def _results(api: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, output) of the tool results in a request body."""
    if api == "openai-chat":
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if api == "openai-responses":
        return [
            (i["call_id"], i["output"])
            for i in body["input"]
            if i.get("type") == "function_call_output"
        ]
    return [
        (b["tool_use_id"], b["content"])
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_native_two_step_run(api: str, transport: str) -> None:
    """Two parallel native tool calls run, their results go back, the answer ends the run."""
    CALLS.clear()
    async with ProviderServer(EmulatedProvider()) as server:
        async with make_model(api, server.url, transport=transport) as model:
            result = await Agent(model, tools=[weather, clock], tool_mode="native").run("go")
        first, second = (r.json for r in server.requests)
    assert result.error is None
    assert result.text is not None and result.text.startswith("Both lookups are done")
    assert sorted(CALLS) == [("clock", "second"), ("weather", "first")]
    tools = first["tools"]
    names = [t.get("function", t)["name"] for t in tools]
    assert names == ["weather", "clock"]
    prefix = "toolu_emu1_" if api == "anthropic" else "call_1_"
    assert _results(api, second) == [
        (prefix + "0", "sunny in first"),
        (prefix + "1", "noon in second"),
    ]
    assert result.usage.requests == 2
    assert result.usage.input_tokens == 100


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_react_two_step_run(api: str, transport: str) -> None:
    """ReAct mode: no tools on the wire, the stop sequence where the API takes one, the actions
    parsed from text run, and their results go back as text."""
    CALLS.clear()
    script = [
        'Thought: I need both.\nActions: [{"tag": "w", "name": "weather", "path": "weather", '
        '"input": {"query": "Paris"}}, {"tag": "c", "name": "clock", "path": "clock", '
        '"input": {"query": "Paris"}}]',
        "Thought: done.\nAnswer: Sunny and noon in Paris.",
    ]
    async with ProviderServer(EmulatedProvider(script=script, text_chunks=9)) as server:
        async with make_model(api, server.url, transport=transport) as model:
            agent = Agent(model, tools=[weather, clock], tool_mode="react")
            result = await agent.run("weather and time in Paris?")
        first, second = (r.json for r in server.requests)
    assert result.error is None
    assert result.text == "Sunny and noon in Paris."
    assert sorted(CALLS) == [("clock", "Paris"), ("weather", "Paris")]
    assert "tools" not in first
    stop_key = {"openai-chat": "stop", "anthropic": "stop_sequences"}.get(api)
    if stop_key is not None:
        assert first[stop_key] == ["<|Response|>"]
    else:
        assert "stop" not in first  # the Responses API has none: the runtime's parser cuts
    wire = str(second)
    assert "sunny in Paris" in wire and "noon in Paris" in wire


@pytest.mark.parametrize("api", ["openai-chat", "anthropic"])
async def test_the_drivers_clients_load_the_trust_store_once(
    api: str, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a CA bundle takes tens of milliseconds: the HTTP clients the drivers make (with
    the SDK's connection limit or their own) share one TLS context per process, instead of
    loading one for each model and event loop."""
    import httpcore2

    real = httpcore2.default_ssl_context
    loads: list[object] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        loads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counting)
    async with ProviderServer(EmulatedProvider()) as server:
        for max_connections in (None, 4, None):
            async with make_model(
                api, server.url, transport=transport, max_connections=max_connections
            ) as model:
                assert (await Agent(model, tools=[weather, clock]).run("go")).error is None
    assert len(loads) <= 1


_GIVEN_MODEL = """
import asyncio, sys
from agentloop import Agent
from agentloop.models.openai import OpenAIChatModel

async def main():
    model = OpenAIChatModel("m", base_url=sys.argv[1], api_key="k")
    async with Agent(model) as agent:
        print((await agent.run("hi")).text)
    assert model.transport is None, model.transport  # closed: no client left open

asyncio.run(main())
"""


def test_a_model_given_to_an_agent_is_closed_by_async_with(tmp_path: Any) -> None:
    """A model object passed to ``Agent`` is closed when ``async with agent`` ends, as a model
    the agent made from a string is: no "Unclosed client session" at exit (it reopens if used
    again)."""
    import subprocess
    import sys

    script = tmp_path / "given.py"
    script.write_text(_GIVEN_MODEL)
    with ProviderServer(EmulatedProvider(script=["fine"])) as server:
        done = subprocess.run(
            [sys.executable, "-W", "error::ResourceWarning", str(script), server.url + "/v1"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "fine"
    assert without_sdk_notice(done.stderr) == ""
