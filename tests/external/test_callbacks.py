"""Signed callbacks of external approvals, end to end: `signoff serve`'s process
(`bot.bootstrap.build_service`) on a SQLite file, listening on 127.0.0.1, asked over
HTTP, delivering through its outbox to a local receiver that verifies each request with
the Standard Webhooks library, as a receiver in any language would."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from serving import SECRET, Receiver, Serve, receiver, serve

from adapters.client import verify_decision_token
from adapters.webhook.approval_callback import ApprovalCallbackNotifier, ApprovalCallbacks
from runtime import ManualClock
from runtime.edges import ApprovalCallback, Delivery, DeliveryError, RunFinished

__all__ = ["receiver", "serve"]  # fixtures


async def test_a_decision_is_posted_once_signed_with_the_approval_as_get_answers_it(
    serve: Serve, receiver: Receiver
) -> None:
    async with serve() as served:
        asked = await served.asked()
        assert asked["status"] == "pending"
        assert receiver.received == []  # nothing is sent while it is pending
        await served.decide(asked["ticket_id"], decision="allow")
        (payload,) = await receiver.wait_for(1)
        item = await served.delivered(asked["approval_id"])
        read = await served.get(asked["approval_id"])
        jwks = (await served.http.get("/.well-known/jwks.json")).json()

    assert payload == read
    assert payload["status"] == "allowed" and payload["decided_by"] == "U-ann"
    headers, _ = receiver.received[0]
    assert headers["webhook-id"] == item.outbox_id
    assert headers["Content-Type"] == "application/json"
    # The decision token in it verifies with the service's public keys.
    claims = verify_decision_token(
        payload["decision_token"], jwks=jwks, tool="refund", arguments={"order": "A-1"}
    )
    assert claims["sub"] == asked["approval_id"]
    assert item.platform_ref == {"callback_url": receiver.url, "status": 200}


async def test_a_denial_and_an_expiry_are_posted(serve: Serve, receiver: Receiver) -> None:
    # Starts at the real time: receivers refuse timestamps more than five minutes off.
    clock = ManualClock(datetime.now(UTC))
    async with serve(clock=clock) as served:
        denied = await served.asked()
        await served.decide(denied["ticket_id"], decision="deny", reason="not this one")
        await receiver.wait_for(1)
        expiring = await served.asked()
        clock.advance(61)
        await served.service.runtime.expire_overdue()
        await receiver.wait_for(2)
    (no,) = receiver.of(denied["approval_id"])
    assert (no["status"], no["basis"], no["reason"]) == ("denied", "decision", "not this one")
    (late,) = receiver.of(expiring["approval_id"])
    assert (late["status"], late["basis"]) == ("denied", "expiry")


async def test_an_approval_allowed_by_a_rule_is_posted_too(
    serve: Serve, receiver: Receiver
) -> None:
    async with serve() as served:
        asked = await served.asked("lookup")
        assert asked["status"] == "allowed"
        (payload,) = await receiver.wait_for(1)
    assert payload["approval_id"] == asked["approval_id"] and payload["basis"] == "rule"


async def test_a_failed_delivery_is_retried_with_the_same_id_and_never_again_after_a_restart(
    serve: Serve, receiver: Receiver
) -> None:
    receiver.statuses = [503]
    async with serve() as served:
        first = await served.asked()
        await served.decide(first["ticket_id"], decision="allow")
        await receiver.wait_for(2)
        item = await served.delivered(first["approval_id"])
    assert item.attempts == 2
    (one, _), (two, _) = receiver.received
    assert one["webhook-id"] == two["webhook-id"] == item.outbox_id
    assert receiver.received[0][1] == receiver.received[1][1]

    async with serve() as restarted:
        # A later callback goes out: the outbox of the new process has run.
        second = await restarted.asked("lookup")
        await receiver.wait_for(3)
        await restarted.delivered(second["approval_id"])
        (again,) = await restarted.callback_items(first["approval_id"])
    assert len(receiver.of(first["approval_id"])) == 2  # the 503 and the delivery
    assert again.attempts == 2 and again.state == "delivered"


@pytest.mark.parametrize(
    ("settings", "url"),
    [
        ({}, "http://evil.example.com/hook"),
        ({}, "ftp://127.0.0.1/hook"),
        ({"approval_callback_secret": None}, None),
    ],
    ids=["host-not-allowed", "not-http", "no-secret"],
)
async def test_a_callback_that_may_not_go_is_refused_with_400_and_nothing_stored(
    serve: Serve, receiver: Receiver, settings: dict[str, Any], url: str | None
) -> None:
    async with serve(**settings) as served:
        before = await served.runs()
        response = await served.ask("refund", callback_url=url or receiver.url)
        assert response.status_code == 400, response.text
        assert "callback" in response.text
        assert await served.runs() == before


async def test_a_url_no_longer_allowed_at_delivery_is_given_up() -> None:
    note = ApprovalCallback(run_id="run_1", agent="billing", status="done")
    delivery = Delivery(
        "ob_1", {"platform": "approval_callback", "approval_callback_url": "http://gone.test/"}
    )

    async def render(approval_id: str) -> dict[str, Any]:
        raise AssertionError("a refused URL is never rendered for")

    notifier = ApprovalCallbackNotifier(ApprovalCallbacks(SECRET, ("127.0.0.1",)), render)
    with pytest.raises(DeliveryError) as refused:
        await notifier.deliver(note, delivery)
    assert refused.value.permanent
    other = RunFinished(run_id="run_1", status="done")
    with pytest.raises(DeliveryError) as wrong:
        await notifier.deliver(other, delivery)
    assert wrong.value.permanent
