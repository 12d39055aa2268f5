"""Every identity sees and touches only what is its own: the stranger's view of every API
route and console page, thread joining, and refusals that reveal nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime import RunStatus


async def _decide(service: Any, ticket_id: str, body: Any, token: str) -> tuple[int, Any]:
    return await service.api("POST", f"/api/tickets/{ticket_id}/decision", token=token, json=body)


# -- the JSON API -----------------------------------------------------------------------


async def test_a_stranger_sees_nothing_of_a_run_through_the_api(service: Any) -> None:
    parked = await service.park("bank", requester="U1")
    run_id, ticket_id = parked.run_id, parked.pending[0].ticket_id
    before = await service.snapshot(run_id)

    _, runs = await service.api("GET", "/api/runs", token="tok-u2")
    assert run_id not in {r["run_id"] for r in runs["runs"]}
    _, tickets = await service.api("GET", "/api/tickets", token="tok-u2")
    assert ticket_id not in {t["ticket_id"] for t in tickets["tickets"]}
    for path in (f"/api/runs/{run_id}", f"/api/runs/{run_id}/events"):
        status, body = await service.api("GET", path, token="tok-u2")
        assert (status, body["error"]) == (404, "unknown_run"), path
        # The same answer as for a run that does not exist.
        _, unknown = await service.api("GET", path.replace(run_id, "run_nope"), token="tok-u2")
        assert body["message"].replace(run_id, "run_nope") == unknown["message"]
    response = await service.client.get(
        f"/api/runs/{run_id}/events?format=jsonl", headers={"Authorization": "Bearer tok-u2"}
    )
    assert response.status == 404
    assert (await response.json())["error"] == "unknown_run"
    for action in ("cancel", "pause", "resume"):
        status, body = await service.api("POST", f"/api/runs/{run_id}/{action}", token="tok-u2")
        assert (status, body["error"]) == (404, "unknown_run"), action
    assert await service.snapshot(run_id) == before


async def test_the_owner_and_an_operator_see_the_run(service: Any) -> None:
    parked = await service.park("bank", requester="U1")
    for token in ("tok-u1", "tok-ops"):
        _, runs = await service.api("GET", "/api/runs", token=token)
        assert parked.run_id in {r["run_id"] for r in runs["runs"]}, token
        status, body = await service.api("GET", f"/api/runs/{parked.run_id}", token=token)
        assert (status, body["status"]) == (200, "awaiting"), token
        status, body = await service.api("GET", f"/api/runs/{parked.run_id}/events", token=token)
        assert status == 200 and body["events"], token


async def test_an_approver_sees_the_runs_they_may_decide_and_have_decided(service: Any) -> None:
    mine = await service.park("bank", requester="U2")  # U2's own, for contrast
    deploy = await service.park("deployer", requester="U1")  # U2 is its approver
    other = await service.park("bank", requester="U1")  # nothing to do with U2

    async def listed() -> set[str]:
        _, runs = await service.api("GET", "/api/runs", token="tok-u2")
        return {r["run_id"] for r in runs["runs"]}

    assert await listed() == {mine.run_id, deploy.run_id}
    _, tickets = await service.api("GET", "/api/tickets", token="tok-u2")
    assert {t["run_id"] for t in tickets["tickets"]} == {mine.run_id, deploy.run_id}
    status, _ = await _decide(service, deploy.pending[0].ticket_id, {"decision": "allow"}, "tok-u2")
    assert status == 200
    await service.finished(deploy.run_id)
    # Still theirs to look at once decided: they took part in it.
    assert await listed() == {mine.run_id, deploy.run_id}
    status, body = await service.api("GET", f"/api/runs/{deploy.run_id}", token="tok-u2")
    assert (status, body["status"]) == (200, "done")
    status, _ = await service.api("GET", f"/api/runs/{other.run_id}", token="tok-u2")
    assert status == 404


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "allow"},
        {"answer": {"x": 1}},  # the wrong shape for this ticket: still not a 422
        {"resolution": "retry"},
        {"decision": "maybe"},
        {},
    ],
)
async def test_a_stranger_learns_nothing_about_a_ticket_from_any_body(
    service: Any, body: dict[str, Any]
) -> None:
    parked = await service.park("bank", requester="U1")
    before = await service.snapshot(parked.run_id)
    status, answer = await _decide(service, parked.pending[0].ticket_id, body, "tok-u2")
    assert (status, answer["error"]) == (404, "unknown_ticket")
    _, unknown = await _decide(service, "tk_nope", body, "tok-u2")
    assert answer["message"].replace(parked.pending[0].ticket_id, "tk_nope") == unknown["message"]
    assert await service.snapshot(parked.run_id) == before


async def test_who_may_not_decide_is_told_so_before_anything_about_the_answer(
    service: Any,
) -> None:
    # The requester sees their four-eyes run, but an answer of the wrong kind is refused
    # as unauthorized (403), not described as a mismatch (422).
    parked = await service.park("deployer", requester="U1")
    before = await service.snapshot(parked.run_id)
    for body in ({"answer": {"x": 1}}, {"resolution": "retry"}, {"decision": "allow"}):
        status, answer = await _decide(service, parked.pending[0].ticket_id, body, "tok-u1")
        assert (status, answer["error"]) == (403, "unauthorized"), body
    assert await service.snapshot(parked.run_id) == before


async def test_runs_join_a_thread_only_by_its_participants(service: Any) -> None:
    first = await service.park("bank", requester="U1")
    await service.runtime.decline(first.pending[0], actor="U1", resume=True)
    thread = first.thread_id
    before = await service.runtime.list_runs()

    status, body = await service.api(
        "POST",
        "/api/runs",
        token="tok-u2",
        json={"agent": "bank", "input": "me too", "thread_id": thread},
    )
    assert (status, body["error"]) == (403, "forbidden")
    assert "does not take part" in body["message"]
    assert await service.runtime.list_runs() == before

    # The participant and an operator may continue it; the new run sees the history.
    for token in ("tok-u1", "tok-ops"):
        status, body = await service.api(
            "POST",
            "/api/runs",
            token=token,
            json={"agent": "bank", "input": "again", "thread_id": thread},
        )
        assert status == 202, body
        assert body["thread_id"] == thread
    # A thread id nobody used yet becomes the caller's own.
    status, body = await service.api(
        "POST",
        "/api/runs",
        token="tok-u2",
        json={"agent": "bank", "input": "x", "thread_id": "th_new"},
    )
    assert (status, body["thread_id"]) == (202, "th_new")


@pytest.mark.parametrize("thread", ["slack:C1:1700000000.000100", "discord:1234567890"])
async def test_a_chat_thread_is_never_joined_from_the_api(service: Any, thread: str) -> None:
    for token in ("tok-u1", "tok-ops"):
        status, body = await service.api(
            "POST",
            "/api/runs",
            token=token,
            json={"agent": "bank", "input": "x", "thread_id": thread},
        )
        assert (status, body["error"]) == (403, "forbidden"), token
        assert "chat platform" in body["message"]
    assert await service.runtime.list_runs() == []


# -- the console -------------------------------------------------------------------------


async def _page(service: Any, path: str) -> tuple[int, str]:
    response = await service.client.get(path, allow_redirects=False)
    return response.status, await response.text()


async def test_a_stranger_sees_nothing_of_a_run_in_the_console(service: Any) -> None:
    parked = await service.park("bank", requester="U1")
    run_id, ticket_id = parked.run_id, parked.pending[0].ticket_id
    before = await service.snapshot(run_id)
    csrf = await service.login("tok-u2")

    status, html = await _page(service, "/runs")
    assert status == 200 and run_id not in html
    status, html = await _page(service, "/tickets")
    assert status == 200 and ticket_id not in html and "transfer" not in html
    status, html = await _page(service, f"/runs/{run_id}")
    assert status == 404 and "transfer" not in html
    for action in ("cancel", "pause", "resume"):
        response = await service.client.post(
            f"/runs/{run_id}/{action}", data={"csrf": csrf}, allow_redirects=False
        )
        assert response.status == 404, action
    response = await service.client.post(
        f"/tickets/{ticket_id}/decide",
        data={"csrf": csrf, "action": "allow", "next": f"/runs/{run_id}"},
        allow_redirects=False,
    )
    assert response.status == 404
    assert "transfer" not in await response.text()
    assert await service.snapshot(run_id) == before

    await service.client.post("/logout", data={"csrf": csrf})
    await service.login("tok-u1")
    status, html = await _page(service, f"/runs/{run_id}")
    assert status == 200 and "Approve transfer?" in html


async def test_the_console_lists_what_an_approver_may_decide(service: Any) -> None:
    deploy = await service.park("deployer", requester="U1")
    await service.login("tok-u2")
    status, html = await _page(service, "/tickets")
    assert status == 200 and deploy.pending[0].ticket_id in html
    status, html = await _page(service, "/runs")
    assert status == 200 and deploy.run_id in html


async def test_events_of_a_visible_run_keep_secrets_masked(service: Any) -> None:
    parked = await service.park("bank", requester="U1")
    _, body = await service.api("GET", f"/api/runs/{parked.run_id}/events", token="tok-u1")
    assert "sk-live" not in json.dumps(body)
    assert (await service.runtime.get(parked.run_id)).status is RunStatus.AWAITING
