"""Standing grants through the JSON API and the console: giving them with an allow,
listing, revoking, and what strangers see (nothing)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from testkit import settled

from runtime import (
    Actor,
    Agent,
    ModelRequest,
    RunResult,
    RunStatus,
    ScriptedModel,
    final_reply,
    tool,
    tool_call_reply,
)

pytestmark = pytest.mark.timeout(60)

GRANT_ROUTES = [
    ("GET", "/api/grants"),
    ("GET", "/api/grants/gr_x"),
    ("POST", "/api/grants/gr_x/revoke"),
    ("GET", "/api/runs/run_x/grants"),
]


def shop_agent(ledger: list[tuple[str, dict[str, Any]]]) -> Agent:
    """``shop``: three refunds, one a turn (each asks), then a summary. U2 may decide too."""
    orders = ["A1", "A2", "A3"]

    def reply(request: ModelRequest) -> dict[str, Any]:
        start = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
        asked = sum(1 for m in request.messages[start:] if m.get("role") == "assistant")
        if asked < len(orders):
            return tool_call_reply(("refund", {"order": orders[asked], "amount": 40.0}))
        return final_reply("Refunded three orders.")

    @tool(permission="ask", approvers=["requester", "U2"], grants=["run", "thread"])
    async def refund(order: str, amount: float) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order}))
        return f"refunded {order}"

    return Agent("shop", "Refund.", ScriptedModel(reply), [refund])


@pytest.fixture
def shop(service: Any) -> Any:
    service.runtime.register(shop_agent(service.ledger))
    return service


def refunds(service: Any) -> list[str]:
    return [args["order"] for name, args in service.ledger if name == "refund"]


async def decide(service: Any, parked: RunResult, body: dict[str, Any], token: str = "tok-u1"):
    ticket = parked.pending[0].ticket_id
    return await service.api("POST", f"/api/tickets/{ticket}/decision", json=body, token=token)


async def granted(service: Any, token: str = "tok-u1", **grant: Any) -> tuple[RunResult, str]:
    """A `shop` run of U1 whose first refund was allowed with a grant by `token`."""
    parked = await service.park("shop")
    status, body = await decide(
        service, parked, {"decision": "allow", "grant": {"scope": "run", **grant}}, token
    )
    assert status == 200, body
    return parked, body["grant"]["grant_id"]


# -- giving a grant through the API --------------------------------------------------------


async def test_an_allow_with_a_run_grant_lets_the_rest_of_the_run_go(shop: Any) -> None:
    parked = await shop.park("shop")
    status, listed = await shop.api("GET", "/api/tickets")
    assert [t["grants"] for t in listed["tickets"]] == [["run", "thread"]]

    status, body = await decide(shop, parked, {"decision": "allow", "grant": {"scope": "run"}})
    assert status == 200, body
    grant = body["grant"]
    assert grant["scope"] == "run" and grant["state"] == "active"
    assert grant["granted_by"] == "U1" and grant["platform"] == "api"
    assert grant["ticket_id"] == parked.pending[0].ticket_id
    assert grant["covers"] == "refund for the rest of this run"

    done = await shop.finished(parked.run_id)
    assert done.status is RunStatus.DONE
    assert refunds(shop) == ["A1", "A2", "A3"]
    status, events = await shop.api("GET", f"/api/runs/{parked.run_id}/events")
    applied = [e for e in events["events"] if e["kind"] == "grant_applied"]
    assert [e["data"]["grant_id"] for e in applied] == [grant["grant_id"]] * 2

    # The run is done, so its run grant has ended with it.
    status, one = await shop.api("GET", f"/api/grants/{grant['grant_id']}")
    assert status == 200 and one == {**grant, "state": "ended"}
    status, listing = await shop.api("GET", "/api/grants?state=all")
    assert [g["grant_id"] for g in listing["grants"]] == [grant["grant_id"]]
    status, of_run = await shop.api("GET", f"/api/runs/{parked.run_id}/grants?state=all")
    assert [g["grant_id"] for g in of_run["grants"]] == [grant["grant_id"]]
    status, filtered = await shop.api("GET", f"/api/grants?run={parked.run_id}&state=all")
    assert [g["grant_id"] for g in filtered["grants"]] == [grant["grant_id"]]


async def test_a_thread_grant_with_hours_and_the_same_arguments(shop: Any) -> None:
    parked = await shop.park("shop")
    status, body = await decide(
        shop,
        parked,
        {"decision": "allow", "grant": {"scope": "thread", "hours": 1.5, "args": "same"}},
    )
    assert status == 200, body
    grant = body["grant"]
    assert grant["scope"] == "thread" and grant["thread_id"] == parked.thread_id
    assert grant["args"] == {
        "order": {"eq": "A1"},
        "amount": {"eq": 40.0},
        "": {"only": ["amount", "order"]},
    }
    assert grant["expires_at"] == (shop.clock.now() + timedelta(hours=1.5)).isoformat()
    # The next call (A2) differs from A1: it asks.
    waiting = await shop.wait(parked.run_id, lambda r: len(r.pending) == 1 and r.turns == 2)
    assert waiting.pending[0].call.arguments["order"] == "A2"


@pytest.mark.parametrize(
    ("agent", "grants"), [("shop", ["run", "thread"]), ("bank", ["run"]), ("deployer", [])]
)
async def test_pending_tickets_say_which_grants_an_allow_may_give(
    shop: Any, agent: str, grants: list[str]
) -> None:
    parked = await shop.park(agent)
    _status, run = await shop.api("GET", f"/api/runs/{parked.run_id}", token="tok-ops")
    assert [p["grants"] for p in run["pending"]] == [grants]


# -- refusals change nothing ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "token", "grant", "message"),
    [
        ("bank", "tok-u1", {"scope": "thread"}, "cannot be allowed for this thread"),
        ("deployer", "tok-u2", {"scope": "run"}, "deploy is four-eyes"),
        ("shop", "tok-u1", {"args": {"currency": "EUR"}}, "refund has no argument currency"),
    ],
)
async def test_a_grant_beyond_what_the_tool_allows_is_refused(
    shop: Any, agent: str, token: str, grant: dict[str, Any], message: str
) -> None:
    parked = await shop.park(agent)
    before = await shop.snapshot(parked.run_id)
    status, body = await decide(shop, parked, {"decision": "allow", "grant": grant}, token)
    assert status == 422, body
    assert body["error"] == "grant_not_allowed"
    assert message in body["message"]
    await settled(shop.runtime, shop.worker, outbox=False)
    assert await shop.snapshot(parked.run_id) == before
    assert await shop.runtime.grants(active=False) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"decision": "deny", "grant": {"scope": "run"}}, '"grant" goes with'),
        ({"decision": "allow", "grant": "run"}, '"grant" must be an object'),
        ({"decision": "allow", "grant": {"scope": "forever"}}, "scope"),
        ({"decision": "allow", "grant": {"hours": -1}}, "hours"),
        ({"decision": "allow", "grant": {"hours": 10_000}}, "hours"),
        ({"decision": "allow", "grant": {"args": {"amount": {"lte": 5}}}}, "operator"),
        ({"decision": "allow", "grant": {"scope": "run", "why": 1}}, "why"),
    ],
)
async def test_a_malformed_grant_is_400_and_changes_nothing(
    shop: Any, body: dict[str, Any], message: str
) -> None:
    parked = await shop.park("shop")
    before = await shop.snapshot(parked.run_id)
    status, answer = await decide(shop, parked, body)
    assert status == 400, answer
    assert answer["error"] == "bad_request" and message in answer["message"]
    assert await shop.snapshot(parked.run_id) == before


# -- revoking -----------------------------------------------------------------------------


async def test_a_revoked_thread_grant_covers_no_later_run(shop: Any) -> None:
    parked = await shop.park("shop")
    status, body = await decide(shop, parked, {"decision": "allow", "grant": {"scope": "thread"}})
    grant_id = body["grant"]["grant_id"]
    await shop.finished(parked.run_id)
    covered = await shop.runtime.start(
        "shop", "again", requester="U1", thread_id=parked.thread_id, wait=True
    )
    assert covered.status is RunStatus.DONE

    status, revoked = await shop.api("POST", f"/api/grants/{grant_id}/revoke")
    assert status == 200, revoked
    assert revoked["state"] == "revoked" and revoked["revoked_by"] == "U1"
    status, again = await shop.api("POST", f"/api/grants/{grant_id}/revoke")
    assert status == 409 and again["error"] == "grant_not_active"
    assert "already revoked by U1" in again["message"]

    asked = await shop.runtime.start(
        "shop", "once more", requester="U1", thread_id=parked.thread_id, wait=True
    )
    assert asked.status is RunStatus.AWAITING
    status, listing = await shop.api("GET", "/api/grants")
    assert listing["grants"] == []
    status, listing = await shop.api("GET", "/api/grants?state=all")
    assert [g["state"] for g in listing["grants"]] == ["revoked"]


async def test_the_requester_sees_and_revokes_a_grant_someone_else_gave(shop: Any) -> None:
    _parked, grant_id = await granted(shop, token="tok-u2")
    status, seen = await shop.api("GET", f"/api/grants/{grant_id}", token="tok-u1")
    assert status == 200 and seen["granted_by"] == "U2"
    status, revoked = await shop.api("POST", f"/api/grants/{grant_id}/revoke", token="tok-u1")
    assert status == 200 and revoked["revoked_by"] == "U1"


async def test_an_operator_sees_and_revokes_every_grant(shop: Any) -> None:
    _parked, grant_id = await granted(shop)
    status, listing = await shop.api("GET", "/api/grants", token="tok-ops")
    assert [g["grant_id"] for g in listing["grants"]] == [grant_id]
    status, revoked = await shop.api("POST", f"/api/grants/{grant_id}/revoke", token="tok-ops")
    assert status == 200 and revoked["revoked_by"] == "ops:alice"


# -- strangers ---------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), GRANT_ROUTES)
async def test_every_grant_route_needs_a_valid_bearer_token(
    service: Any, method: str, path: str
) -> None:
    response = await service.client.request(method, path, json={})
    assert response.status == 401
    assert (await response.json())["error"] == "unauthenticated"


async def test_a_stranger_sees_no_grant_on_any_route_and_cannot_revoke(shop: Any) -> None:
    parked, grant_id = await granted(shop)
    stranger = "tok-u3"
    status, listing = await shop.api("GET", "/api/grants?state=all", token=stranger)
    assert status == 200 and listing["grants"] == []
    status, listing = await shop.api(
        "GET", f"/api/grants?thread={parked.thread_id}", token=stranger
    )
    assert status == 200 and listing["grants"] == []
    for method, path in [
        ("GET", f"/api/grants/{grant_id}"),
        ("POST", f"/api/grants/{grant_id}/revoke"),
        ("GET", f"/api/runs/{parked.run_id}/grants"),
        ("GET", f"/api/grants?run={parked.run_id}"),
    ]:
        status, body = await shop.api(method, path, token=stranger)
        assert status == 404, (path, body)
        assert grant_id not in str(body) or body["error"] == "unknown_grant"
    status, body = await shop.api("POST", "/api/grants/gr_nope/revoke", token="tok-ops")
    assert status == 404 and body["error"] == "unknown_grant"
    assert (await shop.runtime.grant(grant_id)).revoked_at is None
    events = await shop.runtime.events(parked.run_id)
    assert not any(e["kind"] == "grant_revoked" for e in events)


# -- the console ---------------------------------------------------------------------------


async def page(service: Any, path: str, status: int = 200) -> str:
    response = await service.client.get(path)
    text = await response.text()
    assert response.status == status, text
    return text


async def post(service: Any, path: str, data: dict[str, str], status: int = 303) -> Any:
    response = await service.client.post(path, data=data, allow_redirects=False)
    assert response.status == status, await response.text()
    return response


def grant_buttons(html: str) -> list[str]:
    return re.findall(r'name="grant" value="(\w+)"', html)


async def test_the_console_offers_the_grants_each_tool_allows(shop: Any) -> None:
    csrf = await shop.login("tok-u1")
    assert csrf
    for agent, expected in (("shop", ["run", "thread"]), ("bank", ["run"])):
        parked = await shop.park(agent)
        assert grant_buttons(await page(shop, f"/runs/{parked.run_id}")) == expected
    deploy = await shop.park("deployer", requester="U1")
    await shop.login("tok-u2")
    assert grant_buttons(await page(shop, f"/runs/{deploy.run_id}")) == []


async def test_allowing_for_the_rest_of_the_run_from_the_console(shop: Any) -> None:
    csrf = await shop.login("tok-u1")
    parked = await shop.park("shop")
    ticket = parked.pending[0].ticket_id
    here = f"/runs/{parked.run_id}"
    response = await post(
        shop,
        f"/tickets/{ticket}/decide",
        {"csrf": csrf, "action": "allow", "grant": "run", "next": here},
    )
    assert response.headers["Location"] == here
    await shop.finished(parked.run_id)
    assert refunds(shop) == ["A1", "A2", "A3"]
    html = await page(shop, here)
    assert "and granted it for the rest of the run" in html  # the flash
    assert "Standing grants" in html
    [grant] = await shop.runtime.grants(active=False)
    assert f'id="grant-{grant.grant_id}" data-state="ended"' in html  # the run is done
    assert f"Allowed by grant {grant.grant_id}" in html  # the timeline

    # A grant of a run still going is revoked from the grants page, with its button.
    parked = await shop.park("shop")
    await post(
        shop,
        f"/tickets/{parked.pending[0].ticket_id}/decide",
        {"csrf": csrf, "action": "allow", "grant": "run", "same_args": "true", "next": here},
    )
    [grant] = await shop.runtime.grants()
    listing = await page(shop, "/grants")
    assert f"/grants/{grant.grant_id}/revoke" in listing
    await post(shop, f"/grants/{grant.grant_id}/revoke", {"csrf": csrf, "next": "/grants"})
    assert (await shop.runtime.grant(grant.grant_id)).state == "revoked"
    assert f"/grants/{grant.grant_id}/revoke" not in await page(shop, "/grants?state=all")
    html = await post(
        shop, f"/grants/{grant.grant_id}/revoke", {"csrf": csrf, "next": "/grants"}, status=409
    )
    assert "already revoked" in await html.text()


async def test_a_thread_grant_from_the_console_with_hours(shop: Any) -> None:
    csrf = await shop.login("tok-u1")
    parked = await shop.park("shop")
    ticket = parked.pending[0].ticket_id
    form = {"csrf": csrf, "action": "allow", "grant": "thread", "next": "/tickets"}
    before = await shop.snapshot(parked.run_id)
    response = await post(shop, f"/tickets/{ticket}/decide", {**form, "hours": "abc"}, status=422)
    assert "Enter the hours as a number" in await response.text()
    response = await post(shop, f"/tickets/{ticket}/decide", {**form, "grant": "x"}, status=422)
    assert "Unknown grant" in await response.text()
    assert await shop.snapshot(parked.run_id) == before

    await post(shop, f"/tickets/{ticket}/decide", {**form, "hours": "2", "same_args": "true"})
    [grant] = await shop.runtime.grants()
    assert grant.scope == "thread" and grant.constraint == {
        "order": {"eq": "A1"},
        "amount": {"eq": 40.0},
        "": {"only": ["amount", "order"]},
    }
    assert grant.expires_at is not None
    assert (grant.expires_at - grant.created_at).total_seconds() == 7200


async def test_a_four_eyes_grant_posted_to_the_console_is_refused(shop: Any) -> None:
    parked = await shop.park("deployer", requester="U1")
    csrf = await shop.login("tok-u2")
    before = await shop.snapshot(parked.run_id)
    response = await post(
        shop,
        f"/tickets/{parked.pending[0].ticket_id}/decide",
        {"csrf": csrf, "action": "allow", "grant": "run", "next": "/tickets"},
        status=422,
    )
    assert "four-eyes" in await response.text()
    assert await shop.snapshot(parked.run_id) == before


async def test_a_stranger_cannot_revoke_from_the_console(shop: Any) -> None:
    _parked, grant_id = await granted(shop)
    csrf = await shop.login("tok-u3")
    assert grant_id not in await page(shop, "/grants?state=all")
    await post(shop, f"/grants/{grant_id}/revoke", {"csrf": csrf}, status=404)
    assert (await shop.runtime.grant(grant_id)).revoked_at is None
    response = await shop.client.post(
        f"/grants/{grant_id}/revoke", data={"csrf": "wrong"}, allow_redirects=False
    )
    assert response.status == 403
    assert (await shop.runtime.grant(grant_id)).revoked_at is None


# -- seeing a run is not seeing its grants ---------------------------------------------------


async def test_a_decider_who_sees_the_run_does_not_see_its_grants(shop: Any) -> None:
    # U1 allows the first refund with a grant for these exact arguments only, so the
    # second refund asks again: U2, who may decide it, now sees the run.
    parked = await shop.park("shop")
    status, body = await decide(
        shop, parked, {"decision": "allow", "grant": {"scope": "run", "args": "same"}}
    )
    assert status == 200, body
    grant_id = body["grant"]["grant_id"]
    again = await shop.wait(
        parked.run_id,
        lambda r: (
            r.status is RunStatus.AWAITING
            and bool(r.pending)
            and r.pending[0].ticket_id != body["ticket_id"]
        ),
    )
    status, seen = await shop.api("GET", f"/api/runs/{parked.run_id}", token="tok-u2")
    assert status == 200, seen

    status, of_run = await shop.api("GET", f"/api/runs/{parked.run_id}/grants", token="tok-u2")
    assert status == 200 and of_run == {"run_id": parked.run_id, "grants": []}
    status, of_run = await shop.api(
        "GET", f"/api/runs/{parked.run_id}/grants?state=all", token="tok-u2"
    )
    assert status == 200 and of_run["grants"] == []
    status, listing = await shop.api("GET", f"/api/grants?run={parked.run_id}", token="tok-u2")
    assert status == 200 and listing["grants"] == []
    status, one = await shop.api("GET", f"/api/grants/{grant_id}", token="tok-u2")
    assert status == 404 and one["error"] == "unknown_grant"
    assert await shop.runtime.grants_of_run(parked.run_id, viewer=Actor(id="U2")) == []

    await shop.login("tok-u2")
    html = await page(shop, f"/runs/{parked.run_id}")
    assert again.pending[0].ticket_id in html  # the run page, with the ticket U2 decides
    # The timeline names the grant that came with the decision; no grant is listed.
    assert f'id="grant-{grant_id}"' not in html and "Standing grants" not in html
    assert grant_id not in await page(shop, "/grants?state=all")

    # Those the rule names still see it there: the requester, and an operator.
    status, of_run = await shop.api("GET", f"/api/runs/{parked.run_id}/grants")
    assert [g["grant_id"] for g in of_run["grants"]] == [grant_id]
    status, of_run = await shop.api("GET", f"/api/runs/{parked.run_id}/grants", token="tok-ops")
    assert [g["grant_id"] for g in of_run["grants"]] == [grant_id]
    await shop.login("tok-u1")
    assert f'id="grant-{grant_id}"' in await page(shop, f"/runs/{parked.run_id}")


# -- a run grant ends with its run ----------------------------------------------------------


async def test_a_run_grant_reads_ended_once_its_run_finished(shop: Any) -> None:
    parked, grant_id = await granted(shop)
    await shop.finished(parked.run_id)

    status, one = await shop.api("GET", f"/api/grants/{grant_id}")
    assert status == 200 and one["state"] == "ended"
    status, listing = await shop.api("GET", "/api/grants")
    assert listing["grants"] == []
    status, listing = await shop.api("GET", "/api/grants?state=all")
    assert [(g["grant_id"], g["state"]) for g in listing["grants"]] == [(grant_id, "ended")]
    status, of_run = await shop.api("GET", f"/api/runs/{parked.run_id}/grants")
    assert of_run["grants"] == []
    status, of_run = await shop.api("GET", f"/api/runs/{parked.run_id}/grants?state=all")
    assert [g["state"] for g in of_run["grants"]] == ["ended"]

    status, refused = await shop.api("POST", f"/api/grants/{grant_id}/revoke")
    assert status == 409 and refused["error"] == "grant_not_active"
    assert "ended with its run" in refused["message"]
    assert (await shop.runtime.grant(grant_id)).revoked_at is None

    await shop.login("tok-u1")
    html = await page(shop, f"/runs/{parked.run_id}")
    row = re.search(rf'<tr id="grant-{grant_id}" data-state="(\w+)"', html)
    assert row is not None and row.group(1) == "ended"
    assert f"/grants/{grant_id}/revoke" not in html
    listing_html = await page(shop, "/grants?state=all")
    assert 'data-state="ended"' in listing_html
    assert grant_id not in await page(shop, "/grants")
