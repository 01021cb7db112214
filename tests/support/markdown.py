"""The python code blocks of the project's markdown (the README, the documentation's guides),
for the tests that compile or run them.

A block may be marked by an HTML comment on the line right before its fence (invisible on the
rendered page): ``<!-- docs: skip (why) -->`` for code that is not agentloop's or cannot run
here, ``<!-- docs: continue -->`` for a block that runs in the namespace of the one before it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from types import CodeType
from typing import Literal

_OPEN = re.compile(r"^```python\b.*$")
_CLOSE = re.compile(r"^```\s*$")
_MARKER = re.compile(r"^<!--\s*docs:\s*(skip|continue)\b(.*?)-->\s*$")


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """A fenced python block: its source, the line of its opening fence (from 1) and marker."""

    source: str
    line: int
    marker: Literal["skip", "continue"] | None = None
    reason: str = ""


def python_blocks(text: str) -> list[CodeBlock]:
    """Every ```` ```python ```` block of a markdown text, in order."""
    blocks: list[CodeBlock] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not _OPEN.match(lines[i]):
            i += 1
            continue
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not _CLOSE.match(lines[i]):
            body.append(lines[i])
            i += 1
        marker = _MARKER.match(lines[start - 1].strip()) if start else None
        blocks.append(
            CodeBlock(
                source="\n".join(body) + "\n",
                line=start + 1,
                marker=marker.group(1) if marker else None,  # type: ignore[arg-type]
                reason=marker.group(2).strip(" ():-") if marker else "",
            )
        )
        i += 1
    return blocks


def compile_block(block: CodeBlock, filename: str) -> CodeType:
    """The block compiled as a module, top-level ``await`` allowed; its line numbers are the
    markdown file's, so a traceback points into the page."""
    source = "\n" * block.line + block.source
    code: CodeType = compile(source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    return code


def compile_script(block: CodeBlock, filename: str) -> CodeType:
    """The block compiled as a script runs it (``python file.py``): top-level ``await`` is the
    ``SyntaxError`` a reader who copies the block would get. Line numbers are the markdown file's."""
    source = "\n" * block.line + block.source
    code: CodeType = compile(source, filename, "exec")
    return code
