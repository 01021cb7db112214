"""``agentloop serve``: an agent's HTTP API and page under uvicorn, closed by default."""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from agentloop import Agent, UserError
from agentloop.sessions import SessionStore

from ._app import Auth, create_app
from ._gate import is_loopback
from ._hub import RunBackend, WebLimits

_ANY_ADDRESS = frozenset({"", "0.0.0.0", "::", "[::]"})


def check_bind(host: str, auth: Auth | None) -> None:
    """Refuse to serve beyond this machine without authentication, saying why: anyone who can
    reach the server could run the agent's tools with its privileges.

    Args:
        host: The address to listen on.
        auth: The authentication, if any.
    """
    if auth is None and not is_loopback(host):
        raise UserError(
            f"refusing to listen on {host} without authentication: anyone who can reach it "
            "could run the agent's tools with this server's privileges. Set a bearer token "
            "(--token-env VAR, or auth=bearer_token('VAR')), pass your own auth, or listen "
            "on 127.0.0.1"
        )


def load_agent(spec: str) -> Agent[Any, Any]:
    """The agent named by ``module:attribute`` (the current directory is importable).

    Args:
        spec: ``module:attribute``, like ``app:agent``.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UserError(f"expected module:attribute (like app:agent), not {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UserError(f"cannot import {module_name!r}: {exc}") from None
    found: Any = module
    for name in attribute.split("."):
        try:
            found = getattr(found, name)
        except AttributeError:
            raise UserError(f"{module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(found, Agent):
        raise UserError(f"{spec} is a {type(found).__name__}, not an Agent")
    return found


async def serve(
    agent: Agent[Any, Any],
    *,
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
    hub: RunBackend | None = None,
) -> None:
    """Serve ``agent`` (``create_app``) with uvicorn until cancelled. Any address but a
    loopback one needs ``auth``: without it this raises ``UserError`` and serves nothing.
    The server answers to loopback names, ``allow_hosts`` and the address it listens on (when
    it is one address, not all). A request head must arrive within ``limits.head_timeout``
    seconds, and at most ``limits.max_pending_connections`` connections wait for theirs.
    Runs on asyncio (uvicorn's loop). The process's garbage collector is tuned for a server:
    what exists when serving starts is frozen (``gc.freeze``), and the youngest generation is
    collected every 10,000 allocations rather than 700.

    Args:
        agent: The agent to serve.
        host: The address to listen on.
        port: The port (0 picks a free one).
        auth: Who a request is from (``bearer_token()``, or your own).
        store: Where sessions live.
        limits: The server's bounds.
        cors_origins: Origins allowed to call the API from a browser.
        allow_origins: Other origins whose pages may act (``create_app``).
        allow_hosts: Names the server answers to besides loopback ones (``create_app``).
        secret: The server's secret, which keys owner ids (``create_app``).
        log_level: uvicorn's log level.
        access_log: Log each request (uvicorn's access log, at ``info``). Off by default:
            formatting a line per request costs about 2% of a streamed run's CPU.
        hub: Where runs run (``create_app``); its own limits bound the connections too.
    """
    import uvicorn

    from ._conn import bounded_config

    check_bind(host, auth)
    bounds = hub.limits if hub is not None else limits or WebLimits()
    hosts = [*allow_hosts] if host in _ANY_ADDRESS else [*allow_hosts, host]
    app = create_app(
        agent,
        store=store,
        auth=auth,
        limits=limits,
        cors_origins=cors_origins,
        allow_origins=allow_origins,
        allow_hosts=hosts,
        secret=secret,
        hub=hub,
    )
    config = bounded_config(
        app,
        head_timeout=bounds.head_timeout,
        max_pending=bounds.max_pending_connections,
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    _tune_collector()
    await uvicorn.Server(config).serve()


_YOUNG_THRESHOLD = 10_000  # allocations between collections of the youngest generation


def _tune_collector() -> None:
    """What start-up made lives as long as the server: freeze it, so that no collection walks
    it again; and collect the youngest generation every ``_YOUNG_THRESHOLD`` allocations, not
    every 700. With 1,000 streams open, the collector took 38% of the server's CPU, most of it
    in full collections walking every open run's objects; this cut it to a quarter."""
    gc.freeze()
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, _YOUNG_THRESHOLD), *older)
