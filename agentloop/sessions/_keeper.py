"""One task that renews every lease a store's runs hold, a batch per round, instead of a task
per run.

A store entered with ``async with`` runs a ``LeaseKeeper`` in a task group of its own. A run
hands it its lease (``hold``) and takes it back when it ends (``Holding.drop``); the keeper
renews each lease a third of its TTL after the last renewal, together with every other lease
due within a tenth of its TTL, in one ``renew_leases`` call (one transaction on SQL back ends).
Thousands of waiting runs so cost one task, and a write every few seconds, between them; and
cancelling them cancels no renewal task at all.

The rules are a run's own renewal's (``SessionScope.keep_alive``): a transient store error is
retried with backoff while the lease is still valid; a lost lease (``SessionBusy``), a missing
session, or a store still failing as the lease is about to expire is handed to the run
(``lost``), which ends with it. Closing the keeper (the store's block ends) hands every lease
still held over as lost.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio

from agentloop._errors import UserError

from ._types import Lease

Renew = Callable[[Sequence[tuple[Lease, float]]], Awaitable[list[Lease | Exception]]]

_logger = logging.getLogger("agentloop")


@dataclass(eq=False, slots=True)
class Holding:
    """One run's lease in the keeper's hands."""

    lease: Lease
    ttl: float
    renewed: Callable[[Lease], None]
    lost: Callable[[Exception], None]
    valid_until: float  # the event loop's clock: the lease is surely valid until then
    due: float  # when to renew it next
    delay: float  # the pause before trying again after a transient error
    retry_first: float
    retry_max: float
    keeper: LeaseKeeper | None
    retrying: bool = False  # its last renewal failed: it is tried again when due, not before

    def drop(self) -> None:
        """The run ended: its lease is no longer renewed (its release is the run's)."""
        keeper, self.keeper = self.keeper, None
        if keeper is not None:
            keeper.holdings.pop(id(self), None)


class LeaseKeeper:
    """Renews the leases its store's runs hand it, together; see the module."""

    def __init__(self, renew: Renew, retryable: Callable[[Exception], bool], store: str) -> None:
        self._renew_leases = renew  # the store's renew_leases
        self._retryable = retryable
        self.store = store  # what to call the store in messages
        self.holdings: dict[int, Holding] = {}
        self._scope = anyio.CancelScope()
        self._changed = anyio.Event()
        self._wake_at = math.inf  # when the keeper wakes next, unless a lease falls due sooner
        self._closed = False

    def hold(
        self,
        lease: Lease,
        ttl: float,
        *,
        valid_until: float,
        renewed: Callable[[Lease], None],
        lost: Callable[[Exception], None],
        retry_first: float,
        retry_max: float,
    ) -> Holding:
        """Keep ``lease`` (valid until ``valid_until`` on the event loop's clock) renewed until
        dropped: ``renewed`` gets each renewed lease, ``lost`` the error that ended it."""
        if self._closed:
            raise UserError(f"{self.store} is closed")
        first = min(retry_first, ttl / 30)
        holding = Holding(
            lease=lease,
            ttl=ttl,
            renewed=renewed,
            lost=lost,
            valid_until=valid_until,
            due=valid_until - ttl + ttl / 3,
            delay=first,
            retry_first=first,
            retry_max=retry_max,
            keeper=self,
        )
        self.holdings[id(holding)] = holding
        if holding.due < self._wake_at:
            self._changed.set()
        return holding

    async def run(self) -> None:
        """Renew the leases as they fall due, until closed."""
        with self._scope:
            while True:
                now = anyio.current_time()
                if any(h.due <= now for h in self.holdings.values()):
                    # With the leases that fall due, those due within a tenth of their TTL.
                    soon = [
                        h
                        for h in self.holdings.values()
                        if h.due <= now or (not h.retrying and h.due <= now + h.ttl / 10)
                    ]
                    await self._renew(soon, now)
                    continue
                self._wake_at = min((h.due for h in self.holdings.values()), default=math.inf)
                self._changed = anyio.Event()
                with anyio.move_on_after(self._wake_at - now):
                    await self._changed.wait()
                self._wake_at = -math.inf  # awake: a lease held now is seen by the next look

    async def _renew(self, due: list[Holding], started: float) -> None:
        try:
            answers = await self._renew_leases([(h.lease, h.ttl) for h in due])
        except Exception as exc:  # the batch failed as a whole: each lease decides
            answers = [exc] * len(due)
        now = anyio.current_time()
        retrying: list[Holding] = []
        for holding, answer in zip(due, answers, strict=True):
            if holding.keeper is None:  # its run ended meanwhile
                continue
            if isinstance(answer, Lease):
                holding.lease = answer
                holding.valid_until = started + holding.ttl
                holding.due = started + holding.ttl / 3
                holding.delay, holding.retrying = holding.retry_first, False
                holding.renewed(answer)
                continue
            margin = holding.ttl / 10  # stop retrying this long before the lease could expire
            if not self._retryable(answer) or now + holding.delay >= holding.valid_until - margin:
                holding.drop()
                _hand_over(holding, answer)
                continue
            holding.due, holding.retrying = now + holding.delay, True
            holding.delay = min(holding.delay * 2, holding.retry_max, holding.ttl / 6)
            retrying.append(holding)
        if retrying:
            answer = answers[due.index(retrying[0])]
            _logger.warning(
                "renewing the leases of %d session(s) (%r first) failed (%s: %s); retrying in"
                " %.3gs, %.3gs before the first expires",
                len(retrying),
                retrying[0].lease.session_id,
                type(answer).__name__,
                answer,
                min(h.due for h in retrying) - now,
                min(h.valid_until for h in retrying) - now,
            )

    def close(self) -> None:
        """Stop renewing; every lease still held is handed back as lost (the store is
        closing)."""
        self._closed = True
        self._scope.cancel()
        held, self.holdings = list(self.holdings.values()), {}
        for holding in held:
            holding.keeper = None
            _hand_over(holding, UserError(f"{self.store} is closed"))


def _hand_over(holding: Holding, error: Exception) -> None:
    try:
        holding.lost(error)
    except Exception:  # a run's callback must not stop the keeper
        _logger.exception(
            "handing a lost lease of session %r over failed", holding.lease.session_id
        )
