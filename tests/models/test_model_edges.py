"""The approval cycle on real SDK models, decided from the operator console and from Slack.

A run on `OpenAIModel` / `AnthropicModel` (base URL at the fake provider) parks on an
``ask`` call; the card shows the model's stated reason; a person decides through the
console's HTTP form or a Slack button (the fake Slack, real slack-bolt); a real worker
resumes the run and the model's next request carries the result.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from fake_llm import Call, FakeLLM, Protocol, Turn

from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import Agent, RunResult, RunStatus, Runtime, tool
from runtime.store.sql import SQLStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters" / "slack"))

from fake_slack import FakeSlack
from slackbed import SlackBed, buttons, slack_config, text_of

from adapters.slack import ChannelLimiter
from runtime.services.delivery import RetryPolicy

ModelFactory = Callable[..., Any]  # the `models` fixture

pytestmark = pytest.mark.timeout(60)

REASON = "Invoice 42 asks for 250.00 to ACME-1."
TOKEN = "tok-u1-0123456789"


def bank(model: Any, ledger: list[dict[str, Any]]) -> Agent:
    @tool(permission="ask")
    async def transfer(account: str, amount: float) -> dict[str, Any]:
        """Move money to an account."""
        ledger.append({"account": account, "amount": amount})
        return {"transferred": amount, "to": account}

    return Agent("bank", "You move money carefully.", model, tools=[transfer])


def script_transfer(fake: FakeLLM) -> None:
    fake.script(
        Turn.ask(Call("transfer", {"account": "ACME-1", "amount": 250.0}), text=REASON),
        Turn.say("Paid 250.00 to ACME-1."),
    )


def serve_settings(path: Path, **values: Any) -> Settings:
    """`signoff serve`'s settings over the SQLite file at `path`."""
    return Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": "models-operator-0123456789",
            "cookie_secret": "c" * 32,
            **values,
        }
    )


async def wait_run(runtime: Runtime, run_id: str, check: Callable[[RunResult], bool]) -> RunResult:
    deadline = time.monotonic() + 20
    while True:
        result = await runtime.get(run_id)
        if check(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} is {result}")
        await asyncio.sleep(0.02)


# -- the console ------------------------------------------------------------------------------


class Console:
    def __init__(self, runtime: Runtime, client: TestClient[web.Request, web.Application]) -> None:
        self.runtime = runtime
        self.client = client

    async def csrf(self, path: str) -> str:
        response = await self.client.get(path)
        assert response.status == 200, await response.text()
        found = re.search(r'name="csrf" value="([^"]+)"', await response.text())
        assert found
        return found.group(1)

    async def login(self) -> str:
        csrf = await self.csrf("/login")
        response = await self.client.post(
            "/login", data={"csrf": csrf, "token": TOKEN}, allow_redirects=False
        )
        assert response.status == 303, await response.text()
        return await self.csrf("/runs")


@pytest.fixture
async def console(
    tmp_path: Path, fake: FakeLLM, models: ModelFactory, provider: Protocol
) -> AsyncIterator[tuple[Console, list[dict[str, Any]]]]:
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    ledger: list[dict[str, Any]] = []
    service = await build_service(
        serve_settings(path, poll_seconds=0.05),
        agents=[bank(models(provider), ledger)],
        store=store,
        auth=TokenAuth([ApiToken(TOKEN, "U1", name="Uma")]),
        parts=Parts(listen=False, outbox=False, deadlines=False, wake_ups=False),
    )
    client = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
    await client.start_server()
    await service.start()
    try:
        yield Console(service.runtime, client), ledger
    finally:
        await client.close()
        await service.stop(grace_seconds=5)
        await store.close()


async def test_console_start_and_allow(
    console: tuple[Console, list[dict[str, Any]]], fake: FakeLLM
) -> None:
    bed, ledger = console
    script_transfer(fake)
    csrf = await bed.login()
    response = await bed.client.post(
        "/start",
        data={"csrf": csrf, "agent": "bank", "input": "Pay invoice 42."},
        allow_redirects=False,
    )
    assert response.status == 303, await response.text()
    run_id = response.headers["Location"].rsplit("/", 1)[1]
    parked = await wait_run(bed.runtime, run_id, lambda r: r.status is RunStatus.AWAITING)
    [entry] = parked.pending
    assert entry.prompt == REASON

    page = await bed.client.get("/tickets")
    html = await page.text()
    assert f"Why: </strong>{REASON}" in html

    response = await bed.client.post(
        f"/tickets/{entry.ticket_id}/decide",
        data={"csrf": csrf, "action": "allow", "next": "/tickets"},
        allow_redirects=False,
    )
    assert response.status == 303, await response.text()
    done = await wait_run(bed.runtime, run_id, lambda r: r.status.finished)
    assert done.status is RunStatus.DONE and done.text == "Paid 250.00 to ACME-1."
    assert ledger == [{"account": "ACME-1", "amount": 250.0}]
    assert fake.requests[-1].tool_results() == ['{"transferred": 250.0, "to": "ACME-1"}']
    assert fake.requests[-1].user_text() == "Pay invoice 42."


