"""The ``agentloop`` command."""

from __future__ import annotations

from ._main import main as main

__all__ = ["main"]
