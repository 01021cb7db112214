"""Every public callable documents its parameters, in the Google-style ``Args:`` section that
the documentation site renders.

Public means: each name in the ``__all__`` of a documented package (``tests/test_docs.py``),
and the public methods of each public class (defined in agentloop, inherited ones included). A
class's parameters are its constructor's (dataclass fields with ``init``, pydantic fields),
documented in the class docstring or its ``__init__``'s (a pydantic model's in an
``Attributes:`` section: the site reads signatures statically, and a model's ``__init__`` is
pydantic's ``**data``, so an ``Args`` entry would not match it). A parameter documented on a base class
counts for its subclasses (the events' common fields are documented once), and so does one
documented on the same method of a base class, or of the protocol that the class implements
(``IMPLEMENTS``). Documented names that are not parameters fail too: a renamed parameter leaves
no stale line behind.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.test_docs import PUBLIC_PACKAGES

# Parameters never documented: the receiver.
RECEIVERS = frozenset({"self", "cls"})

# Public callables whose parameters are documented elsewhere, each with the reason.
EXEMPT: dict[str, str] = {}

# A private base class whose methods implement a public protocol's, documented there.
IMPLEMENTS: dict[str, str] = {
    "agentloop.sessions._base.BaseStore": "agentloop.sessions._types.SessionStore",
}

_ARGS = ("Args", "Arguments", "Parameters")
_SECTION = re.compile(r"^(\s*)(\w+):\s*$", re.MULTILINE)
_ENTRY = re.compile(r"^(\*{0,2}\w+)(\s*\([^)]*\))?:")


def documented_args(doc: str | None, sections: tuple[str, ...] = _ARGS) -> set[str]:
    """The names in a docstring's ``Args:`` section (``*args``/``**kwargs`` keep no stars)."""
    if not doc:
        return set()
    doc = inspect.cleandoc(doc)
    names: set[str] = set()
    for match in _SECTION.finditer(doc):
        if match.group(2) not in sections:
            continue
        indent = len(match.group(1))
        entry_indent: int | None = None
        for line in doc[match.end() :].splitlines()[1:]:
            if not line.strip():
                continue
            width = len(line) - len(line.lstrip())
            if width <= indent:
                break  # the next section, or the end of this one
            if entry_indent is None:
                entry_indent = width
            if width == entry_indent:
                found = _ENTRY.match(line.strip())
                if found:
                    names.add(found.group(1).lstrip("*"))
    return names


def _own(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("agentloop")


def _params(fn: Callable[..., Any]) -> list[str]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters if p not in RECEIVERS]


def _class_params(cls: type) -> list[str]:
    if getattr(cls, "_is_protocol", False):
        return []  # implemented, not constructed
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")]
    if _is_pydantic(cls):
        return [name for name in cls.model_fields if not name.startswith("_")]  # type: ignore[attr-defined]
    init = next((k.__dict__["__init__"] for k in cls.__mro__ if "__init__" in k.__dict__), None)
    if init is None or not _own(init):
        return []  # object's or an exception's own constructor
    return _params(init)


def _is_pydantic(cls: type) -> bool:
    return isinstance(getattr(cls, "model_fields", None), dict)


