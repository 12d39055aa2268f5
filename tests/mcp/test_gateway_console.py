"""Gateway calls decided in the console, expired by their deadline, and hidden from
strangers: the official `mcp` SDK client calls ``/mcp/ops`` of a served signoff whose
``deploy`` asks a person (`gatewaybed`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gatewaybed import (
    APPROVER_TOKEN,
    CALLER,
    DEADLINE,
    STRANGER,
    ServedGateway,
    serve_gateway,
    text,
)
from mcpbed import calls, until

from runtime import Actor

pytestmark = pytest.mark.timeout(120)

APPROVER = "U-approver"
PRODUCTION = {"service": "api", "environment": "production"}


@pytest.fixture
async def served(tmp_path: Path, state: Path) -> AsyncIterator[ServedGateway]:
    async with serve_gateway(tmp_path, state, approver=APPROVER) as found:
        yield found


async def test_a_call_nobody_decides_expires_as_a_tool_error_and_never_runs(
    served: ServedGateway, state: Path
) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async with served.client() as client:
        asking = asyncio.ensure_future(
            client.call_tool("deploy", PRODUCTION, progress_callback=on_progress)
        )
        ticket = await served.pending()
        await until(lambda: len(progress) >= 2, "progress notifications while the call waits")
        assert [m for _, m in progress[:2]] == ["waiting for sign-off"] * 2
        assert progress[1][0] > progress[0][0]  # the progress grows
        assert not asking.done()

        served.clock.advance(2 * DEADLINE.total_seconds())
        assert await served.service.runtime.expire_overdue() == [ticket]
        result = await asyncio.wait_for(asking, 60)

    assert result.is_error
    assert text(result).startswith("Not allowed: ")
    assert "expired" in text(result)
    assert calls(state) == []  # the server never saw the call
    [approval] = (await served.service.runtime.approval_page(viewer=Actor(id="svc-ci"))).items
    assert (approval.status, approval.reason) == ("denied", "expired")


async def test_the_console_shows_the_gateway_card_and_allows_it(
    served: ServedGateway, state: Path
) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        ticket = await served.pending()
        session, csrf = await served.login(APPROVER_TOKEN)
        async with session:
            [approval] = (
                await served.service.runtime.approval_page(viewer=Actor(id="svc-ci"))
            ).items
            page = await session.get(f"{served.url}/runs/{approval.approval_id}")
            html = await page.text()
            assert page.status == 200, html
            assert "External agent · ops.mcp" in html
            assert "deploy" in html and "production" in html
            assert "Allow for the rest of this session" in html
            decided = await session.post(
                f"{served.url}/tickets/{ticket}/decide",
                data={"csrf": csrf, "action": "allow", "next": "/tickets"},
                allow_redirects=False,
            )
            assert decided.status == 303, await decided.text()
        result = await asyncio.wait_for(asking, 60)

    assert not result.is_error, text(result)
    assert text(result) == "deployed api to production"
    assert [c["args"] for c in calls(state)] == [PRODUCTION]
    [decided_approval] = (
        await served.service.runtime.approval_page(viewer=Actor(id="svc-ci"))
    ).items
    assert (decided_approval.decided_by, decided_approval.decided_via) == (APPROVER, "console")


async def test_a_stranger_neither_sees_nor_decides_a_gateway_approval(
    served: ServedGateway, state: Path
) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        ticket = await served.pending()
        [approval] = (await served.service.runtime.approval_page(viewer=Actor(id="svc-ci"))).items
        run = approval.approval_id

        # The JSON API: not listed, not found, not decidable.
        status, listed = await served.api("GET", "/api/approvals", STRANGER)
        assert (status, listed["approvals"]) == (200, [])
        status, _ = await served.api("GET", f"/api/approvals/{run}", STRANGER)
        assert status == 404
        status, _ = await served.api("GET", f"/api/runs/{run}", STRANGER)
        assert status == 404
        status, _ = await served.api(
            "POST", f"/api/tickets/{ticket}/decision", STRANGER, {"decision": "allow"}
        )
        assert status == 404
        # The caller sees it (and, not being an approver, may not decide it).
        status, own = await served.api("GET", f"/api/approvals/{run}", CALLER)
        assert (status, own["status"]) == (200, "pending")
        status, _ = await served.api(
            "POST", f"/api/tickets/{ticket}/decision", CALLER, {"decision": "allow"}
        )
        assert status == 403

        # The console: no page, no card, no decision.
        session, csrf = await served.login(STRANGER)
        async with session:
            page = await session.get(f"{served.url}/runs/{run}")
            assert page.status == 404
            assert "deploy" not in await page.text()
            tickets = await session.get(f"{served.url}/tickets")
            assert ticket not in await tickets.text()
            decided = await session.post(
                f"{served.url}/tickets/{ticket}/decide",
                data={"csrf": csrf, "action": "allow", "next": "/tickets"},
                allow_redirects=False,
            )
            assert decided.status == 404

        assert not asking.done()
        still = await served.service.runtime.ticket(ticket)
        assert still.ticket_id == ticket
        assert [t.ticket_id for t in await served.service.runtime.open_tickets()] == [ticket]
        assert calls(state) == []
        asking.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asking


async def test_the_same_failing_call_again_gets_the_tools_error_not_a_denial(
    served: ServedGateway, state: Path
) -> None:
    async with served.client(session="s-fail") as client:
        first = await client.call_tool("fail", {})
        again = await client.call_tool("fail", {})
    assert first.is_error and again.is_error
    assert text(first) == text(again)
    assert "the disk is full" in text(again) and "Not allowed" not in text(again)
    assert [c["tool"] for c in calls(state)] == ["fail"]  # ran once
