"""Outcomes of external approvals: what the caller reports once it ran an allowed call,
and how a person reconciles an outcome the caller could not tell.

signoff does not run an external agent's tools, so it cannot know what became of one: the
caller reports it (``succeeded``, ``failed`` or ``unknown``, with a summary). The report
is an ``approval_outcome`` event in the approval run's flight recorder, recorded once: the
same report again changes nothing, another one is refused (`OutcomeConflict`).

An ``unknown`` outcome is what an uncertain call is for signoff's own tools: a person
must find out and record it. The approval's run has ended by then, so the report opens a
*reconciliation run*: a run of the same external agent, in the same session (thread),
whose one call is the approval's call (with the arguments it was allowed with), parked
``uncertain`` on an `Uncertain` ticket. Its card goes where the approval's went (Slack,
Discord, the console) and is answered like any uncertain call: record the verified
result, accept a retry, or abort (`runtime.services.decisions`). The report's event names
that run, and `read_outcome` reads its ticket's answer back as the outcome's
``resolution`` and ``resolved_by``.

A reconciliation run's origin is the approval's, without the callback URL (the approval
was delivered already) and with `RECONCILES` naming the approval.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from runtime.domain.approvals import ApprovalOutcome, OutcomeStatus, Resolution
from runtime.domain.errors import OutcomeConflict, RunNotFound
from runtime.domain.notifications import APPROVAL_CALLBACK_URL, UncertainCall
from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import Abort, Actor, Resolve, ResumeTicket, Retry, Uncertain
from runtime.engine.deps import Deps
from runtime.engine.journal import open_ticket, record
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, EventRecord, RunRecord

OUTCOME_EVENT = "approval_outcome"
"""The flight-recorder event of a reported outcome (on the approval's run)."""
RECONCILES = "reconciles"
"""The origin key of a reconciliation run: the id of the approval it reconciles."""

_RESOLUTIONS: Mapping[str, Resolution] = {
    "resolve": "resolved",
    "retry": "retry",
    "abort": "abort",
}


class Outcomes:
    """Records what callers report of their allowed external calls (see the module)."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    async def report(
        self, approval_id: str, status: OutcomeStatus, summary: str | None, actor: Actor
    ) -> bool:
        """Record the outcome of an allowed approval's call, once.

        The caller has checked that the approval is allowed and that `actor` may report.

        Args:
            approval_id: The approval (its run's id).
            status: ``succeeded``, ``failed`` or ``unknown``.
            summary: The caller's words about what happened.
            actor: Who reports.

        Returns:
            True when recorded now; False when the same outcome was recorded already.

        Raises:
            RunNotFound: There is no such run.
            OutcomeConflict: Another outcome was reported already, or the approval's
                call was never allowed.
        """
        deps = self._deps
        async with deps.store.transaction() as tx:
            # The run's row is the lock: two reports of one approval apply one at a time.
            run = await tx.get_run(approval_id, for_update=True)
            if run is None:
                raise RunNotFound(f"no approval {approval_id!r}")
            earlier = reported_event(await tx.events(approval_id))
            if earlier is not None:
                if (earlier.data.get("status"), earlier.data.get("summary")) == (status, summary):
                    return False
                raise OutcomeConflict(
                    f"approval {approval_id}: the outcome {earlier.data.get('status')!r} was "
                    "reported already"
                )
            now = deps.clock.now()
            data: dict[str, Any] = {"status": status, "summary": summary}
            if status == "unknown":
                data["reconciliation_run_id"] = await self._reconcile(tx, run, summary, actor)
            await record(tx, approval_id, now, OUTCOME_EVENT, by=actor.id, **data)
        return True

    async def _reconcile(
        self, tx: Transaction, run: RunRecord, summary: str | None, actor: Actor
    ) -> str:
        """Open the reconciliation run of `run`'s call; its id."""
        deps = self._deps
        agent = deps.agents.get(run.agent)
        call = _allowed_call(await tx.calls_for_run(run.run_id))
        opening = _opening(run.run_id, run.messages, call)
        if agent is None or call is None or opening is None:
            raise OutcomeConflict(f"approval {run.run_id}: no allowed call to reconcile")
        now = deps.clock.now()
        origin = {k: v for k, v in run.origin.items() if k != APPROVAL_CALLBACK_URL}
        origin[RECONCILES] = run.run_id
        fresh = RunRecord(
            run_id=deps.ids.new_id("run"),
            thread_id=run.thread_id,
            agent=run.agent,
            agent_version=agent.version,
            status=RunStatus.AWAITING,
            input=run.input,
            requester=run.requester,
            created_at=now,
            updated_at=now,
            origin=origin,
            messages=list(opening),
            turns=1,
            batch=1,
        )
        await tx.insert_run(fresh)
        await record(
            tx,
            fresh.run_id,
            now,
            "run_started",
            by=actor.id,
            agent=fresh.agent,
            input=fresh.input,
            thread_id=fresh.thread_id,
            origin=fresh.origin,
        )
        uncertain = CallRecord(
            call_id=deps.ids.new_id("call"),
            run_id=fresh.run_id,
            batch=1,
            seq=0,
            model_call_id=call.model_call_id,
            tool=call.tool,
            args=dict(call.args),
            state=CallState.UNCERTAIN,
            replay_policy=call.replay_policy,
            execution_key=deps.ids.new_id("xk"),
            created_at=now,
            updated_at=now,
            attempts=1,
            decided_by=call.decided_by,
        )
        await tx.insert_call(uncertain)
        tool = agent.tools.get(call.tool)
        await record(
            tx,
            fresh.run_id,
            now,
            "tool_uncertain",
            call_id=uncertain.call_id,
            tool=uncertain.tool,
            attempts=uncertain.attempts,
            execution_key=uncertain.execution_key,
            reason=summary or "the caller reported the outcome as unknown",
            approval_id=run.run_id,
        )
        target = Uncertain(
            call_id=uncertain.call_id,
            tool=uncertain.tool,
            args=uncertain.args,
            execution_key=uncertain.execution_key,
        )
        await open_ticket(deps, tx, fresh, agent, target, tool, UncertainCall)
        await record(tx, fresh.run_id, now, "run_awaiting")
        return fresh.run_id


def reported_event(events: Sequence[EventRecord]) -> EventRecord | None:
    """The event of the outcome reported for an approval, among its run's events."""
    return next((e for e in events if e.kind == OUTCOME_EVENT), None)


async def read_outcome(tx: Transaction, approval_id: str) -> ApprovalOutcome | None:
    """The outcome reported for an approval (None: none yet), with its reconciliation.

    Reads in `tx`: the approval run's events and, for an ``unknown`` outcome, the
    reconciliation run's tickets.
    """
    event = reported_event(await tx.events(approval_id))
    if event is None:
        return None
    return await outcome_of(tx, event)


async def outcome_of(tx: Transaction, event: EventRecord) -> ApprovalOutcome:
    """The outcome an `OUTCOME_EVENT` records, with the reconciliation of an ``unknown`` one
    (read in `tx`)."""
    data = event.data
    resolution: Resolution | None = None
    resolved_by: str | None = None
    reconciling = data.get("reconciliation_run_id")
    if isinstance(reconciling, str):
        settled = _settled(await tx.tickets_for_run(reconciling, status=TicketStatus.DECIDED))
        if settled is not None:
            resolution, resolved_by = settled
    return ApprovalOutcome(
        status=cast(OutcomeStatus, data.get("status")),
        summary=data.get("summary"),
        reported_by=event.actor or str(data.get("reported_by") or ""),
        reported_at=event.at,
        resolution=resolution,
        resolved_by=resolved_by,
    )


def _settled(tickets: Sequence[ResumeTicket]) -> tuple[Resolution, str | None] | None:
    """How the uncertain ticket among `tickets` was answered, and by whom."""
    for ticket in tickets:
        if not isinstance(ticket.target, Uncertain) or ticket.decision is None:
            continue
        answer = ticket.decision
        match answer:
            case Resolve() | Retry() | Abort():
                return _RESOLUTIONS[answer.kind], ticket.decided_by
            case _:
                continue
    return None


def _allowed_call(calls: Sequence[CallRecord]) -> CallRecord | None:
    """The approval's call, once it was allowed and authorised."""
    return next((c for c in calls if c.state is CallState.COMPLETED), None)


def _opening(
    approval_id: str, messages: Sequence[dict[str, Any]], call: CallRecord | None
) -> list[dict[str, Any]] | None:
    """What a reconciliation run's transcript starts with: the approval's request, marked
    as reconciling it (`RECONCILES`), and the turn that proposed `call`, so that its model
    ends the run once the call is settled (`runtime.domain.external.ExternalModel`)."""
    if call is None:
        return None
    for index, message in enumerate(messages):
        ids = [c.get("id") for c in message.get("tool_calls") or ()]
        if message.get("role") != "assistant" or call.model_call_id not in ids:
            continue
        asked = next((m for m in reversed(messages[:index]) if m.get("role") == "user"), None)
        try:
            request = json.loads(str(asked.get("content") or "")) if asked is not None else None
        except ValueError:
            request = None
        if not isinstance(request, dict):
            return None
        request[RECONCILES] = approval_id
        opening = json.dumps(request, sort_keys=True, separators=(",", ":"))
        proposed = {
            **message,
            "tool_calls": [c for c in message["tool_calls"] if c.get("id") == call.model_call_id],
        }
        return [{"role": "user", "content": opening}, proposed]
    return None


def reconciled_approval(origin: Mapping[str, Any]) -> str | None:
    """The approval a run reconciles (None: it is not a reconciliation run)."""
    found = origin.get(RECONCILES)
    return str(found) if isinstance(found, str) else None


__all__ = [
    "OUTCOME_EVENT",
    "RECONCILES",
    "Outcomes",
    "outcome_of",
    "read_outcome",
    "reconciled_approval",
    "reported_event",
]
