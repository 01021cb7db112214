"""History replay: each driver sends a conversation (tool calls and their results, error results,
thoughts with signatures, server-tool blocks, system messages) in its provider's format, in both
tool modes; asserted on the JSON body the loopback server received."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop.models import (
    Message,
    ModelRequest,
    ModelSettings,
    OutputSchema,
    ProviderPart,
    TextPart,
    ThoughtPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from agentloop.testing import ProviderServer, ScriptedResponse

from ._provider_helpers import load, make_model

WEATHER = ToolSpec(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = ToolSpec(
    name="clock__now",
    description="",
    parameters={
        "type": "object",
        "properties": {"tz": {"type": "string"}},
        "required": ["tz"],
        "additionalProperties": False,
    },
)
SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "q"}}
SERVER_TOOL = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "web_search",
    "input": {"query": "q"},
}

HISTORY = (
    Message.system("Be brief."),
    Message.user("Weather in Paris and the time?"),
    Message(
        role="assistant",
        parts=(
            ThoughtPart(text="Anthropic thinking", signature="sig-a", provider="anthropic"),
            ThoughtPart(text="", signature="redacted-data", redacted=True, provider="anthropic"),
            ThoughtPart(
                text="Responses summary", signature="enc-r", id="rs_1", provider="openai-responses"
            ),
            ThoughtPart(text="Let me look. "),  # visible text the runtime kept as a thought
            ProviderPart(provider="anthropic", type="server_tool_use", data=SERVER_TOOL),
            ProviderPart(provider="openai-responses", type="web_search_call", data=SEARCH),
            TextPart(text="Checking both."),
            ToolCallPart(id="call_1", name="weather", arguments='{"city": "Paris"}'),
            ToolCallPart(id="call_2", name="clock", path="now", arguments=""),
        ),
    ),
    Message(
        role="tool",
        parts=(
            ToolResultPart(id="call_1", name="weather", content='{"temp": 21}'),
            ToolResultPart(
                id="call_2", name="clock", path="now", content="unknown tz", is_error=True
            ),
        ),
    ),
    Message.system("Answer in French."),
    Message.user("Thanks. Summarise."),
)


async def sent_body(
    api: str, server: ProviderServer, request: ModelRequest, **kwargs: Any
) -> dict[str, Any]:
    """Stream ``request`` and return the JSON body the server received."""
    key = {
        "openai-chat": "openai-chat/stream_text_short_usage",
        "openai-responses": "openai-responses/stream_text_basic",
        "anthropic": "anthropic/stream_text_ping",
    }[api]
    server.enqueue(ScriptedResponse.sse(load(key).body))
    async with make_model(api, server.url, model_name="m", transport="httpx", **kwargs) as model:
        async with model.stream(request) as stream:
            [d async for d in stream]
    body: dict[str, Any] = server.requests[-1].json
    return body


async def test_chat_replay(server: ProviderServer) -> None:
    """Chat Completions: tool calls on the assistant message, one ``tool`` message per result,
    foreign thoughts and provider blocks dropped, provider-less thoughts sent as text."""
    body = await sent_body(
        "openai-chat", server, ModelRequest(messages=HISTORY, tools=(WEATHER, CLOCK))
    )
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and the time?"},
        {
            "role": "assistant",
            "content": "Let me look. Checking both.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "clock__now", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "unknown tz"},
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Thanks. Summarise."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "parameters": WEATHER.parameters,
                "description": "Weather for a city.",
            },
        },
        {
            "type": "function",
            "function": {"name": "clock__now", "parameters": CLOCK.parameters, "strict": True},
        },
    ]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "stop" not in body and "n" not in body


async def test_chat_react_mode_and_settings(server: ProviderServer) -> None:
    """ReAct mode sends no tools but the stop sequence; settings and the output schema map to
    their fields; ``extra`` is merged but cannot ask for several choices."""
    schema = OutputSchema(name="Answer", json_schema={"type": "object", "properties": {}})
    request = ModelRequest(
        messages=(Message.user("hi"),),
        tools=(WEATHER,),
        tool_mode="react",
        stop=("<|Response|>",),
        output_schema=schema,
        settings=ModelSettings(
            max_tokens=50, temperature=0.2, top_p=0.9, seed=7, reasoning_effort="low",
            extra={"n": 3, "user": "u1"},
        ),
    )  # fmt: skip
    body = await sent_body("openai-chat", server, request, legacy_max_tokens=False)
    assert "tools" not in body and "n" not in body
    assert body["stop"] == ["<|Response|>"]
    assert (body["max_completion_tokens"], body["temperature"], body["top_p"], body["seed"]) == (
        50, 0.2, 0.9, 7,
    )  # fmt: skip
    assert body["reasoning_effort"] == "low"
    assert body["user"] == "u1"
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Answer", "schema": schema.json_schema},
    }
    # A server given by base_url (an OpenAI-compatible one) gets the older ``max_tokens``.
    legacy = await sent_body("openai-chat", server, request)
    assert legacy["max_tokens"] == 50 and "max_completion_tokens" not in legacy


async def test_anthropic_replay(server: ProviderServer) -> None:
    """Anthropic: signed thinking and redacted thinking replayed first-class, its own server-tool
    block replayed, other providers' reasoning dropped, tool results as a user turn with
    ``is_error``, system messages joined into ``system`` (cache breakpoints off: their
    placement is tested in test_inputs_wire)."""
    request = ModelRequest(
        messages=HISTORY, tools=(WEATHER,), settings=ModelSettings(prompt_caching=False)
    )
    body = await sent_body("anthropic", server, request)
    assert body["system"] == "Be brief.\n\nAnswer in French."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and the time?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Anthropic thinking", "signature": "sig-a"},
                {"type": "redacted_thinking", "data": "redacted-data"},
                {"type": "text", "text": "Let me look. "},
                SERVER_TOOL,
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_2", "name": "clock__now", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": '{"temp": 21}'},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": "unknown tz",
                    "is_error": True,
                },
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "Thanks. Summarise."}]},
    ]
    assert body["tools"] == [
        {
            "name": "weather",
            "input_schema": WEATHER.parameters,
            "description": "Weather for a city.",
        }
    ]
    assert body["max_tokens"] == 4096
    assert body["stream"] is True


async def test_anthropic_react_mode_and_thinking(server: ProviderServer) -> None:
    """ReAct mode: no tools, ``stop_sequences``; a thinking budget enables thinking and raises
    the default ``max_tokens`` above it; no output-schema field is sent."""
    request = ModelRequest(
        messages=(Message.user("hi"),),
        tools=(WEATHER,),
        tool_mode="react",
        stop=("<|Response|>", "Observation:"),
        output_schema=OutputSchema(name="A", json_schema={"type": "object"}),
        settings=ModelSettings(thinking_budget=2048, temperature=1.0),
    )
    body = await sent_body("anthropic", server, request)
    assert "tools" not in body
    assert body["stop_sequences"] == ["<|Response|>", "Observation:"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 4096 + 2048
    assert body["temperature"] == 1.0
    assert set(body) == {
        "model", "stream", "max_tokens", "thinking", "temperature", "stop_sequences", "messages",
    }  # fmt: skip


async def test_responses_replay(server: ProviderServer) -> None:
    """Responses: first system message as ``instructions``, later ones as developer items; its
    own reasoning item (summary, encrypted content, id) and web-search item replayed; function
    calls and ``function_call_output`` items; other providers' thinking dropped."""
    body = await sent_body(
        "openai-responses", server, ModelRequest(messages=HISTORY, tools=(WEATHER, CLOCK))
    )
    assert body["instructions"] == "Be brief."
    assert body["input"] == [
        {"role": "user", "content": "Weather in Paris and the time?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Responses summary"}],
            "encrypted_content": "enc-r",
        },
        {"role": "assistant", "content": "Let me look. "},
        SEARCH,
        {"role": "assistant", "content": "Checking both."},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "call_2", "name": "clock__now", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 21}'},
        {"type": "function_call_output", "call_id": "call_2", "output": "unknown tz"},
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Thanks. Summarise."},
    ]  # fmt: skip
    assert body["tools"] == [
        {
            "type": "function",
            "name": "weather",
            "parameters": WEATHER.parameters,
            "description": "Weather for a city.",
            "strict": False,
        },
        {"type": "function", "name": "clock__now", "parameters": CLOCK.parameters, "strict": True},
    ]


