"""The bundled examples decided from Discord by the right people: ``deploys``' approvers are
``group:release-managers``, mapped to a role (``SIGNOFF_DISCORD_APPROVER_ROLES``), so a
member with that role decides it; the requester (four-eyes) and others are refused."""

from __future__ import annotations

import pytest
from discord_harness import ALICE, BOB, CAROL, ROLE_APPROVER, Harness

from examples import demo_agents
from runtime import RunStatus

pytestmark = pytest.mark.timeout(60)


async def test_deploys_is_approved_by_a_release_manager_in_discord(harness: Harness) -> None:
    await harness.start_bot(
        agents=demo_agents(), approver_roles={"release-managers": [str(ROLE_APPROVER)]}
    )
    run_id, _ = await harness.start_run(ALICE, "deploys", "deploy checkout 2.4.1")
    plan_card = await harness.card_for(run_id)
    opened = await harness.click(ALICE, plan_card, "Answer")
    answered = await harness.submit(
        ALICE, opened, {"previous_version": "2.4.0", "strategy": "redeploy_previous"}
    )
    assert "Answer recorded" in answered.text
    card = await harness.fake.wait_for(
        lambda: next(
            (
                m
                for m in harness.fake.cards()
                if m["embeds"][0]["title"] == "Approval needed: deploy"
            ),
            None,
        ),
        what="the deploy card",
    )

    before = await harness.snapshot(run_id)
    who = f"<@&{ROLE_APPROVER}> (not the requester)"
    for user in (ALICE, BOB):  # the requester (four-eyes), and a member without the role
        refused = await harness.click(user, card, "Allow")
        assert refused.ephemeral
        assert refused.text == (
            f"⛔ You may not decide this request. Who may: {who}. Nothing was changed."
        )
    await harness.settled()
    assert await harness.snapshot(run_id) == before

    allowed = await harness.click(CAROL, card, "Allow")
    assert "Allow recorded" in allowed.text
    done = await harness.finished(run_id)
    assert done.status is RunStatus.DONE
    assert f"approved by {CAROL.id}" in (done.text or "")
