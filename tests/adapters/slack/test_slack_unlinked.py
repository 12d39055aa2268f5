"""A Slack user linked to nobody, while unlinked users are refused: their click is refused
with what to do (the console's Link page and ``/signoff link <code>``, or ask an operator)
and changes nothing; ``/signoff link <code>`` links them once, and their next click
decides. Through the real slack-bolt and slack_sdk against the fake Slack."""

from __future__ import annotations

from typing import Any

import pytest
from slackbed import SlackBed, buttons

from adapters.slack import blocks
from runtime import RunStatus

CONSOLE = "https://signoff.example.com"


@pytest.fixture
def slack_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    return {"console_url": getattr(request, "param", CONSOLE)}


async def _parked(slack: SlackBed) -> tuple[str, Any]:
    slack.runtime.identities.configure(unlinked="refuse")
    await slack.command("cache purge the CDN", user="U1")  # anyone may decide
    card = await slack.card("purge")
    run = await slack.commanded_run()
    await slack.wait_run(run.run_id, lambda r: r.status is RunStatus.AWAITING)
    return run.run_id, card


async def test_an_unlinked_user_is_told_how_to_link_and_then_decides(slack: SlackBed) -> None:
    run_id, card = await _parked(slack)
    value = buttons(card)[blocks.ACTION_ALLOW]
    before = await slack.snapshot(run_id)
    await slack.click(blocks.ACTION_ALLOW, value, user="U3", card=card)
    [told] = await slack.ephemeral("U3")
    assert told["text"] == (
        ":link: Your Slack account is not linked to a person yet, so it may not decide here. "
        f"To link it, sign in to the console at <{CONSOLE}/link|{CONSOLE}/link>, get a link "
        "code there and send `/signoff link <code>` here; or ask an operator to link it. "
        "Nothing changed."
    )
    assert await slack.snapshot(run_id) == before

    # A wrong code links nobody; the console's code links U3 once.
    wrong = await slack.command("link not-a-code", user="U3")
    assert "unknown, used or expired" in wrong.json()["text"]
    assert wrong.json()["response_type"] == "ephemeral"
    code = await slack.runtime.identities.new_link_code("oidc:carol@corp")
    linked = await slack.command(f"link {code}", user="U3")
    assert linked.json()["text"] == ":link: Your Slack account is now linked to `oidc:carol@corp`."
    assert await slack.runtime.identities.person_of("U3") == "oidc:carol@corp"
    again = await slack.command(f"link {code}", user="U2")
    assert "unknown, used or expired" in again.json()["text"]
    assert await slack.runtime.identities.person_of("U2") is None
    assert await slack.snapshot(run_id) == before

    await slack.click(blocks.ACTION_ALLOW, value, user="U3", card=card)
    await slack.finished(run_id)
    assert slack.ledger == [("purge", {"cache": "cdn"})]


@pytest.mark.parametrize("slack_options", [None], indirect=True)
async def test_without_the_console_address_they_ask_an_operator(slack: SlackBed) -> None:
    run_id, card = await _parked(slack)
    before = await slack.snapshot(run_id)
    await slack.click(blocks.ACTION_ALLOW, buttons(card)[blocks.ACTION_ALLOW], user="U3", card=card)
    [told] = await slack.ephemeral("U3")
    assert told["text"] == (
        ":link: Your Slack account is not linked to a person yet, so it may not decide here. "
        "Ask an operator to link it to you. Nothing changed."
    )
    assert await slack.snapshot(run_id) == before
