"""How a prebuilt request body reaches the provider, and how the reply's bytes come back.

Two senders, one shape (``post(body) -> RawResponse``):

- ``SDKSender`` sends through the SDK's low-level ``client.post(path, content=..., stream=True,
  cast_to=httpx2.Response)``: the SDK builds the request (auth, base URL, headers), raises its
  typed status errors, and hands back the raw streaming response; its retries are off per
  request (``max_retries=0``). This is the portable path (httpx2, asyncio and trio) and the path
  for clients whose credentials change per request (refreshed tokens, workload identity).
- ``DirectSender`` (asyncio with aiohttp, static credentials) posts with aiohttp directly, using
  the URL, auth headers and default headers the SDK client computed (its public ``base_url``,
  ``auth_headers`` and ``default_headers``). Profiling showed the SDK's per-request machinery
  (options copies, header and URL re-parsing, the httpx2 adapter over aiohttp) costing about
  400 µs per request, as much as the rest of a streamed turn. Error statuses are classified by the
  same function as the SDK's typed errors.

Reading: the SDK path reads the transport's byte stream directly rather than through
``aiter_raw()``, whose four nested async generators leave the innermost one to the garbage
collector when a stream is closed early (trio reports that as a ResourceWarning).

Private attributes are read only on the versions they were checked on (``CHECKED``), each
path gated on the distributions it reads: the direct read of a reply, the bounded error body
and the read ahead of the httpx2 clients the driver makes (``_read_ahead``) on httpx2 and
httpcore2 (``HTTPX``); the direct aiohttp transport on the provider's SDK (its credential
attributes, and the headers ``_sdk_free`` reproduces). Elsewhere the SDK's own path runs. A
version newer than the checked range turns its paths off with one ``UncheckedVersionWarning``
per distribution that says what was turned off; an older one (the floors, which CI's
lowest-versions stage runs the suite on) only logs it. ``tests/models/test_transport_internals.py``
fails when CI's pinned versions leave ``CHECKED`` or an attribute read here changes.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import re
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from agentloop._errors import ModelStreamError

from ._bounds import Chunks, Inflating, read_prefix
from ._errors_map import error_from_status, secrets_of

__all__ = [
    "CHECKED",
    "HTTPX",
    "DirectSender",
    "RawResponse",
    "SDKSender",
    "Sender",
    "UncheckedVersionWarning",
    "connect_and_read",
    "direct_eligible",
    "header_secrets",
    "internals_checked",
    "preload_direct",
    "release",
    "turned_off",
    "version_checked",
]

logger = logging.getLogger("agentloop")

# The versions whose private attributes this module was checked on: [from, to) per distribution.
# Widen a range only after tests/models/test_transport_internals.py passes on the new version.
CHECKED: Final = {
    "httpx2": ((2, 16), (2, 18)),
    "httpcore2": ((2, 16), (2, 18)),
    "openai": ((3, 57), (3, 64)),
    "anthropic": ((2, 14), (2, 18)),
}


HTTPX: Final = ("httpx2", "httpcore2")
"""The distributions whose internals the httpx2 paths read (no provider SDK among them)."""

# What each distribution's private attributes serve, for the warning that turns them off.
_SERVES: Final = {
    "httpx2": "the read ahead that keeps a proxy's 413 sent before the request body was read, "
    "the bounded read of error bodies and the direct read of replies (the httpx2 clients "
    "agentloop makes)",
    "openai": "the direct aiohttp transport: transport='aiohttp' sends through the SDK's own "
    "aiohttp client ('aiohttp-sdk'), some 400 µs more per request",
}
_SERVES_BY: Final = {"httpcore2": "httpx2", "anthropic": "openai"}


class UncheckedVersionWarning(RuntimeWarning):
    """A dependency newer than the versions agentloop's fast paths were checked on: those paths
    are off (the SDK's portable path runs), told once per distribution."""


_told: set[str] = set()
# The distributions found outside their checked range, with the version found (newer or older).
_off: dict[str, str] = {}


def turned_off() -> dict[str, str]:
    """The distributions whose fast paths were turned off so far, by the version found."""
    return dict(_off)


def release(version: str) -> tuple[int, ...]:
    """``"2.16.2"`` -> ``(2, 16, 2)``; a pre-release counts as its release (``"3.0rc1"`` -> (3, 0))."""
    return tuple(int(m.group()) for m in (re.match(r"\d+", p) for p in version.split(".")) if m)


def version_checked(dist: str, found: str | None) -> bool:
    """Whether version ``found`` of ``dist`` is in its ``CHECKED`` range; a newer one is told
    once (``UncheckedVersionWarning``), an older one logged."""
    if found is None:
        return False
    low, high = CHECKED[dist]
    if low <= release(found) < high:
        return True
    _off[dist] = found
    if release(found) < low:
        logger.debug("%s %s is older than the direct paths were checked on: SDK path", dist, found)
    elif dist not in _told:
        _told.add(dist)
        below = ".".join(map(str, high))
        serves = _SERVES[_SERVES_BY.get(dist, dist)]
        warnings.warn(
            f"{dist} {found} is newer than the releases this agentloop was checked on "
            f"(from {'.'.join(map(str, low))}, below {below}): turned off {serves}. The rest "
            f"works as before; {dist}<{below} or a newer agentloop keeps them.",
            UncheckedVersionWarning,
            stacklevel=2,
        )
    return False


@functools.cache
def internals_checked(*dists: str) -> bool:
    """Whether each of ``dists`` (every distribution in ``CHECKED`` when none is named) is
    installed at a version checked there (see ``version_checked``)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in dists or tuple(CHECKED):
        try:
            found: str | None = version(dist)
        except PackageNotFoundError:
            found = None
        if not version_checked(dist, found):
            return False
    return True


# We inflate these ourselves, in bounded steps (see ``_bounds``); the direct path asks for them
# only. Other encodings (which we never ask for) are left to the SDK's client.
_INFLATABLE = frozenset({"gzip", "x-gzip", "deflate"})
ACCEPT_ENCODING = "gzip, deflate"
_LARGE_BODY = 1 << 20
# Connections per pool of the httpx2 clients a driver makes (``ClientShards``).
SHARD_CONNECTIONS: Final = 64


class RawResponse(Protocol):
    """A streaming HTTP response, whatever the client library."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def chunks(self) -> Chunks: ...

    async def aclose(self) -> None: ...


class Sender(Protocol):
    base_url: str
    kind: str

    async def post(self, body: bytes) -> RawResponse: ...

    async def aclose(self) -> None: ...

    def secrets(self) -> tuple[str, ...]:
        """The credentials this sender puts on a request (redacted from quoted replies)."""
        ...


class _GeneratorChunks:
    """Chunks from one async generator that we close ourselves."""

    __slots__ = ("_gen",)

    def __init__(self, gen: Any) -> None:
        self._gen = gen

    def __anext__(self) -> Awaitable[bytes]:
        return self._gen.__anext__()  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        await self._gen.aclose()


class _AiohttpChunks:
    """Chunks read straight from aiohttp's stream reader (no generator layers)."""

    __slots__ = ("_content", "eof")

    def __init__(self, content: Any) -> None:
        self._content = content
        self.eof = False

    async def __anext__(self) -> bytes:
        data: bytes = await self._content.readany()
        if not data:
            self.eof = True
            raise StopAsyncIteration
        return data

    async def aclose(self) -> None:
        pass  # closing the response releases or closes the connection


def _content_encoding(headers: Mapping[str, str]) -> str:
    return (headers.get("content-encoding") or "").strip().lower()


def _httpx_chunks(response: Any) -> Chunks:
    encoding = _content_encoding(response.headers)
    if encoding in ("", "identity"):
        return _raw_httpx_chunks(response)
    if encoding in _INFLATABLE:
        return Inflating(_raw_httpx_chunks(response), encoding)
    return _GeneratorChunks(response.aiter_bytes())


def _raw_httpx_chunks(response: Any) -> Chunks:
    """The body's bytes as they came (still encoded), read as directly as the client allows."""
    return _transport_chunks(response) or _GeneratorChunks(response.aiter_raw())


def _transport_chunks(response: Any) -> Chunks | None:
    """The httpx2 response's transport stream (aiohttp's or httpcore's), read without
    ``aiter_raw()``'s layers; ``None`` on an unchecked version or when it is not found."""
    if not internals_checked(*HTTPX):
        return None
    inner = getattr(getattr(response, "stream", None), "_stream", None)  # internal
    aiohttp_response = getattr(inner, "_aiohttp_response", None)  # internal
    if aiohttp_response is not None and hasattr(aiohttp_response, "content"):
        return _AiohttpChunks(aiohttp_response.content)
    core = getattr(inner, "_httpcore_stream", None)  # internal
    if core is not None and hasattr(core, "__aiter__"):
        return _GeneratorChunks(core.__aiter__())
    return None


class _HttpxRaw:
    __slots__ = ("_index", "_response", "_shards")

    def __init__(self, response: Any, shards: ClientShards | None = None, index: int = 0) -> None:
        self._response = response
        self._shards = shards
        self._index = index

    @property
    def status(self) -> int:
        return int(self._response.status_code)

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers  # type: ignore[no-any-return]

    def chunks(self) -> Chunks:
        return _httpx_chunks(self._response)

    async def aclose(self) -> None:
        shards, self._shards = self._shards, None
        try:
            await self._response.aclose()
        finally:
            if shards is not None:
                shards.release(self._index)


class _AiohttpRaw:
    __slots__ = ("_body", "_chunks", "_response")

    def __init__(self, response: Any) -> None:
        self._response = response
        self._chunks = _AiohttpChunks(response.content)
        encoding = _content_encoding(response.headers)
        self._body: Chunks = self._chunks
        if encoding in _INFLATABLE:
            self._body = Inflating(self._chunks, encoding)
        elif encoding not in ("", "identity"):
            response.close()
            raise ModelStreamError(
                f"the provider sent a body encoded as {encoding!r}, which was not asked for"
            )

    @property
    def status(self) -> int:
        return int(self._response.status)

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers  # type: ignore[no-any-return]

    def chunks(self) -> Chunks:
        return self._body

    async def aclose(self) -> None:
        self._close()

    def close_at_once(self) -> bool:
        """Close without awaiting anything, when nothing needs it (no decompressor to close):
        the caller then needs no shielded scope for it. True when closed."""
        if self._body is not self._chunks:
            return False
        self._close()
        return True

    def _close(self) -> None:
        if self._chunks.eof:
            self._response.release()  # read to the end: the connection goes back to the pool
        else:
            self._response.close()  # mid-reply: drop the connection now


class ClientShards:
    """SDK clients that share one sender's requests, each on a connection pool of its own (of
    ``sizes[i]`` connections; together the driver's ``max_connections``).

    Why: httpcore2's pool checks every connection it holds when it assigns a request and when a
    response closes (a readability poll per idle one), so a request on a pool of n connections
    costs O(n), and S concurrent sessions on one pool of S connections O(S²): on trio at S =
    1,000 that was half the CPU of a turn. Requests fill the clients in order, so a lone caller
    keeps reusing the first one's connections; the next client is made (``make(size)``) when
    all before it are busy; when all are, the least busy one takes the request and its pool
    queues it.
    """

    __slots__ = ("_busy", "_make", "_sizes", "clients")

    def __init__(self, first: Any, make: Callable[[int], Any], sizes: list[int]) -> None:
        self.clients = [first]
        self._busy = [0]  # responses open per client
        self._make = make
        self._sizes = sizes

    def acquire(self) -> int:
        """The index of the client to post on, counted busy until ``release``."""
        busy, sizes = self._busy, self._sizes
        index = next((i for i, n in enumerate(busy) if n < sizes[i]), -1)
        if index < 0 and len(busy) < len(sizes):
            index = len(busy)
            self.clients.append(self._make(sizes[index]))
            busy.append(0)
        elif index < 0:
            index = min(range(len(busy)), key=busy.__getitem__)
        busy[index] += 1
        return index

    def release(self, index: int) -> None:
        self._busy[index] -= 1


def shard_sizes(max_connections: int | None) -> list[int | None]:
    """The pools that serve ``max_connections``: as even as can be, none above
    ``SHARD_CONNECTIONS``, adding up to it; one pool when it is no larger (``None``: the SDK's
    default pool, whose keep-alive limit already bounds its idle connections)."""
    if max_connections is None or max_connections <= SHARD_CONNECTIONS:
        return [max_connections]
    count = -(-max_connections // SHARD_CONNECTIONS)
    size, extra = divmod(max_connections, count)
    return [size + (i < extra) for i in range(count)]


class SDKSender:
    """Posts through the SDK client (``client.post``), retries off, redirects not followed.

    ``shards``: more clients to spread
    requests over (``ClientShards``), for a large pool the driver made.
    """

    __slots__ = ("_client", "_path", "_response_type", "_shards", "base_url", "kind")

    def __init__(
        self,
        client: Any,
        path: str,
        kind: str,
        *,
        shards: ClientShards | None = None,
    ) -> None:
        import httpx2

        self._client = client
        self._path = path
        self._response_type = httpx2.Response
        self._shards = shards
        self.base_url = str(client.base_url)
        self.kind = kind

    async def post(self, body: bytes) -> RawResponse:
        shards = self._shards
        if shards is None:
            return _HttpxRaw(await self._post(self._client, body))
        index = shards.acquire()
        try:
            response = await self._post(shards.clients[index], body)
        except BaseException:
            shards.release(index)
            raise
        return _HttpxRaw(response, shards, index)

    def _post(self, client: Any, body: bytes) -> Awaitable[Any]:
        return client.post(  # type: ignore[no-any-return]
            self._path,
            cast_to=self._response_type,
            content=body,
            options={"max_retries": 0, "follow_redirects": False},
            stream=True,
        )

    def secrets(self) -> tuple[str, ...]:
        return _client_secrets(self._client)

    async def aclose(self) -> None:
        pass  # the driver closes the SDK client


def bound_error_bodies(http_client: Any) -> None:
    """Install ``_bound_error_body`` as a response hook on an httpx2 client the driver made
    (before an SDK client is made on it: its public ``event_hooks``, no SDK internals)."""
    if not internals_checked(*HTTPX):
        return
    hooks = getattr(http_client, "event_hooks", None)
    if isinstance(hooks, dict) and _bound_error_body not in hooks.get("response", []):
        hooks["response"] = [*hooks.get("response", []), _bound_error_body]
        http_client.event_hooks = hooks


def _client_secrets(client: Any) -> tuple[str, ...]:
    headers: dict[str, Any] = {}
    for attr in ("default_headers", "auth_headers"):
        try:
            value = getattr(client, attr, None)
        except Exception:  # pragma: no cover - a client whose credentials failed to load
            value = None
        if isinstance(value, Mapping):
            headers.update(value)
    key = getattr(client, "api_key", None)
    return header_secrets(headers, key if isinstance(key, str) else None)


async def _bound_error_body(response: Any) -> None:
    """An httpx response hook: an error response keeps only a prefix of its body, read now;
    the response is closed (so the SDK reads no more of it)."""
    if response.status_code < 300 or response.is_closed:
        return
    chunks = _httpx_chunks(response)
    try:
        body, _ = await read_prefix(chunks)
    except Exception:  # the body is only for the message: a broken one is an empty one
        body = b""
    finally:
        try:
            await chunks.aclose()
        finally:
            await response.aclose()
    response._content = body  # internal
    response.is_stream_consumed = True  # read (in part): the SDK takes the body from _content


# Client attributes that, when set, make credentials change per request (two are internal).
DYNAMIC_CREDENTIALS: Final = (
    "_api_key_provider",
    "_provider_runtime",
    "workload_identity",
    "credentials",
)


def direct_eligible(client: Any) -> bool:
    """Whether the client's credentials are the same on every request (a static key), so the
    headers it computes once can be reused (only on checked versions: a private attribute
    the SDK renames would hide a dynamic credential)."""
    sdk = type(client).__module__.partition(".")[0]
    if sdk not in CHECKED or not internals_checked(sdk):
        return False
    if getattr(client, "custom_auth", None) is not None:
        return False
    for dynamic in DYNAMIC_CREDENTIALS:
        if getattr(client, dynamic, None) is not None:
            return False
    return bool(getattr(client, "auth_headers", None))


class DirectSender:
    """Posts with aiohttp directly, with the URL and headers an SDK client computed, or that
    ``_sdk_free`` computed as it would (see module doc)."""

    __slots__ = (
        "_headers",
        "_max_connections",
        "_model",
        "_provider",
        "_secrets",
        "_session",
        "_timeout",
        "_url",
        "base_url",
        "kind",
    )

    def __init__(
        self,
        base_url: str,
        path: str,
        headers: Mapping[str, str],
        *,
        secrets: tuple[str, ...],
        timeout: tuple[float | None, float | None],
        provider: str,
        model: str,
        max_connections: int | None,
    ) -> None:
        self.base_url = base_url
        self._url = base_url.rstrip("/") + "/" + path.lstrip("/")
        self._headers = {
            **headers,
            "x-stainless-retry-count": "0",
            "Accept-Encoding": ACCEPT_ENCODING,  # inflated by us, in bounded steps
        }
        self._secrets = secrets
        self._timeout = timeout
        self._max_connections = max_connections
        self._provider = provider
        self._model = model
        self._session: Any = None
        self.kind = "aiohttp"

    @classmethod
    def from_client(
        cls, client: Any, path: str, *, provider: str, model: str, max_connections: int | None
    ) -> DirectSender:
        """A sender with the URL, headers and timeouts an SDK client computed."""
        headers: dict[str, str] = {}
        for name, value in {**client.default_headers, **client.auth_headers}.items():
            if isinstance(value, str):
                headers[name] = value
        return cls(
            str(client.base_url),
            path,
            headers,
            secrets=_client_secrets(client),
            timeout=connect_and_read(getattr(client, "timeout", None)),
            provider=provider,
            model=model,
            max_connections=max_connections,
        )

    def _new_session(self) -> Any:
        import aiohttp
        from multidict import istr

        connect, read = self._timeout
        connector = aiohttp.TCPConnector(limit=self._max_connections or 1000)
        # aiohttp copies the default headers into every request. Named by ``istr`` (the
        # case-insensitive name multidict would make), the copies share the names: with str
        # names each request made a dozen new ones, 2 KiB of every session in flight.
        return aiohttp.ClientSession(
            connector=connector,
            headers={istr(name): value for name, value in self._headers.items()},
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read),
        )

    async def post(self, body: bytes) -> RawResponse:
        session = self._session
        if session is None:
            session = self._session = self._new_session()
        # aiohttp warns (a ResourceWarning) about a body over 1 MiB given as bytes; sent from
        # a buffer in pieces, a piece written when the transport's buffer is empty goes to the
        # socket at once, and a failure there (a 413 sent before the body was read, then the
        # connection closed) closes the socket before the loop read the reply. A large body is
        # handed to the transport whole instead (``_WholeBody``): later pieces go out as the
        # socket is writable, after the loop read what arrived.
        data: Any = body if len(body) <= _LARGE_BODY else _whole_body(body)
        response = await session.post(self._url, data=data, allow_redirects=False)
        if response.status >= 300:
            try:
                data = (await read_prefix(_AiohttpRaw(response).chunks()))[0]
            except Exception:  # the body is only for the message: a broken one is an empty one
                data = b""
            finally:
                response.close()
            raise error_from_status(
                response.status,
                body=_error_body(data),
                headers=response.headers,
                provider=self._provider,
                model=self._model,
                secrets=self._secrets,
            )
        return _AiohttpRaw(response)

    def secrets(self) -> tuple[str, ...]:
        return self._secrets

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def preload_direct() -> None:
    """Import what the direct path's first request needs (aiohttp and its dependencies, about
    100 modules and 100 ms): called when a driver is made, at start-up, so that the first request
    of a service does not import them on its event loop."""
    for name in ("aiohttp", "multidict"):
        importlib.import_module(name)


def connect_and_read(timeout: Any) -> tuple[float | None, float | None]:
    """The connect and read timeouts of an ``httpx2.Timeout``, or of a number of seconds (read
    only), as an SDK client holds them."""
    if isinstance(timeout, int | float):
        return None, timeout
    return getattr(timeout, "connect", None), getattr(timeout, "read", None)


def header_secrets(headers: Mapping[str, str], key: str | None) -> tuple[str, ...]:
    """The credentials in ``headers``, and ``key`` (redacted from quoted replies)."""
    found = list(secrets_of(dict(headers)))
    if key is not None and len(key) >= 6:
        found.append(key)
    return tuple(dict.fromkeys(found))


def _whole_body(body: bytes) -> Any:
    return _whole_body_type()(body)


@functools.cache
def _whole_body_type() -> Any:
    import aiohttp.payload

    class WholeBody(aiohttp.payload.Payload):
        """A body written to the transport in one write (``BytesPayload`` without its warning
        about large bodies)."""

        _value: bytes

        def __init__(self, value: bytes) -> None:
            super().__init__(value, content_type="application/json")
            self._size = len(value)

        def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
            return self._value.decode(encoding, errors)

        async def write(self, writer: Any) -> None:
            await writer.write(self._value)

    return WholeBody


def _error_body(data: bytes) -> Any:
    text = data.decode("utf-8", "replace").strip()
    try:
        return json.loads(text)
    except ValueError:
        return text or None
