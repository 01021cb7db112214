"""Durable runs on Temporal (the ``[temporal]`` extra): an ``Agent`` runs as a workflow, each
model call and tool call an activity, on any number of workers.

``TemporalAgent(agent)`` is the agent's durable face (``start``, ``run``, ``attach``; with
``session=``, the workers' session store stays the session's source of truth);
``worker(client, agents)`` serves it; ``replayer(agents)`` replays recorded histories;
``connect`` makes a client. Temporal's Python SDK is asyncio-only: so is this module (everything
else in agentloop also runs on trio). The guide *Durable runs on Temporal* says what runs where.
"""

from __future__ import annotations

import importlib

try:
    importlib.import_module("temporalio")
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "agentloop.temporal needs temporalio: pip install 'agentloop-runtime[temporal]'"
    ) from exc

from ._durable import DurableRun as DurableRun
from ._durable import DurableRunFailed as DurableRunFailed
from ._durable import TemporalAgent as TemporalAgent
from ._options import ActivityOptions as ActivityOptions
from ._options import default_tool_retry as default_tool_retry
from ._worker import AgentChanged as AgentChanged
from ._worker import TemporalUnavailable as TemporalUnavailable
from ._worker import connect as connect
from ._worker import replayer as replayer
from ._worker import worker as worker

__all__ = [
    "ActivityOptions",
    "AgentChanged",
    "DurableRun",
    "DurableRunFailed",
    "TemporalAgent",
    "TemporalUnavailable",
    "connect",
    "default_tool_retry",
    "replayer",
    "worker",
]
