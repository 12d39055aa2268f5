"""An MCP tool's approval card names the tool's own description and its server: the
notification the outbox stores, and what Slack (Block Kit), Discord and the console show
of it (a real stdio MCP server behind a real hub)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcpbed import McpBed, stdio_server
from testkit import echo_model

from adapters.discord import cards
from adapters.mcp import Binding
from adapters.slack import blocks
from runtime import Agent
from runtime.domain.notifications import NOTIFICATION, ApprovalRequested


async def test_an_mcp_approval_card_shows_the_tools_description_and_server(
    make_bed: Any, state: Path
) -> None:
    deploy = ("deploy", {"service": "api", "environment": "production"})
    ops = Agent("ops", "Operate.", echo_model(deploy))
    bed: McpBed = await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",))])
    parked = await bed.parked(await bed.start("ops"))
    [entry] = parked.pending

    async with bed.store.transaction() as tx:
        [stored] = [
            o for o in await tx.outbox_for_run(parked.run_id) if o.kind == "approval_requested"
        ]
    note = NOTIFICATION.validate_python({**stored.payload, "kind": stored.kind})
    assert isinstance(note, ApprovalRequested)
    assert (note.tool_description, note.tool_server) == ("Deploy a service.", "infra")

    slack = blocks.approval_card(note, blocks.TicketRef(entry.ticket_id, "c" * 43))
    [about] = [b for b in slack if b["type"] == "context" and "MCP server" in json.dumps(b)]
    assert [e["text"] for e in about["elements"]] == ["Deploy a service.", "MCP server `infra`"]

    discord = cards.card(note, "c" * 43)
    fields = {f["name"]: f["value"] for f in discord["embeds"][0]["fields"]}
    assert fields["Tool"] == "`deploy` (MCP server `infra`)"
    assert fields["What it does"] == "Deploy a service."

    await bed.login()
    assert bed.client is not None
    html = await (await bed.client.get(f"/runs/{parked.run_id}")).text()
    assert '<dd class="tool-description">Deploy a service.</dd>' in html
    assert '<dd class="tool-server"><code>infra</code></dd>' in html
