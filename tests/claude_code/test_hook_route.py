"""``POST /claude-code/hook`` on a served `signoff serve`: Claude Code's HTTP hook
(the settings of docs/claude-code.md) gets the same answers as the command hook, and
requests without a valid token, or asking for someone the token may not name, are
refused and ask nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from adapters.claude_code.route import PATH
from tests.claude_code.conftest import Asker, output, page_block, pre_tool_use
from tests.clients.serving import AGENT_TOKEN, STRANGER_TOKEN, Server


@pytest.fixture
async def http(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=90, trust_env=False) as client:
        yield client


async def hook(
    http: httpx.AsyncClient,
    body: Any,
    *,
    token: str | None = AGENT_TOKEN,
    **query: str,
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    content = body if isinstance(body, str) else json.dumps(body)
    return await http.post(
        PATH, content=content, params=query, headers={**headers, "Content-Type": "application/json"}
    )


async def answered(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return output(response.text)


async def decided_while_waiting(
    server: Server,
    asker: Asker,
    http: httpx.AsyncClient,
    hook_input: dict[str, Any],
    decision: dict[str, Any],
) -> dict[str, Any]:
    waiting = asyncio.ensure_future(hook(http, hook_input, timeout="60"))
    try:
        approval = await asyncio.to_thread(asker.same_approval, hook_input)
        assert approval["status"] == "pending", approval
        await asyncio.to_thread(server.decide, approval["ticket_id"], decision)
        return await answered(await asyncio.wait_for(waiting, timeout=60))
    finally:
        if not waiting.done():
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)


async def test_read_is_allowed_at_once(http: httpx.AsyncClient) -> None:
    answer = await answered(await hook(http, pre_tool_use("Read", file_path="/etc/hosts")))
    assert answer["permissionDecision"] == "allow"


async def test_webfetch_is_denied_by_rule(http: httpx.AsyncClient) -> None:
    answer = await answered(await hook(http, pre_tool_use("WebFetch", url="https://x.test")))
    assert answer["permissionDecision"] == "deny"


async def test_allow_deny_and_edit_while_the_hook_waits(
    server: Server, asker: Asker, http: httpx.AsyncClient
) -> None:
    allowed = await decided_while_waiting(
        server, asker, http, pre_tool_use(command="git push"), {"decision": "allow"}
    )
    assert allowed["permissionDecision"] == "allow" and "updatedInput" not in allowed

    denied = await decided_while_waiting(
        server,
        asker,
        http,
        pre_tool_use(command="rm -rf dist"),
        {"decision": "deny", "reason": "not on Fridays"},
    )
    assert denied["permissionDecision"] == "deny"
    assert "not on Fridays" in denied["permissionDecisionReason"]

    edited = await decided_while_waiting(
        server,
        asker,
        http,
        pre_tool_use(command="ls && rm -rf dist"),
        {"decision": "allow", "args": {"command": "ls"}},
    )
    assert edited["permissionDecision"] == "allow"
    assert edited["updatedInput"] == {"command": "ls"}


async def test_timeout_answers_as_asked_and_the_retry_gets_the_decision(
    server: Server, asker: Asker, http: httpx.AsyncClient
) -> None:
    hook_input = pre_tool_use(command="git push origin v2")
    deferred = await answered(await hook(http, hook_input, timeout="0", on_timeout="defer"))
    assert deferred["permissionDecision"] == "defer"
    again = await answered(await hook(http, hook_input, timeout="0", on_timeout="defer"))
    assert again["permissionDecision"] == "defer"
    (pending,) = await asyncio.to_thread(asker.session, hook_input["session_id"])
    assert pending["ticket_id"] in deferred["permissionDecisionReason"]
    assert pending["status"] == "pending"

    await asyncio.to_thread(server.decide, pending["ticket_id"], {"decision": "allow"})
    allowed = await answered(await hook(http, hook_input, timeout="0"))
    assert allowed["permissionDecision"] == "allow"
    (same,) = await asyncio.to_thread(asker.session, hook_input["session_id"])
    assert same["approval_id"] == pending["approval_id"]


async def test_ask_or_deny_on_timeout_withdraws_and_a_retry_hears_so(
    server: Server, asker: Asker, http: httpx.AsyncClient
) -> None:
    for on_timeout, command in (("ask", "git push origin v3"), ("deny", "rm -rf v3")):
        hook_input = pre_tool_use(session=f"withdraw-{on_timeout}", command=command)
        first = await answered(await hook(http, hook_input, timeout="0", on_timeout=on_timeout))
        assert first["permissionDecision"] == on_timeout
        assert "withdrawn" in first["permissionDecisionReason"]
        (withdrawn,) = await asyncio.to_thread(asker.session, hook_input["session_id"])
        assert (withdrawn["status"], withdrawn["basis"]) == ("denied", "cancelled")
        tickets = await asyncio.to_thread(server.tickets)
        assert withdrawn["ticket_id"] not in {t["ticket_id"] for t in tickets}
        # The same tool use asked again: the withdrawn approval, denied, no new card.
        retry = await answered(await hook(http, hook_input, timeout="0", on_timeout="defer"))
        assert retry["permissionDecision"] == "deny"
        (same,) = await asyncio.to_thread(asker.session, hook_input["session_id"])
        assert same["approval_id"] == withdrawn["approval_id"]


async def test_the_command_and_the_route_share_one_approval(
    server: Server, asker: Asker, http: httpx.AsyncClient
) -> None:
    hook_input = pre_tool_use(command="git push origin shared")
    from_api = await asyncio.to_thread(asker.same_approval, hook_input)
    answer = await answered(await hook(http, hook_input, timeout="0", on_timeout="defer"))
    assert from_api["ticket_id"] in answer["permissionDecisionReason"]


async def test_refusals_ask_nothing(asker: Asker, http: httpx.AsyncClient) -> None:
    session = "refused-session"
    good = pre_tool_use(session=session, command="git push")

    no_token = await hook(http, good, token=None)
    assert no_token.status_code == 401 and no_token.json()["error"] == "unauthenticated"
    assert no_token.headers["WWW-Authenticate"].startswith("Bearer")
    wrong_token = await hook(http, good, token="tok-forged-000000000000")
    assert wrong_token.status_code == 401

    for body in ("{nope", "[]", json.dumps({**good, "hook_event_name": "Stop"})):
        bad = await hook(http, body)
        assert bad.status_code == 400 and bad.json()["error"] == "bad_request", bad.text
    for query in (
        {"timeout": "-1"},
        {"timeout": "99999"},
        {"on_timeout": "allow"},
        {"agent": "a b"},
    ):
        bad = await hook(http, good, **query)
        assert bad.status_code == 400, (query, bad.text)

    stranger = await hook(http, good, token=STRANGER_TOKEN, on_behalf_of="U-alice")
    assert stranger.status_code == 403 and "U-alice" in stranger.json()["message"]

    assert await asyncio.to_thread(asker.session, session) == []


async def test_a_stranger_does_not_get_anothers_decision(
    server: Server, asker: Asker, http: httpx.AsyncClient
) -> None:
    hook_input = pre_tool_use(command="git push origin main")
    ours = await asyncio.to_thread(asker.same_approval, hook_input)
    await asyncio.to_thread(server.decide, ours["ticket_id"], {"decision": "allow"})
    theirs = await answered(await hook(http, hook_input, token=STRANGER_TOKEN, timeout="0"))
    assert theirs["permissionDecision"] == "ask"
    assert ours["approval_id"] not in theirs["permissionDecisionReason"]


def test_the_pages_http_hook_names_this_route() -> None:
    settings = json.loads(page_block("json", "test_hook_route.py"))
    (entry,) = settings["hooks"]["PreToolUse"]
    (http_hook,) = entry["hooks"]
    assert http_hook["type"] == "http"
    url = urlsplit(http_hook["url"])
    assert url.path == PATH
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert float(query["timeout"]) < http_hook["timeout"]
    assert query["on_timeout"] in ("ask", "defer", "deny")
    assert http_hook["headers"]["Authorization"] == "Bearer $SIGNOFF_TOKEN"
    assert http_hook["allowedEnvVars"] == ["SIGNOFF_TOKEN"]
