"""anyio's asyncio backend, read where its public API costs too much on the hot path: the
event channel's cancel check and a model attempt's deadline read each task's anyio cancel
scopes (``_task_states``, ``_cancel_called``, ``_shield``, ``_parent_scope``). Probed once per
backend; a version without them gets ``None``, and its callers anyio's public way."""

from __future__ import annotations

import functools
import sys
from typing import Any


@functools.cache
def asyncio_internals(backend: Any) -> Any:
    """anyio's asyncio backend module, if it has what agentloop reads (asked once per
    backend); else ``None``.

    Args:
        backend: The running anyio backend class (``get_async_backend()``).
    """
    module = sys.modules.get(backend.__module__)  # the backend is a class
    if module is None or not module.__name__.endswith("._asyncio"):
        return None
    try:  # a fresh scope has the attributes read (slots or not, as versions differ)
        probe = module.CancelScope()
    except Exception:
        return None
    if not all(hasattr(probe, name) for name in ("_cancel_called", "_shield", "_parent_scope")):
        return None
    if not all(
        hasattr(module, name) for name in ("_task_states", "current_task", "get_running_loop")
    ):
        return None
    if "cancel_scope" not in getattr(getattr(module, "TaskState", None), "__slots__", ()):
        return None
    return module
