"""MCP elicitation as typed input, against the SDK's server whose ``restart`` tool calls
``ctx.elicit(...)`` over stdio: the request becomes a typed-input ticket answered in the
console (or by the runtime for a stranger), and the answer, a decline, a cancel or an
expiry goes back to the server as its ``ElicitResult`` while the call waits."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mcpbed import HttpProcess, McpBed, calls, http_server, stdio_server, until
from testkit import echo_model

from adapters.mcp import Binding, ToolKnobs
from adapters.mcp.elicitation import (
    HOLDER_GONE_REASON,
    ORIGIN_KEY,
    Asking,
    InputDesk,
    asking_now,
    check_schema,
)
from adapters.web.forms import FIELD_PREFIX
from runtime import (
    Actor,
    Agent,
    InputData,
    PendingEntry,
    Permission,
    RunStatus,
    TicketStatus,
    ToolContext,
    Unauthorized,
)

pytestmark = pytest.mark.timeout(120)


def ops_agent() -> Agent:
    return Agent("ops", "Operate.", echo_model(("restart", {"service": "api"})))


async def bed_with(make_bed: Any, state: Path, *, elicitation: bool = True, **knobs: Any) -> McpBed:
    ops = ops_agent()
    server = stdio_server(state, env={"FAKE_MCP_INPUT": "1"}, elicitation=elicitation)
    rule = ToolKnobs("infra.restart", where="rule", permission=Permission.ALLOW, **knobs)
    bed: McpBed = await make_bed([ops], [server], [Binding(ops, ("infra",), (rule,))])
    bed.hub.attach(bed.runtime)
    return bed


async def input_ticket(bed: McpBed) -> PendingEntry:
    async def found() -> PendingEntry | None:
        tickets = await bed.runtime.open_tickets()
        return next((t for t in tickets if t.status == "input"), None)

    try:
        ticket: PendingEntry = await until(found, "an open input ticket", seconds=8)
    except AssertionError:
        for run in await bed.runtime.list_runs():
            print("RUN", run.run_id, run.agent, run.status, run.error, run.text)
            for e in await bed.runtime.events(run.run_id):
                print("   ", e["kind"], e["data"])
        raise
    return ticket


def restarts(state: Path) -> list[dict[str, Any]]:
    return [c["args"] for c in calls(state) if c["tool"] == "restart"]


async def console_answer(
    bed: McpBed, ticket_id: str, action: str, **fields: str
) -> tuple[int, str]:
    assert bed.client is not None
    csrf = await bed.login()
    named = {(k if k == "reason" else FIELD_PREFIX + k): v for k, v in fields.items()}
    response = await bed.client.post(
        f"/tickets/{ticket_id}/decide",
        data={"csrf": csrf, "action": action, **named},
        allow_redirects=False,
    )
    return response.status, await response.text()


async def test_an_answer_in_the_console_goes_back_to_the_server(make_bed: Any, state: Path) -> None:
    bed = await bed_with(make_bed, state)
    run_id = await bed.start("ops")

    ticket = await input_ticket(bed)
    assert ticket.call.name == "restart"
    full = await bed.runtime.ticket(ticket.ticket_id)
    assert full.agent == "ops.elicitation" and full.requester == "U1"
    assert full.target.prompt == "Restarting api: which change ticket?"  # type: ignore[union-attr]
    # The run that made the call is still running its call: nothing of it is parked.
    assert (await bed.runtime.get(run_id)).status is RunStatus.RUNNING

    status, page = await console_answer(bed, ticket.ticket_id, action="input", ticket="0", note="x")
    assert status == 422, page  # 0 is under the schema's minimum of 1
    assert "greater than or equal to 1" in page or "minimum" in page.lower(), page
    assert restarts(state) == []  # nothing went to the server
    assert (await bed.runtime.ticket(ticket.ticket_id)).status is TicketStatus.OPEN

    status, page = await console_answer(
        bed, ticket.ticket_id, action="input", ticket="42", note="after hours"
    )
    assert status == 303, page
    done = await bed.finished(run_id)
    assert "restarted api under change 42" in (done.text or "")
    assert restarts(state) == [
        {"service": "api", "action": "accept", "data": {"ticket": 42, "note": "after hours"}}
    ]


async def test_a_decline_reaches_the_server_as_decline(make_bed: Any, state: Path) -> None:
    bed = await bed_with(make_bed, state)
    run_id = await bed.start("ops")
    ticket = await input_ticket(bed)

    status, _ = await console_answer(bed, ticket.ticket_id, action="deny", reason="not now")
    assert status == 303
    done = await bed.finished(run_id)
    assert "did not restart api: decline" in (done.text or "")
    assert restarts(state) == [{"service": "api", "action": "decline"}]


async def test_a_cancelled_input_run_reaches_the_server_as_cancel(
    make_bed: Any, state: Path
) -> None:
    bed = await bed_with(make_bed, state)
    run_id = await bed.start("ops")
    ticket = await input_ticket(bed)

    await bed.runtime.cancel(ticket.run_id, actor="U1", reason="asked by mistake")
    done = await bed.finished(run_id)
    assert "did not restart api: cancel" in (done.text or "")
    assert (await bed.runtime.ticket(ticket.ticket_id)).status is TicketStatus.VOIDED


async def test_an_expired_ticket_reaches_the_server_as_cancel(make_bed: Any, state: Path) -> None:
    bed = await bed_with(make_bed, state, deadline=timedelta(seconds=0.5))
    run_id = await bed.start("ops")
    ticket = await input_ticket(bed)

    async def expired() -> bool:
        return ticket.ticket_id in await bed.runtime.expire_overdue()

    await until(expired, "the input ticket expiring")
    done = await bed.finished(run_id)
    assert "did not restart api: cancel" in (done.text or "")
    assert restarts(state) == [{"service": "api", "action": "cancel"}]


async def test_a_stranger_may_not_answer_nor_see_it(make_bed: Any, state: Path) -> None:
    bed = await bed_with(make_bed, state)
    run_id = await bed.start("ops")
    ticket = await input_ticket(bed)
    stranger = Actor(id="U9")

    with pytest.raises(Unauthorized):
        await bed.runtime.decide(ticket.ticket_id, InputData(data={"ticket": 7}), stranger)
    assert await bed.runtime.open_tickets(viewer=stranger) == []
    assert restarts(state) == []
    assert (await bed.runtime.ticket(ticket.ticket_id)).status is TicketStatus.OPEN

    await bed.runtime.decide(ticket.ticket_id, InputData(data={"ticket": 7}), Actor(id="U1"))
    done = await bed.finished(run_id)
    assert "restarted api under change 7" in (done.text or "")


async def test_the_tools_approvers_answer_not_the_requester(make_bed: Any, state: Path) -> None:
    bed = await bed_with(make_bed, state, approvers=("U2",))
    run_id = await bed.start("ops")
    ticket = await input_ticket(bed)

    with pytest.raises(Unauthorized):
        await bed.runtime.decide(ticket.ticket_id, InputData(data={"ticket": 3}), Actor(id="U1"))
    await bed.runtime.decide(ticket.ticket_id, InputData(data={"ticket": 3}), Actor(id="U2"))
    done = await bed.finished(run_id)
    assert "restarted api under change 3" in (done.text or "")


async def test_without_elicitation_the_capability_is_not_declared(
    make_bed: Any, state: Path
) -> None:
    bed = await bed_with(make_bed, state, elicitation=False)
    done = await bed.finished(await bed.start("ops"))
    assert done.status is RunStatus.DONE
    assert await bed.runtime.open_tickets() == []
    assert restarts(state) == []  # the server's elicit failed before it logged


async def test_the_sweep_voids_an_input_run_whose_call_is_not_in_flight(
    make_bed: Any, state: Path
) -> None:
    bed = await bed_with(make_bed, state)
    run_id = await bed.start("ops")
    live = await input_ticket(bed)
    desk = InputDesk(bed.runtime)
    assert await desk.sweep() == []  # its call is in flight: left alone

    # An input run whose call nobody holds any more (its process died, the call was
    # recovered by its replay policy): the same run, another call.
    opening = json.dumps({"tool": "restart", "message": "Which?", "schema": SCHEMA})
    asked = {"run_id": run_id, "call_id": "call_gone", "attempt": 1}
    orphan = await bed.runtime.start(
        "ops.elicitation", opening, requester="U1", origin={ORIGIN_KEY: asked}, wait=True
    )
    parked = await bed.parked(orphan.run_id)
    orphan_ticket = parked.pending[0].ticket_id

    assert await desk.sweep() == [orphan.run_id]
    assert (await bed.runtime.ticket(orphan_ticket)).status is TicketStatus.VOIDED
    cancelled = await bed.runtime.get(orphan.run_id)
    assert cancelled.status is RunStatus.CANCELLED
    assert HOLDER_GONE_REASON in json.dumps(await bed.runtime.events(orphan.run_id))
    assert (await bed.runtime.ticket(live.ticket_id)).status is TicketStatus.OPEN


SCHEMA = {"type": "object", "properties": {"ticket": {"type": "integer"}}}


async def test_a_server_over_streamable_http_gets_the_answer(make_bed: Any, state: Path) -> None:
    served = await HttpProcess.start(state, FAKE_MCP_INPUT="1")
    try:
        ops = ops_agent()
        rule = ToolKnobs("infra.restart", where="rule", permission=Permission.ALLOW)
        server = http_server(served.url, elicitation=True)
        bed: McpBed = await make_bed([ops], [server], [Binding(ops, ("infra",), (rule,))])
        bed.hub.attach(bed.runtime)
        run_id = await bed.start("ops")
        ticket = await input_ticket(bed)
        await bed.runtime.decide(ticket.ticket_id, InputData(data={"ticket": 5}), Actor(id="U1"))
        done = await bed.finished(run_id)
        assert "restarted api under change 5" in (done.text or "")
    finally:
        served.kill()


def test_only_flat_primitive_schemas_are_asked() -> None:
    flat = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    assert check_schema(flat) is None
    nested = {"type": "object", "properties": {"a": {"type": "object"}}}
    assert check_schema(nested) == "property 'a' is not a string, number, integer or boolean"
    assert check_schema({"type": "string"}) == "the requested schema is not an object"
    assert HOLDER_GONE_REASON.startswith("the process holding")


def test_a_request_outside_a_call_goes_to_the_only_call_in_flight() -> None:
    def asking(call_id: str) -> Asking:
        context = ToolContext("run_1", "th_1", "ops", call_id, "xk_" + call_id, 1, None, None, "U1")
        return Asking(context, "infra", "restart")

    one = asking("call_1")
    assert asking_now({}) is None
    assert asking_now({"call_1": one}) is one
    assert asking_now({"call_1": one, "call_2": asking("call_2")}) is None  # ambiguous
