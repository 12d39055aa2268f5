"""Standing grants from Discord cards, through discord.py against the fake Discord: the
buttons a tool allows, a run grant, a thread grant with hours from a modal, refusals."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from discord_harness import ALICE, BOB, DAVE, Harness
from testkit import echo_model

from adapters.discord import Action, parse_button, parse_modal
from runtime import (
    Agent,
    ModelRequest,
    RunStatus,
    ScriptedModel,
    final_reply,
    tool,
    tool_call_reply,
)

pytestmark = pytest.mark.timeout(60)

RUN = "Allow for the rest of this run"
THREAD = "Allow in this thread…"


def shop_agent(ledger: list[tuple[str, dict[str, Any]]]) -> Agent:
    """``shop``: three refunds, one a turn, each asking; grants for the run or thread."""
    orders = ["A1", "A2", "A3"]

    def reply(request: ModelRequest) -> dict[str, Any]:
        start = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
        asked = sum(1 for m in request.messages[start:] if m.get("role") == "assistant")
        if asked < len(orders):
            return tool_call_reply(("refund", {"order": orders[asked], "amount": 40.0}))
        return final_reply("Refunded three orders.")

    @tool(permission="ask", grants=["run", "thread"])
    async def refund(order: str, amount: float) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order}))
        return f"refunded {order}"

    return Agent("shop", "Refund.", ScriptedModel(reply), [refund])


def pair_agent(ledger: list[tuple[str, dict[str, Any]]]) -> Agent:
    """``pair``: two refunds in one model turn, two cards."""

    @tool(permission="ask", name="pair_refund")
    async def refund(order: str) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order}))
        return f"refunded {order}"

    calls = (("pair_refund", {"order": "B1"}), ("pair_refund", {"order": "B2"}))
    return Agent("pair", "Refund.", echo_model(*calls), [refund])


@pytest.fixture
def shop(harness: Harness) -> Harness:
    harness.agents.extend([shop_agent(harness.ledger), pair_agent(harness.ledger)])
    return harness


def labels(message: dict[str, Any]) -> list[str]:
    return [c["label"] for row in message.get("components", []) for c in row["components"]]


def outcome_text(message: dict[str, Any]) -> str:
    fields = message["embeds"][0].get("fields", [])
    return next(str(f["value"]) for f in fields if f["name"] == "Outcome")


def refunds(harness: Harness) -> list[str]:
    return [args["order"] for name, args in harness.ledger if name == "refund"]


async def test_cards_offer_the_grants_their_tool_allows(shop: Harness) -> None:
    await shop.start_bot()
    _, card = await shop.park(ALICE, "shop")
    edit = "Allow with changes"  # every tool here lets its arguments change
    assert labels(card) == ["Allow", "Deny", "Deny with reason", edit, RUN, THREAD]
    assert [len(row["components"]) for row in card["components"]] == [4, 2]  # a row of their own
    _, card = await shop.park(ALICE, "bank")  # the default: for the rest of the run only
    assert labels(card) == ["Allow", "Deny", "Deny with reason", edit, RUN]
    _, card = await shop.park(ALICE, "treasury")  # four-eyes: every call on its own
    assert labels(card) == ["Allow", "Deny", "Deny with reason", edit]


async def test_allow_for_the_rest_of_the_run_lets_the_rest_of_the_run_go(shop: Harness) -> None:
    await shop.start_bot()
    run_id, card = await shop.park(ALICE, "shop")
    answer = await shop.click(ALICE, card, RUN)
    assert answer.ephemeral and "Allow and standing grant recorded" in answer.text

    result = await shop.finished(run_id)
    assert result.status is RunStatus.DONE
    assert refunds(shop) == ["A1", "A2", "A3"]
    runtime = shop.bots[-1].runtime
    [grant] = await runtime.grants(active=False)  # ended with its run
    assert (grant.scope, grant.granted_by, grant.platform) == ("run", str(ALICE.id), "discord")
    edited = await shop.outcome(card)
    shown = outcome_text(edited)
    assert shown.startswith(f"✅ Allowed by <@{ALICE.id}>")
    assert f"And for the rest of this run (grant `{grant.grant_id}`)" in shown
    assert len([m for m in shop.fake.cards() if f"run {run_id} " in str(m["embeds"])]) == 1
    applied = [e for e in await runtime.events(run_id) if e["kind"] == "grant_applied"]
    assert [e["data"]["grant_id"] for e in applied] == [grant.grant_id] * 2


async def test_allow_in_this_thread_asks_for_hours_then_covers_the_threads_runs(
    shop: Harness,
) -> None:
    await shop.start_bot()
    run_id, card = await shop.park(ALICE, "shop")
    opened = await shop.click(ALICE, card, THREAD)
    assert opened.modal is not None
    click = parse_modal(opened.modal["custom_id"])
    assert click is not None and click.action is Action.GRANT_THREAD
    before = await shop.snapshot(run_id)
    for typed in ("soon", "0", "721"):
        wrong = await shop.submit(ALICE, opened, {"hours": typed})
        assert wrong.ephemeral and "nothing was recorded" in wrong.text
    await shop.settled()
    assert await shop.snapshot(run_id) == before

    good = await shop.submit(ALICE, opened, {"hours": "2"})
    assert "Allow and standing grant recorded" in good.text
    await shop.finished(run_id)
    assert refunds(shop) == ["A1", "A2", "A3"]
    runtime = shop.bots[-1].runtime
    [grant] = await runtime.grants()
    run = await runtime.get(run_id)
    assert grant.scope == "thread" and grant.thread_id == run.thread_id
    assert grant.expires_at == shop.clock.now() + timedelta(hours=2)
    assert "And in this thread (grant" in outcome_text(await shop.outcome(card))

    # The same person's next request in the same thread runs without a card.
    later = await runtime.start(
        "shop", "three more", requester=str(ALICE.id), thread_id=run.thread_id, wait=True
    )
    assert later.status is RunStatus.DONE
    assert len(refunds(shop)) == 6


async def test_a_forged_grant_click_on_a_four_eyes_card_is_refused(shop: Harness) -> None:
    await shop.start_bot()
    run_id, card = await shop.park(ALICE, "treasury")
    allow = parse_button(card["components"][0]["components"][0]["custom_id"])
    assert allow is not None
    before = await shop.snapshot(run_id)
    forged = f"so:{Action.GRANT_RUN.value}:{allow.ticket_id}:{allow.correlation}"
    refused = await shop.click(DAVE, card, "Allow", custom_id=forged)  # Dave may decide it
    assert refused.ephemeral
    assert "four-eyes" in refused.text and "Nothing was changed" in refused.text
    await shop.settled()
    assert await shop.snapshot(run_id) == before
    assert await shop.bots[-1].runtime.grants(active=False) == []


async def test_a_forged_thread_grant_on_a_run_only_tool_is_refused(shop: Harness) -> None:
    await shop.start_bot()
    run_id, card = await shop.park(ALICE, "bank")
    allow = parse_button(card["components"][0]["components"][0]["custom_id"])
    assert allow is not None
    forged = f"so:{Action.GRANT_THREAD.value}:{allow.ticket_id}:{allow.correlation}"
    opened = await shop.click(ALICE, card, "Allow", custom_id=forged)
    before = await shop.snapshot(run_id)
    refused = await shop.submit(ALICE, opened, {"hours": "4"})
    assert "cannot be allowed for this thread" in refused.text
    assert "Nothing was changed" in refused.text
    await shop.settled()
    assert await shop.snapshot(run_id) == before
    assert await shop.bots[-1].runtime.grants(active=False) == []


async def test_a_stranger_clicking_a_grant_button_is_refused_and_grants_nothing(
    shop: Harness,
) -> None:
    await shop.start_bot()
    run_id, card = await shop.park(ALICE, "shop")
    before = await shop.snapshot(run_id)
    refused = await shop.click(BOB, card, RUN)
    assert refused.ephemeral and "may not decide" in refused.text
    opened = await shop.click(BOB, card, THREAD)  # not even the hours form opens
    assert opened.modal is None and "may not decide" in opened.text
    await shop.settled()
    assert await shop.snapshot(run_id) == before
    assert await shop.bots[-1].runtime.grants(active=False) == []


async def test_a_run_grant_allows_the_other_open_call_of_the_turn_and_its_card_says_so(
    shop: Harness,
) -> None:
    await shop.start_bot()
    run_id, _ = await shop.start_run(ALICE, "pair")
    await shop.wait(run_id, lambda r: len(r.pending) == 2)

    def both() -> list[dict[str, Any]] | None:
        # The call cards, not the "Allow all 2" message posted after them.
        found = [
            m
            for m in shop.fake.cards()
            if f"run {run_id} " in str(m["embeds"]) and "· batch " not in str(m["embeds"])
        ]
        return found if len(found) == 2 else None

    first, second = await shop.fake.wait_for(both, what="both cards")
    await shop.click(ALICE, first, RUN)

    await shop.finished(run_id)
    assert sorted(refunds(shop)) == ["B1", "B2"]
    [grant] = await shop.bots[-1].runtime.grants(active=False)
    edited = await shop.outcome(second)
    assert f"With standing grant `{grant.grant_id}`" in outcome_text(edited)
    assert all(b["disabled"] for row in edited["components"] for b in row["components"])
