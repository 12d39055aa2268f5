"""One person across edges in Discord: ``/signoff link <code>`` links a Discord account to
the person a console code names, once; a four-eyes requester is refused from their linked
Discord account; unlinked users are refused when the settings say so."""

from __future__ import annotations

from discord_harness import ALICE, CAROL, DAVE, Harness
from fake_discord import CHANNEL_ID, GUILD_ID, User

from runtime import Actor, Allow, RunStatus, TicketStatus, Unauthorized


async def _link(harness: Harness, user: User, code: str) -> str:
    command = harness.fake.slash(user, "link", code=code)
    command["data"]["name"] = "signoff"
    command["data"]["id"] = harness.fake._command_id("signoff")
    record = await harness.fake.interact(command)
    text = await harness.fake.answered(record)
    assert record.ephemeral
    return text


async def test_a_link_code_links_once(harness: Harness) -> None:
    await harness.start_bot()
    runtime = harness.bots[-1].runtime
    code = await runtime.identities.new_link_code("oidc:ana@corp")
    assert "linked to `oidc:ana@corp`" in await _link(harness, ALICE, code)
    assert await runtime.identities.person_of(str(ALICE.id)) == "oidc:ana@corp"
    # Used: nobody else links with it.
    assert "unknown, used or expired" in await _link(harness, CAROL, code)
    assert await runtime.identities.person_of(str(CAROL.id)) is None
    assert "unknown, used or expired" in await _link(harness, CAROL, "made-up-code")


async def test_a_four_eyes_requester_from_slack_is_refused_from_their_discord(
    harness: Harness,
) -> None:
    await harness.start_bot()
    runtime = harness.bots[-1].runtime
    # Ana asked in Slack; her Slack id is linked to her identity provider identity.
    await runtime.identities.link("U024BE7LH", "oidc:ana@corp", "email")
    started = await runtime.start(
        "treasury",
        "go",
        requester="U024BE7LH",
        origin={"platform": "discord", "channel_id": str(CHANNEL_ID), "guild_id": str(GUILD_ID)},
        wait=False,
    )
    harness.bots[-1].worker.wake()
    card = await harness.card_for(started.run_id)
    await harness.wait(started.run_id, lambda r: r.status is RunStatus.AWAITING)
    # Carol's Discord account is Ana's: linked with a code Ana got in the console.
    code = await runtime.identities.new_link_code("oidc:ana@corp")
    await _link(harness, CAROL, code)
    before = await harness.snapshot(started.run_id)
    refused = await harness.click(CAROL, card, "Allow")
    assert refused.ephemeral and "may not decide" in refused.text
    assert "(not the requester)" in refused.text
    # And in the console, or over the API, as oidc:ana@corp.
    ticket = (await runtime.get(started.run_id)).pending[0].ticket
    for platform in ("console", "api"):
        try:
            await runtime.decide(
                ticket.ticket_id,
                Allow(),
                Actor(id="oidc:ana@corp", platform=platform, operator=True),
                correlation=ticket.correlation,
            )
        except Unauthorized:
            pass
        else:
            raise AssertionError(f"the requester decided in the {platform}")
    assert await harness.snapshot(started.run_id) == before
    await harness.click(DAVE, card, "Allow")
    await harness.finished(started.run_id)
    assert harness.ledger == [("payout", {"amount": 500.0})]
    decided = await runtime.ticket(ticket.ticket_id)
    assert (decided.status, decided.decided_by) == (TicketStatus.DECIDED, str(DAVE.id))


async def test_unlinked_users_are_refused_when_configured(harness: Harness) -> None:
    await harness.start_bot()
    runtime = harness.bots[-1].runtime
    run_id, card = await harness.park(ALICE, "bank")
    runtime.identities.configure(unlinked="refuse")
    before = await harness.snapshot(run_id)
    refused = await harness.click(ALICE, card, "Allow")
    assert refused.ephemeral and "may not decide" in refused.text
    assert await harness.snapshot(run_id) == before
    code = await runtime.identities.new_link_code("oidc:alice@corp")
    await _link(harness, ALICE, code)
    await harness.click(ALICE, card, "Allow")
    await harness.finished(run_id)
    assert harness.ledger[-1][0] == "transfer"
