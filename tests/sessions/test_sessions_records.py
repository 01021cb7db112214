"""History records: JSON round trip, the discriminator, and refusal of what is not JSON."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from agentloop.sessions import (
    Record,
    RunEndRecord,
    RunRecord,
    StateChangeRecord,
    StepRecord,
    record_from_json,
    record_to_json,
)

RECORDS: list[Record] = [
    RunRecord(run_id="r", agent="a", branch="a", input="hi", seq=3, at=1.5),
    StepRecord(run_id="r", index=2, step={"thought": "t", "actions": [{"n": 1}]}),
    RunEndRecord(run_id="r", status="cancelled", output=None, usage={"input_tokens": 3}),
    StateChangeRecord(changes={"goal": {"id": "g"}}, deleted=["x"], source="run", run_id="r"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.type)
def test_json_round_trip(record: Record) -> None:
    """record_from_json(record_to_json(r)) == r for every record type, type included."""
    text = record_to_json(record)
    assert f'"type":"{record.type}"' in text
    assert record_from_json(text) == record
    assert record_from_json(text.encode()) == record


def test_state_change_drops_temp_keys() -> None:
    """A state-change record cannot carry temp: keys."""
    record = StateChangeRecord(changes={"temp:a": 1, "b": 2}, deleted=["temp:c", "d"])
    assert (record.changes, record.deleted) == ({"b": 2}, ["d"])


@pytest.mark.parametrize("bad", [math.nan, math.inf, (1, 2), {1, 2}, b"x"])
def test_non_json_fields_are_refused(bad: Any) -> None:
    """Record JSON fields refuse what would not survive a round trip (NaN, tuples, sets...)."""
    with pytest.raises(ValidationError):
        StepRecord(run_id="r", index=0, step={"x": bad})
    with pytest.raises(ValidationError):
        RunEndRecord(run_id="r", status="finished", output=[bad])


def test_unknown_type_is_refused() -> None:
    """A record with an unknown type does not decode."""
    with pytest.raises(ValidationError):
        record_from_json('{"type": "mystery", "seq": 1, "at": 0}')


def test_records_are_immutable() -> None:
    """Records are frozen: history read from a store cannot be edited in place."""
    record = RunRecord(run_id="r", agent="a", branch="a", input="hi")
    with pytest.raises(ValidationError):
        record.input = "changed"
