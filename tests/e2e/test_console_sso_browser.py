"""Single sign-on to the console in a real headless Chromium (Debian's, driven by
Playwright) through a real OpenID Connect provider on 127.0.0.1 (`oidc_provider_mock`):
the sign-in page's "Sign in with" button, the provider's own page, and back to the page
asked for, signed in as the provider's user, whose groups claim makes them an approver.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sso_kit import PROVIDER_WARNINGS, Console, MockProvider, serve_console
from testkit import until

from runtime import Agent, ModelRequest, ScriptedModel, final_reply, tool, tool_call_reply

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    # CI installs Chromium, so there a missing browser fails instead of skipping.
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"),
        reason=f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)",
    ),
    pytest.mark.timeout(120),
    *PROVIDER_WARNINGS,
]


def release_agent(ledger: list[str]) -> Agent:
    """An agent whose one risky call only release managers may allow."""

    @tool(permission="ask", approvers=["group:release-managers"])
    async def deploy(service: str) -> str:
        """Deploy a service."""
        ledger.append(service)
        return f"deployed {service}"

    def reply(request: ModelRequest) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in request.messages):
            return final_reply("done")
        return tool_call_reply(("deploy", {"service": "billing"}))

    return Agent("release", "Deploy.", ScriptedModel(reply, name="scripted"), tools=[deploy])


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[tuple[Console, list[str]]]:
    ledger: list[str] = []
    users = {
        "carol": {"email": "carol@example.com", "name": "Carol", "groups": ["release-managers"]}
    }
    with MockProvider(users) as provider:
        async with serve_console(
            tmp_path,
            provider.issuer,
            [release_agent(ledger)],
            oidc_client_secret="console-secret",
            oidc_provider_name="Example SSO",
        ) as running:
            yield running, ledger


async def test_sign_in_through_the_provider_and_allow_as_a_group_member(
    console: tuple[Console, list[str]],
) -> None:
    from playwright.async_api import async_playwright, expect

    served, ledger = console
    runtime = served.service.runtime
    run = await runtime.start("release", "ship", requester="oidc:alice@example.com", wait=True)
    [pending] = run.pending

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # No CSP bypass: the console's policy must let its form lead to the provider.
            context = await browser.new_context()
            page = await context.new_page()
            page.set_default_timeout(15_000)

            await page.goto(served.url + "/tickets")
            await expect(page).to_have_url(served.url + "/login?next=%2Ftickets")
            await page.click("button:has-text('Sign in with Example SSO')")

            # The provider's own page: pick the user.
            await expect(page.locator("h1")).to_have_text("Authorize Client")
            await page.click("button[name='sub'][value='carol']")

            # Back on the page asked for, signed in as the provider's user.
            await expect(page).to_have_url(served.url + "/tickets")
            await expect(page.locator("header .who")).to_have_text("Carol")
            ticket = page.locator(f"#ticket-{pending.ticket.ticket_id}")
            await ticket.locator("button[value='allow']").click()
            await expect(page.locator(".flash")).to_have_text("Allowed deploy.")

            # Signing out ends the session.
            await page.click("header button:has-text('Sign out')")
            await expect(page).to_have_url(served.url + "/login")
            await page.goto(served.url + "/tickets")
            await expect(page).to_have_url(served.url + "/login?next=%2Ftickets")
            await context.close()
        finally:
            await browser.close()

    decided = await runtime.ticket(pending.ticket.ticket_id)
    assert decided.decided_by == "oidc:carol@example.com"
    await until(lambda: ledger == ["billing"], "the allowed call ran")
