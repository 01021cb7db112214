"""Translate SDK and transport exceptions into agentloop's ``ModelError`` tree.

Both SDKs name their errors alike (``APIStatusError``, ``APIConnectionError``,
``APITimeoutError``), so matching on class names in the MRO serves both without importing either.
Errors carry what the runtime's one retry layer needs: ``retryable`` (from the status, or the
provider's ``x-should-retry`` header when it sends one) and ``retry_after`` (``retry-after-ms``,
else ``retry-after`` in seconds or as an HTTP date).

API keys never leave through an error: providers echo (part of) a rejected key in their 401
bodies, and those bodies become error messages, ``RunFailed`` events and persisted run records.
The request's own credentials (its auth headers) and anything shaped like a key (``sk-…``,
``Bearer …``) are redacted from messages and bodies, and from the SDK exception kept as the
``__cause__`` (tracebacks print it).
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentloop._errors import (
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelTimeout,
    model_error_for_status,
)
from agentloop._json import is_mapping

__all__ = [
    "error_from_exception",
    "error_from_status",
    "is_secret_header",
    "parse_retry_after",
    "redact",
    "scrub_error",
    "secrets_of",
    "stream_error",
]

REDACTED = "[redacted]"
# Key-shaped tokens: OpenAI/Anthropic style keys (also partly masked ones, "sk-abc***xyz") and
# bearer tokens. Only error texts are scanned, never model output.
_KEY_LIKE = re.compile(
    r"\b(?:sk|rk|pk)-[A-Za-z0-9][A-Za-z0-9_\-*.]{5,}|\bBearer\s+[A-Za-z0-9_\-.~+/=*]{6,}",
    re.IGNORECASE,
)
_SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})
# Any other header whose name looks like a credential (a proxy's key, a gateway token).
_SECRET_NAME = re.compile(r"auth|key|token|secret|passw|cookie|credential|signature", re.I)


def is_secret_header(name: str) -> bool:
    name = name.lower()
    return name in _SECRET_HEADERS or _SECRET_NAME.search(name) is not None


def secrets_of(headers: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The credential values in request headers (``Bearer <key>`` gives both forms)."""
    found: list[str] = []
    for name, raw in (headers or {}).items():
        value = raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)
        if value and is_secret_header(str(name)):
            found.append(value)
            token = value.partition(" ")[2].strip()
            if token:
                found.append(token)
    # Longest first: a bearer header is redacted whole, not around its token.
    return tuple(sorted({s for s in found if len(s) >= 6}, key=len, reverse=True))


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``value`` (text, or JSON made of dicts and lists) with credentials replaced."""
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return _KEY_LIKE.sub(REDACTED, value)
    if is_mapping(value):
        return {k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, secrets) for v in value]
    return value


def _scrub(exc: BaseException, secrets: Sequence[str]) -> None:
    """Redact an exception in place (an SDK exception stays chained as our error's
    ``__cause__``): its arguments, message and body, and the credential headers of the request
    it keeps (``.request.headers``, ``.response.request.headers``)."""
    exc.args = tuple(redact(a, secrets) if isinstance(a, str) else a for a in exc.args)
    for attr in ("message", "body"):
        if hasattr(exc, attr):
            try:
                setattr(exc, attr, redact(getattr(exc, attr), secrets))
            except (AttributeError, TypeError):  # pragma: no cover - a read-only attribute
                pass
    for holder in (exc, getattr(exc, "response", None)):
        try:
            request = getattr(holder, "request", None)
        except RuntimeError:  # httpx: a response built without its request
            request = None
        headers = getattr(request, "headers", None)
        if headers is None:
            continue
        try:
            for name in [n for n in headers if is_secret_header(str(n))]:
                headers[name] = REDACTED
        except (TypeError, AttributeError):  # pragma: no cover - immutable headers
            pass


def scrub_error(error: ModelError, cause: BaseException | None, secrets: Sequence[str]) -> None:
    """Redact ``error`` (message, body) and every exception in its cause chain in place."""
    secrets = tuple(sorted(set(secrets), key=len, reverse=True))
    _scrub(error, secrets)
    for exc in (cause, error.__cause__, error.__context__):
        for link in _chain(exc) if exc is not None else ():
            if link is not error:
                _scrub(link, secrets)


def _request_headers(response: Any) -> Mapping[str, str] | None:
    try:
        return getattr(getattr(response, "request", None), "headers", None)
    except RuntimeError:  # httpx: a response built without its request
        return None


# Error types a provider reports inside a 200 stream that are worth retrying.
_RETRYABLE_STREAM_ERRORS = frozenset(
    {
        "overloaded_error",
        "api_error",
        "rate_limit_error",
        "timeout_error",
        "server_error",
        "rate_limit_exceeded",
        "overloaded",
        "internal_error",
        "service_unavailable",
    }
)


_NOT_RETRYABLE_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})


def _seconds(value: str | None, scale: float = 1.0) -> float | None:
    """A finite, non-negative number of seconds, or None (absent, garbage, nan, inf, < 0)."""
    if value is None:
        return None
    try:
        seconds = float(value) / scale
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait before retrying, from ``retry-after-ms``, else ``retry-after`` (seconds
    or an HTTP date). A value that is not a finite, non-negative number, or a date in the past,
    is ignored: None means "back off as usual"."""
    if not headers:
        return None
    ms = _seconds(headers.get("retry-after-ms"), 1000.0)
    if ms is not None:
        return ms
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is not None or value.strip().lstrip("+-").replace(".", "", 1).isdigit():
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    # An HTTP date is wall-clock time by definition; this converts it, it does not measure time.
    wait = when.timestamp() - time.time()
    return wait if wait > 0 else None


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _is_timeout(exc: BaseException) -> bool:
    """A timeout, not a dropped connection (the aiohttp adapter maps both to httpx2 timeouts)."""
    chain = _chain(exc)
    if any(isinstance(e, TimeoutError) for e in chain):
        return True
    if any("ClientConnectionError" in _names(e) or isinstance(e, ConnectionError) for e in chain):
        return False
    return any("TimeoutException" in _names(e) or "ReadTimeout" in _names(e) for e in chain)


