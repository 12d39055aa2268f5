"""One person across edges in the console: the Link page's one-time code, and an
approver listed by their Slack id deciding in the console once linked."""

from __future__ import annotations

import re
from typing import Any

from runtime import TicketStatus


async def _page(service: Any, path: str, status: int = 200) -> str:
    response = await service.client.get(path)
    text = await response.text()
    assert response.status == status, text
    return str(text)


async def test_the_link_page_gives_a_one_time_code(service: Any) -> None:
    csrf = await service.login("tok-u1")
    html = await _page(service, "/link")
    assert "Get a link code" in html and "link-code" not in html
    response = await service.client.post("/link", data={"csrf": csrf})
    html = await response.text()
    assert response.status == 200, html
    found = re.search(r'<code id="link-code">([^<]+)</code>', html)
    assert found is not None
    code = found.group(1)
    assert f"/signoff link {code}" in html
    identities = service.runtime.identities
    assert await identities.redeem_link_code(code, "710000000000000001") == "U1"
    assert await identities.redeem_link_code(code, "710000000000000009") is None
    html = await _page(service, "/link")
    assert "Linked to you now: 710000000000000001." in html
    # Without the form's token, no code is made.
    refused = await service.client.post("/link", data={})
    assert refused.status == 403


async def test_an_approver_listed_by_slack_id_decides_in_the_console_once_linked(
    service: Any,
) -> None:
    parked = await service.park("deployer", requester="U1")  # approvers: U2, four-eyes
    ticket_id = parked.pending[0].ticket_id
    csrf = await service.login("tok-u3")  # Una's console identity is U3
    before = await service.snapshot(parked.run_id)
    response = await service.client.post(
        f"/tickets/{ticket_id}/decide",
        data={"csrf": csrf, "action": "allow", "next": "/tickets"},
        allow_redirects=False,
    )
    assert response.status in (303, 403, 404)
    assert await service.snapshot(parked.run_id) == before
    # U2 (the listed Slack id) and U3 are one person.
    await service.runtime.identities.link_all({"una": ["U2", "U3"]}, "file")
    html = await _page(service, f"/runs/{parked.run_id}")
    assert f'action="/tickets/{ticket_id}/decide"' in html
    response = await service.client.post(
        f"/tickets/{ticket_id}/decide",
        data={"csrf": csrf, "action": "allow", "next": "/tickets"},
        allow_redirects=False,
    )
    assert response.status == 303
    await service.finished(parked.run_id)
    ticket = await service.runtime.ticket(ticket_id)
    assert (ticket.status, ticket.decided_by) == (TicketStatus.DECIDED, "U3")
    assert service.ledger == [("deploy", {"service": "api"})]


async def test_a_requester_linked_to_a_console_identity_is_refused_there(service: Any) -> None:
    await service.runtime.identities.link_all({"uma": ["U1", "U2"]}, "file")
    parked = await service.park("deployer", requester="U1")  # four-eyes; U2 is listed
    ticket_id = parked.pending[0].ticket_id
    csrf = await service.login("tok-u2")
    before = await service.snapshot(parked.run_id)
    await service.client.post(
        f"/tickets/{ticket_id}/decide",
        data={"csrf": csrf, "action": "allow", "next": "/tickets"},
        allow_redirects=False,
    )
    assert await service.snapshot(parked.run_id) == before
    ticket = await service.runtime.ticket(ticket_id)
    assert ticket.status is TicketStatus.OPEN


async def test_a_linked_approver_sees_and_decides_over_the_api(service: Any) -> None:
    parked = await service.park("deployer", requester="U1")  # approvers: U2, four-eyes
    ticket_id = parked.pending[0].ticket_id
    status, _ = await service.api("GET", f"/api/runs/{parked.run_id}", token="tok-u3")
    assert status == 404
    await service.runtime.identities.link("U3", "U2", "api")  # U3's person is U2
    status, body = await service.api("GET", f"/api/runs/{parked.run_id}", token="tok-u3")
    assert status == 200, body
    status, body = await service.api(
        "POST", f"/api/tickets/{ticket_id}/decision", token="tok-u3", json={"decision": "allow"}
    )
    assert status == 200, body
    await service.finished(parked.run_id)
    assert service.ledger == [("deploy", {"service": "api"})]
