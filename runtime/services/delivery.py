"""Delivering the outbox: notifications committed with state changes, posted with retries.

A `Notifier` posts one notification to its platform and returns the platform's message
reference. It is handed a typed `runtime.domain.notifications.Notification` and a `Delivery`
with what it needs to know about the world (see `runtime.domain.notifications`); it never reads
the store. Transient failures are retried with exponential backoff (honouring a
platform's ``Retry-After``); permanent ones are given up loudly: the item is marked
``failed`` and the run's flight recorder says why.

Any number of processes may deliver from one database. Each item is claimed before it is
posted (a lease with a fence, `Transaction.claim_outbox`), so two processes never post
the same item at once, and its outcome is recorded with a compare-and-set on that fence:
a process whose claim expired and was taken over records nothing. Per-channel pacing
(`Claim.pacing`) is kept in the database, so it holds across processes; it applies to
messages posted in a channel, not to edits of posted cards or replies only one person
sees, which platforms limit far more loosely. Items for different channels are delivered
side by side, those of one channel in order.

Pacing holds at two moments. A claim takes at most one item per paced channel, and only
once the channel's claim slot is free (so a channel's items are claimed in order, one at
a time, by whichever process). And the message itself is posted only while its item holds
the channel's *post slot*: a named lease (``post:<platform>:<channel>``) taken for the
pacing interval right before the notifier is called, and taken again by the notifier
right before it posts (`Delivery.pace`). A process that was slow between its claim and its
post (a long pause, a loaded machine) therefore waits for another process's post instead
of following it too closely.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from runtime.domain.clock import Clock
from runtime.domain.errors import SignoffError
from runtime.domain.notifications import (
    ApprovalRequested,
    BatchMember,
    BatchOffered,
    CardNotification,
    Decided,
    Delivery,
    InputRequested,
    Notification,
    PostedCard,
    RunPaused,
    TicketExpired,
    TicketVoided,
    UncertainCall,
    UnreadableNotification,
    kinds_of,
    read_notification,
)
from runtime.domain.states import TicketStatus
from runtime.engine.deps import Checkpoint
from runtime.engine.journal import record
from runtime.store.base import Store, Transaction
from runtime.store.records import OutboxRecord, channel_key, pacing_key

log = logging.getLogger("signoff.outbox")


class DeliveryError(SignoffError):
    """A notification could not be delivered.

    Args:
        message: What went wrong.
        permanent: Retrying cannot help (e.g. the channel does not exist).
        retry_after: Seconds the platform asked us to wait, if it said.
        rate_limited: The platform refused for its rate limit (HTTP 429).
    """

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        retry_after: float | None = None,
        rate_limited: bool = False,
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after
        self.rate_limited = rate_limited


class Notifier(Protocol):
    """Posts notifications to one platform."""

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        """Post `note` as `delivery` says; return the platform's message reference, if any.

        Raises:
            DeliveryError: When it could not be posted.
        """
        ...


@runtime_checkable
class SaysWhatItReads(Protocol):
    """A notifier that says which notifications it reads `Delivery.ticket` for.

    The outbox reads a notification's ticket only for those. A notifier without
    `needs_ticket` is given the ticket of every notification that has one.
    """

    def needs_ticket(self, note: Notification) -> bool:
        """Whether delivering `note` reads `Delivery.ticket`."""
        ...


class RoutingNotifier:
    """Sends each notification to the notifier of its destination's ``platform``.

    Args:
        routes: Notifier per platform name.
        default: Platform used when a destination names none (default ``console``).
    """

    def __init__(self, routes: Mapping[str, Notifier], default: str = "console") -> None:
        self._routes = dict(routes)
        self._default = default

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        """Deliver through the destination's platform notifier."""
        platform = delivery.platform or self._default
        notifier = self._routes.get(platform)
        if notifier is None:
            raise DeliveryError(f"no notifier for platform {platform!r}", permanent=True)
        return await notifier.deliver(note, delivery)

    def route(self, destination: Mapping[str, Any]) -> Notifier | None:
        """The notifier of `destination`'s platform (None: there is none)."""
        platform = destination.get("platform")
        return self._routes.get(str(platform) if platform else self._default)


class NullNotifier:
    """Marks notifications delivered without posting anywhere (the console reads the
    database)."""

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        """Accept the notification."""
        return None