def _provider_message(body: Any) -> str | None:
    if is_mapping(body):
        error = body.get("error", body)
        if is_mapping(error):
            message = error.get("message")
            if isinstance(message, str) and message:
                return message
        elif isinstance(error, str) and error:
            return error
    elif isinstance(body, str) and body:
        return body[:500]
    return None


def error_from_status(
    status: int,
    *,
    body: Any,
    headers: Mapping[str, str],
    provider: str,
    model: str | None,
    request_id: str | None = None,
    secrets: Sequence[str] = (),
) -> ModelHTTPError:
    """The error for an HTTP error response; ``secrets`` (the request's credentials) and
    key-shaped text are redacted from its message and body."""
    body = redact(body, secrets)
    cls = model_error_for_status(status)
    if request_id is None:
        request_id = (
            headers.get("x-request-id")
            or headers.get("request-id")
            or (body.get("request_id") if is_mapping(body) else None)
        )
    message = _provider_message(body) or f"HTTP {status}"
    if 300 <= status < 400:
        where = (headers.get("location") or "elsewhere").partition("?")[0]
        message = (
            f"HTTP {status}: the provider redirected the request to {redact(where, secrets)}; "
            f"agentloop does not follow redirects of a model call (set base_url to the final URL)"
        )
    err = cls(
        message,
        provider=provider,
        model=model,
        status=status,
        request_id=request_id,
        body=body,
        retry_after=parse_retry_after(headers),
    )
    should_retry = headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        err.retryable = should_retry == "true"
    elif _error_code(body) in _NOT_RETRYABLE_CODES:
        err.retryable = False  # a 429 for an exhausted quota will not pass by waiting
    return err


def _error_code(body: Any) -> str | None:
    error = body.get("error", body) if is_mapping(body) else None
    if is_mapping(error):
        code = error.get("code") or error.get("type")
        return code if isinstance(code, str) else None
    return None


def stream_error(
    message: str | None, *, error_type: str | None, body: Any, request_id: str | None = None
) -> ModelStreamError:
    """An error the provider reported inside a 200 stream."""
    retryable = error_type in _RETRYABLE_STREAM_ERRORS
    message, body = redact(message), redact(body)
    text = message or (f"provider stream error: {error_type}" if error_type else "stream error")
    return ModelStreamError(text, retryable=retryable, body=body, request_id=request_id)


def error_from_exception(
    exc: BaseException, *, provider: str, model: str | None
) -> ModelError | None:
    """The ``ModelError`` for an SDK or transport exception, or None for anything else."""
    if isinstance(exc, ModelError):
        return exc
    names = _names(exc)
    if "APIStatusError" in names:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) or {}
        body = getattr(exc, "body", None)
        if provider.startswith("openai") and is_mapping(body) and "error" not in body:
            body = {"error": body}  # the OpenAI SDK unwraps it; keep the provider's shape
        request_id = getattr(exc, "request_id", None)
        secrets = secrets_of(_request_headers(response))
        _scrub(exc, secrets)
        return error_from_status(
            int(getattr(exc, "status_code", 0) or getattr(response, "status_code", 0)),
            body=body,
            headers=headers,
            provider=provider,
            model=model,
            request_id=request_id,
            secrets=secrets,
        )
    transport = (
        "APIConnectionError" in names
        or "TransportError" in names  # httpx2
        or "NetworkError" in names  # httpcore2, read below httpx2's mapping
        or "ProtocolError" in names
        or "TimeoutException" in names
        or "ClientError" in names  # aiohttp, when the adapter did not map it
        or isinstance(exc, OSError)
    )
    if not transport:
        return None
    if _is_timeout(exc):
        return ModelTimeout(
            redact(f"{provider} request timed out: {exc!r}"), provider=provider, model=model
        )
    cause = _chain(exc)[-1]
    detail = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    return ModelConnectionError(
        redact(f"connection to {provider} failed: {detail}"), provider=provider, model=model
    )
