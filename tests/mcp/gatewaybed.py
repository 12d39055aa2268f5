"""A served MCP gateway whose cards go to the console, the fake Slack or the fake Discord.

`serve_gateway` builds `signoff serve`'s process (`bot.bootstrap.build_service`) on a fresh
SQLite file, listening on 127.0.0.1 (a free port), with the agent ``ops`` whose tools come
from the fake MCP server over stdio (`fake_mcp_server`), and its gateway agent
``ops.mcp`` served at ``/mcp/ops`` (`add_gateway_routes`). The gateway's cards go where
`approvals` says; ``deploy`` asks `APPROVER` (editable, with the session grant offered),
``lookup`` and ``fail`` are allowed, ``merge`` is denied. Its worker and outbox run;
deadlines expire when a test calls ``expire_overdue`` after moving the `ManualClock`
(started at the real time).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcpbed import stdio_server, until
from pydantic import SecretStr
from testkit import echo_model

from adapters.mcp import Binding, ToolKnobs
from adapters.mcp.gateway import McpGateway, add_gateway_routes, gateway_agent
from adapters.mcp.hub import McpHub
from adapters.slack import SlackConfig
from adapters.web import ApiToken, TokenAuth
from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import Actor, Agent, ManualClock, Permission
from runtime.store.sql import SQLStore

CALLER = "tok-caller-0123456789"
"""The MCP client's token (user ``svc-ci``, not an operator)."""
APPROVER_TOKEN = "tok-approver-0123456789"
"""The approver's API and console token."""
STRANGER = "tok-stranger-0123456789"
"""Another person's token: neither the caller nor an approver."""
OPERATOR = "tok-operator-0123456789"
COOKIE_SECRET = "gateway-cookie-secret-0123456789abcdef"
DEADLINE = timedelta(minutes=5)
"""The decision deadline of ``deploy``."""


def knobs(approver: str, more: bool = False) -> tuple[ToolKnobs, ...]:
    """The rules of ``ops``'s MCP tools (`more`: ``flaky`` too, allowed)."""
    extra = (ToolKnobs("infra.flaky", where="rule infra.flaky", permission=Permission.ALLOW),)
    return (
        *(extra if more else ()),
        ToolKnobs("infra.lookup", where="rule infra.lookup", permission=Permission.ALLOW),
        ToolKnobs("infra.fail", where="rule infra.fail", permission=Permission.ALLOW),
        ToolKnobs("infra.hang", where="rule infra.hang", permission=Permission.ALLOW),
        ToolKnobs("infra.merge", where="rule infra.merge", permission=Permission.DENY),
        ToolKnobs(
            "infra.deploy",
            where="rule infra.deploy",
            permission=Permission.ASK,
            approvers=(approver,),
            editable=("environment",),
            grants=("run",),
            deadline=DEADLINE,
        ),
    )


@dataclass
class ServedGateway:
    """The running service, its gateway's URL, and what a test does with them."""

    service: Service
    gateway: McpGateway
    clock: ManualClock
    url: str
    database: Path
    http: aiohttp.ClientSession

    @property
    def mcp_url(self) -> str:
        """The gateway's endpoint."""
        return self.url + "/mcp/ops"

    @contextlib.asynccontextmanager
    async def client(
        self, token: str = CALLER, session: str | None = "s-1"
    ) -> AsyncIterator[Client]:
        """The official MCP client, connected with `token` in `session`."""
        headers = {"Authorization": f"Bearer {token}"}
        if session is not None:
            headers["Signoff-Session"] = session
        async with (
            httpx2.AsyncClient(
                headers=headers, timeout=httpx2.Timeout(30.0, read=90.0), trust_env=False
            ) as http,
            Client(streamable_http_client(self.mcp_url, http_client=http)) as client,
        ):
            yield client

    async def api(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        """Call the JSON API with `token`; the status and the decoded body."""
        async with self.http.request(
            method, self.url + path, json=body, headers={"Authorization": f"Bearer {token}"}
        ) as answer:
            return answer.status, await answer.json(content_type=None)

    async def pending(self) -> str:
        """The open ticket of the waiting gateway call, once there is one."""

        async def open_one() -> str | None:
            found = await self.service.runtime.open_tickets(viewer=Actor(id="ops", operator=True))
            return found[0].ticket_id if found else None

        ticket: str = await until(open_one, "an open ticket of the gateway call")
        return ticket

    async def login(self, token: str) -> tuple[aiohttp.ClientSession, str]:
        """A console session signed in with `token` and its CSRF token (the caller closes
        the session)."""
        session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        try:
            page = await session.get(self.url + "/login")
            csrf = _csrf(await page.text())
            signed = await session.post(
                self.url + "/login",
                data={"csrf": csrf, "token": token},
                allow_redirects=False,
            )
            assert signed.status == 303, await signed.text()
            page = await session.get(self.url + "/tickets")
            return session, _csrf(await page.text())
        except BaseException:
            await session.close()
            raise


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def text(result: mcp_types.CallToolResult) -> str:
    """The text of a tool result."""
    return "\n".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))


@contextlib.asynccontextmanager
async def serve_gateway(
    directory: Path,
    state: Path,
    *,
    approver: str,
    approvals: Mapping[str, Any] | None = None,
    slack_config: SlackConfig | None = None,
    settings: Mapping[str, Any] | None = None,
    progress_seconds: float = 0.2,
    more: bool = False,
) -> AsyncIterator[ServedGateway]:
    """Serve the gateway to ``ops``'s MCP tools until the block ends (`more`: the fake
    server's ``flaky`` tool too)."""
    from adapters.slack import ChannelLimiter

    ops = Agent("ops", "Operate.", echo_model())
    agent = gateway_agent(ops, approvals=approvals)
    database = directory / "signoff.db"
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    auth = TokenAuth(
        [
            ApiToken(CALLER, "svc-ci", name="CI"),
            ApiToken(APPROVER_TOKEN, approver, name="Approver"),
            ApiToken(STRANGER, "U-stranger", name="Stranger"),
            ApiToken(OPERATOR, "ops:alice", operator=True, name="Alice"),
        ]
    )
    async with contextlib.AsyncExitStack() as stack:
        server = stdio_server(state, env={"FAKE_MCP_MORE": "1"} if more else {})
        hub = McpHub([server], [Binding(ops, ("infra",), knobs(approver, more))])
        await hub.start()
        stack.push_async_callback(hub.stop)
        store = SQLStore.sqlite(database)
        await store.migrate()
        stack.push_async_callback(store.close)
        service = await build_service(
            Settings(
                database_url=f"sqlite+aiosqlite:///{database}",
                operator_token=SecretStr(OPERATOR),
                cookie_secret=SecretStr(COOKIE_SECRET),
                bind_host="127.0.0.1",
                port=0,
                poll_seconds=0.02,
                **dict(settings or {}),
            ),
            agents=[ops, agent],
            store=store,
            clock=clock,
            auth=auth,
            slack_config=slack_config,
            slack_limiter=ChannelLimiter(interval=0.0, monotonic=lambda: clock.now().timestamp()),
            pacing={},
            parts=Parts(deadlines=False, wake_ups=False),
        )
        gateway = McpGateway(
            service.runtime, agent, ops, service.worker.wake_runs, progress_seconds=progress_seconds
        )
        add_gateway_routes(service.app, gateway, auth.bearer, path="/mcp/ops")
        url = await service.start()
        stack.push_async_callback(service.stop, 5)
        http = await stack.enter_async_context(aiohttp.ClientSession())
        yield ServedGateway(service, gateway, clock, url, database, http)
