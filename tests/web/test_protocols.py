"""The AG-UI and Vercel AI SDK encodings of a real run (emulated provider, loopback socket, on
asyncio and trio): every AG-UI message validates against the ``ag-ui-protocol`` package, parts
open and close in order, thoughts are reasoning, actions are tool calls, the withdrawn draft is
named, and an encoding resumed at any event equals the tail of the whole one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import TypeAdapter

from agentloop import Agent, Event
from agentloop.sessions import InMemoryStore
from agentloop.testing import ProviderServer
from agentloop.web import encoder

from ._demo import DRAFT, FINAL, THOUGHT, DemoProvider, demo_agent


@pytest.fixture
async def events() -> AsyncIterator[list[Event]]:
    async with ProviderServer(DemoProvider(chunk_delay=0.0)) as server:
        agent: Agent[Any, Any] = demo_agent(server.url, store=InMemoryStore())
        async with agent.model, agent.stream("Paris or Oslo?", session="s") as run:  # type: ignore[union-attr]
            yield [e async for e in run]


def _encode(protocol: str, events: list[Event]) -> list[Any]:
    codec = encoder(protocol, thread_id="s")
    out = [m for e in events for m in codec.encode(e)]
    return out + codec.end()


async def test_ag_ui_messages_are_valid_and_map_thoughts_actions_and_the_answer(
    events: list[Event],
) -> None:
    from ag_ui.core import Event as AgUiEvent

    messages = _encode("ag-ui", events)
    adapter: TypeAdapter[Any] = TypeAdapter(AgUiEvent)
    for message in messages:
        adapter.validate_python(message)  # the package's own models accept each one
    types = [m["type"] for m in messages]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert messages[0]["threadId"] == "s"
    reasoning = "".join(m["delta"] for m in messages if m["type"] == "REASONING_MESSAGE_CONTENT")
    assert THOUGHT in reasoning
    assert types.index("REASONING_MESSAGE_CONTENT") < types.index("TEXT_MESSAGE_CONTENT")
    for start, end in [
        ("TEXT_MESSAGE_START", "TEXT_MESSAGE_END"),
        ("REASONING_START", "REASONING_END"),
    ]:
        opened = [m["messageId"] for m in messages if m["type"] == start]
        assert opened == [m["messageId"] for m in messages if m["type"] == end]
    calls = [m for m in messages if m["type"].startswith("TOOL_CALL")]
    by_id: dict[str, list[str]] = {}
    for m in calls:
        by_id.setdefault(m["toolCallId"], []).append(m["type"])
    names = {m["toolCallName"] for m in calls if m["type"] == "TOOL_CALL_START"}
    assert names == {"create_goal", "get_weather", "update_goal"}
    for sequence in by_id.values():
        assert sequence[0] == "TOOL_CALL_START" and sequence[-1] == "TOOL_CALL_RESULT"
        assert sequence.index("TOOL_CALL_END") == len(sequence) - 2
    (discarded,) = [m for m in messages if m["type"] == "CUSTOM"]
    assert discarded["name"] == "agentloop.attempt_discarded"
    withdrawn = set(discarded["value"]["message_ids"])
    text_of = {
        ident: "".join(m["delta"] for m in messages if m.get("messageId") == ident and "delta" in m)
        for ident in withdrawn
    }
    assert DRAFT in "".join(text_of.values())
    kept = [
        m
        for m in messages
        if m["type"] == "TEXT_MESSAGE_CONTENT" and m["messageId"] not in withdrawn
    ]
    assert "".join(m["delta"] for m in kept) == FINAL
    assert messages[-1]["result"] == FINAL


async def test_the_vercel_stream_maps_reasoning_tools_text_and_ends_with_done(
    events: list[Event],
) -> None:
    parts = _encode("vercel", events)
    assert parts[-1] == "[DONE]" and parts[-2] == {"type": "finish", "finishReason": "stop"}
    parts = parts[:-1]
    types = [p["type"] for p in parts]
    assert types[0] == "start"
    assert types.count("start-step") == types.count("finish-step") == 4
    for kind in ("text", "reasoning"):
        opened = [p["id"] for p in parts if p["type"] == f"{kind}-start"]
        assert opened == [p["id"] for p in parts if p["type"] == f"{kind}-end"]
    inputs = {p["toolName"]: p["input"] for p in parts if p["type"] == "tool-input-available"}
    assert inputs["get_weather"] == {"city": "Paris"}
    outputs = [p for p in parts if p["type"] == "tool-output-available"]
    assert {"city": "Paris", "celsius": 21, "sky": "sunny"} in [p["output"] for p in outputs]
    for p in parts:
        if p["type"] == "tool-input-delta":
            assert p["toolCallId"] in {q["toolCallId"] for q in outputs}
    (discarded,) = [p for p in parts if p["type"] == "data-agentloop-attempt-discarded"]
    withdrawn = set(discarded["data"]["ids"])
    drafted = "".join(
        p["delta"] for p in parts if p["type"] == "text-delta" and p["id"] in withdrawn
    )
    final = "".join(
        p["delta"] for p in parts if p["type"] == "text-delta" and p["id"] not in withdrawn
    )
    assert (drafted, final) == (DRAFT, FINAL)


@pytest.mark.parametrize("protocol", ["agentloop", "ag-ui", "vercel"])
async def test_an_encoding_resumed_at_any_event_is_the_tail_of_the_whole(
    events: list[Event], protocol: str
) -> None:
    """What ``sse_response`` does for ``Last-Event-ID``: rebuild the encoder on the events seen,
    then encode the rest. At every cut the result is the whole encoding's tail."""
    whole = _encode(protocol, events)
    for cut in range(len(events) + 1):
        codec = encoder(protocol, thread_id="s")
        seen = [m for e in events[:cut] for m in codec.encode(e)]
        rest = [m for e in events[cut:] for m in codec.encode(e)] + codec.end()
        assert seen + rest == whole


