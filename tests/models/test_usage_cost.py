"""Usage per run and per model, discarded attempts included, and its price.

The totals are checked against the usage numbers of the recorded provider streams (the
conformance expectations, written from the recordings by hand, not by the drivers), with each
run going through the real SDK over a loopback socket.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from agentloop import Agent, ModelPrice, PriceTable, RetryPolicy, Usage, UserError
from agentloop.testing import ProviderServer, Reply, ScriptedModel, call, load_recording

from ._provider_expectations import EXPECTED
from ._provider_helpers import FIXTURES, SYNTHETIC, make_model

# Per API: a failed attempt that is retried, then a tool-call reply and the text reply after it.
RUNS = {
    "openai-chat": (
        SYNTHETIC / "openai-chat" / "500_server_error",
        ["stream_parallel_2_tool_calls_usage", "stream_text_after_2_tool_results"],
    ),
    "openai-responses": (
        SYNTHETIC / "openai-chat" / "500_server_error",  # the same OpenAI error body
        ["stream_reasoning_function_call_usage", "stream_text_after_function_call_output"],
    ),
    "anthropic": (
        SYNTHETIC / "anthropic" / "500_api_error",
        ["stream_thinking_tool_use", "stream_tool_result_followup_text"],
    ),
}


def recorded_usage(api: str, name: str) -> Usage:
    """The usage the recorded stream reports, from the hand-written conformance expectations."""
    usage = EXPECTED[f"{api}/{name}"].usage
    assert usage is not None
    return usage


@pytest.mark.parametrize("api", list(RUNS))
async def test_run_usage_matches_the_recorded_streams(api: str) -> None:
    """Two model calls and a failed attempt before them: the run's usage is the sum of the
    recordings' usage, the failed attempt is one request of unknown usage, and the price is
    the table's price of exactly those numbers."""
    failure, names = RUNS[api]
    expected = sum((recorded_usage(api, n) for n in names), Usage())
    async with ProviderServer() as server:
        server.enqueue(
            load_recording(failure), *(load_recording(FIXTURES / api / n) for n in names)
        )
        async with make_model(api, server.url) as model:
            agent = Agent(model, retry=RetryPolicy(initial_wait=0.0, jitter=0.0))
            result = await agent.run("hello")
    assert result.error is None, result.error
    assert len(result.steps) == 2
    assert result.usage == expected + Usage(requests=1, unknown=1)
    key = f"{model.provider}:test-model"
    assert dict(result.usage_by_model) == {key: result.usage}
    assert [s.usage for s in result.steps] == [recorded_usage(api, n) for n in names]

    price = ModelPrice(input="2.50", output="10", cache_read="1.25", cache_write="3.75")
    cost = PriceTable({"test-model": price}).cost(result)
    uncached = expected.input_tokens - expected.cache_read_tokens - expected.cache_write_tokens
    assert cost.total == (
        uncached * Decimal("2.50")
        + expected.cache_read_tokens * Decimal("1.25")
        + expected.cache_write_tokens * Decimal("3.75")
        + expected.output_tokens * Decimal("10")
    ) / Decimal(1_000_000)
    assert cost.total > 0
    assert cost.unknown_requests == 1 and not cost.complete


async def test_sub_runs_are_priced_per_model_and_on_their_own() -> None:
    """A parent on one model delegating to a child on another: the parent's cost covers both
    models; the sub-run's result prices the child's calls alone."""
    child = Agent(ScriptedModel(["child says hi"], name="small"), name="helper")
    parent_model = ScriptedModel(
        [Reply(calls=[call("helper", {"task": "say hi"})]), "done"], name="large"
    )
    result = await Agent(parent_model, name="lead", tools=[child.as_tool()]).run("go")
    subrun = result.steps[0].actions[0].subrun
    assert subrun is not None
    assert set(result.usage_by_model) == {"test:large", "test:small"}
    assert dict(subrun.usage_by_model) == {"test:small": subrun.usage}
    assert result.usage_by_model["test:small"] == subrun.usage
    assert result.usage == result.usage_by_model["test:large"] + subrun.usage

    table = PriceTable(
        {"test:large": ModelPrice(input=10, output=30), "small": ModelPrice(input=1, output=2)}
    )
    total, sub = table.cost(result), table.cost(subrun)
    assert sub.by_model == {"test:small": table.cost_of({"test:small": subrun.usage}).total}
    assert total.by_model["test:small"] == sub.total
    assert total.total == total.by_model["test:large"] + sub.total
    assert total.complete and sub.complete


def test_model_price_formula_and_validation() -> None:
    usage = Usage(
        requests=2,
        input_tokens=1_000_000,
        output_tokens=500_000,
        cache_read_tokens=200_000,
        cache_write_tokens=100_000,
        reasoning_tokens=300_000,
    )
    # 700k uncached at 3, 200k cached at 0.3, 100k written at 3.75, 500k out (reasoning incl.) at 15
    price = ModelPrice(input=3, output=15, cache_read=0.3, cache_write="3.75")
    assert price.of(usage) == Decimal("2.1") + Decimal("0.06") + Decimal("0.375") + Decimal("7.5")
    # Cache reads and writes cost the input price unless given.
    assert ModelPrice(input=1, output=1).of(usage) == Decimal("1.5")
    for bad in (-1, "nan", float("inf")):
        with pytest.raises(UserError, match="input"):
            ModelPrice(input=bad, output=1)
    with pytest.raises(UserError, match="must be a ModelPrice"):
        PriceTable({"x": {"input": 1}})  # type: ignore[dict-item]


def test_unpriced_models_and_unknown_usage_are_reported() -> None:
    table = PriceTable({"openai:gpt-x": ModelPrice(input=1, output=1)})
    cost = table.cost_of(
        {
            "openai:gpt-x": Usage(requests=1, input_tokens=1_000_000),
            "anthropic:claude-y": Usage(requests=1, input_tokens=5),
            "openai:gpt-z": Usage(requests=1, unknown=1),
        }
    )
    assert cost.total == Decimal(1)
    assert cost.unpriced == ("anthropic:claude-y", "openai:gpt-z")
    assert cost.unknown_requests == 1
    assert not cost.complete
    # The exact key wins over the bare model name.
    both = PriceTable(
        {"gpt-x": ModelPrice(input=9, output=9), "openai:gpt-x": ModelPrice(input=1, output=1)}
    )
    assert both.price_of("openai:gpt-x") == ModelPrice(input=1, output=1)
    assert both.price_of("azure:gpt-x") == ModelPrice(input=9, output=9)
