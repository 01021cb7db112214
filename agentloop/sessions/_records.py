"""History records: what a session remembers of its runs, as JSON that crosses the store boundary.

Records are pydantic models because they are persisted and read back by other processes. Every JSON
field is typed ``JsonValue`` with non-finite floats refused, so a record that can be built can be
stored and read back unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, field_validator

from .._time import unix_time

TEMP_PREFIX = "temp:"
"""State keys starting with this live for one run and are never persisted."""


class _RecordBase(BaseModel):
    """The fields of every record.

    Attributes:
        seq: Its position in the session's history (set by the store on commit).
        at: When it was made, in unix seconds.
        type: The record's kind (its JSON discriminator), fixed per class.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    seq: int = 0
    """Position in the session's history, numbered from 1 by the store on commit; 0 until then."""
    at: float = Field(default_factory=unix_time)
    """Wall-clock time the record was made (unix seconds)."""


class RunRecord(_RecordBase):
    """A run began. Committed before the run's first model call.

    Attributes:
        run_id: The run's id.
        agent: The agent's name.
        branch: The run's branch.
        input: The run's input (its text).
        input_parts: All the input's parts, as JSON, when it holds images or files.
        parent_run_id: The parent run's id, for a sub-agent's run.
        run_key: The caller's idempotency key for the run, if any.
    """

    type: Literal["run"] = "run"
    run_id: str
    agent: str
    branch: str
    input: str
    input_parts: list[dict[str, JsonValue]] | None = None
    """The input's text, image and file parts in order (bytes as base64) when it holds images or
    files, so a resumed run sends them again; ``None`` for text (and in records of older
    versions)."""
    parent_run_id: str | None = None
    run_key: str | None = None
    """The caller's idempotency key for the run (``Agent.run(run_key=...)``), if any."""


class StepRecord(_RecordBase):
    """A completed step of a run; ``step`` is the runtime's own JSON form of it.

    Attributes:
        run_id: The run's id.
        index: The step's number in its run.
        step: The step, as JSON.
    """

    type: Literal["step"] = "step"
    run_id: str
    index: int
    step: dict[str, JsonValue]


class ReplyRecord(_RecordBase):
    """A step's accepted reply, committed before its actions with side effects start: a resumed
    run re-runs those actions from it (same tags, same idempotency keys) instead of asking the
    model again. ``step`` is the runtime's JSON form of the step, without results.

    Attributes:
        run_id: The run's id.
        index: The step's number in its run.
        step: The step without results, as JSON.
    """

    type: Literal["reply"] = "reply"
    run_id: str
    index: int
    step: dict[str, JsonValue]


class RunEndRecord(_RecordBase):
    """A run ended: its status, output (JSON), error message and token usage.

    Attributes:
        run_id: The run's id.
        status: ``finished``, ``failed``, ``cancelled``, or ``abandoned``: a run that waited on
            decisions when a new run began in its session (its pending calls never run).
        output: The run's output, as JSON.
        error: The error message, if any.
        error_kind: ``RunResult.error.kind`` of a finished run, or the exception's type name.
        usage: Its token usage, by ``Usage`` field.
    """

    type: Literal["run_end"] = "run_end"
    run_id: str
    status: Literal["finished", "failed", "cancelled", "abandoned"]
    output: JsonValue = None
    error: str | None = None
    error_kind: str | None = None
    """``RunResult.error.kind`` of a finished run, or the exception's type name."""
    usage: dict[str, int] = Field(default_factory=dict)


class StateChangeRecord(_RecordBase):
    """State changed outside a step's own commit, e.g. a goal set by the host before a run.

    ``temp:`` keys are dropped on construction: they must never reach a store.

    Attributes:
        changes: State keys set, with their values.
        deleted: State keys deleted.
        source: ``host`` (outside any run) or ``run``.
        run_id: The run it belongs to, if any.
        note: What the change was, for people reading the history.
    """

    type: Literal["state_change"] = "state_change"
    changes: dict[str, JsonValue] = Field(default_factory=dict)
    deleted: list[str] = Field(default_factory=list)
    source: Literal["host", "run"] = "host"
    run_id: str | None = None
    note: str | None = None

    @field_validator("changes")
    @classmethod
    def _drop_temp_changes(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        return {k: v for k, v in value.items() if not k.startswith(TEMP_PREFIX)}

    @field_validator("deleted")
    @classmethod
    def _drop_temp_deleted(cls, value: list[str]) -> list[str]:
        return [k for k in value if not k.startswith(TEMP_PREFIX)]


Record = Annotated[
    RunRecord | StepRecord | ReplyRecord | RunEndRecord | StateChangeRecord,
    Field(discriminator="type"),
]
"""Any history record; ``type`` tells which."""

RECORD_TYPES: tuple[type[_RecordBase], ...] = (
    RunRecord,
    StepRecord,
    ReplyRecord,
    RunEndRecord,
    StateChangeRecord,
)

_RECORD: TypeAdapter[Record] = TypeAdapter(Record)
_RECORD_LIST: TypeAdapter[list[Record]] = TypeAdapter(list[Record])


def record_to_json(record: Record) -> str:
    """The record as a JSON object (``type`` tells its kind).

    Args:
        record: The record.
    """
    return record.model_dump_json()


def record_from_json(data: str | bytes) -> Record:
    """A record read back from ``record_to_json`` output.

    Args:
        data: The JSON text.
    """
    return _RECORD.validate_json(data)


def records_from_bodies(rows: list[tuple[int, str]]) -> tuple[Record, ...]:
    """Decode stored ``(seq, body)`` rows, where a body is the record's JSON without its ``seq``.

    The rows are spliced into one JSON array and validated in one call: loading a long history is
    one pass over the text, not one validator call per record.
    """
    if not rows:
        return ()
    text = "[" + ",".join(f'{{"seq":{seq},{body[1:]}' for seq, body in rows) + "]"
    return tuple(_RECORD_LIST.validate_json(text))


def record_body(record: Any) -> str:
    """The JSON a store keeps for ``record``: everything but ``seq``, which the store owns."""
    body: str = record.model_dump_json(exclude={"seq"})
    return body


_set = object.__setattr__


def step_record(
    cls: type[StepRecord] | type[ReplyRecord], run_id: str, index: int, step: dict[str, Any]
) -> Any:
    """A step or reply record of a step's JSON as the runtime dumped it with pydantic, built
    without checking that JSON again value by value (a third of a served run's session work).
    A store encodes it as any other record.

    Args:
        cls: ``StepRecord`` or ``ReplyRecord``.
        run_id: The run's id.
        index: The step's number in its run.
        step: The step's JSON (``step_to_json``).
    """
    record: Any = object.__new__(cls)
    kind = "step" if cls is StepRecord else "reply"
    data: dict[str, Any] = {"seq": 0, "at": unix_time(), "type": kind, "run_id": run_id}
    data["index"], data["step"] = index, step
    _set(record, "__dict__", data)
    _set(record, "__pydantic_fields_set__", {"run_id", "index", "step"})
    _set(record, "__pydantic_extra__", None)
    _set(record, "__pydantic_private__", None)
    return record
