"""What the command's options name: a model, tools from ``module:attr``, a session store.

Each resolver raises ``UserError`` with a message that says what was wrong and how to fix it;
the command prints that one line and exits.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from .. import UserError
from ..models import Model, resolve_model
from ..tools import Tool, Toolkit, Toolset

if TYPE_CHECKING:
    from ..sessions import SessionStore

MODEL_ENV = "AGENTLOOP_MODEL"
DATA_DIR_ENV = "AGENTLOOP_DATA_DIR"

# Providers that talk HTTP and so accept --base-url.
_HTTP_PROVIDERS = {
    "openai": ("agentloop.models.openai", "OpenAIChatModel"),
    "openai-chat": ("agentloop.models.openai", "OpenAIChatModel"),
    "openai-responses": ("agentloop.models.openai", "OpenAIResponsesModel"),
    "anthropic": ("agentloop.models.anthropic", "AnthropicModel"),
}


def make_model(spec: str | None, *, base_url: str | None = None) -> Model:
    """The model a ``provider:model`` string names (``--model``, else ``$AGENTLOOP_MODEL``)."""
    spec = spec or os.environ.get(MODEL_ENV)
    if not spec:
        raise UserError(
            f"no model: pass --model provider:model (for example openai:gpt-4o-mini) "
            f"or set {MODEL_ENV}"
        )
    provider, sep, name = spec.partition(":")
    if provider == "test":
        from .. import testing as _  # noqa: F401  (registers the "test:" models)
    if base_url is None:
        return resolve_model(spec)
    if not sep or not name:
        raise UserError(f"model string {spec!r} is not of the form 'provider:model'")
    if provider not in _HTTP_PROVIDERS:
        known = ", ".join(_HTTP_PROVIDERS)
        raise UserError(f"--base-url needs an HTTP provider ({known}), not {provider!r}")
    if not base_url.startswith(("http://", "https://")):
        raise UserError(f"--base-url must be an http:// or https:// URL, not {base_url!r}")
    module_name, class_name = _HTTP_PROVIDERS[provider]
    factory: Any = getattr(importlib.import_module(module_name), class_name)
    model: Model = factory(name, base_url=base_url)
    return model


def load_tools(paths: Sequence[str]) -> list[Any]:
    """The tools that ``module:attr`` (or ``path/file.py:attr``) strings name, flattened; a
    module or file alone gives every tool it defines."""
    tools: list[Any] = []
    for path in paths:
        if ":" in path:
            tools.extend(_flatten(load_object(path), path))
        else:
            tools.extend(_defined_tools(path))
    return tools


def _defined_tools(path: str) -> list[Any]:
    """Every tool the module defines at its top level, in order: ``@tool`` functions, toolkit
    instances, toolkit classes (made with no arguments, unless an instance is there already)
    and toolset objects. Tools imported from elsewhere and plain functions are not taken: name
    them with ``:attr``."""
    module = _import(path, path, "--tools")
    here = module.__name__
    values = [v for k, v in vars(module).items() if not k.startswith("_")]
    made = {type(v) for v in values if isinstance(v, Toolkit)}
    tools: list[Any] = []
    for value in values:
        if isinstance(value, type):
            if issubclass(value, Toolkit) and value.__module__ == here and value not in made:
                tools.append(_make_toolkit(value, path))
        elif isinstance(value, Tool):
            if any(getattr(a.fn, "__module__", None) == here for a in value.activities.values()):
                tools.append(value)
        elif isinstance(value, Toolkit):
            if type(value).__module__ == here:
                tools.append(value)
        elif isinstance(value, Toolset) and not isinstance(value, ModuleType):
            tools.append(value)
    if not tools:
        raise UserError(
            f"--tools {path!r} defines no tools (@tool functions, toolkits or toolsets); "
            f"name one with {path}:NAME"
        )
    return tools


def _make_toolkit(cls: type[Toolkit], path: str) -> Toolkit:
    try:
        return cls()
    except TypeError as exc:
        raise UserError(
            f"--tools {path!r}: toolkit {cls.__name__} needs arguments ({exc}); make an "
            f"instance in the file, or name one with {path}:NAME"
        ) from None


def load_object(path: str, *, option: str = "--tools") -> Any:
    """What ``module:attr`` names (``option`` is what the messages call it)."""
    module_name, sep, attr = path.rpartition(":")
    if not sep or not module_name or not attr:
        raise UserError(
            f"{option} {path!r}: expected module:attr (for example mytools:search), or a module "
            "alone for every tool it defines"
        )
    module = _import(module_name, path, option)
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UserError(
                f"{option} {path!r}: {module_name!r} has no attribute {attr!r}"
            ) from None
    return value


def _import(module_name: str, path: str, option: str) -> Any:
    if module_name.endswith(".py"):
        file = Path(module_name)
        if not file.is_file():
            raise UserError(f"{option} {path!r}: no such file {module_name!r}")
        spec = importlib.util.spec_from_file_location(file.stem, file)
        if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
            raise UserError(f"{option} {path!r}: cannot load {module_name!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(file.stem, module)
        loader = spec.loader

        def load() -> Any:
            loader.exec_module(module)
            return module

        return _guarded(load, path, option)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules beside you are importable
    return _guarded(lambda: importlib.import_module(module_name), path, option)


def _guarded(load: Any, path: str, option: str) -> Any:
    try:
        return load()
    except ModuleNotFoundError as exc:
        raise UserError(f"{option} {path!r}: cannot import {exc.name!r} (no such module)") from None
    except Exception as exc:
        raise UserError(
            f"{option} {path!r}: importing it raised {type(exc).__name__}: {exc}"
        ) from None


def _flatten(value: Any, path: str) -> list[Any]:
    if isinstance(value, Tool | Toolkit | Toolset):
        return [value]
    if isinstance(value, type) and issubclass(value, Toolkit):
        return [value()]
    if isinstance(value, list | tuple):
        out: list[Any] = []
        for item in value:
            out.extend(_flatten(item, path))
        return out
    if callable(value) and not isinstance(value, type):
        return [value]  # a plain function: the Agent makes it a tool
    raise UserError(
        f"--tools {path!r} is a {type(value).__name__}: expected a tool, a toolkit, a toolset, "
        "a function, or a list of those"
    )


def open_store(url: str) -> SessionStore:
    """The store a URL names; a SQLite file's directory must exist."""
    from ..sessions import open_store as _open

    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = url[len("sqlite:///") :]
        folder = Path(path).parent
        if not folder.is_dir():
            hint = ""
            if not Path(path).is_absolute():
                hint = (
                    f" (sqlite:/// + a path is relative to the current directory; an absolute "
                    f"path takes four slashes: sqlite:////{path})"
                )
            raise UserError(
                f"bad store URL {url!r}: the directory {str(folder)!r} does not exist{hint}"
            )
    return _open(url)


def shown_url(url: str) -> str:
    """The store URL to print: its password, if any, replaced by ``***``."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def data_dir() -> Path:
    """Where the command keeps its default SQLite store (``$AGENTLOOP_DATA_DIR`` overrides)."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override)
    home = Path.home()
    if sys.platform == "win32":  # pragma: no cover - not tested here
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":  # pragma: no cover - not tested here
        base = home / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    return base / "agentloop"


def default_store_url() -> str:
    """``sqlite:///<data dir>/sessions.db``, creating the directory."""
    folder = data_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the data directory {str(folder)!r} ({exc.strerror}); "
            f"pass --store or set {DATA_DIR_ENV}"
        ) from None
    return f"sqlite:///{(folder / 'sessions.db').resolve()}"
