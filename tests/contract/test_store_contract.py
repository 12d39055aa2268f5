"""The store contract: every test runs over every `Store` implementation."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from runtime.domain.errors import LeaseLost
from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import (
    Abort,
    Allow,
    Answer,
    AwaitTarget,
    Child,
    ChildFinished,
    Continue,
    Deny,
    InputData,
    Pause,
    RemoteInput,
    Resolve,
    Retry,
    ToolPermission,
    Uncertain,
)
from runtime.store.base import DuplicateKey, Store, Transaction
from runtime.store.records import CALL_CREATED_WITH, RUN_CREATED_WITH, IdempotencyRecord

if TYPE_CHECKING:
    from conftest import Make

LEASE = timedelta(seconds=30)


async def seed_runs(store: Store, make: Make, *run_ids: str) -> None:
    """Insert queued runs (the SQL store's foreign keys need them)."""
    async with store.transaction() as tx:
        for run_id in run_ids or ("run_1",):
            await tx.insert_run(make.run(run_id))


async def read_run(store: Store, run_id: str = "run_1") -> Any:
    async with store.transaction() as tx:
        return await tx.get_run(run_id)


# --- runs ------------------------------------------------------------------------------


async def test_run_round_trips_every_field(store: Store, make: Make) -> None:
    run = make.run(
        status=RunStatus.AWAITING,
        requester=None,
        created_at=make.at(-60),
        updated_at=make.at(1.5),
        origin={"platform": "discord", "guild": 1, "nested": {"ok": True, "none": None}},
        messages=[
            {"role": "system", "content": "be careful"},
            {"role": "user", "content": 'héllo ✓ "quoted" \n newline'},
            {
                "role": "assistant",
                "tool_calls": [{"id": "m1", "arguments": {"amount": 12.5, "tags": ["a"]}}],
                "content": None,
            },
        ],
        turns=3,
        prompt_tokens=10_000_000_000,
        completion_tokens=7,
        usage_incomplete=True,
        model_attempt=2,
        model_in_flight=True,
        batch=4,
        final_text="done",
        error="boom",
        pause_requested=True,
        cancel_requested=True,
        lease_owner="worker-1",
        lease_expires_at=make.at(30),
        fence=9,
    )
    async with store.transaction() as tx:
        await tx.insert_run(run)
    stored = await read_run(store)
    assert stored == run
    assert stored is not run
    assert isinstance(stored.status, RunStatus)
    assert stored.created_at.utcoffset() == timedelta(0)
    assert stored.lease_expires_at == make.at(30)


async def test_run_defaults_round_trip(store: Store, make: Make) -> None:
    run = make.run(requester=None, origin={}, messages=[])
    async with store.transaction() as tx:
        await tx.insert_run(run)
    assert await read_run(store) == run


async def test_datetimes_in_other_zones_keep_their_instant(store: Store, make: Make) -> None:
    plus_two = timezone(timedelta(hours=2))
    created = make.t0.astimezone(plus_two)
    async with store.transaction() as tx:
        await tx.insert_run(make.run(created_at=created, updated_at=created))
    stored = await read_run(store)
    assert stored.created_at == make.t0
    assert stored.created_at.utcoffset() is not None


async def test_get_missing_run_is_none(store: Store) -> None:
    async with store.transaction() as tx:
        assert await tx.get_run("nope") is None
        assert await tx.get_run("nope", for_update=True) is None


async def test_insert_run_twice_is_refused(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.insert_run(make.run(input="other"))
    assert (await read_run(store)).input == "refund order 42"


async def test_records_in_and_out_are_copies(store: Store, make: Make) -> None:
    run = make.run()
    async with store.transaction() as tx:
        await tx.insert_run(run)
        run.messages.append({"role": "user", "content": "sneaky"})
        run.origin["channel"] = "changed"
        read = await tx.get_run("run_1")
        assert read is not None
        read.messages.clear()
    stored = await read_run(store)
    assert stored.messages == [{"role": "user", "content": "refund order 42"}]
    assert stored.origin["channel"] == "C1"


async def test_update_run_writes_every_column_that_changes(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    changed = make.run(
        status=RunStatus.DONE,
        updated_at=make.at(5),
        messages=[*make.run().messages, {"role": "assistant", "content": "ok"}],
        turns=2,
        prompt_tokens=100,
        completion_tokens=50,
        usage_incomplete=True,
        model_attempt=1,
        model_in_flight=True,
        batch=2,
        final_text="all done",
        error="warning",
        lease_owner="w",
        lease_expires_at=make.at(10),
        fence=3,
    )
    async with store.transaction() as tx:
        await tx.update_run(changed)
    assert await read_run(store) == changed


async def test_update_run_keeps_what_the_run_was_created_with(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    created = make.run()
    rewritten = replace(
        created,
        thread_id="thread_2",
        agent="deploys",
        agent_version="v2",
        input="changed input",
        requester="U2",
        created_at=make.at(-1),
        origin={"platform": "webhook"},
        trace_context=None,
        turns=2,
    )
    assert {f for f in RUN_CREATED_WITH if getattr(rewritten, f) == getattr(created, f)} == set()
    async with store.transaction() as tx:
        await tx.update_run(rewritten)
    assert await read_run(store) == replace(created, turns=2)


async def test_update_run_with_matching_fence(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        claimed = await tx.claim_run("run_1", owner="w1", now=make.t0, until=make.t0 + LEASE)
    assert claimed is not None
    async with store.transaction() as tx:
        await tx.update_run(replace(claimed, turns=1), fence=claimed.fence)
    assert (await read_run(store)).turns == 1


async def test_update_run_fence_mismatch_raises_and_leaves_row(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        claimed = await tx.claim_run("run_1", owner="w1", now=make.t0, until=make.t0 + LEASE)
    assert claimed is not None
    before = await read_run(store)
    with pytest.raises(LeaseLost):
        async with store.transaction() as tx:
            await tx.append_event(make.event())
            await tx.update_run(replace(claimed, turns=5, error="x"), fence=claimed.fence + 1)
    assert await read_run(store) == before
    async with store.transaction() as tx:
        assert await tx.events("run_1") == []


async def test_update_missing_run_is_refused(store: Store, make: Make) -> None:
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.update_run(make.run("ghost"))
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.update_run(make.run("ghost"), fence=0)


async def test_update_run_never_writes_the_request_flags(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.set_run_flags("run_1", pause=True, cancel=True)
    stale = make.run(turns=4, pause_requested=False, cancel_requested=False)
    async with store.transaction() as tx:
        await tx.update_run(stale)
    stored = await read_run(store)
    assert stored.turns == 4
    assert stored.pause_requested and stored.cancel_requested

    async with store.transaction() as tx:
        await tx.set_run_flags("run_1", pause=False, cancel=False)
        await tx.update_run(replace(stale, pause_requested=True, cancel_requested=True))
    stored = await read_run(store)
    assert not stored.pause_requested and not stored.cancel_requested


async def test_set_run_flags(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.set_run_flags("run_1", pause=True)
    stored = await read_run(store)
    assert (stored.pause_requested, stored.cancel_requested) == (True, False)
    async with store.transaction() as tx:
        await tx.set_run_flags("run_1", cancel=True)
    stored = await read_run(store)
    assert (stored.pause_requested, stored.cancel_requested) == (True, True)
    async with store.transaction() as tx:
        await tx.set_run_flags("run_1", pause=False)
        await tx.set_run_flags("run_1")
    stored = await read_run(store)
    assert (stored.pause_requested, stored.cancel_requested) == (False, True)
    assert replace(stored, cancel_requested=False) == make.run()


async def test_set_flags_of_missing_run_is_refused(store: Store) -> None:
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.set_run_flags("ghost", pause=True)


async def test_claim_queued_run(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    now = make.at(10)
    async with store.transaction() as tx:
        claimed = await tx.claim_run("run_1", owner="w1", now=now, until=now + LEASE)
    expected = replace(
        make.run(),
        status=RunStatus.RUNNING,
        fence=1,
        lease_owner="w1",
        lease_expires_at=now + LEASE,
        updated_at=now,
    )
    assert claimed == expected
    assert await read_run(store) == expected


async def test_claim_running_run_with_live_lease_is_refused(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.claim_run("run_1", owner="w1", now=make.t0, until=make.t0 + LEASE)
    before = await read_run(store)
    async with store.transaction() as tx:
        just_before = make.t0 + LEASE - timedelta(microseconds=1)
        assert await tx.claim_run("run_1", owner="w2", now=just_before, until=make.at(99)) is None
    assert await read_run(store) == before


@pytest.mark.parametrize("expired_by", [timedelta(0), timedelta(seconds=5)])
async def test_claim_run_with_expired_lease_bumps_fence(
    store: Store, make: Make, expired_by: timedelta
) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        first = await tx.claim_run("run_1", owner="w1", now=make.t0, until=make.t0 + LEASE)
    assert first is not None
    now = make.t0 + LEASE + expired_by
    async with store.transaction() as tx:
        second = await tx.claim_run("run_1", owner="w2", now=now, until=now + LEASE)
    assert second is not None
    assert second.fence == first.fence + 1
    assert (second.lease_owner, second.lease_expires_at, second.updated_at) == (
        "w2",
        now + LEASE,
        now,
    )
    with pytest.raises(LeaseLost):
        async with store.transaction() as tx:
            await tx.update_run(replace(first, turns=1), fence=first.fence)


@pytest.mark.parametrize(
    "status",
    [
        RunStatus.AWAITING,
        RunStatus.PAUSED,
        RunStatus.DONE,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
    ],
)
async def test_claim_refuses_runs_not_queued_or_running(
    store: Store, make: Make, status: RunStatus
) -> None:
    run = make.run(status=status, lease_owner="w0", lease_expires_at=make.at(-100))
    async with store.transaction() as tx:
        await tx.insert_run(run)
    async with store.transaction() as tx:
        assert await tx.claim_run("run_1", owner="w1", now=make.t0, until=make.t0 + LEASE) is None
        assert await tx.claimable_runs(make.t0, 10) == []
    assert await read_run(store) == run


async def test_claim_running_run_without_lease_or_missing_run(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run(status=RunStatus.RUNNING))
        assert await tx.claim_run("run_1", owner="w", now=make.t0, until=make.t0 + LEASE) is None
        assert await tx.claim_run("ghost", owner="w", now=make.t0, until=make.t0 + LEASE) is None


async def test_renew_lease(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        claimed = await tx.claim_run("run_1", owner="w1", now=make.t0, until=make.t0 + LEASE)
    assert claimed is not None
    async with store.transaction() as tx:
        assert await tx.renew_lease("run_1", fence=claimed.fence, until=make.at(100)) is True
    assert (await read_run(store)).lease_expires_at == make.at(100)
    async with store.transaction() as tx:
        assert await tx.renew_lease("run_1", fence=claimed.fence + 1, until=make.at(200)) is False
        assert await tx.renew_lease("ghost", fence=0, until=make.at(200)) is False
    assert (await read_run(store)).lease_expires_at == make.at(100)


async def test_renew_lease_of_run_no_longer_running(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        claimed = await tx.claim_run("run_1", owner="w1", now=make.t0, until=make.t0 + LEASE)
        assert claimed is not None
        await tx.update_run(replace(claimed, status=RunStatus.AWAITING), fence=claimed.fence)
    async with store.transaction() as tx:
        assert await tx.renew_lease("run_1", fence=claimed.fence, until=make.at(100)) is False


async def test_claimable_runs_oldest_first(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("q_new", updated_at=make.at(3)))
        await tx.insert_run(make.run("q_old", updated_at=make.at(1)))
        await tx.insert_run(
            make.run(
                "r_expired",
                status=RunStatus.RUNNING,
                updated_at=make.at(2),
                lease_owner="w",
                lease_expires_at=make.at(9),
            )
        )
        await tx.insert_run(
            make.run(
                "r_live",
                status=RunStatus.RUNNING,
                updated_at=make.at(0),
                lease_owner="w",
                lease_expires_at=make.at(11),
            )
        )
        await tx.insert_run(make.run("awaiting", status=RunStatus.AWAITING, updated_at=make.at(0)))
        await tx.insert_run(make.run("done", status=RunStatus.DONE, updated_at=make.at(0)))
    async with store.transaction() as tx:
        assert await tx.claimable_runs(make.at(10), 10) == ["q_old", "r_expired", "q_new"]
        assert await tx.claimable_runs(make.at(10), 2) == ["q_old", "r_expired"]
        assert await tx.claimable_runs(make.at(11), 10) == ["r_live", "q_old", "r_expired", "q_new"]


async def test_list_runs_newest_first_with_filters(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("a", created_at=make.at(1), thread_id="t1"))
        await tx.insert_run(
            make.run("b", created_at=make.at(2), thread_id="t2", status=RunStatus.AWAITING)
        )
        await tx.insert_run(
            make.run("c", created_at=make.at(3), thread_id="t1", status=RunStatus.DONE)
        )
        await tx.insert_run(
            make.run("d", created_at=make.at(4), thread_id="t2", status=RunStatus.DONE)
        )
    async with store.transaction() as tx:
        ids = lambda runs: [r.run_id for r in runs]  # noqa: E731
        assert ids(await tx.list_runs()) == ["d", "c", "b", "a"]
        assert ids(await tx.list_runs(limit=2)) == ["d", "c"]
        assert ids(await tx.list_runs(thread_id="t1")) == ["c", "a"]
        assert ids(await tx.list_runs(statuses=[RunStatus.DONE])) == ["d", "c"]
        assert ids(await tx.list_runs(statuses=[RunStatus.AWAITING, RunStatus.QUEUED])) == [
            "b",
            "a",
        ]
        assert ids(await tx.list_runs(statuses=[RunStatus.DONE], thread_id="t2")) == ["d"]
        assert await tx.list_runs(statuses=[RunStatus.FAILED]) == []
        assert await tx.list_runs(thread_id="t9") == []
        full = await tx.list_runs(thread_id="t1", statuses=[RunStatus.QUEUED])
        assert full == [make.run("a", created_at=make.at(1), thread_id="t1")]


def entry(n: int) -> dict[str, Any]:
    """A transcript entry, different for each `n`."""
    if n % 3 == 0:
        return {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}"}]}
    if n % 3 == 1:
        return {"role": "tool", "tool_call_id": f"c{n - 1}", "content": f"result {n} " * 20}
    return {"role": "user", "content": f"message {n}"}


async def test_a_growing_transcript_reads_back_whole_from_every_read(
    store: Store, make: Make
) -> None:
    run = make.run(messages=[entry(0)])
    async with store.transaction() as tx:
        await tx.insert_run(run)
    n = 1
    for step in range(25):
        # One to three entries per write, like a turn; the same record is written again
        # and again, as a worker driving the run does, and a read copy now and then.
        for _ in range(1 + step % 3):
            run.messages.append(entry(n))
            n += 1
        async with store.transaction() as tx:
            await tx.update_run(run)
        if step % 5 == 4:
            run = await read_run(store)
        assert (await read_run(store)).messages == run.messages
    assert len(run.messages) == n == 50
    expected = [entry(k) for k in range(n)]
    async with store.transaction() as tx:
        assert (await tx.get_run("run_1", for_update=True)).messages == expected
        assert [r.messages for r in await tx.list_runs()] == [expected]
        claimed = await tx.claim_run("run_1", owner="w", now=make.at(1), until=make.at(30))
        assert claimed is not None and claimed.messages == expected


async def test_a_long_first_transcript_round_trips(store: Store, make: Make) -> None:
    # A follow-up run in a thread starts with the thread's history.
    history = [entry(k) for k in range(30)]
    async with store.transaction() as tx:
        await tx.insert_run(make.run("run_1", messages=list(history)))
        await tx.insert_run(make.run("run_2", messages=list(history[:3])))
    assert (await read_run(store)).messages == history
    assert (await read_run(store, "run_2")).messages == history[:3]


async def test_a_transcript_written_by_a_rolled_back_transaction_is_written_again(
    store: Store, make: Make
) -> None:
    run = make.run(messages=[entry(k) for k in range(5)])
    async with store.transaction() as tx:
        await tx.insert_run(run)
    run.messages.extend(entry(k) for k in range(5, 20))
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.update_run(run)
            raise RuntimeError("the step failed after writing")
    assert (await read_run(store)).messages == [entry(k) for k in range(5)]
    # The same record, written again: nothing it holds may be taken as stored.
    run.messages.append(entry(20))
    async with store.transaction() as tx:
        await tx.update_run(run)
        run.messages.append(entry(21))
        await tx.update_run(run)
    assert (await read_run(store)).messages == [entry(k) for k in range(22)]


async def test_count_runs(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        assert await tx.count_runs() == {}
        await tx.insert_run(make.run("a"))
        await tx.insert_run(make.run("b"))
        await tx.insert_run(make.run("c", status=RunStatus.DONE))
        assert await tx.count_runs() == {"queued": 2, "done": 1}


# --- tool calls --------------------------------------------------------------------------


async def test_call_round_trips_every_field(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    call = make.call(
        state=CallState.COMPLETED,
        replay_policy="idempotent",
        created_at=make.at(1),
        updated_at=make.at(2),
        attempts=2,
        result={"refunded": True, "ids": [1, 2], "note": None},
        error="first attempt timed out",
        answer={"kind": "allow"},
        decided_by={"id": "U2", "platform": "slack"},
        reason="over the limit",
    )
    async with store.transaction() as tx:
        await tx.insert_call(call)
    async with store.transaction() as tx:
        stored = await tx.get_call("call_1")
    assert stored == call
    assert stored is not None and isinstance(stored.state, CallState)


@pytest.mark.parametrize("result", [None, "text", 3, 2.5, True, [1, "a"], {"a": {"b": []}}])
async def test_call_result_may_be_any_json_value(store: Store, make: Make, result: Any) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_call(make.call(result=result))
    async with store.transaction() as tx:
        stored = await tx.get_call("call_1")
    assert stored is not None
    assert stored.result == result
    assert type(stored.result) is type(result)


async def test_call_ids_and_execution_keys_are_unique(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_call(make.call())
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.insert_call(make.call(execution_key="other"))
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.insert_call(make.call("call_2", execution_key="key_call_1"))
    async with store.transaction() as tx:
        assert await tx.get_call("call_2") is None


async def test_update_call(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_call(make.call())
    updated = make.call(
        state=CallState.DISPATCHED,
        updated_at=make.at(3),
        attempts=1,
        answer={"kind": "allow"},
        decided_by={"id": "U2"},
    )
    async with store.transaction() as tx:
        await tx.update_call(updated)
    async with store.transaction() as tx:
        assert await tx.get_call("call_1") == updated
        assert await tx.get_call("nope") is None
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.update_call(make.call("ghost"))


async def test_update_call_keeps_what_the_call_was_proposed_with(store: Store, make: Make) -> None:
    await seed_runs(store, make, "run_1", "run_2")
    proposed = make.call()
    async with store.transaction() as tx:
        await tx.insert_call(proposed)
    rewritten = replace(
        proposed,
        run_id="run_2",
        batch=9,
        seq=9,
        model_call_id="other",
        tool="other_tool",
        args={"changed": True},
        replay_policy="safe",
        execution_key="xk_other",
        created_at=make.at(-1),
        attempts=2,
    )
    assert {f for f in CALL_CREATED_WITH if getattr(rewritten, f) == getattr(proposed, f)} == set()
    async with store.transaction() as tx:
        await tx.update_call(rewritten)
    async with store.transaction() as tx:
        # The arguments are written: an approver may change them (runtime.edits).
        assert await tx.get_call(proposed.call_id) == replace(
            proposed, attempts=2, args={"changed": True}
        )


async def test_calls_for_run_ordered_by_batch_and_seq(store: Store, make: Make) -> None:
    await seed_runs(store, make, "run_1", "run_2")
    async with store.transaction() as tx:
        for call_id, batch, seq in [("c4", 2, 1), ("c1", 1, 0), ("c3", 2, 0), ("c2", 1, 1)]:
            await tx.insert_call(make.call(call_id, batch=batch, seq=seq))
        await tx.insert_call(make.call("other", run_id="run_2"))
    async with store.transaction() as tx:
        assert [c.call_id for c in await tx.calls_for_run("run_1")] == ["c1", "c2", "c3", "c4"]
        assert [c.call_id for c in await tx.calls_for_run("run_1", batch=2)] == ["c3", "c4"]
        assert await tx.calls_for_run("run_1", batch=7) == []
        assert await tx.calls_for_run("nope") == []
        assert (await tx.calls_for_run("run_1"))[0] == make.call("c1", batch=1, seq=0)


async def test_call_by_execution_key(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_call(make.call("c1"))
        await tx.insert_call(make.call("c2", seq=1))
    async with store.transaction() as tx:
        assert await tx.call_by_execution_key("key_c2") == make.call("c2", seq=1)
        assert await tx.call_by_execution_key("missing") is None


# --- tickets ---------------------------------------------------------------------------------

TARGETS: list[AwaitTarget] = [
    ToolPermission(call_id="call_1", tool="refund", args={"order": 42}, reason="over 100"),
    ToolPermission(call_id="call_1", tool="refund", args={}),
    RemoteInput(
        call_id="call_1",
        tool="ask_address",
        prompt="Where to?",
        schema={"type": "object", "properties": {"city": {"type": "string"}}},
    ),
    Uncertain(call_id="call_1", tool="refund", args={"order": 42}, execution_key="key_call_1"),
    Pause(),
    Child(call_id="call_1", child_run_id="run_2", task_key="refund-42", agent="billing"),
]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.kind)
async def test_ticket_round_trips_every_target_kind(
    store: Store, make: Make, target: AwaitTarget
) -> None:
    await seed_runs(store, make)
    people: dict[str, Any] = (
        {}
        if isinstance(target, Pause | Child)
        else {"approvers": ("U2", "group:ops"), "four_eyes": True}
    )
    deadline = None if isinstance(target, Child) else make.at(3600)
    ticket = make.ticket(target=target, deadline=deadline, **people)
    async with store.transaction() as tx:
        await tx.insert_ticket(ticket)
    async with store.transaction() as tx:
        stored = await tx.get_ticket("tkt_1")
    assert stored == ticket
    assert stored is not None and type(stored.target) is type(target)


ANSWERS: list[Answer] = [
    Allow(),
    Deny(reason="too much"),
    Deny(),
    InputData(data={"city": "Lyon", "floor": 3}),
    Resolve(result={"refunded": True, "id": [1, 2]}),
    Resolve(result=None),
    Retry(),
    Abort(reason="gave up"),
    Continue(),
    ChildFinished(status="done", text="refunded"),
    ChildFinished(status="cancelled", error="its parent run was cancelled"),
]


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: a.kind)
async def test_close_ticket_keeps_every_answer_kind(
    store: Store, make: Make, answer: Answer
) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket())
    async with store.transaction() as tx:
        closed = await tx.close_ticket(
            "tkt_1", status=TicketStatus.DECIDED, at=make.at(5), decision=answer, decided_by="U2"
        )
    assert closed is True
    async with store.transaction() as tx:
        stored = await tx.get_ticket("tkt_1")
    assert stored is not None
    assert stored.status is TicketStatus.DECIDED
    assert stored.decision == answer
    assert type(stored.decision) is type(answer)
    assert (stored.decided_by, stored.decided_at) == ("U2", make.at(5))
    assert (
        stored.model_copy(
            update={
                "status": TicketStatus.OPEN,
                "decision": None,
                "decided_by": None,
                "decided_at": None,
            }
        )
        == make.ticket()
    )


async def test_close_ticket_is_compare_and_set(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket())
    async with store.transaction() as tx:
        assert await tx.close_ticket(
            "tkt_1", status=TicketStatus.DECIDED, at=make.at(1), decision=Allow(), decided_by="U2"
        )
    async with store.transaction() as tx:
        first = await tx.get_ticket("tkt_1")
    commits = store.commits
    async with store.transaction() as tx:
        assert not await tx.close_ticket(
            "tkt_1", status=TicketStatus.DECIDED, at=make.at(2), decision=Deny(), decided_by="U3"
        )
        assert not await tx.close_ticket("tkt_1", status=TicketStatus.EXPIRED, at=make.at(2))
        assert not await tx.close_ticket("ghost", status=TicketStatus.VOIDED, at=make.at(2))
    assert store.commits == commits
    async with store.transaction() as tx:
        assert await tx.get_ticket("tkt_1") == first


@pytest.mark.parametrize("status", [TicketStatus.EXPIRED, TicketStatus.VOIDED])
async def test_close_ticket_without_decision(
    store: Store, make: Make, status: TicketStatus
) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket())
        assert await tx.close_ticket("tkt_1", status=status, at=make.at(9))
        stored = await tx.get_ticket("tkt_1")
    assert stored is not None
    assert (stored.status, stored.decision, stored.decided_by, stored.decided_at) == (
        status,
        None,
        None,
        make.at(9),
    )


@pytest.mark.parametrize(
    ("status", "decision"), [(TicketStatus.OPEN, None), (TicketStatus.DECIDED, None)]
)
async def test_close_ticket_refuses_impossible_outcomes(
    store: Store, make: Make, status: TicketStatus, decision: Answer | None
) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket())
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.close_ticket("tkt_1", status=status, at=make.at(1), decision=decision)
    async with store.transaction() as tx:
        assert await tx.get_ticket("tkt_1") == make.ticket()


async def test_insert_ticket_twice_is_refused(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket(target=Pause()))
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.insert_ticket(make.ticket(target=Pause(), correlation="other"))


async def test_one_open_ticket_per_call(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket("t1"))
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.insert_ticket(make.ticket("t2"))
    async with store.transaction() as tx:
        assert await tx.get_ticket("t2") is None
        # Pause tickets wait on no call; several may coexist with call tickets.
        await tx.insert_ticket(make.ticket("p1", target=Pause()))
        await tx.insert_ticket(make.ticket("p2", target=Pause()))
        # A closed ticket for the same call is history, not a second waiter.
        await tx.insert_ticket(
            make.ticket("old", status=TicketStatus.EXPIRED, decided_at=make.at(1))
        )
        assert await tx.close_ticket("t1", status=TicketStatus.VOIDED, at=make.at(2))
        await tx.insert_ticket(make.ticket("t3", created_at=make.at(3)))
        open_for_call = await tx.open_ticket_for_call("call_1")
    assert open_for_call is not None and open_for_call.ticket_id == "t3"


async def test_one_open_ticket_per_call_inserted_in_the_same_transaction(
    store: Store, make: Make
) -> None:
    await seed_runs(store, make)
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.insert_call(make.call())
            await tx.insert_ticket(make.ticket("t1"))
            await tx.insert_ticket(make.ticket("t2"))
    async with store.transaction() as tx:
        assert await tx.get_call("call_1") is None
        assert await tx.get_ticket("t1") is None
    async with store.transaction() as tx:
        await tx.insert_call(make.call())
        await tx.insert_ticket(make.ticket("t1"))
        assert await tx.close_ticket("t1", status=TicketStatus.VOIDED, at=make.at(1))
        await tx.insert_ticket(make.ticket("t2", created_at=make.at(2)))
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.insert_ticket(make.ticket("t3", created_at=make.at(3)))
    async with store.transaction() as tx:
        open_for_call = await tx.open_ticket_for_call("call_1")
        assert await tx.get_ticket("t3") is None
    assert open_for_call is not None and open_for_call.ticket_id == "t2"


async def test_tickets_for_run_oldest_first(store: Store, make: Make) -> None:
    await seed_runs(store, make, "run_1", "run_2")
    target = lambda n: ToolPermission(call_id=f"call_{n}", tool="t", args={})  # noqa: E731
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket("b", target=target(1), created_at=make.at(2)))
        await tx.insert_ticket(make.ticket("a", target=target(2), created_at=make.at(1)))
        await tx.insert_ticket(make.ticket("c", target=target(3), created_at=make.at(2)))
        await tx.insert_ticket(make.ticket("x", run_id="run_2", target=target(4)))
        await tx.close_ticket("c", status=TicketStatus.DECIDED, at=make.at(3), decision=Allow())
    async with store.transaction() as tx:
        assert [t.ticket_id for t in await tx.tickets_for_run("run_1")] == ["a", "b", "c"]
        opened = await tx.tickets_for_run("run_1", status=TicketStatus.OPEN)
        assert [t.ticket_id for t in opened] == ["a", "b"]
        decided = await tx.tickets_for_run("run_1", status=TicketStatus.DECIDED)
        assert [t.ticket_id for t in decided] == ["c"]
        assert await tx.tickets_for_run("run_1", status=TicketStatus.EXPIRED) == []
        assert await tx.tickets_for_run("nope") == []


async def test_open_tickets_of_every_run(store: Store, make: Make) -> None:
    await seed_runs(store, make, "run_1", "run_2")
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket("late", target=Pause(), created_at=make.at(5)))
        await tx.insert_ticket(
            make.ticket("early", run_id="run_2", target=Pause(), created_at=make.at(1))
        )
        await tx.insert_ticket(make.ticket("closed", created_at=make.at(0)))
        await tx.close_ticket("closed", status=TicketStatus.EXPIRED, at=make.at(1))
        await tx.insert_ticket(
            make.ticket("mid", run_id="run_2", target=Pause(), created_at=make.at(3))
        )
    async with store.transaction() as tx:
        assert [t.ticket_id for t in await tx.open_tickets()] == ["early", "mid", "late"]
        assert [t.ticket_id for t in await tx.open_tickets(limit=1)] == ["early"]


async def test_open_ticket_for_call(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        assert await tx.open_ticket_for_call("call_1") is None
        await tx.insert_ticket(make.ticket())
        assert await tx.open_ticket_for_call("call_1") == make.ticket()
        assert await tx.open_ticket_for_call("call_2") is None
        await tx.close_ticket("tkt_1", status=TicketStatus.DECIDED, at=make.at(1), decision=Allow())
        assert await tx.open_ticket_for_call("call_1") is None


async def test_overdue_tickets(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    target = lambda n: ToolPermission(call_id=f"call_{n}", tool="t", args={})  # noqa: E731
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket("due_late", target=target(1), deadline=make.at(10)))
        await tx.insert_ticket(make.ticket("due_early", target=target(2), deadline=make.at(5)))
        await tx.insert_ticket(make.ticket("future", target=target(3), deadline=make.at(11)))
        await tx.insert_ticket(make.ticket("never", target=target(4)))
        await tx.insert_ticket(make.ticket("closed", target=target(5), deadline=make.at(1)))
        await tx.close_ticket("closed", status=TicketStatus.VOIDED, at=make.at(1))
    async with store.transaction() as tx:
        assert [t.ticket_id for t in await tx.overdue_tickets(make.at(10), 10)] == [
            "due_early",
            "due_late",
        ]
        assert [t.ticket_id for t in await tx.overdue_tickets(make.at(10), 1)] == ["due_early"]
        assert await tx.overdue_tickets(make.at(4), 10) == []


# --- events ------------------------------------------------------------------------------------


async def test_events_in_order_and_after(store: Store, make: Make) -> None:
    await seed_runs(store, make, "run_1", "run_2")
    async with store.transaction() as tx:
        await tx.append_event(make.event(kind="run_started", at=make.at(1), actor=None))
        await tx.append_event(make.event("run_2", kind="other"))
    async with store.transaction() as tx:
        await tx.append_event(make.event(kind="model_call", at=make.at(2), data={"usage": [1, 2]}))
        await tx.append_event(make.event(kind="tool_result", at=make.at(3)))
    async with store.transaction() as tx:
        log = await tx.events("run_1")
    assert [e.kind for e in log] == ["run_started", "model_call", "tool_result"]
    seqs = [e.seq for e in log]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3 and seqs[0] > 0
    assert replace(log[1], seq=0) == make.event(
        kind="model_call", at=make.at(2), data={"usage": [1, 2]}
    )
    assert log[0].actor is None
    async with store.transaction() as tx:
        assert [e.kind for e in await tx.events("run_1", after=seqs[0])] == [
            "model_call",
            "tool_result",
        ]
        assert await tx.events("run_1", after=seqs[-1]) == []
        assert [e.kind for e in await tx.events("run_2")] == ["other"]
        assert await tx.events("nope") == []


async def test_append_event_does_not_change_the_record_given(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    event = make.event()
    async with store.transaction() as tx:
        await tx.append_event(event)
    assert event.seq == 0


# --- outbox --------------------------------------------------------------------------------------


async def test_outbox_round_trips_every_field(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    item = make.outbox(
        ticket_id="tkt_1",
        state="delivered",
        attempts=2,
        last_error="429",
        platform_ref={"channel": "C1", "ts": "1700000000.000100"},
        delivered_at=make.at(4),
        next_attempt_at=make.at(3),
        created_at=make.at(1),
    )
    plain = make.outbox("ob_2", created_at=make.at(2))
    async with store.transaction() as tx:
        await tx.add_outbox(plain)
        await tx.add_outbox(item)
    async with store.transaction() as tx:
        assert await tx.outbox_for_run("run_1") == [item, plain]
        assert await tx.outbox_for_run("nope") == []


async def test_add_outbox_twice_is_refused(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.add_outbox(make.outbox())
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.add_outbox(make.outbox(kind="other"))
    async with store.transaction() as tx:
        assert [o.kind for o in await tx.outbox_for_run("run_1")] == ["approval_requested"]


async def test_due_outbox(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.add_outbox(make.outbox("b", created_at=make.at(2), next_attempt_at=make.at(2)))
        await tx.add_outbox(make.outbox("a", created_at=make.at(1), next_attempt_at=make.at(9)))
        await tx.add_outbox(
            make.outbox("later", created_at=make.at(0), next_attempt_at=make.at(11))
        )
        await tx.add_outbox(make.outbox("sent", created_at=make.at(0), state="delivered"))
        await tx.add_outbox(make.outbox("dead", created_at=make.at(0), state="failed"))
    async with store.transaction() as tx:
        assert [o.outbox_id for o in await tx.due_outbox(make.at(10), 10)] == ["a", "b"]
        assert [o.outbox_id for o in await tx.due_outbox(make.at(10), 1)] == ["a"]
        assert [o.outbox_id for o in await tx.due_outbox(make.at(11), 10)] == ["later", "a", "b"]
        assert await tx.due_outbox(make.at(1), 10) == []


async def test_update_outbox(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.add_outbox(make.outbox())
    retried = make.outbox(attempts=1, last_error="timeout", next_attempt_at=make.at(30))
    async with store.transaction() as tx:
        await tx.update_outbox(retried)
        assert await tx.due_outbox(make.at(29), 10) == []
        assert await tx.due_outbox(make.at(30), 10) == [retried]
    delivered = replace(
        retried, state="delivered", platform_ref={"message_id": 7}, delivered_at=make.at(31)
    )
    async with store.transaction() as tx:
        await tx.update_outbox(delivered)
        assert await tx.due_outbox(make.at(99), 10) == []
        assert await tx.outbox_for_run("run_1") == [delivered]
    with pytest.raises(ValueError):
        async with store.transaction() as tx:
            await tx.update_outbox(make.outbox("ghost"))


async def test_find_outbox(store: Store, make: Make) -> None:
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.add_outbox(make.outbox("second", ticket_id="t1", created_at=make.at(2)))
        await tx.add_outbox(make.outbox("first", ticket_id="t1", created_at=make.at(1)))
        await tx.add_outbox(make.outbox("decided", ticket_id="t1", kind="decided"))
        await tx.add_outbox(make.outbox("other", ticket_id="t2"))
    async with store.transaction() as tx:
        found = await tx.find_outbox(ticket_id="t1", kind="approval_requested")
        assert found == make.outbox("first", ticket_id="t1", created_at=make.at(1))
        decided = await tx.find_outbox(ticket_id="t1", kind="decided")
        assert decided is not None and decided.outbox_id == "decided"
        assert await tx.find_outbox(ticket_id="t1", kind="expired") is None
        assert await tx.find_outbox(ticket_id="t9", kind="approval_requested") is None


# --- idempotency keys and figures ----------------------------------------------------------


async def test_idempotency_keys(store: Store, make: Make) -> None:
    first = IdempotencyRecord("hook:refunds", "order-A-1", "sha-1", "run_1", make.at(1))
    async with store.transaction() as tx:
        assert await tx.get_idempotency("hook:refunds", "order-A-1") is None
        # Recorded before the run it starts exists.
        await tx.insert_idempotency(first)
        await tx.insert_run(make.run())
        await tx.insert_idempotency(
            IdempotencyRecord("hook:deploys", "order-A-1", "sha-2", "run_1", make.at(2))
        )
    async with store.transaction() as tx:
        assert await tx.get_idempotency("hook:refunds", "order-A-1") == first
        assert await tx.get_idempotency("hook:refunds", "order-A-2") is None
        other = await tx.get_idempotency("hook:deploys", "order-A-1")
        assert other is not None and other.fingerprint == "sha-2"


async def test_duplicate_idempotency_key_is_refused(store: Store, make: Make) -> None:
    record = IdempotencyRecord("hook:refunds", "k", "sha-1", "run_1", make.t0)
    async with store.transaction() as tx:
        await tx.insert_idempotency(record)
    commits = store.commits
    with pytest.raises(DuplicateKey):
        async with store.transaction() as tx:
            await tx.insert_idempotency(replace(record, fingerprint="sha-2", run_id="run_2"))
    assert store.commits == commits
    async with store.transaction() as tx:
        assert await tx.get_idempotency("hook:refunds", "k") == record


async def test_stats(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        assert await tx.stats() == {"open_tickets": 0, "outbox_pending": 0, "outbox_failed": 0}
    await seed_runs(store, make)
    async with store.transaction() as tx:
        await tx.insert_ticket(make.ticket("t1"))
        await tx.insert_ticket(make.ticket("t2", target=Pause()))
        await tx.insert_ticket(make.ticket("t3", target=Pause()))
        await tx.close_ticket("t3", status=TicketStatus.VOIDED, at=make.at(1))
        await tx.add_outbox(make.outbox("o1"))
        await tx.add_outbox(make.outbox("o2"))
        await tx.add_outbox(make.outbox("o3", state="failed"))
        await tx.add_outbox(make.outbox("o4", state="delivered"))
        assert await tx.stats() == {"open_tickets": 2, "outbox_pending": 2, "outbox_failed": 1}


# --- transactions ------------------------------------------------------------------------------


class Boom(Exception):
    pass


async def test_failed_transaction_rolls_back_everything(store: Store, make: Make) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("kept"))
        await tx.insert_ticket(make.ticket("kept_ticket", run_id="kept", target=Pause()))
        await tx.insert_call(make.call("kept_call", run_id="kept"))
        await tx.add_outbox(make.outbox("kept_ob", run_id="kept"))
    kept_run = await read_run(store, "kept")
    with pytest.raises(Boom):
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
            await tx.insert_call(make.call())
            await tx.insert_ticket(make.ticket())
            await tx.append_event(make.event())
            await tx.add_outbox(make.outbox())
            await tx.set_run_flags("kept", pause=True)
            await tx.update_run(make.run("kept", turns=9))
            await tx.update_call(make.call("kept_call", run_id="kept", attempts=3))
            await tx.update_outbox(make.outbox("kept_ob", run_id="kept", attempts=3))
            assert await tx.close_ticket("kept_ticket", status=TicketStatus.VOIDED, at=make.at(1))
            assert await tx.claim_run("kept", owner="w", now=make.t0, until=make.t0 + LEASE)
            assert await tx.get_run("run_1") is not None
            raise Boom
    async with store.transaction() as tx:
        assert await tx.get_run("run_1") is None
        assert await tx.get_run("kept") == kept_run
        assert await tx.get_call("call_1") is None
        assert await tx.get_call("kept_call") == make.call("kept_call", run_id="kept")
        assert await tx.get_ticket("tkt_1") is None
        ticket = await tx.get_ticket("kept_ticket")
        assert ticket is not None and ticket.status is TicketStatus.OPEN
        assert await tx.events("run_1") == []
        assert await tx.outbox_for_run("run_1") == []
        assert await tx.outbox_for_run("kept") == [make.outbox("kept_ob", run_id="kept")]
        assert await tx.count_runs() == {"queued": 1}


async def test_cancelled_transaction_rolls_back(store: Store, make: Make) -> None:
    entered = asyncio.Event()

    async def writer() -> None:
        async with store.transaction() as tx:
            await tx.insert_run(make.run())
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(writer())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await read_run(store) is None
    await seed_runs(store, make)
    assert await read_run(store) is not None


async def test_commits_counts_committed_writing_transactions(store: Store, make: Make) -> None:
    start = store.commits
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
    assert store.commits == start + 1

    async with store.transaction() as tx:
        await tx.get_run("run_1")
        await tx.list_runs()
        await tx.claimable_runs(make.t0, 10)
    assert store.commits == start + 1

    with pytest.raises(Boom):
        async with store.transaction() as tx:
            await tx.append_event(make.event())
            raise Boom
    assert store.commits == start + 1

    async with store.transaction() as tx:
        assert await tx.close_ticket("ghost", status=TicketStatus.VOIDED, at=make.t0) is False
        assert await tx.renew_lease("run_1", fence=99, until=make.t0) is False
    assert store.commits == start + 1

    async with store.transaction() as tx:
        await tx.append_event(make.event())
        await tx.append_event(make.event())
    assert store.commits == start + 2


async def test_transactions_of_one_store_do_not_lose_updates(store: Store, make: Make) -> None:
    await seed_runs(store, make)

    async def bump() -> None:
        async with store.transaction() as tx:
            run = await tx.get_run("run_1", for_update=True)
            assert run is not None
            await asyncio.sleep(0)
            await tx.update_run(replace(run, turns=run.turns + 1))

    await asyncio.gather(*(bump() for _ in range(20)))
    assert (await read_run(store)).turns == 20


async def test_transaction_satisfies_the_protocol(store: Store) -> None:
    async with store.transaction() as tx:
        names = [name for name in vars(Transaction) if not name.startswith("_")]
        for name in names:
            assert callable(getattr(tx, name)), name
