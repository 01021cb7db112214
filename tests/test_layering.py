"""The layering documented at the top of ``agentloop/__init__.py``, checked on the import graph.

The graph is read from the source with ``ast``: every ``import`` counts, at module level, under
``TYPE_CHECKING`` or inside a function, because each is a dependency a reader (and a type
checker) has to follow.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import agentloop

PACKAGE = Path(agentloop.__file__).parent

# The layers, bottom to top. An entry names a module and, unless it is ``agentloop`` itself,
# the modules under it. The engine's modules are layers of their own: each imports downward.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("agentloop._anyio_internals",),  # read by the leaf _time and by _channel
    (  # leaves
        "agentloop._errors",
        "agentloop._checks",
        "agentloop._json",
        "agentloop._time",
        "agentloop._context",
        "agentloop._version",
        "agentloop._generic",
    ),
    ("agentloop.models",),
    ("agentloop.sessions",),
    (  # the values of a run
        "agentloop._steps",
        "agentloop._decisions",
        "agentloop._events",
        "agentloop._final",
        "agentloop._cost",
        "agentloop._retry",
        "agentloop._middleware",
        "agentloop._instrument",
        "agentloop._output",
        "agentloop._inputs",
        "agentloop._usage_limits",
        "agentloop._guardrails",
        "agentloop._handoff",
        "agentloop._sealed",
    ),
    ("agentloop.tools",),  # tool definitions
    # the engine
    ("agentloop._react_parser",),
    ("agentloop._prompt",),
    ("agentloop._window",),
    ("agentloop._threads",),
    ("agentloop._channel",),
    ("agentloop._actions",),
    ("agentloop._session_run",),
    ("agentloop._waiting",),
    ("agentloop._plan",),
    ("agentloop._run",),
    ("agentloop._controls",),
    ("agentloop._tracing",),
    ("agentloop._turn",),
    ("agentloop._loop",),
    ("agentloop._agent",),
    ("agentloop",),  # the public facade
    (
        "agentloop.goals",
        "agentloop.mcp",
        "agentloop.testing",
        "agentloop.web",
        "agentloop.evals",
    ),  # seam users
    ("agentloop.temporal",),  # a second driver of the engine: durable runs on Temporal
    ("agentloop.durable_web",),  # the web front on Temporal
    ("agentloop.cli",),  # a seam user of every public package, the durable ones too
    ("agentloop.__main__",),
)

SEAM_USERS = (
    "agentloop.evals",
    "agentloop.goals",
    "agentloop.mcp",
    "agentloop.testing",
    "agentloop.web",
    "agentloop.cli",
)

# What a seam user may import: the public packages and modules (besides its own package).
PUBLIC = frozenset(
    {
        "agentloop",
        "agentloop.models",
        "agentloop.models.anthropic",
        "agentloop.models.openai",
        "agentloop.tools",
        "agentloop.sessions",
        "agentloop.temporal",
        "agentloop.durable_web",
        *SEAM_USERS,
    }
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The ``agentloop`` modules that ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:
                    yield submodule
                elif source in modules:
                    yield source


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    """Each module's imports (read once per session: the tests share it)."""
    modules = _modules()
    return {
        name: frozenset(m for m in _imported(name, path, modules) if m != name)
        for name, path in modules.items()
    }


def _layer(module: str) -> int:
    for index, entries in enumerate(LAYERS):
        for entry in entries:
            if module == entry or (entry != "agentloop" and module.startswith(entry + ".")):
                return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and the package docstring")


def _edges() -> Iterator[tuple[str, str]]:
    for source, targets in import_graph().items():
        for target in targets:
            yield source, target


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        _layer(module)


def test_imports_go_downward_only() -> None:
    upward = [
        f"{source} -> {target}" for source, target in _edges() if _layer(target) > _layer(source)
    ]
    assert upward == []


def test_seam_users_import_public_seams_only() -> None:
    """goals, MCP, the CLI and testing build on what a user could build on."""
    private = []
    for source, target in _edges():
        own = next((p for p in SEAM_USERS if source == p or source.startswith(p + ".")), None)
        if own is None or target == own or target.startswith(own + "."):
            continue
        if target not in PUBLIC:
            private.append(f"{source} -> {target}")
    assert private == []


def test_no_import_cycle() -> None:
    graph: dict[str, set[str]] = {s: set() for s in import_graph()}
    for source, target in _edges():
        graph[source].add(target)
    assert _cycles(graph) == []
