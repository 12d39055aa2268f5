"""Delegation at the edges: the deepest request, naming its parent chain, on the API, the
console, Slack and Discord cards; deciding it there finishes the parent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from testkit import echo_model

from adapters.discord import cards
from adapters.slack import blocks
from runtime import Agent, RunStatus, delegate_tool_name
from runtime.domain.notifications import ApprovalRequested, read_notification

pytestmark = pytest.mark.timeout(60)


def _team(service: Any) -> Agent:
    billing = Agent(
        "billing",
        "Refund orders.",
        echo_model(("refund", {"order": "A1", "amount": 120.0})),
        description="refunds orders",
    )

    @billing.tool(permission="ask")
    async def refund(order: str, amount: float) -> str:
        service.ledger.append(("refund", {"order": order}))
        return f"refunded {amount} on {order}"

    arguments = {"task_key": "refund-A1", "task": "refund A1"}
    ops = Agent(
        "ops",
        "Operate.",
        echo_model((delegate_tool_name("billing"), arguments)),
        subagents=[billing],
    )
    service.runtime.register(ops)
    return ops


async def test_the_api_shows_the_childs_request_and_deciding_it_finishes_the_parent(
    service: Any,
) -> None:
    _team(service)
    parked = await service.park("ops")
    status, run = await service.api("GET", f"/api/runs/{parked.run_id}")
    assert status == 200
    (pending,) = run["pending"]
    assert pending["agent"] == "billing"
    assert pending["tool"] == "refund"
    assert pending["chain"] == ["ops", "billing"]
    (child,) = run["children"]
    assert child["agent"] == "billing"
    assert child["task_key"] == "refund-A1"
    assert child["status"] == "awaiting"
    assert run["children_counters"]["runs"] == 1
    assert pending["run_id"] == child["run_id"]

    status, body = await service.api("GET", f"/api/runs/{child['run_id']}")
    assert status == 200
    assert body["parent_run_id"] == parked.run_id
    assert [link["agent"] for link in body["chain"]] == ["ops", "billing"]
    status, _ = await service.api("GET", f"/api/runs/{child['run_id']}", token="tok-u3")
    assert status == 404  # a stranger sees neither the parent nor its child

    status, listed = await service.api("GET", "/api/tickets")
    assert [t["ticket_id"] for t in listed["tickets"]] == [pending["ticket_id"]]

    status, _ = await service.api(
        "POST", f"/api/tickets/{pending['ticket_id']}/decision", json={"decision": "allow"}
    )
    assert status == 200
    service.worker.wake()
    done = await service.finished(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "Finished. Finished. refunded 120.0 on A1"
    assert service.ledger == [("refund", {"order": "A1"})]


async def test_the_parents_child_ticket_is_refused_with_a_clear_error(service: Any) -> None:
    _team(service)
    parked = await service.park("ops")
    async with service.store.transaction() as tx:
        (ticket,) = await tx.tickets_for_run(parked.run_id)
    before = await service.snapshot(parked.run_id)
    status, body = await service.api(
        "POST", f"/api/tickets/{ticket.ticket_id}/decision", json={"decision": "allow"}
    )
    assert status == 422, body
    assert body["error"] == "resolution_error"
    assert "sub-agent run" in json.dumps(body)
    assert await service.snapshot(parked.run_id) == before


async def test_the_console_names_the_chain_on_the_card_and_links_the_runs(
    service: Any,
) -> None:
    _team(service)
    parked = await service.park("ops")
    child_id = parked.pending[0].run_id
    await service.login()
    tickets = await (await service.client.get("/tickets")).text()
    assert "Sub-agent of" in tickets
    assert "<dd data-chain>ops</dd>" in tickets
    parent_page = await (await service.client.get(f"/runs/{parked.run_id}")).text()
    assert f'href="/runs/{child_id}"' in parent_page
    assert "refund-A1" in parent_page
    child_page = await (await service.client.get(f"/runs/{child_id}")).text()
    assert f'href="/runs/{parked.run_id}"' in child_page


def _note(chain: list[str]) -> ApprovalRequested:
    note = read_notification(
        "approval_requested",
        {
            "run_id": "run_2",
            "agent": "billing",
            "ticket_id": "tk_1",
            "target": {
                "kind": "tool_permission",
                "call_id": "c1",
                "tool": "refund",
                "args": {"order": "A1"},
            },
            "requester": "U1",
            "deciders": ["U1"],
            "chain": chain,
        },
    )
    assert isinstance(note, ApprovalRequested)
    return note


@pytest.mark.parametrize(
    ("chain", "shown"),
    [(["ops", "billing"], "sub-agent of `ops`"), (["top", "ops", "billing"], "`top` → `ops`")],
)
def test_slack_cards_name_the_parent_chain(chain: list[str], shown: str) -> None:
    rendered = json.dumps(blocks.approval_card(_note(chain), None), ensure_ascii=False)
    assert shown in rendered
    assert "sub-agent" not in json.dumps(blocks.approval_card(_note([]), None))


def test_discord_cards_name_the_parent_chain() -> None:
    message = cards.card(_note(["top", "ops", "billing"]), "c")
    agent_field = next(f for f in message["embeds"][0]["fields"] if f["name"] == "Agent")
    assert agent_field["value"] == "billing, sub-agent of top → ops"
    plain = cards.card(_note([]), "c")
    assert next(f for f in plain["embeds"][0]["fields"] if f["name"] == "Agent")["value"] == (
        "billing"
    )
