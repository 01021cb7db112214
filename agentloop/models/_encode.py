"""Request-body encoding shared by the drivers: compact JSON, and fragments cached per message.

A run resends its whole history on every step. Re-encoding it each time makes a long run
quadratic, so each driver keeps the encoded JSON of each message (and tool spec) it has sent, keyed
by the object's identity, for as long as the object lives: the cache holds it weakly, and its entry
goes when it goes (a hit checks that the weak reference still points at the very object, so a
reused ``id`` is never a hit). Finished runs thus leave nothing behind in a long-lived driver. A
request body is then the encoded head fields plus the cached fragments, joined.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

__all__ = [
    "FragmentCache",
    "assemble",
    "dumps",
    "is_strict_schema",
    "loads",
    "parse_arguments",
]

_T = TypeVar("_T")

_encode_utf8 = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False
).encode
_encode_ascii = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


# The C scanner of a default decoder: one value from an index, as (value, end).
_scan: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009


def loads(text: str) -> Any:
    """``json.loads`` of one stream event's data, in one call for the usual event (a value with
    nothing around it): ``json.loads`` adds three Python frames and two regex matches for the
    whitespace around it. Anything else (whitespace, garbage, no value) goes to ``json.loads``,
    which parses it or raises as it would."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def dumps(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes (lone surrogates are escaped rather than failing)."""
    text = _encode_utf8(value)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _encode_ascii(value).encode()


class _Ref(weakref.ref[_T]):
    """A weak reference that knows its cache key, and holds the object's encoded JSON: the
    cache's whole entry (no tuple beside it: an entry is held for every message in flight)."""

    __slots__ = ("data", "key")
    key: int
    data: bytes


class FragmentCache(Generic[_T]):
    """Encoded JSON per live object (weakly held), first-in first-out beyond ``maxsize``
    entries. Objects that cannot be weakly referenced are encoded every time."""

    __slots__ = ("_forget", "_items", "_maxsize", "hits", "misses")

    def __init__(self, maxsize: int = 8192) -> None:
        self._items: dict[int, _Ref[_T]] = {}
        self._maxsize = maxsize
        self.hits = 0
        self.misses = 0
        items = self._items

        def forget(ref: _Ref[_T]) -> None:
            # The object is going: its entry goes first (its id cannot be reused before this).
            if items.get(ref.key) is ref:
                del items[ref.key]

        self._forget = forget

    def get(self, obj: _T, encode: Callable[[_T], bytes]) -> bytes:
        key = id(obj)
        items = self._items
        entry = items.get(key)
        if entry is not None and entry() is obj:
            self.hits += 1
            return entry.data
        self.misses += 1
        data = encode(obj)
        try:
            ref = _Ref(obj, self._forget)
        except TypeError:  # not weakly referenceable: not cached
            return data
        ref.key = key
        ref.data = data
        if len(items) >= self._maxsize:
            items.pop(next(iter(items)), None)
        items[key] = ref
        return data

    def __len__(self) -> int:
        return len(self._items)


def join_items(fragments: Iterable[bytes]) -> bytes:
    """A JSON array from fragments that each hold zero or more comma-separated items."""
    return b"[" + b",".join(f for f in fragments if f) + b"]"


def assemble(head: Mapping[str, Any], raw: Iterable[tuple[str, bytes]]) -> bytes:
    """The JSON object ``head`` plus already-encoded members; a key in ``head`` wins."""
    encoded = dumps(head)
    extra = b"".join(b',"%s":%s' % (k.encode(), v) for k, v in raw if k not in head)
    if not extra:
        return encoded
    if encoded == b"{}":
        return b"{" + extra[1:] + b"}"
    return encoded[:-1] + extra + b"}"


def parse_arguments(arguments: str) -> dict[str, Any]:
    """A tool call's JSON arguments as an object ({} when empty or not an object)."""
    if not arguments or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def is_strict_schema(schema: Any) -> bool:
    """Whether a JSON schema meets OpenAI's strict-mode rules (every object closed, every
    property required), so it can be sent with ``strict: true`` without a 400."""
    if isinstance(schema, list):
        return all(is_strict_schema(s) for s in schema)
    if not isinstance(schema, Mapping):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if schema.get("additionalProperties", True) is not False:
            return False
        if not isinstance(props, Mapping) or set(schema.get("required", ())) != set(props):
            return False
    return all(is_strict_schema(v) for k, v in schema.items() if k not in ("required", "enum"))
