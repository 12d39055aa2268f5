"""Refusals change nothing: bad signatures, old timestamps, wrong users, tampered buttons,
closed tickets, duplicate deliveries and concurrent clicks."""

from __future__ import annotations

import asyncio
import json
import time

from fake_slack import (
    SIGNING_SECRET,
    Message,
    click_payload,
    interaction_body,
    signed_headers,
    trigger_id,
)
from slackbed import SlackBed, buttons, text_of

from adapters.slack import blocks
from runtime import RunStatus


async def _parked(
    slack: SlackBed, agent: str, tool_name: str, user: str = "U1"
) -> tuple[str, Message]:
    await slack.command(f"{agent} go", user=user)
    card = await slack.card(tool_name)
    run = await slack.commanded_run()
    await slack.wait_run(run.run_id, lambda r: r.status is RunStatus.AWAITING)
    return run.run_id, card


async def test_forged_signature_is_401_and_changes_nothing(slack: SlackBed) -> None:
    run_id, card = await _parked(slack, "bank", "transfer")
    before = await slack.snapshot(run_id)
    value = buttons(card)[blocks.ACTION_ALLOW]
    body = interaction_body(click_payload(blocks.ACTION_ALLOW, value))

    forged = await slack.post(body, secret="not-the-signing-secret")
    assert forged.status == 401
    unsigned = await slack.post(body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert unsigned.status == 401
    headers = signed_headers(body)
    tampered = body.replace("U1", "U2")  # the signature covers the raw body
    assert (await slack.post(tampered, headers=headers)).status == 401

    await slack.settled()
    assert await slack.snapshot(run_id) == before
    assert slack.fake.called("chat.postEphemeral") == []


async def test_timestamp_older_than_five_minutes_is_401(slack: SlackBed) -> None:
    run_id, card = await _parked(slack, "bank", "transfer")
    before = await slack.snapshot(run_id)
    value = buttons(card)[blocks.ACTION_ALLOW]
    body = interaction_body(click_payload(blocks.ACTION_ALLOW, value))
    stale = int(time.time()) - 6 * 60
    reply = await slack.post(body, headers=signed_headers(body, timestamp=stale))
    assert reply.status == 401
    await slack.settled()
    assert await slack.snapshot(run_id) == before


async def test_wrong_user_gets_an_ephemeral_refusal_naming_who_may(slack: SlackBed) -> None:
    run_id, card = await _parked(slack, "bank", "transfer")
    before = await slack.snapshot(run_id)
    values = buttons(card)

    reply = await slack.click(
        blocks.ACTION_ALLOW, values[blocks.ACTION_ALLOW], user="U2", card=card
    )
    assert reply.status == 200
    [refusal] = await slack.ephemeral("U2")
    assert refusal["channel"] == "C1"
    assert "may not decide" in refusal["text"] and "<@U1>" in refusal["text"]
    # "Deny with reason" does not even open the modal for them.
    await slack.click(
        blocks.ACTION_DENY_REASON, values[blocks.ACTION_DENY_REASON], user="U2", card=card
    )
    await slack.ephemeral("U2", count=2)
    assert slack.fake.called("views.open") == []

    await slack.settled()
    assert await slack.snapshot(run_id) == before
    assert buttons(card)


async def test_tampered_ticket_or_correlation_is_refused(slack: SlackBed) -> None:
    run_id, card = await _parked(slack, "bank", "transfer")
    before = await slack.snapshot(run_id)
    value = json.loads(buttons(card)[blocks.ACTION_ALLOW])

    other_ticket = json.dumps({"t": "tk_forged", "c": value["c"]})
    await slack.click(blocks.ACTION_ALLOW, other_ticket, card=card)
    other_token = json.dumps({"t": value["t"], "c": "guessed-token"})
    await slack.click(blocks.ACTION_ALLOW, other_token, card=card)
    await slack.click(blocks.ACTION_ALLOW, "not json at all", card=card)
    await slack.click("signoff.explode", json.dumps(value), card=card)

    # Each click is answered on its own after its ack: the order of the answers is free.
    texts = sorted(m["text"] for m in await slack.ephemeral("U1", count=4))
    assert sum("does not belong to any request" in t for t in texts) == 1
    assert sum("does not match the open request" in t for t in texts) == 1
    assert sum("not valid" in t for t in texts) == 2
    await slack.settled()
    assert await slack.snapshot(run_id) == before


async def test_click_on_an_expired_ticket(slack: SlackBed) -> None:
    run_id, card = await _parked(slack, "wires", "wire")
    value = buttons(card)[blocks.ACTION_ALLOW]
    slack.clock.advance(61)  # past the one-minute deadline, not yet expired by the loop
    before = await slack.snapshot(run_id)
    await slack.click(blocks.ACTION_ALLOW, value, card=card)
    [refusal] = await slack.ephemeral("U1")
    assert "expired" in refusal["text"]
    assert await slack.snapshot(run_id) == before

    assert await slack.runtime.expire_overdue() != []
    await slack.updated(card)
    assert "Expired" in text_of(card) and buttons(card) == {}
    await slack.click(blocks.ACTION_ALLOW, value, card=card)
    texts = [m["text"] for m in await slack.ephemeral("U1", count=2)]
    assert "already expired" in texts[1]
    done = await slack.finished(run_id)
    assert slack.ledger == [] and "expired" in (done.text or "")


async def test_click_on_an_already_decided_ticket(slack: SlackBed) -> None:
    run_id, card = await _parked(slack, "bank", "transfer")
    values = buttons(card)
    await slack.click(blocks.ACTION_ALLOW, values[blocks.ACTION_ALLOW], card=card)
    await slack.finished(run_id)
    before = await slack.snapshot(run_id)

    await slack.click(blocks.ACTION_DENY, values[blocks.ACTION_DENY], card=card)
    [refusal] = await slack.ephemeral("U1")
    assert "Already decided by <@U1>" in refusal["text"]
    await slack.settled()
    assert await slack.snapshot(run_id) == before
    assert slack.ledger == [("transfer", {"account": "ACME-1", "amount": 250.0})]


async def test_duplicate_delivery_is_stored_and_applied_once(slack: SlackBed) -> None:
    run_id, card = await _parked(slack, "bank", "transfer")
    value = buttons(card)[blocks.ACTION_ALLOW]
    payload = click_payload(blocks.ACTION_ALLOW, value, trigger=trigger_id())
    body = interaction_body(payload)
    first, second = await asyncio.gather(slack.post(body), slack.post(body))
    assert first.status == second.status == 200
    await slack.finished(run_id)
    assert slack.ledger == [("transfer", {"account": "ACME-1", "amount": 250.0})]
    assert [state for _id, state in slack.received()] == ["applied"]
    decided = [e for e in await slack.runtime.events(run_id) if e["kind"] == "ticket_decided"]
    assert len(decided) == 1


async def test_two_concurrent_clicks_apply_once(slack: SlackBed) -> None:
    run_id, card = await _parked(slack, "cache", "purge")  # anyone may decide
    values = buttons(card)
    replies = await asyncio.gather(
        slack.click(blocks.ACTION_ALLOW, values[blocks.ACTION_ALLOW], user="U5", card=card),
        slack.click(blocks.ACTION_DENY, values[blocks.ACTION_DENY], user="U6", card=card),
    )
    assert [r.status for r in replies] == [200, 200]
    done = await slack.finished(run_id)
    await slack.updated(card)
    await slack.settled()
    states = sorted(state for _id, state in slack.received())
    decided = [e for e in await slack.runtime.events(run_id) if e["kind"] == "ticket_decided"]
    assert len(decided) == 1
    assert states in (["applied", "refused"], ["applied"])
    winner = decided[0]["actor"]
    if winner == "U5":
        assert slack.ledger == [("purge", {"cache": "cdn"})]
    else:
        assert slack.ledger == [] and "Permission denied" in (done.text or "")
    assert card.updates == 1
    assert f"by <@{winner}>" in text_of(card)
    loser = "U6" if winner == "U5" else "U5"
    [told] = await slack.ephemeral(loser)  # refused at the check, or when applied
    assert "decided by" in told["text"].lower()


async def test_user_group_and_channel_approvers(slack: SlackBed) -> None:
    slack.fake.usergroups["S111"] = ["U1", "U2"]
    slack.fake.channel_members["C222"] = ["U3", "U4"]

    # group:S111 with four-eyes: U1 asked, so U1 may not; U9 is not in the group; U2 may.
    run_id, card = await _parked(slack, "deployer", "deploy", user="U1")
    assert "<!subteam^S111>" in text_of(card)
    value = buttons(card)[blocks.ACTION_ALLOW]
    before = await slack.snapshot(run_id)
    await slack.click(blocks.ACTION_ALLOW, value, user="U1", card=card)
    await slack.click(blocks.ACTION_ALLOW, value, user="U9", card=card)
    [own] = await slack.ephemeral("U1")
    [outsider] = await slack.ephemeral("U9")
    assert "<!subteam^S111> (not the requester)" in own["text"]
    assert "<!subteam^S111>" in outsider["text"]
    assert await slack.snapshot(run_id) == before
    await slack.click(blocks.ACTION_ALLOW, value, user="U2", card=card)
    await slack.finished(run_id)
    assert slack.ledger == [("deploy", {"service": "api"})]
    lookups = slack.fake.called("usergroups.users.list")
    assert len(lookups) == 1  # cached between clicks

    # group:C222: members of the channel (two pages of conversations.members).
    run_id, card = await _parked(slack, "ops", "restart", user="U1")
    assert "members of <#C222>" in text_of(card)
    value = buttons(card)[blocks.ACTION_ALLOW]
    await slack.click(blocks.ACTION_ALLOW, value, user="U4", card=card)
    await slack.finished(run_id)
    assert slack.ledger[-1] == ("restart", {"service": "db"})
    pages = slack.fake.called("conversations.members")
    assert [p.args.get("cursor") for p in pages] == [None, "page2"]


async def test_refusal_falls_back_to_the_response_url(slack: SlackBed) -> None:
    _run_id, card = await _parked(slack, "bank", "transfer")
    slack.fake.fail("chat.postEphemeral", error="channel_not_found")
    value = buttons(card)[blocks.ACTION_ALLOW]
    await slack.click(blocks.ACTION_ALLOW, value, user="U2", card=card)
    [response] = await slack.until(lambda: slack.fake.responses, "a response_url post")
    assert response["name"] == "U2" and response["response_type"] == "ephemeral"
    assert response["replace_original"] is False and "may not decide" in response["text"]
    assert SIGNING_SECRET not in json.dumps(response)
