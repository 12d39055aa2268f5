"""`bot.bootstrap.build_service`: the serving process built from settings and the
dependencies it is given, running the parts it is told to."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from testkit import echo_model

from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Agent, ManualClock, RunStatus, SequentialIds
from runtime.services.delivery import NullNotifier
from runtime.store.sql import SQLStore
from runtime.worker import Worker

ONLY_THE_WORKER = Parts(listen=False, outbox=False, deadlines=False, wake_ups=False)


def settings_for(path: Path, **values: Any) -> Settings:
    return Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": "bootstrap-operator-0123456789",
            "cookie_secret": "bootstrap-cookie-secret-0123456789abcdef",
            "poll_seconds": 0.05,
            **values,
        }
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
        assert set(service.notifiers) == {"callback", "approval_callback", "claude_code_resume"}
        assert service.slack is None
        assert [key for key in service.app if "notifier" in str(key)] == []
    finally:
        await service.stop(grace_seconds=1)


async def test_given_notifiers_take_the_place_of_the_edges_own(tmp_path: Path) -> None:
    callback, slack = NullNotifier(), NullNotifier()
    service = await build_service(
        settings_for(tmp_path / "signoff.db"),
        agents=[],
        notifiers={"callback": callback, "slack": slack},
        parts=ONLY_THE_WORKER,
    )
    try:
        assert service.notifiers["callback"] is callback
        assert service.notifiers["slack"] is slack  # Slack is off: given, it is delivered to
    finally:
        await service.stop(grace_seconds=1)


class Counting(Worker):
    """A worker that counts the wake-ups for ready runs it is asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wakes = 0

    def wake_runs(self) -> None:
        self.wakes += 1
        super().wake_runs()


async def test_the_worker_is_of_the_given_class_and_the_edges_wake_it(tmp_path: Path) -> None:
    service = await build_service(
        settings_for(tmp_path / "signoff.db"),
        agents=[Agent("plain", "Answer.", echo_model())],
        auth=TokenAuth([ApiToken("tok-u1-0123456789", "U1")]),
        worker_type=Counting,
        parts=ONLY_THE_WORKER,
    )
    client = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
    await client.start_server()
    await service.start()
    try:
        assert isinstance(service.worker, Counting)
        started = await client.post(
            "/api/runs",
            json={"agent": "plain", "input": "hello"},
            headers={"Authorization": "Bearer tok-u1-0123456789"},
        )
        assert started.status == 202, await started.text()
        assert service.worker.wakes == 1
    finally:
        await client.close()
        await service.stop(grace_seconds=1)


# -- no harness wires the process by hand ---------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
HAND_WIRING = re.compile(r"\b(?:Worker|outbox_loop|deliver_round|deadline_loop|build_app)\(")
"""Building a part of `signoff serve`'s process that `build_service` builds."""

RUNTIME_UNIT_TESTS = {
    "tests/unit/test_worker_wakes.py": "the worker's wake-ups, on a worker of its own",
    "tests/unit/test_handoff.py": "the worker taking runs handed over, on a worker of its own",
}
"""Tests of the worker itself, which build one by hand, and why."""


def hand_wired(text: str) -> list[str]:
    """The lines of `text` that build a part of the process by hand."""
    return [line.strip() for line in text.splitlines() if HAND_WIRING.search(line)]


def test_the_scan_finds_a_part_built_by_hand_and_nothing_else() -> None:
    assert hand_wired("worker = Worker(runtime, poll_seconds=0.05)") != []
    assert hand_wired("loop = outbox_loop(runtime, notifier, stop)") != []
    assert hand_wired("app = build_app(settings, runtime, worker, 'x')") != []
    assert hand_wired("class Counting(Worker):\n    worker: Worker | None = None") == []


def test_harnesses_build_the_process_with_build_service() -> None:
    found = []
    for folder in ("tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in RUNTIME_UNIT_TESTS or path == Path(__file__).resolve():
                continue
            found += [f"{name}: {line}" for line in hand_wired(path.read_text(encoding="utf-8"))]
    assert found == [], "build the process with bot.bootstrap.build_service and pass fakes"


def test_the_runtime_unit_tests_let_through_still_build_a_worker() -> None:
    for name in RUNTIME_UNIT_TESTS:
        assert hand_wired((ROOT / name).read_text(encoding="utf-8")), name
