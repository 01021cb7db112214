"""Malformed provider output on the wire, through the real drivers and the loopback server.

tests/reliability/test_malformed_output.py feeds garbage to the loop as deltas (ReAct and
native); here the garbage is bytes in the HTTP response — random bytes, invalid UTF-8, broken,
deeply nested or wrongly shaped JSON in ``data:``, cut and reset streams, odd chunk boundaries,
wrong content types, huge replies — for each of the three APIs. The run ends with an answer, an
error result, or a ``ModelError`` (the documented failure), within ``max_steps``: never a hang,
never another exception.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import Agent, ModelError, RetryPolicy
from agentloop.testing import (
    Chunk,
    EmulatedProvider,
    ProviderServer,
    RecordedRequest,
    ScriptedResponse,
    corrupted,
)
from agentloop.testing._faults import MALFORMED_EVENTS

from ._support import APIS, clock, make_model, weather

MAX_STEPS = 4
RETRY = RetryPolicy(max_attempts=2, initial_wait=0.001, jitter=0.0)
REACT_SCRIPT = [
    'Thought: both.\nActions: [{"tag": "w", "name": "weather", "path": "weather", '
    '"input": {"query": "Paris"}}]',
    "Thought: done.\nAnswer: Sunny in Paris.",
]


Mutation = Callable[[ScriptedResponse], ScriptedResponse]


class Wire:
    """What the shared server answers during one example: the ``turn``-th reply mutated, every
    other one as the emulated provider would answer."""

    def __init__(self) -> None:
        self.emulated = EmulatedProvider()
        self.mutation: Mutation | None = None
        self.turn = 0
        self.count = 0

    def use(self, emulated: EmulatedProvider, mutation: Mutation | None, turn: int) -> None:
        self.emulated, self.mutation, self.turn, self.count = emulated, mutation, turn, 0

    def __call__(self, request: RecordedRequest) -> ScriptedResponse:
        response = self.emulated(request)
        turn, self.count = self.count, self.count + 1
        if turn == self.turn and self.mutation is not None:
            return self.mutation(response)
        return response


@pytest.fixture(scope="module")
def wire() -> Iterator[tuple[ProviderServer, Wire]]:
    handler = Wire()
    with ProviderServer(handler) as server:
        yield server, handler


async def run_outcome(api: str, url: str, *, tool_mode: str = "native", **agent: Any) -> str:
    """Run a two-tool agent to its end: ``"answer"``, ``"error:<kind>"`` or ``"model_error"``.
    Anything else (another exception, a hang) fails the test."""
    model = make_model(api, url)
    try:
        agent_ = Agent(
            model,
            tools=[weather, clock],
            tool_mode=tool_mode,  # type: ignore[arg-type]
            max_steps=MAX_STEPS,
            retry=RETRY,
            **agent,
        )
        with anyio.fail_after(20):
            result = await agent_.run("weather and time in Paris?")
    except ModelError:
        return "model_error"
    finally:
        await model.aclose()
    assert len(result.steps) <= MAX_STEPS
    if result.error is not None:
        return f"error:{result.error.kind}"
    assert isinstance(result.output, str)
    return "answer"


# -- mutations ----------------------------------------------------------------------------------


def _body(response: ScriptedResponse) -> bytes:
    return b"".join(p.data for p in response.pieces())


def _with(response: ScriptedResponse, body: bytes, **changes: Any) -> ScriptedResponse:
    return dataclasses.replace(response, body=[body], **changes)


def inject(at: float, garbage: bytes) -> Mutation:
    def apply(r: ScriptedResponse) -> ScriptedResponse:
        data = _body(r)
        cut = int(len(data) * at)
        return _with(r, data[:cut] + garbage + data[cut:])

    return apply


def truncate(at: float) -> Mutation:
    """The body ends early, cleanly (the HTTP response itself is complete)."""
    return lambda r: _with(r, _body(r)[: int(len(_body(r)) * at)])


def reset(at: float) -> Mutation:
    return lambda r: dataclasses.replace(r, reset_after=max(1, int(len(_body(r)) * at)))


def replace_data(index: int, payload: bytes) -> Mutation:
    """The ``data:`` of the ``index``-th event (modulo their number) becomes ``payload``; the
    ``event:`` line stays, so the provider's decoder dispatches on it."""

    def apply(r: ScriptedResponse) -> ScriptedResponse:
        events = _body(r).split(b"\n\n")
        i = index % max(1, len(events) - 1)
        lines = [
            b"data: " + payload if ln.startswith(b"data:") else ln for ln in events[i].split(b"\n")
        ]
        events[i] = b"\n".join(lines)
        return _with(r, b"\n\n".join(events))

    return apply


def content_type(value: str) -> Mutation:
    return lambda r: dataclasses.replace(r, headers={**r.headers, "content-type": value})


def resplit(seed: int, then: Mutation) -> Mutation:
    """``then``, delivered at seeded random chunk boundaries (1..16 bytes)."""
    return lambda r: dataclasses.replace(then(r), split_seed=seed, split_max=16)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
