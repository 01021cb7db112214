"""What crosses between a durable run's workflow and its activities, as JSON values.

Temporal's default converter carries plain JSON; the engine's values are dataclasses. Each is
encoded here by pydantic from its own type, so nothing is pickled and a worker of another
version reads (or refuses) exactly what the JSON says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from pydantic import TypeAdapter

import agentloop._errors as _errors
import agentloop.models._types as mt

from .._decisions import Approve, Decision, Deny, Edit, ExternalResult
from .._errors import ModelConnectionError, ModelError, ModelStreamError
from .._session_run import parts_from_json
from .._steps import Action, ActionResult
from .._waiting import DecisionError


@dataclass(frozen=True, slots=True)
class _WireRequest:
    """A ``ModelRequest`` without its run (the activity's model needs none of it)."""

    messages: tuple[mt.Message, ...]
    tools: tuple[mt.ToolSpec, ...]
    tool_mode: mt.ToolMode
    stop: tuple[str, ...]
    output_schema: mt.OutputSchema | None
    settings: mt.ModelSettings
    max_reply_chars: int | None


_DELTA_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        mt.TextPiece,
        mt.ThoughtPiece,
        mt.ThoughtDone,
        mt.ToolCallStart,
        mt.ToolCallArgsDelta,
        mt.ToolCallEnd,
        mt.ProviderBlock,
        mt.CitationDelta,
        mt.UsageDelta,
        mt.FinishDelta,
    )
}


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(cls: Any) -> TypeAdapter[Any]:
    """The type's adapter, built once (a fixed handful of types)."""
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def encode_request(request: mt.ModelRequest) -> dict[str, Any]:
    wire = _WireRequest(
        messages=request.messages,
        tools=request.tools,
        tool_mode=request.tool_mode,
        stop=request.stop,
        output_schema=request.output_schema,
        settings=request.settings,
        max_reply_chars=request.max_reply_chars,
    )
    encoded: dict[str, Any] = _adapter(_WireRequest).dump_python(wire, mode="json")
    return encoded


def decode_request(data: dict[str, Any]) -> mt.ModelRequest:
    wire: _WireRequest = _adapter(_WireRequest).validate_python(data)
    return mt.ModelRequest(
        messages=wire.messages,
        tools=wire.tools,
        tool_mode=wire.tool_mode,
        stop=wire.stop,
        output_schema=wire.output_schema,
        settings=wire.settings,
        max_reply_chars=wire.max_reply_chars,
    )


def encode_delta(delta: mt.ModelDelta) -> list[Any]:
    """``[type name, fields]``: some deltas have the same fields (``TextPiece``,
    ``ThoughtPiece``), so the type is named."""
    cls = type(delta)
    return [cls.__name__, _adapter(cls).dump_python(delta, mode="json")]


def decode_delta(data: list[Any]) -> mt.ModelDelta:
    name, fields = data
    cls = _DELTA_TYPES.get(name)
    if cls is None:
        raise ValueError(f"unknown model delta {name!r} (a worker of another agentloop version?)")
    delta: mt.ModelDelta = _adapter(cls).validate_python(fields)
    return delta


def decode_batch(batch: Any) -> tuple[int, int, list[mt.ModelDelta]]:
    """A ``deltas`` signal's call number, batch index and deltas; ``ValueError`` (or
    ``KeyError``/``TypeError``) for a batch no model activity sends."""
    number, index, deltas = batch["call"], batch["index"], batch["deltas"]
    if not (_is_count(number) and _is_count(index) and isinstance(deltas, list)):
        raise ValueError("a batch is {call: int, index: int, deltas: list}")
    return number, index, [decode_delta(d) for d in deltas]


def check_start_shape(start: Any) -> None:
    """``ValueError`` (or ``KeyError``/``TypeError``) unless ``start`` is a workflow start as
    ``TemporalAgent.start`` makes it: checked before the workflow acts on any of it."""
    for key in ("agent", "fingerprint", "run_id", "input"):
        if not isinstance(start[key], str):
            raise ValueError(f"start[{key!r}] must be a string")
    for key in ("state", "variables"):
        if not isinstance(start[key], dict):
            raise ValueError(f"start[{key!r}] must be an object")
    session = start["session"]
    if session is not None:
        wait = session["wait"]
        if not isinstance(session["id"], str) or not (
            wait is None or (isinstance(wait, int | float) and not isinstance(wait, bool))
        ):
            raise ValueError("start['session'] must be {id: str, wait: number | null}")
    parts = start.get("input_parts")
    if parts is not None:
        parts_from_json(parts)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def encode_action(action: Action) -> dict[str, Any]:
    encoded: dict[str, Any] = _adapter(Action).dump_python(action, mode="json")
    return encoded


