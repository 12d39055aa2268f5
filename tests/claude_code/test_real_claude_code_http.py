"""The real Claude Code CLI (npm ``@anthropic-ai/claude-code``, 2.1.x) with the HTTP hook
of docs/claude-code.md — ``"type": "http"`` to ``POST /claude-code/hook`` on a served
signoff, the bearer token taken from ``SIGNOFF_TOKEN`` through ``allowedEnvVars`` —
fully offline against the local fake of Anthropic's Messages API: a call the rules allow
runs at once; a call that asks stops the headless run (``tool_deferred``) and, once a
person allowed it with an edited command, ``claude -p --resume`` runs the edited command;
a denial reaches the model with its reason. Every hook is seen by the server: the
approvals it recorded are the proof the hook ran.

Runs when the CLI is installed (``CLAUDE_CODE_BIN``, else a ``claude`` on PATH); skipped
otherwise, except under CI.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from adapters.claude_code.route import PATH
from tests.claude_code.conftest import Asker, page_block
from tests.claude_code.fake_anthropic import FakeAnthropic
from tests.claude_code.realcli import fake, offline_env, requires_claude, run_claude
from tests.clients.serving import AGENT_TOKEN, Server

# CI installs it (.ci/run): there, a missing CLI fails the tests instead of skipping them.
pytestmark = [requires_claude, pytest.mark.timeout(240)]
__all__ = ["fake"]  # the fixture, used by name


def http_hook_settings(server: Server) -> dict[str, Any]:
    """The page's HTTP hook settings, pointed at `server`, answering ``defer`` at once
    when nobody has decided (a headless run then stops and is resumed later)."""
    settings: dict[str, Any] = json.loads(page_block("json", "test_hook_route.py"))
    (entry,) = settings["hooks"]["PreToolUse"]
    (hook,) = entry["hooks"]
    assert hook["type"] == "http"
    assert hook["headers"] == {"Authorization": "Bearer $SIGNOFF_TOKEN"}
    assert hook["allowedEnvVars"] == ["SIGNOFF_TOKEN"]
    page_url = urlsplit(hook["url"])
    assert page_url.path == PATH
    hook["url"] = f"{server.url}{PATH}?{urlencode({'timeout': 0, 'on_timeout': 'defer'})}"
    return settings


def project(tmp_path: Path, server: Server) -> Path:
    """A project whose ``.claude/settings.json`` holds the page's HTTP hook."""
    directory = tmp_path / "project"
    (directory / ".claude").mkdir(parents=True)
    settings = json.dumps(http_hook_settings(server))
    (directory / ".claude" / "settings.json").write_text(settings, encoding="utf-8")
    return directory


async def claude(server: Server, fake: FakeAnthropic, tmp_path: Path, *args: str) -> dict[str, Any]:
    """One headless ``claude -p`` run; its JSON result. Only the hook's token is in its
    environment: the Authorization header comes from it, or the server refuses."""
    env = offline_env(tmp_path, fake.url, SIGNOFF_TOKEN=AGENT_TOKEN)
    return await run_claude(*args, cwd=tmp_path / "project", env=env)


def tool_result(done: dict[str, Any]) -> dict[str, Any]:
    """The one tool result the fake model reported back (``RESULT [...]``)."""
    (result,) = json.loads(done["result"].removeprefix("RESULT "))
    return dict(result)


async def test_a_call_the_rules_allow_runs_and_the_server_recorded_it(
    server: Server, asker: Asker, fake: FakeAnthropic, tmp_path: Path
) -> None:
    project(tmp_path, server)
    # Claude Code itself would ask before a `touch` (and refuse, headless): the hook's
    # allow is what runs it.
    done = await claude(server, fake, tmp_path, "RUN<<touch allowed-by-rule>>")

    assert done["stop_reason"] == "end_turn", done
    result = tool_result(done)
    assert result.get("is_error") is not True, result
    assert (tmp_path / "project" / "allowed-by-rule").is_file()
    (approval,) = await asyncio.to_thread(asker.session, done["session_id"])
    assert (approval["tool"], approval["status"], approval["basis"]) == ("Bash", "allowed", "rule")
    assert approval["arguments"]["command"] == "touch allowed-by-rule"
    # Asked with the token of the header the hook filled in from SIGNOFF_TOKEN.
    assert approval["requested_by"] == "svc:billing-agent"


async def test_a_deferred_run_is_resumed_with_the_command_a_person_edited(
    server: Server, asker: Asker, fake: FakeAnthropic, tmp_path: Path
) -> None:
    project(tmp_path, server)
    first = await claude(server, fake, tmp_path, "RUN<<echo one && echo two>>")

    assert first["stop_reason"] == "tool_deferred", first
    assert first["deferred_tool_use"]["input"]["command"] == "echo one && echo two"
    session = first["session_id"]
    (pending,) = await asyncio.to_thread(asker.session, session)
    assert (pending["tool"], pending["status"]) == ("Bash", "pending")
    assert pending["arguments"]["command"] == "echo one && echo two"

    edited = {
        "command": "touch edited-by-a-person && echo edited-by-a-person",
        "description": "As asked",
    }
    await asyncio.to_thread(
        server.decide, pending["ticket_id"], {"decision": "allow", "args": edited}
    )
    resumed = await claude(server, fake, tmp_path, "--resume", session)

    assert resumed["stop_reason"] == "end_turn", resumed
    result = tool_result(resumed)
    assert result["content"].strip() == "edited-by-a-person"
    assert result.get("is_error") is not True
    assert (tmp_path / "project" / "edited-by-a-person").is_file()
    # Asked again on resume about the same tool use: the same approval, now allowed.
    (same,) = await asyncio.to_thread(asker.session, session)
    assert same["approval_id"] == pending["approval_id"]
    assert (same["status"], same["arguments"]) == ("allowed", edited)


async def test_a_denial_reaches_the_model_with_its_reason(
    server: Server, asker: Asker, fake: FakeAnthropic, tmp_path: Path
) -> None:
    project(tmp_path, server)
    first = await claude(server, fake, tmp_path, "RUN<<echo a; echo b>>")
    assert first["stop_reason"] == "tool_deferred", first
    (pending,) = await asyncio.to_thread(asker.session, first["session_id"])
    await asyncio.to_thread(
        server.decide, pending["ticket_id"], {"decision": "deny", "reason": "one echo is enough"}
    )

    resumed = await claude(server, fake, tmp_path, "--resume", first["session_id"])

    result = tool_result(resumed)
    assert result["is_error"] is True
    assert "one echo is enough" in json.dumps(result["content"])
    (denied,) = await asyncio.to_thread(asker.session, first["session_id"])
    assert (denied["status"], denied["reason"]) == ("denied", "one echo is enough")
