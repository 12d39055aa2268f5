"""A sub-agent's request in Slack: its card (naming the parent chain) is posted in the
parent's thread; Allow there finishes the child and then the parent, whose answer is the
only one posted."""

from __future__ import annotations

from typing import Any

import pytest
from slackbed import SlackBed, build_agents, buttons, text_of
from testkit import echo_model

from adapters.slack import blocks
from runtime import Agent, RunStatus, delegate_tool_name


@pytest.fixture
def slack_agents(ledger: list[tuple[str, dict[str, Any]]]) -> list[Agent]:
    billing = Agent(
        "billing", "Refund orders.", echo_model(("refund", {"order": "A1", "amount": 120.0}))
    )

    @billing.tool(permission="ask")
    async def refund(order: str, amount: float) -> str:
        ledger.append(("refund", {"order": order}))
        return f"refunded {amount} on {order}"

    arguments = {"task_key": "refund-A1", "task": "refund A1"}
    desk = Agent(
        "desk",
        "Triage.",
        echo_model((delegate_tool_name("billing"), arguments)),
        subagents=[billing],
    )
    return [*build_agents(ledger), desk]


async def test_the_childs_card_names_the_chain_and_allow_finishes_the_parent(
    slack: SlackBed,
) -> None:
    assert (await slack.command("desk refund order A1")).status == 200
    card = await slack.card("refund")
    parent = await slack.commanded_run()
    assert parent.agent == "desk"
    assert "sub-agent of `desk`" in text_of(card)
    root_ts = next(m.ts for m in slack.fake.messages.values() if m.text.startswith("<@U1> asked"))
    assert card.thread_ts == root_ts and card.channel == "C1"

    values = buttons(card)
    assert (
        await slack.click(blocks.ACTION_ALLOW, values[blocks.ACTION_ALLOW], card=card)
    ).status == 200
    done = await slack.finished(parent.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "Finished. Finished. refunded 120.0 on A1"
    assert slack.ledger == [("refund", {"order": "A1"})]
    await slack.updated(card)
    assert buttons(card) == {}
    answer = await slack.thread_message(root_ts, "Finished.")
    assert answer.text.count("Finished.") == 2  # the parent's answer, quoting the child's
    await slack.settled()
    finished = [m for m in slack.fake.messages.values() if "Finished." in m.text]
    assert finished == [answer]  # the child's own end is not announced
