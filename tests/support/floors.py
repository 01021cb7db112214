"""The dependency floors: the lower bounds in ``pyproject.toml`` and the pins the lowest-versions
CI stage installs (``.ci/constraints-lowest.txt``), read the same way by the test that keeps
them equal and by the tests that behave differently on the floors.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

__all__ = [
    "LOWEST",
    "PINNED",
    "PYPROJECT",
    "floors",
    "lowest_pins",
    "running_the_floors",
    "running_the_pins",
]

ROOT = Path(__file__).resolve().parent.parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LOWEST = ROOT / ".ci" / "constraints-lowest.txt"
PINNED = ROOT / ".ci" / "constraints.txt"


def requirements() -> list[Requirement]:
    """Every requirement of the package and of its extras (not its references to itself)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        found += [Requirement(r) for r in extra]
    return [r for r in found if canonicalize_name(r.name) != canonicalize_name(project["name"])]


def floors() -> dict[NormalizedName, Version]:
    """Each requirement's ``>=`` bound, by distribution name."""
    found: dict[NormalizedName, Version] = {}
    for requirement in requirements():
        for spec in requirement.specifier:
            if spec.operator == ">=":
                found[canonicalize_name(requirement.name)] = Version(spec.version)
    return found


def lowest_pins(path: Path = LOWEST) -> dict[NormalizedName, Version]:
    """The ``name==version`` pins of ``.ci/constraints-lowest.txt`` (or of ``path``; empty
    where the file is not shipped, as in an sdist)."""
    if not path.exists():
        return {}
    pins: dict[NormalizedName, Version] = {}
    for line in path.read_text().splitlines():
        line = line.partition("#")[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            pins[canonicalize_name(name)] = Version(pinned)
    return pins


def running_the_floors(dists: Iterable[str]) -> bool:
    """Whether every distribution named in ``dists`` is installed at its lowest pin (the
    lowest-versions CI stage, or a developer's venv made like it)."""
    return _installed_as(lowest_pins(), dists)


def running_the_pins(dists: Iterable[str]) -> bool:
    """Whether every distribution named in ``dists`` is installed at its pin in
    ``.ci/constraints.txt`` (CI's main stages and the README's commands; not the
    newest-releases stage)."""
    return _installed_as(lowest_pins(PINNED), dists)


def _installed_as(pins: dict[NormalizedName, Version], dists: Iterable[str]) -> bool:
    for dist in dists:
        try:
            installed = Version(version(dist))
        except PackageNotFoundError:
            return False
        if pins.get(canonicalize_name(dist)) != installed:
            return False
    return True
