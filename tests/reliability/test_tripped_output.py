"""A tripped output guardrail keeps what it tripped on: after ``AttemptDiscarded`` the tripped
answer appears in no later event, no step of the result, no session record and no HTTP
response; the run records that it tripped, and why, with the guardrail's message. The model is
the real OpenAI SDK driver over a loopback provider."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentloop import (
    Agent,
    AttemptDiscarded,
    OutputGuardrail,
    RunContext,
    RunFinished,
    StepFinished,
    TextDelta,
    Tripwire,
)
from agentloop._session_run import step_to_json
from agentloop.models.openai import OpenAIChatModel
from agentloop.sessions import InMemoryStore, RunEndRecord
from agentloop.testing import EmulatedProvider, ProviderServer

SECRET = "the vault code is 7391"


def no_digits(run: RunContext[Any], output: Any) -> Tripwire | None:
    if any(ch.isdigit() for ch in str(output)):
        return Tripwire(reason="the answer holds digits")
    return None


@pytest.fixture
async def provider() -> AsyncIterator[ProviderServer]:
    async with ProviderServer(EmulatedProvider(script=[SECRET])) as server:
        yield server


def _agent(provider: ProviderServer, store: InMemoryStore) -> Agent[Any, Any]:
    model = OpenAIChatModel("m", base_url=provider.url + "/v1", api_key="k")
    return Agent(model, guardrails=[OutputGuardrail(no_digits)], store=store)


def _dump(value: Any) -> str:
    return json.dumps(value, default=str)


async def test_a_tripped_answer_is_in_no_event_after_its_withdrawal_nor_in_the_result(
    provider: ProviderServer,
) -> None:
    store = InMemoryStore()
    agent = _agent(provider, store)
    try:
        async with agent.stream("the code?", session="s1") as run:
            events = [e async for e in run]
    finally:
        await agent.model.aclose()  # type: ignore[union-attr]
    cut = next(i for i, e in enumerate(events) if isinstance(e, AttemptDiscarded))
    assert "".join(e.text for e in events[:cut] if isinstance(e, TextDelta)) == SECRET
    after = events[cut:]
    assert any(isinstance(e, StepFinished) for e in after)
    for event in after:
        assert "7391" not in event.to_json(), event
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    result = finished.result
    assert result.output is None and result.text is None
    assert "7391" not in _dump([step_to_json(s) for s in result.steps])
    error = result.error
    assert error is not None and error.kind == "guardrail_tripped"
    assert error.details is not None and error.details["stage"] == "output"
    assert "the answer holds digits" in error.message
    session = await store.get("s1")
    assert session is not None
    records = [r.model_dump_json() for r in session.history]
    assert all("7391" not in r for r in records), records
    ends = [r for r in session.history if isinstance(r, RunEndRecord)]
    assert ends and ends[-1].error_kind == "guardrail_tripped"
    assert "the answer holds digits" in (ends[-1].error or "")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn's loop
async def test_a_tripped_answer_is_in_no_http_history(provider: ProviderServer) -> None:
    import httpx2

    from agentloop.web import create_app
    from tests.web._serving import frames, serving

    store = InMemoryStore()
    agent = _agent(provider, store)
    try:
        async with (
            serving(create_app(agent)) as base,
            httpx2.AsyncClient(base_url=base, timeout=30) as client,
        ):
            started = (await client.post("/api/runs", json={"input": "the code?"})).json()
            async with client.stream("GET", started["events"]) as response:
                sent = [f.json() for f in await frames(response)]
            history = await client.get(f"/api/sessions/{started['session']}")
    finally:
        await agent.model.aclose()  # type: ignore[union-attr]
    cut = next(i for i, e in enumerate(sent) if e["type"] == "attempt_discarded")
    assert all("7391" not in json.dumps(e) for e in sent[cut:]), sent[cut:]
    assert sent[-1]["result"]["error"]["kind"] == "guardrail_tripped"
    assert history.status_code == 200
    assert "7391" not in history.text, history.text
    assert "the answer holds digits" in history.text
