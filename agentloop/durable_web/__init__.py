"""The web front on Temporal: ``agentloop serve --temporal`` replicas behind a load balancer,
and ``agentloop worker`` processes anywhere (the ``[web]`` and ``[temporal]`` extras).

Each run is a durable workflow (``agentloop.temporal``); a replica keeps nothing a caller
needs. Any replica starts, streams, resumes, decides and stops any run its caller owns: the
workflow is the event log (``Last-Event-ID`` reads on exactly after that ``seq``, on any
replica), its memo names the run's owner, and the session store is the one the workers use.
``create_app`` and ``serve`` are ``agentloop.web``'s with a ``TemporalHub``;
``agentloop.temporal.worker`` (``agentloop worker``) serves the runs. The guide *Deploying: replicas and workers* shows the whole of it.
"""

from __future__ import annotations

from ._hub import DurableLog as DurableLog
from ._hub import TemporalHub as TemporalHub
from ._serve import create_app as create_app
from ._serve import serve as serve

__all__ = ["DurableLog", "TemporalHub", "create_app", "serve"]
