"""An MCP server protected by OAuth, with its own authorization server, for tests.

Run as ``python fake_oauth_mcp_server.py`` with ``FAKE_OAUTH_STATE`` (a directory); it
prints ``READY <port>``. The official SDK serves everything: the MCP endpoint ``/mcp``
behind bearer tokens, its protected resource metadata, the authorization server's
metadata, dynamic client registration, ``/authorize`` and ``/token`` (PKCE checked by the
SDK). The "person" at ``/authorize`` always consents. ``FAKE_OAUTH_NO_REGISTRATION=1``
turns registration off and registers the client ``preset`` (secret ``preset-secret``).

Tests steer it with POSTs to ``/control/expire`` (every access token stops working) and
``/control/refuse-refresh`` (every refresh token stops working). Every event
(registration, authorization, token, refresh, tool call with its token) is appended to
``events.jsonl`` in the state directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any, cast

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, AnyUrl
from starlette.requests import Request
from starlette.responses import JSONResponse

STATE = Path(os.environ.get("FAKE_OAUTH_STATE", "."))
LIFETIME = int(os.environ.get("FAKE_OAUTH_LIFETIME", "3600"))


def _event(kind: str, **fields: Any) -> None:
    with (STATE / "events.jsonl").open("a") as handle:
        handle.write(json.dumps({"event": kind, **fields}) + "\n")


class Provider:
    """An authorization server in memory that signs everyone in."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        _event("registered", client_id=client_info.client_id)

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["tools"],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        _event("authorized", client_id=client.client_id, resource=params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + LIFETIME,
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            expires_in=LIFETIME,
            refresh_token=refresh,
            scope=" ".join(scopes),
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        token = self._issue(
            authorization_code.client_id, authorization_code.scopes, authorization_code.resource
        )
        _event("token", client_id=client.client_id)
        return token

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        token = self._issue(refresh_token.client_id, refresh_token.scopes, refresh_token.resource)
        _event("refreshed", client_id=client.client_id)
        return token

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access.get(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


PROVIDER = Provider()


def build(port: int) -> MCPServer[Any]:
    base = f"http://127.0.0.1:{port}"
    registration = os.environ.get("FAKE_OAUTH_NO_REGISTRATION") != "1"
    if not registration:
        PROVIDER.clients["preset"] = OAuthClientInformationFull(
            client_id="preset",
            client_secret="preset-secret",
            redirect_uris=[AnyUrl(os.environ["FAKE_OAUTH_REDIRECT"])],
            token_endpoint_auth_method="client_secret_basic",
            grant_types=["authorization_code", "refresh_token"],
            scope="tools",
        )
    server: MCPServer[Any] = MCPServer(
        "crm",
        auth_server_provider=cast(Any, PROVIDER),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(base),
            resource_server_url=AnyHttpUrl(f"{base}/mcp"),
            validate_token_resource=False,
            client_registration_options=ClientRegistrationOptions(
                enabled=registration, valid_scopes=["tools"], default_scopes=["tools"]
            ),
            required_scopes=["tools"],
        ),
    )

    @server.tool(description="Look a customer up.")
    def lookup(customer: str, ctx: Context) -> str:
        headers = ctx.request_context.request.headers if ctx.request_context.request else {}
        _event("call", tool="lookup", token=str(headers.get("authorization", ""))[7:])
        return f"{customer}: gold"

    async def expire(request: Request) -> JSONResponse:
        PROVIDER.access.clear()
        return JSONResponse({"ok": True})

    async def refuse(request: Request) -> JSONResponse:
        PROVIDER.access.clear()
        PROVIDER.refresh.clear()
        return JSONResponse({"ok": True})

    route: Any = server.custom_route
    route("/control/expire", methods=["POST"])(expire)
    route("/control/refuse-refresh", methods=["POST"])(refuse)

    return server


async def _serve() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(os.environ.get("FAKE_OAUTH_PORT", "0"))))
    port = sock.getsockname()[1]
    app = build(port).streamable_http_app()
    http = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on"))
    task = asyncio.create_task(http.serve(sockets=[sock]))
    while not http.started:
        if task.done():
            await task
        await asyncio.sleep(0.01)
    print(f"READY {port}", flush=True)
    await task


if __name__ == "__main__":
    STATE.mkdir(parents=True, exist_ok=True)
    asyncio.run(_serve())
