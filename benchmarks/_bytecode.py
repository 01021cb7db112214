"""Fresh processes that load compiled bytecode, as a deployed service's do."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

_NAMES = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")


@contextlib.contextmanager
def cached_bytecode() -> Iterator[None]:
    """Processes started meanwhile keep their compiled bytecode. With ``PYTHONDONTWRITEBYTECODE``
    set (CI sets it) every fresh process would compile agentloop from source, and an import or
    first-run figure would count the compiler; instead they share a temporary cache
    (``PYTHONPYCACHEPREFIX``) that the benchmark's warm-up run fills."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        yield
        return
    saved = {name: os.environ.get(name) for name in _NAMES}
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-pycache-") as cache:
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = cache
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
