"""Run every example as a user would, offline, each within 20 seconds (CI=true).

An example fails when it exits non-zero, or when it leaks: it runs with ResourceWarning as an
error, but a warning raised in a finaliser is only printed ("Exception ignored in ..."), and
aiohttp logs an unclosed session or connector ("Unclosed client session") instead of warning;
so stderr is read for both.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

TIMEOUT = 20.0
LEAK = re.compile(r"ResourceWarning|^Unclosed ", re.MULTILINE)


def leaks(stderr: str) -> list[str]:
    """The lines of ``stderr`` that tell of an unclosed resource."""
    return [line for line in stderr.splitlines() if LEAK.search(line)]


def run_example(path: Path, *, cwd: Path, env: dict[str, str]) -> tuple[bool, str]:
    """Run one example; whether it passed, and what to show when it did not."""
    try:
        proc = subprocess.run(
            [sys.executable, "-W", "error::ResourceWarning", str(path)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return False, f"did not exit within {TIMEOUT:.0f}s"
    leaked = leaks(proc.stderr)
    detail = (proc.stdout + proc.stderr)[-2000:]
    if leaked:
        detail += "\nleaked (close what you open: `async with agent:`):\n  " + "\n  ".join(leaked)
    return proc.returncode == 0 and not leaked, detail


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    examples = sorted((root / "examples").glob("*.py"))
    env = {**os.environ, "CI": "true"}
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        env.pop(key, None)  # examples must run offline on the scripted model
    failed = []
    for path in examples:
        start = time.perf_counter()
        ok, detail = run_example(path, cwd=root, env=env)
        took = time.perf_counter() - start
        print(f"{'ok  ' if ok else 'FAIL'} {path.name} ({took:.1f}s)")
        if not ok:
            failed.append(path.name)
            print(detail)
    print(f"{len(examples) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
