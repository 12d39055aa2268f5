"""The support example: triage hands the refund to the refunds sub-agent."""

from __future__ import annotations

from typing import Any

from examples import support
from runtime import RunStatus


async def test_the_support_example_waits_on_the_refund_and_reports_it(
    runtime_factory: Any,
) -> None:
    rt = runtime_factory(*support.agents())
    assert sorted(rt.agents) == ["refunds", "support"]
    parked = await rt.start("support", support.DEMO_INPUT, requester="U1")
    assert parked.status is RunStatus.AWAITING
    (entry,) = parked.pending
    assert entry.call.name == "refund"
    assert entry.chain == ("support", "refunds")
    assert entry.call.arguments == {"order_id": "A1001", "amount": 249.0}
    child = await rt.get(entry.run_id)
    assert child.task_key == "refund-A1001"
    await rt.approve(entry, resume=True)
    done = await rt.get(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text is not None
    assert done.text.startswith("Sorted: Refunded 249.00 on order A1001")


async def test_a_denied_refund_is_reported_as_not_done(runtime_factory: Any) -> None:
    rt = runtime_factory(*support.agents())
    parked = await rt.start("support", support.DEMO_INPUT, requester="U1")
    await rt.decline(parked.pending[0], reason="already refunded", resume=True)
    done = await rt.get(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == (
        "The refund did not go through. "
        "I did not refund order A1001. Permission denied: already refunded."
    )
