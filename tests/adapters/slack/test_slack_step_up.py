"""Step-up in Slack: the card of a call that may only be decided in the console links
there instead of offering Allow and Deny, and a forged click on it changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from slackbed import SlackBed, text_of
from testkit import echo_model

from adapters.slack import blocks
from runtime import Actor, Agent, Allow, RunStatus, TicketStatus, tool

CONSOLE = "https://signoff.example.com"


@pytest.fixture
def slack_agents(ledger: list[tuple[str, dict[str, Any]]]) -> list[Agent]:
    @tool(permission="ask", approvers=["*"], decide_in=["console"], sso=True)
    async def drop_database(name: str) -> str:
        """Drop a database."""
        ledger.append(("drop_database", {"name": name}))
        return f"dropped {name}"

    model = echo_model(("drop_database", {"name": "orders"}))
    return [Agent("dba", "Drop databases.", model, tools=[drop_database])]


@pytest.fixture
def slack_options() -> dict[str, Any]:
    return {"console_url": CONSOLE}


async def test_a_step_up_card_links_to_the_console_and_a_forged_click_changes_nothing(
    slack: SlackBed,
) -> None:
    await slack.command("dba drop the orders database", user="U1")
    card = await slack.card("drop_database")
    run = await slack.commanded_run()
    await slack.wait_run(run.run_id, lambda r: r.status is RunStatus.AWAITING)
    assert not [b for b in card.blocks if b["type"] == "actions"]
    text = text_of(card)
    assert "may only be decided in the console after signing in with single sign-on" in text
    assert f"<{CONSOLE}/runs/{run.run_id}|Decide in the console>" in text

    ticket = (await slack.runtime.get(run.run_id)).pending[0].ticket
    before = await slack.snapshot(run.run_id)
    forged = blocks.button_value(ticket.ticket_id, ticket.correlation)
    await slack.click(blocks.ACTION_ALLOW, forged, user="U2", card=card)
    [told] = await slack.ephemeral("U2")
    assert "console" in told["text"]
    assert await slack.snapshot(run.run_id) == before

    await slack.runtime.decide(
        ticket.ticket_id,
        Allow(),
        Actor(id="oidc:bo@corp", platform="console", sso=True),
        correlation=ticket.correlation,
    )
    slack.worker.wake()
    await slack.finished(run.run_id)
    assert slack.ledger == [("drop_database", {"name": "orders"})]
    assert (await slack.runtime.ticket(ticket.ticket_id)).status is TicketStatus.DECIDED
