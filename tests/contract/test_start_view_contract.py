"""What `Runtime.start` returns for a run that parked is the run as the store holds it.

A run parked by the model turn that opened its tickets is returned as that turn left it,
without reading it back; every other way of parking reads it. Either way the result must
equal `Runtime.get` right after, on every store, down to how the arguments read back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

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
from runtime.store.base import Store, Transaction

Call = tuple[str, dict[str, Any]]


class CountingStore:
    """A store that counts the transactions opened through it."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.opened = 0

    async def migrate(self) -> None:
        await self.inner.migrate()

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        @asynccontextmanager
        async def opened() -> AsyncIterator[Transaction]:
            self.opened += 1
            async with self.inner.transaction() as tx:
                yield tx

        return opened()

    async def close(self) -> None:
        await self.inner.close()

    @property
    def commits(self) -> int:
        return self.inner.commits


def asking(*calls: Call) -> ScriptedModel:
    """A model whose first turn asks for `calls`, and that then reports their results."""

    def reply(request: ModelRequest) -> dict[str, Any]:
        if not any(m.get("role") == "assistant" for m in request.messages):
            return tool_call_reply(*calls)
        return final_reply("done")

    return ScriptedModel(reply)


def shop(*calls: Call) -> Agent:
    agent = Agent("shop", "Help.", asking(*calls), version="1")

    @agent.tool(permission="ask", secret=["token"], editable=["boxes"])
    async def ship(order: str, boxes: tuple[int, ...], token: str) -> str:
        return f"shipped {order}"

    @agent.tool(permission="ask")
    async def refund(order: str, amount: float) -> str:
        return f"refunded {amount} on {order}"

    @agent.tool(permission="allow")
    async def lookup(order: str) -> str:
        return f"{order} is paid"

    return agent


async def started(store: Store, agent: Agent, *more: Agent) -> tuple[RunResult, int]:
    """Start `agent`; what start returned, checked against the store, and how many
    transactions it opened."""
    counting = CountingStore(store)
    runtime = Runtime(counting, [agent, *more], worker_id="w1")  # type: ignore[arg-type]
    result = await runtime.start(agent.name, "go", requester="U1", origin={"platform": "api"})
    opened = counting.opened
    assert result.status is RunStatus.AWAITING, result.error
    assert result == await runtime.get(result.run_id)
    return result, opened


async def test_a_run_parked_by_its_first_turn_is_returned_unread(store: Store) -> None:
    result, opened = await started(store, shop(("refund", {"order": "A1", "amount": 5})))
    (entry,) = result.pending
    assert entry.call.arguments == {"order": "A1", "amount": 5.0}
    assert opened == 2  # the insert and the model turn, nothing read back


async def test_arguments_read_as_stored_secrets_masked_and_a_batch_in_order(
    store: Store,
) -> None:
    result, opened = await started(
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
    assert opened == 2


async def test_a_turn_that_also_ran_a_tool_parks_after_it_and_reads_the_run(
    store: Store,
) -> None:
    result, opened = await started(
        store, shop(("lookup", {"order": "A1"}), ("refund", {"order": "A1", "amount": 5}))
    )
    (entry,) = result.pending
    assert entry.call.name == "refund"
    assert opened > 2


async def test_a_run_waiting_on_its_sub_agent_is_read_with_the_child(store: Store) -> None:
    billing = shop(("refund", {"order": "A1", "amount": 5}))
    billing.name = "billing"
    ops = Agent(
        "ops",
        "Operate.",
        asking((delegate_tool_name("billing"), {"task_key": "A1", "task": "refund A1"})),
        subagents=[billing],
    )
    result, _opened = await started(store, ops)
    (entry,) = result.pending
    assert entry.run_id != result.run_id
    assert len(result.children) == 1
