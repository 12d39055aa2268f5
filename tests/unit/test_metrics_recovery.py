"""Metrics of a worker's death: its run counted as lease-expired in the database-wide
figures, then recovered (and its unknown call uncertain) by the next worker."""

from __future__ import annotations

from typing import Any

import pytest
from metrics_kit import value
from prometheus_client import generate_latest

from bot.metrics import Metrics
from runtime import Agent, ManualClock, RunStatus, ScriptedModel, final_reply, tool_call_reply
from runtime.store.base import Store

LEASE = 30.0


class Abandon(BaseException):
    """The worker vanished mid-call."""


def _agent() -> Agent:
    model = ScriptedModel([tool_call_reply(("pay", {"cents": 5})), final_reply("Paid.")])
    agent = Agent("payments", "Pay.", model)

    @agent.tool(permission="allow", replay_policy="manual")
    async def pay(cents: int) -> str:
        return f"paid {cents}"

    return agent


async def test_a_dead_workers_run_is_seen_expired_then_recovered(
    runtime_factory: Any, store: Store, clock: ManualClock
) -> None:
    agent = _agent()

    def dies(point: str, info: dict[str, Any]) -> None:
        if point == "tool_returned":
            raise Abandon(point)

    doomed = runtime_factory(agent, checkpoint=dies, lease_seconds=LEASE)
    with pytest.raises(Abandon):
        await doomed.start("payments", "pay", requester="U1")
    metrics = Metrics(known_tools={"pay"})
    await metrics.read_figures(doomed)
    text = generate_latest(metrics.registry).decode()
    assert value(text, "signoff_runs", status=RunStatus.RUNNING.value) == 1
    assert value(text, "signoff_runs_lease_expired") == 0
    assert value(text, "signoff_queued_work") == 0

    clock.advance(LEASE + 1)
    await metrics.read_figures(doomed)
    text = generate_latest(metrics.registry).decode()
    assert value(text, "signoff_runs_lease_expired") == 1
    assert value(text, "signoff_queued_work") == 1

    fresh = runtime_factory(agent, checkpoint=metrics.observe, lease_seconds=LEASE)
    [result] = await fresh.recover()
    assert result.status is RunStatus.AWAITING
    await metrics.read_figures(fresh)
    text = generate_latest(metrics.registry).decode()
    assert value(text, "signoff_runs_recovered_total") == 1
    assert value(text, "signoff_uncertain_calls_total", tool="pay") == 1
    assert value(text, "signoff_uncertain_calls_waiting") == 1
    assert value(text, "signoff_runs_lease_expired") == 0
    assert value(text, "signoff_runs_driven_total", status="awaiting") == 1
