"""Slack over three replicas: a click acked by a replica that dies, and every message once."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from cluster import Cluster, eventually
from fake_slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    Message,
    click_payload,
    command_body,
    interaction_body,
    signed_headers,
)
from slackbed import buttons
from testkit import Served


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    slack = FakeSlack()
    await slack.start()
    try:
        yield slack
    finally:
        await slack.stop()


def with_slack(cluster: Cluster, fake: FakeSlack) -> None:
    cluster.settings.update(
        {
            "SIGNOFF_SLACK_MODE": "http",
            "SIGNOFF_SLACK_BOT_TOKEN": BOT_TOKEN,
            "SIGNOFF_SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SIGNOFF_SLACK_API_BASE_URL": f"{fake.url}/api/",
        }
    )


async def post(served: Served, body: str) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{served.url}/slack/events", data=body, headers=signed_headers(body)) as answer,
    ):
        await answer.read()
        return answer.status


def allow_click(card: Message, user: str = "U1") -> str:
    action_id = next(k for k in buttons(card) if "allow" in k)
    payload = click_payload(
        action_id,
        buttons(card)[action_id],
        user=user,
        channel=card.channel,
        message={"ts": card.ts},
    )
    return interaction_body(payload)


async def new_card(fake: FakeSlack, seen: set[str], channel: str = "C1") -> Message:
    async def check() -> list[Message]:
        return [
            m
            for m in fake.messages.values()
            if buttons(m) and m.ts not in seen and m.channel == channel
        ]

    [card] = await eventually(check, f"a new approval card in {channel}")
    seen.add(card.ts)
    return card


async def test_a_click_acked_by_a_killed_replica_is_applied_by_another(
    fake: FakeSlack, cluster: Cluster
) -> None:
    with_slack(cluster, fake)
    await cluster.start(3)
    seen: set[str] = set()
    for attempt in range(1, 6):
        acking = cluster.replicas[0]
        assert await post(acking, command_body("payments pay ACC-1", user="U1")) == 200
        card = await new_card(fake, seen)
        assert await post(acking, allow_click(card)) == 200
        cluster.kill(acking)  # right after Slack's 200: the click is stored, maybe not applied

        async def applied(attempt: int = attempt) -> Any:
            rows = await cluster.query(
                "SELECT state, lease_owner FROM received_commands ORDER BY received_at"
            )
            assert len(rows) == attempt  # stored before Slack got its answer
            return rows[-1] if rows[-1]["state"] == "applied" else None

        last = await eventually(applied, "the click applied")

        async def finished(attempt: int = attempt) -> bool:
            done = await cluster.value("SELECT count(*) FROM runs WHERE status = 'done'")
            return bool(done == attempt)

        await eventually(finished, f"{attempt} runs done")
        assert len(cluster.ledger_entries()) == attempt  # each approved transfer ran once
        decided = await cluster.value("SELECT count(*) FROM events WHERE kind = 'ticket_decided'")
        assert decided == attempt
        if last["lease_owner"] != cluster.worker_id(acking):
            return  # the dead replica acked it; another one applied it
        await cluster.start(1)
    pytest.fail("the killed replica applied its click every time before dying")


async def test_every_notification_is_delivered_exactly_once_across_replicas(
    fake: FakeSlack, cluster: Cluster
) -> None:
    with_slack(cluster, fake)
    replicas = await cluster.start(3)
    runs = 6
    channels = [f"C{n}" for n in range(runs)]
    seen: set[str] = set()
    for n, channel in enumerate(channels):
        body = command_body("payments pay ACC-1", user="U1", channel=channel)
        assert await post(replicas[n % 3], body) == 200
    cards = [await new_card(fake, seen, channel) for channel in channels]
    for n, card in enumerate(cards):
        assert await post(replicas[(n + 1) % 3], allow_click(card)) == 200

    async def settled() -> bool:
        done = await cluster.value("SELECT count(*) FROM runs WHERE status = 'done'")
        pending = await cluster.value("SELECT count(*) FROM outbox WHERE state <> 'delivered'")
        return bool(done == runs and pending == 0)

    await eventually(settled, "every run done and every notification delivered", seconds=60)
    delivered = await cluster.query("SELECT kind, lease_owner FROM outbox ORDER BY created_at")
    kinds = Counter(row["kind"] for row in delivered)
    assert kinds["approval_requested"] == runs
    assert kinds["decided"] == runs
    assert kinds["run_finished"] == runs
    # What the fake Slack saw: each card posted once, updated once, each answer once.
    posted_cards = Counter(m.channel for m in fake.messages.values() if m.ts in seen)
    assert posted_cards == dict.fromkeys(channels, 1)
    card_posts = [c for c in fake.called("chat.postMessage") if "signoff.allow" in str(c.args)]
    assert len(card_posts) == runs
    updates = Counter(str(c.args["ts"]) for c in fake.called("chat.update"))
    assert updates == {card.ts: 1 for card in cards}
    answers = Counter(
        str(c.args["channel"])
        for c in fake.called("chat.postMessage")
        if "Transfer complete." in str(c.args)
    )
    assert answers == dict.fromkeys(channels, 1)
    assert len(cluster.ledger_entries()) == runs
