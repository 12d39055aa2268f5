"""Clicks that must change nothing: wrong user or role, forged ids, closed tickets, repeats."""

from __future__ import annotations

import asyncio

import pytest
from discord_harness import (
    ALICE,
    BOB,
    CAROL,
    DAVE,
    ROLE_APPROVER,
    ROLE_FINANCE,
    Harness,
)

from adapters.discord import parse_button
from runtime import RunStatus

pytestmark = pytest.mark.timeout(60)


async def test_another_user_is_refused_with_who_may_and_nothing_changes(harness: Harness) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    before = await harness.snapshot(run_id)
    for label in ("Allow", "Deny"):
        refused = await harness.click(BOB, card, label)
        assert refused.ephemeral
        assert refused.text == (
            f"⛔ You may not decide this request. Who may: <@{ALICE.id}>. Nothing was changed."
        )
    # Bob cannot even open the deny-with-reason form.
    refused = await harness.click(BOB, card, "Deny with reason")
    assert refused.modal is None and "may not decide" in refused.text
    await harness.settled()  # a (wrong) apply would have happened by now
    assert await harness.snapshot(run_id) == before
    assert "edits" not in harness.fake.messages[card["id"]]


async def test_roles_decide_who_may_and_four_eyes_excludes_the_requester(
    harness: Harness,
) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "treasury")
    who = f"<@&{ROLE_APPROVER}>, <@&{ROLE_FINANCE}> (not the requester)"
    for user in (ALICE, BOB):  # the requester (four-eyes) and a member with another role
        before = await harness.snapshot(run_id)
        refused = await harness.click(user, card, "Allow")
        assert (
            refused.text
            == f"⛔ You may not decide this request. Who may: {who}. Nothing was changed."
        )
        assert await harness.snapshot(run_id) == before
    # Dave's role is mapped to the `finance` group (SIGNOFF_DISCORD_APPROVER_ROLES).
    allowed = await harness.click(DAVE, card, "Allow")
    assert "Allow recorded" in allowed.text
    await harness.finished(run_id)
    assert harness.ledger == [("payout", {"amount": 500.0})]

    # Carol holds the approvers role itself (`group:role:<id>`).
    run_id, card = await harness.park(ALICE, "treasury")
    assert "Allow recorded" in (await harness.click(CAROL, card, "Allow")).text
    await harness.finished(run_id)
    assert len(harness.ledger) == 2


async def test_tampered_custom_ids_are_refused_and_change_nothing(harness: Harness) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    click = parse_button(card["components"][0]["components"][0]["custom_id"])
    assert click is not None
    before = await harness.snapshot(run_id)
    forged = {
        f"so:allow:{click.ticket_id}:forgedtoken": "does not match the open request",
        f"so:allow:tk_nope:{click.correlation}": "does not belong to any request",
        f"so:allow:{click.ticket_id}": "does not belong to any request",  # malformed
        f"so:allow:{click.ticket_id}:{click.correlation}:x": "does not belong to any request",
    }
    for custom_id, expected in forged.items():
        refused = await harness.click(ALICE, card, "Allow", custom_id=custom_id)
        assert expected in refused.text, custom_id
        assert refused.ephemeral
    await harness.settled()
    assert await harness.snapshot(run_id) == before


async def test_an_expired_ticket_refuses_clicks_and_its_card_says_so(harness: Harness) -> None:
    bot = await harness.start_bot()
    run_id, card = await harness.park(ALICE, "wires")
    assert "<t:" in card["embeds"][0]["fields"][-1]["value"]  # the deadline is shown
    harness.clock.advance(61)
    before = await harness.snapshot(run_id)
    refused = await harness.click(ALICE, card, "Allow")
    assert refused.text == "⏰ This request expired before your decision; nothing was changed."
    assert await harness.snapshot(run_id) == before

    assert len(await bot.runtime.expire_overdue()) == 1
    edited = await harness.outcome(card)
    outcome = edited["embeds"][0]["fields"][-1]["value"]
    assert outcome == "⏰ Expired without a decision; the call was denied"
    refused = await harness.click(ALICE, card, "Allow")
    assert "already expired" in refused.text
    await harness.finished(run_id)
    assert harness.ledger == []


