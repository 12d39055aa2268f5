"""End to end: slash command -> card -> click (or form) -> tool -> card edited -> answer."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from discord_harness import ALICE, BOB, Crash, Harness
from fake_discord import CHANNEL_ID, MANAGE_GUILD, THREAD_ID, User

from adapters.discord import Action, parse_button, parse_modal
from runtime import RunStatus

pytestmark = pytest.mark.timeout(60)


def buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons of a message, in order."""
    return [c for row in message.get("components", []) for c in row.get("components", [])]


def field(message: dict[str, Any], name: str) -> str:
    """The value of an embed field."""
    fields = message["embeds"][0].get("fields", [])
    return next(str(f["value"]) for f in fields if f["name"] == name)


async def test_run_allow_runs_the_tool_once_edits_the_card_and_posts_the_answer(
    harness: Harness,
) -> None:
    await harness.start_bot()
    run_id, started = await harness.start_run(ALICE, "bank", "pay invoice 7")
    assert not started.ephemeral
    assert f"<@{ALICE.id}> started **bank**" in started.text
    assert "> pay invoice 7" in started.text

    card = await harness.card_for(run_id)
    embed = card["embeds"][0]
    assert embed["title"] == "Approval needed: transfer"
    assert '"account": "ACME-1"' in embed["description"]
    assert "sk-live" not in json.dumps(card)  # the secret argument is masked
    assert field(card, "Requested by") == f"<@{ALICE.id}>"
    assert field(card, "Who may decide") == f"<@{ALICE.id}>"
    assert card["content"].startswith(f"<@{ALICE.id}>")
    assert card["allowed_mentions"] == {"parse": [], "users": [str(ALICE.id)]}
    labels = [b["label"] for b in buttons(card)]
    # transfer allows the default standing grant: for the rest of the run.
    assert labels == [
        "Allow",
        "Deny",
        "Deny with reason",
        "Allow with changes",
        "Allow for the rest of this run",
    ]
    [ticket] = (await harness.bots[-1].runtime.get(run_id)).pending
    clicks = [parse_button(b["custom_id"]) for b in buttons(card)]
    assert [c.action if c else None for c in clicks] == [
        Action.ALLOW,
        Action.DENY,
        Action.REASON,
        Action.EDIT,
        Action.GRANT_RUN,
    ]
    assert {c.ticket_id for c in clicks if c} == {ticket.ticket_id}
    assert {c.correlation for c in clicks if c} == {ticket.ticket.correlation}

    answer = await harness.click(ALICE, card, "Allow")
    assert answer.ephemeral
    assert "Allow recorded" in answer.text

    result = await harness.finished(run_id)
    assert result.status is RunStatus.DONE
    assert harness.ledger == [("transfer", {"account": "ACME-1", "amount": 250.0})]
    edited = await harness.outcome(card)
    assert field(edited, "Outcome").startswith(f"✅ Allowed by <@{ALICE.id}> · <t:")
    assert all(b["disabled"] for b in buttons(edited))
    final = await harness.final_message(run_id)
    assert final["content"].startswith("✅ **bank** finished")
    assert "transferred" in final["embeds"][0]["description"]
    assert final["allowed_mentions"] == {"parse": []}


async def test_deny_with_reason_opens_a_form_and_the_model_sees_the_reason(
    harness: Harness,
) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    opened = await harness.click(ALICE, card, "Deny with reason")
    assert opened.modal is not None
    click = parse_modal(opened.modal["custom_id"])
    assert click is not None and click.action is Action.REASON
    answer = await harness.submit(ALICE, opened, {"reason": "over budget"})
    assert "Deny recorded" in answer.text

    result = await harness.finished(run_id)
    assert harness.ledger == []
    assert "Permission denied" in (result.text or "")
    assert "over budget" in (result.text or "")
    edited = await harness.outcome(card)
    outcome = field(edited, "Outcome")
    assert outcome.startswith(f"⛔ Denied by <@{ALICE.id}>")
    assert "Reason: over budget" in outcome


