"""The JSON API against a real server, a real SQLite store and a real background worker."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import pytest

from runtime import RunStatus

pytestmark = pytest.mark.timeout(60)

ROUTES = [
    ("GET", "/api/agents"),
    ("GET", "/api/runs"),
    ("POST", "/api/runs"),
    ("GET", "/api/runs/run_x"),
    ("GET", "/api/runs/run_x/events"),
    ("POST", "/api/runs/run_x/cancel"),
    ("POST", "/api/runs/run_x/pause"),
    ("POST", "/api/runs/run_x/resume"),
    ("GET", "/api/tickets"),
    ("POST", "/api/tickets/tk_x/decision"),
    ("POST", "/api/decisions"),
]


# -- authentication ----------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("header", [None, "Bearer wrong", "Bearer ", "Basic tok-u1", "tok-u1"])
async def test_every_route_needs_a_valid_bearer_token(
    service: Any, method: str, path: str, header: str | None
) -> None:
    headers = {"Authorization": header} if header is not None else {}
    response = await service.client.request(method, path, headers=headers, json={})
    assert response.status == 401
    assert response.content_type == "application/json"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await response.json())["error"] == "unauthenticated"


async def test_a_refused_token_starts_nothing(service: Any) -> None:
    status, _ = await service.api(
        "POST", "/api/runs", token="nope", json={"agent": "bank", "input": "pay"}
    )
    assert status == 401
    status, body = await service.api("GET", "/api/runs")
    assert body["runs"] == []


# -- reading ---------------------------------------------------------------------------


async def test_agents_lists_every_loaded_agent_with_its_tools(service: Any) -> None:
    status, body = await service.api("GET", "/api/agents")
    assert status == 200
    names = [agent["name"] for agent in body["agents"]]
    assert names == sorted(["bank", "wires", "release", "pager", "pair", "deployer"])
    bank = next(agent for agent in body["agents"] if agent["name"] == "bank")
    assert bank["description"] == "Pays invoices (asks first)"
    assert [t["name"] for t in bank["tools"]] == ["transfer"]


async def test_start_a_run_and_show_what_it_waits_on(service: Any) -> None:
    status, body = await service.api(
        "POST", "/api/runs", json={"agent": "bank", "input": "pay invoice 7"}
    )
    assert status == 202
    run_id = body["run_id"]
    # Claimed for the idle serving worker in the start's own commit.
    assert body["status"] == "running"
    assert body["requester"] == "U1"
    assert body["url"] == f"/api/runs/{run_id}"

    await service.wait_status(run_id, RunStatus.AWAITING)
    status, run = await service.api("GET", f"/api/runs/{run_id}")
    assert status == 200
    assert run["status"] == "awaiting"
    assert run["counters"]["turns"] == 1
    assert run["counters"]["total_tokens"] == 18
    [pending] = run["pending"]
    assert pending["kind"] == "approval"
    assert pending["tool"] == "transfer"
    assert pending["arguments"] == {"account": "ACME-1", "amount": 250.0, "api_key": "••••••"}
    assert pending["who_may_decide"] == "U1"
    assert pending["deadline"] is None
    assert pending["prompt"] == "I need these tools for the task."
    assert pending["ticket_id"].startswith("tk_")
    assert "sk-live" not in json.dumps(run)

    # The run was started as the token's user, routed to the console.
    events = await service.runtime.events(run_id)
    assert events[0]["kind"] == "run_started"
    assert events[0]["actor"] == "U1"
    assert events[0]["data"]["origin"] == {"platform": "console"}


async def test_start_continues_a_thread(service: Any) -> None:
    first = await service.park("bank")
    status, body = await service.api(
        "POST",
        "/api/runs",
        json={"agent": "bank", "input": "and again", "thread_id": first.thread_id},
    )
    assert status == 202
    assert body["thread_id"] == first.thread_id


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"input": "x"}, 400, "bad_request"),
        ({"agent": "bank"}, 400, "bad_request"),
        ({"agent": "bank", "input": "  "}, 400, "bad_request"),
        ({"agent": "bank", "input": "x", "thread_id": 5}, 400, "bad_request"),
        ({"agent": "nobody", "input": "x"}, 422, "unknown_agent"),
    ],
)
async def test_start_refuses_bad_bodies(
    service: Any, body: dict[str, Any], status: int, error: str
) -> None:
    got, answer = await service.api("POST", "/api/runs", json=body)
    assert (got, answer["error"]) == (status, error)
    _, listing = await service.api("GET", "/api/runs")
    assert listing["runs"] == []


async def test_start_refuses_malformed_json(service: Any) -> None:
    status, body = await service.api("POST", "/api/runs", data=b"{nope")
    assert status == 400
    assert "not valid JSON" in body["message"]


async def test_list_runs_filters_by_status_and_limits(service: Any) -> None:
    parked = await service.park("bank")
    other = await service.park("bank")
    done = await service.park("bank")
    await service.api(
        "POST", f"/api/tickets/{done.pending[0].ticket_id}/decision", json={"decision": "allow"}
    )
    await service.finished(done.run_id)

    status, body = await service.api("GET", "/api/runs")
    assert status == 200
    assert {r["run_id"] for r in body["runs"]} == {parked.run_id, other.run_id, done.run_id}

    _, body = await service.api("GET", "/api/runs?status=awaiting")
    assert {r["run_id"] for r in body["runs"]} == {parked.run_id, other.run_id}
    _, body = await service.api("GET", "/api/runs?status=done,failed")
    assert [r["run_id"] for r in body["runs"]] == [done.run_id]
    assert body["runs"][0]["text"].startswith("Finished.")
    _, body = await service.api("GET", "/api/runs?status=awaiting&limit=1")
    assert len(body["runs"]) == 1

    for query in ("status=sleeping", "limit=0", "limit=x", "limit=100000"):
        status, body = await service.api("GET", f"/api/runs?{query}")
        assert status == 400, query
        assert body["error"] == "bad_request"


async def test_unknown_run_is_404(service: Any) -> None:
    for path in ("/api/runs/run_nope", "/api/runs/run_nope/events"):
        status, body = await service.api("GET", path)
        assert (status, body["error"]) == (404, "unknown_run")
    status, body = await service.api("POST", "/api/runs/run_nope/cancel")
    assert (status, body["error"]) == (404, "unknown_run")


async def test_events_as_json_and_as_json_lines(service: Any) -> None:
    parked = await service.park("bank")
    status, body = await service.api("GET", f"/api/runs/{parked.run_id}/events")
    assert status == 200
    kinds = [e["kind"] for e in body["events"]]
    assert kinds[0] == "run_started"
    assert "model_call" in kinds
    assert "ticket_opened" in kinds
    assert "sk-live" not in json.dumps(body)

    response = await service.client.get(
        f"/api/runs/{parked.run_id}/events?format=jsonl",
        headers={"Authorization": "Bearer tok-u1"},
    )
    assert response.status == 200
    assert response.content_type == "application/x-ndjson"
    lines = [json.loads(line) for line in (await response.text()).splitlines()]
    assert [e["kind"] for e in lines] == kinds

    status, body = await service.api("GET", f"/api/runs/{parked.run_id}/events?format=xml")
    assert status == 400


async def test_tickets_lists_the_open_tickets_one_may_decide(service: Any) -> None:
    first = await service.park("bank")
    second = await service.park("pair", requester="U2")

    async def shown(token: str) -> set[tuple[str, str, str]]:
        status, body = await service.api("GET", "/api/tickets", token=token)
        assert status == 200
        # (The manual clock gives every ticket the same time, so compare without order.)
        return {(t["run_id"], t["tool"], t["who_may_decide"]) for t in body["tickets"]}

    assert await shown("tok-u1") == {(first.run_id, "transfer", "U1")}
    assert await shown("tok-u2") == {
        (second.run_id, "send_email", "U2"),
        (second.run_id, "delete_branch", "U2"),
    }
    assert await shown("tok-ops") == await shown("tok-u1") | await shown("tok-u2")


# -- decisions ---------------------------------------------------------------------------


async def events_of(service: Any, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in await service.runtime.events(run_id) if e["kind"] == kind]


async def decide(service: Any, ticket_id: str, body: Any, token: str = "tok-u1") -> Any:
    return await service.api("POST", f"/api/tickets/{ticket_id}/decision", token=token, json=body)


async def test_allow_runs_the_tool_and_the_run_finishes(service: Any) -> None:
    parked = await service.park("bank")
    status, body = await decide(service, parked.pending[0].ticket_id, {"decision": "allow"})
    assert status == 200
    assert body["decision"] == "allow"
    # Made ready and claimed for the idle serving worker in the decision's commit.
    assert body["run"]["status"] == "running"
    done = await service.finished(parked.run_id)
    assert done.status is RunStatus.DONE
    assert service.ledger == [("transfer", {"account": "ACME-1", "amount": 250.0})]
    decided = await events_of(service, parked.run_id, "ticket_decided")
    assert decided[0]["actor"] == "U1"
    assert decided[0]["data"]["platform"] == "api"


async def test_deny_with_a_reason_never_runs_the_tool(service: Any) -> None:
    parked = await service.park("bank")
    status, _ = await decide(
        service, parked.pending[0].ticket_id, {"decision": "deny", "reason": "wrong account"}
    )
    assert status == 200
    done = await service.finished(parked.run_id)
    assert done.text == "Finished. Permission denied: wrong account"
    assert service.ledger == []


async def test_an_operator_may_decide_someone_elses_ticket(service: Any) -> None:
    parked = await service.park("bank")
    status, _ = await decide(
        service, parked.pending[0].ticket_id, {"decision": "allow"}, token="tok-ops"
    )
    assert status == 200
    await service.finished(parked.run_id)
    assert len(service.ledger) == 1


async def test_input_ticket_invalid_answer_then_valid_answer(service: Any) -> None:
    parked = await service.park("release")
    [pending] = parked.pending
    status, body = await service.api("GET", f"/api/runs/{parked.run_id}")
    assert body["pending"][0]["kind"] == "input"
    assert body["pending"][0]["schema"]["required"] == ["previous_version", "strategy"]
    assert body["pending"][0]["prompt"] == "How do we roll checkout back?"

    before = await service.snapshot(parked.run_id)
    status, body = await decide(
        service, pending.ticket_id, {"answer": {"strategy": "pray", "max_minutes": 999}}
    )
    assert status == 422
    assert body["error"] == "invalid_answer"
    paths = {e["path"] for e in body["errors"]}
    assert paths == {"", "strategy", "max_minutes"}
    assert await service.snapshot(parked.run_id) == before

    answer = {"previous_version": "2.4.0", "strategy": "redeploy_previous"}
    status, body = await decide(service, pending.ticket_id, {"answer": answer})
    assert status == 200
    done = await service.finished(parked.run_id)
    assert done.status is RunStatus.DONE
    assert service.ledger == [("rollback_plan", answer)]


async def test_an_answer_that_does_not_fit_the_ticket_is_422(service: Any) -> None:
    parked = await service.park("bank")
    before = await service.snapshot(parked.run_id)
    status, body = await decide(service, parked.pending[0].ticket_id, {"resolution": "retry"})
    assert (status, body["error"]) == (422, "resolution_error")
    assert await service.snapshot(parked.run_id) == before


@pytest.mark.parametrize(
    ("body", "ran", "text"),
    [
        ({"resolution": "result", "result": "paged grace by phone"}, 0, "paged grace by phone"),
        ({"resolution": "retry"}, 1, "paged grace"),
        ({"resolution": "abort", "reason": "paged by hand"}, 0, "Aborted: paged by hand"),
    ],
)
async def test_uncertain_resolutions(
    service: Any, body: dict[str, Any], ran: int, text: str
) -> None:
    parked = await service.uncertain()
    [pending] = parked.pending
    assert pending.status == "uncertain"
    status, _ = await decide(service, pending.ticket_id, body, token="tok-ops")
    assert status == 200
    done = await service.finished(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == f"Finished. {text}"
    assert len(service.ledger) == ran


# -- refusals ----------------------------------------------------------------------------


async def test_someone_who_may_not_decide_gets_403_and_nothing_changes(service: Any) -> None:
    # U1 started it and sees it, but four-eyes keeps them from deciding it.
    parked = await service.park("deployer")
    before = await service.snapshot(parked.run_id)
    status, body = await decide(
        service, parked.pending[0].ticket_id, {"decision": "allow"}, token="tok-u1"
    )
    assert status == 403
    assert body["error"] == "unauthorized"
    assert "who may: U2 (not the requester)" in body["message"]
    assert await service.snapshot(parked.run_id) == before
    status, _ = await decide(
        service, parked.pending[0].ticket_id, {"decision": "allow"}, token="tok-u2"
    )
    assert status == 200
    await service.finished(parked.run_id)
    assert service.ledger == [("deploy", {"service": "api"})]


async def test_a_stranger_deciding_gets_404_and_nothing_changes(service: Any) -> None:
    parked = await service.park("bank")
    before = await service.snapshot(parked.run_id)
    status, body = await decide(
        service, parked.pending[0].ticket_id, {"decision": "allow"}, token="tok-u2"
    )
    assert (status, body["error"]) == (404, "unknown_ticket")
    assert await service.snapshot(parked.run_id) == before


async def test_unknown_ticket_is_404(service: Any) -> None:
    status, body = await decide(service, "tk_does_not_exist", {"decision": "allow"})
    assert (status, body["error"]) == (404, "unknown_ticket")


async def test_a_second_decision_is_409_already_decided(service: Any) -> None:
    parked = await service.park("bank")
    ticket_id = parked.pending[0].ticket_id
    assert (await decide(service, ticket_id, {"decision": "deny"}))[0] == 200
    await service.finished(parked.run_id)
    before = await service.snapshot(parked.run_id)
    status, body = await decide(service, ticket_id, {"decision": "allow"})
    assert status == 409
    assert body["error"] == "already_decided"
    assert "Already decided by U1" in body["message"]
    assert await service.snapshot(parked.run_id) == before
    assert service.ledger == []


async def test_an_overdue_ticket_is_409_expired_before_and_after_expiry(service: Any) -> None:
    parked = await service.park("wires")
    ticket_id = parked.pending[0].ticket_id
    assert parked.pending[0].ticket.deadline is not None
    service.clock.advance(61)

    # Past the deadline but not yet expired by the deadline loop: refused, nothing changes.
    before = await service.snapshot(parked.run_id)
    status, body = await decide(service, ticket_id, {"decision": "allow"})
    assert (status, body["error"]) == (409, "expired")
    assert await service.snapshot(parked.run_id) == before

    assert await service.runtime.expire_overdue() == [ticket_id]
    service.worker.wake()
    done = await service.finished(parked.run_id)
    assert done.text == "Finished. Permission denied: the request expired without a decision"
    before = await service.snapshot(parked.run_id)
    status, body = await decide(service, ticket_id, {"decision": "allow"})
    assert (status, body["error"]) == (409, "expired")
    assert await service.snapshot(parked.run_id) == before
    assert service.ledger == []


async def test_a_ticket_of_a_changed_agent_is_409_stale(service: Any) -> None:
    parked = await service.park("bank")
    # A redeploy changed the agent definition while the run was parked.
    service.runtime.agents["bank"].version = "2"
    before = await service.snapshot(parked.run_id)
    status, body = await decide(service, parked.pending[0].ticket_id, {"decision": "allow"})
    assert (status, body["error"]) == (409, "stale_ticket")
    assert "changed" in body["message"]
    assert await service.snapshot(parked.run_id) == before


async def test_a_voided_ticket_is_409(service: Any) -> None:
    parked = await service.park("bank")
    await service.api("POST", f"/api/runs/{parked.run_id}/cancel")
    status, body = await decide(service, parked.pending[0].ticket_id, {"decision": "allow"})
    assert (status, body["error"]) == (409, "voided")


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"[1, 2]",
        b'"allow"',
        b"{}",
        b'{"decision": "maybe"}',
        b'{"decision": "deny", "reason": 5}',
        b'{"decision": "allow", "answer": {}}',
        b'{"answer": [1]}',
        b'{"resolution": "result"}',
        b'{"resolution": "undo"}',
    ],
)
async def test_malformed_decisions_are_400_and_change_nothing(service: Any, raw: bytes) -> None:
    parked = await service.park("bank")
    before = await service.snapshot(parked.run_id)
    status, body = await service.api(
        "POST",
        f"/api/tickets/{parked.pending[0].ticket_id}/decision",
        data=raw,
    )
    assert status == 400
    assert body["error"] == "bad_request"
    assert body["message"]
    assert await service.snapshot(parked.run_id) == before


async def test_two_concurrent_decisions_exactly_one_wins(service: Any) -> None:
    parked = await service.park("bank")
    ticket_id = parked.pending[0].ticket_id
    outcomes = await asyncio.gather(
        decide(service, ticket_id, {"decision": "allow"}),
        decide(service, ticket_id, {"decision": "allow"}, token="tok-ops"),
    )
    statuses = sorted(status for status, _ in outcomes)
    assert statuses == [200, 409]
    loser = next(body for status, body in outcomes if status == 409)
    assert loser["error"] == "already_decided"
    await service.finished(parked.run_id)
    assert len(service.ledger) == 1
    decided = await events_of(service, parked.run_id, "ticket_decided")
    assert len(decided) == 1


# -- run controls ------------------------------------------------------------------------


async def test_pause_resume_and_cancel(service: Any) -> None:
    parked = await service.park("bank")
    run_id = parked.run_id

    status, body = await service.api("POST", f"/api/runs/{run_id}/pause")
    assert (status, body["status"]) == (200, "paused")
    status, body = await service.api("POST", f"/api/runs/{run_id}/pause")
    assert (status, body["error"]) == (409, "not_awaiting")

    status, body = await service.api("POST", f"/api/runs/{run_id}/resume")
    assert (status, body["status"]) == (200, "awaiting")
    assert [p["tool"] for p in body["pending"]] == ["transfer"]

    status, body = await service.api(
        "POST", f"/api/runs/{run_id}/cancel", json={"reason": "not needed"}
    )
    assert (status, body["status"]) == (200, "cancelled")
    assert body["error"] == "not needed"
    assert body["pending"] == []
    status, body = await service.api("POST", f"/api/runs/{run_id}/cancel")
    assert status == 409
    assert service.ledger == []


async def test_only_the_requester_or_an_operator_controls_a_run(service: Any) -> None:
    parked = await service.park("bank")
    before = await service.snapshot(parked.run_id)
    for action in ("cancel", "pause", "resume"):
        status, body = await service.api(
            "POST", f"/api/runs/{parked.run_id}/{action}", token="tok-u2"
        )
        # A stranger does not learn that the run exists.
        assert (status, body["error"]) == (404, "unknown_run"), action
    assert await service.snapshot(parked.run_id) == before
    # An approver sees the run but does not control it.
    deploy = await service.park("deployer")
    status, body = await service.api("POST", f"/api/runs/{deploy.run_id}/cancel", token="tok-u2")
    assert (status, body["error"]) == (403, "unauthorized")
    status, body = await service.api("POST", f"/api/runs/{parked.run_id}/cancel", token="tok-ops")
    assert (status, body["status"]) == (200, "cancelled")


async def test_control_with_a_malformed_body_is_400(service: Any) -> None:
    parked = await service.park("bank")
    status, body = await service.api("POST", f"/api/runs/{parked.run_id}/cancel", data=b"{oops")
    assert (status, body["error"]) == (400, "bad_request")
    assert (await service.runtime.get(parked.run_id)).status is RunStatus.AWAITING


async def test_unknown_api_paths_and_methods_answer_in_json(service: Any) -> None:
    status, body = await service.api("GET", "/api/nothing-here")
    assert (status, body["error"]) == (404, "not_found")
    status, body = await service.api("DELETE", "/api/runs")
    assert (status, body["error"]) == (405, "method_not_allowed")
    response = await service.client.post(
        "/api/runs",
        data=io.BytesIO(b" " * (1024**2 + 10)),
        headers={"Authorization": "Bearer tok-u1", "Content-Type": "application/json"},
    )
    assert response.status == 413
    assert (await response.json())["error"] == "request_entity_too_large"
