"""Every recorded provider interaction normalises to the values in ``_provider_expectations``,
however its reply is split, and the driver sends a body equivalent to the recorded request.

How a reply is split is a property of the decoders: in plain sync code, every recorded reply goes
through the SSE decoder and the provider's wire decoder whole and re-split at many seeded random
byte boundaries. Over a loopback socket, through the real SDK clients, each fixture is replayed
once on every transport the drivers ship, re-split at seeded random boundaries (the split size
varies with the fixture and the transport).
"""

from __future__ import annotations

import json
import zlib

import pytest

from agentloop import _errors as errors
from agentloop.models import (
    ModelDelta,
    ModelResponse,
    ProviderPart,
    TextPart,
    ThoughtPart,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from agentloop.models._driver import SDKModel
from agentloop.models._sse import SSEDecoder
from agentloop.testing import ProviderServer, ScriptedResponse

from ._provider_expectations import EXPECTED, Expect, matches
from ._provider_helpers import (
    Recording,
    build,
    check_transport,
    fixture_keys,
    load,
    make_model,
    normalize,
    request_from_recorded,
)

KEYS = fixture_keys()
DECODED_KEYS = [k for k in KEYS if EXPECTED[k].error is None]
SEEDS = range(12)
_SPLIT_MAX = (7, 61, 509)


def test_every_fixture_has_an_expectation() -> None:
    """A fixture file without an entry in the expectations table fails (and vice versa)."""
    assert len(KEYS) == 61
    assert set(KEYS) == set(EXPECTED)


def _scripted(rec: Recording, seed: int) -> ScriptedResponse:
    split_max = max(_SPLIT_MAX[seed % len(_SPLIT_MAX)], len(rec.body) // 1500)
    return ScriptedResponse(
        status=rec.meta["status"],
        headers=rec.meta["headers"],
        body=rec.body,
        split_seed=zlib.crc32(rec.key.encode()) + seed,
        split_max=split_max,
        chunked=rec.sse,
    )


def _check_deltas(deltas: list[ModelDelta]) -> None:
    """Every started call is sealed exactly once, before the next call starts, and argument
    deltas only flow while it is open (the runtime may start a call the moment it is sealed)."""
    open_call: str | None = None
    sealed: list[str] = []
    started: list[str] = []
    for delta in deltas:
        if isinstance(delta, ToolCallStart):
            assert open_call is None, f"{delta.id} started before {open_call} was sealed"
            open_call = delta.id
            started.append(delta.id)
        elif isinstance(delta, ToolCallArgsDelta):
            assert delta.id == open_call
        elif isinstance(delta, ToolCallEnd):
            assert delta.id == open_call
            sealed.append(delta.id)
            open_call = None
    assert sealed == started


def _check_response(expect: Expect, response: ModelResponse, deltas: list[ModelDelta]) -> None:
    assert matches(expect.text, response.text), response.text
    thoughts = [p for p in response.parts if isinstance(p, ThoughtPart)]
    assert len(thoughts) == len(expect.thoughts)
    for got, want in zip(thoughts, expect.thoughts, strict=True):
        assert matches(want.text, got.text), got.text[:80]
        assert matches(want.signature, got.signature), got.signature
        assert got.redacted == want.redacted
        assert got.id == want.id
    calls = response.tool_calls
    assert [(c.id, c.wire_name) for c in calls] == [(c.id, c.name) for c in expect.calls]
    assert [json.loads(c.arguments) for c in calls] == [c.args for c in expect.calls]
    assert response.usage == expect.usage
    assert response.finish_reason == expect.finish
    assert response.refusal == expect.refusal
    blocks = [p.type for p in response.parts if isinstance(p, ProviderPart)]
    assert tuple(blocks) == expect.blocks
    citations = sum(len(p.citations) for p in response.parts if isinstance(p, TextPart))
    assert citations == expect.citations
    _check_deltas(deltas)
    streamed_args = "".join(d.text for d in deltas if isinstance(d, ToolCallArgsDelta))
    sealed_args = "".join(d.arguments for d in deltas if isinstance(d, ToolCallEnd) and d.arguments)
    assert streamed_args or sealed_args or not any(c.args for c in expect.calls)


def _decode(model: SDKModel, rec: Recording, pieces: list[bytes]) -> list[ModelDelta]:
    """The deltas ``model``'s decoders make of a reply arriving in ``pieces``."""
    decoder = model._decoder()
    out: list[ModelDelta] = []
    if not rec.sse:
        decoder.document(json.loads(b"".join(pieces)), out)
        return out
    sse = SSEDecoder()
    for piece in pieces:
        for event in sse.feed(piece):
            decoder.event(event, out)
    for event in sse.close():
        decoder.event(event, out)
    decoder.end(out)
    return out


@pytest.mark.parametrize("key", DECODED_KEYS)
def test_fixture_decodes_however_it_is_split(key: str) -> None:
    """Whole and at seeded random boundaries, the reply decodes to its expected values (one byte
    at a time is ``test_sse``'s: the SSE decoder gives the same events, so the wire decoder
    sees the same input). The error fixtures are HTTP errors: they are checked over the socket."""
    rec = load(key)
    expect = EXPECTED[key]
    model = make_model(rec.api, "http://127.0.0.1:9")
    splits = [[rec.body], *([p.data for p in _scripted(rec, seed).pieces()] for seed in SEEDS)]
    for pieces in splits:
        assert b"".join(pieces) == rec.body
        deltas = _decode(model, rec, pieces)
        _check_response(expect, build(deltas, model.provider), deltas)


@pytest.mark.parametrize("key", KEYS)
async def test_fixture_replays(key: str, transport: str, server: ProviderServer) -> None:
    """Over the socket, the fixture's reply normalises to its expected values (or its error)
    and the sent body matches the recorded request."""
    rec = load(key)
    expect = EXPECTED[key]
    request, kwargs = request_from_recorded(rec.api, rec.request)
    server.enqueue(_scripted(rec, zlib.crc32(f"{key} {transport}".encode())))
    deltas: list[ModelDelta] = []
    async with make_model(rec.api, server.url, transport=transport, **kwargs) as model:
        if expect.error is not None:
            with pytest.raises(errors.ModelError) as info:
                async with model.stream(request) as stream:
                    deltas.extend([d async for d in stream])
            err = info.value
            assert type(err) is expect.error
            assert err.status == expect.status
            assert err.request_id == expect.request_id
            assert err.provider == model.provider
            assert err.retryable is False
            assert err.message and err.message != f"HTTP {expect.status}"
        else:
            async with model.stream(request) as stream:
                deltas.extend([d async for d in stream])
            _check_response(expect, build(deltas, model.provider), deltas)
        check_transport(model, transport)
    sent = server.requests[-1]
    assert sent.method == "POST"
    assert (
        sent.path
        == {
            "openai-chat": "/v1/chat/completions",
            "openai-responses": "/v1/responses",
            "anthropic": "/v1/messages",
        }[rec.api]
    )
    assert normalize(rec.api, sent.json) == normalize(rec.api, rec.request)
    if rec.api == "openai-chat" and sent.json["stream"]:
        assert sent.json["stream_options"] == {"include_usage": True}
    assert "n" not in sent.json
