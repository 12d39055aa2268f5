"""What several processes on one database rely on: claims, pacing and named leases.

The first part runs over every store; the second races several `SQLStore` engines on one
database (SQLite file and PostgreSQL), like replicas do.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from test_received_contract import received

from runtime import (
    Agent,
    ManualClock,
    RunStatus,
    Runtime,
    ScriptedModel,
    final_reply,
    tool_call_reply,
)
from runtime.domain.notifications import Delivery, Notification
from runtime.services.delivery import (
    Claim,
    NullNotifier,
    RetryPolicy,
    RoutingNotifier,
    _record_silent,
    deliver_due,
)
from runtime.store.base import Store
from runtime.store.sql import SQLStore

if TYPE_CHECKING:
    from conftest import Make

SLACK = {"platform": "slack", "channel": "C1"}


async def seed_outbox(store: Store, make: Make, *items: tuple[str, dict[str, str]]) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run())
        for n, (outbox_id, destination) in enumerate(items):
            created = make.at(n)
            await tx.add_outbox(
                make.outbox(
                    outbox_id, destination=destination, created_at=created, next_attempt_at=created
                )
            )


# --- outbox claims ------------------------------------------------------------------------


async def test_a_claimed_item_is_nobody_elses_until_its_lease_expires(
    store: Store, make: Make
) -> None:
    await seed_outbox(store, make, ("a", SLACK), ("b", {"platform": "console"}))
    async with store.transaction() as tx:
        claimed = await tx.claim_outbox(make.at(5), 10, owner="p1", until=make.at(65))
    assert [(o.outbox_id, o.lease_owner, o.fence) for o in claimed] == [
        ("a", "p1", 1),
        ("b", "p1", 1),
    ]
    assert claimed[0].lease_expires_at == make.at(65)
    async with store.transaction() as tx:
        assert await tx.claim_outbox(make.at(64), 10, owner="p2", until=make.at(99)) == []
        again = await tx.claim_outbox(make.at(65), 1, owner="p2", until=make.at(99))
    assert [(o.outbox_id, o.lease_owner, o.fence) for o in again] == [("a", "p2", 2)]
    async with store.transaction() as tx:
        assert (await tx.outbox_for_run("run_1"))[0] == again[0]


async def test_only_the_latest_claim_records_the_outcome(store: Store, make: Make) -> None:
    await seed_outbox(store, make, ("a", SLACK))
    async with store.transaction() as tx:
        [first] = await tx.claim_outbox(make.at(1), 10, owner="p1", until=make.at(2))
    async with store.transaction() as tx:
        [second] = await tx.claim_outbox(make.at(3), 10, owner="p2", until=make.at(9))
    late = replace(first, state="delivered", platform_ref={"ts": "1"}, lease_owner=None)
    async with store.transaction() as tx:
        assert await tx.update_outbox(late, fence=first.fence) is False
    done = replace(second, state="delivered", platform_ref={"ts": "2"}, lease_owner=None)
    async with store.transaction() as tx:
        assert await tx.update_outbox(done, fence=second.fence) is True
    async with store.transaction() as tx:
        assert await tx.outbox_for_run("run_1") == [done]
        # Delivered: no claim can record anything on it any more, nor claim it.
        assert await tx.update_outbox(replace(done, state="failed"), fence=done.fence) is False
        assert await tx.claim_outbox(make.at(99), 10, owner="p3", until=make.at(100)) == []


async def test_console_items_are_recorded_together_without_a_delivery(
    store: Store, make: Make
) -> None:
    console = {"platform": "console"}
    await seed_outbox(store, make, ("a", console), ("b", SLACK), ("c", console), ("d", console))
    slack = CountingNotifier()
    notifier = RoutingNotifier({"console": NullNotifier(), "slack": slack})
    commits = store.commits
    assert await deliver_due(store, ManualClock(make.at(5)), notifier) == 4
    # The claim, the Slack item's outcome, and one for the three console items.
    assert store.commits - commits == 3
    assert slack.posts == ["b"]
    async with store.transaction() as tx:
        items = {o.outbox_id: o for o in await tx.outbox_for_run("run_1")}
    assert {(o.state, o.attempts, o.lease_owner) for o in items.values()} == {
        ("delivered", 1, None)
    }
    assert items["a"].delivered_at == make.at(5) and items["a"].platform_ref is None


async def test_a_console_item_claimed_again_meanwhile_is_not_recorded(
    store: Store, make: Make
) -> None:
    await seed_outbox(store, make, ("a", {"platform": "console"}))
    notifier = RoutingNotifier({"console": NullNotifier()})
    # This process's claim expires while the database is slow; another process claims it.
    async with store.transaction() as tx:
        [stale] = await tx.claim_outbox(make.at(1), 10, owner="p1", until=make.at(2))
        [taken] = await tx.claim_outbox(make.at(3), 10, owner="p2", until=make.at(60))
    assert (
        await _record_silent(store, ManualClock(make.at(4)), [stale], RetryPolicy(), Claim()) == 0
    )
    async with store.transaction() as tx:
        [item] = await tx.outbox_for_run("run_1")
    assert (item.state, item.lease_owner, item.fence) == ("pending", "p2", taken.fence)
    assert await deliver_due(store, ManualClock(make.at(61)), notifier) == 1


async def test_a_retry_is_claimable_when_due(store: Store, make: Make) -> None:
    await seed_outbox(store, make, ("a", SLACK))
    async with store.transaction() as tx:
        [item] = await tx.claim_outbox(make.at(1), 10, owner="p1", until=make.at(60))
    retry = replace(item, attempts=1, next_attempt_at=make.at(10), lease_expires_at=None)
    async with store.transaction() as tx:
        assert await tx.update_outbox(retry, fence=item.fence)
        assert await tx.claim_outbox(make.at(9), 10, owner="p2", until=make.at(70)) == []
        [again] = await tx.claim_outbox(make.at(10), 10, owner="p2", until=make.at(70))
    assert (again.attempts, again.fence) == (1, 2)


async def test_paced_channels_give_one_item_per_slot(store: Store, make: Make) -> None:
    other = {"platform": "slack", "channel": "C2"}
    discord = {"platform": "discord", "channel_id": "77"}
    await seed_outbox(
        store,
        make,
        ("c1_a", SLACK),
        ("c1_b", SLACK),
        ("c2_a", other),
        ("d_a", discord),
        ("d_b", discord),
        ("x", {"platform": "console"}),
    )
    pacing = {"slack": 1.0}
    async with store.transaction() as tx:
        first = await tx.claim_outbox(make.at(10), 10, owner="p1", until=make.at(70), pacing=pacing)
    # Discord is not paced here: both of its items come at once.
    assert [o.outbox_id for o in first] == ["c1_a", "c2_a", "d_a", "d_b", "x"]
    async with store.transaction() as tx:
        # The slot of C1 is taken until 11s, for every process.
        assert (
            await tx.claim_outbox(make.at(10.5), 10, owner="p2", until=make.at(70), pacing=pacing)
            == []
        )
        later = await tx.claim_outbox(make.at(11), 10, owner="p2", until=make.at(70), pacing=pacing)
    assert [o.outbox_id for o in later] == ["c1_b"]


async def test_claim_limits(store: Store, make: Make) -> None:
    await seed_outbox(store, make, ("a", SLACK), ("b", SLACK), ("c", SLACK))
    async with store.transaction() as tx:
        assert await tx.claim_outbox(make.at(5), 0, owner="p", until=make.at(9)) == []
        two = await tx.claim_outbox(make.at(5), 2, owner="p", until=make.at(9))
    assert [o.outbox_id for o in two] == ["a", "b"]


# --- received commands ----------------------------------------------------------------------


async def test_received_commands_are_claimed_once(store: Store) -> None:
    first, second = received("rc_1", "d1", 1), received("rc_2", "d2", 2)
    async with store.transaction() as tx:
        await tx.insert_received(second)
        await tx.insert_received(first)
    now, later = first.received_at, first.received_at.replace(minute=5)
    async with store.transaction() as tx:
        claimed = await tx.claim_received(now, 10, owner="p1", until=later)
    assert [(r.command_id, r.lease_owner, r.lease_expires_at) for r in claimed] == [
        ("rc_1", "p1", later),
        ("rc_2", "p1", later),
    ]
    async with store.transaction() as tx:
        assert await tx.claim_received(now, 10, owner="p2", until=later) == []
        # A refusal never overwrites an apply: only a pending command is written.
        applied = replace(claimed[0], state="applied", applied_at=now)
        assert await tx.update_received(applied, only_pending=True) is True
        refused = replace(claimed[0], state="refused", error_code="not_awaiting")
        assert await tx.update_received(refused, only_pending=True) is False
        # The other one's claim expired: it may be taken over.
        [again] = await tx.claim_received(later, 10, owner="p2", until=later.replace(minute=9))
    assert (again.command_id, again.lease_owner) == ("rc_2", "p2")
    async with store.transaction() as tx:
        assert [r.command_id for r in await tx.pending_received(10)] == ["rc_2"]


# --- named leases ---------------------------------------------------------------------------


async def test_named_lease_has_one_holder_at_a_time(store: Store, make: Make) -> None:
    name = "discord-gateway"
    async with store.transaction() as tx:
        assert await tx.take_lease(name, owner="a", now=make.at(0), until=make.at(10)) == 1
        assert await tx.take_lease(name, owner="b", now=make.at(5), until=make.at(15)) is None
        # Renewing keeps the fence.
        assert await tx.take_lease(name, owner="a", now=make.at(9), until=make.at(19)) == 1
        assert await tx.take_lease(name, owner="b", now=make.at(18), until=make.at(28)) is None
        # Expired: taken over, with a new fence.
        assert await tx.take_lease(name, owner="b", now=make.at(19), until=make.at(29)) == 2
        await tx.drop_lease(name, owner="a")  # not the holder: nothing happens
        assert await tx.take_lease(name, owner="a", now=make.at(20), until=make.at(30)) is None
        await tx.drop_lease(name, owner="b")
        assert await tx.take_lease(name, owner="a", now=make.at(20), until=make.at(30)) == 3
        assert await tx.take_lease("other", owner="b", now=make.at(20), until=make.at(30)) == 1


# --- several engines on one database --------------------------------------------------------


async def test_racing_outbox_claims_never_share_an_item(sql_url: str, make: Make) -> None:
    stores = [SQLStore.from_url(sql_url, busy_timeout_ms=5000) for _ in range(3)]
    try:
        async with stores[0].transaction() as tx:
            await tx.insert_run(make.run())
            for n in range(30):
                channel = {"platform": "slack", "channel": f"C{n % 6}"}
                await tx.add_outbox(make.outbox(f"ob_{n:02}", destination=channel))

        async def claim_all(store: SQLStore, owner: str) -> list[str]:
            mine: list[str] = []
            for _ in range(10):
                async with store.transaction() as tx:
                    found = await tx.claim_outbox(make.at(1), 4, owner=owner, until=make.at(60))
                mine += [o.outbox_id for o in found]
            return mine

        claims = await asyncio.gather(*(claim_all(s, f"p{n}") for n, s in enumerate(stores)))
        every = [outbox_id for mine in claims for outbox_id in mine]
        assert sorted(every) == [f"ob_{n:02}" for n in range(30)]  # each once, none lost
        async with stores[1].transaction() as tx:
            owners = {o.outbox_id: o.lease_owner for o in await tx.outbox_for_run("run_1")}
        for n, mine in enumerate(claims):
            assert all(owners[o] == f"p{n}" for o in mine)
    finally:
        for store in stores:
            await store.close()


async def test_racing_paced_claims_take_one_slot(sql_url: str, make: Make) -> None:
    stores = [SQLStore.from_url(sql_url, busy_timeout_ms=5000) for _ in range(3)]
    try:
        async with stores[0].transaction() as tx:
            await tx.insert_run(make.run())
            for n in range(6):
                await tx.add_outbox(make.outbox(f"ob_{n}", destination=SLACK))

        async def claim(store: SQLStore, owner: str) -> list[str]:
            async with store.transaction() as tx:
                found = await tx.claim_outbox(
                    make.at(1), 10, owner=owner, until=make.at(60), pacing={"slack": 5.0}
                )
            return [o.outbox_id for o in found]

        claims = await asyncio.gather(*(claim(s, f"p{n}") for n, s in enumerate(stores)))
        assert sorted(len(c) for c in claims) == [0, 0, 1]
        assert [c for c in claims if c] == [["ob_0"]]
    finally:
        for store in stores:
            await store.close()


async def test_racing_received_claims_and_leases(sql_url: str, make: Make) -> None:
    stores = [SQLStore.from_url(sql_url, busy_timeout_ms=5000) for _ in range(3)]
    try:
        async with stores[0].transaction() as tx:
            for n in range(12):
                await tx.insert_received(received(f"rc_{n:02}", f"d{n}", n))
        now = received("x", "x").received_at

        async def claim(store: SQLStore, owner: str) -> tuple[list[str], int | None]:
            mine: list[str] = []
            for _ in range(4):
                async with store.transaction() as tx:
                    found = await tx.claim_received(now, 2, owner=owner, until=make.at(99))
                mine += [r.command_id for r in found]
            async with store.transaction() as tx:
                fence = await tx.take_lease(
                    "discord-gateway", owner=owner, now=make.at(0), until=make.at(30)
                )
            return mine, fence

        results = await asyncio.gather(*(claim(s, f"p{n}") for n, s in enumerate(stores)))
        every = sorted(c for mine, _ in results for c in mine)
        assert every == [f"rc_{n:02}" for n in range(12)]
        assert sorted((fence or 0) for _, fence in results) == [0, 0, 1]
    finally:
        for store in stores:
            await store.close()


class CountingNotifier:
    """Records every delivery; yields while "posting", so deliveries interleave."""

    def __init__(self) -> None:
        self.posts: list[str] = []

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        await asyncio.sleep(0.001)
        self.posts.append(delivery.outbox_id)
        return {"ts": delivery.outbox_id}


async def test_two_processes_deliver_every_item_exactly_once(sql_url: str, make: Make) -> None:
    stores = [SQLStore.from_url(sql_url, busy_timeout_ms=5000) for _ in range(2)]
    notifier = CountingNotifier()
    clock = ManualClock(make.at(5))
    try:
        async with stores[0].transaction() as tx:
            await tx.insert_run(make.run())
            for n in range(40):
                channel = {"platform": "slack", "channel": f"C{n % 4}"}
                await tx.add_outbox(make.outbox(f"ob_{n:02}", destination=channel))

        async def drain(store: SQLStore, owner: str) -> None:
            claim = Claim(owner=owner)
            while await deliver_due(store, clock, notifier, limit=3, claim=claim):
                pass

        await asyncio.gather(*(drain(s, f"p{n}") for n, s in enumerate(stores)))
        assert sorted(notifier.posts) == [f"ob_{n:02}" for n in range(40)]
        async with stores[1].transaction() as tx:
            items = await tx.outbox_for_run("run_1")
        assert {o.state for o in items} == {"delivered"}
        assert all(o.platform_ref == {"ts": o.outbox_id} and o.lease_owner is None for o in items)
    finally:
        for store in stores:
            await store.close()


def _deadline_agent() -> Agent:
    model = ScriptedModel([tool_call_reply(("deploy", {"service": "api"})), final_reply("Done.")])
    agent = Agent("deployer", "Deploy.", model)

    @agent.tool(permission="ask", deadline=timedelta(minutes=10))
    def deploy(service: str) -> str:
        """Deploy a service."""
        return f"deployed {service}"

    return agent


async def test_three_processes_expire_each_ticket_exactly_once(sql_url: str) -> None:
    clock = ManualClock()
    stores = [SQLStore.from_url(sql_url, busy_timeout_ms=5000) for _ in range(3)]
    try:
        runtimes = [
            Runtime(store, [_deadline_agent()], clock=clock, worker_id=f"p{n}")
            for n, store in enumerate(stores)
        ]
        parked = [
            await runtimes[n % 3].start("deployer", f"deploy {n}", requester="U1") for n in range(8)
        ]
        assert all(p.status is RunStatus.AWAITING for p in parked)
        clock.advance(11 * 60)
        expired = await asyncio.gather(*(rt.expire_overdue() for rt in runtimes * 2))
        every = [ticket_id for found in expired for ticket_id in found]
        assert sorted(every) == sorted(p.pending[0].ticket_id for p in parked)
        async with stores[0].transaction() as tx:
            for p in parked:
                events = [e.kind for e in await tx.events(p.run_id)]
                assert events.count("ticket_expired") == 1
                outbox = [o.kind for o in await tx.outbox_for_run(p.run_id)]
                assert outbox.count("expired") == 1
                run = await tx.get_run(p.run_id)
                assert run is not None and run.status is RunStatus.QUEUED
    finally:
        for store in stores:
            await store.close()
