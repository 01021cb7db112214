"""The machinery the SDK-backed drivers share: lazy clients, transports, settings, streaming.

The SDK is imported, and its client made, on first use, on the running event loop (a driver that
can compute the direct path's URL and headers itself, ``_sdk_free_request``, skips both). aiohttp,
which that path needs, is imported when the driver is made (at a service's start-up, not during
its first request), unless the driver is made on trio or given a client. Transports:
``"aiohttp"`` (asyncio with the ``[fast]`` extra: aiohttp directly, with the SDK client's URL and
headers, see ``_transport``), ``"aiohttp-sdk"`` (the SDK's own aiohttp-based client), ``"httpx"``
(the SDK's default httpx2 client: asyncio and trio). The clients the driver makes share one TLS
context per process (``tls_context``). ``"auto"`` picks ``"aiohttp"`` under asyncio
when aiohttp is installed, else ``"httpx"``; ``"aiohttp"`` falls back to ``"aiohttp-sdk"`` when the
client's credentials change per request. A client passed in is used as it is (through its own
``post``) and never closed by the driver. The httpx2 clients the driver makes read the
connection while they write a large body (``_read_ahead``), so a reply sent before the body was
read (a proxy's 413) is that reply, not a retried broken pipe.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from abc import abstractmethod
from collections.abc import Awaitable
from typing import Any, ClassVar, Literal, Self

import anyio
import anyio.lowlevel
import sniffio

from agentloop._errors import UserError

from ._base import Model
from ._encode import FragmentCache
from ._sdk_free import DirectRequest
from ._stream import DeltaStream, WireDecoder, check_remote_allowed, is_loopback
from ._transport import (
    ClientShards,
    DirectSender,
    RawResponse,
    SDKSender,
    Sender,
    bound_error_bodies,
    connect_and_read,
    direct_eligible,
    header_secrets,
    preload_direct,
    shard_sizes,
)
from ._types import Message, ModelRequest, ModelSettings, ModelStream, ToolSpec

__all__ = ["SDKModel", "Transport"]

Transport = Literal["auto", "aiohttp", "aiohttp-sdk", "httpx"]

CONNECT_TIMEOUT = 10.0
"""Seconds to connect, when the driver makes the client and no ``timeout`` was given."""
STREAM_IDLE_TIMEOUT = 120.0
"""Seconds a streamed reply may send no byte at all (the HTTP read timeout), by default."""
DOCUMENT_TIMEOUT = 600.0
"""The read timeout of a non-streamed reply (``stream=False``), which arrives all at once."""
_TRANSPORTS = ("auto", "aiohttp", "aiohttp-sdk", "httpx")


@functools.cache
def _aiohttp_installed() -> bool:
    return importlib.util.find_spec("aiohttp") is not None


def _may_run_on_asyncio() -> bool:
    """Whether the driver may take the direct aiohttp path: aiohttp is installed, and it is
    made outside an event loop (at start-up) or on asyncio's."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = "asyncio"
    return library == "asyncio" and _aiohttp_installed()


@functools.cache
def tls_context() -> Any:
    """The TLS context of every HTTP client a driver makes: httpx2's default (the trust store
    of ``SSL_CERT_FILE``, ``SSL_CERT_DIR`` or the system), built once per process. Loading a CA
    bundle takes tens of milliseconds, and a driver makes a client per model and event loop."""
    import httpx2

    return httpx2.create_ssl_context()


def merge_settings(base: ModelSettings | None, request: ModelSettings) -> ModelSettings:
    """``request`` settings over the driver's defaults (``None`` means "not set")."""
    if base is None:
        return request
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(ModelSettings):
        if f.name == "extra":
            continue
        if getattr(request, f.name) is None and getattr(base, f.name) is not None:
            changes[f.name] = getattr(base, f.name)
    if base.extra:
        changes["extra"] = {**base.extra, **request.extra}
    return dataclasses.replace(request, **changes) if changes else request


