"""Agents, people and a harness for the Discord tests: bots are `signoff serve`'s process
(`bot.bootstrap.build_service`) on a real SQLite store, against a fake Discord."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fake_discord import (
    CHANNEL_ID,
    MANAGE_GUILD,
    TOKEN,
    FakeDiscord,
    InteractionRecord,
    User,
)
from pydantic import BaseModel
from testkit import Crash, RollbackPlan, echo_model, settled  # noqa: F401  (re-exported)

from bot.bootstrap import Parts, Service, build_service
from bot.discord_wiring import DiscordHandle
from bot.settings import Settings
from runtime import (
    Agent,
    InputRequest,
    ManualClock,
    RunResult,
    Runtime,
    current_tool_context,
    tool,
)
from runtime.store.sql import SQLStore
from runtime.worker import Worker

# People and roles of the fake server.
ROLE_APPROVER = 810000000000000001
ROLE_OTHER = 810000000000000002
ROLE_FINANCE = 810000000000000003
ALICE = User(710000000000000001, "alice")
BOB = User(710000000000000002, "bob", roles=(ROLE_OTHER,))
CAROL = User(710000000000000003, "carol", roles=(ROLE_APPROVER,))
DAVE = User(710000000000000004, "dave", roles=(ROLE_FINANCE,))
MALLORY = User(710000000000000005, "mallory", permissions=MANAGE_GUILD)
ROLES = {ROLE_APPROVER: "approvers", ROLE_OTHER: "others", ROLE_FINANCE: "finance"}


# -- scripted agents -------------------------------------------------------------------


class Survey(BaseModel):
    """Seven fields: more than a Discord modal holds."""

    a: str
    b: str
    c: str
    d: str
    e: str
    f: str
    g: str


def build_agents(ledger: list[tuple[str, dict[str, Any]]]) -> list[Agent]:
    """The test agents; every real tool execution is appended to `ledger`."""

    @tool(permission="ask", secret=["api_key"])
    async def transfer(account: str, amount: float, api_key: str) -> dict[str, Any]:
        """Move money."""
        ledger.append(("transfer", {"account": account, "amount": amount}))
        return {"transferred": amount, "to": account}

    @tool(permission=lambda a: "deny" if a["amount"] > 1000 else "ask", deadline=60)
    async def wire(amount: float) -> str:
        """Wire money abroad (a decision is due within a minute; never over 1000)."""
        ledger.append(("wire", {"amount": amount}))
        return f"wired {amount}"

    @tool(
        permission="ask", approvers=[f"group:role:{ROLE_APPROVER}", "group:finance"], four_eyes=True
    )
    async def payout(amount: float) -> str:
        """Pay out (the approvers role or finance decides; never the requester)."""
        ledger.append(("payout", {"amount": amount}))
        return f"paid {amount}"

    @tool(permission="allow", replay_policy="safe")
    async def rollback_plan(service: str) -> Any:
        """Ask a person for a rollback plan."""
        answer = current_tool_context().answer
        if answer is None:
            return InputRequest(prompt=f"How do we roll {service} back?", schema=RollbackPlan)
        ledger.append(("rollback_plan", dict(answer)))
        return {"service": service, **answer}

    @tool(permission="allow", replay_policy="safe")
    async def survey(topic: str) -> Any:
        """Ask seven questions."""
        answer = current_tool_context().answer
        if answer is None:
            return InputRequest(prompt=f"Tell us about {topic}", schema=Survey)
        return answer

    @tool(permission="allow", replay_policy="manual")
    async def page(engineer: str) -> str:
        """Page an engineer (never repeated on its own)."""
        ledger.append(("page", {"engineer": engineer}))
        return f"paged {engineer}"

    @tool(permission="ask")
    async def send_email(to: str, subject: str) -> str:
        """Send an e-mail."""
        ledger.append(("send_email", {"to": to, "subject": subject}))
        return f"sent to {to}"

    @tool(permission="ask", editable=False)
    async def delete_branch(name: str) -> str:
        """Delete a git branch (its name cannot be changed by an approver)."""
        ledger.append(("delete_branch", {"name": name}))
        return f"deleted {name}"

    @tool(permission="ask")
    async def provision(
        name: str, region: str, size: str, replicas: int, tier: str, owner: str, note: str
    ) -> str:
        """Provision a service: seven arguments, more than a Discord modal holds."""
        ledger.append(("provision", {"name": name, "replicas": replicas, "note": note}))
        return f"provisioned {name}"

    big = {"account": "ACME-1", "memo": "x" * 9000, "amount": 1.0, "api_key": "sk-live-123456"}
    machine = {
        "name": "api",
        "region": "eu",
        "size": "m",
        "replicas": 2,
        "tier": "gold",
        "owner": "ops",
        "note": "first",
    }
    return [
        Agent(
            "bank",
            "Pay invoices.",
            echo_model(
                ("transfer", {"account": "ACME-1", "amount": 250.0, "api_key": "sk-live-123456"})
            ),
            tools=[transfer],
        ),
        Agent("bigbank", "Pay huge memos.", echo_model(("transfer", big)), tools=[transfer]),
        Agent("wires", "Wire money.", echo_model(("wire", {"amount": 99.0})), tools=[wire]),
        Agent("treasury", "Pay out.", echo_model(("payout", {"amount": 500.0})), tools=[payout]),
        Agent(
            "release",
            "Deploy carefully.",
            echo_model(("rollback_plan", {"service": "checkout"})),
            tools=[rollback_plan],
        ),
        Agent("surveys", "Ask.", echo_model(("survey", {"topic": "deploys"})), tools=[survey]),
        Agent("pager", "Page people.", echo_model(("page", {"engineer": "grace"})), tools=[page]),
        Agent(
            "tidy",
            "Tidy up.",
            echo_model(
                ("send_email", {"to": "ops@example.com", "subject": "Release done"}),
                ("delete_branch", {"name": "release-2.4"}),
            ),
            tools=[send_email, delete_branch],
        ),
        Agent("infra", "Provision.", echo_model(("provision", machine)), tools=[provision]),
    ]


# -- the harness -------------------------------------------------------------------------


@dataclass
class Bot:
    """One bot "process": `signoff serve`'s process with the Discord edge on."""

    service: Service
    gateway: DiscordHandle | None = None
    closed: bool = False

    @property
    def runtime(self) -> Runtime:
        """The process's runtime."""
        return self.service.runtime

    @property
    def worker(self) -> Worker:
        """The process's worker."""
        return self.service.worker

    @property
    def handle(self) -> DiscordHandle:
        """The gateway connection it made when it started (holding the gateway lease)."""
        assert self.gateway is not None, "another bot held the gateway lease"
        return self.gateway

    async def close(self) -> None:
        """Stop the loops and the Discord client (what dying gracefully looks like)."""
        if not self.closed:
            self.closed = True
            await self.service.stop(grace_seconds=5)


