"""`bot.bootstrap.build_service`: the serving process built from settings and the
dependencies it is given, running the parts it is told to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testkit import echo_model

from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Agent, ManualClock, RunStatus, SequentialIds
from runtime.store.sql import SQLStore

ONLY_THE_WORKER = Parts(listen=False, outbox=False, deadlines=False, wake_ups=False)


def settings_for(path: Path, **values: Any) -> Settings:
    return Settings(
        database_url=f"sqlite+aiosqlite:///{path}",
        operator_token="bootstrap-operator-0123456789",
        cookie_secret="bootstrap-cookie-secret-0123456789abcdef",
        poll_seconds=0.05,
        **values,
    )


async def test_the_given_dependencies_are_used_and_the_given_store_stays_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    clock = ManualClock()
    seen: list[str] = []
    agent = Agent("plain", "Answer.", echo_model())
    service = await build_service(
        settings_for(path),
        agents=[agent],
        store=store,
        clock=clock,
        ids=SequentialIds(),
        worker_id="bootstrap-test",
        checkpoint=lambda point, info: seen.append(point),
        parts=ONLY_THE_WORKER,
    )
    assert await service.start() == ""  # not listening: the caller serves the app
    try:
        assert service.runtime.clock is clock
        assert service.runtime.worker_id == "bootstrap-test"
        assert set(service.runtime.agents) == {"plain"}
        result = await service.runtime.start("plain", "hello", requester="U1")
        assert result.status is RunStatus.DONE
        assert "model_call_committed" in seen  # after the metrics, the caller's observer
    finally:
        await service.stop(grace_seconds=1)
    async with store.transaction() as tx:  # the caller's store is still open
        assert (await tx.count_runs()).get("done") == 1
    await store.close()


async def test_the_notifiers_of_the_edges_are_the_services_not_the_applications(
    tmp_path: Path,
) -> None:
    path = tmp_path / "signoff.db"
    service = await build_service(settings_for(path), agents=[], parts=ONLY_THE_WORKER)
    try:
        assert set(service.notifiers) == {"callback"}
        assert service.slack is None
        assert [key for key in service.app if "notifier" in str(key)] == []
    finally:
        await service.stop(grace_seconds=1)
