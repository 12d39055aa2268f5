"""Approve with edits and "Allow all N" through real slack-bolt and slack_sdk against the
fake Slack: the modal, its refusals, the batch message and its refusals."""

from __future__ import annotations

import json
from typing import Any

from fake_slack import text_input
from slackbed import SECRET_KEY, SlackBed, buttons, text_of

from adapters.slack import blocks
from runtime import RunStatus


async def open_edit_modal(slack: SlackBed, tool: str, user: str = "U1") -> dict[str, Any]:
    card = await slack.card(tool)
    values = buttons(card)
    before = len(slack.fake.called("views.open"))
    reply = await slack.click(blocks.ACTION_EDIT, values[blocks.ACTION_EDIT], card=card, user=user)
    assert reply.status == 200
    opened = await slack.until(
        lambda: slack.fake.called("views.open")[before:], "the edit modal to open"
    )
    view: dict[str, Any] = opened[0].args["view"]
    return view


def inputs_of(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["label"]["text"]: b for b in view["blocks"] if b["type"] == "input"}


async def test_allow_with_changes_opens_a_prefilled_modal_and_runs_the_changed_call(
    slack: SlackBed,
) -> None:
    await slack.command("bank pay it")
    card = await slack.card("transfer")
    run = await slack.latest_run()
    view = await open_edit_modal(slack, "transfer")
    assert view["callback_id"] == "signoff.edit"
    inputs = inputs_of(view)
    assert set(inputs) == {"Account", "Amount"}  # never the secret api_key
    assert inputs["Amount"]["element"]["initial_value"] == "250.0"
    assert inputs["Account"]["element"]["initial_value"] == "ACME-1"
    assert all(block["optional"] for block in inputs.values())
    assert SECRET_KEY not in json.dumps(view)
    assert (await slack.runtime.get(run.run_id)).status is RunStatus.AWAITING  # nothing yet

    reply = await slack.submit(view, {inputs["Amount"]["block_id"]: text_input("200")})
    assert reply.status == 200 and reply.text == ""  # the modal closes

    await slack.finished(run.run_id)
    assert slack.ledger == [("transfer", {"account": "ACME-1", "amount": 200.0})]
    await slack.updated(card)
    shown = text_of(card)
    assert buttons(card) == {}
    assert "Approved with changes by <@U1>" in shown
    assert "amount 250.0 → 200.0" in shown
    [event] = [e for e in await slack.runtime.events(run.run_id) if e["kind"] == "ticket_decided"]
    assert event["data"]["edit"]["summary"] == "amount 250.0 → 200.0"
    assert event["data"]["platform"] == "slack"


async def test_an_edit_the_schema_or_the_rule_refuses_is_not_recorded(slack: SlackBed) -> None:
    await slack.command("wires send it")
    run = await slack.latest_run()
    view = await open_edit_modal(slack, "wire")
    amount = inputs_of(view)["Amount"]["block_id"]
    before = await slack.snapshot(run.run_id)

    reply = await slack.submit(view, {amount: text_input("lots")})
    body = reply.json()
    assert body["response_action"] == "errors" and list(body["errors"]) == [amount]

    reply = await slack.submit(view, {amount: text_input("5000")})  # the rule says deny
    body = reply.json()
    assert body["response_action"] == "update"
    assert "Not recorded" in json.dumps(body["view"])
    assert await slack.snapshot(run.run_id) == before  # nothing stored, nothing changed


async def test_a_tool_that_forbids_edits_offers_none_and_refuses_a_forged_one(
    slack: SlackBed,
) -> None:
    await slack.command("tidy tidy up")
    card = await slack.card("delete_branch")
    run = await slack.latest_run()
    assert blocks.ACTION_EDIT not in buttons(card)
    assert blocks.ACTION_EDIT in buttons(await slack.card("send_email"))
    value = buttons(card)[blocks.ACTION_ALLOW]
    before = await slack.snapshot(run.run_id)
    reply = await slack.click(blocks.ACTION_EDIT, value, card=card)
    assert reply.status == 200
    [told] = await slack.ephemeral("U1")
    assert "cannot be changed" in told["text"]
    assert slack.fake.called("views.open") == []
    assert await slack.snapshot(run.run_id) == before


