"""The documentation build is quiet: reading ``docs/mkdocs.yml`` as ``mkdocs build`` does prints
no theme notice (Material for MkDocs prints an end-of-life banner on import unless told not to)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The config loaded and validated (the theme imported, as the build does) by a process that
# looks like the `mkdocs` command, which is where Material prints its banner.
_LOAD = """
import sys
sys.argv = ["mkdocs", "build"]
from mkdocs.config import load_config
config = load_config("docs/mkdocs.yml")
print(config.theme.name)
"""


def test_reading_the_docs_config_prints_no_theme_banner() -> None:
    env = {k: v for k, v in os.environ.items() if "MKDOCS" not in k}
    done = subprocess.run(
        [sys.executable, "-c", _LOAD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "material"
    assert "end of life" not in done.stderr, done.stderr
    assert "NO_MKDOCS_2_WARNING" not in done.stderr, done.stderr
