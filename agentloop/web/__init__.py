"""agentloop on the web: runs started over HTTP, streamed as server-sent events that a client
resumes with ``Last-Event-ID`` (the run goes on without it; the prompt never runs twice), in
agentloop's own event JSON, the AG-UI protocol or the Vercel AI SDK's UI message stream.

``create_app(agent)`` is the whole HTTP API and page as a Starlette app; ``serve(agent)`` and
``agentloop serve module:agent`` run it under uvicorn. ``RunHub`` and ``sse_response`` are the
parts, for an app of your own (Starlette or FastAPI); ``RunBackend`` is what the app asks of a
hub (``agentloop.durable_web`` has one whose runs are Temporal workflows). Closed by default: 127.0.0.1 unless an
``auth`` is given, sessions owned by their creator, bounded bodies, inputs, runs and streams.
Needs the ``web`` extra (``pip install 'agentloop-runtime[web]'``).
"""

from __future__ import annotations

from ._app import Auth as Auth
from ._app import bearer_token as bearer_token
from ._app import create_app as create_app
from ._hub import EventLog as EventLog
from ._hub import LogTrimmed as LogTrimmed
from ._hub import RunBackend as RunBackend
from ._hub import RunHub as RunHub
from ._hub import RunLog as RunLog
from ._hub import TooMany as TooMany
from ._hub import WebLimits as WebLimits
from ._protocols import PROTOCOLS as PROTOCOLS
from ._protocols import Encoder as Encoder
from ._protocols import encoder as encoder
from ._serve import check_bind as check_bind
from ._serve import load_agent as load_agent
from ._serve import serve as serve
from ._sse import last_event_id as last_event_id
from ._sse import sse_response as sse_response

__all__ = [
    "PROTOCOLS",
    "Auth",
    "Encoder",
    "EventLog",
    "LogTrimmed",
    "RunBackend",
    "RunHub",
    "RunLog",
    "TooMany",
    "WebLimits",
    "bearer_token",
    "check_bind",
    "create_app",
    "encoder",
    "last_event_id",
    "load_agent",
    "serve",
    "sse_response",
]

for _error in (LogTrimmed, TooMany):
    _error.__module__ = __name__  # tracebacks show the public path
