"""A ``resume_state`` safe for a client to hold (a cookie, a hidden field): signed with the
application's key, so a changed one is refused, and carrying a nonce used once, so that
bringing the same state back again (which would run an approved tool again) is refused too."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol, final

from ._errors import UserError


class NonceStore(Protocol):
    """Where used nonces are kept (a table, Redis…), for sealers in many processes."""

    async def claim(self, nonce: str, *, expires_at: float) -> bool:
        """Record ``nonce`` as used; ``False`` if it was used before. It may be forgotten after
        ``expires_at``, when the sealer refuses its state as expired anyway.

        Args:
            nonce: The sealed state's nonce.
            expires_at: When the sealed state expires (Unix time).
        """
        ...


@final
class UsedNonces:
    """An in-process ``NonceStore`` of at most ``max_entries`` nonces. Forgetting one before
    it expires would let its state come back, so a full cache instead refuses every state
    sealed no later than the newest nonce it had to forget.

    Args:
        max_entries: The nonces kept.
        clock: Unix time (tests pass their own).
    """

    def __init__(self, max_entries: int = 100_000, *, clock: Callable[[], float] = time.time):
        if max_entries < 1:
            raise UserError("UsedNonces.max_entries must be at least 1")
        self._max = max_entries
        self._clock = clock
        self._used: OrderedDict[str, float] = OrderedDict()
        self.forgotten_through = 0.0  # expiry of the newest nonce forgotten while it held

    async def claim(self, nonce: str, *, expires_at: float) -> bool:
        """Record ``nonce`` as used; ``False`` if it was, or the cache had to forget one that
        expires no earlier.

        Args:
            nonce: The sealed state's nonce.
            expires_at: When the sealed state expires (Unix time).
        """
        now = self._clock()
        while self._used and next(iter(self._used.values())) <= now:
            self._used.popitem(last=False)
        if nonce in self._used or expires_at <= self.forgotten_through:
            return False
        self._used[nonce] = expires_at
        while len(self._used) > self._max:
            _, expiry = self._used.popitem(last=False)
            self.forgotten_through = max(self.forgotten_through, expiry)
        return True


@final
class ResumeSealer:
    """Seals a waiting run's ``resume_state`` into a string for a client to hold, and opens it
    once. ``open`` refuses, with ``UserError``, a string that was changed, sealed with another
    key, older than ``max_age``, or opened before.

    Args:
        key: The application's secret (32 random bytes or more; keep it out of the code).
        nonces: Where used nonces are kept (default: ``UsedNonces()``, this process only).
        max_age: Seconds a sealed state may be held.
        clock: Unix time (tests pass their own).
    """

    def __init__(
        self,
        key: bytes | str,
        *,
        nonces: NonceStore | None = None,
        max_age: float = 7 * 24 * 3600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        raw = key.encode() if isinstance(key, str) else bytes(key)
        if len(raw) < 16:
            raise UserError("ResumeSealer: the key must be at least 16 bytes of secret")
        if not 0 < max_age < float("inf"):
            raise UserError(f"ResumeSealer: max_age must be a positive number, not {max_age!r}")
        self._key = hashlib.sha256(b"agentloop resume_state\0" + raw).digest()
        self._nonces: NonceStore = nonces if nonces is not None else UsedNonces(clock=clock)
        self._max_age = max_age
        self._clock = clock

    def seal(self, state: Mapping[str, Any]) -> str:
        """``state`` (a ``RunResult.resume_state``), signed, with a fresh nonce.

        Args:
            state: The waiting run's ``resume_state``.
        """
        envelope = {
            "state": dict(state),
            "nonce": secrets.token_urlsafe(16),
            "expires_at": self._clock() + self._max_age,
        }
        body = _b64(json.dumps(envelope, separators=(",", ":"), sort_keys=True).encode())
        return f"{body}.{_b64(self._mac(body))}"

    async def open(self, sealed: str) -> dict[str, Any]:
        """The ``resume_state`` in ``sealed``, once; ``UserError`` as above.

        Args:
            sealed: What ``seal`` returned.
        """
        body, sep, mac = str(sealed).partition(".")
        try:
            given = _unb64(mac)
        except ValueError:
            given = b""
        if not sep or not hmac.compare_digest(given, self._mac(body)):
            raise UserError("the sealed resume state was changed or sealed with another key")
        envelope = json.loads(_unb64(body))
        if not isinstance(envelope, dict) or not isinstance(envelope.get("state"), dict):
            raise UserError("the sealed resume state is not one this sealer made")
        expires_at = float(envelope["expires_at"])
        if expires_at <= self._clock():
            raise UserError("the sealed resume state has expired")
        if not await self._nonces.claim(str(envelope["nonce"]), expires_at=expires_at):
            raise UserError("the sealed resume state was used before: a state resumes once")
        state: dict[str, Any] = envelope["state"]
        return state

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._key, body.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(str(exc)) from None
