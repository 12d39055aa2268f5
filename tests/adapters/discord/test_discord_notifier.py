"""`DiscordNotifier` against the fake's REST API: cards, edits, and how failures are classed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from discord_harness import ALICE, Harness
from fake_discord import CHANNEL_ID, TOKEN
from testkit import deliver_item

from adapters.discord import DiscordConfig, DiscordNotifier
from runtime import RunStatus, Runtime
from runtime.services.delivery import DeliveryError, RoutingNotifier, deliver_due
from runtime.store.records import OutboxRecord

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def notifier(harness: Harness) -> AsyncIterator[DiscordNotifier]:
    config = DiscordConfig(bot_token=TOKEN, api_base_url=harness.fake.api_base_url)
    made = DiscordNotifier(config)
    try:
        yield made
    finally:
        await made.close()


async def parked(harness: Harness, channel: str = str(CHANNEL_ID)) -> tuple[Runtime, str]:
    runtime = harness.runtime()
    origin = {"platform": "discord", "channel_id": channel}
    result = await runtime.start("bank", "pay", requester=str(ALICE.id), origin=origin)
    assert result.status is RunStatus.AWAITING
    return runtime, result.run_id


async def items(harness: Harness, run_id: str, kind: str) -> list[OutboxRecord]:
    async with harness.store.transaction() as tx:
        return [i for i in await tx.outbox_for_run(run_id) if i.kind == kind]


async def delivered(harness: Harness, item: OutboxRecord, ref: dict[str, Any] | None) -> None:
    item.state, item.platform_ref = "delivered", ref
    async with harness.store.transaction() as tx:
        await tx.update_outbox(item)


async def test_a_card_is_posted_and_edited_in_place(
    harness: Harness, notifier: DiscordNotifier
) -> None:
    runtime, run_id = await parked(harness)
    [card] = await items(harness, run_id, "approval_requested")
    ref = await deliver_item(notifier, card, harness.store)
    assert ref is not None and ref["channel_id"] == str(CHANNEL_ID)
    message = harness.fake.messages[ref["message_id"]]
    assert message["embeds"][0]["title"] == "Approval needed: transfer"
    await delivered(harness, card, ref)

    await runtime.approve(card.ticket_id or "", actor=str(ALICE.id))
    [decided] = await items(harness, run_id, "decided")
    assert await deliver_item(notifier, decided, harness.store) == ref
    assert message["edits"] == 1
    assert message["embeds"][0]["fields"][-1]["name"] == "Outcome"


@pytest.mark.parametrize(
    ("status", "body", "headers", "permanent", "retry_after"),
    [
        (
            429,
            {"message": "You are being rate limited.", "retry_after": 2.5, "global": False},
            {},
            False,
            2.5,
        ),
        (429, {}, {"Retry-After": "7"}, False, 7.0),
        (403, {"message": "Missing Permissions", "code": 50013}, {}, True, None),
        (403, {"message": "Missing Access", "code": 50001}, {}, True, None),
        (404, {"message": "Unknown Channel", "code": 10003}, {}, True, None),
        (401, {"message": "401: Unauthorized", "code": 0}, {}, True, None),
        (400, {"message": "Invalid Form Body", "code": 50035}, {}, True, None),
        (500, {"message": "Internal Server Error"}, {}, False, None),
        (502, {}, {}, False, None),
    ],
)
async def test_failures_are_classed_for_the_outbox(
    harness: Harness,
    notifier: DiscordNotifier,
    status: int,
    body: dict[str, Any],
    headers: dict[str, str],
    permanent: bool,
    retry_after: float | None,
) -> None:
    _, run_id = await parked(harness)
    [card] = await items(harness, run_id, "approval_requested")
    harness.fake.fail_next("POST", r"/channels/\d+/messages", status, body, headers)
    with pytest.raises(DeliveryError) as raised:
        await deliver_item(notifier, card, harness.store)
    assert raised.value.permanent is permanent
    assert raised.value.retry_after == retry_after
    assert raised.value.rate_limited is (status == 429)
    assert str(status) in str(raised.value)


async def test_an_unreachable_discord_is_transient(harness: Harness) -> None:
    _, run_id = await parked(harness)
    [card] = await items(harness, run_id, "approval_requested")
    config = DiscordConfig(bot_token=TOKEN, api_base_url="http://127.0.0.1:9/api/v10")
    notifier = DiscordNotifier(config)
    try:
        with pytest.raises(DeliveryError) as raised:
            await deliver_item(notifier, card, harness.store)
    finally:
        await notifier.close()
    assert not raised.value.permanent
    assert "could not be reached" in str(raised.value)


async def test_an_unknown_channel_is_given_up_loudly(
    harness: Harness, notifier: DiscordNotifier
) -> None:
    # A webhook routed its approvals to a channel the bot cannot see.
    runtime, run_id = await parked(harness, channel="123")
    sent = await deliver_due(harness.store, harness.clock, RoutingNotifier({"discord": notifier}))
    assert sent == 0
    [card] = await items(harness, run_id, "approval_requested")
    assert card.state == "failed"
    [failed] = [e for e in await runtime.events(run_id) if e["kind"] == "notification_failed"]
    assert "10003" in failed["data"]["error"]


async def test_an_origin_without_a_channel_is_permanent(
    harness: Harness, notifier: DiscordNotifier
) -> None:
    _, run_id = await parked(harness)
    [card] = await items(harness, run_id, "approval_requested")
    card.destination = {"platform": "discord"}
    with pytest.raises(DeliveryError) as raised:
        await deliver_item(notifier, card, harness.store)
    assert raised.value.permanent


async def test_an_outcome_waits_for_its_card_and_replaces_a_lost_one(
    harness: Harness, notifier: DiscordNotifier
) -> None:
    runtime, run_id = await parked(harness)
    [card] = await items(harness, run_id, "approval_requested")
    await runtime.decline(card.ticket_id or "", actor=str(ALICE.id), reason="no")
    [decided] = await items(harness, run_id, "decided")

    # The card is not posted yet: the outcome is retried, not posted on its own.
    with pytest.raises(DeliveryError) as raised:
        await deliver_item(notifier, decided, harness.store)
    assert not raised.value.permanent and raised.value.retry_after == 1.0

    # The card was posted, then deleted in Discord: the outcome becomes a new message.
    ref = await deliver_item(notifier, card, harness.store)
    assert ref is not None
    await delivered(harness, card, ref)
    del harness.fake.messages[ref["message_id"]]
    new_ref = await deliver_item(notifier, decided, harness.store)
    assert new_ref is not None and new_ref["message_id"] != ref["message_id"]
    posted = harness.fake.messages[new_ref["message_id"]]
    assert posted["embeds"][0]["description"].startswith(f"⛔ Denied by <@{ALICE.id}>")

    # A card whose own delivery was given up: the outcome is posted as a new message.
    card.state = "failed"
    async with harness.store.transaction() as tx:
        await tx.update_outbox(card)
    assert (await deliver_item(notifier, decided, harness.store) or {}).get("message_id") not in (
        None,
        ref["message_id"],
    )
