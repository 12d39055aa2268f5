"""Decision deadlines: expire overdue tickets once, as the tool's ``on_expiry`` says."""

from __future__ import annotations

from runtime.domain.agent import Agent
from runtime.domain.notifications import ApprovalRequested, InputRequested, TicketExpired
from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import ResumeTicket
from runtime.domain.tools import Escalate, ExpiryAction, Tool
from runtime.engine import delegation
from runtime.engine.cancelling import cancel_in
from runtime.engine.deps import Deps
from runtime.engine.journal import notify, open_ticket, record
from runtime.engine.moves import move, move_run
from runtime.engine.traces import record_wait
from runtime.engine.turns import blocked_text
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, RunRecord


class Expiry:
    """Expires overdue tickets: deny the call, cancel the run, or escalate once."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    async def expire_overdue(self, limit: int) -> list[str]:
        """Expire open tickets past their deadline; the ids of those expired."""
        deps = self._deps
        now = deps.clock.now()
        async with deps.store.transaction() as tx:
            overdue = await tx.overdue_tickets(now, limit)
        expired = []
        for ticket in overdue:
            async with deps.store.transaction() as tx:
                # Its ancestors first: a "cancel" expiry ends the run, settling its parent.
                run = await delegation.lock_run(tx, ticket.run_id)
                if run is None or not await tx.close_ticket(
                    ticket.ticket_id, status=TicketStatus.EXPIRED, at=now
                ):
                    continue
                action = await self._expire(tx, run, ticket)
            expired.append(ticket.ticket_id)
            record_wait(deps, run, ticket, "expired", action=action)
            deps.reach("ticket_expired", ticket_id=ticket.ticket_id, action=action)
        return expired

    async def _expire(self, tx: Transaction, run: RunRecord, ticket: ResumeTicket) -> str:
        """Expire `ticket`; what was done: ``deny``, ``cancel`` or ``escalate``."""
        deps = self._deps
        now = deps.clock.now()
        agent = deps.agents.get(ticket.agent)
        call = await tx.get_call(ticket.call_id) if ticket.call_id else None
        tool = agent.tools.get(call.tool) if agent is not None and call is not None else None
        action = agent.on_expiry_for(tool) if agent is not None else ExpiryAction.DENY
        if isinstance(action, Escalate) and call is not None and agent is not None:
            if await self._escalate(tx, run, ticket, call, agent, tool, action):
                return "escalate"
            action = ExpiryAction.DENY
        outcome = "cancel" if action is ExpiryAction.CANCEL else "deny"
        await record(
            tx, run.run_id, now, "ticket_expired", ticket_id=ticket.ticket_id, action=outcome
        )
        expired = TicketExpired(
            run_id=run.run_id, agent=run.agent, ticket_id=ticket.ticket_id, action=outcome
        )
        await notify(deps, tx, run, expired)
        if outcome == "cancel":
            await cancel_in(
                deps, tx, run, actor=None, reason="a decision deadline passed without a decision"
            )
            run.fence += 1
            run.updated_at = now
            await tx.update_run(run)
            return outcome
        if call is not None and not call.state.settled:
            move(call, CallState.DENIED)
            call.result = blocked_text("the request expired without a decision")
            call.reason = "expired"
            call.updated_at = now
            await tx.update_call(call)
        remaining = await tx.tickets_for_run(run.run_id, status=TicketStatus.OPEN)
        if not remaining and run.status is RunStatus.AWAITING:
            move_run(run, RunStatus.QUEUED)
            run.updated_at = now
            await tx.update_run(run)
        return outcome

    async def _escalate(
        self,
        tx: Transaction,
        run: RunRecord,
        ticket: ResumeTicket,
        call: CallRecord,
        agent: Agent,
        tool: Tool | None,
        action: Escalate,
    ) -> bool:
        """Open the call's ticket again for `action`'s approvers; False if it was
        escalated before (an escalated ticket that expires is denied)."""
        earlier = [
            t
            for t in await tx.tickets_for_run(run.run_id, status=TicketStatus.EXPIRED)
            if t.call_id == call.call_id and t.ticket_id != ticket.ticket_id
        ]
        if earlier:
            return False
        now = self._deps.clock.now()
        await record(
            tx,
            run.run_id,
            now,
            "ticket_expired",
            ticket_id=ticket.ticket_id,
            action="escalate",
            approvers=list(action.approvers),
        )
        escalated = TicketExpired(
            run_id=run.run_id,
            agent=run.agent,
            ticket_id=ticket.ticket_id,
            action="escalate",
            escalated_to=list(action.approvers),
        )
        await notify(self._deps, tx, run, escalated)
        note = InputRequested if ticket.target.kind == "remote_input" else ApprovalRequested
        await open_ticket(
            self._deps,
            tx,
            run,
            agent,
            ticket.target,
            tool,
            note,
            approvers=action.approvers,
            deadline=action.deadline,
        )
        return True
