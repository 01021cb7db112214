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
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from ._errors_map import error_from_status, secrets_of

__all__ = ["DirectSender", "RawResponse", "SDKSender", "Sender", "direct_eligible"]


class Chunks(Protocol):
    def __anext__(self) -> Awaitable[bytes]: ...

    async def aclose(self) -> None: ...


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


def _httpx_chunks(response: Any) -> Chunks:
    encoding = response.headers.get("content-encoding")
    if encoding not in (None, "", "identity"):
        return _GeneratorChunks(response.aiter_bytes())
    inner = getattr(getattr(response, "stream", None), "_stream", None)
    aiohttp_response = getattr(inner, "_aiohttp_response", None)
    if aiohttp_response is not None and hasattr(aiohttp_response, "content"):
        return _AiohttpChunks(aiohttp_response.content)
    core = getattr(inner, "_httpcore_stream", None)
    if core is not None and hasattr(core, "__aiter__"):
        return _GeneratorChunks(core.__aiter__())
    return _GeneratorChunks(response.aiter_raw())


class _HttpxRaw:
    __slots__ = ("_response",)

    def __init__(self, response: Any) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return int(self._response.status_code)

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers  # type: ignore[no-any-return]

    def chunks(self) -> Chunks:
        return _httpx_chunks(self._response)

    async def aclose(self) -> None:
        await self._response.aclose()


class _AiohttpRaw:
    __slots__ = ("_chunks", "_response")

    def __init__(self, response: Any) -> None:
        self._response = response
        self._chunks = _AiohttpChunks(response.content)

    @property
    def status(self) -> int:
        return int(self._response.status)

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers  # type: ignore[no-any-return]

    def chunks(self) -> Chunks:
        return self._chunks

    async def aclose(self) -> None:
        if self._chunks.eof:
            self._response.release()  # read to the end: the connection goes back to the pool
        else:
            self._response.close()  # mid-reply: drop the connection now


class SDKSender:
    """Posts through the SDK client (``client.post``), retries off."""

    __slots__ = ("_client", "_path", "_response_type", "base_url", "kind")

    def __init__(self, client: Any, path: str, kind: str) -> None:
        import httpx2

        self._client = client
        self._path = path
        self._response_type = httpx2.Response
        self.base_url = str(client.base_url)
        self.kind = kind

    async def post(self, body: bytes) -> RawResponse:
        response = await self._client.post(
            self._path,
            cast_to=self._response_type,
            content=body,
            options={"max_retries": 0},
            stream=True,
        )
        return _HttpxRaw(response)

    async def aclose(self) -> None:
        pass  # the driver closes the SDK client


def direct_eligible(client: Any) -> bool:
    """Whether the client's credentials are the same on every request (a static key), so the
    headers it computes once can be reused."""
    if getattr(client, "custom_auth", None) is not None:
        return False
    for dynamic in ("_api_key_provider", "_provider_runtime", "workload_identity", "credentials"):
        if getattr(client, dynamic, None) is not None:
            return False
    return bool(getattr(client, "auth_headers", None))


class DirectSender:
    """Posts with aiohttp directly, with the SDK client's URL and headers (see module doc)."""

    __slots__ = (
        "_headers",
        "_max_connections",
        "_model",
        "_provider",
        "_session",
        "_timeout",
        "_url",
        "base_url",
        "kind",
    )

    def __init__(
        self, client: Any, path: str, *, provider: str, model: str, max_connections: int | None
    ) -> None:
        self.base_url = str(client.base_url)
        self._url = self.base_url.rstrip("/") + "/" + path.lstrip("/")
        headers: dict[str, str] = {}
        for name, value in {**client.default_headers, **client.auth_headers}.items():
            if isinstance(value, str):
                headers[name] = value
        headers["x-stainless-retry-count"] = "0"
        self._headers = headers
        timeout = getattr(client, "timeout", None)
        self._timeout = (
            getattr(timeout, "connect", None),
            getattr(timeout, "read", timeout if isinstance(timeout, int | float) else None),
        )
        self._max_connections = max_connections
        self._provider = provider
        self._model = model
        self._session: Any = None
        self.kind = "aiohttp"

    def _new_session(self) -> Any:
        import aiohttp

        connect, read = self._timeout
        connector = aiohttp.TCPConnector(limit=self._max_connections or 1000)
        return aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read),
        )

    async def post(self, body: bytes) -> RawResponse:
        session = self._session
        if session is None:
            session = self._session = self._new_session()
        response = await session.post(self._url, data=body, headers=self._headers)
        if response.status >= 400:
            try:
                data = await response.read()
            finally:
                response.release()
            raise error_from_status(
                response.status,
                body=_error_body(data),
                headers=response.headers,
                provider=self._provider,
                model=self._model,
                secrets=secrets_of(self._headers),
            )
        return _AiohttpRaw(response)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def _error_body(data: bytes) -> Any:
    text = data.decode("utf-8", "replace").strip()
    try:
        return json.loads(text)
    except ValueError:
        return text or None
