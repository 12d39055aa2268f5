"""Web and worker replicas on one PostgreSQL, killed mid-work: nothing is lost or repeated.

Web replicas (``SIGNOFF_ROLE=web``) serve the API and store starts and decisions; worker
replicas (``SIGNOFF_ROLE=worker``) drive the runs. A worker killed mid-tool is recovered
by another worker; a web replica killed after it answered leaves its work to the workers;
only workers hold the Discord gateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from cluster import Api, Cluster, eventually
from discord_harness import ALICE, ROLES
from fake_discord import TOKEN, FakeDiscord

from bot.discord_wiring import GATEWAY_LEASE


async def start_run(api: Api, url: str, agent: str, text: str) -> dict[str, Any]:
    status, body = await api.call("POST", f"{url}/api/runs", {"agent": agent, "input": text})
    assert status == 202, body
    return dict(body)


async def until_status(api: Api, url: str, run_id: str, wanted: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        status, body = await api.call("GET", f"{url}/api/runs/{run_id}")
        assert status == 200, body
        return dict(body) if body["status"] == wanted else None

    found: dict[str, Any] = await eventually(check, f"run {run_id} {wanted}")
    return found


async def claimants(cluster: Cluster, run_id: str) -> list[str]:
    rows = await cluster.query(
        "SELECT data FROM events WHERE run_id = $1 AND kind = 'run_claimed' ORDER BY seq", run_id
    )
    return [str(row["data"]) for row in rows]


async def test_a_worker_killed_mid_tool_is_recovered_by_another_worker(
    cluster: Cluster, api: Api
) -> None:
    workers = await cluster.start(2, "worker")
    webs = await cluster.start(2, "web")
    started = await start_run(api, webs[0].url, "inventory", "sync SKU-1")
    assert started["status"] == "queued"  # a web replica never drives a run
    run_id = started["run_id"]

    async def first_execution() -> list[dict[str, Any]]:
        return cluster.ledger_entries()

    [first] = await eventually(first_execution, "the tool running")
    runner = next(r for r in workers if r.process.pid == first["pid"])
    cluster.kill(runner)  # mid-tool: the dispatch is committed, no result recorded
    [other] = [w for w in workers if w is not runner]
    done = await until_status(api, webs[1].url, run_id, "done")
    assert done["text"] == "Stock synced."
    entries = cluster.ledger_entries()
    # Idempotent: run again once, by the other worker, with the same execution key.
    assert [e["pid"] for e in entries] == [runner.process.pid, other.process.pid], entries
    assert entries[1]["key"] == first["key"]
    claims = await claimants(cluster, run_id)
    assert len(claims) == 2
    assert cluster.worker_id(runner) in claims[0]
    assert cluster.worker_id(other) in claims[1]
    for web in webs:
        assert not any(cluster.worker_id(web) in claim for claim in claims)


async def test_a_web_replica_killed_after_it_answered_loses_nothing(
    cluster: Cluster, api: Api
) -> None:
    [worker] = await cluster.start(1, "worker")
    first, second, third = await cluster.start(3, "web")
    started = await start_run(api, first.url, "payments", "pay ACC-1")
    cluster.kill(first)  # the start was committed before it was answered
    run_id = started["run_id"]
    parked = await until_status(api, second.url, run_id, "awaiting")
    ticket_id = parked["pending"][0]["ticket_id"]
    status, body = await api.call(
        "POST", f"{second.url}/api/tickets/{ticket_id}/decision", {"decision": "allow"}
    )
    assert status == 200, body
    cluster.kill(second)  # so was the decision
    done = await until_status(api, third.url, run_id, "done")
    assert done["text"] == "Transfer complete."
    assert len(cluster.ledger_entries()) == 1
    claims = await claimants(cluster, run_id)
    assert len(claims) == 2
    assert all(cluster.worker_id(worker) in claim for claim in claims)
    decided = await cluster.value(
        "SELECT count(*) FROM events WHERE run_id = $1 AND kind = 'ticket_decided'", run_id
    )
    assert decided == 1


@pytest.fixture
async def discord() -> AsyncIterator[FakeDiscord]:
    server = FakeDiscord(roles=ROLES)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def test_only_workers_hold_the_discord_gateway(
    discord: FakeDiscord, cluster: Cluster
) -> None:
    cluster.settings.update(
        {
            "SIGNOFF_DISCORD_BOT_TOKEN": TOKEN,
            "SIGNOFF_DISCORD_API_BASE_URL": discord.api_base_url,
            "SIGNOFF_DISCORD_GATEWAY_URL": discord.gateway_url,
            "SIGNOFF_DISCORD_GUILD_READY_TIMEOUT": "0.1",
            "SIGNOFF_DISCORD_GATEWAY_LEASE_SECONDS": "2",
        }
    )
    webs = await cluster.start(2, "web")
    workers = await cluster.start(2, "worker")

    async def holder() -> Any:
        return await cluster.value("SELECT owner FROM leases WHERE name = $1", GATEWAY_LEASE)

    owner = await eventually(holder, "a gateway holder")
    assert owner in {cluster.worker_id(w) for w in workers}
    assert discord.connected == 1
    assert len(discord.identifies) == 1
    first = next(w for w in workers if cluster.worker_id(w) == owner)

    started = await discord.interact(discord.slash(ALICE, "run", agent="payments", prompt="pay"))
    await discord.answered(started)
    [card] = await discord.wait_for(lambda: discord.cards(), what="the approval card")

    async def recorded() -> bool:
        state = await cluster.value("SELECT state FROM outbox WHERE kind = 'approval_requested'")
        return bool(state == "delivered")

    await eventually(recorded, "the card's delivery recorded")
    cluster.kill(first)
    [second] = [w for w in workers if w is not first]

    async def taken_over() -> bool:
        ready = discord.connected == 1 and len(discord.identifies) == 2
        return ready and await holder() == cluster.worker_id(second)

    await eventually(taken_over, "the other worker holding the gateway", 20)
    click = await discord.interact(discord.click(ALICE, card, "Allow"))
    assert "recorded" in (await discord.answered(click)).lower()

    async def finished() -> bool:
        return bool(await cluster.value("SELECT status FROM runs") == "done")

    await eventually(finished, "the run finished")
    assert len(cluster.ledger_entries()) == 1
    # Two connections in all, one per worker holding the lease: web replicas never connect.
    assert len(discord.identifies) == 2
    assert await holder() == cluster.worker_id(second)
    assert all(web.process.poll() is None for web in webs)
