"""One person across edges over the API: a four-eyes requester who asked in Slack is
refused with their identity provider's JWT (a real token of the fake issuer), operators'
groups included, when the identities file links their Slack id to that identity."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from fake_oidc import AUDIENCE, FakeIdp, new_key
from testkit import echo_model

from adapters.web import TokenAuth
from bot.app import api_tokens, oidc_verifier
from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import Agent, RunStatus, TicketStatus, tool

OPERATOR_TOKEN = "tok-ops-0123456789abcdef"


@tool(permission="ask", approvers=["*"], four_eyes=True)
async def deploy(service: str) -> str:
    """Deploy a service (anyone but the requester decides)."""
    return f"deployed {service}"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[FakeIdp, Service, TestClient[Any, Any]]]:
    key = new_key("k-rsa")
    idp = await FakeIdp([key]).start()
    people = tmp_path / "identities.toml"
    people.write_text('"oidc:ana@corp" = ["U024BE7LH"]\n', encoding="utf-8")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        operator_token=OPERATOR_TOKEN,
        cookie_secret="c" * 32,
        poll_seconds=0.05,
        oidc_issuer=idp.issuer,
        oidc_audience=AUDIENCE,
        oidc_operator_groups=["sre"],
        identities_file=people,
    )
    verifier = oidc_verifier(settings)
    assert verifier is not None
    service = await build_service(
        settings,
        agents=[
            Agent("deployer", "Deploy.", echo_model(("deploy", {"service": "api"})), tools=[deploy])
        ],
        auth=TokenAuth(api_tokens(settings, OPERATOR_TOKEN), jwt=verifier),
        parts=Parts(listen=False, outbox=False, deadlines=False, wake_ups=False),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
    try:
        await client.start_server()
        await service.start()
        yield idp, service, client
    finally:
        await client.close()
        await service.stop(grace_seconds=1)
        await idp.close()


async def test_a_slack_requester_is_refused_with_their_jwt(
    served: tuple[FakeIdp, Service, TestClient[Any, Any]],
) -> None:
    idp, service, client = served
    runtime = service.runtime
    parked = await runtime.start("deployer", "deploy api", requester="U024BE7LH")
    assert parked.status is RunStatus.AWAITING
    ticket = parked.pending[0].ticket
    path = f"/api/tickets/{ticket.ticket_id}/decision"
    key = idp.keys["k-rsa"]
    for token in (
        idp.token(key, sub="ana@corp"),
        idp.token(key, sub="ana@corp", groups=["sre"]),  # an operator, still the requester
    ):
        async with client.post(
            path, json={"decision": "allow"}, headers={"Authorization": f"Bearer {token}"}
        ) as response:
            body = await response.json()
            assert response.status in (403, 404), body
    assert (await runtime.ticket(ticket.ticket_id)).status is TicketStatus.OPEN
    async with client.post(
        path,
        json={"decision": "allow"},
        headers={"Authorization": f"Bearer {idp.token(key, sub='bo@corp')}"},
    ) as response:
        assert response.status == 200, await response.text()
    decided = await runtime.ticket(ticket.ticket_id)
    assert (decided.status, decided.decided_by) == (TicketStatus.DECIDED, "oidc:bo@corp")
