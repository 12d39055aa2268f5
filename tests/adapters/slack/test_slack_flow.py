"""End to end through real slack-bolt and slack_sdk against the fake Slack: runs started
from Slack, approval cards, decisions by button and modal, cards updated, answers posted."""

from __future__ import annotations

import asyncio
import json
import time

from fake_slack import BOT_USER, command_body, selected, signed_headers, text_input
from slackbed import SECRET_KEY, SlackBed, buttons, text_of

from adapters.slack import blocks
from runtime import RunStatus


async def test_slash_command_allow_runs_the_tool_once_and_updates_the_card(
    slack: SlackBed,
) -> None:
    reply = await slack.command("bank pay the ACME invoice")
    assert reply.status == 200
    [root] = slack.fake.posts("C1")
    assert root.args["text"] == "<@U1> asked *bank*: pay the ACME invoice"

    card = await slack.card("transfer")
    run = await slack.latest_run()
    assert run.requester == "U1" and run.agent == "bank"
    root_ts = next(m.ts for m in slack.fake.messages.values() if m.text.startswith("<@U1> asked"))
    assert card.thread_ts == root_ts and card.channel == "C1"
    assert run.thread_id == f"slack:C1:{root_ts}"

    shown = text_of(card)
    assert "transfer" in shown and "ACME-1" in shown and "250.0" in shown
    assert SECRET_KEY not in json.dumps(card.blocks)  # secret arguments are masked
    assert "<@U1>" in shown  # who asked / who may decide
    values = buttons(card)
    # transfer allows the default standing grant: for the rest of the run.
    assert set(values) == {
        blocks.ACTION_ALLOW,
        blocks.ACTION_DENY,
        blocks.ACTION_DENY_REASON,
        blocks.ACTION_ALLOW_RUN,
        blocks.ACTION_EDIT,  # "Allow with changes…": transfer lets its arguments change
    }
    [ticket] = (await slack.runtime.get(run.run_id)).pending
    for value in values.values():
        assert json.loads(value) == {"t": ticket.ticket_id, "c": ticket.ticket.correlation}
    [actions] = [b for b in card.blocks if b["type"] == "actions"]
    styles = {e["action_id"]: e.get("style") for e in actions["elements"]}
    assert styles[blocks.ACTION_ALLOW] == "primary" and styles[blocks.ACTION_DENY] == "danger"

    started = time.monotonic()
    reply = await slack.click(blocks.ACTION_ALLOW, values[blocks.ACTION_ALLOW], card=card)
    assert reply.status == 200 and time.monotonic() - started < 3.0

    done = await slack.finished(run.run_id)
    assert done.status is RunStatus.DONE
    assert slack.ledger == [("transfer", {"account": "ACME-1", "amount": 250.0})]
    await slack.updated(card)
    assert buttons(card) == {}  # buttons gone
    assert "Approved by <@U1> at <!date^" in text_of(card)
    answer = await slack.thread_message(root_ts, "Finished.")
    assert "transferred" in answer.text
    [event] = [e for e in await slack.runtime.events(run.run_id) if e["kind"] == "ticket_decided"]
    assert event["actor"] == "U1" and event["data"]["platform"] == "slack"
    assert slack.received() == [(slack.received()[0][0], "applied")]


async def test_deny_with_reason_opens_a_modal_and_the_model_sees_the_reason(
    slack: SlackBed,
) -> None:
    await slack.command("bank pay it")
    card = await slack.card("transfer")
    run = await slack.latest_run()
    values = buttons(card)

    reply = await slack.click(
        blocks.ACTION_DENY_REASON, values[blocks.ACTION_DENY_REASON], card=card
    )
    assert reply.status == 200
    [opened] = await slack.until(lambda: slack.fake.called("views.open"), "views.open")
    view = opened.args["view"]
    assert view["callback_id"] == "signoff.deny_reason"
    assert len(view["title"]["text"]) <= blocks.MAX_MODAL_TITLE
    metadata = json.loads(view["private_metadata"])
    # The ticket and its token, and where the card is (for word after the modal closes).
    assert {k: metadata[k] for k in ("t", "c")} == json.loads(values[blocks.ACTION_DENY_REASON])
    assert (metadata["ch"], metadata["th"]) == (card.channel, card.thread_ts)
    assert (await slack.runtime.get(run.run_id)).status is RunStatus.AWAITING  # nothing yet

    reply = await slack.submit(view, {"reason": text_input("over budget <this month>")})
    assert reply.status == 200 and reply.text == ""  # the modal closes

    done = await slack.finished(run.run_id)
    assert done.status is RunStatus.DONE
    assert "Permission denied: over budget <this month>" in (done.text or "")
    assert slack.ledger == []  # deny never runs the tool
    await slack.updated(card)
    shown = text_of(card)
    assert buttons(card) == {}
    assert "Denied by <@U1>" in shown and "over budget &lt;this month&gt;" in shown


