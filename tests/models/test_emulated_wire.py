"""The emulated provider speaks each API's stream as the real API does: its events carry every
field, and follow one another in an order, that the recorded real streams in
``tests/fixtures/provider-streams`` show; and the real clients read every emulated reply (text,
reasoning, tool calls, errors): the ``openai`` and ``anthropic`` Python SDKs here, the ``openai``
Node SDK, ``@ai-sdk/openai`` and ``@ai-sdk/openai-compatible`` through ``tests/js``."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from agentloop.testing import (
    EmulatedCall,
    EmulatedProvider,
    EmulatedTurn,
    FaultProfile,
    ProviderServer,
    RecordedRequest,
    ScriptedResponse,
)
from tests.support.node import run_script

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "provider-streams"
DIRS = {"chat": "openai-chat", "responses": "openai-responses", "anthropic": "anthropic"}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
FULL = EmulatedTurn(
    thought="The user wants two lookups.",
    text="Let me look.",
    calls=(
        EmulatedCall("get_weather", {"city": "Oslo"}),
        EmulatedCall("get_time", {"city": "Oslo"}),
    ),
)
TURNS = {
    "full": FULL,
    "text": EmulatedTurn(text="It is sunny in Oslo."),
    "calls": EmulatedTurn(calls=FULL.calls),
    "thought-text": EmulatedTurn(thought="Easy.", text="Sunny."),
    "thought-calls": EmulatedTurn(thought="Look it up.", calls=FULL.calls[:1]),
}


def _events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                out.append(json.loads(line[5:]))
    return out


def _recorded(api: str) -> list[list[dict[str, Any]]]:
    return [_events(p.read_bytes()) for p in sorted((FIXTURES / DIRS[api]).glob("*.sse"))]


def _kind(api: str, event: dict[str, Any]) -> str:
    """An event's kind: its type, with the kind of item, block or delta it carries."""
    if api == "chat":
        if not event.get("choices"):
            return "usage"
        choice = event["choices"][0]
        delta = choice.get("delta") or {}
        if choice.get("finish_reason"):
            return "finish"
        if "role" in delta:
            return "role"
        if delta.get("tool_calls"):
            return "call-head" if delta["tool_calls"][0].get("id") else "call-arguments"
        return "reasoning" if "reasoning_content" in delta else "content"
    kind = str(event.get("type"))
    for key in ("item", "content_block", "delta", "part"):
        inner = event.get(key)
        if isinstance(inner, dict) and "type" in inner:
            return f"{kind}:{inner['type']}"
    return kind


def _shapes(value: Any, path: str, into: dict[str, list[set[str]]]) -> None:
    """The key set of every object in ``value``, by path (an object's path names its type)."""
    if isinstance(value, list):
        for item in value:
            _shapes(item, path + "[]", into)
    elif isinstance(value, dict):
        if isinstance(value.get("type"), str):
            path += f"<{value['type']}>"
        into[path].append(set(value))
        for key, inner in value.items():
            _shapes(inner, f"{path}.{key}", into)


def _common(shapes: list[set[str]]) -> set[str]:
    return set.intersection(*shapes)


def _collapsed(api: str, events: list[dict[str, Any]]) -> list[str]:
    kinds = [_kind(api, e) for e in events if e.get("type") != "ping"]
    return [k for k, _ in itertools.groupby(kinds)]


def _whole(api: str, turn: EmulatedTurn) -> Any:
    return json.loads(b"".join(p.data for p in _response(api, turn, stream=False).pieces()))


def _emulated(api: str, turn: EmulatedTurn, **body: Any) -> list[dict[str, Any]]:
    return _events(b"".join(p.data for p in _response(api, turn, **body).pieces()))