async def test_typed_input_is_asked_in_a_modal_built_from_the_schema(harness: Harness) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "release")
    assert card["embeds"][0]["title"] == "Input needed: rollback_plan"
    assert "How do we roll checkout back?" in card["embeds"][0]["description"]
    assert [b["label"] for b in buttons(card)] == ["Answer", "Deny"]

    opened = await harness.click(ALICE, card, "Answer")
    assert opened.modal is not None
    inputs = [c for row in opened.modal["components"] for c in row["components"]]
    assert [i["custom_id"] for i in inputs] == [
        "previous_version",
        "strategy",
        "max_minutes",
        "notify_team",
    ]
    assert inputs[1]["placeholder"] == "one of: redeploy_previous, disable_feature_flag"
    assert inputs[2]["value"] == "15"  # the schema's default, pre-filled

    # Text that cannot even be converted: the fields are named, nothing is stored.
    wrong = await harness.submit(
        ALICE, opened, {"previous_version": "2.4.0", "strategy": "yolo", "max_minutes": "soon"}
    )
    assert "nothing was recorded" in wrong.text
    assert "**Strategy**" in wrong.text and "**Max Minutes**" in wrong.text
    # Converted but outside the schema: the runtime's validation names the field.
    invalid = await harness.submit(
        ALICE,
        opened,
        {"previous_version": "2.4.0", "strategy": "redeploy_previous", "max_minutes": "999"},
    )
    assert "max_minutes" in invalid.text and "nothing was recorded" in invalid.text
    assert (await harness.bots[-1].runtime.get(run_id)).status is RunStatus.AWAITING

    good = await harness.submit(
        ALICE,
        opened,
        {
            "previous_version": "2.4.0",
            "strategy": "redeploy_previous",
            "max_minutes": "30",
            "notify_team": "yes",
        },
    )
    assert "Answer recorded" in good.text
    await harness.finished(run_id)
    assert harness.ledger == [
        (
            "rollback_plan",
            {
                "previous_version": "2.4.0",
                "strategy": "redeploy_previous",
                "max_minutes": 30,
                "notify_team": True,
            },
        )
    ]
    edited = await harness.outcome(card)
    assert field(edited, "Outcome").startswith(f"📝 Answered by <@{ALICE.id}>")


async def test_a_form_larger_than_a_modal_links_to_the_web_console(harness: Harness) -> None:
    await harness.start_bot()
    run_id, card = await harness.park(ALICE, "surveys")
    [link, deny] = buttons(card)
    assert link["style"] == 5
    assert link["url"] == f"https://signoff.example.com/runs/{run_id}"
    assert deny["label"] == "Deny"
    assert "more than a Discord form holds" in card["embeds"][0]["description"]


@pytest.mark.parametrize("how", ["result", "retry", "abort"])
async def test_an_uncertain_call_is_resolved_from_its_card(harness: Harness, how: str) -> None:
    bot = await harness.start_bot()

    def crash(point: str, info: dict[str, Any]) -> None:
        if point == "tool_returned":
            raise Crash(point)

    # Another process runs the `manual` tool and dies before its result is committed.
    dying = harness.runtime(checkpoint=crash, worker_id="dying")
    origin = {"platform": "discord", "channel_id": str(CHANNEL_ID)}
    with contextlib.suppress(Crash):
        await dying.start("pager", "page grace", requester=str(ALICE.id), origin=origin)
    [run] = await bot.runtime.list_runs(statuses=[RunStatus.RUNNING])
    assert harness.ledger == [("page", {"engineer": "grace"})]
    harness.clock.advance(120)  # its lease runs out; our worker recovers the run
    bot.worker.wake()

    card = await harness.card_for(run.run_id)
    assert card["embeds"][0]["title"] == "Did it happen? page"
    assert [b["label"] for b in buttons(card)] == ["Record result", "Retry", "Abort"]
    if how == "result":
        opened = await harness.click(ALICE, card, "Record result")
        answer = await harness.submit(ALICE, opened, {"result": '"paged by phone"'})
        assert "Result recorded" in answer.text
    else:
        answer = await harness.click(ALICE, card, how.capitalize())
        assert f"{how.capitalize()} recorded" in answer.text
    result = await harness.finished(run.run_id)
    assert result.status is RunStatus.DONE
    edited = await harness.outcome(card)
    if how == "result":
        assert "paged by phone" in (result.text or "")
        assert harness.ledger == [("page", {"engineer": "grace"})]  # not run again
        assert field(edited, "Outcome").startswith("📝 Result recorded by")
    elif how == "retry":
        assert harness.ledger == [("page", {"engineer": "grace"})] * 2
        assert field(edited, "Outcome").startswith("🔁 Retry accepted by")
    else:
        assert harness.ledger == [("page", {"engineer": "grace"})]
        assert "Aborted" in (result.text or "")
        assert field(edited, "Outcome").startswith("🛑 Aborted by")


async def test_slow_work_is_deferred_and_answered_by_a_follow_up(harness: Harness) -> None:
    await harness.start_bot(ack_budget=0)
    run_id, started = await harness.start_run(ALICE, "bank")
    assert started.callbacks[0]["type"] == 5  # deferred ("thinking")
    assert "started **bank**" in started.text
    card = await harness.card_for(run_id)
    answer = await harness.click(ALICE, card, "Allow")
    assert answer.callbacks[0]["type"] == 5
    assert answer.ephemeral
    assert "Allow recorded" in answer.text
    await harness.finished(run_id)
    assert len(harness.ledger) == 1


