"""A caller that stops waiting for an external approval: deferred (to be resumed once it
is decided) or withdrawn (its ticket voided), by its requester or sender only, over the
memory store, a SQLite file and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from approvals_kit import RuntimeFactory

from runtime import (
    Actor,
    Allow,
    Approval,
    ApprovalRequest,
    Deny,
    ExternalAgent,
    InvalidApproval,
    NotAwaiting,
    Permission,
    RunNotFound,
    Runtime,
    Store,
)
from runtime.domain.external import authorising_tool
from runtime.edges import ApprovalCallback

BOT = Actor(id="bot:coder")
BOB = Actor(id="bob")
STRANGER = Actor(id="mallory")
RESUME = {"platform": "somewhere_resume", "cwd": "/srv/jobs/1"}


def coder() -> ExternalAgent:
    def tools(name: str) -> Any:
        if name == "Read":
            return authorising_tool(name, Permission.ALLOW)
        return authorising_tool(name)

    return ExternalAgent("coder", tools, fingerprint="v1", approvers=("bob",))


async def asked(
    rt: Runtime, tool: str = "Bash", resume: dict[str, Any] | None = RESUME
) -> Approval:
    return await rt.request_approval(
        ApprovalRequest(
            "coder",
            tool,
            {"command": "git push"},
            session_id="sess-1",
            on_behalf_of="alice",
            resume=resume,
        ),
        actor=BOT,
        idempotency_key=None,
    )


async def resume_items(store: Store, approval_id: str) -> list[Any]:
    async with store.transaction() as tx:
        items = await tx.outbox_for_run(approval_id)
    return [i for i in items if i.destination.get("platform") == RESUME["platform"]]


async def test_a_deferred_approval_queues_its_resume_once_decided(
    runtime_factory: RuntimeFactory, store: Store
) -> None:
    rt = runtime_factory(coder())
    pending = await asked(rt)
    assert (pending.status, pending.deferred) == ("pending", False)
    deferred = await rt.defer_approval(pending.approval_id, actor=BOT)
    again = await rt.defer_approval(pending.approval_id, actor=Actor(id="alice"))
    assert deferred.deferred and again.deferred and again.status == "pending"
    events = [e for e in await rt.events(pending.approval_id) if e["kind"] == "approval_deferred"]
    assert len(events) == 1  # deferring twice records it once
    assert await resume_items(store, pending.approval_id) == []

    assert pending.ticket_id is not None
    await rt.decide(pending.ticket_id, Allow(), BOB, resume=True)
    (item,) = await resume_items(store, pending.approval_id)
    assert item.kind == ApprovalCallback.model_fields["kind"].default
    assert item.destination == RESUME
    assert item.payload["run_id"] == pending.approval_id
    read = await rt.approval(pending.approval_id, viewer=None)
    assert (read.status, read.deferred) == ("allowed", True)


async def test_a_decided_approval_is_not_deferred_and_answers_at_once(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = runtime_factory(coder())
    pending = await asked(rt)
    assert pending.ticket_id is not None
    await rt.decide(pending.ticket_id, Deny(reason="not now"), BOB, resume=True)
    late = await rt.defer_approval(pending.approval_id, actor=BOT)
    assert (late.status, late.reason, late.deferred) == ("denied", "not now", False)
    ruled = await asked(rt, tool="Read")
    assert (await rt.defer_approval(ruled.approval_id, actor=BOT)).status == "allowed"


async def test_without_a_resume_destination_there_is_nothing_to_defer_to(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = runtime_factory(coder())
    pending = await asked(rt, resume=None)
    with pytest.raises(InvalidApproval, match="resume destination"):
        await rt.defer_approval(pending.approval_id, actor=BOT)
    with pytest.raises(InvalidApproval, match="platform"):
        await asked(rt, resume={"cwd": "/x"})
    assert not (await rt.approval(pending.approval_id, viewer=None)).deferred


async def test_a_withdrawn_approval_voids_its_ticket_and_cannot_be_decided(
    runtime_factory: RuntimeFactory, store: Store
) -> None:
    rt = runtime_factory(coder())
    pending = await asked(rt)
    withdrawn = await rt.withdraw_approval(pending.approval_id, actor=BOT, reason="asked locally")
    assert (withdrawn.status, withdrawn.basis) == ("denied", "cancelled")
    assert "asked locally" in (withdrawn.reason or "")
    assert pending.ticket_id is not None
    with pytest.raises(NotAwaiting):
        await rt.decide(pending.ticket_id, Allow(), BOB, resume=True)
    # Withdrawn, not deferred: its end is queued to the resume destination, which
    # resumes nothing (the approval reads not deferred).
    assert not (await rt.approval(pending.approval_id, viewer=None)).deferred
    again = await rt.withdraw_approval(pending.approval_id, actor=BOT)
    assert again.basis == "cancelled"


async def test_only_the_requester_or_the_sender_may_stop_waiting(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = runtime_factory(coder())
    pending = await asked(rt)
    for who in (STRANGER, BOB):  # BOB may decide it, but did not ask for it
        with pytest.raises(RunNotFound):
            await rt.defer_approval(pending.approval_id, actor=who)
        with pytest.raises(RunNotFound):
            await rt.withdraw_approval(pending.approval_id, actor=who)
    read = await rt.approval(pending.approval_id, viewer=None)
    assert (read.status, read.deferred) == ("pending", False)
    assert read.ticket_id == pending.ticket_id
