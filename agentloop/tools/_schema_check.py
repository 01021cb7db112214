"""A small, bounded JSON-schema check for tools declared from a schema (``Tool.from_schema``).

``jsonschema`` is not a dependency (only the ``mcp`` extra brings it) and pydantic cannot
validate an arbitrary JSON schema, so the arguments of a schema tool are checked here against
the keywords that catch what models get wrong: ``type``, ``enum``, ``const``, ``required``,
``properties``, ``additionalProperties``, ``items``/``prefixItems``, ``minItems``/``maxItems``,
``uniqueItems``, ``minLength``/``maxLength``, ``pattern``, ``minimum``/``maximum`` (and their
exclusive forms), ``multipleOf``, ``minProperties``/``maxProperties``, ``anyOf``/``oneOf``/
``allOf``/``not``, and local ``$ref``. Other keywords (``format``, ``if``/``then``/``else``,
``patternProperties``, ``dependentRequired``, ...) are not checked: the tool function receives
the decoded object and checks what it needs.

Bounded: a check visits at most ``MAX_VISITS`` schema nodes and reports at most
``MAX_PROBLEMS`` problems; arguments nested more than ``MAX_ARGUMENT_DEPTH`` levels never reach
it (the executor refuses them first), and ``$ref`` chains that do not descend into the value
are cut at ``MAX_REF_HOPS``.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, TypeGuard

from .._errors import UserError
from .._json import is_dict, is_list, is_mapping

if TYPE_CHECKING:
    from pydantic import BaseModel

MAX_PROBLEMS = 10
MAX_VISITS = 10_000
MAX_REF_HOPS = 8  # $refs followed in a row without descending into the value

Location: TypeAlias = tuple["str | int", ...]
Problem: TypeAlias = tuple[Location, str]

_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


class _TooLarge(Exception):
    """The check ran out of its visit budget."""


def tool_parameters(name: str, schema: Any) -> dict[str, Any]:
    """``schema`` checked and copied as the object schema sent to providers.

    Raises ``UserError`` naming the tool when ``schema`` is not JSON, not an object schema, or
    uses a keyword in a way this check cannot follow (a non-local ``$ref``, a bad ``pattern``).
    """
    if not is_mapping(schema):
        raise UserError(f"tool {name!r}: schema must be a JSON object schema, not {schema!r}")
    try:
        copied: dict[str, Any] = json.loads(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise UserError(f"tool {name!r}: schema is not JSON: {exc}") from None
    copied.pop("$schema", None)
    kind = copied.setdefault("type", "object")
    if kind != "object":
        raise UserError(f"tool {name!r}: schema must have type 'object' (arguments are an object)")
    copied.setdefault("properties", {})
    problem = _schema_problem(copied, copied, ())
    if problem is not None:
        raise UserError(f"tool {name!r}: schema {problem}")
    return copied


def _schema_problem(node: Any, root: Mapping[str, Any], at: tuple[str, ...]) -> str | None:
    """The first thing in ``node`` this checker cannot follow (iterative; JSON is finite)."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(node, at)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, bool):
            continue
        where = "/".join(at) or "(root)"
        if not is_mapping(node):
            return f"at {where}: a schema must be an object or a boolean"
        kind = node.get("type")
        kinds = kind if is_list(kind) else [kind] if kind is not None else []
        if any(k not in _TYPES for k in kinds):
            return f"at {where}: unknown type {kind!r}"
        props = node.get("properties", {})
        if not is_mapping(props):
            return f"at {where}: properties must be an object"
        required = node.get("required", [])
        if not is_list(required) or not all(isinstance(r, str) for r in required):
            return f"at {where}: required must be a list of property names"
        if "enum" in node and not is_list(node["enum"]):
            return f"at {where}: enum must be a list"
        ref = node.get("$ref")
        if ref is not None and _resolve_ref(root, ref) is None:
            return f"at {where}: $ref {ref!r} does not point into this schema"
        pattern = node.get("pattern")
        if pattern is not None:
            try:
                _compiled(pattern)
            except (re.error, TypeError) as exc:
                return f"at {where}: pattern {pattern!r} does not compile: {exc}"
        stack.extend((sub, (*at, "properties", key)) for key, sub in props.items())
        for key in ("items", "additionalProperties", "not"):
            sub = node.get(key)
            if isinstance(sub, Mapping | bool):
                stack.append((sub, (*at, key)))
        for key in ("prefixItems", "anyOf", "oneOf", "allOf", "items"):
            branches = node.get(key)
            if is_list(branches):
                stack.extend((b, (*at, key, str(i))) for i, b in enumerate(branches))
        for key in ("$defs", "definitions"):
            defs = node.get(key)
            if is_mapping(defs):
                stack.extend((d, (*at, key, str(k))) for k, d in defs.items())
    return None


