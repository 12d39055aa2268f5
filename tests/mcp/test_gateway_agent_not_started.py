"""A gateway agent (``<agent>.mcp``) is started by signoff itself, one run per MCP call:
the JSON API and the console neither offer it nor start it by hand, for a stranger, the
calling client's identity or an operator; its calls' tickets stay listed and decidable
(`gatewaybed`: the official `mcp` SDK client calls ``/mcp/ops`` of a served signoff)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gatewaybed import (
    APPROVER_TOKEN,
    CALLER,
    OPERATOR,
    STRANGER,
    ServedGateway,
    serve_gateway,
    text,
)
from mcpbed import calls
from testkit import echo_model

from adapters.mcp.gateway import gateway_agent, serve_as_gateway
from runtime import Agent, ExternalAgent

pytestmark = pytest.mark.timeout(120)

APPROVER = "U-approver"
PRODUCTION = {"service": "api", "environment": "production"}
WHO = {"stranger": STRANGER, "caller": CALLER, "operator": OPERATOR}


@pytest.fixture
async def served(tmp_path: Path, state: Path) -> AsyncIterator[ServedGateway]:
    async with serve_gateway(tmp_path, state, approver=APPROVER) as found:
        yield found


def test_both_ways_of_making_a_gateway_agent_mark_it_internal() -> None:
    source = Agent("infra", "Operate.", echo_model())
    made = gateway_agent(source)
    declared = ExternalAgent("infra.mcp", approvals={"platform": "slack", "channel": "C0123456789"})
    assert not getattr(declared, "internal", False)

    served = serve_as_gateway(declared, source)

    assert served is declared
    assert getattr(made, "internal", False) is True
    assert getattr(served, "internal", False) is True
    assert served.approvals == {"platform": "slack", "channel": "C0123456789"}
    # Only the gateway agents: a plain external agent is still offered.
    assert not getattr(ExternalAgent("billing"), "internal", False)


async def test_the_api_neither_lists_nor_starts_a_gateway_agent(served: ServedGateway) -> None:
    runtime = served.service.runtime
    assert {"ops", "ops.mcp"} <= set(runtime.agents)
    for who, token in WHO.items():
        status, listed = await served.api("GET", "/api/agents", token)
        assert status == 200, (who, listed)
        names = [a["name"] for a in listed["agents"]]
        assert "ops" in names, who
        assert "ops.mcp" not in names, who

        status, body = await served.api(
            "POST",
            "/api/runs",
            token,
            {"agent": "ops.mcp", "input": '{"tool": "infra.deploy", "arguments": {}}'},
        )
        assert status == 422, (who, body)
        assert body["error"] == "unknown_agent"
        assert body["message"] == "agent 'ops.mcp' is started by signoff itself, not by hand"

    assert await runtime.list_runs() == []


async def test_the_console_neither_offers_nor_starts_a_gateway_agent(
    served: ServedGateway,
) -> None:
    for who, token in WHO.items():
        session, csrf = await served.login(token)
        async with session:
            page = await session.get(served.url + "/start")
            html = await page.text()
            assert page.status == 200, (who, html)
            assert 'value="ops"' in html, who
            assert "ops.mcp" not in html, who

            refused = await session.post(
                served.url + "/start",
                data={"csrf": csrf, "agent": "ops.mcp", "input": "deploy api"},
                allow_redirects=False,
            )
            answer = await refused.text()
            assert refused.status == 422, (who, answer)
            assert "ops.mcp is started by signoff itself, not by hand." in answer

    assert await served.service.runtime.list_runs() == []


async def test_a_gateway_calls_ticket_is_still_listed_and_decided(
    served: ServedGateway, state: Path
) -> None:
    async with served.client() as client:
        asking = asyncio.ensure_future(client.call_tool("deploy", PRODUCTION))
        try:
            ticket = await served.pending()

            for who, token in {"approver": APPROVER_TOKEN, "operator": OPERATOR}.items():
                status, listed = await served.api("GET", "/api/tickets", token)
                assert status == 200, (who, listed)
                [entry] = listed["tickets"]
                assert (entry["ticket_id"], entry["agent"], entry["tool"]) == (
                    ticket,
                    "ops.mcp",
                    "deploy",
                ), who
            status, listed = await served.api("GET", "/api/tickets", STRANGER)
            assert (status, listed["tickets"]) == (200, [])

            # The caller sees the call's run among theirs.
            status, runs = await served.api("GET", "/api/runs", CALLER)
            assert status == 200, runs
            assert [r["agent"] for r in runs["runs"]] == ["ops.mcp"]

            # The approver's console lists it too.
            session, _ = await served.login(APPROVER_TOKEN)
            async with session:
                page = await session.get(served.url + "/tickets")
                html = await page.text()
                assert page.status == 200, html
                assert re.search(rf"/tickets/{re.escape(ticket)}/decide", html), html

            status, decided = await served.api(
                "POST", f"/api/tickets/{ticket}/decision", APPROVER_TOKEN, {"decision": "allow"}
            )
            assert status == 200, decided
            result = await asyncio.wait_for(asking, 60)
        finally:
            asking.cancel()  # a failed check must not leave the call waiting

    assert not result.is_error, text(result)
    assert text(result) == "deployed api to production"
    assert [c["args"] for c in calls(state)] == [PRODUCTION]
