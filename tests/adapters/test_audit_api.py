"""``GET /api/audit``: every run's events as NDJSON, for auditors and operators only.

The service is `signoff serve`'s (`bot.bootstrap.build_service`) on a SQLite file, with
an auditor token besides the usual ones; runs go through the real runtime, so the
events are the flight recorder's own (a secret argument among them).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.web import ApiToken, TokenAuth
from adapters.web.audit import NEXT_AFTER_HEADER
from bot.bootstrap import build_service
from bot.settings import Settings
from runtime import Actor, ManualClock
from runtime.store.sql import SQLStore
from tests.adapters.conftest import (
    COOKIE_SECRET,
    ONLY_THE_WORKER,
    SECRET_KEY,
    TOKENS,
    Service,
    build_agents,
)

AUDITOR = ApiToken("tok-audit", "audit:carol", name="Carol", auditor=True)


@pytest.fixture
async def audited(tmp_path: Path) -> AsyncIterator[Service]:
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    clock = ManualClock()
    ledger: list[tuple[str, dict[str, Any]]] = []
    agents = build_agents(ledger)
    built = await build_service(
        Settings(
            database_url=f"sqlite+aiosqlite:///{path}",
            operator_token="tok-ops-0123456789abcdef",
            cookie_secret=COOKIE_SECRET.decode(),
            poll_seconds=0.05,
        ),
        agents=agents,
        store=store,
        clock=clock,
        auth=TokenAuth([*TOKENS, AUDITOR]),
        parts=ONLY_THE_WORKER,
    )
    client = TestClient(TestServer(built.app, host="127.0.0.1", port=0))
    await client.start_server()
    await built.start()
    try:
        yield Service(built.runtime, store, clock, built.worker, client, agents, ledger)
    finally:
        await client.close()
        await built.stop(grace_seconds=5)
        await store.close()


async def read_audit(
    service: Service, query: str = "", token: str | None = "tok-audit"
) -> tuple[int, list[dict[str, Any]], int | None]:
    """Status, lines (the events, then the ``next_after`` line) and the header's value."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = await service.client.get(f"/api/audit{query}", headers=headers)
    body = await response.text()
    if response.status != 200:
        return response.status, [json.loads(body)], None
    assert response.content_type == "application/x-ndjson"
    lines = [json.loads(line) for line in body.splitlines()]
    return response.status, lines, int(response.headers[NEXT_AFTER_HEADER])


async def some_runs(service: Service) -> list[str]:
    """Two decided runs of two agents and one parked; their ids."""
    bank = await service.park("bank")
    await service.runtime.approve(bank.pending[0], actor=Actor(id="U1", platform="console"))
    service.worker.wake()
    await service.finished(bank.run_id)
    pair = await service.park("pair", requester="U2")
    deployer = await service.park("deployer")
    return [bank.run_id, pair.run_id, deployer.run_id]


async def test_an_auditor_reads_every_event_of_every_run_in_order(audited: Service) -> None:
    run_ids = await some_runs(audited)
    status, lines, header = await read_audit(audited, "?limit=1000")
    assert status == 200
    *events, last = lines
    assert last == {"next_after": header}
    expected = []
    for run_id in run_ids:
        expected.extend(await audited.runtime.events(run_id))
    assert sorted(e["seq"] for e in expected) == [e["seq"] for e in events]
    by_seq = {e["seq"]: e for e in expected}
    agents = {run_ids[0]: "bank", run_ids[1]: "pair", run_ids[2]: "deployer"}
    for event in events:
        assert set(event) == {"seq", "run_id", "agent", "at", "kind", "data", "actor"}
        assert event["agent"] == agents[event["run_id"]]
        assert {k: v for k, v in event.items() if k != "agent"} == by_seq[event["seq"]]
    assert header == events[-1]["seq"]
    # The secret argument is masked, as on every other route.
    assert SECRET_KEY not in json.dumps(events)
    assert any("api_key" in json.dumps(e["data"]) for e in events)


async def test_reading_page_by_page_resumes_where_the_last_page_ended(audited: Service) -> None:
    await some_runs(audited)
    _, whole, _ = await read_audit(audited, "?limit=1000")
    collected: list[dict[str, Any]] = []
    after = 0
    for _ in range(100):
        status, lines, header = await read_audit(audited, f"?after={after}&limit=3")
        assert status == 200
        assert lines[-1] == {"next_after": header}
        collected.extend(lines[:-1])
        assert header is not None and header >= after
        if not lines[:-1]:
            break
        after = header
    assert collected == whole[:-1]
    # New events later are read from where the reader stopped.
    more = await audited.park("wires")
    _, lines, _ = await read_audit(audited, f"?after={after}")
    assert lines[:-1] == [
        {**e, "agent": "wires"} for e in await audited.runtime.events(more.run_id)
    ]


async def test_operators_read_it_too_and_nobody_else(audited: Service) -> None:
    await some_runs(audited)
    status, lines, _ = await read_audit(audited, token="tok-ops")
    assert status == 200 and len(lines) > 1
    for stranger in ("tok-u1", "tok-u2"):
        status, [body], _ = await read_audit(audited, token=stranger)
        assert (status, body["error"]) == (403, "forbidden")
    for nobody in (None, "not-a-token"):
        headers = {"Authorization": f"Bearer {nobody}"} if nobody else {}
        response = await audited.client.get("/api/audit", headers=headers)
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await response.json())["error"] == "unauthenticated"


@pytest.mark.parametrize(
    "query",
    ["?after=-1", "?after=x", "?after=1.5", "?limit=0", "?limit=1001", "?after=9" * 30],
)
async def test_bad_parameters_are_400(audited: Service, query: str) -> None:
    status, [body], _ = await read_audit(audited, query)
    assert (status, body["error"]) == (400, "bad_request")


_values = st.one_of(
    st.text(max_size=25),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["", "0", "1", "1000", "1001", "9223372036854775807", "9223372036854775808"]),
)


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    params=st.dictionaries(st.sampled_from(["after", "limit", "format", "x"]), _values, max_size=3),
    token=st.sampled_from(["tok-audit", "tok-ops", "tok-u1", "nope"]),
)
async def test_no_query_is_answered_5xx(
    audited: Service, params: dict[str, str], token: str
) -> None:
    if not hasattr(audited, "fuzz_seeded"):
        audited.fuzz_seeded = await audited.park("bank")  # type: ignore[attr-defined]
    response = await audited.client.get(
        "/api/audit", params=params, headers={"Authorization": f"Bearer {token}"}
    )
    body = await response.read()
    assert response.status in (200, 400, 401, 403), body
    if response.status == 200:
        lines = [json.loads(line) for line in body.decode().splitlines()]
        assert "next_after" in lines[-1]
        assert all("seq" in line for line in lines[:-1])
