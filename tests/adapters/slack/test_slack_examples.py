"""The bundled examples decided from Slack by the right people: ``deploys``' approvers are
``group:release-managers``, mapped to a Slack user group (``SIGNOFF_SLACK_APPROVER_GROUPS``),
so a release manager decides it; the requester (four-eyes) and outsiders are refused."""

from __future__ import annotations

from typing import Any

import pytest
from fake_slack import selected, text_input
from slackbed import SlackBed, buttons, text_of

from adapters.slack import blocks
from examples import demo_agents
from runtime import Agent, RunStatus

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def slack_agents() -> list[Agent]:
    return demo_agents()


@pytest.fixture
def slack_options() -> dict[str, Any]:
    return {"approver_groups": {"release-managers": ("S0614TZR7",)}}


async def test_deploys_is_approved_by_a_release_manager_in_slack(slack: SlackBed) -> None:
    slack.fake.usergroups["S0614TZR7"] = ["U2"]
    await slack.command("deploys deploy checkout 2.4.1", user="U1")
    plan_card = await slack.card("rollback_plan")
    run = await slack.commanded_run()

    # The requester answers the rollback plan in the modal.
    values = buttons(plan_card)
    await slack.click(blocks.ACTION_ANSWER, values[blocks.ACTION_ANSWER], card=plan_card)
    [opened] = await slack.until(lambda: slack.fake.called("views.open"), "views.open")
    view = opened.args["view"]
    ids = {b["label"]["text"]: b["block_id"] for b in view["blocks"] if b["type"] == "input"}
    reply = await slack.submit(
        view,
        {
            ids["Previous Version"]: text_input("2.4.0"),
            ids["Strategy"]: selected('"redeploy_previous"'),
        },
    )
    assert reply.status == 200
    card = await slack.card("deploy")
    # The card names the Slack group behind release-managers, and the four-eyes rule.
    assert "<!subteam^S0614TZR7> (not the requester)" in text_of(card)
    value = buttons(card)[blocks.ACTION_ALLOW]
    before = await slack.snapshot(run.run_id)

    await slack.click(blocks.ACTION_ALLOW, value, user="U1", card=card)  # four-eyes
    await slack.click(blocks.ACTION_ALLOW, value, user="U9", card=card)  # not a member
    [own] = await slack.ephemeral("U1")
    [outsider] = await slack.ephemeral("U9")
    for told in (own, outsider):
        assert "may not decide" in told["text"]
        assert "<!subteam^S0614TZR7> (not the requester)" in told["text"]
    await slack.settled()
    assert await slack.snapshot(run.run_id) == before

    await slack.click(blocks.ACTION_ALLOW, value, user="U2", card=card)
    done = await slack.finished(run.run_id)
    assert done.status is RunStatus.DONE
    assert "approved by U2" in (done.text or "")
    await slack.updated(card)
    assert "Approved by <@U2>" in text_of(card)
