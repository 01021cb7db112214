"""API keys never leave: a canary key, rejected with 401s that echo it (as real providers partly
do), 429s and 500s that echo it, an error event inside a 200 stream that echoes it, and a
successful session run, through every driver and transport — then every event, every log record
(all loggers, DEBUG), every exception's message, repr and traceback, the results, and the
persisted session (the SQLite file, dumped) are searched for the key. It must be nowhere.

Redaction lives in agentloop/models/_errors_map.py (messages, bodies, and the SDK exception kept
as ``__cause__``). Tool arguments with extra or ill-typed fields are rejected:
tests/test_loop.py::test_each_error_kind_is_fed_back_and_the_run_recovers.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import traceback
from pathlib import Path
from typing import Any

import pytest
import sniffio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentloop import Agent, Instrumentation, ModelError, RetryPolicy
from agentloop.models._errors_map import redact, secrets_of
from agentloop.sessions import SQLiteStore
from agentloop.testing import EmulatedProvider, ProviderServer, RecordedRequest, ScriptedResponse

from ._support import APIS, clock, make_model, weather

CANARY = "sk-canary-7f3a9c1e5b2d4f6a8c0e"
MASKED = CANARY[:8] + "*" * 20 + CANARY[-4:]
MODES = ("401", "401-masked", "429", "500", "stream-error", "ok")


def _key_of(request: RecordedRequest) -> str:
    auth = request.headers.get("x-api-key") or request.headers.get("authorization", "")
    return auth.removeprefix("Bearer ")


def _error(api: str, status: int, message: str) -> ScriptedResponse:
    if api == "anthropic":
        kind = {401: "authentication_error", 429: "rate_limit_error"}.get(status, "api_error")
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    headers = {"retry-after": "0"} if status == 429 else {}
    return ScriptedResponse.json(body, status=status, headers=headers)


def _stream_error(api: str, message: str) -> ScriptedResponse:
    error = json.dumps({"type": "error", "error": {"type": "api_error", "message": message}})
    if api == "anthropic":
        return ScriptedResponse.sse(f"event: error\ndata: {error}\n\n".encode())
    if api == "openai-responses":
        failed = {
            "type": "response.failed",
            "response": {"id": "r", "status": "failed", "error": {"code": "x", "message": message}},
        }
        return ScriptedResponse.sse(
            f"event: response.failed\ndata: {json.dumps(failed)}\n\n".encode()
        )
    return ScriptedResponse.sse(f"data: {json.dumps({'error': {'message': message}})}\n\n".encode())


class Provider:
    """Answers as ``mode`` says, echoing the key the request carried."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.mode = "ok"
        self.emulated = EmulatedProvider()
        self.keys_seen: set[str] = set()

    def __call__(self, request: RecordedRequest) -> ScriptedResponse:
        key = _key_of(request)
        self.keys_seen.add(key)
        echo = f"Incorrect API key provided: {key}. Find your key at the dashboard."
        if self.mode == "401":
            return _error(self.api, 401, echo)
        if self.mode == "401-masked":
            return _error(
                self.api, 401, f"Incorrect API key provided: {key[:8]}{'*' * 20}{key[-4:]}"
            )
        if self.mode == "429":
            return _error(self.api, 429, f"Rate limit for key {key} reached.")
        if self.mode == "500":
            return _error(self.api, 500, f"Internal error while serving {key}")
        if self.mode == "stream-error":
            return _stream_error(self.api, f"overloaded; key {key}")
        return self.emulated(request)


def _transports() -> list[str]:
    if sniffio.current_async_library() == "asyncio":
        return ["httpx", "aiohttp", "aiohttp-sdk"]
    return ["httpx"]


def _texts_of(exc: BaseException) -> list[str]:
    texts = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    for attr in ("message", "body"):
        texts.append(json.dumps(getattr(exc, attr, None), default=repr))
    return texts


@pytest.mark.parametrize("api", APIS)
async def test_the_api_key_appears_nowhere(
    api: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A canary key shows up in no event, log record, span (content recorded), exception,
    result or stored session, whatever the provider echoes back."""
    caplog.set_level(logging.DEBUG)
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    traced = Instrumentation(tracer_provider=tracer_provider, include_content=True)
    provider = Provider(api)
    seen: list[str] = []
    outcomes: dict[tuple[str, str], str] = {}
    db = tmp_path / "sessions.db"
    async with ProviderServer(provider) as server, SQLiteStore(db) as store:
        for transport in _transports():
            model = make_model(api, server.url, api_key=CANARY, transport=transport)
            retry = RetryPolicy(max_attempts=2, initial_wait=0.0, jitter=0.0)
            agent = Agent(
                model, tools=[weather, clock], store=store, retry=retry, instrument=traced
            )
            seen += [repr(model), repr(agent)]
            for mode in MODES:
                provider.mode = mode
                session = f"{transport}-{mode}"
                try:
                    async with agent.stream("weather?", session=session) as run:
                        seen += [event.to_json() for event in [e async for e in run]]
                    result = run.result
                    seen += [repr(result), json.dumps(result.text), repr(result.error)]
                    outcomes[transport, mode] = (
                        "answer" if result.error is None else result.error.kind
                    )
                except ModelError as exc:
                    seen += _texts_of(exc)
                    outcomes[transport, mode] = type(exc).__name__
            await model.aclose()
    seen += [r.getMessage() for r in caplog.records]
    seen += [caplog.text]
    finished = spans.get_finished_spans()
    assert finished
    seen += [span.to_json() for span in finished]
    with sqlite3.connect(db) as conn:
        seen += list(conn.iterdump())
    assert provider.keys_seen == {CANARY}  # the key did reach the provider
    expected = {
        "401": "ModelAuthError",
        "401-masked": "ModelAuthError",
        "429": "ModelRateLimited",  # again on the retry
        "500": "ModelServerError",
        "stream-error": "ModelStreamError",
        "ok": "answer",
    }
    assert outcomes == {(t, m): expected[m] for t in _transports() for m in MODES}
    leaks = [text for text in seen if CANARY in text or MASKED in text or CANARY[3:] in text]
    assert leaks == []


def test_redaction_keeps_the_rest_of_the_message() -> None:
    """Only the credential goes: the provider's words around it stay for the user."""
    headers = {"Authorization": f"Bearer {CANARY}"}
    text = f"Incorrect API key provided: {CANARY}. See https://example.test/keys."
    assert redact(text, secrets_of(headers)) == (
        "Incorrect API key provided: [redacted]. See https://example.test/keys."
    )
    assert redact({"error": {"message": MASKED, "n": [1, MASKED]}}) == {
        "error": {"message": "[redacted]", "n": [1, "[redacted]"]}
    }
    assert redact("risk-averse task-1234567 says hi") == "risk-averse task-1234567 says hi"
    custom = {"x-api-key": "plain-key-without-prefix-42"}
    assert redact("echo plain-key-without-prefix-42", secrets_of(custom)) == "echo [redacted]"