async def test_input_modal_shows_field_errors_then_accepts_a_valid_answer(
    slack: SlackBed,
) -> None:
    await slack.command("release roll out checkout")
    card = await slack.card("rollback_plan")
    run = await slack.latest_run()
    values = buttons(card)
    assert set(values) == {blocks.ACTION_ANSWER, blocks.ACTION_DENY, blocks.ACTION_DENY_REASON}
    assert "How do we roll checkout back?" in text_of(card)

    await slack.click(blocks.ACTION_ANSWER, values[blocks.ACTION_ANSWER], card=card)
    [opened] = await slack.until(lambda: slack.fake.called("views.open"), "views.open")
    view = opened.args["view"]
    assert view["callback_id"] == "signoff.input"
    inputs = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
    labels = {b["label"]["text"]: b for b in inputs.values()}
    assert labels["Previous Version"]["element"]["type"] == "plain_text_input"
    assert labels["Previous Version"]["optional"] is False
    strategy = labels["Strategy"]["element"]
    assert strategy["type"] == "static_select"
    assert [o["value"] for o in strategy["options"]] == [
        '"redeploy_previous"',
        '"disable_feature_flag"',
    ]
    assert labels["Max Minutes"]["element"]["initial_value"] == "15"
    assert labels["Notify Team"]["element"]["type"] == "static_select"
    ids = {label: block["block_id"] for label, block in labels.items()}

    # Not a number: refused in the modal before the runtime sees it.
    reply = await slack.submit(
        view,
        {
            ids["Previous Version"]: text_input("2.4.0"),
            ids["Strategy"]: selected('"redeploy_previous"'),
            ids["Max Minutes"]: text_input("soon"),
        },
    )
    assert reply.json() == {
        "response_action": "errors",
        "errors": {ids["Max Minutes"]: "Enter a whole number."},
    }
    # A number the schema refuses: the runtime's field error, shown on that field.
    reply = await slack.submit(
        view,
        {
            ids["Previous Version"]: text_input("2.4.0"),
            ids["Strategy"]: selected('"redeploy_previous"'),
            ids["Max Minutes"]: text_input("999"),
        },
    )
    body = reply.json()
    assert body["response_action"] == "errors"
    assert list(body["errors"]) == [ids["Max Minutes"]]
    assert "240" in body["errors"][ids["Max Minutes"]]
    assert slack.received() == []  # nothing stored for invalid answers
    assert (await slack.runtime.get(run.run_id)).status is RunStatus.AWAITING

    reply = await slack.submit(
        view,
        {
            ids["Previous Version"]: text_input("2.4.0"),
            ids["Strategy"]: selected('"disable_feature_flag"'),
            ids["Max Minutes"]: text_input("30"),
            ids["Notify Team"]: selected("true"),
        },
    )
    assert reply.status == 200 and reply.text == ""
    done = await slack.finished(run.run_id)
    assert done.status is RunStatus.DONE
    assert slack.ledger == [
        (
            "rollback_plan",
            {
                "previous_version": "2.4.0",
                "strategy": "disable_feature_flag",
                "max_minutes": 30,
                "notify_team": True,
            },
        )
    ]
    await slack.updated(card)
    assert "Answered by <@U1>" in text_of(card) and buttons(card) == {}