CARD_KINDS = kinds_of(CardNotification)
"""Notifications that post a message a later outcome edits."""


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
            (``{"slack": 1.0}``), shared by every process on the database; 0 (or less)
            leaves the platform unpaced.
        checkpoint: Told each delivery's outcome (``notification_delivered``, and
            ``notification_failed`` with ``outcome``: ``retried``, ``rate_limited`` or
            ``failed``; both with ``platform`` and ``kind``), e.g. for metrics.
    """

    owner: str = "outbox"
    lease_seconds: float = 60.0
    pacing: Mapping[str, float] = field(default_factory=dict)
    checkpoint: Checkpoint | None = None

    def reach(self, point: str, item: OutboxRecord, **info: Any) -> None:
        """Report `point` of `item` to the checkpoint, if there is one."""
        if self.checkpoint is not None:
            platform = str(item.destination.get("platform") or "console")
            self.checkpoint(point, {"platform": platform, "kind": item.kind, **info})

    def __post_init__(self) -> None:
        # The store claims one item per channel for every platform in the map: an
        # unpaced platform must not be in it.
        paced = {platform: s for platform, s in self.pacing.items() if s > 0}
        object.__setattr__(self, "pacing", paced)


_PACE_STEPS = 20
"""A post slot held by another process is looked at again this often per interval..."""
_PACE_PATIENCE = 10
"""...for at most this many intervals; then the item is retried later."""


@dataclass(frozen=True)
class Round:
    """What one `deliver_round` did.

    Attributes:
        claimed: Items claimed.
        delivered: Items delivered.
        look_again: Seconds until a paced channel of an item claimed now takes its next
            item (its claim slot is free again); None: no paced item was claimed.
    """

    claimed: int
    delivered: int
    look_again: float | None


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
    done = await deliver_round(store, clock, notifier, limit=limit, policy=policy, claim=claim)
    return done.delivered


async def deliver_round(
    store: Store,
    clock: Clock,
    notifier: Notifier,
    *,
    limit: int = 50,
    policy: RetryPolicy | None = None,
    claim: Claim | None = None,
) -> Round:
    """Claim due outbox items and try each once (`deliver_due`), and say when a paced
    channel whose item was claimed takes its next one."""
    retry = policy or RetryPolicy()
    how = claim or Claim()
    now = clock.now()
    silent: list[OutboxRecord] = []
    # One channel's items in order; different channels side by side.
    lanes: dict[str, list[OutboxRecord]] = {}
    async with store.transaction() as tx:
        due = await tx.claim_outbox(
            now,
            limit,
            owner=how.owner,
            until=now + timedelta(seconds=how.lease_seconds),
            pacing=how.pacing,
        )
        for item in due:
            if _posts_nothing(notifier, item):
                silent.append(item)
            else:
                lanes.setdefault(channel_key(item.destination) or item.outbox_id, []).append(item)
        # What the first item of each lane needs is read here, in the claim's transaction;
        # the items after it read theirs once those before them are delivered.
        known = [await _known(tx, notifier, lane[0]) for lane in lanes.values()]
    intervals = [_interval(how, item) for item in due]
    paced = [interval for interval in intervals if interval is not None]
    look_again = min(paced) if paced else None
    counts = await asyncio.gather(
        *(
            _deliver_lane(store, clock, notifier, lane, retry, how, first)
            for lane, first in zip(lanes.values(), known, strict=True)
        )
    )
    delivered = sum(counts)
    if silent:
        delivered += await _record_silent(store, clock, silent, retry, how)
    return Round(len(due), delivered, look_again)


def _interval(how: Claim, item: OutboxRecord) -> float | None:
    """The pacing interval of `item`'s channel, if it posts a message there and is paced."""
    key = pacing_key(item.kind, item.destination)
    if key is None:
        return None
    interval = how.pacing.get(key.split(":", 1)[0])
    return interval if interval is not None and interval > 0 else None


@dataclass(frozen=True)
class _PostSlot:
    """Holds a paced channel's post slot for one item (`Delivery.pace`).

    The slot is a named lease owned by the item for the pacing interval from now; taking
    it again while the item holds it extends it. When another process's item holds it,
    this waits (looking again `_PACE_STEPS` times per interval) until it is free.
    """

    store: Store
    clock: Clock
    name: str
    owner: str
    interval: float

    async def __call__(self) -> None:
        step = self.interval / _PACE_STEPS
        for _ in range(_PACE_STEPS * _PACE_PATIENCE):
            now = self.clock.now()
            async with self.store.transaction() as tx:
                held = await tx.take_lease(
                    self.name,
                    owner=self.owner,
                    now=now,
                    until=now + timedelta(seconds=self.interval),
                )
            if held is not None:
                return
            await asyncio.sleep(step)
        raise DeliveryError(
            f"{self.name} stayed taken by other processes", retry_after=self.interval
        )


