"""Checks of settings objects' fields when they are made (``UsageLimits``, ``ContextWindow``,
``RetryPolicy``, ``ToolLimits``, ``Memory``, ``ModelSettings``, ``ModelPrice``).

A wrong value is a ``UserError`` naming ``Owner.field`` and the value, at construction, not a
raw ``TypeError`` or ``decimal.InvalidOperation`` in the middle of a run. Numbers are taken as
Python numbers only (no numeric strings, no ``bool`` for a count) and must be finite: a NaN
compares false with every bound and would switch a limit off without a word.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

from ._errors import UserError


def _fail(owner: str, field: str, wanted: str, value: object) -> UserError:
    return UserError(f"{owner}.{field} must be {wanted}, not {value!r}")


def count(owner: str, field: str, value: object, *, minimum: int = 0) -> None:
    """A whole number of at least ``minimum`` (``None`` is checked by the caller)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        wanted = "a whole number" + (f" of {minimum} or more" if minimum else ", 0 or more")
        raise _fail(owner, field, wanted, value)


def optional_count(owner: str, field: str, value: object, *, minimum: int = 0) -> None:
    if value is not None:
        count(owner, field, value, minimum=minimum)


def number(
    owner: str,
    field: str,
    value: object,
    *,
    positive: bool = False,
    maximum: float | None = None,
    below: float | None = None,
) -> float:
    """A finite int or float, 0 or more (above 0 when ``positive``) within the bounds given;
    returned as a float."""
    amount = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        amount = float(value)
    ok = math.isfinite(amount) and amount >= 0 and not (positive and amount == 0)
    ok = ok and (maximum is None or amount <= maximum) and (below is None or amount < below)
    if not ok:
        wanted = "a finite number" + (" above 0" if positive else ", 0 or more")
        if maximum is not None:
            wanted += f" up to {maximum:g}"
        if below is not None:
            wanted += f" below {below:g}"
        raise _fail(owner, field, wanted, value)
    return amount


def optional_finite(owner: str, field: str, value: object) -> None:
    """``None`` or a finite int or float of any sign (its range is the provider's to check)."""
    if value is not None and not (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ):
        raise _fail(owner, field, "a finite number", value)


def optional_number(owner: str, field: str, value: object, *, positive: bool = False) -> None:
    if value is not None:
        number(owner, field, value, positive=positive)


def money(owner: str, field: str, value: object) -> Decimal:
    """A finite amount of 0 or more: a ``Decimal``, an int or float, or a numeric string."""
    amount: Decimal | None = None
    if isinstance(value, Decimal):
        amount = value
    elif isinstance(value, int | float | str) and not isinstance(value, bool):
        # str(float) first: Decimal(0.1) would carry the float's binary error into every sum.
        try:
            amount = Decimal(str(value).strip())
        except (InvalidOperation, ValueError):
            amount = None
    if amount is None or not amount.is_finite() or amount < 0:
        raise _fail(owner, field, "a finite amount, 0 or more", value)
    return amount


def flag(owner: str, field: str, value: object, *, optional: bool = False) -> None:
    if not (type(value) is bool or (optional and value is None)):
        raise _fail(owner, field, "True or False" + (" (or None)" if optional else ""), value)


def optional_text(owner: str, field: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise _fail(owner, field, "a string (or None)", value)
