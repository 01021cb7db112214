"""The public surface: sorted __all__ that matches the namespace; no provider SDK on import."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentloop
import agentloop.models
import agentloop.testing
import agentloop.tools


@pytest.mark.parametrize(
    "module", [agentloop, agentloop.models, agentloop.tools, agentloop.testing]
)
def test_all_is_sorted_and_complete(module: object) -> None:
    """__all__ is sorted and names every public attribute, and only those."""
    names = module.__all__  # type: ignore[attr-defined]
    assert names == sorted(names)
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_") and getattr(v, "__module__", "").startswith("agentloop")
    }
    assert set(names) >= public
    for name in names:
        assert hasattr(module, name)


def test_errors_show_their_public_path() -> None:
    """Tracebacks name agentloop.ModelError, not a private module."""
    assert agentloop.ModelError.__module__ == "agentloop"


def test_import_does_not_load_provider_sdks() -> None:
    """`import agentloop` imports neither openai nor anthropic."""
    code = "import sys, agentloop, agentloop.models; print('openai' in sys.modules, 'anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


@pytest.mark.slow
def test_import_leaves_heavy_dependencies_for_first_use() -> None:
    """`import agentloop` loads neither jinja2, tenacity nor pydantic: templates, retries and
    schemas import them when first used (import time stays well under 0.3 s)."""
    code = (
        "import sys, agentloop; "
        "print([m for m in ('jinja2', 'tenacity', 'pydantic') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_no_assert_decides_control_flow_in_the_package() -> None:
    """``python -O`` strips asserts: the package checks explicitly instead."""
    import ast
    from pathlib import Path

    import agentloop

    root = Path(agentloop.__file__).parent
    found = [
        f"{path.relative_to(root)}:{node.lineno}"
        for path in sorted(root.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Assert)
    ]
    assert found == []
