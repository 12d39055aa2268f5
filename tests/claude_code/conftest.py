"""A served signoff for the Claude Code hook tests: `signoff serve`'s process with the
agents file of docs/claude-code.md, once per module, and what the tests send it."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from adapters.claude_code.hook import approval_request, idempotency_key, read_pre_tool_use
from tests.clients.serving import AGENT_TOKEN, Server, server_env, signing_key

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "claude-code.md"


def page_block(language: str, marker: str, index: int = 0) -> str:
    """The `index`-th ``language`` block of docs/claude-code.md run by `marker`'s test."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.findall(
        rf"<!-- run: tests/claude_code/{marker} -->\n```{language}\n(.*?)^```", text, re.S | re.M
    )
    assert len(found) > index, f"no {language} block for {marker} in {PAGE.name}"
    return str(found[index])


def pre_tool_use(
    tool: str = "Bash", session: str | None = None, **tool_input: Any
) -> dict[str, Any]:
    """A PreToolUse hook input as Claude Code 2.1 sends it (a fresh session and tool use)."""
    return {
        "session_id": session or str(uuid.uuid4()),
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": "/work/project",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": tool_input or {"command": "git push origin main"},
        "tool_use_id": "toolu_" + uuid.uuid4().hex[:24],
    }


def approval_body(
    hook_input: dict[str, Any], agent: str = "claude-code"
) -> tuple[dict[str, Any], str]:
    """The ``POST /api/approvals`` body and idempotency key the hook sends for `hook_input`:
    sent with the hook's token, it answers the hook's own approval (never a second one)."""
    call = read_pre_tool_use(hook_input)
    request = approval_request(call, agent=agent)
    body: dict[str, Any] = {
        "agent": request.agent,
        "tool": request.tool,
        "arguments": request.arguments,
        "session_id": request.session_id,
    }
    if request.description is not None:
        body["description"] = request.description
    key = idempotency_key(call, agent)
    assert key is not None
    return body, key


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a hook process: no SIGNOFF_* settings or proxies of the caller."""
    drop = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_") and k not in drop}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`signoff serve` with the page's agents file."""
    key: Ed25519PrivateKey = signing_key()
    directory: Path = tmp_path_factory.mktemp("signoff")
    agents = directory / "claude-code.toml"
    agents.write_text(page_block("toml", "test_hook_command.py"), encoding="utf-8")
    served = Server(
        server_env(directory, key, SIGNOFF_AGENTS=str(agents)), directory / "server.log"
    )
    try:
        yield served
    finally:
        served.terminate()


class Asker:
    """The hook's own approval, asked again with its token: positive proof of which
    approval (and ticket) a waiting hook holds."""

    def __init__(self, server: Server, http: httpx.Client) -> None:
        self.server = server
        self.http = http

    def same_approval(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        body, key = approval_body(hook_input)
        response = self.http.post(
            "/api/approvals",
            json=body,
            headers={"Authorization": f"Bearer {AGENT_TOKEN}", "Idempotency-Key": key},
        )
        assert response.status_code in (200, 201), response.text
        return dict(response.json())

    def session(self, session_id: str) -> list[dict[str, Any]]:
        status, answer = self.server.call("GET", f"/api/approvals?session_id={session_id}")
        assert status == 200, answer
        return list(answer["approvals"])


@pytest.fixture
def asker(server: Server) -> Iterator[Asker]:
    with httpx.Client(base_url=server.url, timeout=30, trust_env=False) as http:
        yield Asker(server, http)


def output(stdout: str) -> dict[str, Any]:
    """The hook answer printed on stdout, checked for Claude Code's shape."""
    answer = json.loads(stdout)
    assert set(answer) == {"hookSpecificOutput"}
    inner = answer["hookSpecificOutput"]
    assert inner["hookEventName"] == "PreToolUse"
    assert inner["permissionDecision"] in ("allow", "deny", "ask", "defer")
    assert isinstance(inner["permissionDecisionReason"], str)
    return dict(inner)


def free_port_url() -> str:
    """The address of a port nothing listens on."""
    from tests.clients.serving import free_port

    return f"http://127.0.0.1:{free_port()}"
