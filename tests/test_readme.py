"""The README's quick start stays true: CI runs exactly its commands."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

from agentloop.testing import EmulatedProvider, ProviderServer
from tests.support.markdown import compile_block, python_blocks
from tests.support.notices import without_sdk_notice

ROOT = Path(__file__).resolve().parent.parent


def _quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_quick_start_is_two_commands() -> None:
    """One command runs the demo, one installs and runs the tests."""
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert commands[0].endswith("agentloop demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_commands_verbatim() -> None:
    """.ci/run contains both quick-start commands exactly as the README shows them."""
    ci = (ROOT / ".ci" / "run").read_text()
    for command in _quick_start_commands():
        assert f'"{command}"' in ci, command


def _section(title: str) -> str:
    readme = (ROOT / "README.md").read_text()
    assert f"\n## {title}\n" in readme, f"the README has no section {title!r}"
    return readme.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_is_read_in_five_minutes() -> None:
    """At most 300 lines: what agentloop is, the quick start, one example, a map of the guides
    and a short performance table. The detail lives in the guides (docs/pages/guides/)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; at most 300"


def test_the_readme_has_one_example_and_it_is_a_script() -> None:
    """The one python block is the example (run below), and it runs as a script: no top-level
    ``await``."""
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert len(blocks) == 1, [block.line for block in blocks]
    code = compile_block(blocks[0], "README.md")
    assert not code.co_flags & inspect.CO_COROUTINE, "the example uses top-level await"


def test_the_performance_table_is_five_rows_that_link_the_benchmarks() -> None:
    section = _section("Performance")
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # header, rule
    assert 1 <= len(rows) <= 5, rows
    assert "(benchmarks/README.md)" in section


EXAMPLE_ANSWER = "It is 21 °C in Paris."


def _example_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Example", 1)[1].split("\n## ", 1)[0]
    return python_blocks(section)[0].source


def test_the_readme_example_prints_its_answer_once_and_leaks_nothing(tmp_path: Path) -> None:
    """The README's example, run as written against a loopback Chat Completions server with
    the real OpenAI driver: the answer is printed once, and nothing is left unclosed (aiohttp
    logs an unclosed session; ResourceWarning is an error here)."""
    script = tmp_path / "example.py"
    script.write_text(_example_block())
    with ProviderServer(EmulatedProvider(script=[EXAMPLE_ANSWER])) as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.url + "/v1",
            "OPENAI_API_KEY": "test",
            "PYTHONPATH": str(ROOT),
        }
        done = subprocess.run(
            [sys.executable, "-W", "error::ResourceWarning", str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(EXAMPLE_ANSWER) == 1, done.stdout
    assert without_sdk_notice(done.stderr) == ""
