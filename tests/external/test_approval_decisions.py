"""A pending external approval is an ordinary ticket: people allow, deny, edit and grant;
deadlines expire it; the answer survives a restart; idempotency keys never make a second
ticket."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from approvals_kit import RuntimeFactory, load_agents

from runtime import (
    Actor,
    Allow,
    Approval,
    ApprovalRequest,
    Deny,
    GrantRequest,
    IdempotencyConflict,
    ManualClock,
    RunNotFound,
    RunStatus,
    Runtime,
    Unauthorized,
)

BOT = Actor(id="bot")
ALICE = Actor(id="alice")
BOB = Actor(id="bob")


@pytest.fixture
def rt(runtime_factory: RuntimeFactory, tmp_path: Path) -> Runtime:
    return runtime_factory(*load_agents(tmp_path))


async def ask(
    rt: Runtime,
    tool: str = "refund",
    args: dict[str, object] | None = None,
    *,
    key: str | None = None,
    session: str | None = None,
    actor: Actor = ALICE,
    on_behalf_of: str | None = None,
) -> Approval:
    return await rt.request_approval(
        ApprovalRequest(
            "billing",
            tool,
            dict(args if args is not None else {"amount": 50}),
            session_id=session,
            on_behalf_of=on_behalf_of,
        ),
        actor=actor,
        idempotency_key=key,
    )


async def test_allow(rt: Runtime) -> None:
    asked = await ask(rt)
    assert asked.status == "pending"
    await rt.decide(asked.ticket_id or "", Allow(), ALICE.model_copy(update={"platform": "slack"}))
    got = await rt.approval(asked.approval_id, viewer=ALICE)
    assert (got.status, got.basis, got.decided_by, got.decided_via) == (
        "allowed",
        "decision",
        "alice",
        "slack",
    )
    assert got.decided_at is not None and got.ticket_id == asked.ticket_id
    assert got.arguments == {"amount": 50}


async def test_deny_with_reason(rt: Runtime) -> None:
    asked = await ask(rt)
    await rt.decide(asked.ticket_id or "", Deny(reason="not this month"), ALICE, resume=True)
    got = await rt.approval(asked.approval_id, viewer=ALICE)
    assert (got.status, got.basis, got.reason, got.decided_by) == (
        "denied",
        "decision",
        "not this month",
        "alice",
    )
    run = await rt.get(asked.approval_id)
    assert run.status is RunStatus.DONE


async def test_allow_with_edits(rt: Runtime) -> None:
    asked = await ask(rt, "pay", {"amount": 900, "to": "acme"})
    form = rt.edit_form(await rt.ticket(asked.ticket_id or ""))
    assert form is not None and [f.name for f in form.fields] == ["amount"]
    await rt.decide(asked.ticket_id or "", Allow(args={"amount": 90}), ALICE, resume=True)
    got = await rt.approval(asked.approval_id, viewer=ALICE)
    assert got.status == "allowed"
    assert got.arguments == {"amount": 90, "to": "acme"}
    assert got.requested_arguments == {"amount": 900, "to": "acme"}


async def test_edit_of_a_fixed_argument_is_refused(rt: Runtime) -> None:
    from runtime import NotEditable

    asked = await ask(rt, "pay", {"amount": 900, "to": "acme"})
    with pytest.raises(NotEditable):
        await rt.decide(asked.ticket_id or "", Allow(args={"to": "evil"}), ALICE)
    assert (await rt.approval(asked.approval_id, viewer=ALICE)).status == "pending"


async def test_expiry_denies(rt: Runtime, clock: ManualClock) -> None:
    asked = await ask(rt, "pay", {"amount": 900})
    assert asked.deadline is not None
    clock.advance(61)
    assert await rt.expire_overdue() == [asked.ticket_id]
    got = await rt.approval(asked.approval_id, viewer=ALICE)
    assert (got.status, got.basis, got.reason) == ("denied", "expiry", "expired")


async def test_expiry_cancels(rt: Runtime, clock: ManualClock) -> None:
    asked = await ask(rt, "void", {"invoice": "I-9"})
    clock.advance(61)
    assert await rt.expire_overdue() == [asked.ticket_id]
    got = await rt.approval(asked.approval_id, viewer=ALICE)
    assert (got.status, got.basis, got.reason) == ("denied", "expiry", "expired")
    assert (await rt.get(asked.approval_id)).status is RunStatus.CANCELLED


async def test_four_eyes_on_behalf_of(rt: Runtime) -> None:
    # The bot asks for alice: alice may not approve her own call, an operator may.
    asked = await ask(rt, "close_account", {"id": "A-1"}, actor=BOT, on_behalf_of="alice")
    assert asked.requester == "alice" and asked.requested_by == "bot"
    with pytest.raises(Unauthorized):
        await rt.decide(asked.ticket_id or "", Allow(), ALICE)
    operator = Actor(id="op", operator=True)
    await rt.decide(asked.ticket_id or "", Allow(), operator)
    assert (await rt.approval(asked.approval_id, viewer=BOT)).status == "allowed"


async def test_run_grant_covers_the_session(rt: Runtime) -> None:
    first = await ask(rt, session="conv-1")
    await rt.decide(
        first.ticket_id or "", Allow(grant=GrantRequest(scope="run")), ALICE, resume=True
    )
    again = await ask(rt, args={"amount": 70}, session="conv-1")
    assert (again.status, again.basis) == ("allowed", "grant")
    assert again.grant_id is not None and again.decided_by == "alice"
    grant = await rt.grant(again.grant_id)
    assert grant.run_id == first.approval_id
    other = await ask(rt, args={"amount": 70}, session="conv-2")
    assert other.status == "pending"
    fresh = await ask(rt, args={"amount": 70})
    assert fresh.status == "pending"


async def test_a_session_grant_stays_active_listed_and_revocable_after_its_run(
    rt: Runtime,
) -> None:
    first = await ask(rt, session="conv-1")
    await rt.decide(
        first.ticket_id or "", Allow(grant=GrantRequest(scope="run")), ALICE, resume=True
    )
    assert (await rt.get(first.approval_id)).status is RunStatus.DONE  # its one call ran
    [given] = await rt.grants(active=False)

    assert given.state == "active"
    assert [g.grant_id for g in await rt.grants()] == [given.grant_id]
    covered = await ask(rt, args={"amount": 70}, session="conv-1")
    assert [g.grant_id for g in await rt.grants_of_run(covered.approval_id)] == [given.grant_id]
    revoked = await rt.revoke_grant(given.grant_id, actor=ALICE)
    assert revoked.state == "revoked"
    assert (await ask(rt, args={"amount": 71}, session="conv-1")).status == "pending"


async def test_thread_grant_covers_the_session(rt: Runtime) -> None:
    first = await ask(rt, session="conv-1")
    await rt.decide(first.ticket_id or "", Allow(grant=GrantRequest(scope="thread")), ALICE)
    again = await ask(rt, args={"amount": 70}, session="conv-1")
    assert (again.status, again.basis) == ("allowed", "grant")
    assert (await ask(rt, args={"amount": 70}, session="conv-2")).status == "pending"


async def test_strangers_see_nothing(rt: Runtime) -> None:
    asked = await ask(rt, actor=BOT, on_behalf_of="alice")
    for viewer in (BOT, ALICE, Actor(id="op", operator=True)):
        assert (await rt.approval(asked.approval_id, viewer=viewer)).approval_id
    with pytest.raises(RunNotFound):
        await rt.approval(asked.approval_id, viewer=BOB)
    with pytest.raises(RunNotFound):
        await rt.wait_approval(asked.approval_id, viewer=BOB, timeout=0)
    with pytest.raises(RunNotFound):
        await rt.approval("run_nope", viewer=ALICE)
    page = await rt.approval_page(viewer=BOB)
    assert page.items == []
    mine = await rt.approval_page(viewer=ALICE, status="pending")
    assert [a.approval_id for a in mine.items] == [asked.approval_id]


async def test_the_approver_sees_it(runtime_factory: RuntimeFactory, tmp_path: Path) -> None:
    rt = runtime_factory(*load_agents(tmp_path))
    asked = await rt.request_approval(ApprovalRequest("strict", "x", {}), actor=BOT)
    carol = Actor(id="carol")
    assert (await rt.approval(asked.approval_id, viewer=carol)).status == "pending"
    await rt.decide(asked.ticket_id or "", Deny(), carol)
    assert (await rt.approval(asked.approval_id, viewer=carol)).status == "denied"


async def test_wait_returns_when_decided(rt: Runtime) -> None:
    asked = await ask(rt)
    at_once = await rt.wait_approval(asked.approval_id, viewer=ALICE, timeout=0)
    assert at_once.status == "pending"
    waiting = asyncio.create_task(rt.wait_approval(asked.approval_id, viewer=ALICE, timeout=30))
    await asyncio.sleep(0)
    assert not waiting.done()
    await rt.decide(asked.ticket_id or "", Allow(), ALICE)
    got = await asyncio.wait_for(waiting, 10)
    assert got.status == "allowed"


async def test_decided_after_a_restart(runtime_factory: RuntimeFactory, tmp_path: Path) -> None:
    first = runtime_factory(*load_agents(tmp_path))
    asked = await ask(first, key="k-1")
    # A new process on the same store: the same approval, decided there.
    second = runtime_factory(*load_agents(tmp_path))
    again = await ask(second, key="k-1")
    assert again.approval_id == asked.approval_id and again.replayed
    assert again.ticket_id == asked.ticket_id
    await second.decide(asked.ticket_id or "", Allow(), ALICE, resume=True)
    got = await second.approval(asked.approval_id, viewer=ALICE)
    assert got.status == "allowed"
    assert (await second.get(asked.approval_id)).status is RunStatus.DONE


async def test_undeclared_agent_after_a_restart(runtime_factory: RuntimeFactory) -> None:
    first = runtime_factory(undeclared_agents="any")
    asked = await first.request_approval(ApprovalRequest("helpdesk", "reset", {}), actor=ALICE)
    second = runtime_factory(undeclared_agents="any")
    await second.decide(asked.ticket_id or "", Allow(), ALICE, resume=True)
    assert (await second.approval(asked.approval_id, viewer=ALICE)).status == "allowed"


async def test_idempotency(rt: Runtime) -> None:
    asked = await ask(rt, key="k-1")
    again = await ask(rt, key="k-1")
    assert again.approval_id == asked.approval_id and again.replayed and not asked.replayed
    with pytest.raises(IdempotencyConflict):
        await ask(rt, args={"amount": 51}, key="k-1")
    # Keys are the sender's own: another sender's k-1 is another approval.
    theirs = await ask(rt, key="k-1", actor=BOB)
    assert theirs.approval_id != asked.approval_id
    async with rt.store.transaction() as tx:
        tickets = await tx.tickets_for_run(asked.approval_id)
    assert len(tickets) == 1


async def test_concurrent_requests_with_one_key(rt: Runtime) -> None:
    answers = await asyncio.gather(*(ask(rt, key="same") for _ in range(5)))
    assert len({a.approval_id for a in answers}) == 1
    assert sum(not a.replayed for a in answers) == 1
    async with rt.store.transaction() as tx:
        runs = await tx.list_runs(limit=10)
    assert len(runs) == 1


async def test_an_approval_ending_is_not_announced_in_chat(rt: Runtime) -> None:
    at_once = await ask(rt, "lookup_order", {"order": "A-1"})
    asked = await ask(rt, key="k-chat")
    await rt.decide(asked.ticket_id or "", Allow(), ALICE, resume=True)

    for approval in (at_once, asked):
        assert (await rt.get(approval.approval_id)).status is RunStatus.DONE
        async with rt.store.transaction() as tx:
            kinds = [item.kind for item in await tx.outbox_for_run(approval.approval_id)]
        assert "run_finished" not in kinds
    assert "approval_requested" in kinds  # the card of the one that asked


async def test_a_long_poll_ends_as_it_stands_once_stopped(rt: Runtime) -> None:
    asked = await ask(rt)
    stop = asyncio.Event()
    waiting = asyncio.ensure_future(
        rt.wait_approval(asked.approval_id, viewer=ALICE, timeout=600, stop=stop)
    )
    stop.set()

    stood = await asyncio.wait_for(waiting, timeout=10)  # not the 600 s of its bound

    assert (stood.status, stood.ticket_id) == ("pending", asked.ticket_id)
