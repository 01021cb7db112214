"""The fault-injection kit (agentloop.testing: FaultProfile, FaultInjector, ProviderServer(faults=),
ProviderServerProcess(faults=), and the single-fault helpers): each fault reaches a real driver
as the provider would send it, decisions are seeded, and counts are kept."""

from __future__ import annotations

import json

import anyio
import pytest

from agentloop import (
    Agent,
    ModelConnectionError,
    ModelError,
    ModelOverloaded,
    ModelRateLimited,
    ModelServerError,
    ModelStreamError,
    RetryPolicy,
)
from agentloop.testing import (
    EmulatedProvider,
    FaultInjector,
    FaultProfile,
    ProviderServer,
    RecordedRequest,
    ScriptedResponse,
    corrupted,
    rate_limited,
    reset_midway,
    server_failed,
    slowed,
)

from ._support import APIS, clock, make_model, weather

RETRY = RetryPolicy(max_attempts=2, initial_wait=0.001, jitter=0.0, max_retry_after=0.01)
SSE = b"data: one\n\ndata: two\n\ndata: three\n\n"


def _request(path: str = "/v1/chat/completions") -> RecordedRequest:
    return RecordedRequest(method="POST", path=path, headers={}, body=b"{}")


def test_a_profile_is_validated_and_round_trips_as_json() -> None:
    """Rates are shares of requests (each in 0..1, at most 1 together); JSON carries a profile
    to the server process."""
    profile = FaultProfile(rate_limit=0.05, reset=0.01, slow=0.01, seed=4, retry_after=2.0)
    assert FaultProfile.from_json(profile.to_json()) == profile
    with pytest.raises(ValueError, match="sum to at most 1"):
        FaultProfile(rate_limit=0.7, server_error=0.4)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        FaultProfile(reset=-0.1)


async def test_decisions_are_seeded_and_counted() -> None:
    """The same seed gives the same faults in the same order; counts follow the rates."""

    async def answer() -> ScriptedResponse:
        return ScriptedResponse.sse(SSE)

    async def draw(seed: int) -> list[int]:
        injector = FaultInjector(FaultProfile(rate_limit=0.1, server_error=0.05, seed=seed))
        statuses = [(await injector.respond(_request(), answer)).status for _ in range(2000)]
        counts = injector.counts
        assert injector.requests == 2000
        assert counts["rate_limit"] == statuses.count(429)
        assert counts["server_error"] == sum(s >= 500 for s in statuses)
        assert 150 < counts["rate_limit"] < 250 and 60 < counts["server_error"] < 140
        assert injector.injected == counts["rate_limit"] + counts["server_error"]
        return statuses

    assert await draw(1) == await draw(1)
    assert await draw(1) != await draw(2)


def test_single_fault_helpers() -> None:
    """Each helper makes the fault it names, in the provider's shape."""
    limited = rate_limited("/v1/messages", retry_after=3)
    assert (limited.status, limited.headers["retry-after"]) == (429, "3")
    assert json.loads(limited.pieces()[0].data)["error"]["type"] == "rate_limit_error"
    overloaded = server_failed("/v1/messages", status=529)
    assert json.loads(overloaded.pieces()[0].data)["error"]["type"] == "overloaded_error"
    assert "error" in json.loads(server_failed(status=502).pieces()[0].data)

    response = ScriptedResponse.sse(SSE)
    slow = slowed(response, 0.25)
    assert [(p.data, p.delay) for p in slow.pieces()] == [
        (b"data: one\n\n", 0.25),
        (b"data: two\n\n", 0.25),
        (b"data: three\n\n", 0.25),
    ]
    assert reset_midway(response, at=0.5).reset_after == len(SSE) // 2
    assert reset_midway(response, at=10_000).reset_after == len(SSE) - 1
    bad = corrupted(response, b"data: {oops\n\n", at=1)
    assert b"".join(p.data for p in bad.pieces()) == (
        b"data: one\n\ndata: {oops\n\ndata: two\n\ndata: three\n\n"
    )


CASES = [
    # profile, what the run ends with (ModelError subclasses, or "answer")
    (FaultProfile(rate_limit=1.0, retry_after=0.0), (ModelRateLimited,)),
    (FaultProfile(server_error=1.0), (ModelServerError, ModelOverloaded)),
    (FaultProfile(reset=1.0, seed=5), (ModelConnectionError, "answer", "error")),
    (FaultProfile(slow=1.0, slow_delay=0.002), ("answer",)),
    (
        FaultProfile(malformed=1.0, seed=3),
        (ModelStreamError, ModelConnectionError, "answer", "error"),
    ),
]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("profile", "ends"), CASES, ids=["429", "5xx", "reset", "slow", "malformed"]
)
async def test_each_fault_reaches_a_real_driver(
    api: str, profile: FaultProfile, ends: tuple[object, ...]
) -> None:
    """With every request faulty, the run ends as that fault makes it end, and the server
    counted one fault per request it answered."""
    async with ProviderServer(EmulatedProvider(), faults=profile) as server:
        async with make_model(api, server.url) as model:
            agent = Agent(model, tools=[weather, clock], retry=RETRY, max_steps=4)
            retry_after: float | None = None
            try:
                with anyio.fail_after(20):
                    result = await agent.run("go")
                outcome: object = "answer" if result.error is None else "error"
            except ModelError as exc:
                outcome, retry_after = type(exc), exc.retry_after
    assert outcome in ends
    if outcome is ModelRateLimited:
        assert retry_after == profile.retry_after
    injector = server.faults
    assert injector is not None
    kind = next(k for k, v in injector.counts.items() if v)
    assert injector.counts[kind] == injector.requests == len(server.requests)
    assert getattr(profile, kind) == 1.0


async def test_a_mixed_profile_is_survived_with_retries() -> None:
    """The docstring's use: an agent with enough retries answers every time against a provider
    that fails a third of its requests."""
    profile = FaultProfile(
        rate_limit=0.2, reset=0.1, slow=0.05, seed=11, retry_after=0.0, slow_delay=0.005
    )
    retry = RetryPolicy(max_attempts=8, initial_wait=0.001, jitter=0.0)
    async with ProviderServer(EmulatedProvider(), faults=profile) as server:
        async with make_model("openai-chat", server.url) as model:
            agent = Agent(model, tools=[weather, clock], retry=retry)
            results = [await agent.run(f"go {i}") for i in range(30)]
    assert all(r.error is None and r.text for r in results)
    assert server.faults is not None
    counts = server.faults.counts
    assert counts["rate_limit"] and counts["reset"] and counts["slow"]
