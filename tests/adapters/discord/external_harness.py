"""External approvals with their cards in Discord: `signoff serve`'s process
(`bot.bootstrap.build_service`) with the Discord edge at the fake Discord, the approvals
API listening on 127.0.0.1, and an agents file declaring the external agent ``helpdesk``.

``helpdesk`` runs elsewhere (a LangGraph graph, a Pydantic AI agent, an OpenAI Agents SDK
run or plain client code in the test); its refunds ask Alice, whose cards go to the fake
server's channel; look-ups are allowed by rule. The agent asks with `AGENT_TOKEN`. Time
is a `ManualClock` started at the present (decision tokens are checked against the real
time), which a test moves to make a deadline pass. `serve_env` is the same `signoff serve`
as a subprocess's environment, for a test that kills it.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from discord_harness import ALICE, ROLE_FINANCE
from fake_discord import CHANNEL_ID, GUILD_ID, TOKEN, FakeDiscord, InteractionRecord, User
from pydantic import SecretStr
from testkit import ROOT

from adapters.client import AsyncSignoffClient, RetryPolicy
from adapters.discord import configure_endpoints
from bot.bootstrap import Parts, Service, build_service
from bot.settings import ApiTokenSetting, Settings
from runtime import ManualClock, Runtime

AGENT = "helpdesk"
AGENT_TOKEN = "tok-helpdesk-0123456789"
"""The token the external agent asks with (requester ``svc:helpdesk``)."""
OPERATOR_TOKEN = "tok-operator-0123456789"
COOKIE_SECRET = "external-cookie-secret-0123456789abcdef"

AGENTS_FILE = f"""
[agents.{AGENT}]
external = true
description = "The support desk's assistant (runs elsewhere)"
approvers = ["{ALICE.id}"]
overrides = ["deadline"]
approvals = {{ platform = "discord", channel = "{CHANNEL_ID}" }}

[agents.{AGENT}.rules.refund]
permission = "ask"
editable = ["amount"]
grants = ["run", "thread"]

[agents.{AGENT}.rules.lookup_order]
permission = "allow"
"""
"""Refunds ask Alice (on Discord), in the fake server's channel; look-ups are allowed;
a request may bring its own deadline."""

QUICK_RETRY = RetryPolicy(first_delay=0.05, max_delay=0.5, give_up_after=60.0)
"""Reconnects soon after a restart of the server."""


def free_port() -> int:
    """A port nothing listens on now (the server binds it with SO_REUSEADDR), so that a
    restarted server is found at the same address."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def field_of(message: dict[str, Any], name: str) -> str:
    """The value of a card's embed field."""
    fields = message["embeds"][0].get("fields", [])
    return next(str(f["value"]) for f in fields if f["name"] == name)


def labels(message: dict[str, Any]) -> list[str]:
    """A message's button labels, in order."""
    return [c["label"] for row in message.get("components", []) for c in row["components"]]


def approval_id_of(card: dict[str, Any]) -> str:
    """The approval a card asks about: its run, named in the footer (``run … · ticket …``)."""
    footer = str(card["embeds"][0]["footer"]["text"])
    return footer.removeprefix("run ").split(" ", 1)[0]


def serve_env(fake: FakeDiscord, directory: Path, port: int) -> dict[str, str]:
    """The environment of a `signoff serve` subprocess like `ExternalSignoff.settings`
    (on the system clock), whose gateway lease a successor takes a second after a kill."""
    agents = directory / "agents.toml"
    agents.write_text(AGENTS_FILE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("SIGNOFF_")}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{directory / 'signoff.db'}",
            "SIGNOFF_AGENTS": str(agents),
            "SIGNOFF_BIND_HOST": "127.0.0.1",
            "SIGNOFF_PORT": str(port),
            "SIGNOFF_LEASE_SECONDS": "1",
            "SIGNOFF_POLL_SECONDS": "0.05",
            "SIGNOFF_OPERATOR_TOKEN": OPERATOR_TOKEN,
            "SIGNOFF_API_TOKENS": json.dumps([{"token": AGENT_TOKEN, "actor": f"svc:{AGENT}"}]),
            "SIGNOFF_DISCORD_BOT_TOKEN": TOKEN,
            "SIGNOFF_DISCORD_API_BASE_URL": fake.api_base_url,
            "SIGNOFF_DISCORD_GATEWAY_URL": fake.gateway_url,
            "SIGNOFF_DISCORD_GUILD_READY_TIMEOUT": "0.1",
            "SIGNOFF_DISCORD_GATEWAY_LEASE_SECONDS": "1",
        }
    )
    return env


