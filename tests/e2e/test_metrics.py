"""`/metrics` of a served signoff: each family moves with what happens, labels stay
bounded, and only one replica exports the database-wide figures."""

from __future__ import annotations

import asyncio
import platform
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from metrics_kit import api, scrape, serve, served, total, turn, until_status, value

from bot.metrics import signoff_version
from runtime import (
    Agent,
    Escalate,
    ManualClock,
    ModelError,
    ScriptedModel,
    ToolOutcomeUnknown,
    final_reply,
    tool_call_reply,
)
from runtime.domain.errors import ModelErrorKind
from runtime.domain.model import ModelRequest, ModelResponse

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))


async def test_one_approval_cycle_moves_every_family(tmp_path: Path) -> None:
    async with served(tmp_path / "signoff.db", settings={"workers": 3}) as service:
        before = await scrape(service)
        assert (
            value(
                before,
                "signoff_build_info",
                version=signoff_version(),
                python=platform.python_version(),
            )
            == 1
        )
        assert value(before, "process_cpu_seconds_total") is not None
        assert total(before, "python_gc_collections_total") > 0
        assert value(before, "signoff_worker_slots") == 3
        assert value(before, "signoff_figures_holder") == 1
        assert value(before, "signoff_database_up") == 1
        assert value(before, "signoff_open_tickets") == 0
        assert value(before, "signoff_queued_work") == 0

        started = await api(service, "POST", "/api/runs", {"agent": "payments", "input": "pay"})
        run = await until_status(service, started["run_id"], "awaiting")
        waiting = await scrape(service)
        assert value(waiting, "signoff_runs", status="awaiting") == 1
        assert value(waiting, "signoff_open_tickets") == 1
        assert value(waiting, "signoff_overdue_tickets") == 0
        assert value(waiting, "signoff_runs_driven_total", status="awaiting") == 1
        assert total(waiting, "signoff_decision_latency_seconds_count") == 0

        ticket = run["pending"][0]["ticket_id"]
        await api(service, "POST", f"/api/tickets/{ticket}/decision", {"decision": "allow"})
        await until_status(service, run["run_id"], "done")
        after = await scrape(service)

    assert value(after, "signoff_click_ack_seconds_count", edge="api") == 1
    assert value(after, "signoff_decisions_total", decision="allow", edge="api") == 1
    assert (
        value(
            after,
            "signoff_decision_latency_seconds_count",
            edge="api",
            ticket_kind="tool_permission",
        )
        == 1
    )
    assert value(after, "signoff_tool_call_seconds_count", tool="transfer", outcome="ok") == 1
    assert total(after, "signoff_model_call_seconds_count") == 2
    assert value(after, "signoff_runs_driven_total", status="done") == 1
    assert total(after, "signoff_notifications_total", platform="console", outcome="delivered") >= 2
    assert total(after, "signoff_notifications_total", outcome="failed") == 0
    assert value(after, "signoff_worker_slots_in_use") == 0
    assert value(after, "signoff_runs", status="done") == 1
    assert value(after, "signoff_open_tickets") == 0
    assert value(after, "signoff_outbox_backlog") == 0
    # No run, ticket or argument makes a series of its own.
    for private in (run["run_id"], ticket, "ACC-1"):
        assert private not in after


def _uncertain_agent() -> Agent:
    model = ScriptedModel(
        [
            tool_call_reply(("flaky", {}), ("broken", {}), ("not_a_tool", {})),
            final_reply("done"),
        ]
    )
    agent = Agent("ops", "Operate.", model)

    @agent.tool(permission="allow", replay_policy="manual")
    def flaky() -> str:
        """Call a service that times out."""
        raise ToolOutcomeUnknown("the service timed out")

    @agent.tool(permission="allow")
    def broken() -> str:
        """Always fails."""
        raise ValueError("no such host")

    return agent


async def test_tool_outcomes_and_uncertain_calls(tmp_path: Path) -> None:
    async with served(tmp_path / "signoff.db", agents=[_uncertain_agent()]) as service:
        started = await api(service, "POST", "/api/runs", {"agent": "ops", "input": "go"})
        await until_status(service, started["run_id"], "awaiting")
        exposition = await scrape(service)
    assert value(exposition, "signoff_uncertain_calls_total", tool="flaky") == 1
    assert value(exposition, "signoff_uncertain_calls_waiting") == 1
    assert (
        value(exposition, "signoff_tool_call_seconds_count", tool="flaky", outcome="uncertain") == 1
    )
    assert (
        value(exposition, "signoff_tool_call_seconds_count", tool="broken", outcome="failed") == 1
    )
    assert value(exposition, "signoff_tool_failures_total", tool="broken") == 1
    # A tool the model made up is never a label of its own.
    assert "not_a_tool" not in exposition


