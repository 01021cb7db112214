"""The fast loop (``pytest -m "not slow"``, CONTRIBUTING.md) leaves out what is heavy by nature:
a real browser, worker processes killed mid-run, hundreds of sessions under load, and anything
that needs a Temporal dev server (one per xdist worker, started for the session)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

ROOT = Path(__file__).resolve().parent.parent

HEAVY = [
    "tests/web/test_browser.py",  # Chromium
    "tests/web/test_browser_actions.py",
    "tests/web/test_browser_origin.py",
    "tests/test_crash_resume.py",  # worker processes killed mid-run
    "tests/test_temporal_crash.py",
    "tests/reliability/test_load.py",  # hundreds of sessions
    "tests/web/test_load.py",
    "tests/test_temporal.py",  # a Temporal dev server
    "tests/test_temporal_inputs.py",
    "tests/test_temporal_subagents.py",
    "tests/test_temporal_waiting.py",
    "tests/web/test_replica_kills.py",  # Temporal, processes killed and Chromium
]


class _Collected:
    """Records what a session collected, once ``-m`` has deselected: each test's id and the
    source of its function."""

    def __init__(self) -> None:
        self.items: dict[str, str] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.items = {
            item.nodeid: inspect.getsource(item.function)
            for item in session.items
            if isinstance(item, pytest.Function)
        }


def _collects(*paths: str, marks: str = "") -> dict[str, str]:
    """What ``pytest -m MARKS`` collects of ``paths`` (id: source): a session of its own, in
    this process (a fresh interpreter cost a second of CPU, importing the browser and Temporal
    modules that this one has imported already to collect them), with the suite's own
    configuration and conftest."""
    collected = _Collected()
    args = [f"--rootdir={ROOT}", "-c", str(ROOT / "pyproject.toml"), "--collect-only", "-q"]
    args += ["-n0", "-m", marks, "-p", "no:cacheprovider", "--capture=no"]
    code = pytest.main([*args, *(str(ROOT / path) for path in paths)], plugins=[collected])
    assert code in (0, 5), f"collecting exited with {code}"  # 5: every test deselected
    return collected.items


def _fast_loop_collects(*paths: str) -> list[str]:
    return list(_collects(*paths, marks="not slow"))


def test_the_fast_loop_leaves_the_heavy_tests_out_and_keeps_the_rest() -> None:
    collected = _fast_loop_collects(*HEAVY, "tests/test_loop.py")
    assert collected, "the fast loop collected nothing"
    assert {item.split("::")[0] for item in collected} == {"tests/test_loop.py"}


def test_every_module_that_opens_a_browser_is_heavy() -> None:
    """A new browser test in a module of its own must not slip into the fast loop (one did)."""
    opens = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if "node_modules" not in path.parts
        and path.name != "test_suite_scope.py"
        and any(sign in path.read_text() for sign in ("async_playwright", "import _page"))
    }
    assert opens, "no browser test found: the signs above are stale"
    assert opens <= set(HEAVY)


def test_the_fast_loop_leaves_out_the_command_started_from_scratch_in_a_terminal() -> None:
    """A terminal session of a fresh ``python -m agentloop`` (marked ``process``) costs a
    second or two; the forked ones, a tenth, stay in the fast loop."""
    every = _collects("tests/cli")
    fresh = {
        test
        for test, source in every.items()
        if ("Terminal(" in source or "run_in_terminal(" in source)
        and ("fresh=True" in source or "command=" in source)
    }
    assert fresh, "no test starts the command from scratch in a terminal: the signs are stale"
    fast = set(_fast_loop_collects("tests/cli"))
    assert fast.isdisjoint(fresh)
    assert "tests/cli/test_demo.py::test_demo_in_a_terminal_draws_a_live_view" in fast


@dataclass(frozen=True)
class _Item:
    """What ``conftest._slow_order`` reads of a collected test."""

    nodeid: str
    slow: bool

    def get_closest_marker(self, name: str) -> object | None:
        return pytest.mark.slow if name == "slow" and self.slow else None


def test_the_slow_tests_run_first_and_the_longest_modules_first() -> None:
    """``conftest.LONGEST_FIRST`` names files that exist; the collection's order puts the slow
    tests first, those files' first in that order, and keeps the order otherwise."""
    from tests.conftest import LONGEST_FIRST, _slow_order

    assert [path for path in LONGEST_FIRST if (ROOT / path).is_file()] == list(LONGEST_FIRST)
    last, first = LONGEST_FIRST[-1], LONGEST_FIRST[0]
    items = [
        _Item("tests/test_loop.py::test_a", slow=False),
        _Item("tests/test_crash_resume.py::test_b", slow=True),
        _Item(f"{last}::test_c", slow=True),
        _Item(f"{first}::test_d", slow=True),
        _Item(f"{first}::test_e", slow=False),
        _Item("tests/test_crash_resume.py::test_f", slow=True),
    ]
    ordered = sorted(items, key=lambda item: _slow_order(cast("Any", item)))
    assert [item.nodeid.rpartition("_")[2] for item in ordered] == ["d", "c", "b", "f", "e", "a"]
