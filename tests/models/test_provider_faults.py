"""Synthesised faults (SYNTHETIC: hand-written in ``tests/fixtures/synthetic/``, or recorded
streams transformed here) classify into the right ``ModelError``, with ``retryable`` and
``retry_after`` set for the runtime's retry layer, and the deltas decoded before a failure are
still delivered."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentloop import _errors as errors
from agentloop.models import (
    Message,
    ModelDelta,
    ModelRequest,
    ProviderPart,
    TextPiece,
    ThoughtPart,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from agentloop.testing import ProviderServer, ScriptedResponse, load_recording

from ._provider_helpers import SYNTHETIC, build, load, make_model

REQUEST = ModelRequest(messages=(Message.user("hi"),))


async def run(
    server: ProviderServer, api: str, response: ScriptedResponse, transport: str, **kwargs: Any
) -> tuple[list[ModelDelta], BaseException | None]:
    """Stream one reply; return the deltas received and the error raised (if any)."""
    server.enqueue(response)
    deltas: list[ModelDelta] = []
    error: BaseException | None = None
    async with make_model(api, server.url, transport=transport, **kwargs) as model:
        try:
            async with model.stream(REQUEST) as stream:
                async for delta in stream:
                    deltas.append(delta)
        except errors.ModelError as exc:
            error = exc
    return deltas, error


def synthetic(api: str, name: str, **changes: Any) -> ScriptedResponse:
    response = load_recording(SYNTHETIC / api / name)
    meta = json.loads((SYNTHETIC / api / f"{name}.meta.json").read_text())
    assert meta["synthetic"] is True
    if changes:
        import dataclasses

        response = dataclasses.replace(response, **changes)
    return response


# -- HTTP error statuses ----------------------------------------------------------------------------

HTTP_CASES = [
    # api, synthetic fixture, error class, retryable, retry_after, request id
    ("openai-chat", "429_rate_limit_retry_after", errors.ModelRateLimited, True, 7.0, "req_syn_429"),
    ("openai-chat", "429_rate_limit_retry_after_ms", errors.ModelRateLimited, True, 1.5, "req_syn_429ms"),
    ("openai-chat", "429_insufficient_quota", errors.ModelRateLimited, False, None, "req_syn_quota"),
    ("openai-chat", "500_server_error", errors.ModelServerError, True, None, "req_syn_500"),
    ("openai-chat", "502_server_error", errors.ModelServerError, True, None, "req_syn_502"),
    ("openai-chat", "503_server_error", errors.ModelOverloaded, True, None, "req_syn_503"),
    ("anthropic", "429_rate_limit", errors.ModelRateLimited, True, 3.0, "req_syn_a429"),
    ("anthropic", "500_api_error", errors.ModelServerError, True, None, "req_syn_a500"),
    ("anthropic", "529_overloaded", errors.ModelOverloaded, True, None, "req_syn_a529"),
    ("anthropic", "500_should_not_retry", errors.ModelServerError, False, None, "req_syn_a500n"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("api", "name", "cls", "retryable", "retry_after", "request_id"),
    HTTP_CASES,
    ids=[f"{c[0]}/{c[1]}" for c in HTTP_CASES],
)
async def test_http_error_status_is_classified(
    api: str,
    name: str,
    cls: type[errors.ModelError],
    retryable: bool,
    retry_after: float | None,
    request_id: str,
    transport: str,
    server: ProviderServer,
) -> None:
    """Error statuses become the matching ModelHTTPError with retry hints and request id."""
    deltas, error = await run(server, api, synthetic(api, name), transport)
    assert deltas == []
    assert type(error) is cls
    assert isinstance(error, errors.ModelHTTPError)
    assert error.retryable is retryable
    assert error.retry_after == retry_after
    assert error.request_id == request_id
    assert error.status == int(name[:3])
    assert error.body is not None and "error" in error.body
    assert len(server.requests) == 1  # the SDK did not retry on its own


async def test_the_sdk_never_retries(transport: str, server: ProviderServer) -> None:
    """A retryable 503 reaches the caller after exactly one request (SDK retries are off)."""
    server.enqueue(synthetic("openai-chat", "503_server_error"))
    server.enqueue(synthetic("openai-chat", "503_server_error"))
    async with make_model("openai-chat", server.url, transport=transport) as model:
        with pytest.raises(errors.ModelOverloaded):
            async with model.stream(REQUEST):
                pass
    assert len(server.requests) == 1


# -- errors inside a 200 stream ---------------------------------------------------------------------


async def test_anthropic_error_event_after_text(transport: str, server: ProviderServer) -> None:
    """``event: error`` (overloaded) mid-stream: the text before it arrives, then a retryable
    ModelStreamError with the request id."""
    deltas, error = await run(
        server, "anthropic", synthetic("anthropic", "stream_error_event_overloaded"), transport
    )
    assert [d for d in deltas if isinstance(d, TextPiece)] == [TextPiece("Partial answ")]
    assert isinstance(error, errors.ModelStreamError)
    assert error.retryable is True
    assert error.request_id == "req_syn_stream"
    assert error.status == 200
    assert error.message == "Overloaded"


async def test_responses_failed_event(transport: str, server: ProviderServer) -> None:
    """``response.failed`` (server_error) is a retryable ModelStreamError after the text."""
    deltas, error = await run(
        server,
        "openai-responses",
        synthetic("openai-responses", "stream_response_failed"),
        transport,
    )
    assert [d for d in deltas if isinstance(d, TextPiece)] == [TextPiece("Partial")]
    assert isinstance(error, errors.ModelStreamError)
    assert error.retryable is True
    assert error.request_id == "req_syn_failed"
    assert "failed to generate" in error.message


async def test_responses_error_event(transport: str, server: ProviderServer) -> None:
    """A bare ``error`` event (rate limited) is a retryable ModelStreamError."""
    _, error = await run(
        server, "openai-responses", synthetic("openai-responses", "stream_error_event"), transport
    )
    assert isinstance(error, errors.ModelStreamError)
    assert error.retryable is True
    assert error.message == "Rate limit reached"


async def test_chat_error_object_in_stream(transport: str, server: ProviderServer) -> None:
    """An ``{"error": ...}`` chunk in a Chat Completions stream is a retryable stream error."""
    deltas, error = await run(
        server, "openai-chat", synthetic("openai-chat", "stream_error_object"), transport
    )
    assert TextPiece("Hi") in deltas
    assert isinstance(error, errors.ModelStreamError)
    assert error.retryable is True


async def test_malformed_event_is_a_stream_error(transport: str, server: ProviderServer) -> None:
    """A data line that is not JSON is a (not retryable) ModelStreamError, not a crash."""
    _, error = await run(
        server, "openai-chat", synthetic("openai-chat", "stream_malformed_json"), transport
    )
    assert isinstance(error, errors.ModelStreamError)
    assert error.retryable is False


async def test_injected_garbage_bytes(transport: str, server: ProviderServer) -> None:
    """Bytes injected mid-event (malformed stream) give a ModelStreamError."""
    rec = load("anthropic/stream_text_ping")
    response = ScriptedResponse.sse(rec.body, inject={rec.body.index(b'"text_delta"'): b"\x00}{"})
    _, error = await run(server, "anthropic", response, transport)
    assert isinstance(error, errors.ModelStreamError)


# -- cut and reset connections ------------------------------------------------------------------------


async def test_chat_stream_cut_before_done(transport: str, server: ProviderServer) -> None:
    """A Chat Completions stream that ends without ``[DONE]`` and without a finish reason is a
    retryable ModelConnectionError; the text before the cut was delivered."""
    deltas, error = await run(
        server, "openai-chat", synthetic("openai-chat", "stream_cut_before_done"), transport
    )
    assert "".join(d.text for d in deltas if isinstance(d, TextPiece)) == "Hello wor"
    assert isinstance(error, errors.ModelConnectionError)
    assert error.retryable is True


@pytest.mark.parametrize(
    ("key", "second_call", "args_delta"),
    [
        ("openai-chat/stream_parallel_2_tool_calls_usage", b'"index":1,"id"', b'"index":1,'),
        ("anthropic/stream_text_then_2_tool_use", b'"index":2,"content_block"', b"input_json"),
        (
            "openai-responses/stream_two_function_calls",
            b'"output_index":1,"item"',
            b"event: response.function_call_arguments.delta",
        ),
    ],
)
async def test_reset_in_the_middle_of_tool_arguments(
    key: str, second_call: bytes, args_delta: bytes, transport: str, server: ProviderServer
) -> None:
    """A TCP reset inside the second call's arguments (in the middle of its third argument
    event): the first call arrives sealed, the second started with partial arguments, then a
    retryable ModelConnectionError."""
    rec = load(key)
    cut = rec.body.index(second_call)
    for _ in range(3):
        cut = rec.body.index(args_delta, cut + 1)
    cut += 10
    response = ScriptedResponse.sse(rec.body, reset_after=cut)
    deltas, error = await run(server, rec.api, response, transport)
    assert isinstance(error, errors.ModelConnectionError)
    assert error.retryable is True
    starts = [d.id for d in deltas if isinstance(d, ToolCallStart)]
    ends = [d.id for d in deltas if isinstance(d, ToolCallEnd)]
    assert len(starts) == 2
    assert ends == starts[:1]
    second_args = "".join(
        d.text for d in deltas if isinstance(d, ToolCallArgsDelta) and d.id == starts[1]
    )
    assert second_args and not second_args.endswith("}")
    assert server.stats.resets >= 1


async def test_reset_before_any_byte(transport: str, server: ProviderServer) -> None:
    """A connection reset before the status line is a retryable ModelConnectionError."""
    response = ScriptedResponse.sse(b"data: [DONE]\n\n", reset_after=0, reset_delay=0.0)
    response = ScriptedResponse(status=200, body=b"", reset_after=0, reset_delay=0.0)
    server.enqueue(response)
    async with make_model("openai-chat", server.url, transport=transport) as model:
        with pytest.raises(errors.ModelError) as info:
            async with model.stream(REQUEST) as stream:
                [d async for d in stream]
    assert isinstance(info.value, errors.ModelConnectionError | errors.ModelTimeout)
    assert info.value.retryable is True


# -- transport edge cases (recorded streams, transformed here) ------------------------------------------


def _keep_alive(body: bytes) -> bytes:
    return b": keep-alive\n\n" + body.replace(b"\n\n", b"\n\n: keep-alive\n\n")


def _multi_line_data(body: bytes) -> bytes:
    lines = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: {") and b'","' in line:
            line = line.replace(b'","', b'",\ndata: "', 2)  # JSON stays valid: joined by "\n"
        lines.append(line)
    return b"\n".join(lines)


TRANSFORMS = {
    "keep_alive_comments": _keep_alive,
    "crlf": lambda body: body.replace(b"\n", b"\r\n"),
    "cr": lambda body: body.replace(b"\n", b"\r"),
    "multi_line_data": _multi_line_data,
}


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.parametrize(
    "key",
    [
        "openai-chat/stream_parallel_2_tool_calls_usage",
        "anthropic/stream_thinking_tool_use",
        "openai-responses/stream_message_then_function_call",
    ],
)
async def test_transport_variants_decode_the_same(
    key: str, transform: str, transport: str, server: ProviderServer
) -> None:
    """Keep-alive comments, CRLF or CR line endings and multi-line ``data:`` fields give the same
    reply as the recorded stream, re-split at random points."""
    rec = load(key)
    original, _ = await run(server, rec.api, ScriptedResponse.sse(rec.body), transport)
    variant = TRANSFORMS[transform](rec.body)
    assert variant != rec.body
    changed, error = await run(
        server, rec.api, ScriptedResponse.sse(variant, split_seed=7, split_max=40), transport
    )
    assert error is None
    assert build(changed, "x") == build(original, "x")


# -- shapes the recordings lack ---------------------------------------------------------------------


async def test_chat_text_then_three_parallel_calls(transport: str, server: ProviderServer) -> None:
    """Text then three tool calls in one message (logprobs chunks ignored): each call is sealed
    when the next index starts, the last at the finish reason; cached tokens are reported."""
    deltas, error = await run(
        server,
        "openai-chat",
        synthetic("openai-chat", "stream_text_then_3_tool_calls_logprobs"),
        transport,
    )
    assert error is None
    kinds = [
        (type(d).__name__, getattr(d, "id", None)) for d in deltas if not isinstance(d, TextPiece)
    ]
    assert kinds[:9] == [
        ("ToolCallStart", "call_a"),
        ("ToolCallArgsDelta", "call_a"),
        ("ToolCallArgsDelta", "call_a"),
        ("ToolCallEnd", "call_a"),
        ("ToolCallStart", "call_b"),
        ("ToolCallArgsDelta", "call_b"),
        ("ToolCallEnd", "call_b"),
        ("ToolCallStart", "call_c"),
        ("ToolCallEnd", "call_c"),
    ]
    response = build(deltas, "openai")
    assert response.text == "Let me check."
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("lookup", '{"q":"a"}'),
        ("lookup", '{"q":"b"}'),
        ("clock", "{}"),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.cache_read_tokens) == (40, 32)


async def test_chat_content_filter(transport: str, server: ProviderServer) -> None:
    """``finish_reason: content_filter`` is the finish outcome ``content_filter``."""
    deltas, _ = await run(
        server, "openai-chat", synthetic("openai-chat", "stream_content_filter"), transport
    )
    response = build(deltas, "openai")
    assert (response.text, response.finish_reason) == ("Some", "content_filter")


async def test_chat_compatible_server_quirks(transport: str, server: ProviderServer) -> None:
    """``reasoning_content`` becomes a thought; a new id at index 0 is a new call."""
    deltas, _ = await run(
        server,
        "openai-chat",
        synthetic("openai-chat", "stream_compat_reasoning_no_index"),
        transport,
    )
    response = build(deltas, "openai")
    assert response.thought == "think more"
    assert response.text == "ok"
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("0", "first", "{}"),
        ("1", "second", '{"x":1}'),
    ]
    assert response.usage is None


async def test_anthropic_refusal(transport: str, server: ProviderServer) -> None:
    """``stop_reason: refusal`` is the outcome ``refusal`` carrying the text; cached prompt
    tokens count in ``input_tokens``."""
    deltas, _ = await run(server, "anthropic", synthetic("anthropic", "stream_refusal"), transport)
    response = build(deltas, "anthropic")
    assert response.finish_reason == "refusal"
    assert response.refusal == "I can't help with that."
    assert response.usage is not None
    assert (
        response.usage.input_tokens,
        response.usage.cache_read_tokens,
        response.usage.cache_write_tokens,
        response.usage.output_tokens,
    ) == (125, 100, 5, 9)


async def test_anthropic_interleaved_thinking_and_tools(
    transport: str, server: ProviderServer
) -> None:
    """Thinking, text, tool_use, thinking, tool_use: two signed thoughts, both calls, in order."""
    deltas, _ = await run(
        server,
        "anthropic",
        synthetic("anthropic", "stream_thinking_text_tool_use_interleaved"),
        transport,
    )
    response = build(deltas, "anthropic")
    kinds = [p.kind for p in response.parts]
    assert kinds == ["thought", "text", "tool_call", "thought", "tool_call"]
    thoughts = [p for p in response.parts if isinstance(p, ThoughtPart)]
    assert [(t.text, t.signature, t.provider) for t in thoughts] == [
        ("Need two lookups.", "sig-one", "anthropic"),
        ("And the second.", "sig-two", "anthropic"),
    ]
    assert [c.arguments for c in response.tool_calls] == ['{"q": "a"}', '{"q": "b"}']
    assert response.usage is not None and response.usage.reasoning_tokens == 20


async def test_responses_refusal_and_custom_tool_item(
    transport: str, server: ProviderServer
) -> None:
    """A refusal content part is the outcome ``refusal``; an item type the runtime does not model
    (a custom tool call) is kept as a provider block, never an action."""
    deltas, _ = await run(
        server,
        "openai-responses",
        synthetic("openai-responses", "stream_refusal_and_custom_tool"),
        transport,
    )
    response = build(deltas, "openai-responses")
    assert response.finish_reason == "refusal"
    assert response.refusal == "I can't help with that."
    assert response.tool_calls == ()
    blocks = [p for p in response.parts if isinstance(p, ProviderPart)]
    assert [(b.type, b.data["input"]) for b in blocks] == [("custom_tool_call", "x = 1")]
    assert response.usage is not None and response.usage.cache_read_tokens == 10


async def test_json_reply_to_a_streaming_request(transport: str, server: ProviderServer) -> None:
    """A server that answers a streaming request with a whole JSON body is still understood."""
    rec = load("openai-chat/nonstream_single_tool_call")
    deltas, error = await run(server, "openai-chat", ScriptedResponse.json(rec.body), transport)
    assert error is None
    assert [c.name for c in build(deltas, "openai").tool_calls] == ["lookup_population"]