@dataclass
class Harness:
    """A fake Discord, a SQLite store and a way to start bots against them."""

    fake: FakeDiscord
    store: SQLStore
    path: Path
    clock: ManualClock
    ledger: list[tuple[str, dict[str, Any]]]
    agents: list[Agent]
    bots: list[Bot] = field(default_factory=list)
    extra_stores: list[SQLStore] = field(default_factory=list)

    def settings(self, **overrides: Any) -> Settings:
        """Settings pointing at the fake; `overrides` are ``discord_*`` names without
        the prefix."""
        values: dict[str, Any] = {
            "bot_token": TOKEN,
            "api_base_url": self.fake.api_base_url,
            "gateway_url": self.fake.gateway_url,
            "sync": "guild",
            "guild_id": 800000000000000001,
            "approver_roles": {"finance": [str(ROLE_FINANCE)]},
            "console_url": "https://signoff.example.com",
            "guild_ready_timeout": 0.01,
            "ready_timeout": 10,
        }
        values.update(overrides)
        return Settings(
            database_url=f"sqlite+aiosqlite:///{self.path}",
            operator_token="discord-operator-0123456789",
            cookie_secret="discord-cookie-secret-0123456789abcdef",
            poll_seconds=0.02,
            **{f"discord_{name}": value for name, value in values.items()},
        )

    def runtime(self, **kwargs: Any) -> Runtime:
        """Another runtime on the same store (another process, in effect)."""
        return Runtime(self.store, self.agents, clock=self.clock, **kwargs)

    def fresh_store(self) -> SQLStore:
        """A new connection pool to the same SQLite file: a new process's."""
        store = SQLStore.sqlite(self.path)
        self.extra_stores.append(store)
        return store

    async def start_bot(
        self,
        *,
        store: SQLStore | None = None,
        worker_id: str | None = None,
        agents: list[Agent] | None = None,
        apply: bool = True,
        **overrides: Any,
    ) -> Bot:
        """Start a bot (`bot.bootstrap.build_service`, Discord on, no pacing); with
        ``apply=False`` its worker and outbox never run (it only stores clicks).

        It takes the gateway lease: the bot before it must have been closed.
        """
        service = await build_service(
            self.settings(**overrides),
            agents=self.agents if agents is None else agents,
            store=store or self.store,
            clock=self.clock,
            worker_id=worker_id,
            pacing={},
            parts=Parts(listen=False, deadlines=False, wake_ups=False, worker=apply, outbox=apply),
        )
        await service.start()
        bot = Bot(service, service.discord.gateway if service.discord is not None else None)
        self.bots.append(bot)
        return bot

    # runs ------------------------------------------------------------------------------
    async def wait(
        self, run_id: str, check: Callable[[RunResult], bool], runtime: Runtime | None = None
    ) -> RunResult:
        """Poll the run until `check` holds (for up to ten seconds)."""
        chosen = runtime or self.bots[-1].runtime
        deadline = time.monotonic() + 10.0
        while True:
            result = await chosen.get(run_id)
            if check(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} never got there; it is {result}")
            await asyncio.sleep(0.02)

    async def finished(self, run_id: str) -> RunResult:
        """Wait until the run ended."""
        return await self.wait(run_id, lambda r: r.status.finished)

    async def start_run(
        self, user: User, agent: str, prompt: str = "go", channel_id: int = CHANNEL_ID
    ) -> tuple[str, InteractionRecord]:
        """``/agent run`` as `user`; returns the run id and the interaction."""
        before = {r.run_id for r in await self.bots[-1].runtime.list_runs()}
        command = self.fake.slash(user, "run", channel_id, agent=agent, prompt=prompt)
        record = await self.fake.interact(command)
        await self.fake.answered(record)
        # Runs the new run may already have started (sub-agents, an MCP server's input
        # runs) are not what was asked for.
        runs = [
            r
            for r in await self.bots[-1].runtime.list_runs()
            if r.run_id not in before and r.parent_run_id is None and r.agent == agent
        ]
        assert len(runs) == 1, record.text
        return runs[0].run_id, record

    async def card_for(self, run_id: str) -> dict[str, Any]:
        """Wait for the card of `run_id`'s open ticket and return the message."""

        def find() -> dict[str, Any] | None:
            for message in reversed(self.fake.cards()):
                footer = (message["embeds"][0].get("footer") or {}).get("text", "")
                # A turn's "Allow all N" message names the run too; it is no card.
                if f"run {run_id} " in footer and "· batch " not in footer:
                    return message
            return None

        found: dict[str, Any] = await self.fake.wait_for(find, what=f"the card of {run_id}")
        return found

    async def park(self, user: User, agent: str) -> tuple[str, dict[str, Any]]:
        """Start a run from Discord and wait for its card."""
        run_id, _ = await self.start_run(user, agent)
        return run_id, await self.card_for(run_id)

    async def click(
        self, user: User, card: dict[str, Any], label: str, **kwargs: Any
    ) -> InteractionRecord:
        """Click a button and wait for the bot's answer."""
        record = await self.fake.interact(self.fake.click(user, card, label, **kwargs))
        await self.fake.answered(record)
        return record

    async def submit(
        self, user: User, opened: InteractionRecord, values: dict[str, str]
    ) -> InteractionRecord:
        """Submit the modal a click opened, and wait for the bot's answer."""
        assert opened.modal is not None, opened.text
        record = await self.fake.interact(self.fake.submit(user, opened.modal, values))
        await self.fake.answered(record)
        return record

    async def outcome(self, card: dict[str, Any]) -> dict[str, Any]:
        """Wait until the card was edited to show its outcome; return the message."""

        def edited() -> dict[str, Any] | None:
            message = self.fake.messages[card["id"]]
            fields = message["embeds"][0].get("fields", [])
            return message if any(f["name"] == "Outcome" for f in fields) else None

        found: dict[str, Any] = await self.fake.wait_for(edited, what="the card's outcome")
        return found

    async def final_message(self, run_id: str) -> dict[str, Any]:
        """Wait for the run's final message in the channel."""

        def find() -> dict[str, Any] | None:
            for message in self.fake.channel_messages(CHANNEL_ID):
                embeds = message.get("embeds") or []
                if embeds and embeds[0].get("footer", {}).get("text") == f"run {run_id}":
                    return message
            return None

        found: dict[str, Any] = await self.fake.wait_for(
            find, what=f"the final message of {run_id}"
        )
        return found

    async def settled(self) -> None:
        """Wait until every bot applied its stored clicks and nothing else is due."""
        for bot in self.bots:
            await settled(bot.runtime, bot.worker)

    async def snapshot(self, run_id: str) -> tuple[Any, ...]:
        """The run, its events, tickets, stored clicks and the ledger: "nothing changed"."""
        runtime = self.bots[-1].runtime if self.bots else self.runtime()
        result = await runtime.get(run_id)
        events = await runtime.events(run_id)
        async with self.store.transaction() as tx:
            tickets = await tx.tickets_for_run(run_id)
            received = await tx.pending_received(100)
        return result, events, tickets, received, list(self.ledger)
