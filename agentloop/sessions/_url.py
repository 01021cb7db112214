"""``open_store(url)``: a store from a URL, so hosts can configure persistence with one string."""

from __future__ import annotations

from typing import Any

from agentloop._errors import UserError, as_given

from ._memory import InMemoryStore
from ._postgres import PostgresStore
from ._sqlite import SQLiteStore
from ._types import SessionStore

_SQLITE = "sqlite:///"


def open_store(url: str, **options: Any) -> SessionStore:
    """The store a URL names; ``options`` go to its constructor (e.g. ``clock=``).

    - ``memory://``: an ``InMemoryStore``.
    - ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` (SQLAlchemy's convention:
      the path is what follows the third slash) and ``sqlite:///:memory:``.
    - ``postgresql://...`` or ``postgres://...`` (also ``postgresql+psycopg://...``): a
      ``PostgresStore`` given the URL as its DSN.

    The store connects on first use (or ``async with``).

    Args:
        url: The store's URL.
        **options: Options of the store's constructor.
    """
    if not isinstance(as_given(url), str):
        raise UserError(f"a store URL must be a str, not {type(url).__name__}")
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if sep and scheme == "memory":
        return InMemoryStore(**options)
    if scheme == "sqlite":
        if not url.startswith(_SQLITE) or len(url) == len(_SQLITE):
            raise UserError(
                f"bad SQLite URL {url!r}: use sqlite:///relative/path, sqlite:////absolute/path"
                " or sqlite:///:memory:"
            )
        return SQLiteStore(url[len(_SQLITE) :], **options)
    if sep and scheme in ("postgresql", "postgres", "postgresql+psycopg", "postgres+psycopg"):
        return PostgresStore("postgresql://" + url.partition("://")[2], **options)
    raise UserError(
        f"unknown session store URL scheme {scheme!r}: expected memory://, sqlite:///path or"
        " postgresql://..."
    )
