"""Smoke: request, pending with a ticket, decide, read."""

from __future__ import annotations

from conftest import RuntimeFactory

from runtime import Actor, Allow, ApprovalRequest, Deny, ExternalAgent, Permission
from runtime.domain.external import authorising_tool


def billing() -> ExternalAgent:
    def tools(name: str):  # type: ignore[no-untyped-def]
        if name == "lookup":
            return authorising_tool(name, Permission.ALLOW)
        if name == "drop_db":
            return authorising_tool(name, Permission.DENY)
        return authorising_tool(name)

    return ExternalAgent("billing", tools, fingerprint="v1")


async def test_slice(runtime_factory: RuntimeFactory) -> None:
    rt = runtime_factory(billing())
    alice = Actor(id="alice")
    asked = await rt.request_approval(
        ApprovalRequest("billing", "refund", {"amount": 30}), actor=alice, idempotency_key=None
    )
    assert asked.status == "pending", asked
    assert asked.ticket_id
    await rt.decide(asked.ticket_id, Allow(), alice, resume=True)
    got = await rt.approval(asked.approval_id, viewer=alice)
    assert got.status == "allowed" and got.basis == "decision" and got.decided_by == "alice"

    ok = await rt.request_approval(
        ApprovalRequest("billing", "lookup", {"q": 1}), actor=alice, idempotency_key=None
    )
    assert ok.status == "allowed" and ok.basis == "rule", ok
    no = await rt.request_approval(
        ApprovalRequest("billing", "drop_db", {}), actor=alice, idempotency_key=None
    )
    assert no.status == "denied" and no.basis == "rule", no
    again = await rt.request_approval(
        ApprovalRequest("billing", "refund", {"amount": 31}), actor=alice, idempotency_key=None
    )
    await rt.decide(again.ticket_id or "", Deny(reason="too much"), alice, resume=True)
    got = await rt.approval(again.approval_id, viewer=alice)
    assert got.status == "denied" and got.reason == "too much", got
