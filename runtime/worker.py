"""Background loops of a serving process: run workers, outbox delivery, deadlines.

Several processes (replicas) may run these loops on one database: runs, received chat
decisions and outbox items are each claimed by one process under a lease, and a ticket
expires exactly once (a compare-and-set on the ticket). Each loop polls, and wakes up
early when told to (`Worker.wake`, the ``wake`` event of `outbox_loop`), e.g. by what
`SQLStore.listen` hears: a commit of this process that made work ready, or on PostgreSQL
another replica's ``NOTIFY``. How often they poll is their `Pace`: seldom while the
process hears the other processes' commits, often while it does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from runtime.engine.handoff import Slot
from runtime.runtime import Runtime
from runtime.services.delivery import Claim, Notifier, RetryPolicy, deliver_round

log = logging.getLogger("signoff.worker")


class Pace:
    """How often the loops look for work that nothing woke them for.

    While the process listens for the other processes' commits (PostgreSQL ``LISTEN``,
    see `SQLStore.listen`), a wake-up brings what becomes ready and polling is only a
    safety net: the loops look every `listening_seconds`. Otherwise (not listening yet,
    the connection lost, or SQLite, where only this process's own commits are heard)
    they look every `seconds`; when listening stops, the loops are told to look at once.

    Args:
        seconds: The interval while not listening.
        listening_seconds: The interval while listening (never shorter than `seconds`;
            default: `seconds`).
    """

    def __init__(self, seconds: float, listening_seconds: float | None = None) -> None:
        self._seconds = seconds
        self._listening_seconds = max(seconds, listening_seconds or seconds)
        self._listening = False
        self._lost: list[Callable[[], object]] = []
        self._watchers: list[Callable[[bool], object]] = []

    @property
    def seconds(self) -> float:
        """The interval to wait now."""
        return self._listening_seconds if self._listening else self._seconds

    @property
    def listening(self) -> bool:
        """Whether the process hears the other processes' commits now."""
        return self._listening

    def heard(self, listening: bool) -> None:
        """Listening started (True) or stopped (False): `SQLStore.listen` reports it."""
        was, self._listening = self._listening, listening
        if was and not listening:
            # Wake-ups may have been missed, and the loops may be waiting a long interval.
            for look in list(self._lost):
                look()
        for told in list(self._watchers):
            told(listening)

    def when_lost(self, look: Callable[[], object]) -> None:
        """Call `look` whenever listening stops (a loop looks at once, then polls often)."""
        self._lost.append(look)

    def watch(self, told: Callable[[bool], object]) -> None:
        """Call `told` with every report of `heard`, after the loops were told."""
        self._watchers.append(told)


class Worker:
    """Claims ready runs and drives them, several at a time.

    Runs become ready when they are started without waiting, when their last decision
    comes in, or when another worker's lease expires. `wake` makes the loop look at once
    instead of at the next poll: at the decisions received from chat (stored by
    `Runtime.accept`) and at the ready runs; `wake_runs` only at the ready runs, for
    callers that received nothing (a webhook's start, a decision over the API). Received
    decisions are looked at on every poll too, whatever woke the loop in between.

    While its loop runs, the worker also takes runs handed to it (`runtime.engine.handoff`): a
    start that does not wait, or a decision that makes its run ready, claims the run in
    its own transaction when the worker has a free place, and the worker drives it at
    once instead of finding it queued.

    Args:
        runtime: The runtime whose runs to drive.
        concurrency: Runs driven at the same time.
        poll_seconds: How often to look for ready runs without a wake-up.
        pace: How often to look, listening or not (see `Pace`); it overrides
            `poll_seconds`. Losing the listening connection wakes the worker.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        concurrency: int = 4,
        poll_seconds: float = 0.5,
        pace: Pace | None = None,
    ):
        self._runtime = runtime
        self._slots = asyncio.Semaphore(concurrency)
        self._concurrency = concurrency
        self._pace = pace if pace is not None else Pace(poll_seconds)
        self._pace.when_lost(self.wake)
        self._wake = asyncio.Event()
        self._active: dict[str, asyncio.Task[None]] = {}
        self._reserved = 0
        """Places promised to transactions that may claim a run for this worker."""
        self._taking = False
        self._backlog = False
        """Ready runs wait in the queue: new ones queue behind them instead of being
        handed over ahead of them (cleared by a look that leaves nothing waiting)."""
        self._received_due = True
        self._received_at = float("-inf")

    def reserve(self) -> Slot | None:
        """A free place for a run handed over, or None (see `runtime.engine.handoff.Slots`):
        not while runs wait in the queue, which are older and go first."""
        if not self._taking or self._backlog:
            return None
        if len(self._active) + self._reserved >= self._concurrency:
            self._backlog = True  # the run asking is queued
            return None
        self._reserved += 1
        return _Place(self)

    def wake(self) -> None:
        """Look for received decisions and ready runs now."""
        self._received_due = True
        self._wake.set()

    def wake_runs(self) -> None:
        """Look for ready runs now (nothing was received since the last look)."""
        self._wake.set()

    @property
    def pace(self) -> Pace:
        """How often this worker polls (the outbox loop of the process shares it)."""
        return self._pace

    @property
    def active(self) -> int:
        """How many runs are being driven now."""
        return len(self._active)

    async def run(self, stop: asyncio.Event) -> None:
        """Loop until `stop` is set; then stop claiming (running drives go on)."""
        self._taking = True
        self._runtime.hand_off_to(self)
        try:
            await self._loop(stop)
        finally:
            self._taking = False
            self._runtime.hand_off_to(None, only=self)

    async def _loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            # Cleared before looking: a wake-up while the loop looks makes it look again.
            self._wake.clear()
            try:
                await self._claim_some()
            except Exception:
                log.exception("worker loop failed; retrying")
            waiter = asyncio.ensure_future(self._wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            woken, _ = await asyncio.wait(
                {waiter, stopper}, timeout=self._pace.seconds, return_when=asyncio.FIRST_COMPLETED
            )
            if not woken:
                self._received_due = True  # a poll looks at everything
            waiter.cancel()
            stopper.cancel()

    async def _claim_some(self) -> None:
        # Decisions received from chat are applied first: they may make runs ready. A
        # wake-up that received nothing skips the read until the next poll is due (one
        # stored by another process without a wake-up, or left by a dead one, waits for it).
        now = time.monotonic()
        if self._received_due or now - self._received_at >= self._pace.seconds:
            self._received_due, self._received_at = False, now
            try:
                while len(await self._runtime.apply_received(limit=50)) == 50:
                    pass
            except BaseException:
                self._received_due = True  # looked at again on the next turn
                raise
        taken = len(self._active) + self._reserved
        if taken >= self._concurrency:
            return
        found = await self._runtime.claimable(limit=self._concurrency)
        left = 0
        for run_id in found:
            if run_id in self._active:
                continue
            if len(self._active) + self._reserved >= self._concurrency:
                left += 1
                continue
            self._active[run_id] = asyncio.create_task(self._drive(run_id, None))
        # A full page may hide more ready runs: the next look tells.
        self._backlog = left > 0 or len(found) >= self._concurrency

    def _adopt(self, run_id: str, work: Coroutine[Any, Any, object]) -> None:
        """Drive a run handed over, claimed for this worker (`work` drives it)."""
        self._active[run_id] = asyncio.create_task(self._drive(run_id, work))

    async def _drive(self, run_id: str, work: Coroutine[Any, Any, object] | None) -> None:
        try:
            async with self._slots:
                log.debug("driving run %s", run_id, extra={"run_id": run_id})
                if work is not None:
                    await work
                    driven = True
                else:
                    driven = await self._runtime.drive(run_id)
                log.debug(
                    "run %s %s",
                    run_id,
                    "parked or ended" if driven else "was claimed elsewhere",
                    extra={"run_id": run_id},
                )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("driving run %s failed", run_id, extra={"run_id": run_id})
        finally:
            if work is not None:
                work.close()  # not started if cancelled before the slot: a no-op otherwise
            # A run handed over again as this drive ends has its own task by now.
            if self._active.get(run_id) is asyncio.current_task():
                del self._active[run_id]
            # The run may have become ready again (e.g. a pause was lifted).
            self._wake.set()

    async def drain(self, grace_seconds: float) -> None:
        """Wait up to `grace_seconds` for running drives; then cancel what is left.

        A cancelled drive leaves its run `running` with a lease that expires; the next
        process recovers it by the calls' replay policies.
        """
        tasks = list(self._active.values())
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=grace_seconds)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class _Place:
    """A place reserved in a `Worker` for a run handed over (`runtime.engine.handoff.Slot`)."""

    def __init__(self, worker: Worker) -> None:
        self._worker: Worker | None = worker

    def use(self, run_id: str, work: Coroutine[Any, Any, object]) -> None:
        worker = self._worker
        if worker is None:
            work.close()
            raise RuntimeError("this place was used or released already")
        self._worker = None
        worker._reserved -= 1
        worker._adopt(run_id, work)

    def release(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker._reserved -= 1


async def every(
    seconds: float | Pace,
    stop: asyncio.Event,
    step: Callable[[], Awaitable[object]],
    name: str,
    *,
    wake: asyncio.Event | None = None,
) -> None:
    """Call `step` every `seconds` (or as soon as `wake` is set) until `stop` is set.

    With a `Pace`, the interval is its current one, and losing the listening connection
    sets `wake`. A failing step is logged and tried again at the next turn.
    """
    if isinstance(seconds, Pace) and wake is not None:
        seconds.when_lost(wake.set)
    while not stop.is_set():
        if wake is not None:
            wake.clear()
        try:
            await step()
        except Exception:
            log.exception("%s loop failed; retrying", name)
        waiters = {asyncio.ensure_future(stop.wait())}
        if wake is not None:
            waiters.add(asyncio.ensure_future(wake.wait()))
        interval = seconds.seconds if isinstance(seconds, Pace) else seconds
        _done, pending = await asyncio.wait(
            waiters, timeout=interval, return_when=asyncio.FIRST_COMPLETED
        )
        for waiter in pending:
            waiter.cancel()


async def outbox_loop(
    runtime: Runtime,
    notifier: Notifier,
    stop: asyncio.Event,
    *,
    seconds: float | Pace = 0.5,
    policy: RetryPolicy | None = None,
    claim: Claim | None = None,
    wake: asyncio.Event | None = None,
) -> None:
    """Deliver due notifications until `stop` is set.

    Args:
        runtime: Whose store and clock to use.
        notifier: Posts the items.
        stop: Set to end the loop.
        seconds: How often to look without a wake-up, or the process's `Pace`.
        policy: Retries of failed deliveries.
        claim: How items are claimed (owner, lease, per-channel pacing); by default
            under the runtime's worker id.
        wake: Set it to look at once (a notification was queued). Without it the loop
            still wakes itself when a paced channel it posted to takes its next item.
    """
    how = claim or Claim(owner=runtime.worker_id)
    woken = wake if wake is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    timers: set[asyncio.TimerHandle] = set()

    def look_again(delay: float) -> None:
        # A paced channel's next item (e.g. a run's answer after its card) waits for the
        # channel's slot: look when it is free rather than at the next poll.
        def fire() -> None:
            timers.discard(handle)
            woken.set()

        handle = loop.call_later(delay, fire)
        timers.add(handle)

    async def step() -> None:
        # Keep going while full batches come back, so a backlog drains at the platforms'
        # pace rather than one batch per interval.
        while not stop.is_set():
            done = await deliver_round(
                runtime.store, runtime.clock, notifier, limit=50, policy=policy, claim=how
            )
            if done.look_again is not None:
                look_again(done.look_again)
            if done.claimed < 50:
                return

    try:
        await every(seconds, stop, step, "outbox", wake=woken)
    finally:
        for handle in timers:
            handle.cancel()


async def deadline_loop(runtime: Runtime, stop: asyncio.Event, *, seconds: float = 1.0) -> None:
    """Expire overdue tickets until `stop` is set."""
    await every(seconds, stop, runtime.expire_overdue, "deadline")
