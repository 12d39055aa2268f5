"""A served signoff whose Claude Code agent's cards go to one edge — the fake Slack (real
slack-bolt and slack_sdk), the fake Discord (real discord.py) or the web console — and
the two ways Claude Code asks it: the HTTP hook route and the ``signoff hook claude-code``
command.

The agents file is docs/claude-code.md's, with the approvals sent to the edge, the
approver named, and a one-minute deadline. Time is a `ManualClock` started at the
present; deadlines pass when a test moves it and calls ``expire_overdue``.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
from pydantic import SecretStr

from tests.claude_code.conftest import ROOT, clean_env, output, page_block

# The fakes of the Slack and Discord edge tests, imported as those tests import them.
for _fakes in ("tests/adapters/slack", "tests/adapters/discord"):
    if str(ROOT / _fakes) not in sys.path:
        sys.path.append(str(ROOT / _fakes))

from discord_harness import ALICE, BOB, ROLES  # noqa: E402
from fake_discord import CHANNEL_ID, GUILD_ID, TOKEN, FakeDiscord  # noqa: E402
from fake_slack import (  # noqa: E402
    FakeSlack,
    Message,
    click_payload,
    interaction_body,
    signed_headers,
    submission_payload,
    text_input,
)
from slackbed import buttons, slack_config, text_of  # noqa: E402
from testkit import settled  # noqa: E402

from adapters.claude_code.route import PATH  # noqa: E402
from adapters.discord import configure_endpoints  # noqa: E402
from adapters.slack import ChannelLimiter, blocks  # noqa: E402
from adapters.web import ApiToken, TokenAuth  # noqa: E402
from adapters.web.auth import CSRF_FIELD  # noqa: E402
from adapters.web.forms import FIELD_PREFIX  # noqa: E402
from bot.bootstrap import Parts, Service, build_service  # noqa: E402
from bot.settings import Settings  # noqa: E402
from runtime import ManualClock  # noqa: E402

EdgeName = Literal["slack", "discord", "console"]
Entry = Literal["route", "command"]

HOOK_TOKEN = "tok-claude-code-hook-0123456789"
"""The API token Claude Code's hook asks with (requester ``svc:claude-code``)."""
OPERATOR_TOKEN = "tok-cards-operator-0123456789"
CAROL_TOKEN = "tok-carol-approver-0123456789"
"""The console approver's token (``U-carol``)."""
MALLORY_TOKEN = "tok-mallory-stranger-0123456789"
"""A console user who may not decide (``U-mallory``)."""
COOKIE_SECRET = "claude-code-cards-cookie-secret-0123456789"
SLACK_CHANNEL = "CCODE"
SLACK_APPROVER = "U1"
SLACK_STRANGER = "U9"
DEADLINE_SECONDS = 60


def agents_file(edge: EdgeName) -> str:
    """docs/claude-code.md's agents file, its cards sent to `edge` for its approver, and
    a one-minute deadline."""
    match edge:
        case "slack":
            approvals = f'{{ platform = "slack", channel = "{SLACK_CHANNEL}" }}'
            approver = SLACK_APPROVER
        case "discord":
            approvals = f'{{ platform = "discord", channel = "{CHANNEL_ID}" }}'
            approver = str(ALICE.id)
        case "console":
            approvals = '{ platform = "console" }'
            approver = "U-carol"
    text, count = re.subn(
        r"^approvals = .*$",
        f'approvals = {approvals}\napprovers = ["{approver}"]',
        page_block("toml", "test_hook_command.py"),
        flags=re.M,
    )
    assert count == 1, "the page's agents file has no approvals line"
    text, count = re.subn(r"^deadline = \d+$", f"deadline = {DEADLINE_SECONDS}", text, flags=re.M)
    assert count == 1, "the page's Bash rule has no deadline"
    return text


@dataclass
class Card:
    """A card as the edge shows it: its text, and what the edge needs to act on it."""

    text: str
    ref: Any


