"""`signoff serve` (a real process) with ``SIGNOFF_OIDC_*``: a JWT of the provider (a
`fake_oidc.FakeIdp` on 127.0.0.1, discovered through its ``openid-configuration``) is a
bearer token of the JSON API, the MCP gateway and the Claude Code hook route; a bad one
is refused with ``error="invalid_token"`` there too and asks nothing."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiohttp import ClientSession
from fake_oidc import AUDIENCE, FakeIdp, new_key
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from testkit import Served, query

pytestmark = pytest.mark.timeout(180)

OPERATOR = "operator-token-0123456789"
INVALID = 'Bearer realm="signoff", error="invalid_token"'


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}", "Signoff-Session": "jwt-1"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def pre_tool_use() -> dict[str, Any]:
    return {
        "session_id": str(uuid.uuid4()),
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": "/work/project",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "git push origin main"},
        "tool_use_id": "toolu_" + uuid.uuid4().hex[:24],
    }


@pytest.fixture
async def idp() -> AsyncIterator[FakeIdp]:
    provider = await FakeIdp([new_key("k1"), new_key("k2", "ES256")]).start()
    try:
        yield provider
    finally:
        await provider.close()


@pytest.fixture
async def served(tmp_path: Path, idp: FakeIdp) -> AsyncIterator[Served]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        SIGNOFF_PORT="0",
        SIGNOFF_OPERATOR_TOKEN=OPERATOR,
        SIGNOFF_LOG_LEVEL="ERROR",
        SIGNOFF_APP="examples:demo_agents",
        SIGNOFF_AGENTS="examples/mcp/agents.toml",
        SIGNOFF_OIDC_ISSUER=idp.issuer,
        SIGNOFF_OIDC_AUDIENCE=AUDIENCE,
        SIGNOFF_OIDC_USER_CLAIM="email",
        SIGNOFF_OIDC_OPERATOR_GROUPS="sre",
    )
    process = await Served.start(env)
    try:
        yield process
    finally:
        await process.stop()
    assert process.process.returncode == 0


def runs(tmp_path: Path) -> int:
    return int(query(tmp_path / "signoff.db", "SELECT count(*) FROM runs")[0][0])


async def test_a_jwt_is_a_bearer_token_of_every_api_route(
    served: Served, idp: FakeIdp, tmp_path: Path
) -> None:
    assert idp.hits == {"discovery": 1, "jwks": 1}  # fetched when the server started
    alice = idp.token(email="alice@example.com")
    bearer = {"Authorization": f"Bearer {alice}"}
    async with ClientSession() as session:
        async with session.get(served.url + "/api/approvals", headers=bearer) as response:
            assert response.status == 200
            assert (await response.json())["approvals"] == []

        # The MCP gateway: the same token lists the gateway's tools.
        async with mcp_client(served.url + "/mcp/infra", alice) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == {"service_status", "deploy"}

        # The Claude Code hook route: an approval asked as the token's user.
        async with session.post(
            served.url + "/claude-code/hook",
            params={"timeout": "0", "on_timeout": "ask"},
            json=pre_tool_use(),
            headers=bearer,
        ) as response:
            assert response.status == 200, await response.text()
        async with session.get(served.url + "/api/approvals", headers=bearer) as response:
            [approval] = (await response.json())["approvals"]
        assert approval["requester"] == "oidc:alice@example.com"
        assert approval["agent"] == "claude-code"
        # Nobody decided within the hook's 0 s: Claude Code was told to ask its user.
        assert approval["basis"] == "cancelled", approval

        # An operator group's member sees it; another user does not.
        sre = idp.token(idp.keys["k2"], email="sam@example.com", groups=["sre"])
        bob = idp.token(email="bob@example.com")
        for token, seen in ((sre, 1), (bob, 0)):
            headers = {"Authorization": f"Bearer {token}"}
            async with session.get(served.url + "/api/approvals", headers=headers) as response:
                assert len((await response.json())["approvals"]) == seen
    assert runs(tmp_path) == 1
    assert idp.hits == {"discovery": 1, "jwks": 1}  # no request fetched anything


async def test_bad_jwts_are_refused_everywhere_and_ask_nothing(
    served: Served, idp: FakeIdp, tmp_path: Path
) -> None:
    bad = {
        "expired": idp.token(email="alice@example.com", lifetime=-120),
        "wrong audience": idp.token(email="alice@example.com", aud="other"),
        "another key": idp.token(new_key("k1"), email="alice@example.com"),
        "no user claim": idp.token(),  # `sub` only; the user claim is `email`
    }
    async with httpx2.AsyncClient(base_url=served.url, timeout=30) as http:
        for kind, token in bad.items():
            bearer = {"Authorization": f"Bearer {token}"}
            answers = [
                await http.get("/api/approvals", headers=bearer),
                await http.post(
                    "/api/approvals",
                    json={"agent": "coder", "tool": "push", "arguments": {}},
                    headers=bearer,
                ),
                await http.post(
                    "/mcp/infra",
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                    headers={**bearer, "Accept": "application/json, text/event-stream"},
                ),
                await http.post(
                    "/claude-code/hook",
                    params={"timeout": "0"},
                    json=pre_tool_use(),
                    headers=bearer,
                ),
            ]
            for answer in answers:
                assert answer.status_code == 401, (kind, answer.request.url, answer.text)
                assert answer.headers["WWW-Authenticate"] == INVALID, kind
    assert runs(tmp_path) == 0
    assert idp.hits == {"discovery": 1, "jwks": 1}
