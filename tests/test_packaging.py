"""The package's metadata: its dependency floors are the versions CI proves, and it links to
its source."""

from __future__ import annotations

import tomllib

from packaging.utils import canonicalize_name

from tests.support.floors import LOWEST, PYPROJECT, floors, lowest_pins, requirements


def test_every_requirement_has_a_floor() -> None:
    """Every dependency, of the package and of its extras, has a ``>=`` lower bound."""
    unbounded = [str(r) for r in requirements() if canonicalize_name(r.name) not in floors()]
    assert not unbounded


def test_the_floors_are_the_versions_the_lowest_stage_installs() -> None:
    """Each ``>=`` bound in pyproject.toml is pinned, to that version, in
    ``.ci/constraints-lowest.txt``, whose stage runs the suite on them: a floor that is not
    tested cannot drift in."""
    assert LOWEST.exists()
    pins = lowest_pins()
    drifted = {
        name: (str(floor), str(pins[name]) if name in pins else None)
        for name, floor in floors().items()
        if pins.get(name) != floor
    }
    assert not drifted, f"floor in pyproject.toml vs pin in {LOWEST.name}: {drifted}"


def test_the_project_links_to_its_source_and_docs() -> None:
    urls = tomllib.loads(PYPROJECT.read_text())["project"]["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Changelog", "Issues", "Source"}
    assert all(url.startswith("https://") for url in urls.values())
