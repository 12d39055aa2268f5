"""Runs handed to the local worker, claimed in the commit that made them ready."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from test_worker_wakes import Looks, payments

from runtime import Actor, RunStatus, Runtime
from runtime.worker import Worker

U1 = Actor(id="U1", platform="api")


class Turns(Looks):
    """Model turns committed, and the loop's own claims (`Runtime.drive`)."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: list[str] = []

    def count_claims(self, rt: Runtime) -> None:
        drive = rt.drive

        async def counted(run_id: str) -> bool:
            self.claims.append(run_id)
            return await drive(run_id)

        rt.drive = counted  # type: ignore[method-assign]


@asynccontextmanager
async def serving(rt: Runtime, **options: Any) -> AsyncIterator[Worker]:
    worker = Worker(rt, poll_seconds=60, **options)  # no poll: only what is handed over
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run(stop))
    await asyncio.sleep(0)  # the loop has begun: it takes runs from now on
    try:
        yield worker
    finally:
        stop.set()
        await loop
        await worker.drain(5)


async def events(rt: Runtime, run_id: str) -> list[str]:
    return [e["kind"] for e in await rt.events(run_id)]


async def test_a_start_goes_to_a_free_place_claimed_in_its_own_commit(
    runtime_factory: Any,
) -> None:
    turns = Turns()
    rt = runtime_factory(payments(), checkpoint=turns.checkpoint)
    turns.count_claims(rt)
    async with serving(rt):
        started = await rt.start("payments", "pay 5", requester="U1", wait=False)
        assert started.status is RunStatus.RUNNING
        await turns.turn(1)
        parked = await rt.get(started.run_id)
        assert parked.status is RunStatus.AWAITING
    # Nobody had to find the run queued and claim it: the start's commit did.
    assert turns.claims == []
    kinds = await events(rt, started.run_id)
    assert kinds[:2] == ["run_started", "run_claimed"]
    assert kinds.count("run_claimed") == 1


async def test_with_every_place_taken_a_start_is_queued_for_the_loop(
    runtime_factory: Any,
) -> None:
    turns = Turns()
    rt = runtime_factory(payments(), checkpoint=turns.checkpoint)
    turns.count_claims(rt)
    async with serving(rt, concurrency=1) as worker:
        held = worker.reserve()
        assert held is not None and worker.reserve() is None
        started = await rt.start("payments", "pay 5", requester="U1", wait=False)
        assert started.status is RunStatus.QUEUED
        held.release()
        worker.wake_runs()
        await turns.turn(1)
        assert (await rt.get(started.run_id)).status is RunStatus.AWAITING
    assert turns.claims == [started.run_id]


async def test_a_decision_that_makes_its_run_ready_hands_it_over(runtime_factory: Any) -> None:
    turns = Turns()
    rt = runtime_factory(payments(), checkpoint=turns.checkpoint)
    turns.count_claims(rt)
    parked = await rt.start("payments", "pay 5", requester="U1")
    async with serving(rt):
        decided = await rt.approve(parked.pending[0], actor=U1, resume=False)
        assert decided.status is RunStatus.RUNNING
        await turns.turn(2)
        assert (await rt.get(parked.run_id)).status is RunStatus.DONE
    assert turns.claims == []
    kinds = await events(rt, parked.run_id)
    # Claimed in the decision's transaction, right after the run was ready (the other
    # claim is the start's, which drove the run to its ticket).
    assert kinds.count("run_claimed") == 2
    assert kinds[kinds.index("run_ready") + 1] == "run_claimed"


async def test_a_stopped_worker_takes_nothing(runtime_factory: Any) -> None:
    rt = runtime_factory(payments())
    async with serving(rt) as worker:
        pass
    assert worker.reserve() is None
    started = await rt.start("payments", "pay 5", requester="U1", wait=False)
    assert started.status is RunStatus.QUEUED
    assert (await rt.get(started.run_id)).status is RunStatus.QUEUED


async def test_a_place_is_used_or_given_back_once(runtime_factory: Any) -> None:
    rt = runtime_factory(payments())
    async with serving(rt, concurrency=2) as worker:
        first, second = worker.reserve(), worker.reserve()
        assert first is not None and second is not None
        first.release()
        first.release()  # a second release gives back nothing more
        third = worker.reserve()
        assert third is not None
        second.release()
        third.release()
        assert worker.reserve() is not None


class Recorded:
    """Places that only record what is done with them (`runtime.engine.handoff.Slots`)."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def reserve(self) -> Recorded.Place:
        self.log.append("reserve")
        return Recorded.Place(self.log)

    class Place:
        def __init__(self, log: list[str]) -> None:
            self.log = log

        def use(self, run_id: str, work: Coroutine[Any, Any, object]) -> None:
            work.close()  # never driven: the test looks only at the hand-over
            self.log.append("use")

        def release(self) -> None:
            self.log.append("release")


async def test_a_start_that_replays_a_key_gives_its_place_back(runtime_factory: Any) -> None:
    rt = runtime_factory(payments())
    places = Recorded()
    rt.hand_off_to(places)
    key = ("test", "k-1", "same")
    first = await rt.start("payments", "pay 5", requester="U1", wait=False, idempotency=key)
    assert first.status is RunStatus.RUNNING
    assert places.log == ["reserve", "use", "release"]  # the release after a use is a no-op
    places.log.clear()
    again = await rt.start("payments", "pay 5", requester="U1", wait=False, idempotency=key)
    assert again.replayed and again.run_id == first.run_id
    assert places.log == ["reserve", "release"]


async def test_resuming_in_place_does_not_hand_over(runtime_factory: Any) -> None:
    turns = Turns()
    rt = runtime_factory(payments(), checkpoint=turns.checkpoint)
    parked = await rt.start("payments", "pay 5", requester="U1")
    async with serving(rt) as worker:
        done = await rt.approve(parked.pending[0], actor=U1, resume=True)
        assert done.status is RunStatus.DONE  # driven by the caller, to its end
        assert worker.active == 0


async def test_runs_waiting_in_the_queue_go_before_new_ones(runtime_factory: Any) -> None:
    turns = Turns()
    rt = runtime_factory(payments(), checkpoint=turns.checkpoint)
    turns.count_claims(rt)
    emptied = asyncio.Event()  # a look of the loop found no ready run
    claimable = rt.claimable

    async def looked(limit: int = 10) -> list[str]:
        found = await claimable(limit)
        if not found:
            emptied.set()
        return found

    rt.claimable = looked  # type: ignore[method-assign]
    async with serving(rt, concurrency=1) as worker:
        held = worker.reserve()
        assert held is not None
        older = await rt.start("payments", "pay 5", requester="U1", wait=False)
        assert older.status is RunStatus.QUEUED  # no place: queued
        held.release()
        # A place is free again, but a run waits in the queue: the new one queues behind.
        newer = await rt.start("payments", "pay 6", requester="U1", wait=False)
        assert newer.status is RunStatus.QUEUED
        emptied.clear()
        worker.wake_runs()
        await turns.turn(2)
        assert turns.claims == [older.run_id, newer.run_id]
        # Once a look finds the queue empty, starts are handed over again.
        await asyncio.wait_for(emptied.wait(), 20)
        latest = await rt.start("payments", "pay 7", requester="U1", wait=False)
        assert latest.status is RunStatus.RUNNING
