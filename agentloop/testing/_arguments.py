"""Arguments the emulated provider makes up for a tool, from the JSON schema the request offers.

A real model fills in every required property with a value of the right kind; so does this, so
that a tool's own validation passes and the tool runs. The values are plain and deterministic:
``variant`` (the call's position in its reply) picks among them, so two parallel calls to one
tool get different arguments (``"first"`` and ``"second"`` for a plain string).

What is honoured: ``type`` (the first non-null one of a list), ``enum``/``const``, ``required``
(optional properties are left out, unless ``minProperties`` needs them), ``properties``,
``additionalProperties`` (a schema for required keys that have none of their own), ``items``/
``prefixItems``, ``minItems``/``maxItems``, ``uniqueItems``, ``minLength``/``maxLength``, the
common ``format`` values, numeric bounds and ``multipleOf``, ``anyOf`` (the first non-null
branch), ``oneOf`` (a branch whose value the others do not take), ``allOf`` (merged) and local
``$ref``. A ``pattern`` is met when one of a few plain candidates matches it; otherwise the
plain word is sent (the tool sees what a model that got it wrong would send). Bounded:
``MAX_DEPTH`` levels, ``MAX_VALUES`` values per call, ``MAX_ITEMS`` items per array.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from ._json import is_dict, is_list, is_mapping

__all__ = ["arguments_for"]

MAX_DEPTH = 12
MAX_VALUES = 500
MAX_ITEMS = 16  # items made for one array, whatever its minItems says

_WORDS = ("first", "second", "third", "fourth")
_FORMATS = {
    "date": ("2025-06-01", "2025-06-02"),
    "date-time": ("2025-06-01T12:00:00Z", "2025-06-02T12:00:00Z"),
    "time": ("12:00:00Z", "13:00:00Z"),
    "duration": ("P1D", "PT2H"),
    "email": ("first@example.com", "second@example.com"),
    "idn-email": ("first@example.com", "second@example.com"),
    "hostname": ("first.example.com", "second.example.com"),
    "idn-hostname": ("first.example.com", "second.example.com"),
    "ipv4": ("192.0.2.1", "192.0.2.2"),
    "ipv6": ("2001:db8::1", "2001:db8::2"),
    "uri": ("https://example.com/first", "https://example.com/second"),
    "url": ("https://example.com/first", "https://example.com/second"),
    "iri": ("https://example.com/first", "https://example.com/second"),
    "uri-reference": ("/first", "/second"),
    "uuid": ("00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"),
    "json-pointer": ("/first", "/second"),
    "regex": ("^first$", "^second$"),
}
_PATTERN_CANDIDATES = ("1", "12", "123", "1234", "12345", "123456", "A", "AB", "ABC", "a", "ab",
                       "abc", "a1", "A1", "ABC123", "abc-123", "2025-06-01", "12:00", "+1234567890",
                       "https://example.com", "first@example.com", "00000000-0000-4000-8000-000000000001")  # fmt: skip


def arguments_for(schema: Any, variant: int = 0) -> dict[str, Any]:
    """Arguments fitting ``schema`` (a tool's parameters): ``{}`` when it says nothing."""
    if not is_mapping(schema):
        return {}
    value = _Maker(schema, variant).value(schema, 0)
    return value if is_dict(value) else {}


class _Maker:
    __slots__ = ("made", "root", "variant")

    def __init__(self, root: Mapping[str, Any], variant: int) -> None:
        self.root = root
        self.variant = variant
        self.made = 0

    def value(self, schema: Any, depth: int) -> Any:
        self.made += 1
        schema = self._flatten(schema, 0)
        one_of = schema.pop("oneOf", None)
        if is_list(one_of) and one_of:
            return self._one_of(schema, one_of, depth)
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if is_list(enum) and enum:
            usable = [e for e in enum if e is not None] or enum
            return usable[self.variant % len(usable)]
        kind = _kind(schema)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "integer":
            return _integer(schema, self.variant)
        if kind == "number":
            return _number(schema, self.variant)
        if kind == "boolean":
            return self.variant % 2 == 0
        if kind == "null":
            return None
        return _string(schema, self.variant)

    def _one_of(self, base: dict[str, Any], branches: list[Any], depth: int) -> Any:
        """A value for the first branch (``null`` last) whose value no other branch takes too
        (by type, ``const`` and ``enum``): ``oneOf`` wants exactly one match."""
        options = [_merge(base, self._flatten(b, 0)) for b in branches]
        ordered = sorted(options, key=lambda o: _kind(o) == "null")
        if depth >= MAX_DEPTH:  # a oneOf cycle through $ref: stop choosing
            return self.value({k: v for k, v in ordered[0].items() if k != "oneOf"}, depth)
        first: Any = None
        for i, option in enumerate(ordered):
            value = self.value(option, depth + 1)
            if i == 0:
                first = value
            if not any(_roughly_fits(value, other) for other in options if other is not option):
                return value
        return first

    def _flatten(self, schema: Any, hops: int) -> dict[str, Any]:
        """``schema`` with its ``$ref`` followed, ``allOf`` merged and one ``anyOf`` branch
        (the first that is not just ``null``) merged in; ``oneOf`` is left to ``_one_of``."""
        if not is_mapping(schema) or hops > 8:
            return {}
        out = dict(schema)
        ref = out.pop("$ref", None)
        if isinstance(ref, str):
            out = _merge(self._flatten(_resolve(self.root, ref), hops + 1), out)
        for sub in out.pop("allOf", None) or ():
            out = _merge(out, self._flatten(sub, hops + 1))
        branches = out.pop("anyOf", None)
        if is_list(branches) and branches:
            flat = [self._flatten(b, hops + 1) for b in branches]
            chosen = next((b for b in flat if _kind(b) != "null"), flat[0])
            out = _merge(out, chosen)
        return out

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        if depth >= MAX_DEPTH or self.made > MAX_VALUES:
            return {}
        props = schema.get("properties")
        props = props if is_mapping(props) else {}
        extra = schema.get("additionalProperties")
        required = [k for k in schema.get("required", ()) if isinstance(k, str)]
        wanted = schema.get("minProperties")
        if isinstance(wanted, int) and wanted > len(required):
            required += [k for k in props if k not in required][: wanted - len(required)]
        out: dict[str, Any] = {}
        for key in required:
            sub = props.get(key, extra if is_mapping(extra) else {})
            out[key] = self.value(sub, depth + 1)
        return out

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        low = schema.get("minItems")
        high = schema.get("maxItems")
        count = max(1, low if isinstance(low, int) else 0)
        if isinstance(high, int):
            count = min(count, high)
        if depth >= MAX_DEPTH or self.made > MAX_VALUES:
            count = 0
        count = min(count, MAX_ITEMS)
        prefix, items = schema.get("prefixItems"), schema.get("items")
        if is_list(items):  # the draft-4 tuple form
            prefix, items = items, schema.get("additionalItems")
        prefix = prefix if is_list(prefix) else []
        count = max(count, min(len(prefix), MAX_ITEMS)) if prefix else count
        out: list[Any] = []
        variant = self.variant
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else (items if is_mapping(items) else {})
            if schema.get("uniqueItems") is True:
                self.variant = variant + i  # different values for different items
            out.append(self.value(sub, depth + 1))
        self.variant = variant
        return out


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Two schemas as one: properties joined, required lists joined, else ``extra`` wins."""
    out = dict(base)
    for key, value in extra.items():
        if key == "properties" and is_mapping(out.get(key)):
            out[key] = {**out[key], **value}
        elif key == "required" and is_list(out.get(key)) and is_list(value):
            out[key] = [*out[key], *(v for v in value if v not in out[key])]
        else:
            out[key] = value
    return out


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    if not ref.startswith("#"):
        return {}
    node: Any = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if is_mapping(node) and part in node:
            node = node[part]
        elif is_list(node) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return {}
    return node


def _roughly_fits(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether ``value`` has the schema's type and is its ``const``/in its ``enum``."""
    if "const" in schema:
        return bool(value == schema["const"])
    enum = schema.get("enum")
    if is_list(enum):
        return value in enum
    kind = schema.get("type")
    kinds = kind if is_list(kind) else [kind] if isinstance(kind, str) else []
    if not kinds:
        return True
    return any(_has_type(value, k) for k in kinds)


def _has_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return _is_number(value) and float(value).is_integer()
    if kind == "number":
        return _is_number(value)
    python = {"string": str, "boolean": bool, "object": dict, "array": list}.get(kind)
    if python is not None:
        return isinstance(value, python)
    return value is None if kind == "null" else True


def _kind(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if is_list(kind):
        kinds = [k for k in kind if isinstance(k, str)]
        kind = next((k for k in kinds if k != "null"), kinds[0] if kinds else None)
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    if any(k in schema for k in ("minimum", "maximum", "multipleOf", "exclusiveMinimum")):
        return "number"
    return "string"


def _string(schema: Mapping[str, Any], variant: int) -> str:
    formatted = _FORMATS.get(str(schema.get("format")))
    if formatted:
        text = formatted[variant % 2]
    else:
        text = _WORDS[variant] if variant < len(_WORDS) else f"value{variant + 1}"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        text = _matching(pattern, text)
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        text = (text * (low // max(1, len(text)) + 1))[: max(low, 0)]
    if isinstance(high, int) and len(text) > high:
        text = text[: max(high, 0)]
    return text


def _matching(pattern: str, preferred: str) -> str:
    try:
        compiled = re.compile(pattern)
    except re.error:
        return preferred
    for candidate in (preferred, *_PATTERN_CANDIDATES):
        if compiled.search(candidate):
            return candidate
    return preferred


def _bounds(schema: Mapping[str, Any], step: float) -> tuple[float, float]:
    """The smallest and largest allowed value (exclusive bounds moved in by ``step``)."""
    low, high = -math.inf, math.inf
    if _is_number(schema.get("minimum")):
        low = schema["minimum"]
    if _is_number(schema.get("exclusiveMinimum")):
        low = max(low, schema["exclusiveMinimum"] + step)
    if _is_number(schema.get("maximum")):
        high = schema["maximum"]
    if _is_number(schema.get("exclusiveMaximum")):
        high = min(high, schema["exclusiveMaximum"] - step)
    return low, high


def _integer(schema: Mapping[str, Any], variant: int) -> int:
    low, high = _bounds(schema, 1)
    if low > -math.inf:
        start = math.ceil(low)
    else:
        start = 1 if high >= 1 else math.floor(high)
    value = start + variant
    if value > high:
        value = start
    step = schema.get("multipleOf")
    if _is_number(step) and step > 0 and float(step).is_integer():
        step = int(step)
        value = -(-value // step) * step  # the first multiple at or above
        if value > high:
            value = (int(high) // step) * step
    return int(value)


def _number(schema: Mapping[str, Any], variant: int) -> float:
    step = schema.get("multipleOf")
    if _is_number(step) and step > 0:
        low, high = _bounds(schema, step)
        first = math.ceil(low / step) if low > -math.inf else 1
        value = (first + variant) * step
        if value > high:
            value = first * step
        return float(value)
    low, high = _bounds(schema, 0.25)
    value = 1.5 + variant  # not a whole number: an integer branch beside it does not match too
    if low > -math.inf and high < math.inf:
        return (low + high) / 2
    if value < low:
        return low + 0.5
    if value > high:
        return high - 0.5
    return value


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
