"""Records to column values and rows back to records, per table."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Row

from runtime.states import CallState, RunStatus, TicketStatus
from runtime.store.records import (
    CallRecord,
    EventRecord,
    GrantRecord,
    IdempotencyRecord,
    OutboxRecord,
    ReceivedRecord,
    RunRecord,
    decider_keys,
    pacing_key,
)
from runtime.store.sql.convert import from_micros, opt_datetime, opt_micros, to_micros
from runtime.tickets import ANSWER, AWAIT_TARGET, Answer, ResumeTicket


def run_values(run: RunRecord, sealed: int) -> dict[str, Any]:
    """Every column of a run except the two request flags, with `sealed` transcript
    entries kept apart (in `run_messages`)."""
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "agent": run.agent,
        "agent_version": run.agent_version,
        "status": RunStatus(run.status).value,
        "input": run.input,
        "requester": run.requester,
        "created_at": to_micros(run.created_at),
        "updated_at": to_micros(run.updated_at),
        "origin": run.origin,
        "recent_messages": run.messages[sealed:],
        "sealed_messages": sealed,
        "turns": run.turns,
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "usage_incomplete": run.usage_incomplete,
        "model_attempt": run.model_attempt,
        "model_in_flight": run.model_in_flight,
        "batch": run.batch,
        "final_text": run.final_text,
        "error": run.error,
        "lease_owner": run.lease_owner,
        "lease_expires_at": opt_micros(run.lease_expires_at),
        "fence": run.fence,
        "parent_run_id": run.parent_run_id,
        "parent_call_id": run.parent_call_id,
        "task_key": run.task_key,
        "depth": run.depth,
        "lineage": run.lineage or None,
    }


def run_record(row: Row[Any]) -> RunRecord:
    """The run of `row`; its transcript holds only the row's own entries until the
    sealed ones are read (`SQLTransaction._whole`)."""
    return RunRecord(
        run_id=row.run_id,
        thread_id=row.thread_id,
        agent=row.agent,
        agent_version=row.agent_version,
        status=RunStatus(row.status),
        input=row.input,
        requester=row.requester,
        created_at=from_micros(row.created_at),
        updated_at=from_micros(row.updated_at),
        origin=row.origin,
        messages=list(row.recent_messages),
        turns=row.turns,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        usage_incomplete=row.usage_incomplete,
        model_attempt=row.model_attempt,
        model_in_flight=row.model_in_flight,
        batch=row.batch,
        final_text=row.final_text,
        error=row.error,
        pause_requested=row.pause_requested,
        cancel_requested=row.cancel_requested,
        lease_owner=row.lease_owner,
        lease_expires_at=opt_datetime(row.lease_expires_at),
        fence=row.fence,
        parent_run_id=row.parent_run_id,
        parent_call_id=row.parent_call_id,
        task_key=row.task_key,
        depth=row.depth,
        lineage=list(row.lineage or ()),
        messages_sealed=row.sealed_messages,
    )


def call_values(call: CallRecord) -> dict[str, Any]:
    return {
        "call_id": call.call_id,
        "run_id": call.run_id,
        "batch": call.batch,
        "seq": call.seq,
        "model_call_id": call.model_call_id,
        "tool": call.tool,
        "args": call.args,
        "state": CallState(call.state).value,
        "replay_policy": call.replay_policy,
        "execution_key": call.execution_key,
        "created_at": to_micros(call.created_at),
        "updated_at": to_micros(call.updated_at),
        "attempts": call.attempts,
        "result": call.result,
        "error": call.error,
        "answer": call.answer,
        "decided_by": call.decided_by,
        "reason": call.reason,
        "edit": call.edit,
    }


def call_record(row: Row[Any]) -> CallRecord:
    return CallRecord(
        call_id=row.call_id,
        run_id=row.run_id,
        batch=row.batch,
        seq=row.seq,
        model_call_id=row.model_call_id,
        tool=row.tool,
        args=row.args,
        state=CallState(row.state),
        replay_policy=row.replay_policy,
        execution_key=row.execution_key,
        created_at=from_micros(row.created_at),
        updated_at=from_micros(row.updated_at),
        attempts=row.attempts,
        result=row.result,
        error=row.error,
        answer=row.answer,
        decided_by=row.decided_by,
        reason=row.reason,
        edit=row.edit,
    )


def ticket_values(ticket: ResumeTicket) -> dict[str, Any]:
    return {
        "ticket_id": ticket.ticket_id,
        "correlation": ticket.correlation,
        "run_id": ticket.run_id,
        "thread_id": ticket.thread_id,
        "agent": ticket.agent,
        "agent_version": ticket.agent_version,
        "catalog_fingerprint": ticket.catalog_fingerprint,
        "call_id": ticket.call_id,
        "target_kind": ticket.target.kind,
        "target": AWAIT_TARGET.dump_python(ticket.target, mode="json", by_alias=True),
        "requester": ticket.requester,
        "approvers": list(ticket.approvers),
        "four_eyes": ticket.four_eyes,
        "deadline": opt_micros(ticket.deadline),
        "status": ticket.status.value,
        "created_at": to_micros(ticket.created_at),
        "decision": dump_answer(ticket.decision),
        "decided_by": ticket.decided_by,
        "decided_at": opt_micros(ticket.decided_at),
        "chain": list(ticket.chain) or None,
    }


def decider_rows(ticket: ResumeTicket) -> list[dict[str, Any]]:
    barred = ticket.requester if ticket.four_eyes else None
    return [
        {
            "ticket_id": ticket.ticket_id,
            "decider": key,
            "run_id": ticket.run_id,
            "created_at": to_micros(ticket.created_at),
            "call_id": ticket.call_id,
            "target_kind": ticket.target.kind,
            "barred": barred,
        }
        for key in decider_keys(ticket)
    ]


def dump_answer(answer: Answer | None) -> dict[str, Any] | None:
    if answer is None:
        return None
    dumped: dict[str, Any] = ANSWER.dump_python(answer, mode="json", by_alias=True)
    return dumped


def ticket_record(row: Row[Any]) -> ResumeTicket:
    return ResumeTicket.model_validate(
        {
            "ticket_id": row.ticket_id,
            "correlation": row.correlation,
            "run_id": row.run_id,
            "thread_id": row.thread_id,
            "agent": row.agent,
            "agent_version": row.agent_version,
            "catalog_fingerprint": row.catalog_fingerprint,
            "target": row.target,
            "requester": row.requester,
            "approvers": tuple(row.approvers),
            "four_eyes": row.four_eyes,
            "deadline": opt_datetime(row.deadline),
            "status": TicketStatus(row.status),
            "created_at": from_micros(row.created_at),
            "decision": row.decision,
            "decided_by": row.decided_by,
            "decided_at": opt_datetime(row.decided_at),
            "chain": tuple(row.chain or ()),
        }
    )


def event_record(row: Row[Any]) -> EventRecord:
    return EventRecord(
        run_id=row.run_id,
        at=from_micros(row.at),
        kind=row.kind,
        data=row.data,
        actor=row.actor,
        seq=row.seq,
    )


def outbox_values(item: OutboxRecord) -> dict[str, Any]:
    return {
        "outbox_id": item.outbox_id,
        "run_id": item.run_id,
        "kind": item.kind,
        "payload": item.payload,
        "destination": item.destination,
        "created_at": to_micros(item.created_at),
        "next_attempt_at": to_micros(item.next_attempt_at),
        "ticket_id": item.ticket_id,
        "state": item.state,
        "attempts": item.attempts,
        "last_error": item.last_error,
        "platform_ref": item.platform_ref,
        "delivered_at": opt_micros(item.delivered_at),
        "channel_key": pacing_key(item.kind, item.destination),
        "lease_owner": item.lease_owner,
        "lease_expires_at": opt_micros(item.lease_expires_at),
        "fence": item.fence,
    }


def received_values(item: ReceivedRecord) -> dict[str, Any]:
    return {
        "command_id": item.command_id,
        "source": item.source,
        "delivery_id": item.delivery_id,
        "ticket_id": item.ticket_id,
        "correlation": item.correlation,
        "answer": item.answer,
        "actor": item.actor,
        "reply": item.reply,
        "received_at": to_micros(item.received_at),
        "state": item.state,
        "error_code": item.error_code,
        "error": item.error,
        "applied_at": to_micros(item.applied_at) if item.applied_at is not None else None,
        "lease_owner": item.lease_owner,
        "lease_expires_at": opt_micros(item.lease_expires_at),
    }


def received_record(row: Row[Any]) -> ReceivedRecord:
    return ReceivedRecord(
        command_id=row.command_id,
        source=row.source,
        delivery_id=row.delivery_id,
        ticket_id=row.ticket_id,
        correlation=row.correlation,
        answer=row.answer,
        actor=row.actor,
        reply=row.reply,
        received_at=from_micros(row.received_at),
        state=row.state,
        error_code=row.error_code,
        error=row.error,
        applied_at=from_micros(row.applied_at) if row.applied_at is not None else None,
        lease_owner=row.lease_owner,
        lease_expires_at=opt_datetime(row.lease_expires_at),
    )


def outbox_record(row: Row[Any]) -> OutboxRecord:
    return OutboxRecord(
        outbox_id=row.outbox_id,
        run_id=row.run_id,
        kind=row.kind,
        payload=row.payload,
        destination=row.destination,
        created_at=from_micros(row.created_at),
        next_attempt_at=from_micros(row.next_attempt_at),
        ticket_id=row.ticket_id,
        state=row.state,
        attempts=row.attempts,
        last_error=row.last_error,
        platform_ref=row.platform_ref,
        delivered_at=opt_datetime(row.delivered_at),
        lease_owner=row.lease_owner,
        lease_expires_at=opt_datetime(row.lease_expires_at),
        fence=row.fence,
    )


def idempotency_record(row: Row[Any]) -> IdempotencyRecord:
    return IdempotencyRecord(
        scope=row.scope,
        key=row.key,
        fingerprint=row.fingerprint,
        run_id=row.run_id,
        created_at=from_micros(row.created_at),
    )


def grant_values(grant: GrantRecord) -> dict[str, Any]:
    return {
        "grant_id": grant.grant_id,
        "agent": grant.agent,
        "agent_version": grant.agent_version,
        "catalog_fingerprint": grant.catalog_fingerprint,
        "tool": grant.tool,
        "scope": grant.scope,
        "run_id": grant.run_id,
        "thread_id": grant.thread_id,
        "requester": grant.requester,
        "arg_constraint": grant.constraint,
        "granted_by": grant.granted_by,
        "granted_by_name": grant.granted_by_name,
        "platform": grant.platform,
        "ticket_id": grant.ticket_id,
        "created_at": to_micros(grant.created_at),
        "expires_at": opt_micros(grant.expires_at),
        "revoked_at": opt_micros(grant.revoked_at),
        "revoked_by": grant.revoked_by,
    }


def grant_record(row: Row[Any]) -> GrantRecord:
    return GrantRecord(
        grant_id=row.grant_id,
        agent=row.agent,
        agent_version=row.agent_version,
        catalog_fingerprint=row.catalog_fingerprint,
        tool=row.tool,
        scope=row.scope,
        run_id=row.run_id,
        thread_id=row.thread_id,
        requester=row.requester,
        constraint=row.arg_constraint,
        granted_by=row.granted_by,
        granted_by_name=row.granted_by_name,
        platform=row.platform,
        ticket_id=row.ticket_id,
        created_at=from_micros(row.created_at),
        expires_at=opt_datetime(row.expires_at),
        revoked_at=opt_datetime(row.revoked_at),
        revoked_by=row.revoked_by,
    )