def decode_action(data: dict[str, Any]) -> Action:
    action: Action = _adapter(Action).validate_python(data)
    return action


def encode_result(result: ActionResult) -> dict[str, Any]:
    encoded: dict[str, Any] = _adapter(ActionResult).dump_python(result, mode="json")
    return encoded


def decode_result(data: dict[str, Any]) -> ActionResult:
    result: ActionResult = _adapter(ActionResult).validate_python(data)
    return result


def model_error_details(error: ModelError) -> dict[str, Any]:
    """What the workflow needs to raise the same error for the engine's retry layer."""
    return {
        "class": type(error).__name__,
        "message": error.message,
        "provider": error.provider,
        "model": error.model,
        "status": error.status,
        "retry_after": error.retry_after,
        "retryable": error.retryable,
    }


def model_error_of(details: dict[str, Any]) -> ModelError:
    """The ``ModelError`` a model activity failed with, as its class (falling back to a stream
    error that keeps its ``retryable``)."""
    cls = getattr(_errors, str(details.get("class")), None)
    kwargs = {
        "provider": details.get("provider"),
        "model": details.get("model"),
        "status": details.get("status"),
        "retry_after": details.get("retry_after"),
    }
    message = str(details.get("message", "the model call failed"))
    if isinstance(cls, type) and issubclass(cls, ModelError) and cls is not ModelStreamError:
        error = cls(message, **kwargs)
        if error.retryable == bool(details.get("retryable")):
            return error
    return ModelStreamError(message, retryable=bool(details.get("retryable")), **kwargs)


def worker_lost(reason: str) -> ModelError:
    """A model activity that ended without a reply of its own (its worker died, it timed out):
    a connection error, so the engine's retry layer tries again on another worker."""
    return ModelConnectionError(f"the model activity failed: {reason}")


def encode_decisions(decisions: Mapping[str, Decision]) -> dict[str, Any]:
    """Decisions by pending call id, as JSON (each one's ``kind`` names its class)."""
    return {key: _adapter(Decision).dump_python(d, mode="json") for key, d in decisions.items()}


def decode_decisions(data: Mapping[str, Any]) -> dict[str, Decision]:
    """The decisions ``encode_decisions`` wrote; a value of no decision's form is a
    ``DecisionError`` naming its call."""
    from pydantic import ValidationError

    decoded: dict[str, Decision] = {}
    for key, value in data.items():
        kind = value.get("kind") if isinstance(value, Mapping) else None
        cls = _DECISION_TYPES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise DecisionError(f"the decision for {key!r} is not a decision: {value!r}")
        fields = {k: v for k, v in value.items() if k != "kind"}
        try:
            decoded[key] = _adapter(cls).validate_python(fields)
        except ValidationError as exc:
            raise DecisionError(f"the decision for {key!r} is not valid: {exc}") from None
    return decoded


_DECISION_TYPES: dict[str, type[Any]] = {
    "approve": Approve,
    "deny": Deny,
    "edit": Edit,
    "result": ExternalResult,
}


# An input image or file of at least this many base64 characters goes to a model activity by
# reference: the activity reads it from the run's start payload (its history's first event), so
# each step's activity input and history event stay small however large the input.
REFER_CHARS = 8 * 1024
INPUT_REF = "agentloop.input_part"


def input_refs(parts: list[dict[str, Any]] | None) -> dict[str, int]:
    """The large input parts' base64 data, to their index in the start payload's parts."""
    refs: dict[str, int] = {}
    for index, part in enumerate(parts or ()):
        data = part.get("data")
        if isinstance(data, str) and len(data) >= REFER_CHARS:
            refs.setdefault(data, index)
    return refs


def refer_inputs(value: object, parts: list[dict[str, Any]], refs: Mapping[str, int]) -> Any:
    """``value`` (an encoded request) with each large input part replaced by a reference."""
    if isinstance(value, dict):
        fields = cast("dict[str, Any]", value)
        data = fields.get("data")
        if isinstance(data, str) and data in refs and fields == parts[refs[data]]:
            return {INPUT_REF: refs[data]}
        return {k: refer_inputs(v, parts, refs) for k, v in fields.items()}
    if isinstance(value, list):
        return [refer_inputs(v, parts, refs) for v in cast("list[object]", value)]
    return value


def resolve_inputs(value: object, parts: list[dict[str, Any]]) -> Any:
    """``refer_inputs`` undone, with the start payload's parts."""
    if isinstance(value, dict):
        fields = cast("dict[str, Any]", value)
        if INPUT_REF in fields:
            return parts[int(fields[INPUT_REF])]
        return {k: resolve_inputs(v, parts) for k, v in fields.items()}
    if isinstance(value, list):
        return [resolve_inputs(v, parts) for v in cast("list[object]", value)]
    return value
