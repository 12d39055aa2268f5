"""Input agents (``<agent>.elicitation``) and resume agents (``<agent>.resume``) are
started by signoff itself: the JSON API and the console neither list them nor start one
by hand, for a stranger or an operator."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from approvals_harness import COOKIE_SECRET, PARTS, TOKENS, agents
from pydantic import SecretStr

from adapters.claude_code.resume import ResumeConfig, resume_agent
from adapters.mcp.elicitation import InputAgent
from adapters.web import TokenAuth
from bot.bootstrap import build_service
from bot.settings import Settings
from runtime import Runtime
from runtime.store.sql import SQLStore

TOKENS_BY_WHO = {"stranger": "tok-u3", "operator": "tok-ops"}


async def serving(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], Runtime]]:
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{path}",
        operator_token=SecretStr("tok-ops-0123456789abcdef"),
        cookie_secret=SecretStr(COOKIE_SECRET.decode()),
        poll_seconds=0.05,
    )
    loaded = agents()
    helper = next(a for a in loaded if a.name == "helper")
    built = await build_service(
        settings,
        agents=[
            *loaded,
            InputAgent(helper, {}),
            resume_agent(helper, ResumeConfig(workdirs=("/srv/*",))),
        ],
        store=store,
        auth=TokenAuth(TOKENS),
        parts=PARTS,
    )
    client: TestClient[Any, Any] = TestClient(TestServer(built.app, host="127.0.0.1", port=0))
    await client.start_server()
    await built.start()
    try:
        yield client, built.runtime
    finally:
        await client.close()
        await built.stop(grace_seconds=5)
        await store.close()


async def test_the_api_neither_lists_nor_starts_an_input_agent(tmp_path: Path) -> None:
    async for client, runtime in serving(tmp_path):
        assert {"helper.elicitation", "helper.resume"} <= set(runtime.agents)
        for who, token in TOKENS_BY_WHO.items():
            bearer = {"Authorization": f"Bearer {token}"}
            listed = await (await client.get("/api/agents", headers=bearer)).json()
            names = [a["name"] for a in listed["agents"]]
            assert "helper" in names, who
            assert not any(n.endswith((".elicitation", ".resume")) for n in names), who

            for internal in ("helper.elicitation", "helper.resume"):
                started = await client.post(
                    "/api/runs",
                    json={"agent": internal, "input": '{"tool": "note"}'},
                    headers=bearer,
                )
                assert started.status == 422, who
                body = await started.json()
                assert body["error"] == "unknown_agent"
                assert "started by signoff itself" in body["message"]

        assert await runtime.list_runs() == []


async def sign_in(client: TestClient[Any, Any], token: str) -> str:
    page = await client.get("/login")
    found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert found is not None
    signed = await client.post(
        "/login", data={"csrf": found.group(1), "token": token}, allow_redirects=False
    )
    assert signed.status == 303, await signed.text()
    return found.group(1)


async def test_the_console_neither_offers_nor_starts_an_input_agent(tmp_path: Path) -> None:
    for who, token in TOKENS_BY_WHO.items():
        (tmp_path / who).mkdir()
        async for client, runtime in serving(tmp_path / who):
            await sign_in(client, token)
            page = await client.get("/start")
            html = await page.text()
            assert page.status == 200, html
            assert 'value="helper"' in html
            assert "helper.elicitation" not in html
            assert "helper.resume" not in html

            csrf = re.search(r'name="csrf" value="([^"]+)"', html)
            assert csrf is not None
            refused = await client.post(
                "/start",
                data={"csrf": csrf.group(1), "agent": "helper.elicitation", "input": "42"},
                allow_redirects=False,
            )
            text = await refused.text()
            assert refused.status == 422, who
            assert "helper.elicitation is started by signoff itself, not by hand." in text
            assert await runtime.list_runs() == []
