"""Slack's one message per second per channel holds across processes at the moment each
message is posted, also when a process is slow between claiming an item and posting it.

Two outbox deliverers ("replicas") share one database and post through the real
`SlackNotifier` to the fake Slack, which records when each post arrives: one delivery
round held up by hand, and the outbox of `signoff serve`'s process (`build_service`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from pgtest import fresh_database
from slackbed import slack_config

from adapters.slack import ChannelLimiter, SlackNotifier, build_client
from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime.domain.clock import SystemClock
from runtime.domain.notifications import Delivery, Notification
from runtime.domain.states import RunStatus
from runtime.services.delivery import Claim, deliver_due
from runtime.store.records import OutboxRecord, RunRecord
from runtime.store.sql import SQLStore

INTERVAL = 2.0
"""Seconds between two messages to one channel (Slack's is 1; longer keeps the margin
for a loaded machine wide)."""


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}"
        store = SQLStore.from_url(url)
        await store.migrate()
        await store.close()
        yield url
    else:
        async with fresh_database() as url:
            yield url


class Stalled:
    """A notifier that stalls before its first delivery until told to go on: a process
    paused between claiming an item and posting it."""

    def __init__(self, inner: SlackNotifier) -> None:
        self.inner = inner
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        self.entered.set()
        await self.go.wait()
        return await self.inner.deliver(note, delivery)


async def queue_answers(store: SQLStore, count: int) -> None:
    """`count` runs that finished in channel C1, each with its answer queued."""
    now = datetime.now(UTC)
    async with store.transaction() as tx:
        for n in range(count):
            run_id = f"run_{n}"
            await tx.insert_run(
                RunRecord(
                    run_id=run_id,
                    thread_id=f"thread_{n}",
                    agent="support",
                    agent_version="v1",
                    status=RunStatus.DONE,
                    input="hello",
                    requester="U1",
                    created_at=now,
                    updated_at=now,
                    origin={"platform": "slack", "channel": "C1"},
                )
            )
            await tx.add_outbox(
                OutboxRecord(
                    outbox_id=f"ob_{n}",
                    run_id=run_id,
                    kind="run_finished",
                    payload={
                        "run_id": run_id,
                        "agent": "support",
                        "status": "done",
                        "text": f"answer {n}",
                    },
                    destination={"platform": "slack", "channel": "C1"},
                    created_at=now + timedelta(microseconds=n),
                    next_attempt_at=now,
                )
            )


async def test_a_slow_process_waits_for_the_post_of_another(database: str, fake: FakeSlack) -> None:
    first, second = SQLStore.from_url(database), SQLStore.from_url(database)
    config = slack_config(fake)
    # No pacing inside either process: what is checked is the pacing between them.
    slow = Stalled(SlackNotifier(build_client(config), limiter=ChannelLimiter(interval=0.0)))
    pacing = {"slack": INTERVAL}
    quick: Service | None = None
    stalled: asyncio.Task[int] | None = None
    try:
        await queue_answers(first, 2)
        # The slow process claims the first answer, then stalls before posting it.
        stalled = asyncio.create_task(
            deliver_due(first, SystemClock(), slow, claim=Claim(owner="slow", pacing=pacing))
        )
        await asyncio.wait_for(slow.entered.wait(), 20)
        # The other (`signoff serve`'s outbox alone) claims the second once the channel's
        # claim slot is free, and posts it.
        quick = await build_service(
            Settings.model_validate(
                {
                    "database_url": database,
                    "operator_token": "pacing-operator-0123456789",
                    "cookie_secret": "pacing-cookie-secret-0123456789abcdef",
                    "poll_seconds": 0.05,
                }
            ),
            agents=[],
            store=second,
            worker_id="quick",
            slack_config=config,
            slack_limiter=ChannelLimiter(interval=0.0),
            pacing=pacing,
            parts=Parts(listen=False, deadlines=False, wake_ups=False, discord=False, worker=False),
        )
        await quick.start()
        await fake.wait_for(lambda: fake.posts("C1"), "the quick process's post")
        slow.go.set()
        assert await stalled == 1
        posts = await fake.wait_for(
            lambda: (lambda p: p if len(p) == 2 else None)(fake.posts("C1")), "both posts"
        )
        # The quick process's answer first; the slow one's no sooner than the interval after.
        assert ["answer 1" in p.args["text"] for p in posts] == [True, False]
        # Without a slot taken at the post the gap is the time between two HTTP calls
        # (milliseconds). With it, the full interval, less however long the quick
        # process's post took to arrive after it took the slot (kept well under half).
        assert posts[1].at - posts[0].at >= INTERVAL / 2
    finally:
        slow.go.set()
        if quick is not None:
            await quick.stop(grace_seconds=1)
        if stalled is not None and not stalled.done():
            await stalled
        await first.close()
        await second.close()