@dataclass
class ExternalSignoff:
    """The served signoff, the fake Discord, and what a test does with them."""

    fake: FakeDiscord
    directory: Path
    clock: ManualClock = field(
        default_factory=lambda: ManualClock(datetime.now(UTC).replace(microsecond=0))
    )
    port: int = field(default_factory=free_port)
    services: list[Service] = field(default_factory=list)
    _stopped: list[Service] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Where the approvals API is served."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def database(self) -> Path:
        """The SQLite file every process serves."""
        return self.directory / "signoff.db"

    @property
    def runtime(self) -> Runtime:
        """The runtime of the process serving now."""
        return self.services[-1].runtime

    def settings(self) -> Settings:
        """`signoff serve`'s settings: the agents file, API tokens and Discord at the fake."""
        agents = self.directory / "agents.toml"
        agents.write_text(AGENTS_FILE, encoding="utf-8")
        return Settings(
            database_url=f"sqlite+aiosqlite:///{self.database}",
            agents=agents,
            bind_host="127.0.0.1",
            port=self.port,
            lease_seconds=1,
            poll_seconds=0.02,
            operator_token=SecretStr(OPERATOR_TOKEN),
            cookie_secret=SecretStr(COOKIE_SECRET),
            api_tokens=[ApiTokenSetting(token=SecretStr(AGENT_TOKEN), actor=f"svc:{AGENT}")],
            discord_bot_token=SecretStr(TOKEN),
            discord_api_base_url=self.fake.api_base_url,
            discord_gateway_url=self.fake.gateway_url,
            discord_sync="guild",
            discord_guild_id=GUILD_ID,
            discord_approver_roles={"finance": [str(ROLE_FINANCE)]},
            discord_guild_ready_timeout=0.01,
            discord_ready_timeout=10,
        )

    async def serve(self) -> Service:
        """Start a `signoff serve` process (the one before must have stopped: it holds the
        gateway and the port). Deadlines expire when a test calls ``expire_overdue``."""
        service = await build_service(
            self.settings(),
            clock=self.clock,
            pacing={},
            parts=Parts(deadlines=False, wake_ups=False),
        )
        self.services.append(service)
        await service.start()
        return service

    async def stop(self, service: Service) -> None:
        """Stop a process the way `signoff serve` stops on SIGTERM."""
        if service not in self._stopped:
            self._stopped.append(service)
            await service.stop(grace_seconds=5)

    async def close(self) -> None:
        """Stop every process still serving."""
        for service in reversed(self.services):
            await self.stop(service)

    @asynccontextmanager
    async def client(
        self, *, on_request: Callable[[httpx.Request], Awaitable[None]] | None = None
    ) -> AsyncIterator[AsyncSignoffClient]:
        """The external agent's client of the approvals API (`on_request` sees each
        request as it leaves)."""
        hooks = {"request": [on_request]} if on_request is not None else {}
        async with (
            httpx.AsyncClient(trust_env=False, event_hooks=hooks) as http,
            AsyncSignoffClient(
                self.url, token=AGENT_TOKEN, retry=QUICK_RETRY, http_client=http
            ) as client,
        ):
            yield client

    # Discord ----------------------------------------------------------------------------
    def cards(self) -> list[dict[str, Any]]:
        """Every card posted to the channel (messages with buttons), oldest first."""
        return self.fake.cards(CHANNEL_ID)

    async def card(self, number: int = 1) -> dict[str, Any]:
        """Wait until `number` cards were posted; return the last of them."""
        found = await self.fake.wait_for(
            lambda: len(self.cards()) >= number, seconds=30, what=f"card {number}"
        )
        assert found
        return self.cards()[number - 1]

    async def click(self, user: User, card: dict[str, Any], label: str) -> InteractionRecord:
        """Press a card's button as `user`; wait for the bot's answer."""
        record = await self.fake.interact(self.fake.click(user, card, label))
        await self.fake.answered(record)
        return record

    async def submit(
        self, user: User, opened: InteractionRecord, values: dict[str, str]
    ) -> InteractionRecord:
        """Submit the modal a click opened; wait for the bot's answer."""
        assert opened.modal is not None, opened.text
        record = await self.fake.interact(self.fake.submit(user, opened.modal, values))
        await self.fake.answered(record)
        return record

    async def outcome(self, card: dict[str, Any]) -> str:
        """Wait until the card was edited to show how it ended; return that text."""

        def edited() -> str | None:
            message = self.fake.messages[card["id"]]
            fields = message["embeds"][0].get("fields", [])
            return next((str(f["value"]) for f in fields if f["name"] == "Outcome"), None)

        found: str = await self.fake.wait_for(edited, seconds=30, what="the card's outcome")
        return found


@asynccontextmanager
async def serving(fake: FakeDiscord, directory: Path) -> AsyncIterator[ExternalSignoff]:
    """Serve signoff with ``helpdesk``'s cards in the fake Discord until the block ends."""
    # discord.py's endpoints are process-wide: put back what other tests expect.
    previous = configure_endpoints(fake.api_base_url, fake.gateway_url)
    signoff = ExternalSignoff(fake, directory)
    try:
        await signoff.serve()
        yield signoff
    finally:
        await signoff.close()
        configure_endpoints(*previous)