class Edge(Protocol):
    """Where the cards of the agent's calls are shown and decided."""

    name: EdgeName

    async def card(self, number: int = 1) -> Card:
        """The `number`-th card, once shown."""
        ...

    async def count(self) -> int:
        """How many cards were shown so far."""
        ...

    async def stranger_is_refused(self, card: Card) -> None:
        """A person who may not decide tries Allow and is refused."""
        ...

    async def allow(self, card: Card) -> None: ...
    async def deny(self, card: Card, reason: str) -> None: ...
    async def edit(self, card: Card, field: str, value: str) -> None: ...
    async def grant(self, card: Card) -> None:
        """Allow for the rest of this session."""
        ...

    async def outcome(self, card: Card, approval_id: str) -> str:
        """What the edge shows once `card` was decided (the card edited in place, or the
        console's page of the approval once its ticket left the open ones)."""
        ...


# -- Slack -------------------------------------------------------------------------------------


@dataclass
class SlackEdge:
    fake: FakeSlack
    url: str
    http: httpx.AsyncClient
    name: EdgeName = "slack"

    def _cards(self) -> list[Message]:
        return [
            m
            for m in self.fake.messages.values()
            if any(b.get("type") == "header" for b in m.blocks) and m.channel == SLACK_CHANNEL
        ]

    async def card(self, number: int = 1) -> Card:
        found = await self.fake.wait_for(
            lambda: self._cards()[number - 1] if len(self._cards()) >= number else None,
            f"Slack card {number}",
        )
        return Card(text_of(found), found)

    async def count(self) -> int:
        return len(self._cards())

    async def _post(self, payload: dict[str, Any]) -> None:
        body = interaction_body(payload)
        answer = await self.http.post(
            f"{self.url}/slack/events", content=body.encode(), headers=signed_headers(body)
        )
        assert answer.status_code == 200, answer.text

    async def _click(self, action_id: str, card: Card, user: str = SLACK_APPROVER) -> None:
        message: Message = card.ref
        shown = {"ts": message.ts, "text": message.text, "blocks": message.blocks}
        await self._post(
            click_payload(
                action_id,
                buttons(message)[action_id],
                user=user,
                channel=message.channel,
                message=shown,
                response_url=f"{self.fake.url}/response/{user}",
            )
        )

    async def _modal(self, action_id: str, card: Card) -> dict[str, Any]:
        before = len(self.fake.called("views.open"))
        await self._click(action_id, card)
        [opened] = await self.fake.wait_for(
            lambda: self.fake.called("views.open")[before:], "a modal to open"
        )
        view: dict[str, Any] = opened.args["view"]
        return view

    async def stranger_is_refused(self, card: Card) -> None:
        await self._click(blocks.ACTION_ALLOW, card, user=SLACK_STRANGER)
        told = await self.fake.wait_for(
            lambda: [
                c.args
                for c in self.fake.called("chat.postEphemeral")
                if c.args["user"] == SLACK_STRANGER
            ],
            "the stranger's refusal",
        )
        assert "may not decide" in told[0]["text"], told

    async def allow(self, card: Card) -> None:
        await self._click(blocks.ACTION_ALLOW, card)

    async def deny(self, card: Card, reason: str) -> None:
        view = await self._modal(blocks.ACTION_DENY_REASON, card)
        await self._post(
            submission_payload(view, {"reason": text_input(reason)}, user=SLACK_APPROVER)
        )

    async def edit(self, card: Card, field: str, value: str) -> None:
        view = await self._modal(blocks.ACTION_EDIT, card)
        inputs = [b for b in view["blocks"] if b["type"] == "input"]
        (block,) = [b for b in inputs if b["label"]["text"].lower() == field]
        await self._post(
            submission_payload(view, {block["block_id"]: text_input(value)}, user=SLACK_APPROVER)
        )

    async def grant(self, card: Card) -> None:
        await self._click(blocks.ACTION_ALLOW_RUN, card)

    async def outcome(self, card: Card, approval_id: str) -> str:
        message: Message = card.ref
        await self.fake.wait_for(lambda: message.updates >= 1, "the card's update")
        assert buttons(message) == {}, "the decided card still has buttons"
        return text_of(message)


# -- Discord -----------------------------------------------------------------------------------


