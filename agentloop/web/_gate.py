"""What the app refuses before it routes a request: loopback is not a wall (DESIGN §8).

Any web page the user visits can reach 127.0.0.1, and a page whose name it has rebound to
127.0.0.1 reads what the server answers. So, with a token or without:

- a ``Host`` that is neither a loopback name nor a configured host is 400 (DNS rebinding);
- a state-changing request from another origin (``Origin``, else ``Sec-Fetch-Site``) is 403,
  and so is a read of the API (``GET /api/...``: a run's events, a session's history) or a
  WebSocket handshake: an ``EventSource`` or an ``<img>`` sends no preflight, and even an
  answer the page cannot read holds a stream slot and tells it a status and a timing. The page
  itself (``/`` and its assets) holds no run data: a link from another site opens it;
- a body not declared ``application/json`` is 415: a "simple" cross-site request, a form and a
  ``no-cors`` fetch cannot declare it without a preflight, which CORS-off refuses.

A request without ``Origin`` and ``Sec-Fetch-Site`` is not a browser's on another site's behalf
(browsers send ``Origin`` with every POST), so programs and SDKs pass as before.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from typing import Any, final

from starlette.types import ASGIApp, Receive, Scope, Send

_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_BODIES = frozenset({"POST", "PUT", "PATCH"})
_READS = frozenset({"GET", "HEAD"})
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, without a port) only this machine can reach."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, str]:
    """A ``Host`` header's name (lowercased, IPv6 in brackets) and port (``""`` if none)."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        return name + "]", rest.removeprefix(":")
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit():
        return name, port
    return value, ""


def _host_pattern_matches(pattern: str, name: str) -> bool:
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return name.endswith(pattern[1:])
    return name == pattern


def _origin_key(origin: str) -> str:
    """``scheme://host[:port]``, lowercased, without the scheme's default port."""
    scheme, sep, authority = origin.strip().lower().partition("://")
    if not sep:
        return origin.strip().lower()
    name, port = _split_host(authority.rstrip("/"))
    if port and port != _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{name}:{port}"
    return f"{scheme}://{name}"


def _authority(host: str, port: str, scheme: str) -> str:
    return f"{host}:{port}" if port and port != _DEFAULT_PORTS.get(scheme) else host


@final
class RequestGate:
    """ASGI middleware (outermost): the refusals above, answered as JSON ``{"error": ...}``.

    Args:
        app: The app behind the gate.
        allow_hosts: Names admitted besides loopback ones: exact (``agent.example``), a
            subdomain pattern (``*.example.com``), or ``*`` for any (no rebinding check).
        allow_origins: Origins admitted besides the server's own (``https://app.example``),
            or ``*`` for any (no cross-site check).
    """

    def __init__(
        self, app: ASGIApp, *, allow_hosts: Iterable[str] = (), allow_origins: Iterable[str] = ()
    ) -> None:
        self.app = app
        self._hosts = tuple(h.strip().lower() for h in allow_hosts)
        self._origins = frozenset(_origin_key(o) for o in allow_origins if o.strip() != "*")
        self._any_origin = any(o.strip() == "*" for o in allow_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _wanted(scope)
        name, port = _split_host(headers.get("host", ""))
        if not self.host_allowed(name):
            await _refuse(scope, receive, send, 400, "this server does not answer to that Host")
            return
        method = scope.get("method", "GET")
        if _origin_checked(scope, method):
            scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
            if not self._origin_allowed(headers, _authority(name, port, scheme)):
                await _refuse(
                    scope, receive, send, 403, "cross-origin requests are refused (--allow-origin)"
                )
                return
            if method in _BODIES and not _declares_json(headers.get("content-type")):
                await _refuse(
                    scope,
                    receive,
                    send,
                    415,
                    "the body must be JSON (Content-Type: application/json)",
                )
                return
        await self.app(scope, receive, send)

    def host_allowed(self, name: str) -> bool:
        """Whether a ``Host`` name (without its port) is one this server answers to."""
        if not name:
            return False
        return is_loopback(name) or any(_host_pattern_matches(p, name) for p in self._hosts)

    def _origin_allowed(self, headers: dict[str, str], own_authority: str) -> bool:
        origin = headers.get("origin")
        if origin is not None:
            if self._any_origin:
                return True
            key = _origin_key(origin)
            if key in self._origins:
                return True
            _, sep, authority = key.partition("://")
            return bool(sep) and origin.strip().lower() != "null" and authority == own_authority
        site = headers.get("sec-fetch-site")
        return site is None or site.lower() in ("same-origin", "none") or self._any_origin


_WANTED = frozenset({b"host", b"origin", b"sec-fetch-site", b"content-type"})


def _wanted(scope: Scope) -> dict[str, str]:
    """The headers the gate reads, in one pass (the first of each, as ``Headers.get``)."""
    found: dict[str, str] = {}
    for raw, value in scope["headers"]:
        key = raw.lower()  # ASGI servers lowercase names; one that did not is read the same
        if key in _WANTED:
            found.setdefault(key.decode(), value.decode("latin-1"))
    return found


def _origin_checked(scope: Scope, method: str) -> bool:
    """Whether the request must come from an admitted origin: one that acts, a read of the
    API, a WebSocket; not a preflight (``OPTIONS``) nor a fetch of the page."""
    if scope["type"] == "websocket":
        return True
    if method not in _SAFE:
        return True
    return method in _READS and _route_path(scope).startswith("/api/")


def _route_path(scope: Scope) -> str:
    """The path the app routes, without the prefix it is mounted under (as Starlette does)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] == "/":
        return path[len(root) :]
    return path


def _declares_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = json.dumps({"error": message}).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
