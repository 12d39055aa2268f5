"""Discord over three replicas: one gateway holder at a time, and a takeover when it dies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from cluster import Cluster, eventually
from discord_harness import ALICE, ROLES
from fake_discord import TOKEN, FakeDiscord

from bot.discord_wiring import GATEWAY_LEASE


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    server = FakeDiscord(roles=ROLES)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def holder(cluster: Cluster) -> Any:
    return await cluster.value("SELECT owner FROM leases WHERE name = $1", GATEWAY_LEASE)


async def test_the_gateway_holder_dies_another_replica_takes_over(
    fake: FakeDiscord, cluster: Cluster
) -> None:
    cluster.settings.update(
        {
            "SIGNOFF_DISCORD_BOT_TOKEN": TOKEN,
            "SIGNOFF_DISCORD_API_BASE_URL": fake.api_base_url,
            "SIGNOFF_DISCORD_GATEWAY_URL": fake.gateway_url,
            "SIGNOFF_DISCORD_GUILD_READY_TIMEOUT": "0.1",
            "SIGNOFF_DISCORD_GATEWAY_LEASE_SECONDS": "2",
        }
    )
    await cluster.start(3)
    # Every replica is serving; exactly one of them connected the gateway.
    assert fake.connected == 1
    assert len(fake.identifies) == 1
    owner = await holder(cluster)
    first = next(r for r in cluster.replicas if cluster.worker_id(r) == owner)

    started = await fake.interact(fake.slash(ALICE, "run", agent="payments", prompt="pay"))
    await fake.answered(started)
    [card] = await fake.wait_for(lambda: fake.cards(), what="the approval card")

    async def recorded() -> bool:
        state = await cluster.value("SELECT state FROM outbox WHERE kind = 'approval_requested'")
        return bool(state == "delivered")

    # Killed only once the card's delivery is recorded: a replica dying between posting a
    # message and recording it leaves the item to be posted again (at least once).
    await eventually(recorded, "the card's delivery recorded")
    cluster.kill(first)

    async def taken_over() -> Any:
        owner = await holder(cluster)
        ready = fake.connected == 1 and len(fake.identifies) == 2
        return owner if ready and owner != cluster.worker_id(first) else None

    second_owner = await eventually(taken_over, "another replica holding the gateway", 20)
    assert second_owner in {cluster.worker_id(r) for r in cluster.replicas}

    # The card posted before the holder died still works, through the new holder.
    click = await fake.interact(fake.click(ALICE, card, "Allow"))
    assert "recorded" in (await fake.answered(click)).lower()

    async def finished() -> Any:
        return await cluster.value("SELECT status FROM runs") == "done"

    await eventually(finished, "the run finished")
    assert len(cluster.ledger_entries()) == 1

    def edited() -> bool:
        rows = fake.messages[card["id"]].get("components") or []
        buttons = [c for row in rows for c in row.get("components", [])]
        return bool(buttons) and all(b.get("disabled") for b in buttons)

    await fake.wait_for(edited, what="the card edited with its buttons disabled")
    assert fake.connected == 1
