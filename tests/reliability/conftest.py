"""Reliability tests: unclosed resources are errors here too (the suite's filterwarnings), and
the collector runs at the end of each module so that one held in a reference cycle warns too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._support import collect_garbage


@pytest.fixture(autouse=True, scope="module")
def _collect_garbage_at_the_end() -> Iterator[None]:
    yield
    collect_garbage()  # then the suite's conftest freezes what survives, at every module's end
