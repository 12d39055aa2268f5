"""A same-arguments grant on an MCP tool (a real MCP server subprocess over stdio): a
call that adds an argument the tool's schema does not forbid still asks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcpbed import McpBed, calls, stdio_server
from testkit import echo_model

from adapters.mcp import Binding
from runtime import Actor, Agent, GrantRequest, RunStatus

pytestmark = pytest.mark.timeout(120)

PROD = {"service": "api", "environment": "production"}


async def test_a_same_grant_on_an_mcp_tool_does_not_cover_an_added_argument(
    make_bed: Any, state: Path
) -> None:
    ops = Agent(
        "ops",
        "Operate.",
        echo_model(("deploy", PROD), ("deploy", {**PROD, "force": True}), ("deploy", PROD)),
    )
    bed: McpBed = await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",))])
    assert "additionalProperties" not in ops.tools["deploy"].parameters  # extras validate

    parked = await bed.parked(await bed.start("ops"))
    first, forced, again = parked.pending
    assert forced.call.arguments == {**PROD, "force": True}

    # The grant allows the open ticket of the identical call at once, not the forced one.
    granted = await bed.runtime.approve(
        first, actor=Actor(id="U1", platform="console"), grant=GrantRequest(args="same")
    )
    assert [p.ticket_id for p in granted.pending] == [forced.ticket_id]
    [grant] = await bed.runtime.grants()
    assert grant.covers.endswith("no other arguments)")

    await bed.runtime.decline(forced, actor=Actor(id="U1", platform="console"))
    bed.worker.wake()
    done = await bed.finished(parked.run_id)
    assert done.status is RunStatus.DONE
    assert [c["args"] for c in calls(state)] == [PROD, PROD]  # the first and `again`
    [applied] = [
        e
        for e in await bed.runtime.events(done.run_id)
        if e["kind"] == "ticket_decided" and e["data"]["ticket_id"] == again.ticket_id
    ]
    assert applied["data"]["by_grant"] is True