async def test_a_decided_ticket_refuses_later_clicks(harness: Harness) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    await harness.click(ALICE, card, "Allow")
    await harness.finished(run_id)
    before = await harness.snapshot(run_id)
    refused = await harness.click(ALICE, card, "Deny")
    assert refused.text == f"📌 Already decided by <@{ALICE.id}>; nothing was changed."
    assert await harness.snapshot(run_id) == before
    assert len(harness.ledger) == 1


async def test_a_redelivered_interaction_is_applied_once(harness: Harness) -> None:
    bot = await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    payload = harness.fake.click(ALICE, card, "Allow")
    first = await harness.fake.interact(payload)
    await harness.fake.answered(first)
    second = await harness.fake.interact(payload)  # the same interaction id again
    await harness.fake.wait_for(
        lambda: (
            sum(1 for m, p in harness.fake.requests if p.startswith(f"/interactions/{first.id}/"))
            >= 2
        ),
        what="the second answer attempt",
    )
    assert second is first and len(first.callbacks) == 1  # Discord refused a second answer
    await harness.finished(run_id)
    events = [e["kind"] for e in await bot.runtime.events(run_id)]
    assert events.count("ticket_decided") == 1
    assert len(harness.ledger) == 1


async def test_two_concurrent_clicks_resume_the_run_once(harness: Harness) -> None:
    bot = await harness.start_bot()
    run_id, card = await harness.park(ALICE, "treasury")
    records = await asyncio.gather(
        harness.fake.interact(harness.fake.click(CAROL, card, "Allow")),
        harness.fake.interact(harness.fake.click(DAVE, card, "Deny")),
    )
    texts = [await harness.fake.answered(r) for r in records]
    # Both passed the check and were stored; exactly one is applied, the other refused.
    assert all("recorded" in t for t in texts), texts
    result = await harness.finished(run_id)
    events = await bot.runtime.events(run_id)
    decided = [e for e in events if e["kind"] == "ticket_decided"]
    assert len(decided) == 1
    assert result.status is RunStatus.DONE
    assert len(harness.ledger) == (1 if decided[0]["data"]["decision"] == "allow" else 0)
    edited = await harness.outcome(card)
    outcome = edited["embeds"][0]["fields"][-1]["value"]
    assert f"<@{decided[0]['actor']}>" in outcome
    # The loser is told, privately, that their click was not applied, and who won.
    winner = decided[0]["actor"]
    loser = next(r for r in records if str(r.payload["member"]["user"]["id"]) != winner)
    [followup] = await harness.fake.wait_for(
        lambda: [f for f in loser.followups if "could not be applied" in f.get("content", "")],
        what="word to the loser",
    )
    assert f"Already decided by <@{winner}>" in followup["content"]
    assert int(followup["flags"]) & 64  # only they see it
    winning = next(r for r in records if r is not loser)
    assert not any("could not be applied" in f.get("content", "") for f in winning.followups)


async def test_a_redelivered_run_command_starts_one_run(harness: Harness) -> None:
    bot = await harness.start_bot()
    payload = harness.fake.slash(ALICE, "run", agent="bank", prompt="pay it")
    first = await harness.fake.interact(payload)
    await harness.fake.answered(first)
    await harness.fake.interact(payload)  # the same interaction delivered again
    await harness.fake.wait_for(
        lambda: (
            sum(1 for m, p in harness.fake.requests if p.startswith(f"/interactions/{first.id}/"))
            >= 2
        ),
        what="the second answer attempt",
    )
    await harness.settled()
    assert len(await bot.runtime.list_runs()) == 1


@pytest.mark.parametrize("custom_id", ["not-ours", "x:allow:tk_1:abc", "", "so:"])
async def test_a_button_that_is_not_ours_still_gets_an_answer(
    harness: Harness, custom_id: str
) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    before = await harness.snapshot(run_id)
    refused = await harness.click(ALICE, card, "Allow", custom_id=custom_id)
    assert refused.ephemeral
    assert "does not belong to any request" in refused.text
    await harness.settled()
    assert await harness.snapshot(run_id) == before