@dataclass
class DiscordEdge:
    fake: FakeDiscord
    name: EdgeName = "discord"

    async def card(self, number: int = 1) -> Card:
        await self.fake.wait_for(
            lambda: len(self.fake.cards(CHANNEL_ID)) >= number, seconds=30, what=f"card {number}"
        )
        message = self.fake.cards(CHANNEL_ID)[number - 1]
        embed = message["embeds"][0]
        parts = [embed.get("title", ""), embed.get("description", "")]
        parts += [f"{f['name']}: {f['value']}" for f in embed.get("fields", [])]
        return Card("\n".join(parts), message)

    async def count(self) -> int:
        return len(self.fake.cards(CHANNEL_ID))

    async def _click(self, card: Card, label: str, user: Any = ALICE) -> Any:
        record = await self.fake.interact(self.fake.click(user, card.ref, label))
        await self.fake.answered(record)
        return record

    async def _submit(self, opened: Any, values: dict[str, str]) -> None:
        assert opened.modal is not None, opened.text
        record = await self.fake.interact(self.fake.submit(ALICE, opened.modal, values))
        await self.fake.answered(record)
        assert "recorded" in record.text, record.text

    async def stranger_is_refused(self, card: Card) -> None:
        refused = await self._click(card, "Allow", user=BOB)
        assert refused.ephemeral and "may not decide" in refused.text, refused.text

    async def allow(self, card: Card) -> None:
        answer = await self._click(card, "Allow")
        assert "Allow recorded" in answer.text, answer.text

    async def deny(self, card: Card, reason: str) -> None:
        await self._submit(await self._click(card, "Deny with reason"), {"reason": reason})

    async def edit(self, card: Card, field: str, value: str) -> None:
        await self._submit(await self._click(card, "Allow with changes"), {field: value})

    async def grant(self, card: Card) -> None:
        answer = await self._click(card, "Allow for the rest of this session")
        assert "standing grant recorded" in answer.text, answer.text

    async def outcome(self, card: Card, approval_id: str) -> str:
        def edited() -> str | None:
            message = self.fake.messages[card.ref["id"]]
            fields = message["embeds"][0].get("fields", [])
            return next((str(f["value"]) for f in fields if f["name"] == "Outcome"), None)

        found: str = await self.fake.wait_for(edited, seconds=30, what="the card's outcome")
        return found


# -- the console -------------------------------------------------------------------------------

_SECTION = re.compile(
    r'<section class="card ticket" id="ticket-(?P<ticket>[^"]+)" data-tool="(?P<tool>[^"]+)">'
    r"(?P<body>.*?)</section>",
    re.S,
)


