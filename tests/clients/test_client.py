"""The Python client against a real `signoff serve`: ask, wait, decide, edit, deny, gate."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from adapters.client import (
    ApprovalDenied,
    ApprovalRequestError,
    AsyncSignoffClient,
    Decision,
    SignoffClient,
    derive_key,
    gate,
    verify_decision_token,
)
from tests.clients.conftest import QUICK_RETRY
from tests.clients.serving import AGENT_TOKEN, STRANGER_TOKEN, Server


def _session() -> str:
    return f"conv-{uuid.uuid4().hex[:8]}"


class Blocked:
    """A call that blocks (a waiting `request_approval`) run in a thread, its answer kept."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as exc:
            self.error = exc

    def join(self) -> Any:
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the blocked call never returned"
        if self.error is not None:
            raise self.error
        return self.result


def refund_request(client: SignoffClient, key: str, session: str, **options: Any) -> Decision:
    return client.request_approval(
        agent="billing",
        tool="refund",
        arguments={"order": "A-1", "amount": 40},
        session_id=session,
        idempotency_key=key,
        description="The customer was charged twice.",
        **options,
    )


def test_a_call_a_rule_allows_is_allowed_at_once_with_a_token_that_verifies(
    client: SignoffClient,
) -> None:
    decision = client.request_approval(
        agent="billing", tool="lookup_order", arguments={"order": "A-1"}, session_id=_session()
    )

    assert decision.allowed and not decision.pending and not decision.denied
    assert decision.basis == "rule"
    assert decision.ticket_id is None
    assert decision.arguments == {"order": "A-1"}
    assert decision.decision_token is not None
    claims = verify_decision_token(
        decision.decision_token,
        jwks=client.jwks(),
        tool="lookup_order",
        arguments={"order": "A-1"},
        agent="billing",
    )
    assert claims["sub"] == decision.approval_id
    assert claims["decision"] == "allowed"


def test_a_waiting_request_returns_once_a_person_allows_it(
    server: Server, client: SignoffClient
) -> None:
    key, session = derive_key("test", uuid.uuid4().hex), _session()
    blocked = Blocked(lambda: refund_request(client, key, session))
    # The same key asks again: the same approval, still pending, with its ticket.
    pending = refund_request(client, key, session, wait=False)
    assert pending.pending and pending.ticket_id is not None
    assert pending.raw["requester"] == "svc:billing-agent"

    server.decide(pending.ticket_id, {"decision": "allow"})

    decision = blocked.join()
    assert decision.allowed
    assert decision.approval_id == pending.approval_id
    assert decision.basis == "decision"
    assert decision.decided_by == "U-alice"
    assert decision.arguments == {"order": "A-1", "amount": 40}
    assert not decision.edited
    assert [t for t in server.tickets() if t["ticket_id"] == pending.ticket_id] == []


async def test_the_async_client_waits_for_the_decision_too(server: Server) -> None:
    key, session = derive_key("test", uuid.uuid4().hex), _session()
    async with (
        httpx.AsyncClient(trust_env=False) as http,
        AsyncSignoffClient(
            server.url, token=AGENT_TOKEN, retry=QUICK_RETRY, http_client=http
        ) as signoff,
    ):
        ask = dict(
            agent="billing",
            tool="refund",
            arguments={"order": "A-2", "amount": 5},
            session_id=session,
            idempotency_key=key,
        )
        waiting = asyncio.create_task(signoff.request_approval(**ask))
        pending = await signoff.request_approval(**ask, wait=False)
        assert pending.pending and pending.ticket_id is not None
        await asyncio.to_thread(server.decide, pending.ticket_id, {"decision": "allow"})
        decision = await waiting
    assert decision.allowed and decision.approval_id == pending.approval_id


def test_a_denial_carries_its_reason_and_a_denied_token(
    server: Server, client: SignoffClient
) -> None:
    key, session = derive_key("test", uuid.uuid4().hex), _session()
    pending = refund_request(client, key, session, wait=False)
    assert pending.ticket_id is not None
    server.decide(pending.ticket_id, {"decision": "deny", "reason": "already refunded"})

    decision = client.wait(pending.approval_id)

    assert decision.denied
    assert decision.reason is not None and "already refunded" in decision.reason
    assert decision.decision_token is not None
    claims = verify_decision_token(
        decision.decision_token,
        jwks=client.jwks(),
        tool="refund",
        arguments={"order": "A-1", "amount": 40},
        decision="denied",
    )
    assert claims["decided_by"] == "U-alice"


