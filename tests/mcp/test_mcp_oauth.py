"""`signoff serve` with an MCP server that uses OAuth, walked over HTTP as a browser would.

The server (`fake_oauth_mcp_server`, the official SDK's server-side OAuth) runs on
127.0.0.1 with its own authorization server. An operator signs in from the console's MCP
page: discovery, dynamic client registration, Authorization Code with PKCE, and the
callback. Then: a tool call carries the token, an access token the server stopped taking
is refreshed, a restart keeps the sign-in, a refused refresh makes the server need a
sign-in again, tokens at rest are sealed, and nobody but an operator sees or starts any of
it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, CookieJar
from mcpbed import until
from testkit import Served, query

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).parent
OPERATOR = "operator-token-0123456789"
VIEWER = "viewer-token-0123456789"
KEY = "a-test-key-for-sealing-mcp-tokens-0123456789"


class OAuthServer:
    """`fake_oauth_mcp_server` as a subprocess."""

    def __init__(self, state: Path, **env: str) -> None:
        self.state = state
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "fake_oauth_mcp_server.py")],
            env={**os.environ, "FAKE_OAUTH_STATE": str(state), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.base = ""

    async def ready(self) -> OAuthServer:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), 60)
        assert line.startswith("READY "), line
        self.base = f"http://127.0.0.1:{line.split()[1]}"
        return self

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        path = self.state / "events.jsonl"
        found = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return [e for e in found if kind is None or e["event"] == kind]

    async def control(self, what: str) -> None:
        async with ClientSession() as session, session.post(f"{self.base}/control/{what}") as r:
            assert r.status == 200

    def stop(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        assert self.process.stdout is not None
        self.process.stdout.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environment(tmp_path: Path, port: int, server: OAuthServer) -> dict[str, str]:
    agents = tmp_path / "agents.toml"
    agents.write_text(
        textwrap.dedent(
            f"""
            [servers.crm]
            url = "{server.base}/mcp"
            auth = "oauth"
            scopes = ["tools"]

            [agents.crm]
            description = "Looks customers up."
            instructions = "Look the customer up."
            model = "oauth_agents:crm_model"
            servers = ["crm"]

            [agents.crm.rules."crm.lookup"]
            permission = "allow"
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
        SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        SIGNOFF_PORT=str(port),
        SIGNOFF_PUBLIC_URL=f"http://127.0.0.1:{port}",
        SIGNOFF_AGENTS=str(agents),
        SIGNOFF_SECRETS_KEY=KEY,
        SIGNOFF_OPERATOR_TOKEN=OPERATOR,
        SIGNOFF_API_TOKENS=json.dumps([{"token": VIEWER, "actor": "U-viewer"}]),
        SIGNOFF_POLL_SECONDS="0.05",
        SIGNOFF_LOG_LEVEL="ERROR",
    )
    return env


async def console(url: str, token: str) -> ClientSession:
    """A browser signed in to the console with `token` (cookies for an IP address)."""
    session = ClientSession(url, cookie_jar=CookieJar(unsafe=True))
    async with session.get("/login") as page:
        found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
        assert found
    async with session.post(
        "/login", data={"csrf": found.group(1), "token": token}, allow_redirects=False
    ) as signed:
        assert signed.status in (302, 303)
    return session


async def run(url: str) -> str:
    """Start a run of ``crm`` and return its final text."""
    headers = {"Authorization": f"Bearer {OPERATOR}"}
    async with ClientSession(url, headers=headers) as api:
        async with api.post("/api/runs", json={"agent": "crm", "input": "acme?"}) as started:
            assert started.status == 202, await started.text()
            run_id = (await started.json())["run_id"]
        found: dict[str, Any] = {}

        async def done() -> bool:
            nonlocal found
            async with api.get(f"/api/runs/{run_id}") as response:
                found = await response.json()
            return found["status"] in ("done", "failed", "cancelled")

        await until(done, f"run {run_id} finished", seconds=60)
        assert found["status"] == "done", found
        return str(found["text"])


async def tools_up(url: str) -> None:
    """Wait until the ``crm`` agent's lookup is the server's (not a placeholder)."""
    headers = {"Authorization": f"Bearer {OPERATOR}"}
    async with ClientSession(url, headers=headers) as api:

        async def up() -> bool:
            async with api.get("/api/agents") as response:
                agents = (await response.json())["agents"]
            [crm] = [a for a in agents if a["name"] == "crm"]
            return any(t["description"] == "Look a customer up." for t in crm["tools"])

        await until(up, "the crm server's tools listed", seconds=60)