def _resolve_ref(root: Mapping[str, Any], ref: Any) -> Any:
    """The schema a local ``$ref`` (``#`` or ``#/a/b``) points at, else ``None``."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node: Any = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if is_mapping(node) and part in node:
            node = node[part]
        elif is_list(node) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node if isinstance(node, Mapping | bool) else None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


class SchemaCheck:
    """``check(arguments)`` lists where the arguments break the schema (empty when they fit).

    Each problem is (location, message); at most ``MAX_PROBLEMS``.
    """

    __slots__ = ("_root",)

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._root = schema

    def __call__(self, value: Any) -> list[Problem]:
        run = _Run(self._root, [0], MAX_PROBLEMS)
        try:
            run.check(value, self._root, (), 0)
        except _TooLarge:
            run.problems.append(((), f"too large to check against the schema ({MAX_VISITS} steps)"))
        return run.problems[:MAX_PROBLEMS]


class _Run:
    """One check: the problems found so far, and the visit budget (shared with the sub-checks
    of ``anyOf``/``oneOf``/``not``, which stop at their first problem)."""

    __slots__ = ("limit", "problems", "root", "visits")

    def __init__(self, root: Mapping[str, Any], visits: list[int], limit: int) -> None:
        self.root = root
        self.visits = visits
        self.limit = limit
        self.problems: list[Problem] = []

    @property
    def full(self) -> bool:
        return len(self.problems) >= self.limit

    def add(self, at: Location, message: str) -> bool:
        """Record a problem; True when the check should stop looking."""
        self.problems.append((at, message))
        return self.full

    def matches(self, value: Any, schema: Any, hops: int) -> bool:
        sub = _Run(self.root, self.visits, 1)
        sub.check(value, schema, (), hops)
        return not sub.problems

    def check(self, value: Any, schema: Any, at: Location, hops: int) -> None:
        self.visits[0] += 1
        if self.visits[0] > MAX_VISITS:
            raise _TooLarge
        if schema is True or (is_mapping(schema) and not schema):
            return
        if schema is False or not is_mapping(schema):
            self.add(at, "no value is allowed here")
            return
        ref = schema.get("$ref")
        if ref is not None:
            if hops >= MAX_REF_HOPS:
                self.add(at, f"$ref chain longer than {MAX_REF_HOPS} steps")
                return
            target = _resolve_ref(self.root, ref)
            if target is not None:
                self.check(value, target, at, hops + 1)
                if self.full:
                    return
        kinds = _kinds(schema)
        if kinds and not any(_is_type(value, k) for k in kinds):
            self.add(at, f"expected {' or '.join(kinds)}, got {_type_name(value)}")
            return
        if "const" in schema and not _json_equal(value, schema["const"]):
            if self.add(at, f"must be {json.dumps(schema['const'])}"):
                return
        enum = schema.get("enum")
        if is_list(enum) and not any(_json_equal(value, e) for e in enum):
            allowed = ", ".join(json.dumps(e) for e in enum[:10])
            if self.add(at, f"must be one of {allowed}"):
                return
        if isinstance(value, str):
            self._string(value, schema, at)
        elif _is_number(value):
            self._number(value, schema, at)
        elif is_list(value):
            self._array(value, schema, at)
        elif is_dict(value):
            self._object(value, schema, at)
        if not self.full:
            self._combinators(value, schema, at, hops)

    def _string(self, value: str, schema: Mapping[str, Any], at: Location) -> None:
        low, high = schema.get("minLength"), schema.get("maxLength")
        if isinstance(low, int) and len(value) < low:
            if self.add(at, f"must be at least {low} characters"):
                return
        if isinstance(high, int) and len(value) > high:
            if self.add(at, f"must be at most {high} characters"):
                return
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and _compiled(pattern).search(value) is None:
            self.add(at, f"must match the pattern {pattern!r}")

    def _number(self, value: float, schema: Mapping[str, Any], at: Location) -> None:
        bounds = (
            ("minimum", operator.ge, "at least"),
            ("maximum", operator.le, "at most"),
            ("exclusiveMinimum", operator.gt, "more than"),
            ("exclusiveMaximum", operator.lt, "less than"),
        )
        for key, fits, words in bounds:
            bound = schema.get(key)
            if _is_number(bound) and not fits(value, bound):
                if self.add(at, f"must be {words} {bound}"):
                    return
        step = schema.get("multipleOf")
        if _is_number(step) and step > 0 and not _is_multiple(value, step):
            self.add(at, f"must be a multiple of {step}")

    def _array(self, value: list[Any], schema: Mapping[str, Any], at: Location) -> None:
        low, high = schema.get("minItems"), schema.get("maxItems")
        if isinstance(low, int) and len(value) < low:
            if self.add(at, f"must have at least {low} items"):
                return
        if isinstance(high, int) and len(value) > high:
            if self.add(at, f"must have at most {high} items"):
                return
        if schema.get("uniqueItems") is True:
            keys = [json.dumps(item, sort_keys=True, default=str) for item in value]
            if len(set(keys)) < len(keys) and self.add(at, "items must be unique"):
                return
        prefix, items = schema.get("prefixItems"), schema.get("items")
        if is_list(items):  # the draft-4 tuple form
            prefix, items = items, schema.get("additionalItems")
        prefix = prefix if is_list(prefix) else []
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else items
            if sub is not None:
                self.check(item, sub, (*at, i), 0)
                if self.full:
                    return

    def _object(self, value: dict[str, Any], schema: Mapping[str, Any], at: Location) -> None:
        for key in schema.get("required", ()):
            if key not in value and self.add((*at, key), "missing required property"):
                return
        low, high = schema.get("minProperties"), schema.get("maxProperties")
        if isinstance(low, int) and len(value) < low:
            if self.add(at, f"must have at least {low} properties"):
                return
        if isinstance(high, int) and len(value) > high:
            if self.add(at, f"must have at most {high} properties"):
                return
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        if "patternProperties" in schema:  # not checked here: refuse nothing it may allow
            extra = True
        for key, item in value.items():
            sub = props.get(key) if is_mapping(props) else None
            if sub is None and extra is False:
                if self.add((*at, key), "unexpected property"):
                    return
                continue
            if sub is None:
                sub = extra if is_mapping(extra) else True
            self.check(item, sub, (*at, key), 0)
            if self.full:
                return

    def _combinators(self, value: Any, schema: Mapping[str, Any], at: Location, hops: int) -> None:
        all_of = schema.get("allOf")
        for sub in all_of if is_list(all_of) else ():
            self.check(value, sub, at, hops)
            if self.full:
                return
        any_of = schema.get("anyOf")
        if is_list(any_of) and any_of:
            if not any(self.matches(value, b, hops) for b in any_of):
                if self.add(at, "matches none of the allowed forms (anyOf)"):
                    return
        one_of = schema.get("oneOf")
        if is_list(one_of) and one_of:
            fits = sum(1 for b in one_of if self.matches(value, b, hops))
            if fits != 1:
                how_many = "none" if fits == 0 else str(fits)
                message = f"must match exactly one allowed form (oneOf), matches {how_many}"
                if self.add(at, message):
                    return
        negated = schema.get("not")
        if negated is not None and self.matches(value, negated, hops):
            self.add(at, "matches a form that is not allowed (not)")


def _kinds(schema: Mapping[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if is_list(kind):
        return [k for k in kind if isinstance(k, str)]
    return []


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return _is_number(value) and (isinstance(value, int) or float(value).is_integer())
    if kind == "number":
        return _is_number(value) and not (isinstance(value, float) and math.isnan(value))
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "object":
        return is_dict(value)
    if kind == "array":
        return is_list(value)
    if kind == "null":
        return value is None
    return True  # an unknown type name was refused when the tool was made


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if is_list(value):
        return "array"
    if is_dict(value):
        return "object"
    return type(value).__name__


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``1 == 1.0`` but ``True != 1``, recursively."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if is_list(a) and is_list(b):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if is_dict(a) and is_dict(b):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def _is_multiple(value: float, step: float) -> bool:
    quotient = value / step
    return math.isfinite(quotient) and abs(quotient - round(quotient)) < 1e-9


def checked_args_model(
    name: str, check: Callable[[Any], Sequence[tuple[Sequence[str | int], str]]]
) -> type[BaseModel]:
    """The argument model of an ``Activity`` whose arguments are one JSON object checked by a
    function, not by a signature (a JSON-schema tool, an MCP server's tool).

    The executor validates the arguments with ``args.model_validate`` and calls the tool with
    the model's fields: this model runs ``check``, which lists ``(location, message)`` for each
    problem (empty when the arguments fit), each problem becoming a pydantic error at its
    location (so ``invalid_arguments`` results and ``on_invalid`` see the usual
    ``ValidationError``), and keeps the arguments whole, unchanged, as its one field
    ``arguments``.

    Args:
        name: The tool's name (names the model).
        check: Lists where arguments break the tool's schema.
    """
    model_name = "".join(part.title() for part in re.split(r"[_\-]", name)) + "SchemaArgs"
    return type(model_name, (_schema_args_base(),), {"schema_check": staticmethod(check)})


@functools.cache
def _schema_args_base() -> type[BaseModel]:
    from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
    from pydantic_core import InitErrorDetails, PydanticCustomError

    class SchemaArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        schema_check: ClassVar[Callable[[Any], Sequence[tuple[Sequence[str | int], str]]]]
        arguments: dict[str, Any]

        @model_validator(mode="before")
        @classmethod
        def _check(cls, data: Any) -> Any:
            problems = cls.schema_check(data)
            if problems:
                raise ValidationError.from_exception_data(
                    cls.__name__,
                    [
                        InitErrorDetails(
                            type=PydanticCustomError("json_schema", "{message}", {"message": m}),
                            loc=tuple(loc),
                            input=data,
                        )
                        for loc, m in problems
                    ],
                )
            return {"arguments": data}

    return SchemaArgs
