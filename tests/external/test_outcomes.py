"""Outcomes of external approvals: reported once by the caller, into the flight recorder;
an ``unknown`` one reconciled by a person through an uncertain ticket."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from approvals_kit import RuntimeFactory

from runtime import (
    Abort,
    Actor,
    Allow,
    Approval,
    ApprovalRequest,
    Deny,
    ExternalAgent,
    OutcomeConflict,
    Permission,
    Resolve,
    Retry,
    RunNotFound,
    RunStatus,
    Runtime,
    Uncertain,
)
from runtime.domain.external import authorising_tool
from runtime.services.outcomes import RECONCILES

ALICE = Actor(id="alice")
BOT = Actor(id="bot:billing")
BOB = Actor(id="bob")
STRANGER = Actor(id="mallory")


def billing() -> ExternalAgent:
    def tools(name: str) -> Any:
        if name == "lookup":
            return authorising_tool(name, Permission.ALLOW)
        return authorising_tool(name)

    return ExternalAgent("billing", tools, fingerprint="v1", approvers=("bob",))


async def allowed(rt: Runtime, tool: str = "refund", session: str | None = "conv-1") -> Approval:
    """An approval `bob` allowed, requested by the bot on behalf of alice."""
    asked = await rt.request_approval(
        ApprovalRequest(
            "billing",
            tool,
            {"order": "A-1", "amount": 30},
            session_id=session,
            on_behalf_of="alice",
        ),
        actor=BOT,
        idempotency_key=None,
    )
    if asked.status == "pending":
        assert asked.ticket_id is not None
        await rt.decide(asked.ticket_id, Allow(), BOB, resume=True)
        asked = await rt.approval(asked.approval_id, viewer=BOT)
    assert asked.status == "allowed", asked
    return asked


async def outcome_events(rt: Runtime, approval_id: str) -> list[dict[str, Any]]:
    return [e for e in await rt.events(approval_id) if e["kind"] == "approval_outcome"]


async def reconciliation_ticket(rt: Runtime, approval_id: str) -> tuple[str, str]:
    """The reconciliation run of an approval's unknown outcome and its open ticket."""
    (event,) = await outcome_events(rt, approval_id)
    run_id = event["data"]["reconciliation_run_id"]
    run = await rt.get(run_id)
    (entry,) = run.pending
    assert isinstance(entry.ticket.target, Uncertain)
    return run_id, entry.ticket.ticket_id


async def test_an_outcome_is_recorded_once_in_the_flight_recorder(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = runtime_factory(billing())
    approval = await allowed(rt)
    assert approval.outcome is None

    reported = await rt.report_outcome(approval.approval_id, "succeeded", "refunded", actor=BOT)
    outcome = reported.outcome
    assert outcome is not None
    assert (outcome.status, outcome.summary, outcome.reported_by) == (
        "succeeded",
        "refunded",
        "bot:billing",
    )
    assert (outcome.resolution, outcome.resolved_by) == (None, None)
    (event,) = await outcome_events(rt, approval.approval_id)
    assert event["data"] == {"status": "succeeded", "summary": "refunded"}
    assert event["actor"] == "bot:billing"

    # The same report again (also by the requester) changes nothing.
    again = await rt.report_outcome(approval.approval_id, "succeeded", "refunded", actor=ALICE)
    assert again.outcome == outcome
    assert len(await outcome_events(rt, approval.approval_id)) == 1

    # Another one is refused, and changes nothing either.
    with pytest.raises(OutcomeConflict):
        await rt.report_outcome(approval.approval_id, "failed", "refunded", actor=BOT)
    with pytest.raises(OutcomeConflict):
        await rt.report_outcome(approval.approval_id, "succeeded", "other words", actor=BOT)
    read = await rt.approval(approval.approval_id, viewer=ALICE)
    assert read.outcome == outcome


async def test_only_the_requester_or_the_sender_may_report(runtime_factory: RuntimeFactory) -> None:
    rt = runtime_factory(billing())
    approval = await allowed(rt)
    # bob decided it (and may read it) but neither asked for it nor runs it.
    assert (await rt.approval(approval.approval_id, viewer=BOB)).status == "allowed"
    for who in (BOB, STRANGER):
        with pytest.raises(RunNotFound):
            await rt.report_outcome(approval.approval_id, "succeeded", None, actor=who)
    with pytest.raises(RunNotFound):
        await rt.report_outcome("run_nope", "succeeded", None, actor=BOT)
    assert await outcome_events(rt, approval.approval_id) == []


async def test_only_an_allowed_approval_has_an_outcome(runtime_factory: RuntimeFactory) -> None:
    rt = runtime_factory(billing())
    pending = await rt.request_approval(
        ApprovalRequest("billing", "refund", {"order": "A-2"}), actor=BOT, idempotency_key=None
    )
    assert pending.status == "pending" and pending.ticket_id is not None
    with pytest.raises(OutcomeConflict):
        await rt.report_outcome(pending.approval_id, "succeeded", None, actor=BOT)
    await rt.decide(pending.ticket_id, Deny(reason="no"), BOB, resume=True)
    with pytest.raises(OutcomeConflict):
        await rt.report_outcome(pending.approval_id, "failed", None, actor=BOT)
    assert await outcome_events(rt, pending.approval_id) == []


async def test_concurrent_reports_record_one(runtime_factory: RuntimeFactory) -> None:
    rt = runtime_factory(billing())
    approval = await allowed(rt, "lookup")
    results = await asyncio.gather(
        rt.report_outcome(approval.approval_id, "succeeded", None, actor=BOT),
        rt.report_outcome(approval.approval_id, "failed", "boom", actor=BOT),
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, OutcomeConflict)]
    accepted = [r for r in results if isinstance(r, Approval)]
    assert len(refused) == 1 and len(accepted) == 1, results
    assert len(await outcome_events(rt, approval.approval_id)) == 1


