"""The Slack test bed: test agents, `SlackBed` and helpers (fixtures live in conftest).

A real signoff Slack edge against the fake Slack of `fake_slack`.

`slack` starts: the fake Slack Web API (127.0.0.1, port 0), a `SQLStore` on a fresh SQLite
file (migrated), a `Runtime` with a `ManualClock`, a real `Worker` and the real outbox
loop (`RoutingNotifier` -> `SlackNotifier`) in the background, and the bolt app mounted at
``POST /slack/events`` on an aiohttp test server. The real slack_sdk client (its base URL
pointed at the fake) and slack-bolt do everything in between. Every real tool execution
is appended to ``bed.ledger``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.test_utils import TestClient
from fake_slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    Message,
    click_payload,
    command_body,
    event_body,
    interaction_body,
    signed_headers,
    submission_payload,
)
from slack_bolt.app.async_app import AsyncApp
from testkit import Crash, RollbackPlan, echo_model, settled  # noqa: F401  (re-exported)

from adapters.slack import SlackConfig
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

SECRET_KEY = "sk-live-123456"
T = TypeVar("T")


# -- agents ----------------------------------------------------------------------------


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

    @tool(permission="allow", replay_policy="safe")
    async def rollback_plan(service: str) -> Any:
        """Ask a person for a rollback plan."""
        answer = current_tool_context().answer
        if answer is None:
            return InputRequest(prompt=f"How do we roll {service} back?", schema=RollbackPlan)
        ledger.append(("rollback_plan", dict(answer)))
        return {"service": service, **answer}

    @tool(permission="allow", replay_policy="manual")
    async def page(engineer: str) -> str:
        """Page an engineer (never repeated on its own)."""
        ledger.append(("page", {"engineer": engineer}))
        return f"paged {engineer}"

    @tool(permission="ask", approvers=["group:S111"], four_eyes=True)
    async def deploy(service: str) -> str:
        """Deploy (release managers decide; not the requester)."""
        ledger.append(("deploy", {"service": service}))
        return f"deployed {service}"

    @tool(permission="ask", approvers=["group:C222"])
    async def restart(service: str) -> str:
        """Restart a service (members of the ops channel decide)."""
        ledger.append(("restart", {"service": service}))
        return f"restarted {service}"

    @tool(permission="ask", approvers=["*"])
    async def purge(cache: str) -> str:
        """Purge a cache (anyone may decide)."""
        ledger.append(("purge", {"cache": cache}))
        return f"purged {cache}"

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

    transfer_args = {"account": "ACME-1", "amount": 250.0, "api_key": SECRET_KEY}
    return [
        Agent("bank", "Pay invoices.", echo_model(("transfer", transfer_args)), tools=[transfer]),
        Agent("wires", "Wire money.", echo_model(("wire", {"amount": 99.0})), tools=[wire]),
        Agent(
            "release",
            "Deploy carefully.",
            echo_model(("rollback_plan", {"service": "checkout"})),
            tools=[rollback_plan],
        ),
        Agent("pager", "Page people.", echo_model(("page", {"engineer": "grace"})), tools=[page]),
        Agent("deployer", "Deploy.", echo_model(("deploy", {"service": "api"})), tools=[deploy]),
        Agent("ops", "Operate.", echo_model(("restart", {"service": "db"})), tools=[restart]),
        Agent("cache", "Cache.", echo_model(("purge", {"cache": "cdn"})), tools=[purge]),
        Agent(
            "tidy",
            "Tidy up.",
            echo_model(
                ("send_email", {"to": "ops@example.com", "subject": "Release done"}),
                ("delete_branch", {"name": "release-2.4"}),
            ),
            tools=[send_email, delete_branch],
        ),
    ]


# -- the test bed ------------------------------------------------------------------------


@dataclass
class Reply:
    """What the bot answered Slack."""

    status: int
    text: str

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.text)


@dataclass
class SlackBed:
    """Everything a test needs to drive the Slack edge."""

    fake: FakeSlack
    runtime: Runtime
    store: SQLStore
    clock: ManualClock
    worker: Worker
    bolt: AsyncApp
    client: TestClient[web.Request, web.Application]
    agents: list[Agent]
    db_path: Path
    ledger: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    # requests to the bot -----------------------------------------------------------------
    async def post(
        self,
        body: str,
        *,
        content_type: str = "application/x-www-form-urlencoded",
        timestamp: int | None = None,
        secret: str = SIGNING_SECRET,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """POST a body to ``/slack/events`` signed the Slack way (or as told)."""
        sent = headers or signed_headers(
            body, content_type=content_type, timestamp=timestamp, secret=secret
        )
        response = await self.client.post("/slack/events", data=body.encode(), headers=sent)
        return Reply(response.status, await response.text())

    async def command(self, text: str, *, user: str = "U1", channel: str = "C1") -> Reply:
        """Send the slash command."""
        return await self.post(command_body(text, user=user, channel=channel))

    async def click(
        self,
        action_id: str,
        value: str,
        *,
        user: str = "U1",
        card: Message | None = None,
        trigger: str | None = None,
    ) -> Reply:
        """Click a button of `card` (or of a made-up message)."""
        message = None
        if card is not None:
            message = {"ts": card.ts, "text": card.text, "blocks": card.blocks}
            if card.thread_ts:
                message["thread_ts"] = card.thread_ts
        payload = click_payload(
            action_id,
            value,
            user=user,
            channel=card.channel if card is not None else "C1",
            message=message,
            response_url=f"{self.fake.url}/response/{user}",
            trigger=trigger,
        )
        return await self.post(interaction_body(payload))

    async def submit(
        self, view: dict[str, Any], values: dict[str, dict[str, Any]], *, user: str = "U1"
    ) -> Reply:
        """Submit a modal the bot opened, with these state values."""
        return await self.post(interaction_body(submission_payload(view, values, user=user)))

    async def event(self, event: dict[str, Any], *, event_id: str = "Ev1") -> Reply:
        """Deliver an Events API event."""
        return await self.post(
            event_body(event, event_id=event_id), content_type="application/json"
        )

    # waiting -------------------------------------------------------------------------------
    async def until(
        self, produce: Callable[[], Awaitable[T | None]] | Callable[[], T | None], what: str
    ) -> T:
        """Poll `produce` until it returns something truthy (for up to ten seconds)."""
        deadline = time.monotonic() + 10.0
        while True:
            value = produce()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.02)

    async def latest_run(self) -> RunResult:
        """The newest run (waits for one)."""

        async def newest() -> RunResult | None:
            runs = await self.runtime.list_runs(limit=1)
            return runs[0] if runs else None

        return await self.until(newest, "a run")

    async def commanded_run(self) -> RunResult:
        """The run of the latest slash command (its thread is the posted request's)."""
        [*_, root] = [m for m in self.fake.messages.values() if " asked *" in m.text]

        async def of_thread() -> RunResult | None:
            runs = await self.runtime.list_runs(thread_id=f"slack:{root.channel}:{root.ts}")
            return runs[0] if runs else None

        return await self.until(of_thread, "the slash command's run")

    async def wait_run(self, run_id: str, check: Callable[[RunResult], bool]) -> RunResult:
        """Wait until the run satisfies `check`."""

        async def current() -> RunResult | None:
            result = await self.runtime.get(run_id)
            return result if check(result) else None

        return await self.until(current, f"run {run_id}")

    async def finished(self, run_id: str) -> RunResult:
        """Wait until the run ended."""
        return await self.wait_run(run_id, lambda r: r.status.finished)

    async def card(self, tool_name: str) -> Message:
        """Wait for the card about `tool_name` to be posted."""

        def find() -> Message | None:
            for message in self.fake.messages.values():
                if any(
                    b.get("type") == "header" and tool_name in b["text"]["text"]
                    for b in message.blocks
                ):
                    return message
            return None

        return await self.until(find, f"the card of {tool_name}")

    async def updated(self, card: Message, times: int = 1) -> Message:
        """Wait until `card` was updated (chat.update) `times` times."""
        return await self.until(lambda: card if card.updates >= times else None, "card update")

    async def thread_message(self, card_or_ts: Message | str, needle: str) -> Message:
        """Wait for a message containing `needle` in the thread of a card (or ts)."""
        ts = card_or_ts if isinstance(card_or_ts, str) else card_or_ts.thread_ts or card_or_ts.ts

        def find() -> Message | None:
            for message in self.fake.messages.values():
                if message.thread_ts == ts and needle in message.text:
                    return message
            return None

        return await self.until(find, f"a thread message with {needle!r}")

    async def ephemeral(self, user: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait for `count` ephemeral messages to `user`; return them all."""

        def find() -> list[dict[str, Any]] | None:
            found = [
                c.args for c in self.fake.called("chat.postEphemeral") if c.args["user"] == user
            ]
            return found if len(found) >= count else None

        return await self.until(find, f"{count} ephemeral message(s) to {user}")

    async def settled(self) -> None:
        """Wait until every stored click was applied and nothing else is due."""
        await settled(self.runtime, self.worker)

    async def snapshot(self, run_id: str) -> tuple[Any, ...]:
        """The run, its events, its tickets and the ledger: for "nothing changed" checks."""
        result = await self.runtime.get(run_id)
        events = await self.runtime.events(run_id)
        async with self.store.transaction() as tx:
            tickets = await tx.tickets_for_run(run_id)
        return result, events, tickets, list(self.ledger), self.received()

    def received(self) -> list[tuple[str, str]]:
        """(delivery id, state) of every received command, from the database file."""
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.db_path)) as db:
            rows = db.execute(
                "select delivery_id, state from received_commands order by received_at"
            ).fetchall()
        return [(str(a), str(b)) for a, b in rows]


def buttons(message: Message) -> dict[str, str]:
    """``action_id -> value`` of a message's buttons."""
    found = {}
    for block in message.blocks:
        if block.get("type") == "actions":
            for element in block["elements"]:
                found[element["action_id"]] = element["value"]
    return found


def text_of(message: Message) -> str:
    """Every text of a message's blocks, joined (for assertions)."""
    parts = [message.text]
    for block in message.blocks:
        if isinstance(block.get("text"), dict):
            parts.append(block["text"]["text"])
        for item in block.get("fields") or []:
            parts.append(item["text"])
        for item in block.get("elements") or []:
            if isinstance(item, dict) and "text" in item:
                text = item["text"]
                parts.append(text["text"] if isinstance(text, dict) else str(text))
    return "\n".join(parts)


def slack_config(fake: FakeSlack, **overrides: Any) -> SlackConfig:
    """The edge's configuration against `fake`."""
    values: dict[str, Any] = {
        "bot_token": BOT_TOKEN,
        "signing_secret": SIGNING_SECRET,
        "api_base_url": f"{fake.url}/api/",
        "lookup_timeout_seconds": 2.0,
    }
    values.update(overrides)
    return SlackConfig(**values)
