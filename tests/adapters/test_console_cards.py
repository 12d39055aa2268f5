"""The console's ticket cards: the tool's own description (cut short, escaped) and, for
an MCP tool, its server; decided calls stay on the run page with who decided, when and
why; and each call that ran without asking says what let it through."""

from __future__ import annotations

import re
from typing import Any

from testkit import echo_model

from runtime import (
    Agent,
    ModelRequest,
    ScriptedModel,
    Tool,
    final_reply,
    tool,
    tool_call_reply,
)

SECRET_KEY = "sk-live-123456"  # the bank agent's secret argument (see conftest)
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


# -- decided calls stay, and calls that ran without asking say why -------------------------


def calls_of(html: str) -> dict[str, str]:
    """Each call card of a run page by tool: its HTML."""
    found = re.findall(
        r'(<section class="card call[^>]*data-tool="(\w+)".*?</section>)', html, re.S
    )
    return {tool: card for card, tool in found}


def small_payments() -> Agent:
    """``payer``: two payments one turn after the other, under a rule; then a refund that
    asks, and may be granted for the rest of the run; then a second refund."""
    steps = [
        ("pay", {"amount": 20.0}),
        ("refund", {"order": "A1"}),
        ("refund", {"order": "A2"}),
    ]

    def reply(request: ModelRequest) -> dict[str, Any]:
        start = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
        asked = sum(1 for m in request.messages[start:] if m.get("role") == "assistant")
        if asked < len(steps):
            return tool_call_reply(steps[asked])
        return final_reply("Paid and refunded.")

    def small_amounts(args: dict[str, Any]) -> str:
        """allow under 100, ask from 100 on"""
        return "allow" if args["amount"] < 100 else "ask"

    @tool(permission=small_amounts)
    async def pay(amount: float) -> str:
        """Pay an invoice."""
        return f"paid {amount}"

    @tool(permission="ask")
    async def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    return Agent("payer", "Pay.", ScriptedModel(reply), [pay, refund])


async def test_decided_calls_stay_on_the_run_page_with_who_when_and_why(service: Any) -> None:
    parked = await service.park("bank")
    ticket = parked.pending[0].ticket_id
    status, body = await service.api(
        "POST",
        f"/api/tickets/{ticket}/decision",
        json={"decision": "deny", "reason": "not this month"},
    )
    assert status == 200, body
    await service.finished(parked.run_id)

    await service.login("tok-u1")
    html = await run_page(service, parked.run_id)
    assert f"ticket-{ticket}" not in html  # no buttons any more
    card = calls_of(html)["transfer"]
    assert 'data-state="denied"' in card
    assert "Denied by Uma via api" in card
    assert '<dd class="decided-by">Uma</dd>' in card
    assert '<dd class="reason">not this month</dd>' in card
    assert re.search(r'<dd class="decided-at"><time datetime="[^"]+"', card)
    assert "••••••" in card and SECRET_KEY not in html  # the secret stays masked


async def test_each_call_that_ran_without_asking_says_what_allowed_it(service: Any) -> None:
    service.runtime.register(small_payments())
    parked = await service.park("payer")
    [entry] = parked.pending
    assert entry.call.name == "refund"
    status, body = await service.api(
        "POST",
        f"/api/tickets/{entry.ticket_id}/decision",
        json={"decision": "allow", "grant": {"scope": "run"}},
    )
    assert status == 200, body
    grant_id = body["grant"]["grant_id"]
    await service.finished(parked.run_id)

    # The flight recorder says which rule let the payment through.
    events = await service.runtime.events(parked.run_id)
    [pay] = [e for e in events if e["kind"] == "tool_proposed" and e["data"]["tool"] == "pay"]
    assert pay["data"]["rule"] == "rule: allow under 100, ask from 100 on"

    await service.login("tok-u1")
    html = await run_page(service, parked.run_id)
    cards = re.findall(r'<section class="card call[^>]*>.*?</section>', html, re.S)
    assert len(cards) == 3
    by_rule, asked, by_grant = cards
    assert "Ran without asking: allowed by the tool&#39;s rule: allow under 100" in by_rule
    assert 'data-state="completed"' in by_rule and "paid 20.0" in by_rule
    assert "Allowed by Uma via api" in asked and f"grant {grant_id}" in asked
    assert f"Ran without asking: allowed by the standing grant {grant_id} (given by U1)" in by_grant
    assert "refunded A2" in by_grant

    # A tool whose permission is a plain allow says so too.
    paged = await service.runtime.start("pager", "page grace", requester="U1", wait=True)
    html = await run_page(service, paged.run_id)
    assert "allowed by the tool&#39;s permission allow" in calls_of(html)["page"]
