"""Uncertain calls, durability of received clicks, and delivery within Slack's limits."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from fake_slack import (
    FakeSlack,
    Message,
    click_payload,
    interaction_body,
    signed_headers,
    submission_payload,
)
from slackbed import Crash, SlackBed, build_agents, buttons, slack_config, text_of

from adapters.slack import (
    ChannelLimiter,
    SlackNotifier,
    add_slack_routes,
    blocks,
    build_client,
    build_slack_app,
)
from runtime import ManualClock, RunStatus, Runtime
from runtime.services.delivery import deliver_due
from runtime.store.sql import SQLStore


async def until(produce: Any) -> Any:
    for _ in range(500):
        value = produce()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


ORIGIN = {"platform": "slack", "channel": "C1", "thread_ts": "1700000000.000001", "user": "U1"}


async def _uncertain_card(slack: SlackBed) -> tuple[str, Message]:
    """A `pager` run whose process died after `page` returned, recovered as uncertain."""

    def crash(point: str, info: dict[str, Any]) -> None:
        if point == "tool_returned":
            raise Crash(point)

    dying = Runtime(slack.store, slack.agents, clock=slack.clock, checkpoint=crash, worker_id="x")
    with contextlib.suppress(Crash):
        await dying.start(
            "pager",
            "page grace",
            requester="U1",
            origin=ORIGIN,
            thread_id="slack:C1:1700000000.000001",
            wait=True,
        )
    assert slack.ledger == [("page", {"engineer": "grace"})]  # it ran; its result is lost
    [run] = await slack.runtime.list_runs(statuses=[RunStatus.RUNNING])
    slack.clock.advance(120)  # the dead worker's lease runs out; our worker recovers it
    slack.worker.wake()
    await slack.wait_run(run.run_id, lambda r: any(p.status == "uncertain" for p in r.pending))
    return run.run_id, await slack.card("page")


async def test_uncertain_card_record_verified_result(slack: SlackBed) -> None:
    run_id, card = await _uncertain_card(slack)
    assert card.thread_ts == ORIGIN["thread_ts"]
    values = buttons(card)
    assert set(values) == {blocks.ACTION_RESOLVE, blocks.ACTION_RETRY, blocks.ACTION_ABORT}
    assert "grace" in text_of(card) and "Execution key" in text_of(card)

    await slack.click(blocks.ACTION_RESOLVE, values[blocks.ACTION_RESOLVE], card=card)
    [opened] = await slack.until(lambda: slack.fake.called("views.open"), "views.open")
    view = opened.args["view"]
    assert view["callback_id"] == "signoff.resolve"
    empty = await slack.submit(view, {"result": {"value": {"type": "plain_text_input"}}})
    assert empty.json()["response_action"] == "errors"
    reply = await slack.submit(
        view, {"result": {"value": {"type": "plain_text_input", "value": '"paged by phone"'}}}
    )
    assert reply.status == 200 and reply.text == ""

    done = await slack.finished(run_id)
    assert done.status is RunStatus.DONE and "paged by phone" in (done.text or "")
    assert slack.ledger == [("page", {"engineer": "grace"})]  # not run again
    await slack.updated(card)
    assert "Result recorded by <@U1>" in text_of(card) and buttons(card) == {}
    await slack.thread_message(ORIGIN["thread_ts"], "Finished.")


async def test_uncertain_card_retry_runs_it_again(slack: SlackBed) -> None:
    run_id, card = await _uncertain_card(slack)
    reply = await slack.click(blocks.ACTION_RETRY, buttons(card)[blocks.ACTION_RETRY], card=card)
    assert reply.status == 200
    await slack.finished(run_id)
    assert slack.ledger == [("page", {"engineer": "grace"})] * 2
    await slack.updated(card)
    assert "Retry accepted by <@U1>" in text_of(card)


async def test_a_click_stored_by_a_dying_process_is_applied_once_by_the_next(
    fake: FakeSlack, tmp_path: Path
) -> None:
    db = tmp_path / "signoff.db"
    clock = ManualClock()
    ledger: list[tuple[str, dict[str, Any]]] = []
    config = slack_config(fake)

    # Process A: parks a run, posts its card, receives the click, acks it, dies.
    store_a = SQLStore.sqlite(db)
    await store_a.migrate()
    runtime_a = Runtime(store_a, build_agents(ledger), clock=clock, worker_id="A")
    client_a = build_client(config)
    woken: list[int] = []
    bolt = build_slack_app(runtime_a, config, lambda: woken.append(1), client=client_a)
    parked = await runtime_a.start(
        "bank", "pay", requester="U1", origin=ORIGIN, thread_id="slack:C1:1", wait=True
    )
    notifier_a = SlackNotifier(client_a, limiter=ChannelLimiter(0.0))
    assert await deliver_due(store_a, clock, notifier_a) == 1
    [card] = fake.messages.values()
    app = web.Application()
    add_slack_routes(app, bolt, signing_secret=config.signing_secret)
    server = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await server.start_server()
    values = buttons(card)

    async def post(payload: dict[str, Any]) -> None:
        body = interaction_body(payload)
        response = await server.post("/slack/events", data=body, headers=signed_headers(body))
        assert response.status == 200
        clock.advance(1)  # received in this order

    # Allow, then (before anything is applied) Deny with a reason, from the modal: both
    # pass the check and are stored.
    message = {"ts": card.ts, "thread_ts": card.thread_ts, "text": card.text}
    await post(click_payload(blocks.ACTION_ALLOW, values[blocks.ACTION_ALLOW], message=message))
    await post(
        click_payload(blocks.ACTION_DENY_REASON, values[blocks.ACTION_DENY_REASON], message=message)
    )
    [opened] = await until(lambda: fake.called("views.open"))
    reason = {"reason": {"value": {"type": "plain_text_input", "value": "changed my mind"}}}
    await post(submission_payload(opened.args["view"], reason))
    assert woken == [1, 1] and ledger == []
    await server.close()
    await store_a.close()  # process A is gone; it never applied the click

    # Process B on the same database: applies it exactly once, finishes the run.
    store_b = SQLStore.sqlite(db)
    runtime_b = Runtime(store_b, build_agents(ledger), clock=clock, worker_id="B")
    outcomes = await runtime_b.apply_received()
    assert [o.applied for o in outcomes] == [True, False]  # the second changes nothing
    assert outcomes[0].command.actor["id"] == "U1"
    assert outcomes[0].command.answer == {"kind": "allow"}
    assert outcomes[1].command.answer == {"kind": "deny", "reason": "changed my mind"}
    assert outcomes[1].command.state == "refused"
    assert await runtime_b.apply_received() == []
    assert await runtime_b.work_once() == 1
    done = await runtime_b.get(parked.run_id)
    assert done.status is RunStatus.DONE
    assert ledger == [("transfer", {"account": "ACME-1", "amount": 250.0})]
    notifier_b = SlackNotifier(build_client(config), limiter=ChannelLimiter(0.0))
    # The card update, the answer, and word to the clicker whose deny was not applied.
    assert await deliver_due(store_b, clock, notifier_b) == 3
    assert card.updates == 1 and "Approved by <@U1>" in text_of(card)
    [told] = fake.called("chat.postEphemeral")
    assert told.args["user"] == "U1" and told.args["channel"] == "C1"
    assert told.args["thread_ts"] == ORIGIN["thread_ts"]  # where the card is
    assert "could not be applied" in told.args["text"]
    assert "Already decided by <@U1>" in told.args["text"]
    await store_b.close()


async def test_a_card_whose_post_failed_is_posted_after_slack_recovers(slack: SlackBed) -> None:
    slack.fake.fail("chat.postMessage", status=500)
    slack.fake.fail("chat.postMessage", status=429, retry_after=30)
    started = await slack.runtime.start(
        "bank", "pay", requester="U1", origin=ORIGIN, thread_id="slack:C1:2", wait=False
    )
    slack.worker.wake()

    async def item_after(attempts: int) -> Any:
        async with slack.store.transaction() as tx:
            items = await tx.outbox_for_run(started.run_id)
        return items[0] if items and items[0].attempts >= attempts else None

    first = await slack.until(lambda: item_after(1), "the first attempt")
    assert first.state == "pending" and "500" in (first.last_error or "")
    slack.clock.advance(5)  # the backoff
    second = await slack.until(lambda: item_after(2), "the second attempt")
    assert "rate limited" in (second.last_error or "")
    assert second.next_attempt_at - slack.clock.now() >= timedelta(seconds=30)  # Retry-After
    assert slack.fake.messages == {}
    slack.clock.advance(30)
    card = await slack.card("transfer")
    assert card.thread_ts == ORIGIN["thread_ts"] and buttons(card)
    delivered = await slack.until(lambda: item_after(3), "the third attempt")
    assert delivered.state == "delivered"
    assert delivered.platform_ref == {"channel": "C1", "ts": card.ts}

    await slack.click(blocks.ACTION_ALLOW, buttons(card)[blocks.ACTION_ALLOW], card=card)
    await slack.finished(started.run_id)
    await slack.updated(card)


async def test_a_permanent_error_is_given_up_loudly(slack: SlackBed) -> None:
    slack.fake.fail("chat.postMessage", error="channel_not_found")
    origin = {**ORIGIN, "channel": "C404"}
    started = await slack.runtime.start(
        "bank", "pay", requester="U1", origin=origin, thread_id="slack:C404:1", wait=False
    )
    slack.worker.wake()

    async def failed_event() -> Any:
        events = await slack.runtime.events(started.run_id)
        return next((e for e in events if e["kind"] == "notification_failed"), None)

    event = await slack.until(failed_event, "notification_failed")
    assert "channel_not_found" in event["data"]["error"] and event["data"]["attempts"] == 1
    async with slack.store.transaction() as tx:
        [item] = await tx.outbox_for_run(started.run_id)
    assert item.state == "failed"


async def test_a_deleted_card_gets_its_outcome_as_a_new_message(slack: SlackBed) -> None:
    started = await slack.runtime.start(
        "bank", "pay", requester="U1", origin=ORIGIN, thread_id="slack:C1:3", wait=False
    )
    slack.worker.wake()
    card = await slack.card("transfer")
    slack.fake.fail("chat.update", error="message_not_found")
    await slack.click(blocks.ACTION_DENY, buttons(card)[blocks.ACTION_DENY], card=card)
    await slack.finished(started.run_id)
    outcome = await slack.thread_message(ORIGIN["thread_ts"], "Denied by <@U1>")
    assert outcome.ts != card.ts and card.updates == 0


async def test_channel_limiter_spaces_messages_per_channel() -> None:
    now = [100.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    limiter = ChannelLimiter(1.0, monotonic=lambda: now[0], sleep=sleep)
    for _ in range(3):
        await limiter.wait("C1")
    await limiter.wait("C2")  # another channel does not wait
    assert slept == [1.0, 2.0]
    now[0] = 110.0
    limiter.hold("C1", 30.0)  # Slack said 429, Retry-After: 30
    await limiter.wait("C1")
    assert slept[-1] == 30.0