def _response(api: str, turn: EmulatedTurn, **body: Any) -> ScriptedResponse:
    tools: list[dict[str, Any]]
    if api == "chat":
        tools = [{"type": "function", "function": {"name": n, "parameters": CITY}}
                 for n in ("get_weather", "get_time")]  # fmt: skip
        body = {"messages": [{"role": "user", "content": "hi"}], **body}
    elif api == "responses":
        tools = [
            {"type": "function", "name": n, "parameters": CITY} for n in ("get_weather", "get_time")
        ]
        body = {"input": "hi", **body}
    else:
        tools = [{"name": n, "input_schema": CITY} for n in ("get_weather", "get_time")]
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100, **body}
    request = {"model": "m", "stream": True, "tools": tools, **body}
    return EmulatedProvider(script=[turn])(
        RecordedRequest("POST", PATHS[api], {}, json.dumps(request).encode())
    )


@pytest.mark.parametrize("api", list(DIRS))
@pytest.mark.parametrize("turn", list(TURNS))
def test_each_event_carries_the_fields_the_real_api_sends(api: str, turn: str) -> None:
    """Each object the emulator streams has every key that object has in all recordings of it
    (keys some recordings lack, such as ``obfuscation``, are left out)."""
    recorded: dict[str, list[set[str]]] = defaultdict(list)
    for events in _recorded(api):
        for event in events:
            _shapes(event, _kind(api, event), recorded)
    extra = {"stream_options": {"include_usage": True}} if api == "chat" else {}
    emulated: dict[str, list[set[str]]] = defaultdict(list)
    for event in _emulated(api, TURNS[turn], **extra):
        _shapes(event, _kind(api, event), emulated)
    missing: dict[str, Any] = {}
    for path, shapes in emulated.items():
        seen = path
        if api == "chat" and path.startswith("reasoning"):  # shaped as content chunks are
            seen = "content" + path.removeprefix("reasoning")
            if seen.endswith(".delta"):
                continue
        if seen not in recorded:
            missing[path] = "never recorded"
            continue
        lacking = sorted(_common(recorded[seen]) - _common(shapes))
        if lacking:
            missing[path] = lacking
    assert not missing


@pytest.mark.parametrize("api", list(DIRS))
@pytest.mark.parametrize("turn", list(TURNS))
def test_a_whole_body_carries_the_fields_the_real_api_sends(api: str, turn: str) -> None:
    """Unstreamed, as the recorded non-streaming 200 responses show."""
    recorded: dict[str, list[set[str]]] = defaultdict(list)
    for path in sorted((FIXTURES / DIRS[api]).glob("nonstream_*.response.json")):
        _shapes(json.loads(path.read_text()), "body", recorded)
    emulated: dict[str, list[set[str]]] = defaultdict(list)
    _shapes(_whole(api, TURNS[turn]), "body", emulated)
    missing = {
        path: sorted(_common(recorded[path]) - _common(shapes))
        for path, shapes in emulated.items()
        if path in recorded and _common(recorded[path]) - _common(shapes)
    }
    assert not missing


@pytest.mark.parametrize("api", list(DIRS))
@pytest.mark.parametrize("turn", list(TURNS))
def test_events_follow_one_another_as_in_the_recordings(api: str, turn: str) -> None:
    """Every pair of consecutive event kinds the emulator sends occurs in a recorded stream."""
    seen = set()
    for events in _recorded(api):
        kinds = _collapsed(api, events)
        seen |= set(itertools.pairwise(["start", *kinds, "end"]))
    if api == "chat":  # as compatible servers stream reasoning (DeepSeek's), and text before
        seen |= {
            ("role", "reasoning"),
            ("reasoning", "content"),
            ("reasoning", "call-head"),
            ("content", "call-head"),
        }  # calls (as Responses and Messages recordings show)
    extra = {"stream_options": {"include_usage": True}} if api == "chat" else {}
    kinds = _collapsed(api, _emulated(api, TURNS[turn], **extra))
    unseen = [p for p in itertools.pairwise(["start", *kinds, "end"]) if p not in seen]
    assert not unseen, kinds


@pytest.mark.parametrize("include", [None, False, True])
def test_chat_streams_usage_only_when_asked(include: bool | None) -> None:
    """Chat Completions sends the usage chunk only with ``stream_options.include_usage``."""
    extra = {} if include is None else {"stream_options": {"include_usage": include}}
    kinds = [_kind("chat", e) for e in _emulated("chat", TURNS["text"], **extra)]
    assert ("usage" in kinds) is bool(include)
    assert kinds[-1] == ("usage" if include else "finish")


