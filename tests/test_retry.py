"""The retry layer below all middleware: what is retried, waits, discards, and no double actions."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from agentloop import (
    Agent,
    AttemptDiscarded,
    ModelBadRequest,
    ModelCall,
    ModelConnectionError,
    ModelRateLimited,
    ModelRequest,
    ModelResponse,
    ModelServerError,
    RetryPolicy,
    RunFailed,
    tool,
)
from agentloop.testing import Reply, ScriptedModel, call


@pytest.mark.fake_clock
async def test_rate_limit_is_retried_after_the_providers_wait(
    fake_time: bool, timescale: float
) -> None:
    """A 429 with retry-after 2 s is retried once, 2 s later."""
    wait = 2.0 * timescale
    model = ScriptedModel([ModelRateLimited("slow down", status=429, retry_after=wait), "ok"])
    start = anyio.current_time()
    result = await Agent(model).run("x")
    assert result.output == "ok" and len(model.requests) == 2
    if fake_time:
        assert anyio.current_time() - start == pytest.approx(2.0)


@pytest.mark.fake_clock
async def test_backoff_grows_and_is_capped() -> None:
    """Without retry-after, waits back off exponentially up to max_wait."""
    policy = RetryPolicy(initial_wait=1.0, max_wait=3.0, jitter=0.0)
    assert [policy.wait_for(None, n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 3.0, 3.0]
    error = ModelRateLimited("x", retry_after=500.0)
    assert policy.wait_for(error, 1) == policy.max_retry_after


async def test_client_errors_are_not_retried() -> None:
    """A 400 fails the run at once: RunFailed, then the error."""
    model = ScriptedModel([ModelBadRequest("bad field", status=400, provider="openai")])
    agent = Agent(model)
    async with agent.stream("x") as run:
        events = [e async for e in run]
    assert isinstance(events[-1], RunFailed) and events[-1].error.kind == "ModelBadRequest"
    with pytest.raises(ModelBadRequest, match="bad field"):
        run.result  # noqa: B018
    assert len(model.requests) == 1


@pytest.mark.fake_clock
async def test_retries_are_bounded(timescale: float) -> None:
    """After max_attempts the last error is raised."""
    errors = [ModelServerError(f"down {i}", status=503) for i in range(3)]
    policy = RetryPolicy(max_attempts=3, initial_wait=timescale)
    agent = Agent(ScriptedModel(errors), retry=policy)
    with pytest.raises(ModelServerError, match="down 2"):
        await agent.run("x")


@pytest.mark.fake_clock
async def test_a_stream_that_fails_midway_is_discarded_then_retried(timescale: float) -> None:
    """Deltas already streamed are withdrawn with reason 'retry'; usage is still counted."""
    model = ScriptedModel(
        [
            Reply(text="partial rep", raise_after=ModelConnectionError("reset")),
            "full reply",
        ],
        chunk_size=4,
    )
    async with Agent(model, retry=RetryPolicy(initial_wait=timescale)).stream("x") as run:
        events = [e async for e in run]
    discarded = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert [(e.attempt, e.reason) for e in discarded] == [(1, "retry")]
    result = run.result
    assert result.output == "full reply"
    assert result.usage.requests == 2 and result.usage.unknown == 1


@pytest.mark.fake_clock
async def test_a_stream_that_fails_after_an_action_started_is_not_retried_blind() -> None:
    """Its sealed actions become the step and run once; the loop goes on."""
    counter: Counter[str] = Counter()

    @tool
    async def work(label: str) -> str:
        """A test tool."""
        counter[label] += 1
        return label

    model = ScriptedModel(
        [
            Reply(
                text="starting",
                calls=[call("work", {"label": "a"}, id="a")],
                raise_after=ModelConnectionError("reset"),
            ),
            "finished",
        ]
    )
    result = await Agent(model, tools=[work]).run("x")
    assert counter == Counter({"a": 1})
    assert result.steps[0].finish_reason == "error" and result.steps[0].actions[0].output == "a"
    assert result.output == "finished"


@pytest.mark.fake_clock
async def test_retries_sit_below_all_middleware() -> None:
    """A middleware sees one call and one response, however many attempts it took."""
    seen = 0

    async def count(request: ModelRequest, call_next: ModelCall) -> ModelResponse:
        nonlocal seen
        seen += 1
        return await call_next(request)

    model = ScriptedModel([ModelServerError("oops", status=500), "ok"])
    retry = RetryPolicy(initial_wait=0.01)
    result = await Agent(model, model_middleware=[count], retry=retry).run("x")
    assert result.output == "ok" and seen == 1 and len(model.requests) == 2


@pytest.mark.fake_clock
async def test_the_model_call_deadline_bounds_attempts_and_waits(
    fake_time: bool, timescale: float
) -> None:
    """deadline=5 with a 10 s retry-after gives up as a timeout at 5 s."""
    from agentloop import ModelTimeout

    model = ScriptedModel([ModelRateLimited("wait", retry_after=10.0 * timescale), "never"])
    agent = Agent(model, retry=RetryPolicy(deadline=5.0 * timescale))
    start = anyio.current_time()
    with pytest.raises(ModelTimeout, match="deadline of"):
        await agent.run("x")
    if fake_time:
        assert anyio.current_time() - start == pytest.approx(5.0)


@pytest.mark.fake_clock
async def test_a_retry_discard_goes_out_before_the_wait(fake_time: bool, timescale: float) -> None:
    """AttemptDiscarded(reason='retry') is sent when the attempt fails, not after the backoff."""
    model = ScriptedModel([Reply(text="half", raise_after=ModelConnectionError("reset")), "whole"])
    agent = Agent(model, retry=RetryPolicy(initial_wait=10.0 * timescale, jitter=0.0))
    start = anyio.current_time()
    seen: list[tuple[str, float]] = []
    async with agent.stream("x") as run:
        async for event in run:
            seen.append((event.type, anyio.current_time() - start))
    discard_at = next(t for kind, t in seen if kind == "attempt_discarded")
    restart_at = [t for kind, t in seen if kind == "model_call_started"][1]
    assert discard_at < restart_at
    if fake_time:
        assert discard_at == 0.0
        assert restart_at == pytest.approx(10.0)


async def test_no_discard_when_no_retry_follows() -> None:
    """A failure that is not retried ends the run with RunFailed and no retry discard."""
    model = ScriptedModel([Reply(text="half", raise_after=ModelBadRequest("no", status=400))])
    async with Agent(model).stream("x") as run:
        kinds = [e.type async for e in run]
    assert "attempt_discarded" not in kinds and kinds[-1] == "run_failed"


def test_the_policy_gives_up_on_errors_it_does_not_retry_and_after_its_last_attempt() -> None:
    """``next_wait``: ``None`` for a non-retryable error or the last attempt, else a wait."""
    policy = RetryPolicy(max_attempts=3, initial_wait=1.0, jitter=0.0)
    overloaded = ModelServerError("busy", model="m", provider="p")
    assert policy.next_wait(overloaded, 1) == 1.0
    assert policy.next_wait(overloaded, 2) == 2.0
    assert policy.next_wait(overloaded, 3) is None
    assert policy.next_wait(ModelBadRequest("no", model="m", provider="p"), 1) is None
    assert policy.next_wait(ValueError("not a model error"), 1) is None


@pytest.mark.fake_clock
async def test_a_retry_discard_says_why_and_how_long_it_waits(
    fake_time: bool, timescale: float
) -> None:
    """AttemptDiscarded(reason='retry') carries the failed attempt's error (its class and
    message, with the status) and the wait before the next attempt; other discards carry none."""
    wait = 2.0 * timescale
    model = ScriptedModel(
        [ModelRateLimited("slow down", status=429, provider="openai", retry_after=wait), "ok"]
    )
    async with Agent(model).stream("x") as run:
        events = [e async for e in run]
    [discarded] = [e for e in events if isinstance(e, AttemptDiscarded)]
    assert discarded.reason == "retry" and discarded.error is not None
    assert discarded.error.kind == "ModelRateLimited"
    assert discarded.error.message == "slow down (provider=openai, status=429)"
    assert discarded.retry_in == pytest.approx(wait)
    assert run.result.output == "ok"
