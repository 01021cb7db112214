"""Duplicate tool-call ids from a provider (some compatible servers number every call
``call_0``): the calls become distinct actions, each run once, and the next request names them
apart. Recorded-style Chat Completions streams over a loopback server, through the real SDK
driver and the direct path."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentloop import Agent, tool
from agentloop.models.openai import OpenAIChatModel
from agentloop.testing import ProviderServer, RecordedRequest, ScriptedResponse


def _sse(*chunks: dict[str, Any]) -> bytes:
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _call(index: int, city: str) -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "index": index,
                "id": "call_0",  # the same id for both calls
                "type": "function",
                "function": {"name": "weather", "arguments": json.dumps({"city": city})},
            }
        ]
    }


TWO_CALLS = _sse(
    _chunk({"role": "assistant", "content": None}),
    _chunk(_call(0, "Paris")),
    _chunk(_call(1, "Oslo")),
    _chunk({}, "tool_calls"),
)
ANSWER = _sse(_chunk({"role": "assistant", "content": "Both are sunny."}), _chunk({}, "stop"))
HEADERS = {"content-type": "text/event-stream"}


@pytest.mark.parametrize("transport", ["httpx", "auto"])
async def test_duplicate_call_ids_become_distinct_actions_each_run_once(transport: str) -> None:
    ran: list[str] = []
    requests: list[RecordedRequest] = []

    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"sunny in {city}"

    def handler(request: RecordedRequest) -> ScriptedResponse:
        requests.append(request)
        body = TWO_CALLS if len(requests) == 1 else ANSWER
        return ScriptedResponse(headers=HEADERS, body=body)

    async with ProviderServer(handler) as server:
        model = OpenAIChatModel(
            "m",
            base_url=server.url + "/v1",
            api_key="k",
            transport=transport,  # type: ignore[arg-type]
        )
        async with model:
            result = await Agent(model, tools=[weather]).run("Paris and Oslo?")
    assert result.error is None, result.error
    assert result.output == "Both are sunny."
    assert sorted(ran) == ["Oslo", "Paris"]  # each once
    actions = result.steps[0].actions
    assert [a.output for a in actions] == ["sunny in Paris", "sunny in Oslo"]
    tags = [a.tag for a in actions]
    assert tags[0] == "call_0" and len(set(tags)) == 2
    assert len(requests) == 2
    messages = requests[1].json["messages"]
    assistant = next(m for m in messages if m["role"] == "assistant")
    sent_ids = [c["id"] for c in assistant["tool_calls"]]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sent_ids == tags and answered == tags


# -- a stream that fails after its reply's actions started ---------------------------------------

SEALED_THEN_ERROR = (
    "".join(
        f"data: {json.dumps(c)}\n\n"
        for c in (
            _chunk({"role": "assistant", "content": None}),
            _chunk(_call(0, "Paris")),
            _chunk({}, "tool_calls"),
        )
    )
    + 'data: {"error": {"message": "upstream hiccup 4711", "type": "server_error"}}\n\n'
).encode()


async def test_a_stream_error_after_the_replys_actions_started_is_said_not_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reply's call was sealed and started when the stream failed: the reply so far is kept
    (its action is never run twice by a retry), and the error is logged, counted on the
    attempt's ``ModelCallFinished`` and on the step, not dropped without a word."""
    import logging

    from agentloop import ModelCallFinished

    ran: list[str] = []
    count = 0

    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"sunny in {city}"

    def handler(request: RecordedRequest) -> ScriptedResponse:
        nonlocal count
        count += 1
        return ScriptedResponse(headers=HEADERS, body=SEALED_THEN_ERROR if count == 1 else ANSWER)

    async with ProviderServer(handler) as server:
        model = OpenAIChatModel("m", base_url=server.url + "/v1", api_key="k")
        async with model:
            agent = Agent(model, tools=[weather])
            with caplog.at_level(logging.WARNING, logger="agentloop"):
                async with agent.stream("Paris?") as run:
                    events = [e async for e in run]
    assert ran == ["Paris"] and count == 2
    finished = [e for e in events if isinstance(e, ModelCallFinished)]
    assert finished[0].finish_reason == "error" and finished[0].error is not None
    assert "upstream hiccup 4711" in finished[0].error.message
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("upstream hiccup 4711" in w for w in warnings), warnings


async def test_a_stream_error_after_the_replys_actions_started_is_counted_and_traced() -> None:
    """Each such error is counted in the run's usage (``Usage.stream_errors``, by model too),
    and with tracing on it is an event on the model call's span and a count on the run's."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentloop import Instrumentation

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    count = 0

    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    def handler(request: RecordedRequest) -> ScriptedResponse:
        nonlocal count
        count += 1
        return ScriptedResponse(headers=HEADERS, body=SEALED_THEN_ERROR if count == 1 else ANSWER)

    async with ProviderServer(handler) as server:
        model = OpenAIChatModel("m", base_url=server.url + "/v1", api_key="k")
        async with model:
            traced = Instrumentation(tracer_provider=provider)
            result = await Agent(model, tools=[weather], instrument=traced).run("Paris?")
            count = 0
            clean = await Agent(model, tools=[weather]).run("Paris?")
    assert result.usage.stream_errors == 1 and result.usage.requests == 2
    assert result.usage_by_model["openai:m"].stream_errors == 1
    assert clean.usage.stream_errors == 1  # counted with tracing off too
    spans = exporter.get_finished_spans()
    runs = [s for s in spans if (s.attributes or {}).get("agentloop.usage.stream_errors")]
    assert [(s.attributes or {})["agentloop.usage.stream_errors"] for s in runs] == [1]
    said = [e for s in spans for e in s.events if e.name == "agentloop.stream_failed_after_start"]
    assert len(said) == 1 and "upstream hiccup 4711" in str((said[0].attributes or {})["message"])
