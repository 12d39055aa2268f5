"""NaN and Infinity typed into a Slack modal are refused there; nothing is recorded.

``wires``' rule denies amounts over 1000; ``nan > 1000`` is false, so a NaN that got
through would pass the rule and the wire would go out with it.
"""

from __future__ import annotations

from typing import Any

import pytest
from fake_slack import text_input
from slackbed import SlackBed, buttons

from adapters.slack import blocks
from adapters.slack.modals import FIELD_BLOCK_PREFIX, VALUE_ACTION, read_input
from runtime import RunStatus


async def open_edit_modal(slack: SlackBed) -> dict[str, Any]:
    card = await slack.card("wire")
    reply = await slack.click(blocks.ACTION_EDIT, buttons(card)[blocks.ACTION_EDIT], card=card)
    assert reply.status == 200
    [opened] = await slack.until(lambda: slack.fake.called("views.open"), "the edit modal")
    view: dict[str, Any] = opened.args["view"]
    return view


@pytest.mark.parametrize("number", ["NaN", "nan", "inf", "-Infinity", "1e999"])
async def test_an_edit_modal_refuses_a_non_finite_amount(slack: SlackBed, number: str) -> None:
    await slack.command("wires send it")
    run = await slack.latest_run()
    view = await open_edit_modal(slack)
    [amount] = [b["block_id"] for b in view["blocks"] if b["type"] == "input"]
    before = await slack.snapshot(run.run_id)

    reply = await slack.submit(view, {amount: text_input(number)})
    body = reply.json()
    assert body["response_action"] == "errors", body
    assert "finite" in body["errors"][amount]
    assert await slack.snapshot(run.run_id) == before
    assert (await slack.runtime.get(run.run_id)).status is RunStatus.AWAITING

    reply = await slack.submit(view, {amount: text_input("50")})
    assert reply.status == 200 and reply.text == ""
    await slack.finished(run.run_id)
    assert slack.ledger == [("wire", {"amount": 50.0})]


def test_a_free_form_json_answer_must_hold_finite_numbers() -> None:
    block = f"{FIELD_BLOCK_PREFIX}json"
    state = {block: {VALUE_ACTION: {"type": "plain_text_input", "value": '{"limit": Infinity}'}}}
    data, errors = read_input(None, state)
    assert data == {} and "finite" in errors[block]
