"""Run every example as a user would, offline, each within 20 seconds (CI=true)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

TIMEOUT = 20.0


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    examples = sorted((root / "examples").glob("*.py"))
    env = {**os.environ, "CI": "true"}
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        env.pop(key, None)  # examples must run offline on the scripted model
    failed = []
    for path in examples:
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, str(path)],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
            ok = proc.returncode == 0
            detail = (proc.stdout + proc.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            ok, detail = False, f"did not exit within {TIMEOUT:.0f}s"
        took = time.perf_counter() - start
        print(f"{'ok  ' if ok else 'FAIL'} {path.name} ({took:.1f}s)")
        if not ok:
            failed.append(path.name)
            print(detail)
    print(f"{len(examples) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
