"""Claude Code's permission prompt tool (``approve``), over both transports of a served
signoff: ``/claude-code/mcp`` on ``signoff serve`` (Streamable HTTP) and the
``signoff permission-prompt`` command (stdio, over the approvals API), called with the
official ``mcp`` SDK client the way Claude Code 2.1 calls it. Allowed calls answer
``allow`` with the arguments to run with, denied ones ``deny`` with the reason, and a
call nobody decided in time is denied with its ticket left open."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from adapters.claude_code.permission_prompt import PATH, TOOL
from tests.claude_code.conftest import ROOT, Asker, clean_env, free_port_url
from tests.clients.serving import AGENT_TOKEN, OPERATOR_TOKEN, STRANGER_TOKEN, Server

pytestmark = pytest.mark.timeout(120)


@contextlib.asynccontextmanager
async def _streams(read: Any, write: Any) -> AsyncIterator[Any]:
    yield read, write


class Prompt:
    """The permission prompt tool of the served signoff over one transport."""

    def __init__(self, server: Server, transport: str) -> None:
        self.server = server
        self.transport = transport

    @contextlib.asynccontextmanager
    async def client(
        self, token: str = AGENT_TOKEN, *, session: str | None = None, wait: float = 60
    ) -> AsyncIterator[Client]:
        """An MCP client of the tool, asking as `token`; calls wait up to `wait` s."""
        if self.transport == "stdio":
            env = clean_env(SIGNOFF_URL=self.server.url, SIGNOFF_TOKEN=token)
            if session is not None:
                env["CLAUDE_CODE_SESSION_ID"] = session
            command = StdioServerParameters(
                command=sys.executable,
                args=["-m", "bot", "permission-prompt", "--timeout", f"{wait:g}"],
                env=env,
                cwd=str(ROOT),
            )
            async with Client(command) as client:
                yield client
            return
        headers = {"Authorization": f"Bearer {token}"}
        if session is not None:
            headers["Signoff-Session"] = session
        url = f"{self.server.url}{PATH}?timeout={wait:g}"
        async with (
            httpx2.AsyncClient(
                headers=headers, timeout=httpx2.Timeout(30.0, read=90.0), trust_env=False
            ) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            Client(_streams(read, write)) as client,
        ):
            yield client


@pytest.fixture(params=["http", "stdio"])
def prompt(request: pytest.FixtureRequest, server: Server) -> Prompt:
    return Prompt(server, str(request.param))


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30, trust_env=False) as http:
        yield http


def text_of(result: mcp_types.CallToolResult) -> str:
    assert not result.is_error, result
    (block,) = result.content
    assert isinstance(block, mcp_types.TextContent)
    return block.text


async def ask(
    client: Client,
    tool_name: str,
    tool_input: dict[str, Any],
    tool_use_id: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """One call as Claude Code makes it; the answer it reads."""
    arguments: dict[str, Any] = {"tool_name": tool_name, "input": tool_input}
    if tool_use_id is not None:
        arguments["tool_use_id"] = tool_use_id
    answer = json.loads(text_of(await client.call_tool(TOOL, arguments, **options)))
    assert answer["behavior"] in ("allow", "deny"), answer
    if answer["behavior"] == "allow":
        assert set(answer) == {"behavior", "updatedInput"}
    else:
        assert set(answer) == {"behavior", "message"} and isinstance(answer["message"], str)
    return dict(answer)


def tool_use() -> str:
    return "toolu_" + uuid.uuid4().hex[:24]


def approvals_of(api: httpx.Client, command: str, token: str = AGENT_TOKEN) -> list[dict[str, Any]]:
    """The approvals `token` sees whose Bash command is `command`."""
    response = api.get(
        "/api/approvals", params={"limit": 100}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text
    return [
        a
        for a in response.json()["approvals"]
        if a["requested_arguments"].get("command") == command
    ]


async def pending(api: httpx.Client, command: str) -> dict[str, Any]:
    """The pending approval of `command`, once the waiting call made it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = await asyncio.to_thread(approvals_of, api, command)
        if found and found[0]["ticket_id"]:  # its ticket opens right after the approval
            (approval,) = found
            assert approval["status"] == "pending", approval
            return approval
        await asyncio.sleep(0.1)
    raise AssertionError(f"no approval of {command!r} within 60 s")


