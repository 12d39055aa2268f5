"""Restarts: buttons outlive the bot that posted them; a stored click outlives the bot."""

from __future__ import annotations

import pytest
from discord_harness import ALICE, Harness

from runtime import RunStatus

pytestmark = pytest.mark.timeout(60)


async def test_a_new_bot_handles_a_click_on_a_card_the_old_one_posted(harness: Harness) -> None:
    old = await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    await old.close()
    harness.bots.remove(old)
    assert harness.fake.connected == 0

    # A new process: its own store connection, runtime, worker and Discord client. It
    # has never seen the card; the button's custom_id is all it gets.
    new = await harness.start_bot(store=harness.fresh_store(), worker_id="new")
    assert new.handle.client is not old.handle.client
    answer = await harness.click(ALICE, card, "Allow")
    assert "Allow recorded" in answer.text
    await harness.finished(run_id)
    assert len(harness.ledger) == 1
    edited = await harness.outcome(card)
    assert edited["embeds"][0]["fields"][-1]["value"].startswith(f"✅ Allowed by <@{ALICE.id}>")
    await harness.final_message(run_id)


async def test_a_click_stored_by_a_bot_killed_before_applying_it_is_applied_once(
    harness: Harness,
) -> None:
    poster = await harness.start_bot()
    run_id, card = await harness.park(ALICE, "bank")
    await poster.close()
    harness.bots.remove(poster)

    # This bot stores clicks but never gets to apply them: it is "killed" right after
    # acknowledging.
    doomed = await harness.start_bot(store=harness.fresh_store(), worker_id="doomed", apply=False)
    answer = await harness.click(ALICE, card, "Allow")
    assert "Allow recorded" in answer.text
    await doomed.close()
    harness.bots.remove(doomed)
    async with harness.store.transaction() as tx:
        [stored] = await tx.pending_received(10)
    assert stored.source == "discord" and stored.delivery_id == answer.id
    assert (await doomed.runtime.get(run_id)).status is RunStatus.AWAITING
    assert harness.ledger == []

    # The next process, on a fresh connection to the same file, applies it exactly once.
    survivor = await harness.start_bot(store=harness.fresh_store(), worker_id="survivor")
    result = await harness.finished(run_id)
    assert result.status is RunStatus.DONE
    assert len(harness.ledger) == 1
    assert await survivor.runtime.apply_received() == []  # nothing left to apply
    events = [e["kind"] for e in await survivor.runtime.events(run_id)]
    assert events.count("ticket_decided") == 1
    edited = await harness.outcome(card)
    assert edited["embeds"][0]["fields"][-1]["value"].startswith(f"✅ Allowed by <@{ALICE.id}>")
