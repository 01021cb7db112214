"""The package's metadata: its dependency floors are the versions CI proves, and it links to
its source."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from tests.support.floors import LOWEST, PYPROJECT, ROOT, floors, lowest_pins, requirements


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


# Where a user reads how to install: the README, the docs, the examples, the benchmarks, and the
# messages the package itself prints (hints on a missing extra, CLI help).
_INSTALL_TEXTS = (
    "README.md",
    "docs/**/*.md",
    "agentloop/**/*.py",
    "examples/**/*.py",
    "benchmarks/**/*.py",
    "benchmarks/**/*.md",
    "tests/conftest.py",
)
_INSTALL = re.compile(r"pip install\b([^\n`\"#()]*)")
_OPTION_WITH_VALUE = frozenset({"-c", "--constraint", "-r", "--requirement", "-i", "--index-url"})
_OWN_EXTRA = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\[([a-z0-9_,-]+)\]")


def _project() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())["project"]  # type: ignore[no-any-return]


def _install_texts() -> list[Path]:
    return sorted({path for pattern in _INSTALL_TEXTS for path in ROOT.glob(pattern)})


def _installed_names(arguments: str) -> list[str]:
    """The distributions a ``pip install`` line names (local paths such as ``.[dev]`` left out)."""
    try:
        words = shlex.split(arguments)
    except ValueError:
        words = arguments.split()
    names: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in _OPTION_WITH_VALUE:
            skip = True
            continue
        word = word.rstrip(",.;:")
        if not word or word.startswith(("-", ".", "/", "~")):
            continue
        try:
            names.append(canonicalize_name(Requirement(word).name))
        except InvalidRequirement:
            break  # the line's prose goes on
    return names


def test_every_install_line_names_this_distribution() -> None:
    """An install line names the distribution pyproject.toml builds (``agentloop`` on the
    package index is another project), or one of its dependencies; an extra of ours is asked
    for on our name."""
    project = _project()
    ours = canonicalize_name(project["name"])
    allowed = {ours} | {canonicalize_name(r.name) for r in requirements()}
    extras = set(project["optional-dependencies"])
    wrong: list[str] = []
    for path in _install_texts():
        text = path.read_text("utf-8")
        where = path.relative_to(ROOT)
        for found in _INSTALL.finditer(text):
            for name in _installed_names(found.group(1)):
                if name not in allowed:
                    wrong.append(f"{where}: pip install {found.group(1).strip()}")
        for found in _OWN_EXTRA.finditer(text):
            name, asked = found.groups()
            if set(asked.split(",")) <= extras and canonicalize_name(name) not in (ours, "."):
                wrong.append(f"{where}: {found.group()}")
    assert not wrong, f"install lines not naming {project['name']!r}:\n" + "\n".join(wrong)


def test_the_distribution_is_not_the_import_name() -> None:
    """The package index's ``agentloop`` is an unrelated project: ours is installed by another
    name, and imported as ``agentloop``."""
    assert canonicalize_name(_project()["name"]) == "agentloop-runtime"
    assert (ROOT / "agentloop" / "__init__.py").exists()


def test_ci_runs_the_suite_on_the_newest_releases() -> None:
    """Beside the pinned and the lowest versions, a CI stage installs with no constraints file
    (the newest releases pyproject.toml allows) and runs the suite there."""
    ci = (ROOT / ".ci" / "run").read_text()
    stage = (
        ci.split("newest_versions() (", 1)[1].split("\n)\n", 1)[0]
        if "newest_versions() (" in ci
        else ""
    )
    installs = [line for line in stage.splitlines() if "pip install" in line]
    assert installs and all(" -c " not in line and "--upgrade" in line for line in installs)
    assert "python -m pytest" in stage
    assert 'stage "newest versions" newest_versions' in ci
