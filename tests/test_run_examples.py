""".ci/run_examples.py fails an example that leaks: an unclosed socket, or an aiohttp session
left open (which aiohttp only logs), even though the example itself exits 0."""

from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_examples", ROOT / ".ci" / "run_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPTS = {
    "clean": """
        import socket
        with socket.socket():
            print("closed")
    """,
    "socket": """
        import socket
        s = socket.socket()
        print("left open")
    """,
    "aiohttp": """
        import asyncio
        import aiohttp

        async def main():
            aiohttp.ClientSession()  # never closed

        asyncio.run(main())
    """,
}


@pytest.mark.parametrize(
    ("script", "passes"), [("clean", True), ("socket", False), ("aiohttp", False)]
)
def test_an_example_that_leaks_fails(
    runner: ModuleType, tmp_path: Path, script: str, passes: bool
) -> None:
    path = tmp_path / f"example_{script}.py"
    path.write_text(textwrap.dedent(SCRIPTS[script]))
    ok, detail = runner.run_example(path, cwd=tmp_path, env=dict(os.environ))
    assert ok is passes, detail
    if not passes:
        assert "leaked" in detail and "ResourceWarning" in detail


def test_aiohttp_logged_leaks_are_found(runner: ModuleType) -> None:
    """What aiohttp writes when ResourceWarning is not an error: logged lines, no warning."""
    stderr = (
        "Unclosed client session\n"
        "client_session: <aiohttp.client.ClientSession object at 0x7f>\n"
        "Unclosed connector\n"
        "connections: ['deque([...])']\n"
    )
    assert runner.leaks(stderr) == ["Unclosed client session", "Unclosed connector"]
    assert runner.leaks("all fine\nnothing Unclosed here\n") == []
