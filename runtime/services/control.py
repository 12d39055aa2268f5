"""Run control: pause and cancel, each over a run and its sub-agents' runs.

Pausing or cancelling a run does the same to every run below it (a running one is
asked to, and stops at its next step). Resuming a run, which resumes those it paused,
is `runtime.services.decisions.Decisions.resume`: lifting a pause decides its ticket.
"""

from __future__ import annotations

from datetime import datetime

from runtime.domain.errors import NotAwaiting, RunNotFound
from runtime.domain.external import agent_for_run
from runtime.domain.notifications import RunPaused
from runtime.domain.states import RunStatus
from runtime.domain.tickets import Actor, Pause, actor_id
from runtime.engine import delegation
from runtime.engine.cancelling import cancel_in
from runtime.engine.deps import Deps
from runtime.engine.journal import open_ticket, record
from runtime.engine.moves import move_run
from runtime.engine.results import RunResult
from runtime.services.driving import Driving
from runtime.services.queries import Queries
from runtime.store.base import Transaction
from runtime.store.records import RunRecord


class RunControl:
    """Pauses and cancels runs; a running run is asked, a parked one moved."""

    def __init__(self, deps: Deps, queries: Queries, driving: Driving) -> None:
        self._deps = deps
        self._queries = queries
        self._driving = driving

    async def pause(self, run_id: str, actor: Actor | str | None) -> RunResult:
        """Ask a run to pause: no new steps; a running tool settles first. Its
        sub-agents' runs pause too."""
        deps = self._deps
        now = deps.clock.now()
        who = actor_id(actor)
        async with deps.store.transaction() as tx:
            run = await tx.get_run(run_id, for_update=True)
            if run is None:
                raise RunNotFound(f"no run {run_id!r}")
            if run.status.finished or run.status is RunStatus.PAUSED:
                raise NotAwaiting(f"run {run_id} is {run.status}; it cannot be paused")
            await self._pause_in(tx, run, who, now)
            for child in await delegation.descendants(tx, run_id):
                if child.status.finished or child.status is RunStatus.PAUSED:
                    continue
                locked = await tx.get_run(child.run_id, for_update=True)
                if locked is not None:
                    await self._pause_in(tx, locked, who, now)
        return await self._queries.get(run_id)

    async def _pause_in(
        self, tx: Transaction, run: RunRecord, who: str | None, now: datetime
    ) -> None:
        deps = self._deps
        if run.status is RunStatus.RUNNING and not self._driving.lease_expired(run):
            await tx.set_run_flags(run.run_id, pause=True)
            await record(tx, run.run_id, now, "pause_requested", by=who)
            return
        move_run(run, RunStatus.PAUSED)
        run.lease_owner = None
        run.lease_expires_at = None
        run.fence += 1
        run.updated_at = now
        agent = agent_for_run(deps.agents, run.agent, run.origin)
        if agent is not None:
            await open_ticket(deps, tx, run, agent, Pause(), None, RunPaused)
        await record(tx, run.run_id, now, "run_paused", by=who)
        await tx.update_run(run)

    async def cancel(self, run_id: str, actor: Actor | str | None, reason: str | None) -> RunResult:
        """Cancel a run. Cooperative: a running tool finishes; open tickets are voided.
        Its sub-agents' runs are cancelled too."""
        deps = self._deps
        now = deps.clock.now()
        who = actor_id(actor)
        async with deps.store.transaction() as tx:
            run = await delegation.lock_run(tx, run_id)
            if run is None:
                raise RunNotFound(f"no run {run_id!r}")
            if run.status.finished:
                raise NotAwaiting(f"run {run_id} already {run.status}")
            if run.status is RunStatus.RUNNING and not self._driving.lease_expired(run):
                await tx.set_run_flags(run_id, cancel=True)
                await record(tx, run_id, now, "cancel_requested", by=who, reason=reason)
                # Its children need not wait for its next step (it may be waiting on
                # one of them): they are cancelled, or asked to, now.
                why = f"its parent run {run_id} was cancelled"
                for child in await tx.child_runs(run_id):
                    if child.status.finished:
                        continue
                    if child.status is RunStatus.RUNNING and not self._driving.lease_expired(child):
                        await tx.set_run_flags(child.run_id, cancel=True)
                        await record(tx, child.run_id, now, "cancel_requested", by=who, reason=why)
                        continue
                    locked = await tx.get_run(child.run_id, for_update=True)
                    if locked is not None and not locked.status.finished:
                        await self._cancel_now(tx, locked, who, why, now)
            else:
                await self._cancel_now(tx, run, who, reason or "cancelled", now)
        return await self._queries.get(run_id)

    async def _cancel_now(
        self, tx: Transaction, run: RunRecord, who: str | None, reason: str, now: datetime
    ) -> None:
        await cancel_in(self._deps, tx, run, actor=who, reason=reason)
        run.fence += 1
        run.updated_at = now
        await tx.update_run(run)
