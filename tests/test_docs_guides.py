"""The guides' code runs: every python block of ``docs/pages/guides/*.md`` is executed, offline.

Each block runs as a script, as written (``python block.py``: top-level ``await`` is a
``SyntaxError``, so async code runs under its own ``anyio.run``), in a fresh namespace
(``<!-- docs: continue -->`` before its fence: in the one of the block before it) with the page's
directory of files a temporary one. ``<!-- docs: skip (why) -->`` marks code
that is not agentloop's (the migration guide's PydanticAI and OpenAI Agents SDK code), and
every skip must say why. Remote models are blocked, so a block cannot reach a provider.
"""

from __future__ import annotations

import gc
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.heap import freeze_what_lives
from tests.support.markdown import CodeBlock, compile_block, compile_script, python_blocks

ROOT = Path(__file__).resolve().parent.parent
GUIDES = ROOT / "docs" / "pages" / "guides"
PAGES = sorted(GUIDES.glob("*.md"))


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("AGENTLOOP_BLOCK_REMOTE_MODELS", "1")
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    froze: list[bool] = []
    freeze = gc.freeze

    def noted_freeze() -> None:
        froze.append(True)
        freeze()

    monkeypatch.setattr(gc, "freeze", noted_freeze)
    yield
    if froze:
        # A guide shows gc.freeze(): what it froze is collectable again, and what the suite
        # froze after collecting (conftest) is frozen again, once the guide's garbage is
        # collected (unfrozen, every later full collection in this worker would walk it).
        gc.unfreeze()
        freeze_what_lives()


def run_block(block: CodeBlock, namespace: dict[str, Any], filename: str) -> None:
    """Run a block as a script would: a block with top-level ``await`` does not compile."""
    exec(compile_script(block, filename), namespace)


def run_page(page: Path) -> int:
    """Run a page's blocks in order; the number run."""
    namespace: dict[str, Any] = {}
    ran = 0
    for block in python_blocks(page.read_text()):
        if block.marker == "skip":
            continue
        if block.marker != "continue":
            namespace = {"__name__": "__main__"}
        run_block(block, namespace, str(page.relative_to(ROOT)))
        ran += 1
    return ran


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_guide_code_runs(page: Path) -> None:
    assert run_page(page) >= 1, f"{page.name} has no python block that runs"


def test_there_are_guides() -> None:
    assert len(PAGES) >= 9


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_every_skip_says_why_and_continues_something(page: Path) -> None:
    blocks = python_blocks(page.read_text())
    for before, block in zip([None, *blocks], blocks, strict=False):
        if block.marker == "skip":
            assert block.reason, f"{page.name}:{block.line}: a skipped block says why"
        if block.marker == "continue":
            assert before is not None and before.marker != "skip", (
                f"{page.name}:{block.line}: continues no block that ran"
            )


def _nav_guides() -> list[tuple[str, str]]:
    """The mkdocs nav's guides, in order: (title, file name)."""
    nav = (ROOT / "docs" / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    section = nav.split("  - Guides:\n", 1)[1].split("\n  - ", 1)[0]
    entries = re.findall(r'^ {6}- "?(.+?)"?: guides/([\w-]+\.md)$', section, re.MULTILINE)
    return [(title, name) for title, name in entries]


def _listed(text: str, prefix: str) -> list[tuple[str, str]]:
    """The guides a markdown list or table links to, in order: (title, file name)."""
    return re.findall(rf"\[([^\]]+)\]\({re.escape(prefix)}([\w-]+\.md)\)", text)


def test_the_nav_lists_every_guide_once() -> None:
    names = [name for _, name in _nav_guides()]
    assert sorted(names) == [page.name for page in PAGES]


def test_the_home_page_lists_the_guides_of_the_nav() -> None:
    """The docs index's list of guides is the nav's: the same pages, titles and order."""
    home = (ROOT / "docs" / "pages" / "index.md").read_text()
    section = home.split("\n## Guides\n", 1)[1].split("\n## ", 1)[0]
    assert _listed(section, "guides/") == _nav_guides()


def test_the_readme_maps_the_guides_of_the_nav() -> None:
    """The README's map of features links every guide, with the nav's titles, in its order."""
    readme = (ROOT / "README.md").read_text()
    assert "\n## Features\n" in readme, "the README has no section 'Features'"
    section = readme.split("\n## Features\n", 1)[1].split("\n## ", 1)[0]
    assert _listed(section, "docs/pages/guides/") == _nav_guides()


def test_the_block_reader() -> None:
    text = "\n".join(
        [
            "```python",
            "a = 1",
            "```",
            "<!-- docs: continue -->",
            '```python title="x.py"',
            "await b()",
            "```",
            "<!-- docs: skip (not ours) -->",
            "```python",
            "import other",
            "```",
            "```sh",
            "echo no",
            "```",
        ]
    )
    blocks = python_blocks(text)
    assert [(b.line, b.marker, b.reason) for b in blocks] == [
        (1, None, ""),
        (5, "continue", ""),
        (9, "skip", "not ours"),
    ]
    assert blocks[1].source == "await b()\n"
    assert compile_block(blocks[1], "x.md").co_flags & inspect.CO_COROUTINE
    assert re.search("import other", blocks[2].source)