class SDKModel(Model):
    """A driver that talks to its provider through the provider's official SDK.

    ``stream=False`` asks for whole JSON replies instead of server-sent events (normalised to the
    same deltas). ``transport`` picks the HTTP path when the driver makes its own client:
    ``"auto"``, ``"aiohttp"``, ``"aiohttp-sdk"`` or ``"httpx"`` (see the module docstring).
    ``max_connections`` caps the connection pool of a client the driver makes (on the httpx2
    path, above 64 as several SDK clients of at most 64 connections each: httpcore2's pool checks
    every connection it holds on each request, so one large pool costs O(S²) for S concurrent
    sessions); ``timeout``
    (seconds, or an ``httpx2.Timeout``) replaces our default there: connect within
    ``CONNECT_TIMEOUT`` (10 s), then at most ``STREAM_IDLE_TIMEOUT`` (120 s) without a byte of a
    streamed reply (``DOCUMENT_TIMEOUT``, 600 s, for ``stream=False``). A client passed in keeps
    its own timeouts, and its own transport: with the SDK's httpx2 client, a reply sent before
    a large body was read (a proxy's 413 that closes the connection) can be lost with the failed
    write (on asyncio; on trio over TLS), and the call ends, after its retries, in
    ``ModelConnectionError``. The httpx2 clients the driver makes read the connection while
    they write a large body (``_read_ahead``).
    ``RetryPolicy.attempt_timeout`` caps each attempt as a whole.
    """

    _endpoint: ClassVar[str]
    _request_id_header: ClassVar[str]

    def __init__(
        self,
        model_name: str,
        *,
        client: Any = None,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: ModelSettings | None = None,
        stream: bool = True,
        transport: Transport = "auto",
        max_connections: int | None = None,
        timeout: Any = None,
    ) -> None:
        if transport not in _TRANSPORTS:
            raise UserError(f"transport must be one of {_TRANSPORTS}, not {transport!r}")
        self._model_name = model_name
        self._user_client = client
        self._base_url = base_url
        self._api_key = api_key
        self._settings = settings
        self._streaming = stream
        self._transport: Transport = transport
        self._max_connections = max_connections
        self._timeout = timeout
        self._client: Any = None
        self._sender: Sender | None = None
        self._token: object = None
        self._allowed: tuple[str, bool] | None = None
        self._spare_clients: list[Any] = []
        self.message_cache: FragmentCache[Message] = FragmentCache()
        self.tool_cache: FragmentCache[ToolSpec] = FragmentCache(1024)
        if client is None and transport in ("auto", "aiohttp") and _may_run_on_asyncio():
            preload_direct()

    @property
    def name(self) -> str:
        return self._model_name

    @property
    def transport(self) -> str | None:
        """The transport in use: "aiohttp", "aiohttp-sdk", "httpx", "client" (a client passed
        in), or None before the first call."""
        return None if self._sender is None else self._sender.kind

    # -- what each driver provides ------------------------------------------------------------

    @abstractmethod
    def _make_client(self, http_client: Any) -> Any:
        """A new SDK client on ``http_client``."""

    @abstractmethod
    def _aiohttp_client(self, options: dict[str, Any]) -> Any:
        """The SDK's aiohttp-based HTTP client (``DefaultAioHttpClient(**options)``)."""

    @abstractmethod
    def _httpx_client(self, options: dict[str, Any]) -> Any:
        """The SDK's httpx2 client with its defaults (``DefaultAsyncHttpxClient(**options)``)."""

    @abstractmethod
    def _build_body(self, request: ModelRequest, settings: ModelSettings, stream: bool) -> bytes:
        """The request body as JSON bytes."""

    @abstractmethod
    def _decoder(self) -> WireDecoder:
        """A fresh decoder for one reply."""

    # -- the seam ------------------------------------------------------------------------------

    def stream(self, request: ModelRequest) -> ModelStream:
        cls = type(self)
        return DeltaStream(
            cls._open,  # the functions, with self as the owner: no bound method per reply
            self,
            request,
            self._decoder(),
            streaming=self._streaming,
            provider=self.provider,
            model=self._model_name,
            request_id_header=self._request_id_header,
            max_reply_chars=request.max_reply_chars,
            secrets=cls._secrets,
        )

    def _secrets(self) -> tuple[str, ...]:
        """The credentials requests carry (redacted from whatever errors quote)."""
        sender = self._sender
        return sender.secrets() if sender is not None else ()

    def _open(self, request: ModelRequest) -> Awaitable[RawResponse]:
        """The request's response, posted (a plain function: the stream awaits the post
        itself, and a frame here would be held by every reply in flight)."""
        sender = self._sender_for_loop()
        self._check_allowed(sender.base_url)
        settings = merge_settings(self._settings, request.settings)
        body = self._build_body(request, settings, self._streaming)
        return sender.post(body)

    def build_body(self, request: ModelRequest) -> bytes:
        """The exact body ``stream(request)`` would send (for tests and debugging)."""
        settings = merge_settings(self._settings, request.settings)
        return self._build_body(request, settings, self._streaming)

    async def aclose(self) -> None:
        sender, self._sender = self._sender, None
        clients = [self._client, *self._spare_clients]
        self._client, self._spare_clients = None, []
        with anyio.CancelScope(shield=True):
            if sender is not None:
                await sender.aclose()
            for client in clients:
                if client is not None:
                    await client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- clients ------------------------------------------------------------------------------

    def _sender_for_loop(self) -> Sender:
        token = anyio.lowlevel.current_token().native_token
        if self._sender is not None and self._token is token:
            return self._sender
        if self._user_client is not None:
            sender: Sender = SDKSender(self._user_client, self._endpoint, "client")
        else:
            kind = self._choose_transport()
            client = None
            direct = self._sdk_free_request() if kind == "aiohttp" else None
            if direct is not None:
                sender = DirectSender(
                    direct.base_url,
                    self._endpoint,
                    direct.headers,
                    secrets=header_secrets(direct.headers, None),
                    timeout=self._direct_timeouts(),
                    provider=self.provider,
                    model=self._model_name,
                    max_connections=self._max_connections,
                )
                self._sender, self._token = sender, token
                return sender
            if kind == "aiohttp":
                # The SDK client only supplies URL and headers here: give it an HTTP client that
                # builds no transport (no TLS context to load, no pool).
                client = self._make_client(_unused_http_client())
                if not direct_eligible(client):
                    self._spare_clients.append(client)
                    client, kind = None, "aiohttp-sdk"
            shards = None
            if client is None:
                first, *more = shard_sizes(self._max_connections)
                if kind == "httpx":
                    client = self._httpx_sdk_client(first)
                    if more:
                        sizes = [n for n in (first, *more) if n is not None]
                        shards = ClientShards(
                            client, lambda n: self._spare(self._httpx_sdk_client(n)), sizes
                        )
                else:
                    options = self._http_options(self._max_connections)
                    http_client = self._aiohttp_client(options)
                    bound_error_bodies(http_client)
                    client = self._make_client(http_client)
            self._client = client
            if kind == "aiohttp":
                sender = DirectSender.from_client(
                    client,
                    self._endpoint,
                    provider=self.provider,
                    model=self._model_name,
                    max_connections=self._max_connections,
                )
            else:
                sender = SDKSender(client, self._endpoint, kind, shards=shards)
        self._sender, self._token = sender, token
        return sender

    def _sdk_free_request(self) -> DirectRequest | None:
        """The URL and headers for the direct aiohttp path computed without the SDK, when the
        driver can (see ``_sdk_free``); ``None``: make the SDK client to learn them."""
        return None

    def _direct_timeouts(self) -> tuple[float | None, float | None]:
        """The connect and read timeouts ``_client_options`` gives an SDK client."""
        if self._timeout is not None:
            return connect_and_read(self._timeout)
        return CONNECT_TIMEOUT, STREAM_IDLE_TIMEOUT if self._streaming else DOCUMENT_TIMEOUT

    def _choose_transport(self) -> str:
        asyncio = sniffio.current_async_library() == "asyncio"
        wanted = self._transport
        if wanted == "httpx":
            return "httpx"
        if wanted == "auto":
            return "aiohttp" if asyncio and _aiohttp_installed() else "httpx"
        if not asyncio:
            raise UserError(f"transport={wanted!r} needs asyncio; use 'auto' or 'httpx' on trio")
        if not _aiohttp_installed():
            raise UserError(
                f"transport={wanted!r} needs aiohttp: pip install 'agentloop-runtime[fast]'"
            )
        return wanted

    def _http_options(self, pool: int | None) -> dict[str, Any]:
        """Options of an HTTP client the driver makes: the shared TLS context, and a pool of
        ``pool`` connections (``None``: the SDK's default)."""
        options: dict[str, Any] = {"verify": tls_context()}
        if pool is not None:
            import httpx2

            options["limits"] = httpx2.Limits(max_connections=pool, max_keepalive_connections=pool)
        return options

    def _httpx_sdk_client(self, pool: int | None) -> Any:
        """A new SDK client on a new httpx2 client of the driver's, with a pool of ``pool``
        connections: it reads ahead while it writes a large body, and reads an error body only
        in part."""
        from ._read_ahead import read_ahead_on_writes

        http_client = self._httpx_client(self._http_options(pool))
        read_ahead_on_writes(http_client)
        bound_error_bodies(http_client)
        return self._make_client(http_client)

    def _spare(self, client: Any) -> Any:
        """``client``, closed with the driver's own."""
        self._spare_clients.append(client)
        return client

    def _check_allowed(self, base_url: str) -> None:
        if self._allowed is None or self._allowed[0] != base_url:
            self._allowed = (base_url, is_loopback(base_url))
        if not self._allowed[1]:
            check_remote_allowed(base_url, self.provider)

    def _client_options(self) -> dict[str, Any]:
        """Constructor options for an SDK client the driver makes."""
        if self._timeout is not None:
            return {"timeout": self._timeout}
        import httpx2

        read = STREAM_IDLE_TIMEOUT if self._streaming else DOCUMENT_TIMEOUT
        return {"timeout": httpx2.Timeout(read, connect=CONNECT_TIMEOUT)}

    def _resolved_key(self, env: str | tuple[str, ...]) -> str | None:
        import os

        if self._api_key:
            return self._api_key
        for name in (env,) if isinstance(env, str) else env:
            value = os.environ.get(name)
            if value:
                return value
        return None


def _unused_http_client() -> Any:
    """An httpx2 client whose transport is never used and loads nothing (see ``_transport``)."""
    import httpx2

    class NoTransport(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            raise RuntimeError("agentloop sends this request itself; this transport is unused")

    return httpx2.AsyncClient(transport=NoTransport(), trust_env=False)