garbage = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(MALFORMED_EVENTS),
    st.builds(lambda d: b"data: " + nested(d) + b"\n\n", st.integers(100, 50_000)),
    st.just(b"data: \xff\xfe\n\n"),
    st.just(b'data: {"choices": [{"delta": {"content": "half'),
    st.just(b"event: error\ndata: {}\n\n"),
    st.just(b":" * 100 + b"\n\n"),
)
payloads = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    st.integers(1, 100_000).map(nested),
    st.just(b'{"type": "content_block_delta", "index": 0, "delta": ['),
)
fractions = st.floats(0.0, 1.0)
base_mutations = st.one_of(
    st.builds(inject, fractions, garbage),
    st.builds(truncate, fractions),
    st.builds(reset, st.floats(0.01, 0.99)),
    st.builds(replace_data, st.integers(0, 30), payloads),
    st.builds(content_type, st.sampled_from(["text/html", "application/json", "text/plain"])),
)
mutations = st.one_of(base_mutations, st.builds(resplit, st.integers(0, 2**16), base_mutations))


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutation=mutations,
    turn=st.integers(0, 1),
    tool_mode=st.sampled_from(["native", "react"]),
)
async def test_malformed_bytes_end_the_run_cleanly(
    wire: tuple[ProviderServer, Wire], api: str, mutation: Mutation, turn: int, tool_mode: str
) -> None:
    """Any malformed reply on the wire ends the run with an answer, an error result or a
    ModelError, within max_steps."""
    server, handler = wire
    script = list(REACT_SCRIPT) if tool_mode == "react" else None
    handler.use(EmulatedProvider(script=script), mutation, turn)
    await run_outcome(api, server.url, tool_mode=tool_mode)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("index", range(len(MALFORMED_EVENTS)))
async def test_the_fault_kits_malformed_events_end_the_run_cleanly(
    wire: tuple[ProviderServer, Wire], api: str, index: int
) -> None:
    """Each garbage event of the fault kit, in a tool-call stream, ends the run cleanly."""
    server, handler = wire
    handler.use(EmulatedProvider(), lambda r: corrupted(r, MALFORMED_EVENTS[index], at=2), 0)
    outcome = await run_outcome(api, server.url)
    assert outcome in ("answer", "model_error") or outcome.startswith("error:")


@pytest.mark.parametrize("api", APIS)
async def test_a_huge_reply_is_cut_off_early(wire: tuple[ProviderServer, Wire], api: str) -> None:
    """A reply far past max_reply_chars ends the run with reply_too_large, and the driver hangs
    up instead of reading the rest (the server sees the client leave)."""
    server, handler = wire
    piece = "x" * 1000
    emulated = EmulatedProvider(answer=piece * 2000, text_chunks=2000)  # 2 M characters

    def slow_text(r: ScriptedResponse) -> ScriptedResponse:
        events = _body(r).split(b"\n\n")
        return ScriptedResponse.sse([Chunk(e + b"\n\n", 0.001) for e in events if e])

    handler.use(emulated, slow_text, 1)
    before = server.stats.client_closed
    assert await run_outcome(api, server.url, max_reply_chars=50_000) == "error:reply_too_large"
    left = await anyio.to_thread.run_sync(
        server.wait_until, lambda s: s.client_closed > before, 5.0
    )
    assert left, server.stats


async def test_an_endless_line_is_not_buffered_to_its_end(
    wire: tuple[ProviderServer, Wire],
) -> None:
    """A stream that is one 8 MB line with no newline is given up early, not buffered whole:
    the event outgrew what the reply limit allows (reply_too_large)."""
    server, handler = wire
    blob = [Chunk(b"data: " + b"x" * 40_000, 0.0005) for _ in range(200)]
    handler.use(EmulatedProvider(), lambda r: ScriptedResponse.sse(blob), 0)
    before = server.stats.client_closed
    outcome = await run_outcome("openai-chat", server.url, max_reply_chars=50_000)
    assert outcome == "error:reply_too_large"
    left = await anyio.to_thread.run_sync(
        server.wait_until, lambda s: s.client_closed > before, 5.0
    )
    assert left, server.stats


# JSON of the right outline with a leaf of the wrong type: the drivers pass it on unchecked.
ILL_TYPED = {
    "openai-chat": b'data: {"choices":[{"index":0,"delta":{"content":5}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
    "openai-responses": b'event: response.output_text.delta\ndata: {"type":'
    b'"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":7}'
    b'\n\nevent: response.completed\ndata: {"type":"response.completed","response":'
    b'{"id":"r","status":"completed"}}\n\n',
    "anthropic": b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
    b'"usage":{"input_tokens":1}}}\n\nevent: content_block_start\ndata: {"type":'
    b'"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
    b'{"type":"text_delta","text":7}}\n\n',
}


@pytest.mark.parametrize("api", APIS)
async def test_ill_typed_leaf_values_are_a_model_error(
    wire: tuple[ProviderServer, Wire], api: str
) -> None:
    """A text delta that is a number, not a string, is a ModelError, not a TypeError."""
    server, handler = wire
    handler.use(EmulatedProvider(), lambda r: ScriptedResponse.sse(ILL_TYPED[api]), 0)
    assert await run_outcome(api, server.url) in ("model_error", "answer")
