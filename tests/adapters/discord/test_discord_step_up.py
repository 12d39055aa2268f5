"""Step-up in Discord: the card of a call that may only be decided in the console links
there instead of offering Allow and Deny, and a forged click on it changes nothing."""

from __future__ import annotations

from discord_harness import CAROL, Harness
from testkit import echo_model

from adapters.discord.custom_ids import Action, TicketClick
from runtime import Actor, Agent, Allow, RunStatus, tool


async def test_a_step_up_card_links_to_the_console_and_a_forged_click_changes_nothing(
    harness: Harness,
) -> None:
    @tool(permission="ask", approvers=["*"], decide_in=["console"], sso=True)
    async def drop_database(name: str) -> str:
        """Drop a database."""
        harness.ledger.append(("drop_database", {"name": name}))
        return f"dropped {name}"

    model = echo_model(("drop_database", {"name": "orders"}))
    await harness.start_bot(agents=[Agent("dba", "Drop.", model, tools=[drop_database])])
    runtime = harness.bots[-1].runtime
    run_id, card = await harness.park(CAROL, "dba")
    await harness.wait(run_id, lambda r: r.status is RunStatus.AWAITING)
    [row] = card["components"]
    [link] = row["components"]
    assert link["label"] == "Decide in the console" and link["style"] == 5
    assert link["url"] == f"https://signoff.example.com/runs/{run_id}"
    fields = {f["name"]: f["value"] for f in card["embeds"][0]["fields"]}
    assert (
        "only be decided in the console after signing in with single sign-on" in (fields["Where"])
    )

    ticket = (await runtime.get(run_id)).pending[0].ticket
    before = await harness.snapshot(run_id)
    forged = TicketClick(Action.ALLOW, ticket.ticket_id, ticket.correlation).button_id
    click = harness.fake.click(CAROL, card, "Decide in the console", custom_id=forged)
    # As if the message had an Allow button: a forged click names the ticket anyway.
    [[button]] = [r["components"] for r in click["message"]["components"]]
    button.pop("url")
    button.update(style=1, label="Allow")
    record = await harness.fake.interact(click)
    text = await harness.fake.answered(record)
    assert record.ephemeral and "may only be decided in the console" in text
    assert await harness.snapshot(run_id) == before

    await runtime.decide(
        ticket.ticket_id,
        Allow(),
        Actor(id="oidc:carol@corp", platform="console", sso=True),
        correlation=ticket.correlation,
    )
    harness.bots[-1].worker.wake()
    await harness.finished(run_id)
    assert harness.ledger == [("drop_database", {"name": "orders"})]