@dataclass
class ConsoleEdge:
    url: str
    approver: httpx.AsyncClient
    stranger: httpx.AsyncClient
    operator: httpx.AsyncClient
    seen: list[str] = field(default_factory=list)
    name: EdgeName = "console"

    async def _tickets(self, who: httpx.AsyncClient) -> dict[str, str]:
        page = await who.get("/tickets")
        assert page.status_code == 200, page.text
        return {m["ticket"]: m.group(0) for m in _SECTION.finditer(page.text)}

    async def _look(self) -> None:
        for ticket in await self._tickets(self.approver):
            if ticket not in self.seen:
                self.seen.append(ticket)

    async def card(self, number: int = 1) -> Card:
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            await self._look()
            if len(self.seen) >= number:
                ticket = self.seen[number - 1]
                shown = (await self._tickets(self.approver)).get(ticket, "")
                return Card(html.unescape(re.sub(r"<[^>]+>", " ", shown)), ticket)
            assert asyncio.get_running_loop().time() < deadline, f"no console card {number}"
            await asyncio.sleep(0.05)

    async def count(self) -> int:
        await self._look()
        return len(self.seen)

    async def _decide(
        self, who: httpx.AsyncClient, card: Card, form: dict[str, str]
    ) -> httpx.Response:
        page = await who.get("/tickets")
        found = re.search(rf'name="{CSRF_FIELD}" value="([^"]+)"', page.text)
        assert found is not None, page.text
        return await who.post(
            f"/tickets/{card.ref}/decide",
            data={CSRF_FIELD: found.group(1), "next": "/tickets", **form},
        )

    async def _decided(self, card: Card, form: dict[str, str]) -> None:
        answer = await self._decide(self.approver, card, form)
        assert answer.status_code == 303, answer.text

    async def stranger_is_refused(self, card: Card) -> None:
        assert card.ref not in await self._tickets(self.stranger)
        refused = await self._decide(self.stranger, card, {"action": "allow"})
        assert refused.status_code == 404, refused.text

    async def allow(self, card: Card) -> None:
        await self._decided(card, {"action": "allow"})

    async def deny(self, card: Card, reason: str) -> None:
        await self._decided(card, {"action": "deny", "reason": reason})

    async def edit(self, card: Card, field: str, value: str) -> None:
        await self._decided(card, {"action": "edit", FIELD_PREFIX + field: value})

    async def grant(self, card: Card) -> None:
        await self._decided(card, {"action": "allow", "grant": "run"})

    async def outcome(self, card: Card, approval_id: str) -> str:
        assert card.ref not in await self._tickets(self.approver)
        # An operator's view: once nobody may decide the ticket any more, only those who
        # decided it see it (`runtime.domain.visibility`), not every approver.
        page = await self.operator.get(f"/runs/{approval_id}")
        assert page.status_code == 200, page.text
        return html.unescape(re.sub(r"<[^>]+>", " ", page.text))


async def sign_in(url: str, token: str, stack: AsyncExitStack) -> httpx.AsyncClient:
    """A console session of `token`'s user."""
    client = await stack.enter_async_context(
        httpx.AsyncClient(base_url=url, timeout=30, trust_env=False)
    )
    page = await client.get("/login")
    found = re.search(rf'name="{CSRF_FIELD}" value="([^"]+)"', page.text)
    assert found is not None, page.text
    signed = await client.post("/login", data={CSRF_FIELD: found.group(1), "token": token})
    assert signed.status_code == 303, signed.text
    return client


# -- the served signoff and the hook ------------------------------------------------------------

Hook = Callable[..., Awaitable[dict[str, Any]]]
"""Ask the hook about a ``PreToolUse`` input: ``hook(hook_input, wait=60,
on_timeout="ask")`` (the hook's ``timeout``) -> the ``hookSpecificOutput`` Claude Code
reads."""


@dataclass
class Served:
    """The served signoff, its edge, and Claude Code's hook at it."""

    service: Service
    clock: ManualClock
    url: str
    edge: Edge
    hook: Hook
    http: httpx.AsyncClient

    async def approvals(self, session_id: str) -> list[dict[str, Any]]:
        """The approvals of a Claude Code session, as the hook's token reads them."""
        answer = await self.http.get(
            "/api/approvals",
            params={"session_id": session_id},
            headers={"Authorization": f"Bearer {HOOK_TOKEN}"},
        )
        assert answer.status_code == 200, answer.text
        return list(answer.json()["approvals"])

    async def settled(self) -> None:
        """Nothing left to apply or deliver."""
        await settled(self.service.runtime, self.service.worker)


def route_hook(url: str, http: httpx.AsyncClient) -> Hook:
    """Claude Code's HTTP hook: the input POSTed to the route with the bearer token."""

    async def ask(
        hook_input: dict[str, Any], wait: float = 60, on_timeout: str = "ask"
    ) -> dict[str, Any]:
        answer = await http.post(
            f"{url}{PATH}",
            params={"timeout": f"{wait:g}", "on_timeout": on_timeout},
            content=json.dumps(hook_input),
            headers={"Authorization": f"Bearer {HOOK_TOKEN}", "Content-Type": "application/json"},
            timeout=90,
        )
        assert answer.status_code == 200, answer.text
        return output(answer.text)

    return ask


