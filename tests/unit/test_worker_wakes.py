"""What wakes the worker's loop, and what it then looks at."""

from __future__ import annotations

import asyncio
from typing import Any

from runtime import (
    Accepted,
    Actor,
    Agent,
    Allow,
    RunStatus,
    Runtime,
    ScriptedModel,
    final_reply,
    tool_call_reply,
)
from runtime.worker import Worker


def payments() -> Agent:
    model = ScriptedModel([tool_call_reply(("pay", {"amount": 5})), final_reply("Paid.")])
    agent = Agent("payments", "Pay.", model)

    @agent.tool(permission="ask")
    def pay(amount: int) -> str:
        """Pay."""
        return "ok"

    return agent


class Looks:
    """The loop's looks at received decisions (the runtime's own method, wrapped), and
    the model turns committed (the runtime's checkpoints): what the tests wait for."""

    def __init__(self) -> None:
        self.reads = 0
        self.looked = asyncio.Event()
        self.turns = 0
        self.turned = asyncio.Event()

    def count_reads(self, rt: Runtime) -> None:
        apply = rt.apply_received

        async def counted(**kwargs: Any) -> Any:
            self.reads += 1
            self.looked.set()
            return await apply(**kwargs)

        rt.apply_received = counted  # type: ignore[method-assign]

    def checkpoint(self, point: str, info: dict[str, Any]) -> None:
        if point == "model_call_committed":
            self.turns += 1
            self.turned.set()

    async def turn(self, number: int) -> None:
        """Wait until `number` model turns were committed."""
        async with asyncio.timeout(20):
            while self.turns < number:
                self.turned.clear()
                await self.turned.wait()


async def click(rt: Runtime, run_id: str) -> None:
    """Store an Allow on the run's ticket, as a chat edge does (`Runtime.accept`)."""
    ticket = (await rt.get(run_id)).pending[0].ticket
    outcome = await rt.accept(
        ticket.ticket_id,
        Allow(),
        Actor(id="U1", platform="slack"),
        correlation=ticket.correlation,
        source="slack",
        delivery_id="click-1",
        reply=None,
    )
    assert isinstance(outcome, Accepted) and outcome.stored


async def test_waking_for_runs_skips_received_decisions_and_a_wake_looks_at_them(
    runtime_factory: Any,
) -> None:
    looks = Looks()
    rt = runtime_factory(payments(), checkpoint=looks.checkpoint)
    looks.count_reads(rt)
    worker = Worker(rt, poll_seconds=60)  # no poll during the test: only wake-ups
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.wait_for(looks.looked.wait(), 20)  # the first look: everything
        started = await rt.start("payments", "pay 5", requester="U1", wait=False)
        worker.wake_runs()
        await looks.turn(1)  # parked on its ticket
        assert (await rt.get(started.run_id)).status is RunStatus.AWAITING
        # The start and the end of the drive each woke the loop: neither looked again.
        assert looks.reads == 1
        await click(rt, started.run_id)
        worker.wake()
        await looks.turn(2)
        assert (await rt.get(started.run_id)).status is RunStatus.DONE
        assert looks.reads >= 2
    finally:
        stop.set()
        await loop
        await worker.drain(5)


async def test_a_poll_applies_a_decision_nobody_woke_the_loop_for(runtime_factory: Any) -> None:
    # E.g. stored by another process on the same SQLite file, or left by a dead one.
    looks = Looks()
    rt = runtime_factory(payments(), checkpoint=looks.checkpoint)
    looks.count_reads(rt)
    started = await rt.start("payments", "pay 5", requester="U1")
    assert looks.turns == 1
    worker = Worker(rt, poll_seconds=0.05)
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.wait_for(looks.looked.wait(), 20)
        await click(rt, started.run_id)
        worker.wake_runs()  # says nothing was received: only a poll finds the decision
        await looks.turn(2)
        assert (await rt.get(started.run_id)).status is RunStatus.DONE
    finally:
        stop.set()
        await loop
        await worker.drain(5)
