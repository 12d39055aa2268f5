"""Cancelling a run inside a transaction, with its calls, tickets and sub-agents' runs."""

from __future__ import annotations

from dataclasses import replace

from runtime.domain.notifications import TicketVoided
from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import Child
from runtime.engine import delegation
from runtime.engine.deps import Deps
from runtime.engine.journal import notify, notify_finished, record
from runtime.engine.moves import move_run
from runtime.store.base import Transaction
from runtime.store.records import RunRecord


async def cancel_in(
    deps: Deps, tx: Transaction, run: RunRecord, *, actor: str | None, reason: str | None
) -> None:
    """Cancel `run` inside `tx`: void open tickets, cancel calls that have not run, and
    cancel its sub-agents' runs (a running one is asked to stop at its next step).

    The caller has locked `run` (and its ancestors, `runtime.engine.delegation.lock_run`) and
    saves `run` afterwards. Completed effects are not rolled back.
    """
    now = deps.clock.now()
    for ticket in await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN):
        await tx.close_ticket(ticket.ticket_id, status=TicketStatus.VOIDED, at=now)
        await record(tx, run.run_id, now, "ticket_voided", by=actor, ticket_id=ticket.ticket_id)
        if isinstance(ticket.target, Child):
            continue  # it has no card to withdraw
        voided = TicketVoided(
            run_id=run.run_id, agent=run.agent, ticket_id=ticket.ticket_id, reason=reason
        )
        await notify(deps, tx, run, voided)
    for call in await tx.calls_for_run(run.run_id, batch=run.batch):
        if call.state in (
            CallState.PROPOSED,
            CallState.AWAITING_DECISION,
            CallState.APPROVED,
            CallState.AWAITING_INPUT,
            CallState.AWAITING_CHILD,
            CallState.UNCERTAIN,
        ):
            await tx.update_call(
                replace(call, state=CallState.CANCELLED, updated_at=now, result="Cancelled")
            )
    move_run(run, RunStatus.CANCELLED)
    run.lease_owner = None
    run.lease_expires_at = None
    run.model_in_flight = False
    run.error = reason
    await delegation.settle_parent(deps, tx, run)
    await record(tx, run.run_id, now, "run_cancelled", by=actor, reason=reason)
    for child in await tx.child_runs(run.run_id):
        if child.status.finished:
            continue
        why = f"its parent run {run.run_id} was cancelled"
        if child.status is RunStatus.RUNNING and (
            child.lease_expires_at is not None and child.lease_expires_at > now
        ):
            await tx.set_run_flags(child.run_id, cancel=True)
            await record(tx, child.run_id, now, "cancel_requested", by=actor, reason=why)
            continue
        locked = await tx.get_run(child.run_id, for_update=True)
        if locked is None or locked.status.finished:
            continue
        await cancel_in(deps, tx, locked, actor=actor, reason=why)
        locked.fence += 1
        locked.updated_at = now
        await tx.update_run(locked)
    await notify_finished(deps, tx, run)
