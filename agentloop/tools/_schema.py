"""Argument schemas from function signatures, and the ``None`` workaround for model arguments."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, get_type_hints

from .._errors import UserError
from .._json import is_dict, is_list, is_mapping

if TYPE_CHECKING:
    from pydantic import BaseModel

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$", re.IGNORECASE)
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$")


@functools.cache
def _args_base() -> type[BaseModel]:
    """The base of every argument model (made on first use: pydantic is imported with the
    first tool, not with ``import agentloop``)."""
    from pydantic import BaseModel, ConfigDict

    class _ArgsBase(BaseModel):
        # Extra or misspelled fields from the model are errors it can see and fix.
        model_config = ConfigDict(extra="forbid")

    return _ArgsBase


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary of a docstring and its per-parameter descriptions (Google or Sphinx style)."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines:
        if m := _SPHINX_PARAM.match(line):
            current, params[m.group(1)] = m.group(1), m.group(2).strip()
            continue
        if _ARGS_HEADER.match(line):
            in_args, current = True, None
            continue
        if in_args:
            if _SECTION.match(line):
                in_args, current = False, None
                continue
            if (m := _ARG_LINE.match(line)) and len(line) - len(line.lstrip()) <= 4:
                current, params[m.group(1)] = m.group(1), m.group(2).strip()
                continue
            if current and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
            continue
        if current is None and not params and not line.startswith(":"):
            summary.append(line)
    return "\n".join(summary).strip(), params


def args_model(
    fn: Callable[..., Any],
    *,
    name: str,
    skip: Callable[[inspect.Parameter, Any], bool],
    descriptions: Mapping[str, str],
    localns: Mapping[str, Any] | None = None,
) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters (those ``skip`` does not claim).

    Raises ``UserError`` naming the parameter when one cannot become part of a schema.
    """
    from pydantic import Field, PydanticSchemaGenerationError, create_model
    from pydantic.errors import PydanticUserError

    try:
        hints = get_type_hints(fn, localns=dict(localns or {}), include_extras=True)
    except Exception as exc:
        raise UserError(f"tool {name!r}: cannot resolve the type hints of {fn!r}: {exc}") from exc
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        annotation = hints.get(param.name, Any)
        if skip(param, annotation):
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UserError(
                f"tool {name!r}: parameter {param.name!r} (*args/**kwargs) cannot be part of a "
                "tool schema; name each argument"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise UserError(
                f"tool {name!r}: parameter {param.name!r} is positional-only; tools are called "
                "with keyword arguments"
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (
            annotation,
            Field(default, description=descriptions.get(param.name)),
        )
    model_name = "".join(part.title() for part in re.split(r"[_\-]", name)) + "Args"
    try:
        model = create_model(model_name, __base__=_args_base(), **fields)
        model.model_json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
        bad = _first_bad_parameter(fields)
        where = f"parameter {bad!r}" if bad else "its parameters"
        raise UserError(f"tool {name!r}: {where} cannot become a JSON schema: {exc}") from exc
    return model


def _first_bad_parameter(fields: Mapping[str, Any]) -> str | None:
    from pydantic import create_model

    for field_name, spec in fields.items():
        try:
            create_model("Probe", __base__=_args_base(), **{field_name: spec}).model_json_schema()
        except Exception:
            return field_name
    return None


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema, without pydantic's titles (noise for the model)."""
    schema = model.model_json_schema()
    return _strip_titles(schema)  # type: ignore[no-any-return]


def _strip_titles(node: Any) -> Any:
    if is_dict(node):
        return {
            k: _strip_titles(v)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str))
        }
    if is_list(node):
        return [_strip_titles(v) for v in node]
    return node


MAX_ARGUMENT_DEPTH = 64  # levels of objects and arrays in a tool's arguments


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` (decoded JSON) nests objects and arrays more than ``limit`` deep.
    Iterative: deep input cannot exhaust the stack. Flat arguments cost one pass."""
    if is_dict(value):
        children = [v for v in value.values() if isinstance(v, (dict, list))]
    elif is_list(value):
        children = [v for v in value if isinstance(v, (dict, list))]
    else:
        return False
    if limit < 1:
        return True
    stack = [(child, 2) for child in children]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        items = node.values() if is_dict(node) else node
        stack.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))
    return False


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def text_nesting_exceeds(text: str, limit: int) -> bool:
    """Whether JSON-ish ``text`` opens more than ``limit`` brackets at once (strings skipped)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return True
        elif token in "]}":
            depth -= 1
    return False


def strip_nones(value: Any, schema: Mapping[str, Any]) -> Any:
    """Drop ``None`` from object fields the schema does not allow to be null.

    Models often send ``null`` for optional fields they mean to leave out. Lists are never
    touched, and a field that accepts ``null`` keeps it. A ``null`` for a key the schema does
    not declare is dropped too (at any depth whose schema is known), unless the object admits
    other keys (``additionalProperties`` true or a schema). Cleaning stops
    ``MAX_ARGUMENT_DEPTH`` levels down.
    """
    return _strip(value, schema, schema.get("$defs", {}), 0)


def _strip(value: Any, schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int) -> Any:
    schema = _resolve(schema, defs)
    if not is_dict(value) or depth > MAX_ARGUMENT_DEPTH:
        return value
    props = schema.get("properties")
    if not is_dict(props):
        return value
    extra = schema.get("additionalProperties")
    open_ = extra is True or is_mapping(extra)
    out: dict[str, Any] = {}
    for key, item in value.items():
        sub = props.get(key)
        if sub is None:
            if item is not None or open_:
                out[key] = item
            continue
        sub = _resolve(sub, defs)
        if item is None and not _nullable(sub, defs):
            continue
        out[key] = (
            _strip(item, _object_branch(sub, defs), defs, depth + 1) if is_dict(item) else item
        )
    return out


def _resolve(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.removeprefix("#/$defs/"))
        if is_mapping(target):
            return target
    return schema


def _nullable(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> bool:
    schema = _resolve(schema, defs)
    if not schema or schema.get("type") == "null":
        return True
    t = schema.get("type")
    if is_list(t) and "null" in t:
        return True
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if is_list(branches) and any(_nullable(b, defs) for b in branches):
            return True
    return False


def _object_branch(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    if "properties" in schema:
        return schema
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(key, ()):
            branch = _resolve(branch, defs)
            if "properties" in branch:
                return branch
    return schema
