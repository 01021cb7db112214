"""The web app on Temporal: ``create_app``, and ``serve`` (``agentloop serve --temporal``). Its
runs are served by ``agentloop.temporal.worker`` (``agentloop worker``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from temporalio.client import Client

from agentloop import Agent
from agentloop.sessions import SessionStore
from agentloop.temporal import TemporalAgent
from agentloop.web import Auth, WebLimits
from agentloop.web import create_app as create_web_app
from agentloop.web import serve as serve_web

from ._hub import TemporalHub


def create_app(
    agent: Agent[Any, Any] | TemporalAgent[Any],
    *,
    temporal: str | Client,
    namespace: str = "default",
    task_queue: str | None = None,
    store: SessionStore | None = None,
    limits: WebLimits | None = None,
    secret: bytes | str | None = None,
    **options: Any,
) -> Starlette:
    """``agentloop.web.create_app`` with its runs on Temporal (a ``TemporalHub``): run as many
    replicas as you like behind a load balancer, and ``agentloop worker`` processes anywhere.

    Args:
        agent: The agent, or its ``TemporalAgent``.
        temporal: The Temporal server's ``host:port``, or a connected client.
        namespace: The Temporal namespace.
        task_queue: The task queue the workers serve (default ``agentloop``).
        store: The session store the workers share (default: the agent's ``store``).
        limits: The server's bounds.
        secret: The server's secret, which keys owner ids: the same on every replica (given,
            ``AGENTLOOP_SECRET``, or kept in the store they share).
        **options: ``create_app``'s others (``auth``, ``cors_origins``, ``allow_hosts``, …).
    """
    hub = TemporalHub(
        agent,
        temporal=temporal,
        namespace=namespace,
        task_queue=task_queue,
        store=store,
        limits=limits,
        secret=secret,
    )
    return create_web_app(hub.durable.agent, hub=hub, **options)


async def serve(
    agent: Agent[Any, Any] | TemporalAgent[Any],
    *,
    temporal: str | Client,
    namespace: str = "default",
    task_queue: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    auth: Auth | None = None,
    store: SessionStore | None = None,
    limits: WebLimits | None = None,
    cors_origins: Sequence[str] = (),
    allow_origins: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
    secret: bytes | str | None = None,
    log_level: str = "info",
    access_log: bool = False,
) -> None:
    """``agentloop.web.serve`` with its runs on Temporal (``create_app``): one replica.

    Args:
        agent: The agent, or its ``TemporalAgent``.
        temporal: The Temporal server's ``host:port``, or a connected client.
        namespace: The Temporal namespace.
        task_queue: The task queue the workers serve (default ``agentloop``).
        host: The address to listen on.
        port: The port (0 picks a free one).
        auth: Who a request is from: give every replica the same (``bearer_token()`` with the
            same ``AGENTLOOP_SECRET``), so that a caller owns its runs on each.
        store: The session store the workers share (default: the agent's ``store``).
        limits: The server's bounds.
        cors_origins: Origins allowed to call the API from a browser.
        allow_origins: Other origins whose pages may act.
        allow_hosts: Names the server answers to besides loopback ones.
        secret: The server's secret, which keys owner ids (``create_app``).
        log_level: uvicorn's log level.
        access_log: Log each request (uvicorn's access log; off by default).
    """
    hub = TemporalHub(
        agent,
        temporal=temporal,
        namespace=namespace,
        task_queue=task_queue,
        store=store,
        limits=limits,
        secret=secret,
    )
    await serve_web(
        hub.durable.agent,
        host=host,
        port=port,
        auth=auth,
        cors_origins=cors_origins,
        allow_origins=allow_origins,
        allow_hosts=allow_hosts,
        log_level=log_level,
        access_log=access_log,
        hub=hub,
    )
