"""The store keeps an approver's edit of a call (``CallRecord.edit``) exactly, on every store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime.domain.states import CallState, RunStatus
from runtime.store.base import Store

if TYPE_CHECKING:
    from conftest import Make

EDIT: dict[str, Any] = {
    "by": "ana",
    "summary": "amount 249.0 → 200.0",
    "changes": [{"name": "amount", "before": 249.0, "after": 200.0}],
    "args": {"order": 42, "amount": 200.0, "token": "••••••"},
    "digest": "sha256:" + "a" * 64,
    "previous_digest": "sha256:" + "b" * 64,
}


async def test_a_call_keeps_its_edit_through_insert_update_and_listing(
    store: Store, make: Make
) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run(status=RunStatus.AWAITING))
        await tx.insert_call(make.call(state=CallState.AWAITING_DECISION))
    async with store.transaction() as tx:
        plain = await tx.get_call("call_1")
    assert plain is not None and plain.edit is None

    edited = make.call(
        state=CallState.APPROVED,
        args={"order": 42, "amount": 200.0},
        updated_at=make.at(2),
        decided_by={"id": "U2", "name": "ana"},
        edit=EDIT,
    )
    async with store.transaction() as tx:
        await tx.update_call(edited)
    async with store.transaction() as tx:
        stored = await tx.get_call("call_1")
        listed = await tx.calls_for_run("run_1")
        by_key = await tx.call_by_execution_key("key_call_1")
    assert stored == edited and listed == [edited] and by_key == edited
    assert stored is not None and stored.edit == EDIT

    cleared = make.call(state=CallState.APPROVED, updated_at=make.at(3), edit=None)
    async with store.transaction() as tx:
        await tx.update_call(cleared)
    async with store.transaction() as tx:
        again = await tx.get_call("call_1")
    assert again is not None and again.edit is None
