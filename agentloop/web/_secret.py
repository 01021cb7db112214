"""The server's secret, which keys the owner ids stored with sessions, so that a leaked store
gives no way to test guesses of a token. Given by the application (``secret=``, else the
environment variable ``AGENTLOOP_SECRET``) or, when it gives none, made once and kept in the
session store itself: every replica on one store shares it, ownership survives a restart with a
persistent store, and an in-memory store gets a key of its own process."""

from __future__ import annotations

import os
import secrets

from agentloop import SessionConflict, UserError
from agentloop.sessions import SessionStore

SECRET_ENV = "AGENTLOOP_SECRET"
# Not printable, so no web request can name it (the hub refuses such session ids).
KEPT_SECRET = "\x1fagentloop server secret"
_MIN_BYTES = 16


async def server_secret(store: SessionStore, given: bytes | str | None) -> bytes:
    """The secret: ``given``, else ``AGENTLOOP_SECRET``, else the one kept in ``store`` (made
    there by the first server to need it; a replica racing it reads the winner's).

    Args:
        store: Where sessions live.
        given: The application's secret, if it gives one.
    """
    explicit = given if given is not None else os.environ.get(SECRET_ENV) or None
    if explicit is not None:
        raw = explicit.encode() if isinstance(explicit, str) else bytes(explicit)
        if len(raw) < _MIN_BYTES:
            origin = "secret=" if given is not None else SECRET_ENV
            raise UserError(f"{origin}: the server's secret must be at least {_MIN_BYTES} bytes")
        return raw
    kept = await store.get(KEPT_SECRET, history_limit=0)
    if kept is None:
        try:
            kept = await store.create(
                KEPT_SECRET, app="agentloop", state={"secret": secrets.token_hex(32)}
            )
        except SessionConflict:  # another replica made it first
            kept = await store.get(KEPT_SECRET, history_limit=0)
    value = kept.state.get("secret") if kept is not None else None
    if not isinstance(value, str) or len(value) < _MIN_BYTES:
        raise UserError(f"the session store holds no usable server secret ({KEPT_SECRET!r})")
    return value.encode()
