"""Every setting of the run's settings objects is checked when the object is made: a value of
the wrong type or out of range is a ``UserError`` naming the field, never a raw
``decimal.InvalidOperation`` or ``TypeError`` later (or a run that misbehaves)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import anyio
import pytest

from agentloop import (
    ContextWindow,
    Memory,
    ModelPrice,
    PriceTable,
    RetryPolicy,
    ToolLimits,
    UsageLimits,
    UserError,
)
from agentloop.models import ModelSettings

PRICES = PriceTable({"m": ModelPrice(input="1", output="2")})

BAD: list[tuple[Callable[..., Any], str, Any]] = [
    (UsageLimits, "cost", "nan"),
    (UsageLimits, "cost", "inf"),
    (UsageLimits, "cost", "lots"),
    (UsageLimits, "cost", [1]),
    (UsageLimits, "requests", "10"),
    (UsageLimits, "requests", 1.5),
    (UsageLimits, "requests", True),
    (UsageLimits, "input_tokens", float("nan")),
    (UsageLimits, "output_tokens", "5"),
    (UsageLimits, "total_tokens", -1),
    (UsageLimits, "tool_calls", "3"),
    (UsageLimits, "prices", {"m": 1}),
    (ContextWindow, "max_tokens", "10"),
    (ContextWindow, "max_tokens", 10.5),
    (ContextWindow, "keep_steps", "4"),
    (ContextWindow, "headroom", "0.2"),
    (ContextWindow, "headroom", float("nan")),
    (ContextWindow, "summarizer", "summarise please"),
    (Memory, "max_runs", "3"),
    (Memory, "max_tokens", "100"),
    (Memory, "max_tokens", -5),
    (RetryPolicy, "max_attempts", "3"),
    (RetryPolicy, "initial_wait", "1"),
    (RetryPolicy, "initial_wait", -1.0),
    (RetryPolicy, "max_wait", float("nan")),
    (RetryPolicy, "max_retry_after", -1),
    (RetryPolicy, "jitter", 2.0),
    (RetryPolicy, "deadline", "5"),
    (RetryPolicy, "attempt_timeout", float("nan")),
    (RetryPolicy, "idle_timeout", "1"),
    (ToolLimits, "max_actions_per_step", 0),
    (ToolLimits, "max_parallel_actions", "16"),
    (ToolLimits, "max_output_chars", 0),
    (ToolLimits, "max_retries", -1),
    (ToolLimits, "tool_limiter", 4),
    (ToolLimits, "thread_limiter", "32"),
    (ModelSettings, "max_tokens", "100"),
    (ModelSettings, "max_tokens", 0),
    (ModelSettings, "temperature", "hot"),
    (ModelSettings, "temperature", float("nan")),
    (ModelSettings, "top_p", "1"),
    (ModelSettings, "seed", 1.5),
    (ModelSettings, "thinking_budget", "1024"),
    (ModelSettings, "reasoning_effort", 3),
    (ModelSettings, "tool_choice", 1),
    (ModelSettings, "parallel_tool_calls", "no"),
    (ModelSettings, "prompt_cache_key", 7),
    (ModelSettings, "prompt_caching", "yes"),
    (ModelSettings, "extra", ["a"]),
]


def _make(cls: Callable[..., Any], field: str, value: Any) -> Any:
    kwargs: dict[str, Any] = {field: value}
    if cls is ContextWindow and field != "max_tokens":
        kwargs["max_tokens"] = 1000
    if cls is UsageLimits and field == "cost":
        kwargs["prices"] = PRICES
    return cls(**kwargs)


@pytest.mark.parametrize(("cls", "field", "value"), BAD, ids=lambda v: repr(v)[:24])
def test_a_bad_setting_is_a_user_error_naming_its_field(
    cls: Callable[..., Any], field: str, value: Any
) -> None:
    with pytest.raises(UserError) as caught:
        _make(cls, field, value)
    name = getattr(cls, "__name__", "")
    assert f"{name}.{field}" in str(caught.value), str(caught.value)


@pytest.mark.parametrize("field", ["input", "output", "cache_read", "cache_write"])
@pytest.mark.parametrize("value", ["nan", "lots", [1], -1])
def test_a_bad_price_is_a_user_error_naming_its_field(field: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"input": "1", "output": "1", field: value}
    with pytest.raises(UserError, match=f"ModelPrice.{field}"):
        ModelPrice(**kwargs)


async def test_good_settings_are_taken_as_given() -> None:
    assert UsageLimits(cost="0.5", prices=PRICES).cost == Decimal("0.5")
    assert UsageLimits(cost=1, prices=PRICES, requests=3, tool_calls=0).requests == 3
    assert ContextWindow(max_tokens=10, headroom=0).headroom == 0
    assert RetryPolicy(max_attempts=1, initial_wait=0, jitter=1, deadline=5).jitter == 1
    limiter = anyio.CapacityLimiter(2)
    assert ToolLimits(thread_limiter=limiter, max_retries=0).thread_limiter is limiter
    assert Memory(max_runs=0, max_tokens=0).max_runs == 0
    settings = ModelSettings(max_tokens=10, temperature=0, top_p=1.0, seed=3, tool_choice="f")
    assert settings.temperature == 0
