"""Test doubles for agents: scripted and function models, and a loopback provider server that
plays recorded or scripted provider responses to the real SDK clients over a socket, or emulates
a provider (``EmulatedProvider``; ``agentloop emulate`` on the command line).

Real provider calls fail inside a test suite that sets ``AGENTLOOP_BLOCK_REMOTE_MODELS=1``
(drivers then refuse any base URL that is not loopback); agentloop's own suite sets it.
Importing this package registers the ``test:`` model provider (``Agent("test:echo")``).
"""

from __future__ import annotations

from ..models import register_provider as _register_provider
from ._faults import FaultInjector as FaultInjector
from ._faults import FaultProfile as FaultProfile
from ._faults import corrupted as corrupted
from ._faults import rate_limited as rate_limited
from ._faults import reset_midway as reset_midway
from ._faults import server_failed as server_failed
from ._faults import slowed as slowed
from ._models import EchoModel as EchoModel
from ._models import FunctionModel as FunctionModel
from ._models import Reply as Reply
from ._models import ScriptedCall as ScriptedCall
from ._models import ScriptedModel as ScriptedModel
from ._models import ScriptError as ScriptError
from ._models import Thought as Thought
from ._models import call as call
from ._scenarios import EmulatedProvider as EmulatedProvider
from ._script import Chunk as Chunk
from ._script import RecordedRequest as RecordedRequest
from ._script import ScriptedResponse as ScriptedResponse
from ._script import load_recording as load_recording
from ._server import ProviderServer as ProviderServer
from ._server import ServerStats as ServerStats
from ._turns import EmulatedCall as EmulatedCall
from ._turns import EmulatedTurn as EmulatedTurn

_register_provider("test", EchoModel)  # "test:echo" and the like, for smoke tests

__all__ = [
    "Chunk",
    "EchoModel",
    "EmulatedCall",
    "EmulatedProvider",
    "EmulatedTurn",
    "FaultInjector",
    "FaultProfile",
    "FunctionModel",
    "ProviderServer",
    "RecordedRequest",
    "Reply",
    "ScriptError",
    "ScriptedCall",
    "ScriptedModel",
    "ScriptedResponse",
    "ServerStats",
    "Thought",
    "call",
    "corrupted",
    "load_recording",
    "rate_limited",
    "reset_midway",
    "server_failed",
    "slowed",
]
