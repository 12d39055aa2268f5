"""`GET /api/tickets` and `GET /api/runs` in pages: `limit`, an opaque `cursor`, and
`next_cursor` in the answer; a cursor is good for its own viewer and listing only."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runtime import Actor, RunStatus
from runtime.domain.states import CallState
from runtime.domain.tickets import ResumeTicket, ToolPermission
from runtime.services.queries import encode_cursor
from runtime.store.records import CallRecord, Position, RunRecord

pytestmark = pytest.mark.timeout(60)

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


async def seed(service: Any, run_id: str, n: int, *, requester: str, **ticket: Any) -> list[str]:
    """A parked `bank` run of `requester` with `n` open `transfer` tickets, a second apart."""
    ids = []
    async with service.store.transaction() as tx:
        await tx.insert_run(
            RunRecord(
                run_id=run_id,
                thread_id=f"th_{run_id}",
                agent="bank",
                agent_version="v1",
                status=RunStatus.AWAITING,
                input="go",
                requester=requester,
                created_at=T0 + timedelta(minutes=len(run_id)),
                updated_at=T0,
                origin={"platform": "console"},
                messages=[],
            )
        )
        for i in range(n):
            call_id, ticket_id = f"{run_id}_c{i}", f"{run_id}_t{i:02d}"
            args = {"account": f"A{i}", "amount": i, "api_key": "k"}
            await tx.insert_call(
                CallRecord(
                    call_id=call_id,
                    run_id=run_id,
                    batch=1,
                    seq=i,
                    model_call_id=f"m{i}",
                    tool="transfer",
                    args=args,
                    state=CallState.AWAITING_DECISION,
                    replay_policy="manual",
                    execution_key=f"k_{call_id}",
                    created_at=T0,
                    updated_at=T0,
                )
            )
            await tx.insert_ticket(
                ResumeTicket(
                    ticket_id=ticket_id,
                    correlation=f"corr_{ticket_id}",
                    run_id=run_id,
                    thread_id=f"th_{run_id}",
                    agent="bank",
                    agent_version="v1",
                    catalog_fingerprint="fp",
                    target=ToolPermission(call_id=call_id, tool="transfer", args=args),
                    requester=requester,
                    created_at=T0 + timedelta(seconds=i),
                    **ticket,
                )
            )
            ids.append(ticket_id)
    return ids


async def pages(service: Any, path: str, key: str, token: str, limit: int) -> list[list[str]]:
    """Every page of a listing, following `next_cursor` to its end."""
    found: list[list[str]] = []
    cursor: str | None = None
    while True:
        query = f"{path}?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        status, body = await service.api("GET", query, token=token)
        assert status == 200, body
        ids = [item["ticket_id" if key == "tickets" else "run_id"] for item in body[key]]
        assert len(ids) <= limit
        found.append(ids)
        cursor = body["next_cursor"]
        if cursor is None:
            return found
        assert len(found) < 50, "the cursor does not advance"


async def test_tickets_come_in_pages_of_the_limit(service: Any) -> None:
    udo = await seed(service, "ra", 7, requester="U1", approvers=("U2",))
    uma = await seed(service, "rbb", 5, requester="U1")
    got = await pages(service, "/api/tickets", "tickets", "tok-u2", 3)
    assert [len(p) for p in got] == [3, 3, 1]
    assert [t for p in got for t in p] == udo
    got = await pages(service, "/api/tickets", "tickets", "tok-u1", 5)
    assert [t for p in got for t in p] == uma
    everything = await pages(service, "/api/tickets", "tickets", "tok-ops", 4)
    assert sorted(t for p in everything for t in p) == sorted(udo + uma)
    # A listing that fits in one page says so.
    status, body = await service.api("GET", "/api/tickets", token="tok-u2")
    assert status == 200 and len(body["tickets"]) == 7 and body["next_cursor"] is None


async def test_runs_come_in_pages_of_the_limit(service: Any) -> None:
    for n in range(5):
        await seed(service, "r" + "x" * n, 1, requester="U1")
    await seed(service, "ryyyyyy", 1, requester="U3", approvers=("U1",))
    await seed(service, "rzzzzzzz", 1, requester="U3")
    got = await pages(service, "/api/runs", "runs", "tok-u1", 2)
    assert [len(p) for p in got] == [2, 2, 2]
    # Newest first: the seeds' creation times grow with the length of their ids.
    assert [r for p in got for r in p] == ["ryyyyyy", "rxxxx", "rxxx", "rxx", "rx", "r"]
    assert [r for p in await pages(service, "/api/runs", "runs", "tok-u2", 2) for r in p] == []


def forged(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


@pytest.mark.parametrize("path", ["/api/tickets", "/api/runs"])
async def test_a_cursor_of_another_viewer_or_a_forged_one_is_400(service: Any, path: str) -> None:
    mine = await seed(service, "ra", 3, requester="U1", approvers=("U2",))
    listing = path.rsplit("/", 1)[1]
    position = Position(T0, mine[0])
    others = encode_cursor(listing, Actor(id="U1"), position)
    other_listing = encode_cursor("runs" if listing == "tickets" else "tickets", None, position)
    operators = encode_cursor(listing, Actor(id="U2", operator=True), position)
    for cursor in (
        others,
        other_listing,
        operators,
        "not-a-cursor",
        "%%%",
        forged({"l": listing, "v": "user:U2"}),
        forged({"l": listing, "v": "user:U2", "t": "x", "i": "y"}),
        forged({"l": listing, "v": "user:U2", "t": 10**30, "i": "y"}),
        forged([1, 2]),  # type: ignore[arg-type]
    ):
        status, body = await service.api("GET", f"{path}?cursor={cursor}", token="tok-u2")
        assert (status, body["error"]) == (400, "bad_request"), cursor
        assert "cursor" in body["message"]
    # Their own cursor from the same listing works, and shows only their own items.
    status, body = await service.api(
        "GET", f"{path}?cursor={encode_cursor(listing, Actor(id='U2'), position)}", token="tok-u2"
    )
    assert status == 200
    assert body["next_cursor"] is None


@pytest.mark.parametrize("path", ["/api/tickets", "/api/runs"])
async def test_the_limit_is_checked(service: Any, path: str) -> None:
    for query in ("limit=0", "limit=501", "limit=ten"):
        status, body = await service.api("GET", f"{path}?{query}", token="tok-u1")
        assert (status, body["error"]) == (400, "bad_request"), query
    status, _ = await service.api("GET", f"{path}?limit=500", token="tok-u1")
    assert status == 200
