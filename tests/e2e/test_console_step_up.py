"""Step-up in the console, over real HTTP with a real OpenID Connect provider on
127.0.0.1: a session signed in with a token sees no Allow or Deny on a ticket that needs
single sign-on (``sso = true``), but why and a "Sign in with single sign-on" button; a
forged click is still refused and changes nothing; signing in with single sign-on from
that button brings the buttons, and the decision goes through."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from sso_kit import (
    OPERATOR_TOKEN,
    PROVIDER_WARNINGS,
    Console,
    ConsoleClient,
    MockProvider,
    csrf_of,
    serve_console,
)

from runtime import (
    Agent,
    ModelRequest,
    RunStatus,
    ScriptedModel,
    final_reply,
    tool,
    tool_call_reply,
)

pytestmark = [pytest.mark.timeout(120), *PROVIDER_WARNINGS]

USERS = {"sam": {"email": "sam@example.com", "name": "Sam", "groups": ["sre"]}}


def dba_agent() -> Agent:
    @tool(permission="ask", approvers=["group:sre"], decide_in=["console"], sso=True)
    async def drop_database(name: str) -> str:
        """Drop a database."""
        return f"dropped {name}"

    def reply(request: ModelRequest) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in request.messages):
            return final_reply("done")
        return tool_call_reply(("drop_database", {"name": "staging"}))

    return Agent("dba", "Drop.", ScriptedModel(reply, name="scripted"), tools=[drop_database])


@pytest.fixture
def provider() -> AsyncIterator[MockProvider]:
    with MockProvider(USERS) as running:
        yield running


@pytest.fixture
async def console(tmp_path: Path, provider: MockProvider) -> AsyncIterator[Console]:
    settings = {"oidc_client_secret": "console-secret"}
    async with serve_console(tmp_path, provider.issuer, [dba_agent()], **settings) as running:
        yield running


async def _token_sign_in(client: ConsoleClient) -> None:
    login = await client.page("/login")
    async with client.http.post(
        client.url + "/login",
        data={"csrf": csrf_of(login.text), "token": OPERATOR_TOKEN, "next": "/tickets"},
    ) as signed_in:
        assert signed_in.status == 200 and signed_in.url.path == "/tickets"


async def test_a_token_session_is_shown_how_to_step_up(console: Console) -> None:
    runtime = console.service.runtime
    run = await runtime.start("dba", "drop staging", requester="U1", wait=True)
    [pending] = run.pending
    ticket_id = pending.ticket.ticket_id
    client = ConsoleClient(console.url)
    try:
        await _token_sign_in(client)  # an operator: may decide, but not with a token
        for path in ("/tickets", f"/runs/{run.run_id}"):
            async with client.http.get(console.url + path) as page:
                html = await page.text()
                policy = page.headers["Content-Security-Policy"]
            card = html[html.index(f'id="ticket-{ticket_id}"') :]
            card = card[: card.index("</section>")]
            assert 'value="allow"' not in card and 'value="deny"' not in card, path
            assert (
                "This call may only be decided after signing in with single sign-on; you "
                "signed in with a token. Sign in with 127.0.0.1:"
            ) in card
            assert 'action="/login/sso" data-step-up' in card
            assert "Sign in with single sign-on</button>" in card
            # The button's form leaves for the provider, so the page lets it.
            origin = "{0.scheme}://{0.netloc}".format(
                urlsplit(console.service.settings.oidc_issuer or "")
            )
            assert f"form-action 'self' {origin}" in policy

        # A click forged all the same is refused and changes nothing.
        tickets = (await client.page("/tickets")).text
        async with client.http.post(
            f"{console.url}/tickets/{ticket_id}/decide",
            data={"csrf": csrf_of(tickets), "action": "allow"},
        ) as refused:
            assert "single sign-on" in await refused.text()
        assert (await runtime.ticket(ticket_id)).status.value == "open"
        assert (await runtime.get(run.run_id)).status is RunStatus.AWAITING

        # The card's button signs in with single sign-on and comes back to the tickets.
        card_csrf = csrf_of(tickets[tickets.index("data-step-up") :])
        async with client.http.post(
            console.url + "/login/sso",
            data={"csrf": card_csrf, "next": "/tickets"},
            allow_redirects=False,
        ) as leave:
            assert leave.status == 303
            authorize = leave.headers["Location"]
        back = await client.come_back(await client.approve_at_mock(authorize, "sam"))
        assert (back.status, back.path) == (200, "/tickets")
        card = back.text[back.text.index(f'id="ticket-{ticket_id}"') :]
        assert 'value="allow"' in card[: card.index("</section>")]
        async with client.http.post(
            f"{console.url}/tickets/{ticket_id}/decide",
            data={"csrf": csrf_of(back.text), "action": "allow"},
        ) as decided:
            assert decided.status == 200
        decided_ticket = await runtime.ticket(ticket_id)
        assert decided_ticket.decided_by == "oidc:sam@example.com"
    finally:
        await client.close()