# -- slash commands ----------------------------------------------------------------------


async def test_pending_lists_what_the_caller_may_decide_with_links(harness: Harness) -> None:
    await harness.start_bot()
    bank_run, bank_card = await harness.park(ALICE, "bank")
    treasury_run, _ = await harness.park(ALICE, "treasury")  # four-eyes: not Alice's to decide

    record = await harness.fake.interact(harness.fake.slash(ALICE, "pending"))
    text = await harness.fake.answered(record)
    assert record.ephemeral
    assert bank_run in text and treasury_run not in text
    assert f"/channels/800000000000000001/{CHANNEL_ID}/{bank_card['id']})" in text

    carol = User(710000000000000003, "carol", roles=(810000000000000001,))
    record = await harness.fake.interact(harness.fake.slash(carol, "pending"))
    text = await harness.fake.answered(record)
    assert treasury_run in text and bank_run not in text


async def test_status_shows_a_run(harness: Harness) -> None:
    await harness.start_bot()
    run_id, _ = await harness.park(ALICE, "bank")
    record = await harness.fake.interact(harness.fake.slash(BOB, "status", run=run_id))
    await harness.fake.answered(record)
    [callback] = record.callbacks
    [embed] = callback["data"]["embeds"]
    assert embed["title"] == f"Run {run_id}"
    assert {"name": "Status", "value": "awaiting", "inline": True} in embed["fields"]
    assert record.ephemeral


async def test_cancel_is_for_the_requester_or_a_server_manager(harness: Harness) -> None:
    bot = await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    before = await harness.snapshot(run_id)
    refused = await harness.fake.interact(harness.fake.slash(BOB, "cancel", run=run_id))
    assert "Only" in await harness.fake.answered(refused)
    assert refused.ephemeral
    assert await harness.snapshot(run_id) == before

    manager = User(710000000000000009, "manager", permissions=MANAGE_GUILD)
    done = await harness.fake.interact(harness.fake.slash(manager, "cancel", run=run_id))
    assert "cancelled run" in await harness.fake.answered(done)
    assert not done.ephemeral
    assert (await bot.runtime.get(run_id)).status is RunStatus.CANCELLED
    edited = await harness.outcome(card)
    assert field(edited, "Outcome").startswith("✖️ Withdrawn")
    final = await harness.final_message(run_id)
    assert "was cancelled" in final["content"]
    assert harness.ledger == []


async def test_an_unknown_agent_starts_nothing(harness: Harness) -> None:
    bot = await harness.start_bot()
    record = await harness.fake.interact(harness.fake.slash(ALICE, "run", agent="nope", prompt="x"))
    text = await harness.fake.answered(record)
    assert "No agent named `nope`" in text and "`bank`" in text
    assert await bot.runtime.list_runs() == []


async def test_a_discord_thread_is_one_conversation(harness: Harness) -> None:
    bot = await harness.start_bot()
    first, _ = await harness.start_run(ALICE, "bank", channel_id=THREAD_ID)
    card = await harness.fake.wait_for(lambda: harness.fake.cards(THREAD_ID), what="a card")
    assert harness.fake.cards(CHANNEL_ID) == []
    await harness.click(ALICE, card[0], "Allow")
    await harness.finished(first)
    second, _ = await harness.start_run(ALICE, "bank", "and again", channel_id=THREAD_ID)
    runs = {r.run_id: r for r in await bot.runtime.list_runs()}
    assert runs[first].thread_id == runs[second].thread_id == f"discord:{THREAD_ID}"


async def test_runs_from_elsewhere_do_not_exist_for_discord_users(harness: Harness) -> None:
    # A run started from the console (or the API) is not this server's: its id tells a
    # Discord user nothing, and Manage Server does not make it theirs to cancel.
    bot = await harness.start_bot()
    started = await bot.runtime.start(
        "bank", "go", requester="U-console", origin={"platform": "console"}, wait=False
    )
    bot.worker.wake()
    await harness.wait(started.run_id, lambda r: r.status is RunStatus.AWAITING)
    before = await harness.snapshot(started.run_id)
    manager = User(710000000000000009, "manager", permissions=MANAGE_GUILD)
    for user, command in ((BOB, "status"), (manager, "status"), (manager, "cancel")):
        record = await harness.fake.interact(harness.fake.slash(user, command, run=started.run_id))
        assert f"No run `{started.run_id}`" in await harness.fake.answered(record), command
        assert record.ephemeral
    assert await harness.snapshot(started.run_id) == before
