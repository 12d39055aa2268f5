"""A served signoff whose external agent's cards go to the fake Slack.

`serve_external` builds `signoff serve`'s process (`bot.bootstrap.build_service`) on a fresh
SQLite file with an agents file declaring the external agent ``support`` (its cards go to
the Slack channel `CHANNEL`, U1 decides), the Slack edge in HTTP mode pointed at the fake
Slack, and the API token `AGENT_TOKEN` that agent code asks with. It listens on 127.0.0.1
(a free port): agent code reaches ``/api/approvals`` over HTTP, and clicks are posted to
``/slack/events`` signed the way Slack signs them. Its worker, outbox and deadline loop
run; time is a `ManualClock` (started at the real time, so decision tokens verify) the
test moves to make deadlines pass. `serve_env` is the same service's environment for a real
`signoff serve` subprocess, for tests that kill and restart it.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from fake_slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    Message,
    click_payload,
    interaction_body,
    signed_headers,
    submission_payload,
)
from pydantic import SecretStr
from slackbed import buttons, slack_config
from testkit import ROOT, query, settled, until

from adapters.client import AsyncSignoffClient, Decision, RetryPolicy
from adapters.slack import ChannelLimiter
from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import ManualClock, RunStatus
from runtime.services.delivery import RetryPolicy as OutboxRetry

AGENT_TOKEN = "tok-support-agent-0123456789"
"""The token agent code asks with (sender ``svc-support``)."""
OPERATOR_TOKEN = "tok-ops-0123456789abcdef"
COOKIE_SECRET = "test-cookie-secret-0123456789abcdef"
CHANNEL = "CEXT"
"""The Slack channel the external agent's cards go to."""
APPROVER = "U1"
"""The Slack user who decides the external agent's calls."""
QUICK_RETRY = RetryPolicy(first_delay=0.05, max_delay=0.5, give_up_after=60.0)

AGENTS_FILE = f"""
[agents.support]
external = true
description = "Customer support (runs elsewhere)"
approvers = ["{APPROVER}"]
approvals = {{ platform = "slack", channel = "{CHANNEL}" }}
overrides = ["deadline"]

[agents.support.rules.refund]
permission = "ask"
editable = ["amount"]
grants = ["run", "thread"]

[agents.support.rules.lookup_order]
permission = "allow"
"""
"""``support``: refunds ask U1 in Slack (the amount may be edited, grants offered),
look-ups are allowed; a request may set its own deadline."""


@dataclass
class External:
    """The running service, the fake Slack it posts to, and what a test does with them."""

    fake: FakeSlack
    service: Service
    clock: ManualClock
    url: str
    database: Path
    _http: aiohttp.ClientSession

    @asynccontextmanager
    async def client(self) -> AsyncIterator[AsyncSignoffClient]:
        """An async signoff client with the agent's token (closed after the block)."""
        async with (
            httpx.AsyncClient(trust_env=False) as http,
            AsyncSignoffClient(
                self.url, token=AGENT_TOKEN, retry=QUICK_RETRY, http_client=http
            ) as client,
        ):
            yield client

    async def approvals(self, session_id: str) -> list[Decision]:
        """The approvals of one session, as the agent's token reads them."""
        async with self._http.get(
            f"{self.url}/api/approvals",
            params={"session_id": session_id},
            headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
        ) as answer:
            assert answer.status == 200, await answer.text()
            body = await answer.json()
        return [Decision.from_json(item) for item in body["approvals"]]

    # -- requests Slack sends ------------------------------------------------------------
    async def post(self, body: str) -> tuple[int, str]:
        """POST a body to ``/slack/events`` signed the Slack way; the status and text."""
        async with self._http.post(
            f"{self.url}/slack/events", data=body.encode(), headers=signed_headers(body)
        ) as answer:
            return answer.status, await answer.text()

    async def click(self, action_id: str, card: Message, *, user: str = APPROVER) -> int:
        """Click the `action_id` button of `card` as `user`; the HTTP status Slack got."""
        message: dict[str, Any] = {"ts": card.ts, "text": card.text, "blocks": card.blocks}
        if card.thread_ts:
            message["thread_ts"] = card.thread_ts
        payload = click_payload(
            action_id,
            buttons(card)[action_id],
            user=user,
            channel=card.channel,
            message=message,
            response_url=f"{self.fake.url}/response/{user}",
        )
        status, _ = await self.post(interaction_body(payload))
        return status

    async def submit(
        self, view: dict[str, Any], values: dict[str, dict[str, Any]], *, user: str = APPROVER
    ) -> tuple[int, str]:
        """Submit a modal the bot opened, with these state values."""
        return await self.post(interaction_body(submission_payload(view, values, user=user)))

    # -- what Slack was told -------------------------------------------------------------
    def cards(self, tool: str) -> list[Message]:
        """Every card posted about `tool`, oldest first."""
        return cards_of(self.fake, tool)

    async def card(self, tool: str) -> Message:
        """The card of `tool`, once posted."""
        found = await self.fake.wait_for(lambda: self.cards(tool), f"the card of {tool}")
        return found[-1]

    async def updated(self, card: Message, times: int = 1) -> Message:
        """`card` once it was edited (``chat.update``) `times` times."""
        return await self.fake.wait_for(
            lambda: card if card.updates >= times else None, "the card's update"
        )

    async def opened_view(self, before: int) -> dict[str, Any]:
        """The modal opened after the first `before` ``views.open`` calls."""
        [opened] = await self.fake.wait_for(
            lambda: self.fake.called("views.open")[before:], "a modal to open"
        )
        view: dict[str, Any] = opened.args["view"]
        return view

    async def ephemeral(self, user: str) -> list[dict[str, Any]]:
        """The ephemeral messages to `user`, once there is one."""
        found: list[dict[str, Any]] = await self.fake.wait_for(
            lambda: [
                c.args for c in self.fake.called("chat.postEphemeral") if c.args["user"] == user
            ],
            f"an ephemeral message to {user}",
        )
        return found

    async def settled(self) -> None:
        """Wait until every stored click was applied and nothing else is due."""
        await settled(self.service.runtime, self.service.worker)

    async def finished(self, approval_id: str) -> None:
        """Wait until the approval's run (its id is the approval's) has finished."""

        def ended() -> bool:
            rows = query(self.database, f"SELECT status FROM runs WHERE run_id = '{approval_id}'")
            return bool(rows) and RunStatus(rows[0][0]).finished

        await until(ended, f"run {approval_id} to finish")

    def received(self) -> list[str]:
        """The states of the clicks and submissions stored, oldest first."""
        rows = query(self.database, "SELECT state FROM received_commands ORDER BY received_at")
        return [str(state) for (state,) in rows]


