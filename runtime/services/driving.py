"""Claiming runs and driving them until they park or end; recovery on start-up."""

from __future__ import annotations

from datetime import datetime, timedelta

from runtime.domain.errors import LeaseLost
from runtime.domain.states import RunStatus
from runtime.engine.deps import Deps
from runtime.engine.driver import Driver
from runtime.engine.journal import record_claim
from runtime.engine.moves import move_run
from runtime.engine.results import RunResult, run_result
from runtime.engine.turns import mark_model_call, record_model_marked, starts_with_model_call
from runtime.services.queries import Queries
from runtime.store.records import CallRecord, RunRecord


class Driving:
    """Claims runs (with a lease and a fence) and drives them with the engine."""

    def __init__(self, deps: Deps, queries: Queries) -> None:
        self._deps = deps
        self._queries = queries

    def lease_expired(self, run: RunRecord) -> bool:
        """Whether nobody holds `run`'s lease any more."""
        return run.lease_expires_at is None or run.lease_expires_at <= self._deps.clock.now()

    def claim_locked(self, run: RunRecord, now: datetime) -> None:
        """Claim `run` (whose row the current transaction has locked) for this worker."""
        move_run(run, RunStatus.RUNNING)
        run.fence += 1
        run.lease_owner = self._deps.worker_id
        run.lease_expires_at = now + timedelta(seconds=self._deps.lease_seconds)

    async def claimable(self, limit: int) -> list[str]:
        """Ids of runs a worker could claim now (queued, or their lease expired)."""
        async with self._deps.store.transaction() as tx:
            return await tx.claimable_runs(self._deps.clock.now(), limit)

    async def recover(self, limit: int) -> list[RunResult]:
        """Claim and continue every claimable run; the state of each afterwards."""
        results = []
        for run_id in await self.claimable(limit):
            await self.drive(run_id)
            results.append(await self._queries.get(run_id))
        return results

    async def work_once(self, limit: int) -> int:
        """Claim and drive up to `limit` claimable runs; how many were driven."""
        driven = 0
        for run_id in await self.claimable(limit):
            if await self.drive(run_id):
                driven += 1
        return driven

    async def drive(self, run_id: str) -> bool:
        """Claim `run_id` and drive it; False if it could not be claimed."""
        claim = await self._claim(run_id)
        if claim is None:
            return False
        await self._drive_claimed(claim[0], claim[1], model_marked=claim[1] is None)
        return True

    async def _claim(self, run_id: str) -> tuple[RunRecord, list[CallRecord] | None] | None:
        """Claim the run; with the current batch's calls, or None when the claim also
        marked the model call the run goes on with (one commit for both)."""
        deps = self._deps
        now = deps.clock.now()
        calls: list[CallRecord] | None = None
        async with deps.store.transaction() as tx:
            claimed = await tx.claim_run(
                run_id,
                owner=deps.worker_id,
                now=now,
                until=now + timedelta(seconds=deps.lease_seconds),
            )
            if claimed is not None:
                await record_claim(tx, claimed, now)
                if starts_with_model_call(claimed, deps.agents.get(claimed.agent)):
                    mark_model_call(claimed)
                    await record_model_marked(tx, claimed, now)
                    claimed.updated_at = now
                    await tx.update_run(claimed, fence=claimed.fence)
                else:
                    calls = await tx.calls_for_run(run_id, batch=claimed.batch)
        if claimed is None:
            return None
        return claimed, calls

    async def drive_claimed(
        self,
        run: RunRecord,
        *,
        calls: list[CallRecord] | None = None,
        model_marked: bool = False,
        new: bool = False,
    ) -> RunResult:
        """Drive a run this worker has claimed; the run as it stands afterwards.

        A sub-agent's run that ends hands over: its parent, made ready by that end, is
        claimed and driven next (its ancestors likewise), so one call carries a decision
        on a child through to the top-level run's next stop.

        `new`: the run was inserted just now, so whatever tickets and sub-agent runs it
        has, this drive made; parked by a model turn without a sub-agent, it is returned
        as that turn left it, without reading it back.
        """
        driver = await self._drive_claimed(run, calls, model_marked=model_marked)
        if driver is not None:
            driven = driver.run
            if driven.status.finished:
                agent = self._deps.agents.get(driven.agent)
                if agent is None or not agent.subagents:
                    return run_result(driven, ())
            elif new and driver.parked_on is not None and not driver.delegated:
                tickets, proposed = driver.parked_on
                return run_result(driven, self._queries.known_pending(tickets, proposed))
        return await self._queries.get(run.run_id)

    async def proceed(
        self,
        run: RunRecord,
        *,
        calls: list[CallRecord] | None = None,
        model_marked: bool = False,
    ) -> None:
        """Drive a run claimed for this worker to its next stop, as a worker's task does
        (`drive_claimed` without reading the run afterwards)."""
        await self._drive_claimed(run, calls, model_marked=model_marked)

    async def _drive_claimed(
        self, run: RunRecord, calls: list[CallRecord] | None, *, model_marked: bool
    ) -> Driver | None:
        """Drive a claimed run (and a parent its end makes ready); its driver, holding
        the run as this worker left it, or None if another worker took it over."""
        driver = Driver(self._deps, run, calls=calls, model_marked=model_marked)
        try:
            await driver.drive()
        except LeaseLost:
            # Another worker took the run over; it owns the outcome now.
            self._deps.reach("run_driven", run_id=run.run_id, status="taken_over")
            return None
        self._deps.reach("run_driven", run_id=run.run_id, status=driver.run.status.value)
        if driver.run.status.finished and driver.run.parent_run_id is not None:
            await self._continue_parent(driver.run.parent_run_id)
        return driver

    async def _continue_parent(self, parent_run_id: str) -> None:
        claim = await self._claim(parent_run_id)
        if claim is None:
            return  # still waiting on other tickets, paused, or driven elsewhere
        self._deps.reach("parent_resuming", run_id=parent_run_id)
        await self._drive_claimed(claim[0], claim[1], model_marked=claim[1] is None)
