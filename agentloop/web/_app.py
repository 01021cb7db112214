"""The HTTP API and the built-in page, as a Starlette app (closed by default).

POST   /api/runs                      {"input", "session"?}  → the run's stream (Accept:
                                      text/event-stream), else 201 {"run", "session", "events"}
GET    /api/runs/{run}/events         ?protocol=agentloop|ag-ui|vercel  (SSE, Last-Event-ID)
DELETE /api/runs/{run}                stop the run                      → 204
POST   /api/sessions/{session}/resume {"decisions"?}                    → 201 as for a run
GET    /api/sessions/{session}        the session's history
POST   /api/ag-ui                     AG-UI's RunAgentInput → AG-UI events (SSE)
POST   /api/chat                      the Vercel AI SDK's chat request → UI message stream
GET    /api/chat/{chat}/stream        the SDK's resumeStream: the active run's stream, or 204
GET    /                              the page (no build step; it renders text, never HTML)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import os
import secrets
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from importlib import resources
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentloop import (
    Agent,
    Approve,
    Decision,
    Deny,
    Edit,
    ExternalResult,
    NothingToResume,
    SessionBusy,
    SessionConflict,
    SessionNotFound,
    UserError,
)
from agentloop.sessions import SessionStore

from ._body import read_json
from ._chat import approval_responses
from ._gate import RequestGate
from ._hub import EventLog, LogTrimmed, RunBackend, RunHub, TooMany, WebLimits
from ._protocols import PROTOCOLS
from ._sse import last_event_id, sse_response, watch_exit

Auth = Callable[[Request], Awaitable[str | None]]
"""Who a request is from (the owner of the sessions it may touch), or ``None`` to refuse it."""

# The page's only script is /app.js; it may talk to this origin only and renders text only.
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_SECURITY = {
    "content-security-policy": _CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
LOCAL_OWNER = "local"


class Owner(str):
    """An owner id, with the ids the same credentials were stored under before (``formerly``):
    the hub lets them reach those sessions too."""

    formerly: tuple[str, ...] = ()


def bearer_token(env: str = "AGENTLOOP_TOKEN") -> Auth:
    """An ``Auth`` that admits requests bearing the token in environment variable ``env``
    (``Authorization: Bearer …``); all of them share one owner. Raises ``UserError`` at once
    if the variable is unset or empty.

    The owner id stored with sessions is an HMAC of the token keyed with the server's secret
    (``create_app(secret=)``, ``AGENTLOOP_SECRET``, else one kept in the session store), so
    that a leaked store of sessions alone gives no way to test guesses of the token. Sessions
    stored under the former id (an unkeyed hash) stay readable.

    Args:
        env: The environment variable holding the token.
    """
    token = os.environ.get(env, "")
    if not token:
        raise UserError(f"bearer_token: environment variable {env} is not set")
    legacy = "bearer:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    expected = f"Bearer {token}".encode()
    keyed: dict[bytes, Owner] = {}  # by server secret: one per app serving this auth

    def owner_for(secret: bytes) -> Owner:
        found = keyed.get(secret)
        if found is None:
            mac = hmac.new(secret, b"agentloop owner\0" + token.encode(), "sha256")
            found = keyed[secret] = Owner("bearer:k1:" + mac.hexdigest()[:32])
            found.formerly = (legacy,)
        return found

    async def check(request: Request) -> str | None:
        given = request.headers.get("authorization", "").encode()
        if not secrets.compare_digest(given, expected):
            return None
        hub: RunBackend | None = getattr(request.app.state, "hub", None)
        if hub is None:
            raise UserError("bearer_token serves the app of create_app (its hub holds the secret)")
        return owner_for(hub.secret)

    return check


async def _local(request: Request) -> str | None:
    return LOCAL_OWNER


def create_app(
    agent: Agent[Any, Any],
    *,
    store: SessionStore | None = None,
    auth: Auth | None = None,
    limits: WebLimits | None = None,
    cors_origins: Sequence[str] = (),
    allow_origins: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
    secret: bytes | str | None = None,
    page: bool = True,
    hub: RunBackend | None = None,
) -> Starlette:
    """The HTTP API serving ``agent`` (and its page at ``/``), as a Starlette app to mount or
    serve with any ASGI server. Runs go on in the app's lifespan, not in a request: a client
    that disconnects reconnects to the same run.

    Without ``auth`` every request is one owner's: fit for 127.0.0.1 only (``serve`` refuses
    another address without it). CORS is off unless ``cors_origins`` names the origins. Before
    routing, with a token or without, a ``Host`` other than a loopback name or ``allow_hosts``
    is 400; a POST, a DELETE or a GET of ``/api/`` from another origin than the server's own,
    ``allow_origins`` and ``cors_origins`` is 403; a body not declared ``application/json`` is 415.

    Args:
        agent: The agent that serves every run.
        store: Where sessions live (default: the agent's store, else in memory).
        auth: Who a request is from (``bearer_token()``, or your own); ``None`` → 401.
        limits: Bounds on bodies, inputs, runs and streams per caller, and event logs.
        cors_origins: Origins allowed to call the API from a browser (and to read its answers).
        allow_origins: Other origins whose pages may act (``https://app.example``; ``*``: any).
        allow_hosts: Names the server answers to besides loopback ones (``agent.example``,
            ``*.example.com``; ``*``: any, which gives up the DNS rebinding check).
        secret: The server's secret, which keys the owner ids stored with sessions (at least
            16 bytes; default: ``AGENTLOOP_SECRET``, else one made once and kept in the store,
            which every server on that store shares; give replicas on separate stores one).
        page: Serve the built-in page at ``/``.
        hub: Where runs run (default: a ``RunHub`` of ``agent`` in this process; a durable
            one keeps runs on Temporal: ``agentloop.durable_web.create_app``). It has its own
            store, limits and secret.
    """
    if hub is None:
        hub = RunHub(agent, store=store, limits=limits, secret=secret)
    elif store is not None or limits is not None or secret is not None:
        raise UserError("create_app: give store=, limits= and secret= to the hub, not beside it")
    who = auth or _local
    body_limit = hub.limits.max_body_bytes

    async def owner(request: Request) -> str:
        found = await who(request)
        if found is None:
            raise HTTPException(401, "unauthorized", headers={"www-authenticate": "Bearer"})
        return found

    async def body(request: Request) -> dict[str, Any]:
        return await read_json(request, max_bytes=body_limit, max_depth=hub.limits.max_json_depth)

    def started(log: EventLog) -> JSONResponse:
        return JSONResponse(
            {"run": log.id, "session": log.session, "events": _events_url(log)}, status_code=201
        )

    async def launch(
        request: Request, caller: str, start: Callable[[], Awaitable[EventLog]]
    ) -> Response:
        """The run ``start`` starts: its ids as JSON (201), or its stream itself when the
        request accepts only ``text/event-stream``."""
        with _errors():
            if not _streams_back(request):
                return started(await start())
            protocol = _protocol(request)
            hub.open_stream(caller)  # a stream over the bound starts no run
            try:
                log = await start()
            except BaseException:
                hub.close_stream(caller)
                raise
            ids = {
                "x-agentloop-run": log.id,
                "x-agentloop-session": log.session,
                "content-location": _events_url(log),
            }
            return _respond(hub, caller, log, log.begins_after, protocol, ids)

    async def start_run(request: Request) -> Response:
        caller = await owner(request)
        data = await body(request)
        session = data.get("session")
        if session is not None and not isinstance(session, str):
            raise HTTPException(400, "session must be a string")
        _check_input(data.get("input"), hub.limits)
        return await launch(
            request, caller, functools.partial(hub.start, caller, data["input"], session=session)
        )

    async def resume(request: Request) -> Response:
        caller = await owner(request)
        data = await body(request)
        decisions = _decisions(data.get("decisions"))
        session = request.path_params["session"]
        return await launch(
            request, caller, functools.partial(hub.resume, caller, session, decisions=decisions)
        )

    async def events(request: Request) -> Response:
        caller = await owner(request)
        protocol = _protocol(request)
        with _errors():
            log = await hub.find(caller, request.path_params["run"])
            after = last_event_id(request)
            return _stream(hub, caller, log, log.begins_after if after is None else after, protocol)

    async def cancel(request: Request) -> Response:
        caller = await owner(request)
        with _errors():
            await hub.stop(caller, request.path_params["run"])
        return Response(status_code=204)

    async def history(request: Request) -> Response:
        caller = await owner(request)
        session = request.path_params["session"]
        with _errors():
            records = await hub.history(caller, session)
        return JSONResponse({"session": session, "history": records})

    async def ag_ui(request: Request) -> Response:
        caller = await owner(request)
        data = await body(request)
        thread = data.get("threadId") or data.get("thread_id")
        if data.get("resume"):  # answers to the interrupts of a waiting run
            if not isinstance(thread, str):
                raise HTTPException(400, "resuming needs the threadId of the waiting run")
            decisions = _decisions(_ag_ui_decisions(data["resume"]))
            with _errors():
                log = await hub.resume(caller, thread, decisions=decisions)
                return _stream(hub, caller, log, log.begins_after, "ag-ui")
        text = _last_user_text(data.get("messages"))
        _check_input(text, hub.limits)
        with _errors():
            log = await _start_in(hub, caller, text, thread)
            return _stream(hub, caller, log, None, "ag-ui")

    async def chat(request: Request) -> Response:
        caller = await owner(request)
        data = await body(request)
        decided = approval_responses(data.get("messages"))
        if decided is not None:  # the SDK's approval round trip: the waiting run goes on
            if not isinstance(data.get("id"), str):
                raise HTTPException(400, "answering an approval needs the chat's id")
            with _errors():
                log = await hub.resume(caller, data["id"], decisions=_decisions(decided))
                return _stream(hub, caller, log, log.begins_after, "vercel")
        text = _last_user_text(data.get("messages"))
        _check_input(text, hub.limits)
        with _errors():
            log = await _start_in(hub, caller, text, data.get("id"))
            return _stream(hub, caller, log, None, "vercel")

    async def chat_stream(request: Request) -> Response:
        caller = await owner(request)
        with _errors():
            log = await hub.find_active(caller, request.path_params["chat"])
            if log is None:
                return Response(status_code=204)  # nothing to rejoin, as the SDK expects
            return _stream(hub, caller, log, log.begins_after, "vercel")  # from its start

    async def index(request: Request) -> Response:
        return Response(_asset("index.html"), media_type="text/html", headers=_SECURITY)

    async def script(request: Request) -> Response:
        return Response(_asset("app.js"), media_type="text/javascript", headers=_SECURITY)

    async def style(request: Request) -> Response:
        return Response(_asset("app.css"), media_type="text/css", headers=_SECURITY)

    routes = [
        Route("/api/runs", start_run, methods=["POST"]),
        Route("/api/runs/{run}/events", events, methods=["GET"]),
        Route("/api/runs/{run}", cancel, methods=["DELETE"]),
        Route("/api/sessions/{session}/resume", resume, methods=["POST"]),
        Route("/api/sessions/{session}", history, methods=["GET"]),
        Route("/api/ag-ui", ag_ui, methods=["POST"]),
        Route("/api/chat", chat, methods=["POST"]),
        Route("/api/chat/{chat}/stream", chat_stream, methods=["GET"]),
    ]
    if page:
        routes += [
            Route("/", index, methods=["GET"]),
            Route("/app.js", script, methods=["GET"]),
            Route("/app.css", style, methods=["GET"]),
        ]
    middleware = [
        Middleware(
            RequestGate,
            allow_hosts=list(allow_hosts),
            allow_origins=[*allow_origins, *cors_origins],
        )
    ]
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "DELETE"],
                allow_headers=["authorization", "content-type", "last-event-id"],
                expose_headers=["x-agentloop-run", "x-agentloop-session", "content-location"],
            )
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None, None]:
        async with hub, anyio.create_task_group() as tg:
            tg.start_soon(watch_exit)  # streams end when the server shuts down
            yield
            tg.cancel_scope.cancel()

    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: _as_json},
    )
    app.state.hub = hub
    return app


async def _as_json(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):
        raise exc
    return JSONResponse(
        {"error": exc.detail}, status_code=exc.status_code, headers=dict(exc.headers or {})
    )


def _stream(
    hub: RunBackend, owner: str, log: EventLog, after: int | None, protocol: str
) -> Response:
    hub.open_stream(owner)
    return _respond(hub, owner, log, after, protocol)


def _respond(
    hub: RunBackend,
    owner: str,
    log: EventLog,
    after: int | None,
    protocol: str,
    headers: dict[str, str] | None = None,
) -> Response:
    """``log`` streamed on a stream the owner has opened (``open_stream``), closed with it."""
    try:
        return sse_response(
            log,
            after=after,
            protocol=protocol,
            on_close=functools.partial(hub.close_stream, owner),
            headers=headers,
        )
    except BaseException:
        hub.close_stream(owner)
        raise


def _events_url(log: EventLog) -> str:
    events = f"/api/runs/{log.id}/events"
    if log.begins_after is not None:  # a durable run resumed: its stream goes on from there
        events += f"?last_event_id={log.begins_after}"
    return events


def _streams_back(request: Request) -> bool:
    """Whether a request that starts a run asks for its stream as the answer: it accepts
    ``text/event-stream`` and not JSON (one request where ``EventSource`` needs two)."""
    accept = request.headers.get("accept", "")
    return "text/event-stream" in accept and "application/json" not in accept


def _protocol(request: Request) -> str:
    if not request.scope.get("query_string"):  # most requests: no query to parse
        return "agentloop"
    protocol = request.query_params.get("protocol", "agentloop")
    if protocol not in PROTOCOLS:
        raise HTTPException(400, f"protocol must be one of {', '.join(PROTOCOLS)}")
    return protocol


async def _start_in(hub: RunBackend, owner: str, text: str, thread: Any) -> EventLog:
    """A run in the caller's thread: continued if it is theirs, made theirs if it is new."""
    if thread is not None and not isinstance(thread, str):
        raise HTTPException(400, "the thread id must be a string")
    if thread:
        found = await hub.store.get(thread)
        if found is None:
            await hub.store.create(thread, user=owner)
    return await hub.start(owner, text, session=thread or None)


def _check_input(text: Any, limits: WebLimits) -> None:
    if not isinstance(text, str) or not text.strip():
        raise HTTPException(400, "input must be a non-empty string")
    if len(text) > limits.max_input_chars:
        raise HTTPException(413, f"inputs are limited to {limits.max_input_chars} characters")


def _last_user_text(messages: Any) -> str:
    """The text of the last user message, in AG-UI's or the Vercel AI SDK's form."""
    if not isinstance(messages, list):
        raise HTTPException(400, "messages must be a list")
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        parts = message.get("parts") or (content if isinstance(content, list) else [])
        texts = [
            p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text"
        ]
        return "".join(texts)
    raise HTTPException(400, "no user message")


def _ag_ui_decisions(entries: Any) -> dict[str, Any]:
    """AG-UI's resume entries as decisions: ``cancelled`` denies; ``resolved`` takes a payload
    in the decisions' own form (``{"decision": ...}``), approves with no payload or ``true``,
    denies with ``false``, and gives any other payload as an external tool's result."""
    if not isinstance(entries, list):
        raise HTTPException(400, "resume must be a list")
    decided: dict[str, Any] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("interruptId"), str):
            raise HTTPException(400, "each resume entry needs an interruptId")
        payload = entry.get("payload")
        if entry.get("status") == "cancelled" or payload is False:
            decided[entry["interruptId"]] = {"decision": "deny", "reason": "cancelled"}
        elif payload is None or payload is True:
            decided[entry["interruptId"]] = {"decision": "approve"}
        elif isinstance(payload, dict) and "decision" in payload:
            decided[entry["interruptId"]] = payload
        else:
            decided[entry["interruptId"]] = {"decision": "result", "output": payload}
    return decided


