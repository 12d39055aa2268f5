"""The operator console in a real headless Chromium (Debian's, driven by Playwright).

`signoff serve`'s process (`bot.bootstrap.build_service`) runs in the test's event loop:
a SQLite store, its worker and its HTTP server on 127.0.0.1 (port 0). The browser signs in,
starts the demo agent (two ``ask`` tool calls in one batch), sees the pending calls and
their arguments, denies one with a reason, approves the other, and watches the run
finish. A form posted without its CSRF token is refused and changes nothing. It also
changes a call's arguments before allowing it, and allows both calls with one click.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import (
    Actor,
    Agent,
    Allow,
    GrantRequest,
    ModelRequest,
    Runtime,
    ScriptedModel,
    TicketStatus,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.store.sql import SQLStore

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TOKEN = "browser-test-token"

pytestmark = [
    # CI installs Chromium, so there a missing browser fails instead of skipping.
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"),
        reason=f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)",
    ),
    pytest.mark.timeout(120),
]


def demo_agent(ledger: list[tuple[str, dict[str, Any]]]) -> Agent:
    """An agent whose model asks for two risky calls in one batch, then sums up."""

    @tool(permission="ask")
    async def send_email(to: str, subject: str) -> str:
        """Send an e-mail."""
        ledger.append(("send_email", {"to": to, "subject": subject}))
        return f"sent to {to}"

    @tool(permission="ask")
    async def delete_branch(name: str) -> str:
        """Delete a git branch."""
        ledger.append(("delete_branch", {"name": name}))
        return f"deleted {name}"

    def reply(request: ModelRequest) -> dict[str, Any]:
        start = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
        messages = request.messages[start:]
        if not any(m.get("role") == "assistant" for m in messages):
            return tool_call_reply(
                ("send_email", {"to": "team@example.com", "subject": "Release 2.4 is out"}),
                ("delete_branch", {"name": "release-2.4"}),
                content="Announcing the release and cleaning up its branch.",
            )
        results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        return final_reply("Release wrap-up: " + " | ".join(results))

    return Agent(
        "demo",
        "Wrap a release up.",
        ScriptedModel(reply, name="scripted-demo"),
        tools=[send_email, delete_branch],
        description="Announces a release and deletes its branch (both ask first)",
    )


@dataclass
class Served:
    url: str
    runtime: Runtime
    ledger: list[tuple[str, dict[str, Any]]]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    ledger: list[tuple[str, dict[str, Any]]] = []
    settings = Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": "browser-operator-0123456789",
            "cookie_secret": "s" * 32,
            "bind_host": "127.0.0.1",
            "port": 0,
            "poll_seconds": 0.1,
        }
    )
    service = await build_service(
        settings,
        agents=[demo_agent(ledger)],
        store=store,
        auth=TokenAuth([ApiToken(TOKEN, "ops:grace", operator=True, name="Grace")]),
        parts=Parts(outbox=False, deadlines=False, wake_ups=False, discord=False),
    )
    url = await service.start()
    try:
        yield Served(url, service.runtime, ledger)
    finally:
        await service.stop(grace_seconds=5)
        await store.close()


async def test_sign_in_start_deny_approve_and_watch_the_run_finish(served: Served) -> None:
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # The console forbids scripts; the test's own DOM edit below needs CSP bypassed.
            context = await browser.new_context(bypass_csp=True)
            page = await context.new_page()
            page.set_default_timeout(15_000)

            # Sign in.
            await page.goto(served.url + "/runs")
            await expect(page).to_have_url(served.url + "/login?next=%2Fruns")
            await page.fill("#token", TOKEN)
            await page.click("button:has-text('Sign in')")
            await expect(page).to_have_url(served.url + "/runs")
            await expect(page.locator("header .who")).to_have_text("Grace (operator)")

            # Start the demo agent.
            await page.click("a:has-text('Start a run')")
            await page.select_option("#agent", "demo")
            await page.fill("#input", "wrap up release 2.4")
            await page.click("button:has-text('Start')")
            await expect(page.locator(".flash")).to_contain_text("Started a run of demo.")
            run_id = page.url.rsplit("/", 1)[1]
            assert run_id.startswith("run_")

            # The page refreshes itself until the run parks; then both calls are shown.
            await expect(page.locator("#run-status")).to_have_text("awaiting")
            email = page.locator("section.ticket[data-tool='send_email']")
            branch = page.locator("section.ticket[data-tool='delete_branch']")
            await expect(email.locator("pre.args")).to_contain_text('"to": "team@example.com"')
            await expect(email.locator("pre.args")).to_contain_text("Release 2.4 is out")
            await expect(branch.locator("pre.args")).to_contain_text('"name": "release-2.4"')
            await expect(email).to_contain_text("Announcing the release")

            # A form posted without its CSRF token is refused and changes nothing.
            allow_form = branch.locator("form", has=page.locator("button[value='allow']"))
            await allow_form.locator("input[name='csrf']").evaluate("el => el.remove()")
            async with page.expect_navigation() as refused:
                await allow_form.locator("button[value='allow']").click()
            response = await refused.value
            assert response is not None and response.status == 403
            await expect(page.locator("h1")).to_have_text("Form refused")
            pending = (await served.runtime.get(run_id)).pending
            assert [p.ticket.status for p in pending] == [TicketStatus.OPEN, TicketStatus.OPEN]
            assert served.ledger == []

            # Deny the e-mail with a reason.
            await page.goto(f"{served.url}/runs/{run_id}")
            await email.locator("input[name='reason']").fill("not during the freeze")
            await email.locator("button:has-text('Deny with reason')").click()
            await expect(page.locator(".flash")).to_have_text("Denied send_email.")
            await expect(page.locator("section.ticket")).to_have_count(1)
            await expect(page.locator("#run-status")).to_have_text("awaiting")

            # Approve the branch deletion; the page refreshes until the run is done.
            await branch.locator("button[value='allow']").click()
            await expect(page.locator(".flash")).to_have_text("Allowed delete_branch.")
            await expect(page.locator("#run-status")).to_have_text("done")
            final = page.locator("#final-text")
            await expect(final).to_contain_text("Permission denied: not during the freeze")
            await expect(final).to_contain_text("deleted release-2.4")
            await expect(page.locator("section.ticket")).to_have_count(0)
            timeline = page.locator("ol.timeline")
            await expect(timeline).to_contain_text("Deny: send_email by Grace via console")
            await expect(timeline).to_contain_text("Allow: delete_branch by Grace via console")
            await context.close()
        finally:
            await browser.close()

    assert served.ledger == [("delete_branch", {"name": "release-2.4"})]


async def test_at_phone_width_the_header_fits_and_times_are_local(served: Served) -> None:
    from playwright.async_api import async_playwright, expect

    started = await served.runtime.start("demo", "wrap up", requester="ops:grace", wait=True)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # No CSP bypass here: the page's own script must be allowed by its nonce.
            context = await browser.new_context(
                viewport={"width": 390, "height": 844}, timezone_id="Asia/Kolkata"
            )
            page = await context.new_page()
            page.set_default_timeout(15_000)
            await page.goto(served.url + "/login")
            await page.fill("#token", TOKEN)
            await page.click("button:has-text('Sign in')")
            await page.goto(f"{served.url}/runs/{started.run_id}")
            sign_out = page.locator("header button:has-text('Sign out')")
            await expect(sign_out).to_be_visible()
            box = await sign_out.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
            width = await page.evaluate("document.scrollingElement.scrollWidth")
            assert width <= 390, f"the page scrolls sideways ({width} px)"
            # Times are shown in the reader's zone (India is UTC+5:30), exact in datetime.
            first = page.locator("ol.timeline time").first
            await expect(first).to_contain_text("GMT+5:30")
            assert (await first.get_attribute("datetime") or "").endswith("+00:00")
            await context.close()
        finally:
            await browser.close()


# -- approve with edits and batch decisions -------------------------------------------


async def _signed_in_run(page: Any, url: str) -> str:
    from playwright.async_api import expect

    await page.goto(url + "/login")
    await page.fill("#token", TOKEN)
    await page.click("button:has-text('Sign in')")
    await page.click("a:has-text('Start a run')")
    await page.select_option("#agent", "demo")
    await page.fill("#input", "wrap up release 2.4")
    await page.click("button:has-text('Start')")
    await expect(page.locator("#run-status")).to_have_text("awaiting")
    return str(page.url.rsplit("/", 1)[1])


async def test_allow_with_changes_in_the_browser(served: Served) -> None:
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context()
            page = await context.new_page()
            page.set_default_timeout(15_000)
            run_id = await _signed_in_run(page, served.url)

            email = page.locator("section.ticket[data-tool='send_email']")
            await email.locator("summary:has-text('Allow with changes')").click()
            subject = email.locator("input[name='field.subject']")
            await expect(subject).to_have_value("Release 2.4 is out")  # prefilled
            await subject.fill("Release 2.4.1 is out")
            await email.locator("button:has-text('Allow with these arguments')").click()
            await expect(page.locator(".flash")).to_have_text("Allowed with changes send_email.")

            branch = page.locator("section.ticket[data-tool='delete_branch']")
            await branch.locator("button[value='deny']").first.click()
            await expect(page.locator("#run-status")).to_have_text("done")
            timeline = page.locator("ol.timeline")
            await expect(timeline).to_contain_text("Allow with changes: send_email by Grace")
            await expect(timeline).to_contain_text(
                'subject "Release 2.4 is out" → "Release 2.4.1 is out" by Grace'
            )
            assert (await served.runtime.get(run_id)).status.finished
            await context.close()
        finally:
            await browser.close()

    assert served.ledger == [
        ("send_email", {"to": "team@example.com", "subject": "Release 2.4.1 is out"})
    ]


async def test_allow_selected_decides_a_runs_calls_together_in_the_browser(
    served: Served,
) -> None:
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context()
            page = await context.new_page()
            page.set_default_timeout(15_000)
            await _signed_in_run(page, served.url)

            picks = page.locator("input[type='checkbox'][form='batch-form']")
            await expect(picks).to_have_count(2)
            for index in range(2):
                await expect(picks.nth(index)).to_be_checked()
            await page.click("#batch-form button:has-text('Allow selected')")
            await expect(page.locator(".flash")).to_have_text("Allowed 2 of 2 calls.")
            await expect(page.locator("#run-status")).to_have_text("done")
            await context.close()
        finally:
            await browser.close()

    assert sorted(served.ledger) == [
        ("delete_branch", {"name": "release-2.4"}),
        ("send_email", {"to": "team@example.com", "subject": "Release 2.4 is out"}),
    ]


# -- phone width ------------------------------------------------------------------------------

PHONE = {"width": 375, "height": 800}


async def _fits(page: Any, what: str) -> None:
    """The page does not scroll sideways at phone width."""
    width = await page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= PHONE["width"], f"{what} scrolls sideways ({width} px)"


async def _reachable(page: Any, locator: Any) -> None:
    """`locator` lies inside the viewport once scrolled to (not clipped by a table's box)."""
    from playwright.async_api import expect

    await expect(locator).to_be_visible()
    # Scroll the page down to it only: nothing sideways, neither the page nor a box in it.
    await locator.evaluate(
        "el => window.scrollBy(0, el.getBoundingClientRect().top - innerHeight / 3)"
    )
    box = await locator.bounding_box()
    assert box is not None
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], box
    # What is drawn at the button's centre is the button itself, not something over it.
    centre = await locator.evaluate(
        "el => { const r = el.getBoundingClientRect();"
        " const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);"
        " return hit === el || el.contains(hit); }"
    )
    assert centre, "something covers the button"


