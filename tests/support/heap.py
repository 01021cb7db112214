"""The test process's heap and the garbage collector."""

from __future__ import annotations

import gc


def freeze_what_lives() -> None:
    """Collect, then freeze what survives (``gc.freeze``): it lives on (imported modules, the
    SDKs, caches), and frozen it is left out of every later full collection in this process,
    which then walks only what the tests made since."""
    gc.collect()
    gc.freeze()
