"""Checking and encoding what goes into a store, shared by every back end.

Everything is checked and encoded before a back end sees it, so a bad value is a ``UserError``
naming its key with nothing written, and every back end stores exactly the same text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, JsonValue, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from agentloop._errors import UserError

from ._records import RECORD_TYPES, TEMP_PREFIX, Record, record_body

_JSON: TypeAdapter[JsonValue] = TypeAdapter(JsonValue, config=ConfigDict(allow_inf_nan=False))


@dataclass(frozen=True, slots=True)
class EncodedRecord:
    """A record as stored: its kind and run id (indexed columns) and its JSON body."""

    type: str
    run_id: str | None
    at: float
    body: str


@dataclass(frozen=True, slots=True)
class StateDelta:
    """Changed keys only: ``set`` maps keys to JSON text; ``delete`` lists removed keys."""

    set: dict[str, str]
    delete: list[str]


def check_text(value: object, what: str, *, allow_empty: bool = True) -> str:
    """A string a database can store exactly: no NUL, valid UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise UserError(f"{what} must be a str, not {type(value).__name__}")
    if not value and not allow_empty:
        raise UserError(f"{what} must not be empty")
    if "\x00" in value:
        raise UserError(f"{what} {value!r} contains a NUL character, which databases cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{what} {value!r} is not valid Unicode (lone surrogate)") from None
    return value


MAX_ID_LENGTH = 512
"""The longest session id (and lease owner) every store accepts, in characters. At 4 UTF-8
bytes a character that is 2 KB, under PostgreSQL's limit for an index entry (about 2.7 KB)."""


def check_id(value: object, what: str = "session id") -> str:
    """A non-empty id of at most ``MAX_ID_LENGTH`` characters that a database can store."""
    text = check_text(value, what, allow_empty=False)
    if len(text) > MAX_ID_LENGTH:
        raise UserError(
            f"{what} {text[:40]!r}... is {len(text)} characters long; the limit is"
            f" {MAX_ID_LENGTH} characters in every store"
        )
    return text


def encode_value(key: str, value: object) -> str:
    """``value`` as JSON text, or a ``UserError`` naming ``key`` when it is not JSON."""
    try:
        checked = _JSON.validate_python(value)
        return _JSON.dump_json(checked).decode()
    except (ValidationError, PydanticSerializationError, UnicodeDecodeError) as exc:
        raise UserError(
            f"state key {key!r}: value {value!r} is not JSON "
            "(None, bool, int, finite float, str, list, dict with str keys)"
        ) from exc


def decode_value(text: str) -> JsonValue:
    value: JsonValue = json.loads(text)
    return value


def encode_state(state: Mapping[str, object] | None) -> dict[str, str]:
    """A full state for ``create``: ``temp:`` keys dropped, the rest checked and encoded."""
    return encode_delta(state, ()).set


def encode_delta(set_state: Mapping[str, object] | None, delete_state: Iterable[str]) -> StateDelta:
    """A commit's state delta; ``temp:`` keys are dropped, never written."""
    if not set_state and not delete_state and not isinstance(delete_state, str):  # most commits
        return StateDelta(set={}, delete=[])
    encoded: dict[str, str] = {}
    for key, value in (set_state or {}).items():
        check_text(key, "state key")
        if not key.startswith(TEMP_PREFIX):
            encoded[key] = encode_value(key, value)
    if isinstance(delete_state, str):
        raise UserError("delete_state must be an iterable of keys, not one str")
    deleted: list[str] = []
    for key in delete_state:
        check_text(key, "state key")
        if key.startswith(TEMP_PREFIX) or key in deleted:
            continue
        if key in encoded:
            raise UserError(f"state key {key!r} is both set and deleted in one commit")
        deleted.append(key)
    return StateDelta(set=encoded, delete=deleted)


def encode_records(records: Sequence[Record]) -> list[EncodedRecord]:
    out: list[EncodedRecord] = []
    for record in records:
        if not isinstance(record, RECORD_TYPES):
            raise UserError(f"not a history record: {record!r}")
        run_id: Any = getattr(record, "run_id", None)
        if run_id is not None:
            check_text(run_id, "run_id")
        try:
            body = record_body(record)
        except PydanticSerializationError as exc:
            raise UserError(f"{type(record).__name__} cannot be stored as JSON: {exc}") from exc
        out.append(EncodedRecord(type=record.type, run_id=run_id, at=record.at, body=body))
    return out


def decode_state(rows: Iterable[tuple[str, str]]) -> dict[str, JsonValue]:
    return {key: decode_value(text) for key, text in rows}


def check_int(value: object, what: str, *, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise UserError(f"{what} must be an int, not {value!r}")
    if minimum is not None and value < minimum:
        raise UserError(f"{what} must be >= {minimum}, not {value!r}")
    return value


def check_history_limit(history_limit: object) -> None:
    if history_limit is not None:
        check_int(history_limit, "history_limit", minimum=0)