def command_hook(url: str) -> Hook:
    """Claude Code's command hook: ``signoff hook claude-code`` with the input on stdin."""

    async def ask(
        hook_input: dict[str, Any], wait: float = 60, on_timeout: str = "ask"
    ) -> dict[str, Any]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "hook",
            "claude-code",
            "--timeout",
            f"{wait:g}",
            "--on-timeout",
            on_timeout,
            cwd=ROOT,
            env=clean_env(SIGNOFF_URL=url, SIGNOFF_TOKEN=HOOK_TOKEN),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            stdout, stderr = await asyncio.wait_for(
                process.communicate(json.dumps(hook_input).encode()), timeout=90
            )
        finally:
            if process.returncode is None:
                process.kill()
                await process.communicate()
        assert process.returncode == 0, stderr.decode()
        return output(stdout.decode())

    return ask


def settings_of(edge: EdgeName, directory: Path, discord: FakeDiscord | None) -> Settings:
    agents = directory / "agents.toml"
    agents.write_text(agents_file(edge), encoding="utf-8")
    values: dict[str, Any] = {
        "database_url": f"sqlite+aiosqlite:///{directory / 'signoff.db'}",
        "agents": agents,
        "external_agents": "declared",
        "operator_token": SecretStr(OPERATOR_TOKEN),
        "cookie_secret": SecretStr(COOKIE_SECRET),
        "bind_host": "127.0.0.1",
        "port": 0,
        "poll_seconds": 0.02,
        "lease_seconds": 1,
    }
    if discord is not None:
        values.update(
            discord_bot_token=SecretStr(TOKEN),
            discord_api_base_url=discord.api_base_url,
            discord_gateway_url=discord.gateway_url,
            discord_sync="guild",
            discord_guild_id=GUILD_ID,
            discord_guild_ready_timeout=0.01,
            discord_ready_timeout=10,
        )
    return Settings(**values)


@asynccontextmanager
async def serving(edge: EdgeName, entry: Entry, directory: Path) -> AsyncIterator[Served]:
    """Serve signoff with the Claude Code agent's cards on `edge`; Claude Code's hook
    asks it through `entry`."""
    async with AsyncExitStack() as stack:
        fake_slack: FakeSlack | None = None
        fake_discord: FakeDiscord | None = None
        if edge == "slack":
            fake_slack = FakeSlack()
            await fake_slack.start()
            stack.push_async_callback(fake_slack.stop)
        elif edge == "discord":
            fake_discord = FakeDiscord(roles=ROLES)
            await fake_discord.start()
            stack.push_async_callback(fake_discord.close)
            # discord.py's endpoints are process-wide: put back what other tests expect.
            previous = configure_endpoints(fake_discord.api_base_url, fake_discord.gateway_url)
            stack.callback(configure_endpoints, *previous)
        clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
        auth = TokenAuth(
            [
                ApiToken(HOOK_TOKEN, "svc:claude-code", name="Claude Code"),
                ApiToken(OPERATOR_TOKEN, "ops:root", operator=True, name="Root"),
                ApiToken(CAROL_TOKEN, "U-carol", name="Carol"),
                ApiToken(MALLORY_TOKEN, "U-mallory", name="Mallory"),
            ]
        )
        service = await build_service(
            settings_of(edge, directory, fake_discord),
            clock=clock,
            auth=auth,
            slack_config=slack_config(fake_slack) if fake_slack is not None else None,
            slack_limiter=ChannelLimiter(interval=0.0) if fake_slack is not None else None,
            pacing={},
            parts=Parts(deadlines=False, wake_ups=False, discord=fake_discord is not None),
        )
        url = await service.start()
        stack.push_async_callback(service.stop, grace_seconds=5)
        http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=url, timeout=30, trust_env=False)
        )
        shown: Edge
        if fake_slack is not None:
            shown = SlackEdge(fake_slack, url, http)
        elif fake_discord is not None:
            shown = DiscordEdge(fake_discord)
        else:
            shown = ConsoleEdge(
                url,
                await sign_in(url, CAROL_TOKEN, stack),
                await sign_in(url, MALLORY_TOKEN, stack),
                await sign_in(url, OPERATOR_TOKEN, stack),
            )
        hook = route_hook(url, http) if entry == "route" else command_hook(url)
        yield Served(service, clock, url, shown, hook, http)