async def test_app_mention_starts_a_run_in_its_thread_once_per_event(slack: SlackBed) -> None:
    event = {
        "type": "app_mention",
        "user": "U1",
        "text": f"<@{BOT_USER}> cache purge the CDN &amp; more",
        "ts": "1700000000.000100",
        "channel": "C9",
        "event_ts": "1700000000.000100",
    }
    assert (await slack.event(event, event_id="EvMention")).status == 200
    # Slack retries an event it thinks was not acknowledged: same event id, one run.
    assert (await slack.event(event, event_id="EvMention")).status == 200
    card = await slack.card("purge")
    assert card.channel == "C9" and card.thread_ts == "1700000000.000100"
    runs = await slack.runtime.list_runs()
    assert len(runs) == 1
    assert runs[0].agent == "cache" and runs[0].thread_id == "slack:C9:1700000000.000100"

    await slack.click(blocks.ACTION_ALLOW, buttons(card)[blocks.ACTION_ALLOW], card=card, user="U7")
    await slack.finished(runs[0].run_id)
    await slack.thread_message("1700000000.000100", "Finished.")
    run_input = (await slack.runtime.events(runs[0].run_id))[0]["data"]["input"]
    assert run_input == "purge the CDN & more"


async def test_direct_message_and_follow_up_in_the_thread(slack: SlackBed) -> None:
    dm = {
        "type": "message",
        "channel_type": "im",
        "user": "U1",
        "text": "cache purge images",
        "ts": "1700000001.000200",
        "channel": "D1",
        "event_ts": "1700000001.000200",
    }
    assert (await slack.event(dm, event_id="EvDm1")).status == 200
    card = await slack.card("purge")
    first = await slack.latest_run()
    await slack.click(blocks.ACTION_ALLOW, buttons(card)[blocks.ACTION_ALLOW], card=card)
    await slack.finished(first.run_id)

    # A reply in the thread, without an agent name: the same agent, the same conversation.
    follow_up = {**dm, "text": "and the fonts too", "ts": "1700000002.000300"}
    follow_up["thread_ts"] = "1700000001.000200"
    await slack.event(follow_up, event_id="EvDm2")

    async def second() -> object:
        runs = await slack.runtime.list_runs(limit=2)
        return runs[0] if len(runs) == 2 else None

    run = await slack.until(second, "the follow-up run")
    assert run.agent == "cache" and run.thread_id == first.thread_id  # type: ignore[attr-defined]

    # The bot's own messages and edits start nothing.
    await slack.event({**dm, "subtype": "message_changed", "ts": "3.1"}, event_id="EvEdit")
    await slack.event({**dm, "bot_id": "BBOT", "ts": "3.2"}, event_id="EvBot")
    assert len(await slack.runtime.list_runs()) == 2


async def test_slash_command_help_and_unknown_agent_answer_ephemerally(slack: SlackBed) -> None:
    reply = await slack.command("")
    assert reply.status == 200
    assert "Usage: `/signoff <agent> <request>`" in reply.json()["text"]
    reply = await slack.command("nosuchagent do things")
    assert "No agent named `nosuchagent`" in reply.json()["text"]
    reply = await slack.command("bank")
    assert "What should *bank* do?" in reply.json()["text"]
    assert await slack.runtime.list_runs() == []
    assert slack.fake.posts() == []


async def test_slash_command_in_a_channel_the_bot_cannot_post_to(slack: SlackBed) -> None:
    slack.fake.fail("chat.postMessage", error="not_in_channel")
    reply = await slack.command("bank pay", channel="C404")
    assert "I cannot post in this channel (not_in_channel)" in reply.json()["text"]
    assert await slack.runtime.list_runs() == []


async def test_a_retried_slash_command_posts_its_request_once(slack: SlackBed) -> None:
    body = command_body("bank pay it", trigger="7.T1.retried")
    first = await slack.post(body)
    assert first.status == 200
    await slack.card("transfer")
    # Slack did not see the answer in time and sends the very same command again.
    retried = signed_headers(body)
    retried["X-Slack-Retry-Num"] = "1"
    retried["X-Slack-Retry-Reason"] = "http_timeout"
    again = await slack.post(body, headers=retried)
    assert again.status == 200
    await slack.settled()
    asked = [m for m in slack.fake.messages.values() if " asked *bank*" in m.text]
    assert len(asked) == 1
    assert len(await slack.runtime.list_runs()) == 1


async def test_concurrent_deliveries_of_one_command_keep_one_request_message(
    slack: SlackBed,
) -> None:
    body = command_body("bank pay it", trigger="7.T1.raced")
    replies = await asyncio.gather(slack.post(body), slack.post(body), slack.post(body))
    assert {r.status for r in replies} == {200}
    await slack.card("transfer")
    await slack.settled()
    asked = [m for m in slack.fake.messages.values() if " asked *bank*" in m.text]
    [run] = await slack.runtime.list_runs()
    assert [f"slack:{m.channel}:{m.ts}" for m in asked] == [run.thread_id]
