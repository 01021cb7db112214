"""The fast loop (``pytest -m "not slow"``, CONTRIBUTING.md) leaves out what is heavy by nature:
a real browser, worker processes killed mid-run, hundreds of sessions under load, and anything
that needs a Temporal dev server (one per xdist worker, started for the session)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HEAVY = [
    "tests/web/test_browser.py",  # Chromium
    "tests/test_crash_resume.py",  # worker processes killed mid-run
    "tests/test_temporal_crash.py",
    "tests/reliability/test_load.py",  # hundreds of sessions
    "tests/web/test_load.py",
    "tests/test_temporal.py",  # a Temporal dev server
    "tests/test_temporal_inputs.py",
    "tests/test_temporal_subagents.py",
    "tests/test_temporal_waiting.py",
]


def _fast_loop_collects(*paths: str) -> list[str]:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n0", "-m", "not slow"]
    done = subprocess.run(
        [*command, "-p", "no:cacheprovider", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: every test deselected
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_fast_loop_leaves_the_heavy_tests_out_and_keeps_the_rest() -> None:
    collected = _fast_loop_collects(*HEAVY, "tests/test_loop.py")
    assert collected, "the fast loop collected nothing"
    assert {item.split("::")[0] for item in collected} == {"tests/test_loop.py"}


def test_the_slow_tests_run_first_and_the_longest_modules_first() -> None:
    """``conftest.LONGEST_FIRST`` names files that exist and are slow; a parallel run starts
    with them, in that order, then the other slow tests, then the rest."""
    from tests.conftest import LONGEST_FIRST

    named = [path for path in LONGEST_FIRST if (ROOT / path).is_file()]
    assert named == list(LONGEST_FIRST)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-n0",
        "-p",
        "no:cacheprovider",
    ]
    done = subprocess.run(
        [*command, *LONGEST_FIRST, "tests/test_crash_resume.py", "tests/test_loop.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    files = [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]
    in_order = list(dict.fromkeys(files))
    assert in_order[: len(LONGEST_FIRST)] == list(LONGEST_FIRST)
    assert in_order[len(LONGEST_FIRST) :][:1] == ["tests/test_crash_resume.py"]
    assert files[-1] == "tests/test_loop.py"  # not slow: last