def test_gate_does_not_run_a_denied_call(server: Server, client: SignoffClient) -> None:
    session = _session()
    ran: list[int] = []

    @gate(client, agent="billing", session_id=session, idempotency_key=lambda a: session)
    def refund(order: str, amount: int) -> str:
        ran.append(amount)
        return "refunded"

    blocked = Blocked(lambda: refund("A-9", 900))
    pending = client.request_approval(
        agent="billing",
        tool="refund",
        arguments={"order": "A-9", "amount": 900},
        session_id=session,
        idempotency_key=session,
        wait=False,
    )
    assert pending.ticket_id is not None
    server.decide(pending.ticket_id, {"decision": "deny", "reason": "too much"})

    with pytest.raises(ApprovalDenied) as denied:
        blocked.join()
    assert denied.value.decision.approval_id == pending.approval_id
    assert "too much" in str(denied.value)
    assert ran == []


def test_gate_runs_the_call_with_the_arguments_a_person_edited_and_reports_it(
    server: Server, client: SignoffClient
) -> None:
    session = _session()
    ran: list[tuple[str, int]] = []

    @gate(client, agent="billing", session_id=session, idempotency_key=lambda a: session)
    def refund(order: str, amount: int = 40) -> str:
        ran.append((order, amount))
        return f"refunded {amount}"

    blocked = Blocked(lambda: refund("A-1"))
    pending = client.request_approval(
        agent="billing",
        tool="refund",
        arguments={"order": "A-1", "amount": 40},
        session_id=session,
        idempotency_key=session,
        wait=False,
    )
    assert pending.ticket_id is not None
    server.decide(pending.ticket_id, {"decision": "allow", "args": {"amount": 10}})

    assert blocked.join() == "refunded 10"
    assert ran == [("A-1", 10)]
    decision = client.get(pending.approval_id)
    assert decision.allowed and decision.edited
    assert decision.arguments == {"order": "A-1", "amount": 10}
    assert decision.requested_arguments == {"order": "A-1", "amount": 40}
    assert decision.outcome is not None and decision.outcome.status == "succeeded"
    assert decision.decision_token is not None
    verify_decision_token(
        decision.decision_token, jwks=client.jwks(), tool="refund", arguments=decision.arguments
    )


def test_gate_reports_a_failed_call_and_raises_its_error(
    server: Server, client: SignoffClient
) -> None:
    session = _session()

    @gate(client, agent="billing", tool="lookup_order", session_id=session)
    def lookup(order: str) -> str:
        raise LookupError(f"no order {order}")

    with pytest.raises(LookupError):
        lookup("A-404")

    status, listed = server.call("GET", f"/api/approvals?session_id={session}")
    assert status == 200, listed
    [approval] = listed["approvals"]
    assert approval["outcome"]["status"] == "failed"
    assert approval["outcome"]["summary"] == "LookupError: no order A-404"


async def test_gate_wraps_async_functions(server: Server) -> None:
    async with (
        httpx.AsyncClient(trust_env=False) as http,
        AsyncSignoffClient(
            server.url, token=AGENT_TOKEN, retry=QUICK_RETRY, http_client=http
        ) as signoff,
    ):

        @gate(signoff, agent="billing", session_id=_session())
        async def lookup_order(order: str) -> str:
            return f"order {order}: paid"

        assert await lookup_order(order="A-1") == "order A-1: paid"


def test_a_stranger_cannot_read_an_approval(server: Server, client: SignoffClient) -> None:
    decision = client.request_approval(
        agent="billing", tool="lookup_order", arguments={"order": "A-1"}, session_id=_session()
    )
    with httpx.Client(trust_env=False) as http:
        stranger = SignoffClient(server.url, token=STRANGER_TOKEN, http_client=http)
        with pytest.raises(ApprovalRequestError) as missing:
            stranger.get(decision.approval_id)
    assert missing.value.status_code == 404


def test_refusals_are_request_errors_and_are_not_retried(client: SignoffClient) -> None:
    with pytest.raises(ApprovalRequestError) as invalid:
        client.request_approval(
            agent="billing",
            tool="refund",
            arguments={"amount": "forty"},
            schema={"type": "object", "properties": {"amount": {"type": "integer"}}},
        )
    assert invalid.value.status_code == 400

    key = derive_key("test", uuid.uuid4().hex)
    client.request_approval(
        agent="billing", tool="lookup_order", arguments={"order": "A-1"}, idempotency_key=key
    )
    with pytest.raises(ApprovalRequestError) as conflict:
        client.request_approval(
            agent="billing", tool="lookup_order", arguments={"order": "B-2"}, idempotency_key=key
        )
    assert conflict.value.status_code == 409


def test_a_bad_token_is_refused(server: Server) -> None:
    with httpx.Client(trust_env=False) as http:
        nobody = SignoffClient(server.url, token="not-a-token", http_client=http)
        with pytest.raises(ApprovalRequestError) as refused:
            nobody.request_approval(agent="billing", tool="lookup_order", arguments={})
    assert refused.value.status_code == 401
