"""The OAuth sign-in and its tokens against the SDK's OAuth-protected server, without a
console: a client registered beforehand, a server without registration, two replicas
sharing one sign-in while its refresh token rotates, and refused callbacks."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from test_mcp_oauth import OAuthServer

from adapters.mcp.config import HttpServer, OAuthClient
from adapters.mcp.oauth import SecretBox, SignInNeeded, SignIns

pytestmark = pytest.mark.timeout(120)

REDIRECT = "https://signoff.example.com/mcp/oauth/callback"


class Records:
    """Sealed records in memory, shared by the `SignIns` of several "replicas"."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}

    async def read(self, server: str) -> str | None:
        return self.rows.get(server)

    async def write(self, server: str, sealed: str) -> None:
        self.rows[server] = sealed


def sign_ins(server: OAuthServer, records: Records, **oauth: Any) -> SignIns:
    config = HttpServer("crm", f"{server.base}/mcp", oauth=OAuthClient(**oauth))
    return SignIns([config], records, SecretBox("k" * 40), REDIRECT)


async def sign_in(flow: SignIns, by: str = "ops") -> None:
    authorize = await flow.begin("crm", by)
    async with httpx2.AsyncClient() as browser:
        consent = await browser.get(authorize)
    assert consent.status_code == 302, consent.text
    query = parse_qs(urlsplit(consent.headers["location"]).query)
    assert await flow.finish(query["state"][0], query["code"][0], by) == "crm"


@contextlib.asynccontextmanager
async def _streams(read: Any, write: Any) -> AsyncIterator[Any]:
    yield read, write


async def lookup(flow: SignIns, url: str) -> str:
    async with (
        httpx2.AsyncClient(auth=flow.auth("crm")) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        Client(_streams(read, write)) as client,
    ):
        result = await client.call_tool("lookup", {"customer": "acme"})
    return str(result.content[0].text)  # type: ignore[union-attr]


@pytest.fixture
async def preset(tmp_path: Path) -> AsyncIterator[OAuthServer]:
    server = await OAuthServer(
        tmp_path / "oauth", FAKE_OAUTH_NO_REGISTRATION="1", FAKE_OAUTH_REDIRECT=REDIRECT
    ).ready()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def open_server(tmp_path: Path) -> AsyncIterator[OAuthServer]:
    server = await OAuthServer(tmp_path / "oauth").ready()
    try:
        yield server
    finally:
        server.stop()


async def test_a_client_registered_beforehand_signs_in_with_its_secret(
    preset: OAuthServer,
) -> None:
    flow = sign_ins(preset, Records(), client_id="preset", client_secret="preset-secret")
    await sign_in(flow)
    assert await lookup(flow, f"{preset.base}/mcp") == "acme: gold"
    assert preset.events("registered") == []
    [status] = await flow.status()
    assert status.signed_in and status.by == "ops"


async def test_without_registration_or_a_client_id_the_sign_in_says_what_to_set(
    preset: OAuthServer,
) -> None:
    records = Records()
    flow = sign_ins(preset, records)
    with pytest.raises(ValueError, match="set client_id"):
        await flow.begin("crm", "ops")
    assert records.rows == {}
    with pytest.raises(BaseExceptionGroup) as failed:
        await lookup(flow, f"{preset.base}/mcp")
    assert failed.group_contains(SignInNeeded, match="needs an operator to sign in", depth=None)


async def test_two_replicas_share_one_sign_in_while_the_refresh_token_rotates(
    open_server: OAuthServer,
) -> None:
    records = Records()
    first, second = sign_ins(open_server, records), sign_ins(open_server, records)
    await sign_in(first)
    url = f"{open_server.base}/mcp"
    provider = second.auth("crm")  # a connection of the second replica, loaded now
    async with httpx2.AsyncClient(auth=provider) as http:
        assert (
            await http.post(url, json={}, headers={"Accept": "application/json"})
        ).status_code != 401
    await open_server.control("expire")
    assert await lookup(first, url) == "acme: gold"  # the first refreshes (and rotates)
    assert len(open_server.events("refreshed")) == 1
    # The second's connection holds the old tokens: its refresh is refused, and it takes
    # the first replica's new ones instead of ending the sign-in.
    async with (
        httpx2.AsyncClient(auth=provider) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        Client(_streams(read, write)) as client,
    ):
        result = await client.call_tool("lookup", {"customer": "acme"})
    assert not result.is_error
    [status] = await second.status()
    assert status.signed_in
    tokens = [e["token"] for e in open_server.events("call")]
    assert tokens[-1] == tokens[-2]


async def test_callbacks_nobody_started_someone_elses_or_late_change_nothing(
    open_server: OAuthServer,
) -> None:
    records = Records()
    now = [1000.0]
    config = HttpServer("crm", f"{open_server.base}/mcp", oauth=OAuthClient())
    flow = SignIns([config], records, SecretBox("k" * 40), REDIRECT, clock=lambda: now[0])
    authorize = await flow.begin("crm", "ops")
    state = parse_qs(urlsplit(authorize).query)["state"][0]
    with pytest.raises(ValueError, match="not known"):
        await flow.finish("crm.forged", "code", "ops")
    with pytest.raises(ValueError, match="Someone else"):
        await flow.finish(state, "code", "mallory")
    now[0] += 601
    with pytest.raises(ValueError, match="too long"):
        await flow.finish(state, "code", "ops")
    with pytest.raises(ValueError, match="not known"):
        await flow.finish("nope.x", "code", "ops")
    [status] = await flow.status()
    assert not status.signed_in
    assert open_server.events("token") == []