# -- the real clients ----------------------------------------------------------------------------


def _servers() -> tuple[ProviderServer, ProviderServer]:
    return ProviderServer(EmulatedProvider(script=[FULL])), ProviderServer(
        EmulatedProvider(script=[TURNS["text"]])
    )


OPENAI_TOOLS = [{"type": "function", "name": n, "parameters": CITY, "strict": False}
                for n in ("get_weather", "get_time")]  # fmt: skip


def test_the_openai_python_sdk_reads_responses_streams() -> None:
    openai = pytest.importorskip("openai")
    full, text = _servers()
    with full, text:
        client = openai.OpenAI(base_url=full.url + "/v1", api_key="unused", max_retries=0)
        with client.responses.stream(model="m", input="hi", tools=OPENAI_TOOLS) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
        assert "response.output_text.done" in kinds
        assert final.output_text == "Let me look."
        reasoning = [i for i in final.output if i.type == "reasoning"]
        assert [s.text for s in reasoning[0].summary] == ["The user wants two lookups."]
        calls = [
            (i.name, json.loads(i.arguments)) for i in final.output if i.type == "function_call"
        ]
        assert calls == [("get_weather", {"city": "Oslo"}), ("get_time", {"city": "Oslo"})]
        assert final.status == "completed" and final.model == "m" and final.usage is not None

        client = openai.OpenAI(base_url=text.url + "/v1", api_key="unused", max_retries=0)
        with client.responses.stream(model="m", input="hi") as stream:
            assert stream.get_final_response().output_text == "It is sunny in Oslo."
        with pytest.raises(openai.BadRequestError, match="No tool call found"):
            client.responses.create(
                model="m", stream=True,
                input=[{"type": "function_call_output", "call_id": "nope", "output": "x"}],
            )  # fmt: skip


