"""What a durable run carries into the run it continues as (Temporal's continue-as-new), so
that one run can stream and wait for hours within Temporal's history limits.

A run is cut only at a safe point: between two steps (no activity in flight, the next model
call not yet started), or while it waits on decisions. The next run in the chain starts with
the first run's start fields (its fingerprint first: a changed worker still ends it with
``AgentMismatch``) and a ``carry``: where the engine goes on from (the steps so far, the
state, the counters their steps do not hold and the deadline's time spent; or the
``RunWaiting`` it waits in), the event stream's numbering (``base``) with a tail of its last
events, bounded in bytes, for callers a little behind, the model calls' numbering (a late ``deltas`` signal matches no call of the new
run), and the streaming caller's lease. The whole start is measured against Temporal's payload
limit: past it, the carry's large strings go by digest (``_payloads``), which the next run
reads back from the run before (the ``agentloop.carried`` activity); then, if need be, the
start's own fields too (``start``: its input, input parts, state and variables, which the
next run's start holds empty). A carry that still cannot fit is not made, and the run goes
on uncut; ``TemporalAgent.start`` refuses a start that could never go by reference
(``refer_start``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import _payloads

TAIL_BYTES = 256 * 1024  # of the last events a new run holds for callers a little behind
TAIL_EVENTS = 1000
# The start's fields that may go by reference, and the most they may take so (a quarter of
# the payload limit: the rest is the carry's and the tail's).
START_FIELDS = ("input", "input_parts", "state", "variables")
MAX_START_BY_REFERENCE = 512 * 1024


@dataclass(frozen=True, slots=True)
class Carry:
    """A ``carry`` as the next run reads it (``decode``)."""

    previous: str  # the Temporal run id of the run continued from (callers read earlier there)
    base: int  # the seq of the event before the tail's first
    tail: list[str]  # the last events, as the log keeps them
    calls: int  # model calls numbered so far
    caller: tuple[bool, int, float]  # polled, acked, acked_at
    at: Literal["step", "wait"]
    replayed: int  # events the engine makes again when it goes on (between steps)
    steps: list[dict[str, Any]]  # between steps: the steps so far
    state: dict[str, Any]
    counts: dict[str, Any]
    waiting: str | None  # in a wait: its RunWaiting, whole (no references)
    waited_since: float  # in a wait: when it began (workflow time), for decision_timeout
    elapsed: float  # between steps: seconds of the agent's deadline already spent
    continued: int  # runs in the chain before this one
    # The start's own fields (``START_FIELDS``), by reference, when the start would not fit
    # whole (``refer_start``): the next run's start holds them empty (``emptied``).
    start: dict[str, Any] | None = None


def tail_of(log: Sequence[str], sizes: Sequence[int]) -> list[str]:
    """The last events of ``log``, within ``TAIL_BYTES`` and ``TAIL_EVENTS``, and none that
    holds a reference (its string lives in this run's memory, not the next one's)."""
    taken: list[str] = []
    budget = TAIL_BYTES
    for data, size in zip(reversed(log), reversed(sizes), strict=True):
        if size > budget or len(taken) >= TAIL_EVENTS or _payloads.BLOB_REF in data:
            break
        budget -= size
        taken.append(data)
    taken.reverse()
    return taken


def refer_start(blobs: _payloads.Blobs, start: dict[str, Any]) -> dict[str, Any] | None:
    """The start's ``START_FIELDS``, their long strings by reference (every string of
    ``REFER_SMALL_CHARS`` if need be), if so they take ``MAX_START_BY_REFERENCE`` at most;
    else ``None``: a start made of so many small values could never continue as new."""
    fields = {k: start[k] for k in START_FIELDS if k in start}
    for min_chars in (_payloads.REFER_CHARS, _payloads.REFER_SMALL_CHARS):
        referred: dict[str, Any] = blobs.refer(fields, min_chars)
        if _payloads.size_of(referred) <= MAX_START_BY_REFERENCE:
            return referred
    return None


def emptied(start: dict[str, Any]) -> dict[str, Any]:
    """``start`` with its ``START_FIELDS`` empty (a carry's ``start`` holds them)."""
    kept = {k: v for k, v in start.items() if k != "input_parts"}
    return {**kept, "input": "", "state": {}, "variables": {}}


def encode(carry: Carry) -> dict[str, Any]:
    """``carry`` as the next run's start holds it (JSON: ``caller`` becomes a list; no
    ``start`` unless it holds one, so a carry without is the same as before)."""
    encoded = {f.name: getattr(carry, f.name) for f in dataclasses.fields(carry)}
    if carry.start is None:
        del encoded["start"]
    return encoded


def decode(data: Any) -> Carry:
    """A ``carry`` (``ValueError``, ``KeyError`` or ``TypeError`` for one agentloop never
    makes: the run then fails as a bad start, at once)."""
    polled, acked, acked_at = data["caller"]
    at = data["at"]
    if at not in ("step", "wait"):
        raise ValueError("carry['at'] must be 'step' or 'wait'")
    carry = Carry(
        previous=_typed(data["previous"], str),
        base=_typed(data["base"], int),
        tail=[_typed(e, str) for e in _typed(data["tail"], list)],
        calls=_typed(data["calls"], int),
        caller=(_typed(polled, bool), _typed(acked, int), float(acked_at)),
        at=at,
        replayed=_typed(data["replayed"], int),
        steps=[_typed(s, dict) for s in _typed(data["steps"], list)],
        state=_typed(data["state"], dict),
        counts=_typed(data["counts"], dict),
        waiting=None if data["waiting"] is None else _typed(data["waiting"], str),
        waited_since=float(data["waited_since"]),
        elapsed=float(data["elapsed"]),
        continued=_typed(data["continued"], int),
        start=None if data.get("start") is None else _typed(data["start"], dict),
    )
    if min(carry.base, carry.calls, carry.replayed, carry.continued) < 0:
        raise ValueError("a carry's counts are >= 0")
    if carry.at == "wait" and carry.waiting is None:
        raise ValueError("a carry in a wait holds its RunWaiting")
    return carry


def _typed(value: Any, kind: type[Any]) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"a carry's field must be a {kind.__name__}, not {type(value).__name__}")
    return value