def _posts_nothing(notifier: Notifier, item: OutboxRecord) -> bool:
    """Whether `item` goes to a `NullNotifier` (the console's: it reads the database)."""
    if isinstance(notifier, RoutingNotifier):
        return isinstance(notifier.route(item.destination), NullNotifier)
    return isinstance(notifier, NullNotifier)


async def _record_silent(
    store: Store, clock: Clock, items: Sequence[OutboxRecord], retry: RetryPolicy, how: Claim
) -> int:
    """Record items a `NullNotifier` accepts as delivered, all in one transaction.

    Delivering them posts nothing, so the notifier is not called and no `Delivery` is
    read; what is recorded is what `_deliver_one` would record, with the same fences.
    """
    readable = []
    for item in items:
        try:
            read_notification(item.kind, item.payload)
        except UnreadableNotification as exc:
            await _failed(store, clock, item, DeliveryError(str(exc), permanent=True), retry, how)
        else:
            readable.append(item)
    if not readable:
        return 0
    now = clock.now()
    fences = [item.fence for item in readable]
    for item in readable:
        _mark_delivered(item, now, None)
    recorded: list[OutboxRecord] = []
    async with store.transaction() as tx:
        for item, fence in zip(readable, fences, strict=True):
            if await tx.update_outbox(item, fence=fence):
                recorded.append(item)
            else:
                _superseded(item)
    for item in recorded:
        how.reach("notification_delivered", item)
    return len(recorded)


def _mark_delivered(item: OutboxRecord, now: datetime, reference: dict[str, Any] | None) -> None:
    item.state = "delivered"
    item.attempts += 1
    item.delivered_at = now
    item.platform_ref = reference
    item.last_error = None
    _release(item)


async def _known(
    tx: Transaction, notifier: Notifier, item: OutboxRecord
) -> tuple[Notification, Delivery] | None:
    """`item`'s notification and `Delivery`, read in the claim's transaction; None when
    either cannot be read (its delivery reads again and fails it as unreadable)."""
    try:
        note = read_notification(item.kind, item.payload)
        ticket = _needs_ticket(notifier, item, note)
        return note, await delivery_of(tx, item, note, ticket=ticket)
    except UnreadableNotification:
        return None


def _needs_ticket(notifier: Notifier, item: OutboxRecord, note: Notification) -> bool:
    """Whether the notifier of `item` reads `Delivery.ticket` to deliver `note`."""
    target: object = notifier
    if isinstance(notifier, RoutingNotifier):
        target = notifier.route(item.destination)
    return not isinstance(target, SaysWhatItReads) or target.needs_ticket(note)


async def _deliver_lane(
    store: Store,
    clock: Clock,
    notifier: Notifier,
    items: Sequence[OutboxRecord],
    retry: RetryPolicy,
    how: Claim,
    first: tuple[Notification, Delivery] | None,
) -> int:
    delivered = 0
    for index, item in enumerate(items):
        known = first if index == 0 else None
        if await _deliver_one(store, clock, notifier, item, retry, how, known):
            delivered += 1
    return delivered


async def _deliver_one(
    store: Store,
    clock: Clock,
    notifier: Notifier,
    item: OutboxRecord,
    retry: RetryPolicy,
    how: Claim,
    known: tuple[Notification, Delivery] | None,
) -> bool:
    fence = item.fence
    try:
        if known is not None:
            note, delivery = known
        else:
            note = read_notification(item.kind, item.payload)
            ticket = _needs_ticket(notifier, item, note)
            async with store.transaction() as tx:
                delivery = await delivery_of(tx, item, note, ticket=ticket)
        interval = _interval(how, item)
        if interval is not None:
            key = pacing_key(item.kind, item.destination)
            pace = _PostSlot(store, clock, f"post:{key}", item.outbox_id, interval)
            # Held from here for any notifier; one that posts later takes it again then.
            await pace()
            delivery = dataclasses.replace(delivery, pace=pace)
        reference = await notifier.deliver(note, delivery)
    except UnreadableNotification as exc:
        await _failed(store, clock, item, DeliveryError(str(exc), permanent=True), retry, how)
        return False
    except DeliveryError as exc:
        await _failed(store, clock, item, exc, retry, how)
        return False
    except Exception as exc:  # a notifier bug must not stop the loop
        log.exception("notifier crashed on outbox item %s", item.outbox_id)
        await _failed(store, clock, item, DeliveryError(repr(exc)), retry, how)
        return False
    _mark_delivered(item, clock.now(), reference)
    async with store.transaction() as tx:
        recorded = await tx.update_outbox(item, fence=fence)
    if not recorded:
        _superseded(item)
    else:
        how.reach("notification_delivered", item)
    return recorded


