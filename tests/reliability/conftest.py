"""Reliability tests: unclosed resources are errors here too (the suite's filterwarnings), and
the collector runs at the end of each module so that one held in a reference cycle warns too.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from ._support import collect_garbage


@pytest.fixture(autouse=True, scope="module")
def _collect_garbage_at_the_end() -> Iterator[None]:
    yield
    collect_garbage()
    # What is left lives on (the SDKs the tests imported since collection, caches): frozen,
    # as conftest froze what collecting made, so that later full collections skip it (it
    # made each module's end take a third of a second or more).
    gc.freeze()