async def test_native_tool_calls_stream_their_arguments_under_one_id_each() -> None:
    """In native tool mode each call opens once, its streamed arguments add up to its input,
    and its end and result carry the same id (AG-UI and Vercel alike)."""
    import json

    from agentloop.models.openai import OpenAIChatModel
    from agentloop.testing import EmulatedProvider

    from ._demo import get_weather

    async with ProviderServer(EmulatedProvider()) as server:
        model = OpenAIChatModel("emulated", base_url=server.url + "/v1", api_key="k")
        async with model, Agent(model, tools=[get_weather]).stream("weather?") as run:
            events = [e async for e in run]
    ag_ui = _encode("ag-ui", events)
    starts = [m["toolCallId"] for m in ag_ui if m["type"] == "TOOL_CALL_START"]
    assert len(starts) == len(set(starts)) == 2
    for ident in starts:
        args = "".join(
            m["delta"] for m in ag_ui if m["type"] == "TOOL_CALL_ARGS" and m["toolCallId"] == ident
        )
        assert json.loads(args)["city"] in {"first", "second"}
        kinds = [m["type"] for m in ag_ui if m.get("toolCallId") == ident]
        assert kinds[0] == "TOOL_CALL_START" and kinds[-2:] == ["TOOL_CALL_END", "TOOL_CALL_RESULT"]
    vercel = _encode("vercel", events)
    opened = [
        p["toolCallId"] for p in vercel if isinstance(p, dict) and p["type"] == "tool-input-start"
    ]
    done = [
        p["toolCallId"]
        for p in vercel
        if isinstance(p, dict) and p["type"] == "tool-output-available"
    ]
    assert sorted(opened) == sorted(done) and len(opened) == 2


@pytest.mark.parametrize("protocol", ["agentloop", "ag-ui", "vercel"])
async def test_each_events_frames_go_out_as_one_chunk_its_last_frame_with_the_seq(
    events: list[Event], protocol: str
) -> None:
    import json

    from agentloop.web._sse import _frames

    async def replay() -> AsyncIterator[list[tuple[Event, bool]]]:
        for event in events:  # each event found at a wake-up of its own
            yield [(event, True)]

    chunks = [c async for c in _frames(replay(), encoder(protocol, thread_id="s"))]
    assert all(isinstance(c, bytes) for c in chunks)  # one write per event, not one per frame
    frames = [f for c in chunks for f in c.decode().split("\n\n") if f]
    data = [f.split("data: ", 1)[1] for f in frames]
    assert [d if d == "[DONE]" else json.loads(d) for d in data] == _encode(protocol, events)
    ids = [int(line[4:]) for c in chunks for line in c.decode().splitlines() if line[:4] == "id: "]
    assert len(chunks) >= len(ids) and ids == sorted(ids) and set(ids) <= {e.seq for e in events}


@pytest.mark.parametrize("protocol", ["agentloop", "ag-ui", "vercel"])
async def test_the_events_found_at_one_wake_up_go_out_as_one_chunk_cut_at_the_bound(
    events: list[Event], protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that finds many events sends them in one write (the same frames), and no
    chunk grows much past the bound: it is cut after the event that crosses it."""
    from agentloop.web import _sse

    async def replay() -> AsyncIterator[list[tuple[Event, bool]]]:
        yield [(event, True) for event in events]

    async def chunks() -> list[bytes]:
        return [c async for c in _sse._frames(replay(), encoder(protocol, thread_id="s"))]

    whole = await chunks()
    ending = encoder(protocol, thread_id="s")
    for event in events:
        ending.encode(event)
    assert len(whole) == 1 + bool(ending.end())  # the batch, then the protocol's ending
    monkeypatch.setattr(_sse, "_CHUNK", 200)
    cut = await chunks()
    assert b"".join(cut) == b"".join(whole) and len(cut) > len(whole)
    largest_event = max(len(c) for c in (await _one_chunk_per_event(events, protocol)))
    assert all(len(c) < 200 + largest_event for c in cut)


async def _one_chunk_per_event(events: list[Event], protocol: str) -> list[bytes]:
    from agentloop.web._sse import _frames

    async def replay() -> AsyncIterator[list[tuple[Event, bool]]]:
        for event in events:
            yield [(event, True)]

    return [c async for c in _frames(replay(), encoder(protocol, thread_id="s"))]


async def test_the_agentloop_streams_frames_are_each_events_own_json(events: list[Event]) -> None:
    """What ``encode_json`` writes, by whichever serialiser, is ``to_json()``'s every byte."""
    codec = encoder("agentloop")
    for event in events:
        assert codec.encode_json(event) == [event.to_json().encode()]
