"""One person across edges in Slack: with ``link_by_email``, a Slack user who decides is
linked to ``oidc:<e-mail>`` by their profile's verified e-mail (``users.info`` on the
fake Slack Web API, through the real slack_sdk), once; a four-eyes requester who asked in
Slack is refused in the console and over the API as that identity; unlinked users are
refused when the settings say so."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_slack import FakeSlack
from slackbed import SlackBed, buttons

from adapters.slack import blocks
from runtime import Actor, Allow, RunStatus, Unauthorized


class ProfileSlack(FakeSlack):
    """The fake Slack with ``users.info``: profiles carry the e-mail Slack verified."""

    emails: dict[str, str | None]

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user"))
        if user not in self.emails:
            return {"ok": False, "error": "user_not_found"}
        profile: dict[str, Any] = {"real_name": user}
        if self.emails[user] is not None:
            profile["email"] = self.emails[user]
        return {"ok": True, "user": {"id": user, "profile": profile}}


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    slack = ProfileSlack()
    slack.emails = {"U1": "ana@corp", "U2": "bo@corp", "U3": None}
    await slack.start()
    try:
        yield slack
    finally:
        await slack.stop()


@pytest.fixture
def slack_options() -> dict[str, Any]:
    return {"link_by_email": True}


async def _parked(slack: SlackBed, agent: str, tool_name: str, user: str) -> tuple[str, Any]:
    await slack.command(f"{agent} go", user=user)
    card = await slack.card(tool_name)
    run = await slack.commanded_run()
    await slack.wait_run(run.run_id, lambda r: r.status is RunStatus.AWAITING)
    return run.run_id, card


async def test_a_slack_requester_linked_by_email_is_refused_everywhere(slack: SlackBed) -> None:
    slack.fake.usergroups["S111"] = ["U1", "U2"]
    # group:S111 with four-eyes: U1 (ana@corp) asked.
    run_id, card = await _parked(slack, "deployer", "deploy", user="U1")
    value = buttons(card)[blocks.ACTION_ALLOW]
    before = await slack.snapshot(run_id)
    await slack.click(blocks.ACTION_ALLOW, value, user="U1", card=card)
    [own] = await slack.ephemeral("U1")
    assert "(not the requester)" in own["text"]
    assert await slack.runtime.identities.person_of("U1") == "oidc:ana@corp"
    ticket = (await slack.runtime.get(run_id)).pending[0].ticket
    for platform in ("console", "api"):
        with pytest.raises(Unauthorized):
            await slack.runtime.decide(
                ticket.ticket_id,
                Allow(),
                Actor(id="oidc:ana@corp", platform=platform, groups=frozenset({"S111"})),
                correlation=ticket.correlation,
            )
    assert await slack.snapshot(run_id) == before
    # Looked up once per user: a second click of U1 does not ask Slack again.
    await slack.click(blocks.ACTION_ALLOW, value, user="U1", card=card)
    await slack.ephemeral("U1", count=2)
    assert [c.args["user"] for c in slack.fake.called("users.info")] == ["U1"]
    await slack.click(blocks.ACTION_ALLOW, value, user="U2", card=card)
    await slack.finished(run_id)
    assert slack.ledger == [("deploy", {"service": "api"})]
    assert await slack.runtime.identities.person_of("U2") == "oidc:bo@corp"


async def test_a_user_without_an_email_stays_unlinked_and_is_refused_under_refuse(
    slack: SlackBed,
) -> None:
    slack.runtime.identities.configure(unlinked="refuse")
    run_id, card = await _parked(slack, "cache", "purge", user="U1")  # approvers: anyone
    value = buttons(card)[blocks.ACTION_ALLOW]
    before = await slack.snapshot(run_id)
    await slack.click(blocks.ACTION_ALLOW, value, user="U3", card=card)
    [told] = await slack.ephemeral("U3")
    assert "may not" in told["text"].lower() or "not linked" in told["text"]
    assert await slack.runtime.identities.person_of("U3") is None
    assert await slack.snapshot(run_id) == before
    await slack.click(blocks.ACTION_ALLOW, value, user="U2", card=card)
    await slack.finished(run_id)
    assert slack.ledger == [("purge", {"cache": "cdn"})]