@pytest.mark.parametrize(
    ("answer", "resolution"),
    [
        (Resolve(result="the refund went through"), "resolved"),
        (Retry(), "retry"),
        (Abort(reason="give up"), "abort"),
    ],
)
async def test_an_unknown_outcome_is_reconciled_by_a_person(
    runtime_factory: RuntimeFactory, answer: Any, resolution: str
) -> None:
    rt = runtime_factory(billing())
    approval = await allowed(rt)
    reported = await rt.report_outcome(
        approval.approval_id, "unknown", "the payments API timed out", actor=BOT
    )
    assert reported.outcome is not None and reported.outcome.status == "unknown"
    assert reported.outcome.resolution is None

    run_id, ticket_id = await reconciliation_ticket(rt, approval.approval_id)
    run = await rt.get(run_id)
    assert run.status is RunStatus.AWAITING
    ticket = await rt.ticket(ticket_id)
    # The same call, in the same session, decided by the same approvers.
    assert ticket.thread_id == (await rt.get(approval.approval_id)).thread_id
    assert ticket.approvers == ("bob",) and ticket.requester == "alice"
    target = ticket.target
    assert isinstance(target, Uncertain)
    assert (target.tool, target.args) == ("refund", {"order": "A-1", "amount": 30})
    # It is not an approval of its own.
    with pytest.raises(RunNotFound):
        await rt.approval(run_id, viewer=ALICE)

    await rt.decide(ticket_id, answer, BOB, resume=True)
    outcome = (await rt.approval(approval.approval_id, viewer=BOT)).outcome
    assert outcome is not None
    assert (outcome.status, outcome.resolution, outcome.resolved_by) == (
        "unknown",
        resolution,
        "bob",
    )
    finished = await rt.get(run_id)
    assert finished.status is RunStatus.DONE
    assert finished.text is not None and finished.text.startswith("Reconciled")


async def test_a_reconciliation_survives_a_restart(runtime_factory: RuntimeFactory) -> None:
    rt = runtime_factory(billing())
    approval = await allowed(rt)
    await rt.report_outcome(approval.approval_id, "unknown", None, actor=ALICE)
    _, ticket_id = await reconciliation_ticket(rt, approval.approval_id)
    await rt.aclose()

    restarted = runtime_factory(billing())
    await restarted.decide(ticket_id, Resolve(result={"refund": "r_1"}), BOB, resume=True)
    outcome = (await restarted.approval(approval.approval_id, viewer=ALICE)).outcome
    assert outcome is not None
    assert (outcome.reported_by, outcome.resolution) == ("alice", "resolved")
    # Reporting the same unknown outcome again opens nothing more.
    await restarted.report_outcome(approval.approval_id, "unknown", None, actor=ALICE)
    assert len(await restarted.open_tickets()) == 0


async def test_the_reconciliation_run_names_its_approval(runtime_factory: RuntimeFactory) -> None:
    rt = runtime_factory(billing())
    approval = await allowed(rt)
    await rt.report_outcome(approval.approval_id, "unknown", None, actor=BOT)
    run_id, _ = await reconciliation_ticket(rt, approval.approval_id)
    (started,) = [e for e in await rt.events(run_id) if e["kind"] == "run_started"]
    assert started["data"]["origin"][RECONCILES] == approval.approval_id
    assert "approval_callback_url" not in started["data"]["origin"]
