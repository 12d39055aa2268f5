"""A sub-agent's request in Discord: its card names the parent chain; Allow there finishes
the child and then the parent, whose answer is the only one posted."""

from __future__ import annotations

from typing import Any

import pytest
from discord_harness import ALICE, Harness
from fake_discord import CHANNEL_ID
from testkit import echo_model

from runtime import Agent, RunStatus, delegate_tool_name

pytestmark = pytest.mark.timeout(60)


def _desk(ledger: list[tuple[str, dict[str, Any]]]) -> Agent:
    billing = Agent(
        "billing", "Refund orders.", echo_model(("refund", {"order": "A1", "amount": 120.0}))
    )

    @billing.tool(permission="ask")
    async def refund(order: str, amount: float) -> str:
        ledger.append(("refund", {"order": order}))
        return f"refunded {amount} on {order}"

    arguments = {"task_key": "refund-A1", "task": "refund A1"}
    return Agent(
        "desk",
        "Triage.",
        echo_model((delegate_tool_name("billing"), arguments)),
        subagents=[billing],
    )


async def test_the_childs_card_names_the_chain_and_allow_finishes_the_parent(
    harness: Harness,
) -> None:
    harness.agents.append(_desk(harness.ledger))
    await harness.start_bot()
    run_id, _ = await harness.start_run(ALICE, "desk", "refund order A1")
    parked = await harness.wait(run_id, lambda r: bool(r.pending))
    child_id = parked.pending[0].run_id
    card = await harness.card_for(child_id)
    fields = {f["name"]: f["value"] for f in card["embeds"][0]["fields"]}
    assert fields["Agent"] == "billing, sub-agent of desk"
    assert card["channel_id"] == str(CHANNEL_ID)

    await harness.click(ALICE, card, "Allow")
    done = await harness.finished(run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "Finished. Finished. refunded 120.0 on A1"
    assert harness.ledger == [("refund", {"order": "A1"})]
    await harness.final_message(run_id)
    await harness.settled()
    footers = [
        (m.get("embeds") or [{}])[0].get("footer", {}).get("text")
        for m in harness.fake.channel_messages(CHANNEL_ID)
    ]
    assert f"run {child_id}" not in footers  # the child's own end is not announced
