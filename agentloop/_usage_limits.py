"""Usage limits per run: tokens, requests, tool calls and cost, checked by the engine before
each model call (on an estimate), while a reply streams, and after it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from . import _checks as checks
from ._errors import UsageLimitExceeded, UserError, as_given

if TYPE_CHECKING:
    from ._cost import PriceTable
    from .models._types import Message, Usage

# Characters per token, for estimates made before the provider counts (English text runs
# at about four; a rough figure is what a limit checked on an estimate needs).
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageLimits:
    """Limits on what one run (its sub-runs included) may use; ``None`` is no limit.

    Checked before each model call, on an estimate of its input (the prompt's characters / 4)
    and with the call it would add to ``requests``; while a reply streams (its characters / 4
    against the output and total limits: a reply that runs away is cut mid-stream); and after
    each call, on the provider's counts. A tool call past ``tool_calls`` is not run. Passing a
    limit ends the run with ``usage_limit_exceeded`` (``UsageLimitExceeded``), whose
    ``details`` name the ``limit``, what was ``allowed`` and what was ``used`` (or would have
    been).

    Args:
        input_tokens: Input (prompt) tokens of all model calls together.
        output_tokens: Output tokens of all model calls together.
        total_tokens: Input and output tokens together.
        requests: Model calls (each attempt counts, retries included).
        tool_calls: Actions run.
        cost: Money (a ``Decimal``, number or numeric string), priced by ``prices``
            (``PriceTable``); calls of an unpriced model count 0.
        prices: The price table ``cost`` is checked with.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    requests: int | None = None
    tool_calls: int | None = None
    cost: Decimal | float | str | None = None
    prices: PriceTable | None = None

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens", "total_tokens", "requests", "tool_calls"):
            checks.optional_count("UsageLimits", name, getattr(self, name))
        prices = as_given(self.prices)
        if prices is not None:
            from ._cost import PriceTable

            if not isinstance(prices, PriceTable):
                raise UserError(f"UsageLimits.prices must be a PriceTable, not {prices!r}")
        if self.cost is not None:
            object.__setattr__(self, "cost", checks.money("UsageLimits", "cost", self.cost))
            if prices is None:
                raise UserError("UsageLimits.cost needs prices= (a PriceTable)")

    def before_call(self, usage: Usage, messages: Sequence[Message]) -> UsageLimitExceeded | None:
        """The limit the next model call would pass, judged on an estimate of its input.

        Args:
            usage: The run's usage so far.
            messages: The request's messages.
        """
        if self.requests is not None and usage.requests + 1 > self.requests:
            return _exceeded("requests", self.requests, usage.requests + 1, "the next model call")
        if self.input_tokens is None and self.total_tokens is None:
            return None
        estimate = estimate_tokens(messages)
        if self.input_tokens is not None and usage.input_tokens + estimate > self.input_tokens:
            used = usage.input_tokens + estimate
            return _exceeded("input_tokens", self.input_tokens, used, "the next prompt (estimated)")
        total = usage.input_tokens + usage.output_tokens + estimate
        if self.total_tokens is not None and total > self.total_tokens:
            return _exceeded(
                "total_tokens", self.total_tokens, total, "the next prompt (estimated)"
            )
        return None

    def streamed_chars(self, usage: Usage) -> int | None:
        """How many characters the reply streaming now may run to before a limit is passed
        (estimated), or ``None`` when no output limit applies.

        Args:
            usage: The run's usage before this reply.
        """
        budgets: list[int] = []
        if self.output_tokens is not None:
            budgets.append(self.output_tokens - usage.output_tokens)
        if self.total_tokens is not None:
            budgets.append(self.total_tokens - usage.input_tokens - usage.output_tokens)
        if not budgets:
            return None
        return max(0, min(budgets)) * CHARS_PER_TOKEN

    def while_streaming(self, usage: Usage, chars: int) -> UsageLimitExceeded:
        """The error of a reply that ran past ``streamed_chars``.

        Args:
            usage: The run's usage before this reply.
            chars: The characters it streamed.
        """
        estimate = -(-chars // CHARS_PER_TOKEN)
        output = usage.output_tokens + estimate
        if self.output_tokens is not None and output > self.output_tokens:
            return _exceeded("output_tokens", self.output_tokens, output, "the reply (estimated)")
        total = usage.input_tokens + output
        return _exceeded("total_tokens", self.total_tokens or 0, total, "the reply (estimated)")

    def after_call(
        self, usage: Usage, usage_by_model: Mapping[str, Usage]
    ) -> UsageLimitExceeded | None:
        """The limit the run's usage has passed, on the provider's counts.

        Args:
            usage: The run's usage so far.
            usage_by_model: The same by ``"provider:model"`` (for ``cost``).
        """
        checks = (
            ("input_tokens", self.input_tokens, usage.input_tokens),
            ("output_tokens", self.output_tokens, usage.output_tokens),
            ("total_tokens", self.total_tokens, usage.input_tokens + usage.output_tokens),
            ("requests", self.requests, usage.requests),
        )
        for name, allowed, used in checks:
            if allowed is not None and used > allowed:
                return _exceeded(name, allowed, used, "the run")
        if self.cost is not None and self.prices is not None:
            spent, allowed_cost = self.prices.cost_of(usage_by_model).total, Decimal(self.cost)
            if spent > allowed_cost:
                return _exceeded("cost", allowed_cost, spent, "the run")
        return None

    def before_tool_call(self, calls: int) -> UsageLimitExceeded | None:
        """The limit the run's next tool call would pass.

        Args:
            calls: The tool calls the run has made.
        """
        if self.tool_calls is not None and calls + 1 > self.tool_calls:
            return _exceeded("tool_calls", self.tool_calls, calls + 1, "the next tool call")
        return None


def estimate_tokens(messages: Sequence[Message]) -> int:
    """The tokens ``messages`` come to, estimated from their text's length."""
    chars = 0
    for message in messages:
        for part in message.parts:
            for name in ("text", "arguments", "content"):
                value = getattr(part, name, None)
                if isinstance(value, str):
                    chars += len(value)
    return -(-chars // CHARS_PER_TOKEN)


def _exceeded(
    limit: str, allowed: Decimal | float | int, used: Decimal | float | int, what: str
) -> UsageLimitExceeded:
    shown = {"allowed": _plain(allowed), "used": _plain(used)}
    return UsageLimitExceeded(
        f"usage limit {limit}={shown['allowed']} exceeded: {what} comes to {shown['used']}",
        details={"limit": limit, **shown},
    )


def _plain(value: Decimal | float | int) -> float | int:
    """A figure as JSON takes it (a ``Decimal`` cost as a float)."""
    return float(value) if isinstance(value, Decimal) else value
