"""A durable run's session store: the worker's own store, each call an activity.

The engine's session lifecycle (lease, load, a commit per step, renewal, end, release) runs in
the workflow unchanged; only its store calls are effects. So the session store stays the source
of truth for a session's state, memory and goal, whether its runs were in-process or durable.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

import anyio
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

import agentloop._errors as _errors

from .._errors import (
    AgentLoopError,
    SessionConflict,
    SessionError,
    SessionStoreError,
    UserError,
)
from ..sessions import (
    JSON,
    Lease,
    Record,
    Session,
    SessionInfo,
    SessionStore,
    StoreStats,
    record_from_json,
    record_to_json,
)
from ._payloads import Blobs, too_large

STORE_ACTIVITY = "agentloop.store"
_ERROR_TYPE = "agentloop.error:"
EXISTS = "exists"  # what the create activity returns for a session that already exists


def encode_lease(lease: Lease) -> dict[str, Any]:
    return {
        "session_id": lease.session_id,
        "owner": lease.owner,
        "fence": lease.fence,
        "expires_at": lease.expires_at,
    }


def decode_lease(data: dict[str, Any]) -> Lease:
    return Lease(**data)


def encode_session(session: Session | None) -> dict[str, Any] | None:
    if session is None:
        return None
    return {
        "id": session.id,
        "app": session.app,
        "user": session.user,
        "state": dict(session.state),
        "history": [record_to_json(r) for r in session.history],
        "version": session.version,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "lease": None if session.lease is None else encode_lease(session.lease),
    }


def decode_session(data: dict[str, Any] | None) -> Session | None:
    if data is None:
        return None
    return Session(
        id=data["id"],
        app=data["app"],
        user=data["user"],
        state=data["state"],
        history=tuple(record_from_json(r) for r in data["history"]),
        version=data["version"],
        created_at=data["created_at"],
        updated_at=data["updated_at"],
        lease=None if data["lease"] is None else decode_lease(data["lease"]),
    )


def error_of_store(exc: AgentLoopError) -> ApplicationError:
    """An agentloop error of the worker's store, for the workflow to raise as itself."""
    return ApplicationError(str(exc), type=_ERROR_TYPE + type(exc).__name__, non_retryable=True)


async def perform(store: SessionStore, op: str, args: dict[str, Any]) -> Any:
    """One store call on the worker, from its JSON form."""
    session_id = args.get("session_id", "")
    try:
        if op == "create":
            try:
                await store.create(session_id)
            except SessionConflict:
                return EXISTS  # as a value: every run of a session but its first gets here
            return None
        if op == "acquire_lease":
            lease = await store.acquire_lease(
                session_id,
                owner=args["owner"],
                ttl=args["ttl"],
                wait=args["wait"],
                timeout=args["timeout"],
            )
            return encode_lease(lease)
        if op == "get":
            return encode_session(await store.get(session_id, history_limit=args["history_limit"]))
        if op == "commit":
            lease = args["lease"]
            return await store.commit(
                session_id,
                expected_version=args["expected_version"],
                records=[record_from_json(r) for r in args["records"]],
                set_state=args["set_state"],
                delete_state=args["delete_state"],
                lease=None if lease is None else decode_lease(lease),
            )
        if op == "renew_lease":
            return encode_lease(await store.renew_lease(decode_lease(args["lease"]), args["ttl"]))
        if op == "release_lease":
            await store.release_lease(decode_lease(args["lease"]))
            return None
    except AgentLoopError as exc:
        raise error_of_store(exc) from exc
    raise ApplicationError(f"unknown store operation {op!r}", non_retryable=True)


class ActivityStore:
    """The ``SessionStore`` calls the engine makes, as activities on the worker's store. Never
    retried by Temporal (a commit is not idempotent): the engine's own retries of transient
    store errors apply, as in-process."""

    def __init__(self, agent: str, *, seconds: float, blobs: Blobs | None = None) -> None:
        self._agent = agent
        self._seconds = seconds
        self._blobs = blobs or Blobs()  # a commit's large strings go by reference
        self.stats = StoreStats()

    async def _call(self, op: str, seconds: float | None = None, **args: Any) -> Any:
        payload = self._blobs.fit({"agent": self._agent, "op": op, "args": args})
        if payload is None:
            raise SessionStoreError(
                too_large(f"the session store's {op}"),
                store="the workers' session store",
                hint="a durable run records each store call: keep each step's values smaller",
            )
        handle = workflow.start_activity(
            STORE_ACTIVITY,
            payload,
            start_to_close_timeout=timedelta(seconds=seconds or self._seconds),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        done = anyio.Event()
        handle.add_done_callback(lambda _: done.set())
        try:
            await done.wait()
        finally:
            if not handle.done():
                handle.cancel()
        try:
            return handle.result()
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and (cause.type or "").startswith(_ERROR_TYPE):
                cls = getattr(_errors, (cause.type or "")[len(_ERROR_TYPE) :], None)
                if isinstance(cls, type) and issubclass(cls, AgentLoopError):
                    try:
                        error = cls(cause.message)
                    except TypeError:  # more than a message to its constructor
                        error = SessionError(cause.message)
                    raise error from None
            raise SessionStoreError(
                f"the store's activity failed: {exc if cause is None else cause}",
                store="the workers' session store",
                hint="are the workers up, and can they reach the store?",
            ) from None

    async def create(
        self,
        session_id: str | None = None,
        *,
        app: str = "",
        user: str = "",
        state: Mapping[str, JSON] | None = None,
    ) -> Session:
        if session_id is None or app or user or state:
            raise UserError("a durable run creates its session by id only")
        if await self._call("create", session_id=session_id) == EXISTS:
            raise SessionConflict(f"session {session_id!r} already exists")
        session = await self.get(session_id, history_limit=0)
        if session is None:
            raise SessionError(f"session {session_id!r} vanished as it was created")
        return session

    async def get(self, session_id: str, *, history_limit: int | None = None) -> Session | None:
        data = await self._call("get", session_id=session_id, history_limit=history_limit)
        return decode_session(data)

    async def commit(
        self,
        session_id: str,
        *,
        expected_version: int,
        records: Sequence[Record] = (),
        set_state: Mapping[str, JSON] | None = None,
        delete_state: Iterable[str] = (),
        lease: Lease | None = None,
    ) -> int:
        version = await self._call(
            "commit",
            session_id=session_id,
            expected_version=expected_version,
            records=[record_to_json(r) for r in records],
            set_state=json.loads(json.dumps(dict(set_state or {}))),
            delete_state=list(delete_state),
            lease=None if lease is None else encode_lease(lease),
        )
        return int(version)

    async def acquire_lease(
        self,
        session_id: str,
        *,
        owner: str,
        ttl: float,
        wait: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - the store's own bound, passed on
    ) -> Lease:
        data = await self._call(
            "acquire_lease",
            (timeout or 0.0) + self._seconds,
            session_id=session_id,
            owner=owner,
            ttl=ttl,
            wait=wait,
            timeout=timeout,
        )
        return decode_lease(data)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        return decode_lease(await self._call("renew_lease", lease=encode_lease(lease), ttl=ttl))

    async def release_lease(self, lease: Lease) -> None:
        await self._call("release_lease", lease=encode_lease(lease))

    # The rest of the protocol: not what a run does.

    async def list(
        self,
        *,
        app: str | None = None,
        user: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[SessionInfo]:
        raise UserError("a durable run does not list sessions")

    async def delete(self, session_id: str) -> bool:
        raise UserError("a durable run does not delete sessions")

    async def aclose(self) -> None:
        pass  # the worker's store is the worker's to close

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pass