async def delivery_of(
    tx: Transaction, item: OutboxRecord, note: Notification, *, ticket: bool = True
) -> Delivery:
    """What the notifier of `item` needs to know: the ticket now (unless `ticket` is
    False: its notifier does not read it), the card an outcome edits, the run's first
    message in the destination's channel."""
    now = await tx.get_ticket(item.ticket_id) if item.ticket_id is not None and ticket else None
    card = None
    if isinstance(note, Decided | TicketExpired | TicketVoided) and item.ticket_id is not None:
        for kind in CARD_KINDS:
            found = await tx.find_outbox(ticket_id=item.ticket_id, kind=kind)
            if found is None or found.destination.get("platform") != item.destination.get(
                "platform"
            ):
                continue
            posted = read_notification(found.kind, found.payload)
            if isinstance(posted, ApprovalRequested | InputRequested | UncertainCall | RunPaused):
                card = PostedCard(posted, found.state, dict(found.platform_ref or {}))
            break
    members: tuple[BatchMember, ...] = ()
    if isinstance(note, BatchOffered):
        members = tuple([await _member(tx, item, ticket_id) for ticket_id in note.ticket_ids])
    first = None
    channel = channel_key(item.destination)
    if channel is not None:
        # An item being delivered is pending: it is never the one found.
        earliest = await tx.first_posted(item.run_id, channel)
        if earliest is not None and earliest.platform_ref:
            first = dict(earliest.platform_ref)
    return Delivery(
        outbox_id=item.outbox_id,
        destination=dict(item.destination),
        attempt=item.attempts + 1,
        ticket=now,
        card=card,
        first_message=first,
        members=members,
    )


async def _member(tx: Transaction, item: OutboxRecord, ticket_id: str) -> BatchMember:
    """One call of a batch: its ticket now, and its card on `item`'s platform."""
    ticket = await tx.get_ticket(ticket_id)
    found = await tx.find_outbox(ticket_id=ticket_id, kind="approval_requested")
    card = None
    if found is not None and found.destination.get("platform") == item.destination.get("platform"):
        posted = read_notification(found.kind, found.payload)
        if isinstance(posted, ApprovalRequested):
            card = PostedCard(posted, found.state, dict(found.platform_ref or {}))
    return BatchMember(ticket, card)


def batch_open_ids(note: BatchOffered, delivery: Delivery) -> list[str]:
    """For a notifier of `note`: the batch's tickets still open, once every card of it
    is posted (the batch is offered only after each of its calls was shown).

    Raises:
        DeliveryError: A card is not posted yet (retried), or could not be posted at all
            (given up: the calls are decided one by one).
    """
    for member in delivery.members:
        if member.card is not None and member.card.state == "pending":
            raise DeliveryError("the batch's cards are not all posted yet", retry_after=1.0)
        if member.card is None or member.card.state != "delivered":
            raise DeliveryError(
                "a card of the batch could not be posted, so its calls are decided one by one",
                permanent=True,
            )
    return [
        m.ticket.ticket_id
        for m in delivery.members
        if m.ticket is not None and m.ticket.status is TicketStatus.OPEN
    ]


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
    store: Store,
    clock: Clock,
    item: OutboxRecord,
    exc: DeliveryError,
    retry: RetryPolicy,
    how: Claim | None = None,
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
    if how is not None:
        # Ahead of the commit below, which may still fail: this attempt failed either way.
        outcome = "failed" if give_up else "rate_limited" if exc.rate_limited else "retried"
        how.reach("notification_failed", item, outcome=outcome)
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
