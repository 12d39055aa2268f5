"""Approve with edits and "Allow all N" through real discord.py against the fake Discord:
the modal (five fields at most), its refusals, the batch message and its refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from discord_harness import ALICE, BOB, Harness
from fake_discord import CHANNEL_ID

from adapters.discord import Action, parse_modal
from adapters.discord.custom_ids import TicketClick, parse_button
from runtime import RunStatus

pytestmark = pytest.mark.timeout(60)


def labels(message: dict[str, Any]) -> list[str]:
    return [c["label"] for row in message.get("components", []) for c in row["components"]]


def inputs(modal: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["custom_id"]: c for row in modal["components"] for c in row["components"]}


def field(message: dict[str, Any], name: str) -> str:
    fields = message["embeds"][0].get("fields", [])
    return next(str(f["value"]) for f in fields if f["name"] == name)


async def titled(harness: Harness, title: str) -> dict[str, Any]:
    """The newest channel message whose embed title contains `title`."""

    def find() -> dict[str, Any] | None:
        for message in reversed(harness.fake.channel_messages(CHANNEL_ID)):
            embeds = message.get("embeds") or []
            if embeds and title in str(embeds[0].get("title", "")):
                return message
        return None

    found: dict[str, Any] = await harness.fake.wait_for(find, what=f"a message {title!r}")
    return found


async def test_allow_with_changes_opens_a_prefilled_modal_and_runs_the_changed_call(
    harness: Harness,
) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    assert "Allow with changes" in labels(card)
    opened = await harness.click(ALICE, card, "Allow with changes")
    assert opened.modal is not None
    click = parse_modal(opened.modal["custom_id"])
    assert click is not None and click.action is Action.EDIT
    shown = inputs(opened.modal)
    assert list(shown) == ["account", "amount"]  # never the secret api_key
    assert shown["amount"]["value"] == "250.0" and shown["account"]["value"] == "ACME-1"
    assert not any(i["required"] for i in shown.values())
    assert "sk-live" not in json.dumps(opened.modal)

    answer = await harness.submit(ALICE, opened, {"amount": "200"})
    assert "Allow with changes recorded" in answer.text
    await harness.finished(run_id)
    assert harness.ledger == [("transfer", {"account": "ACME-1", "amount": 200.0})]
    outcome = field(await harness.outcome(card), "Outcome")
    assert outcome.startswith(f"✅ Allowed with changes by <@{ALICE.id}>")
    assert "Changed: amount 250.0 → 200.0" in outcome


async def test_an_edit_the_schema_or_the_rule_refuses_is_not_recorded(harness: Harness) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "wires")
    opened = await harness.click(ALICE, card, "Allow with changes")
    before = await harness.snapshot(run_id)

    wrong = await harness.submit(ALICE, opened, {"amount": "lots"})
    assert "nothing was recorded" in wrong.text and "**Amount**" in wrong.text
    denied = await harness.submit(ALICE, opened, {"amount": "5000"})  # the rule says deny
    assert "rules deny the call with those changes; nothing was changed" in denied.text
    assert await harness.snapshot(run_id) == before
    assert (await harness.bots[-1].runtime.get(run_id)).status is RunStatus.AWAITING


async def test_a_modal_holds_five_of_more_editable_arguments(harness: Harness) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "infra")
    opened = await harness.click(ALICE, card, "Allow with changes")
    assert opened.modal is not None
    assert list(inputs(opened.modal)) == ["name", "region", "size", "replicas", "tier"]
    assert "(5 of 7)" in opened.modal["title"]
    await harness.submit(ALICE, opened, {"replicas": "3"})
    await harness.finished(run_id)
    # The arguments not shown kept their values.
    assert harness.ledger == [("provision", {"name": "api", "replicas": 3, "note": "first"})]


async def test_a_tool_that_forbids_edits_offers_none_and_refuses_a_forged_one(
    harness: Harness,
) -> None:
    await harness.start_bot()
    run_id, _ = await harness.start_run(ALICE, "tidy")
    branch = await titled(harness, "delete_branch")
    email = await titled(harness, "send_email")
    assert "Allow with changes" not in labels(branch)
    assert "Allow with changes" in labels(email)
    allow = parse_button(branch["components"][0]["components"][0]["custom_id"])
    assert allow is not None
    forged = TicketClick(Action.EDIT, allow.ticket_id, allow.correlation).button_id
    before = await harness.snapshot(run_id)
    answer = await harness.click(ALICE, branch, "Allow", custom_id=forged)
    assert answer.modal is None
    assert "cannot be changed" in answer.text
    assert await harness.snapshot(run_id) == before


async def test_a_stranger_may_not_edit(harness: Harness) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    opened = await harness.click(ALICE, card, "Allow with changes")  # Alice's own modal
    before = await harness.snapshot(run_id)

    refused = await harness.click(BOB, card, "Allow with changes")
    assert refused.modal is None and refused.ephemeral
    answer = await harness.submit(BOB, opened, {"amount": "1"})
    assert "recorded" not in answer.text.replace("not recorded", "")
    assert await harness.snapshot(run_id) == before


# -- "Allow all N" ---------------------------------------------------------------------------


async def test_allow_all_decides_every_call_of_the_turn(harness: Harness) -> None:
    await harness.start_bot()
    run_id, _ = await harness.start_run(ALICE, "tidy")
    email, branch = await titled(harness, "send_email"), await titled(harness, "delete_branch")
    batch = await titled(harness, "2 calls wait for a decision")
    description = batch["embeds"][0]["description"]
    assert "send_email" in description and "release-2.4" in description
    assert labels(batch) == ["Allow all 2", "Deny all 2"]

    answer = await harness.click(ALICE, batch, "Allow all 2")
    assert answer.ephemeral
    assert "Allow recorded for 2 of 2 calls" in answer.text
    await harness.finished(run_id)
    assert sorted(harness.ledger) == [
        ("delete_branch", {"name": "release-2.4"}),
        ("send_email", {"to": "ops@example.com", "subject": "Release done"}),
    ]
    for card in (email, branch):
        assert field(await harness.outcome(card), "Outcome").startswith("✅ Allowed by")
    settled = harness.fake.messages[batch["id"]]
    assert not settled.get("components")
    assert f"Allow all recorded by <@{ALICE.id}>" in field(settled, "Outcome")


async def test_deny_all_lists_a_call_decided_meanwhile_and_applies_the_other(
    harness: Harness,
) -> None:
    await harness.start_bot()
    run_id, _ = await harness.start_run(ALICE, "tidy")
    email = await titled(harness, "send_email")
    batch = await titled(harness, "2 calls wait for a decision")
    await harness.click(ALICE, email, "Allow")
    await harness.outcome(email)

    answer = await harness.click(ALICE, batch, "Deny all 2")
    assert "Deny recorded for 1 of 2 calls" in answer.text
    assert "`send_email`" in answer.text
    await harness.finished(run_id)
    assert harness.ledger == [("send_email", {"to": "ops@example.com", "subject": "Release done"})]


async def test_a_stranger_or_a_forged_batch_button_changes_nothing(harness: Harness) -> None:
    await harness.start_bot()
    run_id, _ = await harness.start_run(ALICE, "tidy")
    batch = await titled(harness, "2 calls wait for a decision")
    before = await harness.snapshot(run_id)

    answer = await harness.click(BOB, batch, "Allow all 2")
    assert answer.ephemeral and "Allow recorded" not in answer.text

    custom_id = batch["components"][0]["components"][0]["custom_id"]
    forged = custom_id.rsplit(":", 1)[0] + ":" + "A" * 43
    answer = await harness.click(ALICE, batch, "Allow all 2", custom_id=forged)
    assert "Allow recorded" not in answer.text
    assert await harness.snapshot(run_id) == before
    assert labels(harness.fake.messages[batch["id"]]) == ["Allow all 2", "Deny all 2"]
