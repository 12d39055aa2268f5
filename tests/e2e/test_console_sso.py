"""Single sign-on to the console through a real OpenID Connect provider on 127.0.0.1
(`oidc_provider_mock`, which signs its ID tokens with authlib), over real HTTP: the
console's "Sign in with" form, the provider's authorization form, the callback, and the
pages a signed-in user sees.

A console user signed in this way is ``oidc:<email>``, as with a JWT of the issuer; the
provider's ``groups`` claim gives approver groups and the operator group makes operators.
Strangers see nothing of other people's runs, and every refused sign-in signs nobody in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sso_kit import (
    COOKIE_SECRET,
    OPERATOR_TOKEN,
    PROVIDER_WARNINGS,
    Console,
    ConsoleClient,
    MockProvider,
    csrf_of,
    serve_console,
    with_query,
)

from adapters.web import SessionCodec
from runtime import Agent, ModelRequest, ScriptedModel, final_reply, tool, tool_call_reply

pytestmark = [pytest.mark.timeout(120), *PROVIDER_WARNINGS]

USERS = {
    "alice": {"email": "alice@example.com", "name": "Alice"},
    "bob": {"email": "bob@example.com", "name": "Bob"},
    "carol": {"email": "carol@example.com", "name": "Carol", "groups": ["release-managers"]},
    "sam": {"email": "sam@example.com", "name": "Sam", "groups": ["sre"]},
}
ALICE = "oidc:alice@example.com"
# The provider authenticates clients at its token endpoint with a secret (any secret).
CONFIDENTIAL = {"oidc_client_secret": "console-secret"}


def one_call_agent(name: str, approvers: list[str] | None) -> Agent:
    """An agent whose model asks for one risky call, then answers."""

    @tool(permission="ask", approvers=approvers)
    async def deploy(service: str) -> str:
        """Deploy a service."""
        return f"deployed {service}"

    def reply(request: ModelRequest) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in request.messages):
            return final_reply("done")
        return tool_call_reply(("deploy", {"service": "billing"}))

    return Agent(name, "Deploy.", ScriptedModel(reply, name="scripted"), tools=[deploy])


@pytest.fixture
def provider() -> AsyncIterator[MockProvider]:
    with MockProvider(USERS) as running:
        yield running


@pytest.fixture
async def console(tmp_path: Path, provider: MockProvider) -> AsyncIterator[Console]:
    agents = [one_call_agent("own", None), one_call_agent("release", ["group:release-managers"])]
    async with serve_console(tmp_path, provider.issuer, agents, **CONFIDENTIAL) as running:
        yield running


@pytest.fixture
async def client(console: Console) -> AsyncIterator[ConsoleClient]:
    browser = ConsoleClient(console.url)
    try:
        yield browser
    finally:
        await browser.close()


async def other(console: Console) -> ConsoleClient:
    return ConsoleClient(console.url)


async def test_sign_in_sees_own_runs_and_decides_own_call(
    console: Console, client: ConsoleClient
) -> None:
    runtime = console.service.runtime
    run = await runtime.start("own", "ship it", requester=ALICE, wait=True)
    [pending] = run.pending

    # The sign-in page offers the provider besides tokens.
    login = await client.page("/login")
    assert login.status == 200
    assert "Sign in with 127.0.0.1:" in login.text and 'name="token"' in login.text

    landed = await client.sign_in("alice", next_page="/tickets")
    assert (landed.status, landed.path) == (200, "/tickets")
    tickets = (await client.page("/tickets")).text
    assert '<span class="who">Alice</span>' in tickets
    assert pending.ticket.ticket_id in tickets
    # The session says it came from single sign-on, with the provider's identity.
    session = SessionCodec(COOKIE_SECRET.encode()).unsign(client.cookie("signoff_session"))
    assert session is not None
    assert session["sso"] is True and session["actor"] == ALICE and session["op"] is False

    # A stranger signed in through the same provider sees none of it and cannot decide.
    bob = await other(console)
    try:
        await bob.sign_in("bob")
        runs = (await bob.page("/runs")).text
        assert '<span class="who">Bob</span>' in runs and run.run_id not in runs
        bobs = (await bob.page("/tickets")).text
        assert pending.ticket.ticket_id not in bobs
        async with bob.http.post(
            f"{console.url}/tickets/{pending.ticket.ticket_id}/decide",
            data={"csrf": csrf_of(bobs), "action": "allow"},
        ) as refused:
            assert refused.status in (403, 404)
        assert (await runtime.get(run.run_id)).pending, "a stranger decided"
    finally:
        await bob.close()

    # Alice allows her own call; the decision is recorded under her single sign-on id.
    async with client.http.post(
        f"{console.url}/tickets/{pending.ticket.ticket_id}/decide",
        data={"csrf": csrf_of(tickets), "action": "allow"},
    ) as decided:
        assert decided.status == 200
        assert "Allowed deploy." in await decided.text()
    ticket = await runtime.ticket(pending.ticket.ticket_id)
    assert ticket.decided_by == ALICE


async def test_groups_make_approvers_and_the_operator_group_operators(
    console: Console, client: ConsoleClient
) -> None:
    runtime = console.service.runtime
    run = await runtime.start("release", "ship it", requester=ALICE, wait=True)
    [pending] = run.pending
    ticket_id = pending.ticket.ticket_id

    # Alice asked, but only release managers decide: no form for her.
    await client.sign_in("alice")
    alices = (await client.page(f"/runs/{run.run_id}")).text
    assert ticket_id in alices and "You are not among those who may decide" in alices

    carol = await other(console)
    sam = await other(console)
    try:
        # Sam is in the operator group: an operator, who sees every run.
        await sam.sign_in("sam")
        sams = (await sam.page("/runs")).text
        assert '<span class="who">Sam (operator)</span>' in sams and run.run_id in sams

        # Carol is a release manager by the provider's groups claim: she allows it.
        await carol.sign_in("carol")
        carols = (await carol.page(f"/runs/{run.run_id}")).text
        assert "You are not among those who may decide" not in carols
        async with carol.http.post(
            f"{console.url}/tickets/{ticket_id}/decide",
            data={"csrf": csrf_of(carols), "action": "allow"},
        ) as decided:
            assert decided.status == 200 and "Allowed deploy." in await decided.text()
    finally:
        await carol.close()
        await sam.close()
    assert (await runtime.ticket(ticket_id)).decided_by == "oidc:carol@example.com"


async def test_refused_sign_ins_sign_nobody_in(console: Console, client: ConsoleClient) -> None:
    # The provider's error (the person pressed Deny there).
    authorize = await client.leave_for_provider()
    denied = await client.come_back(await client.approve_at_mock(authorize, "", action="deny"))
    assert denied.status == 403 and "access_denied" in denied.text
    assert (await client.page("/runs")).path.startswith("/login")

    # A forged state is refused and does not spend the real attempt.
    authorize = await client.leave_for_provider()
    callback = await client.approve_at_mock(authorize, "alice")
    forged = await client.come_back(with_query(callback, state="forged-state"))
    assert forged.status == 403 and "state mismatch" in forged.text
    assert (await client.page("/runs")).path.startswith("/login")
    attempt = client.cookie("signoff_sso")
    signed_in = await client.come_back(callback)
    assert (signed_in.status, signed_in.path) == (200, "/runs")
    assert client.cookie("signoff_sso") is None  # spent and cleared

    # The same answer again, with a copy of the attempt's cookie: a replay, refused.
    thief = await other(console)
    try:
        thief.set_cookie("signoff_sso", attempt or "")
        replayed = await thief.come_back(callback)
        assert replayed.status == 403 and "already used" in replayed.text
        assert (await thief.page("/runs")).path.startswith("/login")
    finally:
        await thief.close()

    # Without any attempt in the browser, a provider's answer is refused too.
    fresh = await other(console)
    try:
        refused = await fresh.come_back(callback)
        assert refused.status == 403 and "No sign-in was started" in refused.text
        assert (await fresh.page("/runs")).path.startswith("/login")
    finally:
        await fresh.close()


async def test_sign_out_revokes_the_session(console: Console, client: ConsoleClient) -> None:
    await client.sign_in("alice")
    cookie = client.cookie("signoff_session")
    runs = (await client.page("/runs")).text
    async with client.http.post(console.url + "/logout", data={"csrf": csrf_of(runs)}) as out:
        assert out.url.path == "/login"
    copy = await other(console)
    try:
        copy.set_cookie("signoff_session", cookie or "")
        assert (await copy.page("/runs")).path.startswith("/login")
    finally:
        await copy.close()


async def test_token_sign_in_can_be_turned_off_for_the_console(
    tmp_path: Path, provider: MockProvider
) -> None:
    async with serve_console(
        tmp_path, provider.issuer, [], console_token_sign_in=False, **CONFIDENTIAL
    ) as console:
        client = ConsoleClient(console.url)
        try:
            html = (await client.page("/login")).text
            assert 'name="token"' not in html and "Sign in with" in html
            async with client.http.post(
                console.url + "/login", data={"csrf": csrf_of(html), "token": OPERATOR_TOKEN}
            ) as refused:
                assert refused.status == 401
            assert (await client.page("/runs")).path.startswith("/login")
            # The API still takes the token.
            async with client.http.get(
                console.url + "/api/runs", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}
            ) as api:
                assert api.status == 200
            landed = await client.sign_in("sam")
            assert (landed.status, landed.path) == (200, "/runs"), landed.text
            assert (await client.page("/runs")).path == "/runs"
        finally:
            await client.close()
