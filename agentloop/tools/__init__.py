"""Tools: ``@tool`` functions, ``Toolkit`` classes, ``ToolContext``, ``Toolset`` and ``ToolLimits``."""

from __future__ import annotations

from ._context import ToolContext as ToolContext
from ._limits import ToolLimits as ToolLimits
from ._limits import default_thread_limiter as default_thread_limiter
from ._limits import default_tool_limiter as default_tool_limiter
from ._schema_check import checked_args_model as checked_args_model
from ._tool import Activity as Activity
from ._tool import Tool as Tool
from ._tool import Toolkit as Toolkit
from ._tool import activity as activity
from ._tool import tool as tool
from ._toolset import Toolset as Toolset

__all__ = [
    "Activity",
    "Tool",
    "ToolContext",
    "ToolLimits",
    "Toolkit",
    "Toolset",
    "activity",
    "checked_args_model",
    "default_thread_limiter",
    "default_tool_limiter",
    "tool",
]
