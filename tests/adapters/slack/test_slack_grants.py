"""Standing grants from Slack cards, through real slack-bolt against the fake Slack: the
buttons a tool allows, a run grant, a thread grant with hours from a modal, refusals."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from fake_slack import click_payload, interaction_body, text_input
from slackbed import SlackBed, build_agents, buttons, text_of
from testkit import echo_model

from adapters.slack import blocks
from runtime import (
    Agent,
    ModelRequest,
    RunStatus,
    ScriptedModel,
    final_reply,
    tool,
    tool_call_reply,
)


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
def slack_agents(ledger: list[tuple[str, dict[str, Any]]]) -> list[Agent]:
    return [*build_agents(ledger), shop_agent(ledger), pair_agent(ledger)]


def refunds(slack: SlackBed) -> list[str]:
    return [args["order"] for name, args in slack.ledger if name == "refund"]


async def test_cards_offer_the_grants_their_tool_allows(slack: SlackBed) -> None:
    await slack.command("shop refund three orders")
    shop = buttons(await slack.card("refund"))
    assert blocks.ACTION_ALLOW_RUN in shop and blocks.ACTION_ALLOW_THREAD in shop
    await slack.command("bank pay it")
    bank = buttons(await slack.card("transfer"))
    assert blocks.ACTION_ALLOW_RUN in bank and blocks.ACTION_ALLOW_THREAD not in bank
    await slack.command("deployer ship it")
    deploy = buttons(await slack.card("deploy"))  # four-eyes: every call on its own
    assert set(deploy) == {
        blocks.ACTION_ALLOW,
        blocks.ACTION_DENY,
        blocks.ACTION_DENY_REASON,
        blocks.ACTION_EDIT,  # its arguments may still be changed before allowing
    }


async def test_allow_for_this_run_lets_the_rest_of_the_run_go(slack: SlackBed) -> None:
    await slack.command("shop refund three orders")
    card = await slack.card("refund")
    run = await slack.commanded_run()
    value = buttons(card)[blocks.ACTION_ALLOW_RUN]
    reply = await slack.click(blocks.ACTION_ALLOW_RUN, value, card=card)
    assert reply.status == 200

    done = await slack.finished(run.run_id)
    assert done.status is RunStatus.DONE
    assert refunds(slack) == ["A1", "A2", "A3"]
    [grant] = await slack.runtime.grants(active=False)  # ended with its run
    assert grant.scope == "run" and grant.granted_by == "U1" and grant.platform == "slack"
    await slack.updated(card)
    shown = text_of(card)
    assert buttons(card) == {}
    assert "Approved by <@U1>" in shown
    assert f"and for the rest of this run (grant `{grant.grant_id}`)" in shown
    # Only the first call asked: one card.
    cards = [m for m in slack.fake.messages.values() if "Approval needed" in m.text + str(m.blocks)]
    assert len(cards) == 1


async def test_allow_in_this_thread_asks_for_hours_then_covers_the_threads_runs(
    slack: SlackBed,
) -> None:
    await slack.command("shop refund three orders")
    card = await slack.card("refund")
    run = await slack.commanded_run()
    value = buttons(card)[blocks.ACTION_ALLOW_THREAD]
    await slack.click(blocks.ACTION_ALLOW_THREAD, value, card=card)
    [opened] = await slack.until(lambda: slack.fake.called("views.open"), "views.open")
    view = opened.args["view"]
    assert view["callback_id"] == "signoff.grant_thread"
    assert {k: json.loads(view["private_metadata"])[k] for k in ("t", "c")} == json.loads(value)
    before = await slack.snapshot(run.run_id)

    for typed, problem in (("soon", "Enter a number of hours"), ("0", "more than 0")):
        reply = await slack.submit(view, {"hours": text_input(typed)})
        body = reply.json()
        assert body["response_action"] == "errors"
        assert problem in body["errors"]["hours"]
    assert await slack.snapshot(run.run_id) == before  # nothing stored for bad hours

    reply = await slack.submit(view, {"hours": text_input("2")})
    assert reply.status == 200 and reply.text == ""
    await slack.finished(run.run_id)
    assert refunds(slack) == ["A1", "A2", "A3"]
    [grant] = await slack.runtime.grants()
    assert grant.scope == "thread" and grant.thread_id == run.thread_id
    assert grant.expires_at == slack.clock.now() + timedelta(hours=2)

    # A later request in the same thread by the same person runs without a card.
    later = await slack.runtime.start(
        "shop", "three more", requester="U1", thread_id=run.thread_id, wait=True
    )
    assert later.status is RunStatus.DONE
    assert len(refunds(slack)) == 6
    await slack.updated(card)
    assert "in this thread (grant" in text_of(card)


async def test_a_grant_button_on_a_four_eyes_card_is_refused_and_changes_nothing(
    slack: SlackBed,
) -> None:
    slack.fake.usergroups["S111"] = ["U1", "U2"]
    await slack.command("deployer ship it", user="U1")
    card = await slack.card("deploy")
    run = await slack.commanded_run()
    await slack.wait_run(run.run_id, lambda r: r.status is RunStatus.AWAITING)
    before = await slack.snapshot(run.run_id)
    value = buttons(card)[blocks.ACTION_ALLOW]  # a forged "allow for this run" click
    payload = click_payload(
        blocks.ACTION_ALLOW_RUN, value, user="U2", channel=card.channel, message=None
    )
    reply = await slack.post(interaction_body(payload))
    assert reply.status == 200
    [told] = await slack.ephemeral("U2")
    assert "four-eyes" in told["text"] and "Nothing was changed" in told["text"]
    await slack.settled()
    assert await slack.snapshot(run.run_id) == before
    assert await slack.runtime.grants(active=False) == []


async def test_a_thread_grant_on_a_run_only_tool_is_refused_in_the_modal(
    slack: SlackBed,
) -> None:
    await slack.command("bank pay it")
    card = await slack.card("transfer")
    run = await slack.commanded_run()
    value = buttons(card)[blocks.ACTION_ALLOW_RUN]
    await slack.click(blocks.ACTION_ALLOW_THREAD, value, card=card)  # no such button: forged
    [opened] = await slack.until(lambda: slack.fake.called("views.open"), "views.open")
    before = await slack.snapshot(run.run_id)
    reply = await slack.submit(opened.args["view"], {"hours": text_input("4")})
    body = reply.json()
    assert body["response_action"] == "update"
    shown = json.dumps(body["view"])
    assert "cannot be allowed for this thread" in shown and "Nothing was changed" in shown
    await slack.settled()
    assert await slack.snapshot(run.run_id) == before
    assert await slack.runtime.grants(active=False) == []


async def test_a_stranger_clicking_a_grant_button_is_refused_and_grants_nothing(
    slack: SlackBed,
) -> None:
    await slack.command("shop refund three orders")
    card = await slack.card("refund")
    run = await slack.commanded_run()
    await slack.wait_run(run.run_id, lambda r: r.status is RunStatus.AWAITING)
    before = await slack.snapshot(run.run_id)
    value = buttons(card)[blocks.ACTION_ALLOW_RUN]
    reply = await slack.click(blocks.ACTION_ALLOW_RUN, value, user="U9", card=card)
    assert reply.status == 200
    [told] = await slack.ephemeral("U9")
    assert "may not decide" in told["text"] and "<@U1>" in told["text"]
    await slack.settled()
    assert await slack.snapshot(run.run_id) == before
    assert await slack.runtime.grants(active=False) == []


async def test_a_run_grant_allows_the_other_open_call_of_the_turn_and_its_card_says_so(
    slack: SlackBed,
) -> None:
    await slack.command("pair refund both")
    run = await slack.commanded_run()
    await slack.wait_run(run.run_id, lambda r: len(r.pending) == 2)

    def cards() -> list[Any]:
        # The call cards, not the "Allow all 2" message posted after them.
        return [m for m in slack.fake.messages.values() if blocks.ACTION_ALLOW_RUN in buttons(m)]

    await slack.until(lambda: len(cards()) == 2, "both cards")
    first, second = cards()
    await slack.click(blocks.ACTION_ALLOW_RUN, buttons(first)[blocks.ACTION_ALLOW_RUN], card=first)

    await slack.finished(run.run_id)
    assert sorted(refunds(slack)) == ["B1", "B2"]
    [grant] = await slack.runtime.grants(active=False)
    await slack.updated(second)
    shown = text_of(second)
    assert buttons(second) == {}
    assert f"with standing grant `{grant.grant_id}`" in shown