def test_the_openai_python_sdk_reads_chat_streams() -> None:
    openai = pytest.importorskip("openai")
    full, _text = _servers()
    tools = [{"type": "function", "function": {"name": n, "parameters": CITY}}
             for n in ("get_weather", "get_time")]  # fmt: skip
    with full:
        client = openai.OpenAI(base_url=full.url + "/v1", api_key="unused", max_retries=0)
        messages = [{"role": "user", "content": "hi"}]
        with client.chat.completions.stream(
            model="m", messages=messages, tools=tools, stream_options={"include_usage": True}
        ) as stream:
            chunks = list(stream)
            final = stream.get_final_completion()
        reasoning = "".join(
            (c.chunk.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
            for c in chunks
            if c.type == "chunk" and c.chunk.choices
        )
        assert reasoning == "The user wants two lookups."
        message = final.choices[0].message
        assert message.content == "Let me look."
        assert [
            (c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []
        ] == [
            ("get_weather", {"city": "Oslo"}),
            ("get_time", {"city": "Oslo"}),
        ]
        assert final.choices[0].finish_reason == "tool_calls"
        assert final.usage is not None and final.model == "m"
        plain = client.chat.completions.create(model="m", messages=messages, stream=True)
        assert all(chunk.usage is None for chunk in plain)


def test_the_anthropic_python_sdk_reads_message_streams() -> None:
    anthropic = pytest.importorskip("anthropic")
    full, text = _servers()
    tools = [{"name": n, "input_schema": CITY} for n in ("get_weather", "get_time")]
    with full, text:
        client = anthropic.Anthropic(base_url=full.url, api_key="unused", max_retries=0)
        with client.messages.stream(
            model="m", max_tokens=100, tools=tools, messages=[{"role": "user", "content": "hi"}],
            thinking={"type": "enabled", "budget_tokens": 1024},
        ) as stream:  # fmt: skip
            final = stream.get_final_message()
        kinds = [b.type for b in final.content]
        assert kinds == ["thinking", "text", "tool_use", "tool_use"]
        assert final.content[0].thinking == "The user wants two lookups."
        assert final.content[0].signature
        assert final.content[1].text == "Let me look."
        assert [(b.name, b.input) for b in final.content[2:]] == [
            ("get_weather", {"city": "Oslo"}),
            ("get_time", {"city": "Oslo"}),
        ]
        assert final.stop_reason == "tool_use" and final.model == "m"
        client = anthropic.Anthropic(base_url=text.url, api_key="unused", max_retries=0)
        with client.messages.stream(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            assert stream.get_final_text() == "It is sunny in Oslo."
        with pytest.raises(anthropic.BadRequestError, match="tool_result"):
            client.messages.create(
                model="m", max_tokens=100, stream=True,
                messages=[{"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}],
            )  # fmt: skip


async def test_the_javascript_openai_clients_read_every_emulated_reply() -> None:
    """The ``openai`` Node SDK (``responses.stream()``, chat streaming), ``@ai-sdk/openai``
    (Responses) and ``@ai-sdk/openai-compatible`` (Chat), through ``ai``'s ``streamText``."""
    full, text = _servers()
    limited = ProviderServer(EmulatedProvider(), faults=FaultProfile(rate_limit=1.0))
    async with full, text, limited:
        found = await run_script("emulated_openai.mjs", full.url, text.url, limited.url)
    calls = [("get_weather", {"city": "Oslo"}), ("get_time", {"city": "Oslo"})]
    for client in ("nodeResponses", "nodeChat", "aiOpenAI", "aiCompatible"):
        got = found["full"][client]
        assert "error" not in got, (client, got)
        assert got["text"] == "Let me look.", client
        assert got["reasoning"] == "The user wants two lookups.", client
        assert [(c["name"], c["arguments"]) for c in got["calls"]] == calls, client
        assert len({c["id"] for c in got["calls"]}) == 2, client
        assert got["usage"], client
        plain = found["text"][client]
        assert "error" not in plain, (client, plain)
        assert (plain["text"], plain["calls"], plain["reasoning"]) == (
            "It is sunny in Oslo.",
            [],
            "",
        )
        error = found["error"][client]["error"]
        assert error["status"] == 400, (client, error)
        assert "call_missing" in error["message"], client
        limit = found["limited"][client]["error"]
        assert limit["status"] == 429 and "Rate limit" in limit["message"], (client, limit)
    assert found["full"]["aiOpenAI"]["finish"] == "tool-calls"
    assert found["text"]["aiCompatible"]["finish"] == "stop"
    responses = found["full"]["nodeResponses"]
    assert {"response.content_part.added", "response.output_text.done"} <= set(responses["events"])
    assert responses["status"] == "completed" and responses["model"] == "emulated"


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
async def test_agentloop_reads_a_scripted_thought_on_each_api(api: str) -> None:
    """A turn's ``thought`` reaches the run as the provider's reasoning, streamed or not."""
    from agentloop import Agent
    from agentloop.models import ThoughtPart

    from ._provider_helpers import make_model

    script = [EmulatedTurn(thought="Weighing it.", text="Sunny.")]
    async with ProviderServer(EmulatedProvider(script=script)) as server:
        for stream in (True, False):
            async with make_model(api, server.url, transport="httpx", stream=stream) as model:
                result = await Agent(model).run("Weather?")
            assert result.error is None and result.text == "Sunny."
            parts = result.steps[-1].parts
            assert [p.text for p in parts if isinstance(p, ThoughtPart)] == ["Weighing it."], stream


def test_a_json_script_turn_takes_a_thought(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"thought": "Hmm.", "text": "Hi."}]))
    provider = EmulatedProvider.from_script_file(path)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9}
    response = provider(RecordedRequest("POST", "/v1/messages", {}, json.dumps(body).encode()))
    content = json.loads(b"".join(p.data for p in response.pieces()))["content"]
    assert [b["type"] for b in content] == ["thinking", "text"] and content[0]["thinking"] == "Hmm."
    path.write_text(json.dumps([{"thought": 3}]))
    with pytest.raises(Exception, match="thought must be a string"):
        EmulatedProvider.from_script_file(path)
