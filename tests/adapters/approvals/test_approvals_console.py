"""An external approval's card in the console: marked as an external agent's call, with
its run grant offered for the rest of the session; strangers do not see it."""

from __future__ import annotations

import re

from approvals_harness import Approvals


async def sign_in(approvals: Approvals, token: str) -> None:
    page = await approvals.client.get("/login")
    found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert found is not None
    signed = await approvals.client.post(
        "/login", data={"csrf": found.group(1), "token": token}, allow_redirects=False
    )
    assert signed.status == 303, await signed.text()


async def test_the_console_card_says_external_agent_and_offers_the_session(
    approvals: Approvals,
) -> None:
    asked = await approvals.ask("tok-bot", on_behalf_of="U1", session_id="conv-1")
    await sign_in(approvals, "tok-u1")

    page = await approvals.client.get(f"/runs/{asked['approval_id']}")
    html = await page.text()

    assert page.status == 200, html
    assert "External agent · billing" in html
    assert "Allow for the rest of this session" in html
    assert "Allow for the rest of this run" not in html


async def test_a_stranger_does_not_see_the_card(approvals: Approvals) -> None:
    asked = await approvals.ask("tok-bot", on_behalf_of="U1", session_id="conv-1")
    await sign_in(approvals, "tok-u3")

    page = await approvals.client.get(f"/runs/{asked['approval_id']}")

    assert page.status == 404
    assert "External agent" not in await page.text()