async def test_every_page_fits_a_phone_and_revoke_stays_reachable(served: Served) -> None:
    from playwright.async_api import async_playwright, expect

    grace = Actor(id="ops:grace", operator=True, name="Grace")
    started = await served.runtime.start(
        "demo", "wrap up release 2.4 " + "with a long input " * 10, requester="ops:grace"
    )
    email = next(p for p in started.pending if p.call.name == "send_email")
    await served.runtime.decide(email.ticket_id, Allow(grant=GrantRequest(scope="run")), grace)
    [grant] = await served.runtime.grants()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport=PHONE)
            page = await context.new_page()
            page.set_default_timeout(15_000)
            await page.goto(served.url + "/login")
            await _fits(page, "/login")
            await page.fill("#token", TOKEN)
            await page.click("button:has-text('Sign in')")

            for path in ("/runs", f"/runs/{started.run_id}", "/tickets", "/grants", "/start"):
                await page.goto(served.url + path)
                await _fits(page, path)

            # On the run page: the pending call's buttons, and the grant's Revoke.
            await page.goto(f"{served.url}/runs/{started.run_id}")
            ticket = page.locator("section.ticket[data-tool='delete_branch']")
            await _reachable(page, ticket.locator("button[value='allow']"))
            await _reachable(page, ticket.locator("button:has-text('Deny with reason')"))
            await _reachable(page, page.locator(f"#grant-{grant.grant_id} button"))

            # On the grants page, Revoke is on screen and works with a tap.
            await page.goto(served.url + "/grants")
            revoke = page.locator(f"#grant-{grant.grant_id} button:has-text('Revoke')")
            await _reachable(page, revoke)
            await revoke.click()
            await expect(page.locator(".flash")).to_contain_text("Revoked the grant of")
            assert (await served.runtime.grant(grant.grant_id)).state == "revoked"
            await context.close()
        finally:
            await browser.close()