async def sign_in(url: str, server: OAuthServer) -> None:
    """The operator's walk: the MCP page, Sign in, the authorization server, back."""
    browser = await console(url, OPERATOR)
    try:
        async with browser.get("/mcp") as page:
            html = await page.text()
            assert page.status == 200
            assert "Needs someone to sign in" in html
            assert 'href="/mcp/sign-in/crm"' in html
        async with browser.get("/mcp/sign-in/crm", allow_redirects=False) as going:
            assert going.status == 302
            authorize = going.headers["Location"]
        assert authorize.startswith(f"{server.base}/authorize?")
        assert "code_challenge_method=S256" in authorize
        async with (
            ClientSession() as elsewhere,
            elsewhere.get(authorize, allow_redirects=False) as consent,
        ):
            assert consent.status == 302, await consent.text()
            back = consent.headers["Location"]
        assert back.startswith(f"{url}/mcp/oauth/callback?")
        async with browser.get(back[len(url) :], allow_redirects=True) as page:
            html = await page.text()
            assert "Signed in to MCP server" in html, html
            assert "Signed in by operator" in html
    finally:
        await browser.close()


@pytest.fixture
async def oauth_server(tmp_path: Path) -> AsyncIterator[OAuthServer]:
    server = await OAuthServer(tmp_path / "oauth").ready()
    try:
        yield server
    finally:
        server.stop()


async def test_sign_in_refresh_restart_and_refusal(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    port = free_port()
    env = environment(tmp_path, port, oauth_server)
    served = await Served.start(env)
    url = served.url.rstrip("/")
    try:
        assert "needs an operator to sign in" in await run(url)
        assert oauth_server.events("call") == []

        await sign_in(url, oauth_server)
        assert [e["event"] for e in oauth_server.events()] == ["registered", "authorized", "token"]
        await tools_up(url)
        assert "acme: gold" in await run(url)
        [call] = oauth_server.events("call")

        # Tokens at rest are sealed: neither token nor any field name is in the row.
        [(sealed,)] = query(tmp_path / "signoff.db", "SELECT sealed FROM mcp_oauth")
        assert call["token"] not in sealed
        assert "access_token" not in sealed and "refresh_token" not in sealed

        # The server stops taking the access token: refreshed, and the call goes through.
        await oauth_server.control("expire")
        assert "acme: gold" in await run(url)
        assert len(oauth_server.events("refreshed")) == 1
        fresh = oauth_server.events("call")[-1]["token"]
        assert fresh != call["token"]
    finally:
        await served.stop()

    # A restart keeps the sign-in: no new authorization, the stored token is used.
    served = await Served.start(env)
    url = served.url.rstrip("/")
    try:
        await tools_up(url)
        assert "acme: gold" in await run(url)
        assert len(oauth_server.events("authorized")) == 1
        assert oauth_server.events("call")[-1]["token"] == fresh

        # The authorization server refuses the refresh: the server needs a sign-in again.
        await oauth_server.control("refuse-refresh")
        assert "needs an operator to sign in" in await run(url)
        browser = await console(url, OPERATOR)
        try:
            async with browser.get("/mcp") as page:
                html = await page.text()
            assert "Needs someone to sign in" in html
            assert "refused to refresh the token" in html
        finally:
            await browser.close()
        await sign_in(url, oauth_server)
        await tools_up(url)
        assert "acme: gold" in await run(url)
        assert len(oauth_server.events("registered")) == 1  # the client was kept
    finally:
        await served.stop()


def test_signoff_agents_says_the_server_needs_a_sign_in(
    tmp_path: Path, oauth_server: OAuthServer
) -> None:
    env = environment(tmp_path, free_port(), oauth_server)
    listed = subprocess.run(
        [sys.executable, "-m", "bot", "agents"],
        cwd=HERE.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert "mcp:crm (unavailable)" in listed.stdout
    assert "MCP server crm is unavailable: MCP server 'crm' needs an operator to sign in" in (
        listed.stdout
    )


async def test_strangers_see_and_start_nothing(tmp_path: Path, oauth_server: OAuthServer) -> None:
    port = free_port()
    served = await Served.start(environment(tmp_path, port, oauth_server))
    url = served.url.rstrip("/")
    try:
        viewer = await console(url, VIEWER)
        try:
            for path in ("/mcp", "/mcp/sign-in/crm", "/mcp/oauth/callback?state=crm.x&code=y"):
                async with viewer.get(path, allow_redirects=False) as page:
                    assert page.status == 403, path
                    assert "Only an operator" in await page.text()
        finally:
            await viewer.close()
        # An API token is no console session: sent to sign in, nothing shown.
        headers = {"Authorization": f"Bearer {OPERATOR}"}
        async with ClientSession(url, headers=headers) as api:
            for path in ("/mcp", "/mcp/sign-in/crm"):
                async with api.get(path, allow_redirects=False) as page:
                    assert page.status == 303 and page.headers["Location"].startswith("/login")
        assert oauth_server.events() == []  # no discovery reached registration
        assert query(tmp_path / "signoff.db", "SELECT server FROM mcp_oauth") == []

        # An operator's callback with a state nobody started changes nothing.
        operator = await console(url, OPERATOR)
        try:
            async with operator.get("/mcp/oauth/callback?state=crm.forged&code=x") as page:
                assert "not known" in await page.text()
            async with operator.get("/mcp/sign-in/nope", allow_redirects=False) as page:
                assert page.status == 404
        finally:
            await operator.close()
        assert query(tmp_path / "signoff.db", "SELECT server FROM mcp_oauth") == []
    finally:
        await served.stop()
