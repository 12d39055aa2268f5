"""The served OpenAPI document lists exactly the routes its application mounts: with the
MCP servers' refresh route (an agents file with MCP servers) and without it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from approvals_harness import COOKIE_SECRET, PARTS, TOKENS, agents
from openapi_spec_validator import validate
from pydantic import SecretStr

from adapters.web import TokenAuth
from adapters.web.mcp_routes import add_mcp_refresh_route
from bot.bootstrap import build_service
from bot.settings import Settings
from runtime.store.sql import SQLStore

METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}
REFRESH = "/api/mcp/servers/{name}/refresh"
OPERATOR = {"Authorization": "Bearer tok-ops"}


async def _refresh(name: str) -> int:
    if name != "ann":
        raise LookupError(name)
    return 6


async def serving(tmp_path: Path, *, mcp: bool) -> AsyncIterator[TestClient[Any, Any]]:
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{path}",
        operator_token=SecretStr("tok-ops-0123456789abcdef"),
        cookie_secret=SecretStr(COOKIE_SECRET.decode()),
        poll_seconds=0.05,
    )
    auth = TokenAuth(TOKENS)
    built = await build_service(settings, agents=agents(), store=store, auth=auth, parts=PARTS)
    if mcp:  # as `signoff serve` mounts it for an agents file with MCP servers
        add_mcp_refresh_route(built.app, auth, _refresh, ["ann"])
    client: TestClient[Any, Any] = TestClient(TestServer(built.app, host="127.0.0.1", port=0))
    await client.start_server()
    await built.start()
    try:
        yield client
    finally:
        await client.close()
        await built.stop(grace_seconds=5)
        await store.close()


def mounted(app: web.Application) -> set[tuple[str, str]]:
    served = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or ""
        if route.method in METHODS and (path.startswith("/api/") or path.startswith("/.well")):
            served.add((route.method.lower(), path))
    return served


async def document(client: TestClient[Any, Any]) -> dict[str, Any]:
    response = await client.get("/api/openapi.json")
    assert response.status == 200
    return dict(await response.json())


@pytest.mark.parametrize("mcp", [True, False], ids=["with-mcp-servers", "without"])
async def test_the_document_lists_exactly_the_mounted_routes(tmp_path: Path, mcp: bool) -> None:
    async for client in serving(tmp_path, mcp=mcp):
        doc = await document(client)
        validate(doc)
        documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}

        assert documented == mounted(client.app)
        assert (("post", REFRESH) in documented) is mcp


async def test_the_refresh_answers_fit_the_document(tmp_path: Path) -> None:
    async for client in serving(tmp_path, mcp=True):
        doc = await document(client)
        responses = doc["paths"][REFRESH]["post"]["responses"]
        assert set(responses) == {"200", "401", "403", "404", "503"}
        answers = [
            (await client.post("/api/mcp/servers/ann/refresh", headers=OPERATOR), 200),
            (await client.post("/api/mcp/servers/nope/refresh", headers=OPERATOR), 404),
            (
                await client.post(
                    "/api/mcp/servers/ann/refresh", headers={"Authorization": "Bearer tok-u1"}
                ),
                403,
            ),
            (await client.post("/api/mcp/servers/ann/refresh"), 401),
        ]
        for response, status in answers:
            assert response.status == status
            schema = responses[str(status)]["content"]["application/json"]["schema"]
            validator = jsonschema.Draft202012Validator({**schema, "components": doc["components"]})
            body = await response.json()
            assert not list(validator.iter_errors(body)), (status, body)
        ok = await client.post("/api/mcp/servers/ann/refresh", headers=OPERATOR)
        assert await ok.json() == {"server": "ann", "tools": 6}
