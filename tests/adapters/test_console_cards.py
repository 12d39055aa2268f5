"""The console's ticket cards: the tool's own description (cut short, escaped) and, for
an MCP tool, its server; decided calls stay on the run page with who decided, when and
why; and each call that ran without asking says what let it through."""

from __future__ import annotations

import re
from typing import Any

from testkit import echo_model

from runtime import Agent, Tool

HOSTILE = "Sends <script>alert(1)</script> & friends.\n\n" + "y" * 2000


async def run_page(service: Any, run_id: str) -> str:
    response = await service.client.get(f"/runs/{run_id}")
    text = await response.text()
    assert response.status == 200, text
    return text


async def test_a_card_shows_what_the_tool_does_and_its_mcp_server(service: Any) -> None:
    async def invoke(args: dict[str, Any]) -> str:
        return "sent"

    remote = Tool.from_schema(
        "notify",
        HOSTILE,
        {"type": "object", "properties": {"to": {"type": "string"}}},
        invoke,
        permission="ask",
        server="mailer",
    )
    service.runtime.register(
        Agent("notifier", "Notify.", echo_model(("notify", {"to": "x"})), tools=[remote])
    )
    await service.login("tok-u1")

    bank = await service.park("bank")
    html = await run_page(service, bank.run_id)
    assert '<dd class="tool-description">Move money.</dd>' in html
    assert "tool-server" not in html

    parked = await service.park("notifier")
    html = await run_page(service, parked.run_id)
    found = re.search(r'<dd class="tool-description">(.*?)</dd>', html)
    assert found is not None
    shown = found.group(1)
    assert shown.startswith("Sends &lt;script&gt;alert(1)&lt;/script&gt; &amp; friends. yyy")
    assert shown.endswith("y…") and len(shown) < 400
    assert "<script>" not in html
    assert '<dd class="tool-server"><code>mailer</code></dd>' in html