def cards_of(fake: FakeSlack, tool: str) -> list[Message]:
    """Every card the fake Slack holds about `tool`, oldest first."""
    return [
        m
        for m in fake.messages.values()
        if any(
            b.get("type") == "header" and b["text"]["text"] == f"Approval needed: {tool}"
            for b in m.blocks
        )
    ]


def serve_env(fake: FakeSlack, directory: Path) -> dict[str, str]:
    """The environment of a `signoff serve` subprocess with the same agents file, token and
    Slack edge, on `directory`'s SQLite file and a fixed free port (a restarted process is
    found at the same address)."""
    agents = directory / "agents.toml"
    agents.write_text(AGENTS_FILE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("SIGNOFF_", "SLACK_"))}
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env.pop(proxy, None)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{directory / 'signoff.db'}",
            "SIGNOFF_AGENTS": str(agents),
            "SIGNOFF_EXTERNAL_AGENTS": "declared",
            "SIGNOFF_BIND_HOST": "127.0.0.1",
            "SIGNOFF_PORT": str(port),
            "SIGNOFF_LEASE_SECONDS": "1",
            "SIGNOFF_OPERATOR_TOKEN": OPERATOR_TOKEN,
            "SIGNOFF_COOKIE_SECRET": COOKIE_SECRET,
            "SIGNOFF_API_TOKENS": json.dumps([{"token": AGENT_TOKEN, "actor": "svc-support"}]),
            "SIGNOFF_SLACK_MODE": "http",
            "SIGNOFF_SLACK_BOT_TOKEN": BOT_TOKEN,
            "SIGNOFF_SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SIGNOFF_SLACK_API_BASE_URL": f"{fake.url}/api/",
        }
    )
    return env


@asynccontextmanager
async def serve_external(fake: FakeSlack, tmp_path: Path) -> AsyncIterator[External]:
    """Serve signoff with the external agent of `AGENTS_FILE` until the block ends."""
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS_FILE, encoding="utf-8")
    database = tmp_path / "signoff.db"
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{database}",
        agents=agents,
        external_agents="declared",
        operator_token=SecretStr(OPERATOR_TOKEN),
        cookie_secret=SecretStr(COOKIE_SECRET),
        bind_host="127.0.0.1",
        port=0,
        poll_seconds=0.05,
    )
    auth = TokenAuth(
        [
            ApiToken(AGENT_TOKEN, "svc-support", name="Support bot"),
            ApiToken(OPERATOR_TOKEN, "ops:alice", operator=True, name="Alice"),
        ]
    )
    # Started at the real time: a tool server checks a decision token's expiry on its own
    # clock.
    clock = ManualClock(datetime.now(UTC))
    service = await build_service(
        settings,
        clock=clock,
        auth=auth,
        slack_config=slack_config(fake),
        # No spacing, and a 429's hold follows the manual clock like the outbox does.
        slack_limiter=ChannelLimiter(interval=0.0, monotonic=lambda: clock.now().timestamp()),
        outbox_policy=OutboxRetry(base_delay=5.0),
        pacing={},
        parts=Parts(discord=False, wake_ups=False),
    )
    url = await service.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield External(fake, service, clock, url, database, http)
    finally:
        await service.stop(grace_seconds=5)