def _decisions(raw: Any) -> dict[str, Decision] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise HTTPException(400, "decisions must be an object keyed by pending call id")
    decided: dict[str, Decision] = {}
    for call_id, spec in raw.items():
        if not isinstance(spec, Mapping):
            raise HTTPException(400, f"decision for {call_id!r} must be an object")
        kind = spec.get("decision")
        if kind == "approve":
            decided[call_id] = Approve()
        elif kind == "deny":
            decided[call_id] = Deny(reason=str(spec.get("reason") or "the call was denied"))
        elif kind == "edit" and isinstance(spec.get("arguments"), Mapping):
            decided[call_id] = Edit(arguments=spec["arguments"])
        elif kind == "result":
            error = spec.get("error")
            decided[call_id] = ExternalResult(
                output=spec.get("output"), error=None if error is None else str(error)
            )
        else:
            raise HTTPException(
                400, f"decision for {call_id!r}: approve, deny, edit (with arguments) or result"
            )
    return decided


@contextlib.contextmanager
def _errors() -> Any:
    """The runtime's refusals as HTTP statuses."""
    try:
        yield
    except SessionBusy as exc:
        raise HTTPException(409, str(exc) or "the session is busy") from None
    except SessionNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except SessionConflict as exc:  # racing opens of one new thread
        raise HTTPException(409, str(exc) or "the session changed; try again") from None
    except NothingToResume as exc:
        raise HTTPException(409, str(exc) or "nothing to resume") from None
    except TooMany as exc:
        raise HTTPException(429, str(exc)) from None
    except LogTrimmed as exc:
        raise HTTPException(410, str(exc)) from None
    except (UserError, ValueError) as exc:
        raise HTTPException(400, str(exc)) from None


def _asset(name: str) -> bytes:
    return resources.files("agentloop.web").joinpath("static", name).read_bytes()
