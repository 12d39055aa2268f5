"""Three `signoff serve` replicas on one PostgreSQL: decisions, wake-ups and kills.

Each test runs twice: on replicas that do everything (``SIGNOFF_ROLE=all``), and on web
replicas (the API) with two worker replicas that drive the runs.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from cluster import ROOT, Api, Cluster, eventually


@pytest.fixture(autouse=True, params=["all", "web+worker"])
def layout(request: pytest.FixtureRequest, cluster: Cluster) -> None:
    if request.param == "web+worker":
        cluster.split = 2


async def start_run(api: Api, url: str, agent: str, text: str) -> str:
    status, body = await api.call("POST", f"{url}/api/runs", {"agent": agent, "input": text})
    assert status == 202, body
    return str(body["run_id"])


async def run_status(api: Api, url: str, run_id: str) -> dict[str, Any]:
    status, body = await api.call("GET", f"{url}/api/runs/{run_id}")
    assert status == 200, body
    return dict(body)


async def until_status(api: Api, url: str, run_id: str, *wanted: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        body = await run_status(api, url, run_id)
        return body if body["status"] in wanted else None

    found: dict[str, Any] = await eventually(check, f"run {run_id} {' or '.join(wanted)}")
    return found


async def test_fifty_concurrent_decisions_on_one_ticket_apply_once(
    cluster: Cluster, api: Api
) -> None:
    replicas = await cluster.start(3)
    urls = [r.url for r in replicas]
    run_id = await start_run(api, urls[0], "payments", "pay ACC-1")
    parked = await until_status(api, urls[1], run_id, "awaiting")
    ticket_id = parked["pending"][0]["ticket_id"]

    async def decide(n: int) -> tuple[int, str, str]:
        decision = {"decision": "allow"} if n % 2 else {"decision": "deny", "reason": f"no {n}"}
        status, body = await api.call(
            "POST", f"{urls[n % 3]}/api/tickets/{ticket_id}/decision", decision
        )
        return status, decision["decision"], str(body.get("error", ""))

    outcomes = await asyncio.gather(*(decide(n) for n in range(50)))
    statuses = Counter(status for status, _, _ in outcomes)
    assert statuses == {200: 1, 409: 49}, outcomes
    assert {error for status, _, error in outcomes if status == 409} == {"already_decided"}
    won = next(decision for status, decision, _ in outcomes if status == 200)
    done = await until_status(api, urls[2], run_id, "done")
    assert done["pending"] == []
    assert (
        await cluster.value(
            "SELECT count(*) FROM events WHERE run_id = $1 AND kind = 'ticket_decided'", run_id
        )
        == 1
    )
    decision = await cluster.value("SELECT decision FROM tickets WHERE ticket_id = $1", ticket_id)
    assert f'"{won}"' in decision
    assert len(cluster.ledger_entries()) == (1 if won == "allow" else 0)


async def test_a_decision_stored_elsewhere_wakes_a_replica_at_once(
    cluster: Cluster, api: Api
) -> None:
    # The replica polls only every 60 s: only the NOTIFY of another process's commit can
    # make it resume the run within seconds. The decision comes from the command line.
    cluster.settings["SIGNOFF_POLL_SECONDS"] = "60"
    [replica] = await cluster.start(1)
    run_id = await start_run(api, replica.url, "payments", "pay ACC-1")
    parked = await until_status(api, replica.url, run_id, "awaiting")
    ticket_id = parked["pending"][0]["ticket_id"]
    env = cluster.env()
    approve = [sys.executable, "-m", "bot", "approve", ticket_id, "--no-resume"]
    done = await asyncio.to_thread(
        subprocess.run, approve, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    finished = await until_status(api, replica.url, run_id, "done")
    assert finished["text"] == "Transfer complete."
    rows = await cluster.query(
        "SELECT kind, at, data FROM events WHERE run_id = $1 ORDER BY seq", run_id
    )
    decided = next(r["at"] for r in rows if r["kind"] == "ticket_decided")
    claims = [r for r in rows if r["kind"] == "run_claimed"]
    assert len(claims) == 2
    assert any(cluster.worker_id(r) in claims[1]["data"] for r in cluster.driving())
    latency = (claims[1]["at"] - decided) / 1e6
    assert latency < 5, f"resumed {latency:.2f}s after the decision"


async def test_a_replica_killed_mid_tool_is_recovered_by_another(
    cluster: Cluster, api: Api
) -> None:
    replicas = await cluster.start(3)
    run_id = await start_run(api, replicas[0].url, "inventory", "sync SKU-1")

    async def first_execution() -> list[dict[str, Any]]:
        return cluster.ledger_entries()

    [first] = await eventually(first_execution, "the tool running")
    runner = next(r for r in cluster.replicas if r.process.pid == first["pid"])
    cluster.kill(runner)  # mid-tool: the dispatch is committed, no result recorded
    survivor = cluster.serving()[0]
    done = await until_status(api, survivor.url, run_id, "done")
    assert done["text"] == "Stock synced."
    entries = cluster.ledger_entries()
    # Idempotent: run again once, by another replica, with the same execution key.
    assert len(entries) == 2, entries
    assert entries[1]["key"] == first["key"]
    assert entries[1]["pid"] != first["pid"]
    assert entries[1]["pid"] in {r.process.pid for r in cluster.replicas}
    kinds = [
        row["kind"]
        for row in await cluster.query(
            "SELECT kind FROM events WHERE run_id = $1 ORDER BY seq", run_id
        )
    ]
    assert kinds.count("run_claimed") == 2
    assert kinds.count("run_done") == 1
