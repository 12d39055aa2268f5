"""What `Runtime.start` returns for a run that parked is the run as the store holds it.

A run parked by the model turn that opened its tickets is returned as that turn left it,
without reading it back; every other way of parking reads it. Either way the result must
equal `Runtime.get` right after, on every store, down to how the arguments read back.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from store_trace import TracingStore

from runtime import (
    Agent,
    ModelRequest,
    RunResult,
    RunStatus,
    Runtime,
    ScriptedModel,
    delegate_tool_name,
    final_reply,
    tool_call_reply,
)
from runtime.store.base import Store

Call = tuple[str, dict[str, Any]]


def asking(*calls: Call) -> ScriptedModel:
    """A model whose first turn asks for `calls`, and that then reports their results."""

    def reply(request: ModelRequest) -> dict[str, Any]:
        if not any(m.get("role") == "assistant" for m in request.messages):
            return tool_call_reply(*calls)
        return final_reply("done")

    return ScriptedModel(reply)


def shop(*calls: Call, name: str = "shop") -> Agent:
    agent = Agent(name, "Help.", asking(*calls), version="1")

    @agent.tool(permission="ask", secret=["token"], editable=["boxes"])
    async def ship(order: str, boxes: tuple[int, ...], token: str) -> str:
        return f"shipped {order}"

    @agent.tool(permission="ask", approvers=["U2", "U3"], four_eyes=True, deadline=90.5)
    async def refund(order: str, amount: float) -> str:
        return f"refunded {amount} on {order}"

    @agent.tool(permission="allow")
    async def lookup(order: str) -> str:
        return f"{order} is paid"

    return agent


async def started(store: Store, agent: Agent, *more: Agent) -> tuple[RunResult, list[bool]]:
    """Start `agent`; what start returned, checked against the store, and whether each
    transaction it opened wrote."""
    traced = TracingStore(store, datetime.now(UTC))
    runtime = Runtime(traced, [agent, *more], worker_id="w1")
    traced.phase("start")
    result = await runtime.start(agent.name, "go", requester="U1", origin={"platform": "api"})
    wrote = [block.wrote for block in traced.phases[-1].blocks]
    assert result.status is RunStatus.AWAITING, result.error
    assert result == await runtime.get(result.run_id)
    return result, wrote


async def test_a_run_parked_by_its_first_turn_is_returned_unread(store: Store) -> None:
    result, wrote = await started(store, shop(("refund", {"order": "A1", "amount": 5})))
    (entry,) = result.pending
    assert entry.call.arguments == {"order": "A1", "amount": 5.0}
    assert entry.ticket.approvers == ("U2", "U3") and entry.ticket.four_eyes
    assert entry.ticket.deadline is not None
    assert wrote == [True, True]  # the insert and the model turn, nothing read back


async def test_arguments_read_as_stored_secrets_masked_and_a_batch_in_order(
    store: Store,
) -> None:
    result, wrote = await started(
        store,
        shop(
            ("ship", {"order": "A1", "boxes": [3, 4], "token": "s3cret"}),
            ("refund", {"order": "A1", "amount": 5}),
        ),
    )
    first, second = result.pending
    assert first.call.name == "ship" and second.call.name == "refund"
    assert first.call.arguments["boxes"] == [3, 4]  # a list, as JSON gives it back
    assert "s3cret" not in repr(first.call.arguments)
    assert first.editable == ("boxes",)
    assert wrote == [True, True]


async def test_a_turn_that_also_ran_a_tool_parks_after_it_and_reads_the_run(
    store: Store,
) -> None:
    result, wrote = await started(
        store, shop(("lookup", {"order": "A1"}), ("refund", {"order": "A1", "amount": 5}))
    )
    (entry,) = result.pending
    assert entry.call.name == "refund"
    assert wrote[-1] is False  # read back


async def test_a_run_waiting_on_its_sub_agent_is_read_with_the_child(store: Store) -> None:
    billing = shop(("refund", {"order": "A1", "amount": 5}), name="billing")
    ops = Agent(
        "ops",
        "Operate.",
        asking((delegate_tool_name("billing"), {"task_key": "A1", "task": "refund A1"})),
        subagents=[billing],
    )
    result, wrote = await started(store, ops)
    (entry,) = result.pending
    assert entry.run_id != result.run_id
    assert len(result.children) == 1
    assert wrote[-1] is False  # read back