async def test_a_stranger_may_not_edit(slack: SlackBed) -> None:
    await slack.command("bank pay it")
    card = await slack.card("transfer")
    run = await slack.latest_run()
    view = await open_edit_modal(slack, "transfer")  # U1's own modal
    before = await slack.snapshot(run.run_id)

    reply = await slack.click(
        blocks.ACTION_EDIT, buttons(card)[blocks.ACTION_EDIT], card=card, user="U2"
    )
    assert reply.status == 200
    await slack.ephemeral("U2")
    assert len(slack.fake.called("views.open")) == 1  # none for the stranger

    amount = inputs_of(view)["Amount"]["block_id"]
    reply = await slack.submit(view, {amount: text_input("1")}, user="U2")
    body = reply.json()
    assert body["response_action"] == "update" and "Not recorded" in json.dumps(body["view"])
    assert await slack.snapshot(run.run_id) == before


# -- "Allow all N" ---------------------------------------------------------------------------


async def batch_message(slack: SlackBed) -> Any:
    def find() -> Any:
        for message in slack.fake.messages.values():
            if blocks.ACTION_ALLOW_ALL in buttons(message):
                return message
        return None

    return await slack.until(find, "the batch message")


async def test_allow_all_decides_every_call_of_the_turn(slack: SlackBed) -> None:
    await slack.command("tidy tidy up")
    email, branch = await slack.card("send_email"), await slack.card("delete_branch")
    run = await slack.latest_run()
    batch = await batch_message(slack)
    assert batch.thread_ts == email.thread_ts
    shown = text_of(batch)
    assert "2 calls wait for a decision" in shown
    assert "send_email" in shown and "delete_branch" in shown and "release-2.4" in shown
    labels = {
        e["action_id"]: e["text"]["text"]
        for b in batch.blocks
        if b["type"] == "actions"
        for e in b["elements"]
    }
    assert labels == {blocks.ACTION_ALLOW_ALL: "Allow all 2", blocks.ACTION_DENY_ALL: "Deny all 2"}

    value = buttons(batch)[blocks.ACTION_ALLOW_ALL]
    reply = await slack.click(blocks.ACTION_ALLOW_ALL, value, card=batch)
    assert reply.status == 200
    await slack.finished(run.run_id)
    assert sorted(slack.ledger) == [
        ("delete_branch", {"name": "release-2.4"}),
        ("send_email", {"to": "ops@example.com", "subject": "Release done"}),
    ]
    [told] = await slack.ephemeral("U1")
    assert "Allow recorded for 2 of 2 calls" in told["text"]
    await slack.updated(email)
    await slack.updated(branch)
    assert "Approved by <@U1>" in text_of(email) and "Approved by <@U1>" in text_of(branch)
    await slack.updated(batch)
    assert buttons(batch) == {} and "Allow all recorded by <@U1>" in text_of(batch)
    assert [state for _, state in slack.received()] == ["applied", "applied"]


async def test_allow_all_lists_a_call_decided_meanwhile_and_applies_the_other(
    slack: SlackBed,
) -> None:
    await slack.command("tidy tidy up")
    email = await slack.card("send_email")
    run = await slack.latest_run()
    batch = await batch_message(slack)
    await slack.click(blocks.ACTION_DENY, buttons(email)[blocks.ACTION_DENY], card=email)
    await slack.updated(email)

    await slack.click(blocks.ACTION_ALLOW_ALL, buttons(batch)[blocks.ACTION_ALLOW_ALL], card=batch)
    await slack.finished(run.run_id)
    assert slack.ledger == [("delete_branch", {"name": "release-2.4"})]
    told = (await slack.ephemeral("U1"))[-1]["text"]
    assert "Allow recorded for 1 of 2 calls" in told
    assert "`send_email`" in told and "already" in told.lower()


async def test_a_stranger_or_a_forged_batch_button_changes_nothing(slack: SlackBed) -> None:
    await slack.command("tidy tidy up")
    run = await slack.latest_run()
    batch = await batch_message(slack)
    value = buttons(batch)[blocks.ACTION_ALLOW_ALL]
    before = await slack.snapshot(run.run_id)

    await slack.click(blocks.ACTION_ALLOW_ALL, value, card=batch, user="U2")
    [told] = await slack.ephemeral("U2")
    assert "Allow recorded" not in told["text"]  # nothing was stored for the stranger
    assert "`send_email`" in told["text"] and "`delete_branch`" in told["text"]

    forged = json.dumps({**json.loads(value), "c": "A" * 43})
    await slack.click(blocks.ACTION_ALLOW_ALL, forged, card=batch)
    await slack.ephemeral("U1")
    assert await slack.snapshot(run.run_id) == before
    assert buttons(batch)  # still offered