def _class_docs(cls: type) -> set[str]:
    sections = (*_ARGS, "Attributes") if _is_pydantic(cls) else _ARGS
    names: set[str] = set()
    for klass in cls.__mro__:
        if not _own(klass):
            continue
        names |= documented_args(klass.__dict__.get("__doc__"), sections)
        init = klass.__dict__.get("__init__")
        if init is not None:
            names |= documented_args(init.__doc__)
    return names


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _method_docs(cls: type, name: str) -> set[str]:
    """The Args of method ``name`` on ``cls`` and its bases, and on the protocols they
    implement."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if not _own(klass):
            continue
        owners = [klass]
        protocol = IMPLEMENTS.get(_qualified(klass))
        if protocol is not None:
            module, _, qualname = protocol.rpartition(".")
            owners.append(getattr(importlib.import_module(module), qualname))
        for owner in owners:
            raw = owner.__dict__.get(name)
            fn = raw.__func__ if isinstance(raw, classmethod | staticmethod) else raw
            names |= documented_args(getattr(fn, "__doc__", None))
    return names


def _methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not _own(klass):
            continue
        for name, raw in klass.__dict__.items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            fn = raw.__func__ if isinstance(raw, classmethod | staticmethod) else raw
            if inspect.isfunction(fn) and _own(fn):
                yield name, fn


def _undocumented(params: list[str], documented: set[str]) -> list[str]:
    return [p for p in params if p not in documented]


def _own_docs(obj: Any) -> set[str]:
    """The Args of the object's own docstring (and its own ``__init__``'s, for a class)."""
    if inspect.isclass(obj):
        sections = (*_ARGS, "Attributes") if _is_pydantic(obj) else _ARGS
        init = obj.__dict__.get("__init__")
        return documented_args(obj.__dict__.get("__doc__"), sections) | documented_args(
            getattr(init, "__doc__", None)
        )
    return documented_args(getattr(obj, "__doc__", None))


def public_callables() -> Iterator[tuple[str, list[str], set[str]]]:
    """``(qualified name, parameters, documented names)`` of every public callable; the names
    include those documented on its bases (see the module docstring)."""
    seen: set[int] = set()
    for package in sorted(PUBLIC_PACKAGES):
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if id(obj) in seen or not _own(obj):
                continue
            seen.add(id(obj))
            where = f"{obj.__module__}.{getattr(obj, '__qualname__', name)}"
            if inspect.isclass(obj):
                yield where, _class_params(obj), _class_docs(obj)
                for method_name, fn in _methods(obj):
                    if id(fn) in seen:
                        continue
                    seen.add(id(fn))
                    yield f"{where}.{method_name}", _params(fn), _method_docs(obj, method_name)
            elif callable(obj):
                yield where, _params(obj), documented_args(getattr(obj, "__doc__", None))


def test_the_parser_reads_google_args() -> None:
    doc = """Summary.

    Args:
        first: one
            continued
        second (int): two
        *rest: the others
        **options: more

    Returns:
        nothing: not a parameter

    Attributes:
        field: a pydantic model's field
    """
    assert documented_args(doc) == {"first", "second", "rest", "options"}
    assert documented_args(doc, ("Attributes",)) == {"field"}


def test_every_public_parameter_is_documented() -> None:
    missing = [
        f"{where}: {', '.join(undocumented)}"
        for where, params, documented in public_callables()
        if where not in EXEMPT and (undocumented := _undocumented(params, documented))
    ]
    assert not missing, "parameters without an Args entry:\n" + "\n".join(missing)


def _own_entries() -> Iterator[tuple[str, list[str], set[str]]]:
    """``(qualified name, parameters, its own Args)``, for every public callable."""
    objects: dict[str, Any] = {}
    for package in sorted(PUBLIC_PACKAGES):
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if _own(obj) and callable(obj):
                objects[f"{obj.__module__}.{getattr(obj, '__qualname__', name)}"] = obj
                if inspect.isclass(obj):
                    for method_name, fn in _methods(obj):
                        objects[f"{obj.__module__}.{obj.__qualname__}.{method_name}"] = fn
    for where, params, _ in public_callables():
        yield where, params, _own_docs(objects[where])


def test_no_documented_parameter_is_stale() -> None:
    """An ``Args`` entry names a parameter of that very callable."""
    stale = [
        f"{where}: {', '.join(sorted(extra))}"
        for where, params, own in _own_entries()
        if (extra := own - set(params))
    ]
    assert not stale, "Args entries that are not parameters:\n" + "\n".join(stale)


def test_exemptions_are_still_public() -> None:
    names = {where for where, _, _ in public_callables()}
    assert set(EXEMPT) <= names
    for base, protocol in IMPLEMENTS.items():
        for path in (base, protocol):
            module, _, qualname = path.rpartition(".")
            assert hasattr(importlib.import_module(module), qualname), path


@pytest.mark.parametrize("name", ["Agent", "tool"])
def test_known_documented_callables_pass(name: str) -> None:
    """The check sees the Agent's 23 settings and ``tool``'s options."""
    found = {where: (params, docs) for where, params, docs in public_callables()}
    key = next(k for k in found if k.endswith(f".{name}"))
    params, docs = found[key]
    assert params and not _undocumented(params, docs)