async def test_console_deny_with_a_reason_reaches_the_model(
    console: tuple[Console, list[dict[str, Any]]], fake: FakeLLM
) -> None:
    bed, ledger = console
    script_transfer(fake)
    csrf = await bed.login()
    started = await bed.runtime.start("bank", "Pay it.", requester="U1", wait=False)
    parked = await wait_run(bed.runtime, started.run_id, lambda r: r.status is RunStatus.AWAITING)
    response = await bed.client.post(
        f"/tickets/{parked.pending[0].ticket_id}/decide",
        data={"csrf": csrf, "action": "deny", "reason": "wrong account"},
        allow_redirects=False,
    )
    assert response.status == 303, await response.text()
    await wait_run(bed.runtime, started.run_id, lambda r: r.status.finished)
    assert ledger == []
    assert fake.requests[-1].tool_results() == ["Permission denied: wrong account"]


# -- Slack ----------------------------------------------------------------------------------------


@pytest.fixture
async def slack(
    tmp_path: Path, fake: FakeLLM, models: ModelFactory, provider: Protocol
) -> AsyncIterator[tuple[SlackBed, list[dict[str, Any]]]]:
    slack_fake = FakeSlack()
    await slack_fake.start()
    db_path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(db_path)
    service: Service | None = None
    test_client: TestClient[web.Request, web.Application] | None = None
    try:
        await store.migrate()
        ledger: list[tuple[str, dict[str, Any]]] = []
        flat: list[dict[str, Any]] = []
        agents = [bank(models(provider), flat)]
        service = await build_service(
            serve_settings(db_path, poll_seconds=0.02),
            agents=agents,
            store=store,
            slack_config=slack_config(slack_fake),
            slack_limiter=ChannelLimiter(interval=0.0),
            outbox_policy=RetryPolicy(base_delay=0.1),
            pacing={},
            parts=Parts(listen=False, deadlines=False, wake_ups=False),
        )
        assert service.slack is not None
        test_client = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
        await test_client.start_server()
        await service.start()
        bed = SlackBed(
            slack_fake,
            service.runtime,
            store,
            service.runtime.clock,
            service.worker,
            service.slack.bolt,
            test_client,
            agents,
            db_path,
            ledger,
        )
        yield bed, flat
    finally:
        if test_client is not None:
            await test_client.close()
        await asyncio.sleep(0.05)  # bolt's background listeners
        if service is not None:
            await service.stop(grace_seconds=5)
        await store.close()
        await slack_fake.stop()


async def test_slack_card_shows_the_reason_and_allow_finishes_the_run(
    slack: tuple[SlackBed, list[dict[str, Any]]], fake: FakeLLM
) -> None:
    slack, transfers = slack
    script_transfer(fake)
    reply = await slack.command("bank pay invoice 42")
    assert reply.status == 200
    card = await slack.card("transfer")
    run = await slack.latest_run()
    assert REASON in text_of(card)  # the model's text beside the call, on the card
    assert "ACME-1" in text_of(card)

    values = buttons(card)
    reply = await slack.click("signoff.allow", values["signoff.allow"], card=card)
    assert reply.status == 200
    done = await slack.finished(run.run_id)
    assert done.status is RunStatus.DONE
    assert transfers == [{"account": "ACME-1", "amount": 250.0}]
    answer = await slack.thread_message(card, "Paid 250.00")
    assert answer.text.startswith("Paid 250.00 to ACME-1.")
    assert fake.requests[0].user_text() == "pay invoice 42"
    assert fake.requests[-1].tool_results() == ['{"transferred": 250.0, "to": "ACME-1"}']


async def test_slack_failed_model_call_is_posted_in_the_thread(
    slack: tuple[SlackBed, list[dict[str, Any]]], fake: FakeLLM, provider: Protocol
) -> None:
    slack, _ = slack
    fake.script(Turn.too_long())
    await slack.command("bank pay everything")
    run = await slack.latest_run()
    failed = await slack.finished(run.run_id)
    assert failed.status is RunStatus.FAILED
    [root] = [m for m in slack.fake.messages.values() if " asked *" in m.text]
    posted = await slack.thread_message(root.ts, "context_length")
    assert f"model call failed ({provider} 400, context_length)" in posted.text