class _Refusing:
    """A model whose provider keeps rate limiting."""

    name = "limited-model"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise ModelError("still rate limited", kind=ModelErrorKind.RATE_LIMITED, provider="fake")


async def test_model_calls_tokens_and_failures(tmp_path: Path) -> None:
    answered = ScriptedModel([final_reply("hi", prompt_tokens=120, completion_tokens=7)])
    agents = [Agent("talker", "Talk.", answered), Agent("limited", "Talk.", _Refusing())]
    async with served(tmp_path / "signoff.db", agents=agents) as service:
        for name in ("talker", "limited"):
            started = await api(service, "POST", "/api/runs", {"agent": name, "input": "hello"})
            await until_status(service, started["run_id"], "done", "failed")
        exposition = await scrape(service, fresh=False)
    assert (
        value(
            exposition, "signoff_model_failures_total", model="limited-model", kind="rate_limited"
        )
        == 1
    )
    assert value(exposition, "signoff_model_call_seconds_count", model="limited-model") == 1
    assert total(exposition, "signoff_model_call_seconds_count") == 2
    assert value(exposition, "signoff_runs_driven_total", status="failed") == 1
    assert value(exposition, "signoff_runs_driven_total", status="done") == 1
    assert total(exposition, "signoff_model_tokens_total", kind="prompt") == 120
    assert total(exposition, "signoff_model_tokens_total", kind="completion") == 7


async def test_expiries_by_action(tmp_path: Path) -> None:
    clock = ManualClock()
    model = ScriptedModel([tool_call_reply(("deploy", {})), final_reply("ok")])
    agent = Agent("deployer", "Deploy.", model)
    escalate = Escalate(approvers=("U-lead",), deadline=timedelta(minutes=30))

    @agent.tool(permission="ask", deadline=timedelta(minutes=10), on_expiry=escalate)
    def deploy() -> str:
        """Deploy."""
        return "deployed"

    expired: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def observe(point: str, info: dict[str, Any]) -> None:
        if point == "ticket_expired":
            expired.put_nowait(info)

    async with served(
        tmp_path / "signoff.db", agents=[agent], clock=clock, checkpoint=observe
    ) as service:
        started = await api(service, "POST", "/api/runs", {"agent": "deployer", "input": "go"})
        await until_status(service, started["run_id"], "awaiting")
        clock.advance(minutes=11)
        assert (await asyncio.wait_for(expired.get(), timeout=10))["action"] == "escalate"
        clock.advance(minutes=31)
        assert (await asyncio.wait_for(expired.get(), timeout=10))["action"] == "deny"
        exposition = await scrape(service, fresh=False)
    assert value(exposition, "signoff_ticket_expiries_total", action="escalate") == 1
    assert value(exposition, "signoff_ticket_expiries_total", action="deny") == 1


async def test_one_replica_exports_the_database_wide_figures(tmp_path: Path) -> None:
    database = tmp_path / "shared.db"
    stopped = False
    first = await serve(database, worker_id="replica-a")
    try:
        await turn(first)
        async with served(database, worker_id="replica-b") as second:
            await turn(second)
            held, other = await scrape(first), await scrape(second)
            assert value(held, "signoff_figures_holder") == 1
            assert value(other, "signoff_figures_holder") == 0
            for name in ("signoff_queued_work", "signoff_open_tickets", "signoff_outbox_backlog"):
                assert value(held, name) == 0, name
                assert value(other, name) is None, name
            assert total(other, "signoff_runs") == 0 and "\nsignoff_runs{" not in other
            # Both report their own figures.
            assert value(other, "signoff_database_up") == 1
            assert value(other, "signoff_worker_slots") is not None
            await first.stop(grace_seconds=1)  # gives the lease up
            stopped = True
            after = await scrape(second)
            assert value(after, "signoff_figures_holder") == 1
            assert value(after, "signoff_queued_work") == 0
    finally:
        if not stopped:
            await first.stop(grace_seconds=1)
