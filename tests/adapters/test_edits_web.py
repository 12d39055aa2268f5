"""Approve with edits and batch decisions through the JSON API and the console.

The test agents (tests/adapters/conftest.py): ``transfer`` lets only ``amount`` change
(``api_key`` is secret), ``wire``'s rule denies amounts over 1000, ``delete_branch``
forbids edits; the ``pair`` agent asks for two calls in one model turn.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(60)

SECRET_KEY = "sk-live-123456"  # the secret argument of the `bank` agent's transfer


async def decide(service: Any, ticket_id: str, body: Any, token: str = "tok-u1") -> Any:
    return await service.api("POST", f"/api/tickets/{ticket_id}/decision", token=token, json=body)


async def decided_events(service: Any, run_id: str) -> list[dict[str, Any]]:
    return [e for e in await service.runtime.events(run_id) if e["kind"] == "ticket_decided"]


async def page(service: Any, path: str, status: int = 200) -> str:
    response = await service.client.get(path)
    text = await response.text()
    assert response.status == status, text
    return text


async def post(service: Any, path: str, data: Any, status: int = 303) -> Any:
    response = await service.client.post(path, data=data, allow_redirects=False)
    assert response.status == status, await response.text()
    return response


# -- the API -------------------------------------------------------------------------------


async def test_api_allow_with_args_runs_the_call_as_changed(service: Any) -> None:
    parked = await service.park("bank")
    status, listed = await service.api("GET", "/api/tickets")
    assert status == 200
    [shown] = listed["tickets"]
    assert shown["editable"] == ["amount"]
    assert SECRET_KEY not in str(listed)

    ticket_id = parked.pending[0].ticket_id
    status, body = await decide(service, ticket_id, {"decision": "allow", "args": {"amount": 200}})
    assert status == 200, body
    done = await service.finished(parked.run_id)
    assert service.ledger == [("transfer", {"account": "ACME-1", "amount": 200.0})]

    [event] = await decided_events(service, done.run_id)
    edit = event["data"]["edit"]
    assert edit["summary"] == "amount 250.0 → 200.0"
    assert edit["by"] == "Uma"
    assert edit["args"]["api_key"] == "••••••"
    assert event["data"]["args_digest"] == edit["digest"] != edit["previous_digest"]
    assert SECRET_KEY not in str(await service.runtime.events(done.run_id))


@pytest.mark.parametrize(
    ("agent", "args", "reason", "path"),
    [
        ("bank", {"amount": "lots"}, "invalid_edit", "amount"),  # the schema says number
        ("bank", {"account": "EVIL-9"}, "not_editable", "account"),  # not an editable field
        ("bank", {"api_key": "sk-other"}, "not_editable", "api_key"),  # a secret one
        ("bank", {"nope": 1}, "invalid_edit", "nope"),
        ("wires", {"amount": 5000}, "edit_denied", None),  # the rule now says deny
    ],
)
async def test_api_refuses_an_edit_that_does_not_fit_and_changes_nothing(
    service: Any, agent: str, args: dict[str, Any], reason: str, path: str | None
) -> None:
    parked = await service.park(agent)
    ticket_id = parked.pending[0].ticket_id
    before = await service.snapshot(parked.run_id)

    status, body = await decide(service, ticket_id, {"decision": "allow", "args": args})
    assert status == 422, body
    assert body["error"] == reason
    if path is not None:
        assert [e["path"] for e in body["errors"]] == [path]
    assert await service.snapshot(parked.run_id) == before

    # The ticket is still open: a plain allow goes through.
    status, _ = await decide(service, ticket_id, {"decision": "allow"})
    assert status == 200
    await service.finished(parked.run_id)
    assert len(service.ledger) == 1


async def test_api_refuses_edits_of_a_tool_that_forbids_them(service: Any) -> None:
    parked = await service.park("pair", requester="U2")
    by_tool = {p.call.name: p for p in parked.pending}
    assert by_tool["delete_branch"].editable == ()
    before = await service.snapshot(parked.run_id)
    status, body = await decide(
        service,
        by_tool["delete_branch"].ticket_id,
        {"decision": "allow", "args": {"name": "main"}},
        token="tok-u2",
    )
    assert status == 422
    assert body["error"] == "not_editable"
    assert await service.snapshot(parked.run_id) == before


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "deny", "args": {"amount": 1}},
        {"decision": "allow", "args": [1, 2]},
        {"decision": "allow", "args": "amount=1"},
        {"answer": {"x": 1}, "args": {"amount": 1}},
    ],
)
async def test_api_refuses_malformed_args(service: Any, body: Any) -> None:
    parked = await service.park("bank")
    before = await service.snapshot(parked.run_id)
    status, answer = await decide(service, parked.pending[0].ticket_id, body)
    assert status == 400, answer
    assert await service.snapshot(parked.run_id) == before


async def test_api_a_stranger_cannot_edit_a_call(service: Any) -> None:
    parked = await service.park("bank")
    before = await service.snapshot(parked.run_id)
    status, body = await decide(
        service,
        parked.pending[0].ticket_id,
        {"decision": "allow", "args": {"amount": 1}},
        token="tok-u2",
    )
    assert status == 404  # a ticket one may not see does not exist for them
    # The refusal may name the ticket id, random hex that may hold "250" itself.
    assert "250" not in str(body).replace(parked.pending[0].ticket_id, "")
    assert await service.snapshot(parked.run_id) == before


async def test_api_batch_decides_each_ticket_on_its_own(service: Any) -> None:
    pair = await service.park("pair", requester="U2")
    bank = await service.park("bank")
    by_tool = {p.call.name: p.ticket_id for p in pair.pending}
    items = [
        {"ticket_id": by_tool["send_email"], "decision": "allow", "args": {"subject": "Shipped"}},
        {"ticket_id": by_tool["delete_branch"], "decision": "deny", "reason": "keep it"},
        {"ticket_id": bank.pending[0].ticket_id, "decision": "allow"},  # not U2's to see
        {"ticket_id": "tk_nope", "decision": "allow"},
        {"decision": "allow"},  # names no ticket
        {"ticket_id": by_tool["send_email"], "decision": "maybe"},
    ]
    bank_before = await service.snapshot(bank.run_id)
    status, body = await service.api(
        "POST", "/api/decisions", token="tok-u2", json={"decisions": items}
    )
    assert status == 200, body
    assert (body["applied"], body["refused"]) == (2, 4)
    outcomes = [(r.get("ticket_id"), r["status"], r["applied"]) for r in body["results"]]
    assert outcomes == [
        (by_tool["send_email"], 200, True),
        (by_tool["delete_branch"], 200, True),
        (bank.pending[0].ticket_id, 404, False),
        ("tk_nope", 404, False),
        (None, 400, False),
        (by_tool["send_email"], 400, False),
    ]
    assert body["results"][2]["error"] == "unknown_ticket"
    await service.finished(pair.run_id)
    assert service.ledger == [
        ("send_email", {"to": "ops@example.com", "subject": "Shipped"})
    ]  # the branch was denied
    assert (await service.snapshot(bank.run_id))[:3] == bank_before[:3]  # the ledger moved

    # The same batch again: each ticket is now refused as already decided.
    status, body = await service.api(
        "POST", "/api/decisions", token="tok-u2", json={"decisions": items[:2]}
    )
    assert status == 200
    assert [r["error"] for r in body["results"]] == ["already_decided"] * 2


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"decisions": []},
        {"decisions": "all"},
        {"decisions": [{"ticket_id": "tk_x", "decision": "allow"}] * 101},
    ],
)
async def test_api_batch_refuses_a_malformed_body(service: Any, body: Any) -> None:
    status, answer = await service.api("POST", "/api/decisions", json=body)
    assert status == 400, answer


# -- the console -------------------------------------------------------------------------


def edit_form_of(html: str, ticket_id: str) -> str:
    found = re.search(
        rf'<section class="card ticket" id="ticket-{ticket_id}".*?</section>', html, re.S
    )
    assert found, html
    return found.group(0)


async def test_console_edit_form_is_prefilled_and_allows_with_changes(service: Any) -> None:
    parked = await service.park("bank")
    ticket_id = parked.pending[0].ticket_id
    csrf = await service.login()
    card = edit_form_of(await page(service, "/tickets"), ticket_id)
    assert "Allow with changes" in card
    assert 'name="field.amount" value="250.0"' in card  # prefilled with the current value
    assert 'name="field.account"' not in card  # not an editable argument
    assert 'name="field.api_key"' not in card and SECRET_KEY not in card  # never a secret

    here = f"/runs/{parked.run_id}"
    response = await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "edit", "field.amount": "200", "next": here},
    )
    assert response.headers["Location"] == here
    await service.finished(parked.run_id)
    assert service.ledger == [("transfer", {"account": "ACME-1", "amount": 200.0})]
    html = await page(service, here)
    assert "Allowed with changes transfer." in html
    assert "Allow with changes: transfer by Uma via console" in html
    assert "amount 250.0 → 200.0 by Uma" in html  # the flight recorder shows the change


async def test_console_a_stranger_sees_no_edit_form_and_cannot_post_one(service: Any) -> None:
    parked = await service.park("bank")
    ticket_id = parked.pending[0].ticket_id
    before = await service.snapshot(parked.run_id)
    csrf = await service.login("tok-u2")
    assert ticket_id not in await page(service, "/tickets")
    response = await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "edit", "field.amount": "1"},
        status=404,
    )
    # The refusal names the ticket id, random hex that may hold "250" itself.
    assert "250" not in (await response.text()).replace(ticket_id, "")
    assert await service.snapshot(parked.run_id) == before


async def test_console_shows_edit_refusals_next_to_the_form(service: Any) -> None:
    wires = await service.park("wires")
    ticket_id = wires.pending[0].ticket_id
    csrf = await service.login()
    before = await service.snapshot(wires.run_id)
    response = await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "edit", "field.amount": "lots", "next": "/tickets"},
        status=422,
    )
    assert 'data-field="amount"' in await response.text()
    response = await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "edit", "field.amount": "5000", "next": "/tickets"},
        status=422,
    )
    assert "denies the call with the changed arguments" in await response.text()
    assert await service.snapshot(wires.run_id) == before


async def test_console_offers_no_edit_for_a_tool_that_forbids_it(service: Any) -> None:
    pair = await service.park("pair", requester="U2")
    by_tool = {p.call.name: p.ticket_id for p in pair.pending}
    csrf = await service.login("tok-u2")
    html = await page(service, f"/runs/{pair.run_id}")
    assert "Allow with changes" in edit_form_of(html, by_tool["send_email"])
    assert "Allow with changes" not in edit_form_of(html, by_tool["delete_branch"])
    before = await service.snapshot(pair.run_id)
    response = await post(
        service,
        f"/tickets/{by_tool['delete_branch']}/decide",
        {"csrf": csrf, "action": "edit", "field.name": "main"},
        status=409,
    )
    assert "cannot be changed" in await response.text()
    assert await service.snapshot(pair.run_id) == before


async def test_console_decides_a_runs_calls_together(service: Any) -> None:
    pair = await service.park("pair", requester="U2")
    by_tool = {p.call.name: p.ticket_id for p in pair.pending}
    csrf = await service.login("tok-u2")
    here = f"/runs/{pair.run_id}"
    html = await page(service, here)
    assert 'id="batch-form"' in html and "2 calls" in html
    for ticket_id in by_tool.values():
        assert f'value="{ticket_id}" form="batch-form" checked' in html

    # One of them is decided elsewhere meanwhile: the other is still applied.
    status, _ = await decide(service, by_tool["send_email"], {"decision": "deny"}, "tok-u2")
    assert status == 200
    response = await post(
        service,
        "/tickets/batch",
        [
            ("csrf", csrf),
            ("action", "allow"),
            ("next", here),
            ("ticket", by_tool["send_email"]),
            ("ticket", by_tool["delete_branch"]),
        ],
    )
    assert response.headers["Location"] == here
    html = await page(service, here)
    assert "Allowed 1 of 2 calls." in html
    assert f"{by_tool['send_email']}: not decided" in html
    await service.finished(pair.run_id)
    assert service.ledger == [("delete_branch", {"name": "release-2.4"})]


async def test_console_batch_refuses_a_stranger_and_bad_forms(service: Any) -> None:
    pair = await service.park("pair", requester="U2")
    ids = [p.ticket_id for p in pair.pending]
    before = await service.snapshot(pair.run_id)
    csrf = await service.login("tok-u1")
    assert 'id="batch-form"' not in await page(service, "/tickets")  # nothing U1 may decide
    data = [("csrf", csrf), ("action", "allow"), *(("ticket", t) for t in ids)]
    await post(service, "/tickets/batch", data)
    html = await page(service, "/tickets")
    assert "Allowed 0 of 2 calls." in html
    assert "send_email" not in html  # a stranger learns nothing about the calls
    for bad in (
        [("csrf", csrf), ("action", "allow")],
        [("csrf", csrf), ("action", "explode"), ("ticket", ids[0])],
    ):
        await post(service, "/tickets/batch", bad, status=400)
    await post(service, "/tickets/batch", [("action", "allow"), ("ticket", ids[0])], status=403)
    assert await service.snapshot(pair.run_id) == before
