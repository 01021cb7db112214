"""Test doubles for agents: scripted and function models.

Real provider calls fail inside a test suite that sets ``AGENTLOOP_BLOCK_REMOTE_MODELS=1``
(drivers then refuse any base URL that is not loopback); agentloop's own suite sets it.
"""

from __future__ import annotations

from ._models import EchoModel as EchoModel
from ._models import FunctionModel as FunctionModel
from ._models import Reply as Reply
from ._models import ScriptedCall as ScriptedCall
from ._models import ScriptedModel as ScriptedModel
from ._models import ScriptError as ScriptError
from ._models import Thought as Thought
from ._models import call as call

__all__ = [
    "EchoModel",
    "FunctionModel",
    "Reply",
    "ScriptError",
    "ScriptedCall",
    "ScriptedModel",
    "Thought",
    "call",
]
