"""The store contract for standing grants: every test runs over every `Store`."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from runtime.store.base import Store
from runtime.store.records import GrantRecord

if TYPE_CHECKING:
    from conftest import Make


def grant(make: Make, grant_id: str = "gr_1", **changes: Any) -> GrantRecord:
    """A run grant of ``refund`` in ``run_1``, every field set."""
    values: dict[str, Any] = {
        "grant_id": grant_id,
        "agent": "refunds",
        "agent_version": "v1",
        "catalog_fingerprint": "fp1",
        "tool": "refund",
        "scope": "run",
        "run_id": "run_1",
        "thread_id": "thread_1",
        "requester": "U1",
        "constraint": {"amount": {"le": 300}, "note": {"eq": 'héllo "✓"'}},
        "granted_by": "U2",
        "granted_by_name": "Ana",
        "platform": "slack",
        "ticket_id": "tk_1",
        "created_at": make.at(0),
        "expires_at": make.at(3600.000001),
    }
    values.update(changes)
    return GrantRecord(**values)


async def seed(store: Store, make: Make, *grants: GrantRecord) -> None:
    async with store.transaction() as tx:
        for run_id in sorted({g.run_id for g in grants} | {"run_1"}):
            await tx.insert_run(make.run(run_id))
        for item in grants:
            await tx.insert_grant(item)


async def test_grant_round_trips_every_field(store: Store, make: Make) -> None:
    given = grant(make, revoked_at=make.at(5), revoked_by="ops:bo")
    bare = grant(
        make, "gr_2", constraint=None, expires_at=None, requester=None, granted_by_name=None
    )
    await seed(store, make, given, bare)
    async with store.transaction() as tx:
        assert await tx.get_grant("gr_1") == given
        assert await tx.get_grant("gr_2") == bare
        assert await tx.get_grant("gr_nope") is None


async def test_grant_ids_are_unique_and_need_their_run(store: Store, make: Make) -> None:
    await seed(store, make, grant(make))
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.insert_grant(grant(make))
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.insert_grant(grant(make, "gr_2", run_id="run_missing"))


async def test_active_grants_are_the_live_ones_of_the_run_or_the_thread(
    store: Store, make: Make
) -> None:
    await seed(
        store,
        make,
        grant(make, "gr_run", created_at=make.at(1)),
        grant(make, "gr_thread", scope="thread", run_id="run_2", created_at=make.at(2)),
        grant(make, "gr_other_run", run_id="run_2", created_at=make.at(3)),
        grant(make, "gr_other_thread", scope="thread", thread_id="t9", created_at=make.at(4)),
        grant(make, "gr_other_tool", tool="wire", created_at=make.at(5)),
        grant(make, "gr_other_agent", agent="ops", created_at=make.at(6)),
        grant(make, "gr_revoked", revoked_at=make.at(7), revoked_by="U1"),
        grant(make, "gr_expired", expires_at=make.at(10)),
        grant(make, "gr_forever", expires_at=None, created_at=make.at(8)),
    )
    async with store.transaction() as tx:
        found = await tx.active_grants(
            agent="refunds", tool="refund", run_id="run_1", thread_id="thread_1", now=make.at(10)
        )
        assert [g.grant_id for g in found] == ["gr_run", "gr_thread", "gr_forever"]
        later = await tx.active_grants(
            agent="refunds", tool="refund", run_id="run_1", thread_id="thread_1", now=make.at(9e9)
        )
        assert [g.grant_id for g in later] == ["gr_forever"]


async def test_list_grants_filters(store: Store, make: Make) -> None:
    await seed(
        store,
        make,
        grant(make, "gr_a", created_at=make.at(1)),
        grant(make, "gr_b", granted_by="U3", requester="U4", created_at=make.at(2)),
        grant(make, "gr_c", scope="thread", thread_id="t2", run_id="run_2", created_at=make.at(3)),
        grant(make, "gr_d", revoked_at=make.at(4), revoked_by="U1", created_at=make.at(4)),
    )
    async with store.transaction() as tx:

        async def ids(**filters: Any) -> list[str]:
            return [g.grant_id for g in await tx.list_grants(**filters)]

        assert await ids() == ["gr_d", "gr_c", "gr_b", "gr_a"]
        assert await ids(limit=2) == ["gr_d", "gr_c"]
        assert await ids(run_id="run_2") == ["gr_c"]
        assert await ids(thread_id="thread_1") == ["gr_d", "gr_b", "gr_a"]
        assert await ids(scope="thread") == ["gr_c"]
        assert await ids(involving="U3") == ["gr_b"]
        assert await ids(involving="U4") == ["gr_b"]
        assert await ids(involving="U2") == ["gr_d", "gr_c", "gr_a"]
        assert await ids(active_at=make.at(5)) == ["gr_c", "gr_b", "gr_a"]
        assert await ids(active_at=make.at(3600.000001)) == []
        assert await ids(run_id="run_1", involving="U1") == ["gr_d", "gr_a"]


async def test_revoke_is_a_compare_and_set(store: Store, make: Make) -> None:
    await seed(store, make, grant(make))
    async with store.transaction() as tx:
        assert await tx.revoke_grant("gr_1", by="U1", at=make.at(9)) is True
        assert await tx.revoke_grant("gr_1", by="U2", at=make.at(10)) is False
        assert await tx.revoke_grant("gr_nope", by="U2", at=make.at(10)) is False
        stored = await tx.get_grant("gr_1")
    assert stored == replace(grant(make), revoked_at=make.at(9), revoked_by="U1")


async def test_a_rolled_back_grant_is_not_stored(store: Store, make: Make) -> None:
    await seed(store, make)
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.insert_grant(grant(make))
            raise RuntimeError("the decision failed")
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.insert_grant(grant(make, "gr_2"))
            await tx.revoke_grant("gr_2", by="U1", at=make.at(1))
            raise RuntimeError("the decision failed")
    async with store.transaction() as tx:
        assert await tx.list_grants() == []


async def test_concurrent_revokes_win_once(store: Store, make: Make) -> None:
    await seed(store, make, grant(make))

    async def revoke(by: str) -> bool:
        async with store.transaction() as tx:
            return await tx.revoke_grant("gr_1", by=by, at=make.at(1))

    outcomes = await asyncio.gather(*(revoke(f"U{n}") for n in range(5)))
    assert sorted(outcomes) == [False, False, False, False, True]
