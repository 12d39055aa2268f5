"""Standing grants on two `signoff serve` replicas on one PostgreSQL: a grant given on one
covers calls wherever they run, and a revocation (from the command line, a third process)
or an expiry stops it at once for every replica."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

from cluster import ROOT, Api, Cluster
from test_replica_runs import until_status

THREAD = "grants-thread"


async def start(api: Api, url: str) -> str:
    body = {"agent": "shop", "input": "refund A1", "thread_id": THREAD}
    status, answer = await api.call("POST", f"{url}/api/runs", body)
    assert status == 202, answer
    return str(answer["run_id"])


async def statuses(api: Api, urls: list[str]) -> list[dict[str, Any]]:
    """Start a run on each replica and wait for each to finish or park."""
    started = [await start(api, url) for url in urls]
    return [
        await until_status(api, urls[i], run_id, "done", "awaiting")
        for i, run_id in enumerate(started)
    ]


async def allow(api: Api, url: str, run: dict[str, Any], grant: dict[str, Any]) -> str:
    [pending] = run["pending"]
    assert pending["grants"] == ["run", "thread"]
    decision = {"decision": "allow", "grant": grant}
    status, body = await api.call(
        "POST", f"{url}/api/tickets/{pending['ticket_id']}/decision", decision
    )
    assert status == 200, body
    return str(body["grant"]["grant_id"])


async def test_a_grant_covers_every_replica_until_revoked_or_expired(
    cluster: Cluster, api: Api
) -> None:
    cluster.settings["SIGNOFF_APP"] = "tests.replicas.grants_app:agents"
    one, two = await cluster.start(2)
    urls = [one.url, two.url, one.url, two.url]

    first = await until_status(api, two.url, await start(api, one.url), "awaiting")
    grant_id = await allow(api, two.url, first, {"scope": "thread", "hours": 1})
    await until_status(api, one.url, str(first["run_id"]), "done")

    covered = await statuses(api, urls)
    assert [r["status"] for r in covered] == ["done"] * 4
    applied = await cluster.query(
        "SELECT data FROM events WHERE kind = 'grant_applied' ORDER BY seq"
    )
    assert len(applied) == 4 and all(grant_id in row["data"] for row in applied)

    revoke = [sys.executable, "-m", "bot", "grants", "revoke", grant_id, "--as", "ops:ana"]
    done = await asyncio.to_thread(
        subprocess.run, revoke, env=cluster.env(), cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    asked = await statuses(api, urls)
    assert [r["status"] for r in asked] == ["awaiting"] * 4
    status, shown = await api.call("GET", f"{one.url}/api/grants/{grant_id}")
    assert (status, shown["state"], shown["revoked_by"]) == (200, "revoked", "ops:ana")

    # A grant of a few seconds: once its expiry passed, no replica applies it.
    short = await allow(api, one.url, asked[0], {"scope": "thread", "hours": 2 / 3600})
    status, shown = await api.call("GET", f"{two.url}/api/grants/{short}")
    assert status == 200 and shown["expires_at"] is not None
    expires = datetime.fromisoformat(str(shown["expires_at"]))
    await asyncio.sleep((expires - datetime.now(UTC)).total_seconds() + 0.05)
    assert datetime.now(UTC) > expires
    later = await statuses(api, urls)
    assert [r["status"] for r in later] == ["awaiting"] * 4
    for url in (one.url, two.url):
        status, shown = await api.call("GET", f"{url}/api/grants/{short}")
        assert (status, shown["state"]) == (200, "expired")
    assert len(await cluster.query("SELECT 1 FROM events WHERE kind = 'grant_applied'")) == 4
