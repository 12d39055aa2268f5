"""Delivering the outbox: notifications committed with state changes, posted with retries.

A `Notifier` posts one outbox item to its platform and returns the platform's message
reference. Transient failures are retried with exponential backoff (honouring a
platform's ``Retry-After``); permanent ones are given up loudly: the item is marked
``failed`` and the run's flight recorder says why.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
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


async def deliver_due(
    store: Store,
    clock: Clock,
    notifier: Notifier,
    *,
    limit: int = 50,
    policy: RetryPolicy | None = None,
) -> int:
    """Try every due outbox item once. Returns how many were delivered."""
    retry = policy or RetryPolicy()
    async with store.transaction() as tx:
        due = await tx.due_outbox(clock.now(), limit)
    delivered = 0
    for item in due:
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
        async with store.transaction() as tx:
            await tx.update_outbox(item)
        delivered += 1
    return delivered


async def _failed(
    store: Store, clock: Clock, item: OutboxRecord, exc: DeliveryError, retry: RetryPolicy
) -> None:
    now = clock.now()
    item.attempts += 1
    item.last_error = str(exc)
    give_up = exc.permanent or item.attempts >= retry.max_attempts
    async with store.transaction() as tx:
        if give_up:
            item.state = "failed"
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
        else:
            wait = retry.delay(item.attempts, exc.retry_after)
            item.next_attempt_at = now + timedelta(seconds=wait)
            log.warning(
                "notification %s failed (attempt %d), retrying in %.1fs: %s",
                item.outbox_id,
                item.attempts,
                wait,
                exc,
                extra={"run_id": item.run_id, "ticket_id": item.ticket_id},
            )
        await tx.update_outbox(item)
