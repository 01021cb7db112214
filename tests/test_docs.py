"""The documentation site documents every public name (CI builds it with warnings as errors)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "pages" / "reference"
PUBLIC_PACKAGES = {
    "agentloop": "agentloop.md",
    "agentloop.models": "models.md",
    "agentloop.tools": "tools.md",
    "agentloop.sessions": "sessions.md",
    "agentloop.goals": "goals.md",
    "agentloop.evals": "evals.md",
    "agentloop.mcp": "mcp.md",
    "agentloop.web": "web.md",
    "agentloop.testing": "testing.md",
    "agentloop.temporal": "temporal.md",
    "agentloop.durable_web": "durable_web.md",
}


def _documented(page: str) -> set[str]:
    """Names rendered on a reference page (``::: pkg.Name``) or linked to where they are."""
    text = (REFERENCE / page).read_text()
    rendered = re.findall(r"^::: ([\w.]+)$", text, re.MULTILINE)
    linked = re.findall(r"\]\[([\w.]+)\]", text)
    return {path.rsplit(".", 1)[-1] for path in (*rendered, *linked)}


@pytest.mark.parametrize("package", sorted(PUBLIC_PACKAGES))
def test_every_public_name_is_in_the_reference(package: str) -> None:
    names = set(importlib.import_module(package).__all__)
    missing = sorted(names - _documented(PUBLIC_PACKAGES[package]))
    assert not missing, f"{package}: not in docs/pages/reference/{PUBLIC_PACKAGES[package]}"


def test_a_linked_name_is_rendered_under_agentloop() -> None:
    """A name a sub-package re-exports is documented once, on the ``agentloop`` page."""
    rendered = set(
        re.findall(r"^::: agentloop\.(\w+)$", (REFERENCE / "agentloop.md").read_text(), re.M)
    )
    for page in PUBLIC_PACKAGES.values():
        for target in re.findall(r"\]\[agentloop\.(\w+)\]", (REFERENCE / page).read_text()):
            assert target in rendered, f"{page} links to agentloop.{target}, which is not rendered"
