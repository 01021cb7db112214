"""Cost: the usage a run reports, priced with the caller's price table.

Prices change and differ per contract, so agentloop ships none: the caller says what a million
tokens cost for each model. Usage is normalised by the drivers (``input_tokens`` includes cached
and cache-written tokens, ``output_tokens`` includes reasoning), so one formula fits every
provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from . import _checks as checks
from ._errors import UserError, as_given

if TYPE_CHECKING:
    from ._steps import RunResult
    from .models._types import Usage

_MILLION = Decimal(1_000_000)


def _money(value: Decimal | float | str, what: str) -> Decimal:
    return checks.money("ModelPrice", what, value)


@dataclass(frozen=True, slots=True, init=False)
class ModelPrice:
    """What a million tokens cost. Cache reads and writes cost ``input`` unless given.

    Args:
        input: The price of a million input tokens (a ``Decimal``, or a number or string
            made one).
        output: The price of a million output tokens.
        cache_read: The price of a million input tokens read from the provider's cache.
        cache_write: The price of a million input tokens written to it.
    """

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal

    def __init__(
        self,
        *,
        input: Decimal | float | str,
        output: Decimal | float | str,
        cache_read: Decimal | float | str | None = None,
        cache_write: Decimal | float | str | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "input", _money(input, "input"))
        set_(self, "output", _money(output, "output"))
        set_(
            self,
            "cache_read",
            self.input if cache_read is None else _money(cache_read, "cache_read"),
        )
        set_(
            self,
            "cache_write",
            self.input if cache_write is None else _money(cache_write, "cache_write"),
        )

    def of(self, usage: Usage) -> Decimal:
        """The price of ``usage``, in the table's currency.

        Args:
            usage: The tokens to price.
        """
        uncached = max(usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens, 0)
        total = (
            uncached * self.input
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
            + usage.output_tokens * self.output
        )
        return total / _MILLION


@dataclass(frozen=True, kw_only=True, slots=True)
class Cost:
    """A run's cost (its sub-runs included), by model.

    ``unpriced`` names the models the table has no price for (their usage is not counted);
    ``unknown_requests`` counts model calls whose usage was never reported (a failed or cut
    stream). Either makes ``total`` a lower bound, so both are reported, never hidden.

    Args:
        total: The sum of ``by_model``.
        by_model: The cost of each priced ``"provider:model"``.
        unpriced: The models without a price.
        unknown_requests: Model calls whose usage was never reported.
    """

    total: Decimal
    by_model: Mapping[str, Decimal] = field(default_factory=dict)
    unpriced: tuple[str, ...] = ()
    unknown_requests: int = 0

    @property
    def complete(self) -> bool:
        """Every model call was priced from reported usage."""
        return not self.unpriced and not self.unknown_requests


class PriceTable:
    """Prices per model, keyed ``"provider:model"`` or just ``"model"`` (the exact key wins).

    ``PriceTable({"openai:gpt-4o-mini": ModelPrice(input="0.15", output="0.60")})``;
    ``table.cost(result)`` prices a run, ``table.cost(action_result.subrun)`` a sub-run.

    Args:
        prices: The price of each model, by ``"provider:model"`` or ``"model"``.
    """

    __slots__ = ("_prices",)

    def __init__(self, prices: Mapping[str, ModelPrice]) -> None:
        for key, price in prices.items():
            if not isinstance(as_given(price), ModelPrice):
                raise UserError(f"price of {key!r} must be a ModelPrice, not {price!r}")
        self._prices = dict(prices)

    def price_of(self, model: str) -> ModelPrice | None:
        """The price for a ``"provider:model"`` key, falling back to the bare model name.

        Args:
            model: The ``"provider:model"`` key of ``RunResult.usage_by_model``.
        """
        found = self._prices.get(model)
        if found is None and ":" in model:
            found = self._prices.get(model.split(":", 1)[1])
        return found

    def cost(self, result: RunResult) -> Cost:
        """The cost of a run and its sub-runs.

        Args:
            result: The run's result (or an action's ``subrun``).
        """
        return self.cost_of(result.usage_by_model)

    def cost_of(self, usage_by_model: Mapping[str, Usage]) -> Cost:
        """The cost of usage split by model.

        Args:
            usage_by_model: Usage by ``"provider:model"``, as ``RunResult.usage_by_model``.
        """
        by_model: dict[str, Decimal] = {}
        unpriced: list[str] = []
        unknown = 0
        for model, usage in usage_by_model.items():
            unknown += usage.unknown
            price = self.price_of(model)
            if price is None:
                unpriced.append(model)
            else:
                by_model[model] = price.of(usage)
        return Cost(
            total=sum(by_model.values(), Decimal(0)),
            by_model=by_model,
            unpriced=tuple(sorted(unpriced)),
            unknown_requests=unknown,
        )
