"""Delivering the outbox: notifications committed with state changes, posted with retries.

A `Notifier` posts one outbox item to its platform and returns the platform's message
reference. Transient failures are retried with exponential backoff (honouring a
platform's ``Retry-After``); permanent ones are given up loudly: the item is marked
``failed`` and the run's flight recorder says why.

Any number of processes may deliver from one database. Each item is claimed before it is
posted (a lease with a fence, `Transaction.claim_outbox`), so two processes never post
the same item at once, and its outcome is recorded with a compare-and-set on that fence:
a process whose claim expired and was taken over records nothing. Per-channel pacing
(`Claim.pacing`) is kept in the database, so it holds across processes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from runtime._support import record
from runtime.clock import Clock
from runtime.errors import SignoffError
from runtime.store.base import Store
from runtime.store.records import OutboxRecord

log = logging.getLogger("signoff.outbox")


class DeliveryError(SignoffError):
    """A notification could not be delivered.

    Args:
        message: What went wrong.
        permanent: Retrying cannot help (e.g. the channel does not exist).
        retry_after: Seconds the platform asked us to wait, if it said.
    """

    def __init__(
        self, message: str, *, permanent: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after


class Notifier(Protocol):
    """Posts outbox items to one platform."""

    async def deliver(self, item: OutboxRecord) -> dict[str, Any] | None:
        """Post `item`; return the platform's message reference, if any.

        Raises:
            DeliveryError: When it could not be posted.
        """
        ...


class RoutingNotifier:
    """Sends each item to the notifier of its destination's ``platform``.

    Args:
        routes: Notifier per platform name.
        default: Platform used when a destination names none (default ``console``).
    """

    def __init__(self, routes: Mapping[str, Notifier], default: str = "console") -> None:
        self._routes = dict(routes)
        self._default = default

    async def deliver(self, item: OutboxRecord) -> dict[str, Any] | None:
        """Deliver through the item's platform notifier."""
        platform = str(item.destination.get("platform") or self._default)
        notifier = self._routes.get(platform)
        if notifier is None:
            raise DeliveryError(f"no notifier for platform {platform!r}", permanent=True)
        return await notifier.deliver(item)


class NullNotifier:
    """Marks items delivered without posting anywhere (the console reads the database)."""

    async def deliver(self, item: OutboxRecord) -> dict[str, Any] | None:
        """Accept the item."""
        return None


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient delivery failure."""

    max_attempts: int = 8
    base_delay: float = 1.0
    max_delay: float = 300.0

    def delay(self, attempts: int, retry_after: float | None) -> float:
        """Seconds to wait before the next attempt."""
        backoff = min(self.max_delay, self.base_delay * 2.0 ** max(attempts - 1, 0))
        return max(backoff, float(retry_after or 0.0))


@dataclass(frozen=True)
class Claim:
    """How a delivering process claims outbox items.

    Attributes:
        owner: Names the process in the items' leases.
        lease_seconds: How long a claimed item is this process's to deliver; after that
            (the process died) another one may claim it again. Longer than a delivery
            can take.
        pacing: Seconds between two messages to one channel, by platform
            (``{"slack": 1.0}``), shared by every process on the database.
    """

    owner: str = "outbox"
    lease_seconds: float = 60.0
    pacing: Mapping[str, float] = field(default_factory=dict)


async def deliver_due(
    store: Store,
    clock: Clock,
    notifier: Notifier,
    *,
    limit: int = 50,
    policy: RetryPolicy | None = None,
    claim: Claim | None = None,
) -> int:
    """Claim due outbox items and try each once. Returns how many were delivered."""
    retry = policy or RetryPolicy()
    how = claim or Claim()
    now = clock.now()
    async with store.transaction() as tx:
        due = await tx.claim_outbox(
            now,
            limit,
            owner=how.owner,
            until=now + timedelta(seconds=how.lease_seconds),
            pacing=how.pacing,
        )
    delivered = 0
    for item in due:
        fence = item.fence
        try:
            reference = await notifier.deliver(item)
        except DeliveryError as exc:
            await _failed(store, clock, item, exc, retry)
            continue
        except Exception as exc:  # a notifier bug must not stop the loop
            log.exception("notifier crashed on outbox item %s", item.outbox_id)
            await _failed(store, clock, item, DeliveryError(repr(exc)), retry)
            continue
        now = clock.now()
        item.state = "delivered"
        item.attempts += 1
        item.delivered_at = now
        item.platform_ref = reference
        item.last_error = None
        _release(item)
        async with store.transaction() as tx:
            recorded = await tx.update_outbox(item, fence=fence)
        if recorded:
            delivered += 1
        else:
            _superseded(item)
    return delivered


def _release(item: OutboxRecord) -> None:
    item.lease_owner = None
    item.lease_expires_at = None


def _superseded(item: OutboxRecord) -> None:
    log.warning(
        "notification %s was claimed by another process while this one delivered it "
        "(its claim expired); the other process records the outcome",
        item.outbox_id,
        extra={"run_id": item.run_id, "ticket_id": item.ticket_id},
    )


async def _failed(
    store: Store, clock: Clock, item: OutboxRecord, exc: DeliveryError, retry: RetryPolicy
) -> None:
    now = clock.now()
    fence = item.fence
    item.attempts += 1
    item.last_error = str(exc)
    _release(item)
    give_up = exc.permanent or item.attempts >= retry.max_attempts
    wait = retry.delay(item.attempts, exc.retry_after)
    if give_up:
        item.state = "failed"
    else:
        item.next_attempt_at = now + timedelta(seconds=wait)
    async with store.transaction() as tx:
        if not await tx.update_outbox(item, fence=fence):
            _superseded(item)
            return
        if not give_up:
            log.warning(
                "notification %s failed (attempt %d), retrying in %.1fs: %s",
                item.outbox_id,
                item.attempts,
                wait,
                exc,
                extra={"run_id": item.run_id, "ticket_id": item.ticket_id},
            )
            return
        log.error(
            "giving up on notification %s (%s) of run %s: %s",
            item.outbox_id,
            item.kind,
            item.run_id,
            exc,
            extra={"run_id": item.run_id, "ticket_id": item.ticket_id},
        )
        await record(
            tx,
            item.run_id,
            now,
            "notification_failed",
            outbox_id=item.outbox_id,
            notification=item.kind,
            platform=item.destination.get("platform"),
            error=str(exc),
            attempts=item.attempts,
        )