async def decided_while_waiting(
    prompt: Prompt, api: httpx.Client, command: str, decision: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ask about ``Bash`` `command`, decide its ticket while the call waits; the answer
    and the approval."""
    tool_input = {"command": command, "description": "As asked"}
    async with prompt.client() as client:
        waiting = asyncio.ensure_future(ask(client, "Bash", tool_input, tool_use()))
        try:
            approval = await pending(api, command)
            await asyncio.to_thread(prompt.server.decide, approval["ticket_id"], decision)
            return await asyncio.wait_for(waiting, 60), approval
        finally:
            if not waiting.done():
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)


def strangers_statuses(api: httpx.Client, approval: dict[str, Any]) -> tuple[int, int]:
    """What the stranger's token gets reading `approval` and deciding its ticket."""
    stranger = {"Authorization": f"Bearer {STRANGER_TOKEN}"}
    seen = api.get(f"/api/approvals/{approval['approval_id']}", headers=stranger)
    decided = api.post(
        f"/api/tickets/{approval['ticket_id']}/decision",
        json={"decision": "allow"},
        headers=stranger,
    )
    return seen.status_code, decided.status_code


def unique(command: str) -> str:
    return f"{command} {uuid.uuid4().hex[:8]}"


async def test_the_tool_is_listed_with_the_fields_claude_code_sends(prompt: Prompt) -> None:
    async with prompt.client() as client:
        listed = await client.list_tools()
    (tool,) = listed.tools
    assert tool.name == "approve"
    assert set(tool.input_schema["properties"]) == {"tool_name", "input", "tool_use_id"}
    assert tool.input_schema["required"] == ["tool_name", "input"]


async def test_calls_the_rules_decide_are_answered_at_once(prompt: Prompt) -> None:
    async with prompt.client(wait=0) as client:
        read = await ask(client, "Read", {"file_path": "/etc/hosts"}, tool_use())
        fetch = await ask(client, "WebFetch", {"url": "https://x.test"}, tool_use())
    assert read == {"behavior": "allow", "updatedInput": {"file_path": "/etc/hosts"}}
    assert fetch["behavior"] == "deny"
    assert fetch["message"].startswith("Denied by signoff")


async def test_allowed_while_waiting_runs_the_input_as_sent(
    prompt: Prompt, api: httpx.Client
) -> None:
    command = unique("git push origin main")
    answer, approval = await decided_while_waiting(prompt, api, command, {"decision": "allow"})
    assert answer == {
        "behavior": "allow",
        "updatedInput": {"command": command, "description": "As asked"},
    }
    (after,) = approvals_of(api, command)
    assert after["approval_id"] == approval["approval_id"] and after["status"] == "allowed"


async def test_an_edit_is_the_updated_input(prompt: Prompt, api: httpx.Client) -> None:
    command = unique("git push origin main")
    edited = {"command": "echo pushed-after-sign-off", "description": "As asked"}
    answer, _ = await decided_while_waiting(
        prompt, api, command, {"decision": "allow", "args": edited}
    )
    assert answer == {"behavior": "allow", "updatedInput": edited}


async def test_a_denial_carries_its_reason(prompt: Prompt, api: httpx.Client) -> None:
    command = unique("rm -rf build")
    answer, approval = await decided_while_waiting(
        prompt, api, command, {"decision": "deny", "reason": "keep build/"}
    )
    assert answer["behavior"] == "deny"
    assert "keep build/" in answer["message"]
    assert approval["approval_id"] in answer["message"]


async def test_no_decision_in_time_is_a_denial_and_the_ticket_stays_open(
    prompt: Prompt, api: httpx.Client
) -> None:
    command = unique("git push origin main")
    tool_input = {"command": command, "description": "As asked"}
    call = tool_use()
    async with prompt.client(wait=0) as client:
        first = await ask(client, "Bash", tool_input, call)
        again = await ask(client, "Bash", tool_input, call)
    (approval,) = approvals_of(api, command)  # the same tool use asked twice: one approval
    assert approval["status"] == "pending"
    for answer in (first, again):
        assert answer["behavior"] == "deny"
        assert "stays open for a person to decide" in answer["message"]
        assert approval["ticket_id"] in answer["message"]
        assert approval["approval_id"] in answer["message"]
    open_tickets = await asyncio.to_thread(prompt.server.tickets)
    assert approval["ticket_id"] in {t["ticket_id"] for t in open_tickets}
    # Decided meanwhile: the same tool use asked again gets the decision at once.
    await asyncio.to_thread(prompt.server.decide, approval["ticket_id"], {"decision": "allow"})
    async with prompt.client(wait=0) as client:
        decided = await ask(client, "Bash", tool_input, call)
    assert decided == {"behavior": "allow", "updatedInput": tool_input}
    assert len(approvals_of(api, command)) == 1


async def test_malformed_calls_are_protocol_errors_and_ask_nothing(
    prompt: Prompt, api: httpx.Client
) -> None:
    command = unique("git push origin main")
    bad: list[dict[str, Any]] = [
        {"input": {"command": command}},
        {"tool_name": "Bash"},
        {"tool_name": "Bash", "input": command},
        {"tool_name": "", "input": {"command": command}},
        {"tool_name": ["Bash"], "input": {"command": command}},
        {"tool_name": "Bash", "input": {"command": command}, "tool_use_id": 7},
        {"tool_name": "Bash", "input": {"command": command}, "extra": True},
        {"tool_name": "B" * 201, "input": {"command": command}},
    ]
    async with prompt.client(wait=0) as client:
        for arguments in bad:
            with pytest.raises(MCPError) as caught:
                await client.call_tool(TOOL, arguments)
            assert caught.value.code == mcp_types.INVALID_PARAMS, arguments
        with pytest.raises(MCPError):
            await client.call_tool("deploy", {"tool_name": "Bash", "input": {"command": command}})
    assert approvals_of(api, command) == []
    assert approvals_of(api, command, OPERATOR_TOKEN) == []


async def test_a_stranger_can_neither_read_nor_decide_nor_reuse_anothers_call(
    prompt: Prompt, api: httpx.Client
) -> None:
    command = unique("git push origin main")
    tool_input = {"command": command, "description": "As asked"}
    call = tool_use()
    async with prompt.client(wait=0) as client:
        mine = await ask(client, "Bash", tool_input, call)
    (approval,) = approvals_of(api, command)
    assert mine["behavior"] == "deny" and approval["approval_id"] in mine["message"]
    assert await asyncio.to_thread(strangers_statuses, api, approval) == (404, 404)
    # The same tool use id and input from the stranger's token: an approval of their own.
    async with prompt.client(STRANGER_TOKEN, wait=0) as client:
        theirs = await ask(client, "Bash", tool_input, call)
    assert theirs["behavior"] == "deny" and approval["approval_id"] not in theirs["message"]
    (own,) = approvals_of(api, command, STRANGER_TOKEN)
    assert own["approval_id"] != approval["approval_id"] and own["requester"] == "U-mallory"
    (still,) = approvals_of(api, command)
    assert still["status"] == "pending"


async def test_calls_in_a_session_are_matched_by_session_and_tool_use(
    prompt: Prompt, api: httpx.Client, asker: Asker
) -> None:
    session = str(uuid.uuid4())
    command = unique("git push origin main")
    tool_input = {"command": command, "description": "As asked"}
    call = tool_use()
    async with prompt.client(session=session, wait=0) as client:
        first = await ask(client, "Bash", tool_input, call)
    async with prompt.client(session=session, wait=0) as client:  # Claude Code again
        again = await ask(client, "Bash", tool_input, call)
    (approval,) = await asyncio.to_thread(asker.session, session)
    assert approval["session_id"] == session
    assert approval["approval_id"] in first["message"]
    assert approval["approval_id"] in again["message"]
    async with prompt.client(session=str(uuid.uuid4()), wait=0) as client:
        elsewhere = await ask(client, "Bash", tool_input, call)
    assert approval["approval_id"] not in elsewhere["message"]
    assert len(approvals_of(api, command)) == 2


async def test_the_http_endpoint_needs_a_valid_token_and_sound_options(server: Server) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "claude-code", "version": "2.1.197"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=server.url, timeout=30, trust_env=False) as http:
        missing = await http.post(PATH, json=initialize, headers=headers)
        wrong = await http.post(
            PATH, json=initialize, headers={**headers, "Authorization": "Bearer not-a-token"}
        )
        bearer = {**headers, "Authorization": f"Bearer {AGENT_TOKEN}"}
        bad_timeout = await http.post(
            PATH, params={"timeout": "forever"}, json=initialize, headers=bearer
        )
        someone_else = await http.post(
            PATH, params={"on_behalf_of": "U-alice"}, json=initialize, headers=bearer
        )
        fine = await http.post(PATH, json=initialize, headers=bearer)
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="signoff"'
    assert bad_timeout.status_code == 400 and "timeout" in bad_timeout.json()["message"]
    assert someone_else.status_code == 403
    assert fine.status_code == 200, fine.text


async def test_the_command_denies_when_signoff_cannot_be_reached() -> None:
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "permission-prompt", "--give-up-after", "0"],
        env=clean_env(SIGNOFF_URL=free_port_url(), SIGNOFF_TOKEN=AGENT_TOKEN),
        cwd=str(ROOT),
    )
    async with Client(command) as client:
        unreachable = await ask(client, "Bash", {"command": "git push"}, tool_use())
    assert unreachable["behavior"] == "deny"
    assert unreachable["message"].startswith("signoff could not be reached")


async def test_the_command_denies_what_signoff_refuses(server: Server) -> None:
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "permission-prompt", "--on-behalf-of", "U-alice", "--timeout", "0"],
        env=clean_env(SIGNOFF_URL=server.url, SIGNOFF_TOKEN=AGENT_TOKEN),
        cwd=str(ROOT),
    )
    async with Client(command) as client:
        refused = await ask(client, "Bash", {"command": "ls"}, tool_use())
    assert refused["behavior"] == "deny"
    assert refused["message"].startswith("signoff refused to ask about this call")
    assert "U-alice" in refused["message"]