async def test_responses_react_mode_and_settings(server: ProviderServer) -> None:
    """ReAct mode sends no tools and no stop parameter (the Responses API has none: the runtime's
    parser cuts the reply); the output schema is ``text.format``; reasoning effort asks for the
    encrypted reasoning content."""
    schema = OutputSchema(
        name="A",
        json_schema={"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
    )  # fmt: skip
    request = ModelRequest(
        messages=(Message.user("hi"),),
        tools=(WEATHER,),
        tool_mode="react",
        stop=("<|Response|>",),
        output_schema=schema,
        settings=ModelSettings(max_tokens=64, reasoning_effort="high", seed=3),
    )
    body = await sent_body("openai-responses", server, request)
    assert "tools" not in body and "stop" not in body and "seed" not in body
    assert body["max_output_tokens"] == 64
    assert body["reasoning"] == {"effort": "high"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "A", "schema": schema.json_schema, "strict": True}
    }


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_history_is_encoded_once_per_message(api: str, server: ProviderServer) -> None:
    """A growing conversation re-sends earlier messages from the driver's cache: each message is
    encoded once, and the body is the same as a fresh driver's."""
    messages = list(HISTORY)
    async with make_model(api, server.url, model_name="m", transport="httpx") as model:
        for step in range(5):
            messages.append(Message.assistant(f"step {step}"))
            messages.append(Message.user(f"more {step}"))
            model.build_body(ModelRequest(messages=tuple(messages)))
        # System messages Anthropic (all) and Responses (the first) send elsewhere skip the cache.
        uncached = {"openai-chat": 0, "openai-responses": 1, "anthropic": 2}[api]
        assert model.message_cache.misses == len(messages) - uncached
        assert model.message_cache.hits > 4 * len(HISTORY)
        async with make_model(api, server.url, model_name="m") as fresh:
            request = ModelRequest(messages=tuple(messages))
            assert model.build_body(request) == fresh.build_body(request)
