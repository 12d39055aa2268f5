"""The real Claude Code CLI (npm ``@anthropic-ai/claude-code``, 2.1.x) asks a served
signoff through the command hook of docs/claude-code.md's shape, fully offline against a
local fake of Anthropic's Messages API: a headless run defers while nobody has decided,
and ``claude -p --resume`` after the decision runs the call with the approver's edited
command, or hears the denial's reason.

Runs when the CLI is installed: ``CLAUDE_CODE_BIN`` names its binary (e.g.
``node_modules/@anthropic-ai/claude-code-linux-x64/claude`` after ``npm install
@anthropic-ai/claude-code@2.1.197``, as `.ci/run` does), else a ``claude`` on PATH;
skipped otherwise, except under CI.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.claude_code.conftest import ROOT, Asker
from tests.claude_code.fake_anthropic import FakeAnthropic
from tests.claude_code.realcli import fake, offline_env, requires_claude, run_claude
from tests.clients.serving import AGENT_TOKEN, Server

pytestmark = requires_claude
__all__ = ["fake"]  # the fixture, used by name


def project(tmp_path: Path) -> Path:
    """A project whose settings register the hook; it records its input for the test."""
    directory = tmp_path / "project"
    (directory / ".claude").mkdir(parents=True)
    seen = tmp_path / "hook-inputs.jsonl"
    settings = {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "*",
                    "hooks": [
                        {
                            "type": "command",
                            "command": f"tee -a {seen} | signoff hook claude-code "
                            "--timeout 0 --on-timeout defer",
                            "timeout": 600,
                        }
                    ],
                }
            ]
        }
    }
    (directory / ".claude" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return directory


async def claude(server: Server, fake: FakeAnthropic, tmp_path: Path, *args: str) -> dict[str, Any]:
    """One headless ``claude -p`` run; its JSON result."""
    env = offline_env(
        tmp_path,
        fake.url,
        SIGNOFF_URL=server.url,
        SIGNOFF_TOKEN=AGENT_TOKEN,
        PYTHONPATH=str(ROOT),
    )
    return await run_claude(*args, cwd=tmp_path / "project", env=env, seconds=90)


def hook_inputs(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "hook-inputs.jsonl"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_a_deferred_run_is_resumed_with_the_edited_command(
    server: Server, asker: Asker, fake: FakeAnthropic, tmp_path: Path
) -> None:
    project(tmp_path)
    first = await claude(server, fake, tmp_path, "RUN<<git push origin main>>")
    assert first["stop_reason"] == "tool_deferred", first
    assert first["deferred_tool_use"]["input"]["command"] == "git push origin main"
    (asked,) = hook_inputs(tmp_path)
    assert asked["hook_event_name"] == "PreToolUse" and asked["tool_name"] == "Bash"
    session = first["session_id"]
    assert asked["session_id"] == session
    (pending,) = await asyncio.to_thread(asker.session, session)
    assert pending["status"] == "pending"

    edited = {"command": "echo pushed-after-sign-off", "description": "As asked"}
    await asyncio.to_thread(
        server.decide, pending["ticket_id"], {"decision": "allow", "args": edited}
    )
    resumed = await claude(server, fake, tmp_path, "--resume", session)
    assert resumed["stop_reason"] == "end_turn", resumed
    (result,) = json.loads(resumed["result"].removeprefix("RESULT "))
    assert result["content"].strip() == "pushed-after-sign-off"
    assert result.get("is_error") is not True
    assert len(hook_inputs(tmp_path)) == 2  # asked again on resume: the same approval
    (same,) = await asyncio.to_thread(asker.session, session)
    assert same["approval_id"] == pending["approval_id"] and same["status"] == "allowed"


async def test_a_denial_reaches_the_model_with_its_reason(
    server: Server, asker: Asker, fake: FakeAnthropic, tmp_path: Path
) -> None:
    project(tmp_path)
    first = await claude(server, fake, tmp_path, "RUN<<rm -rf build>>")
    assert first["stop_reason"] == "tool_deferred", first
    (pending,) = await asyncio.to_thread(asker.session, first["session_id"])
    await asyncio.to_thread(
        server.decide, pending["ticket_id"], {"decision": "deny", "reason": "keep build/"}
    )
    resumed = await claude(server, fake, tmp_path, "--resume", first["session_id"])
    (result,) = json.loads(resumed["result"].removeprefix("RESULT "))
    assert result["is_error"] is True
    assert "keep build/" in json.dumps(result["content"])


async def test_a_call_the_rules_allow_runs_at_once(
    server: Server, fake: FakeAnthropic, tmp_path: Path
) -> None:
    project(tmp_path)
    done = await claude(server, fake, tmp_path, "RUN<<echo allowed-by-rule>>")
    assert done["stop_reason"] == "end_turn", done
    (result,) = json.loads(done["result"].removeprefix("RESULT "))
    assert result["content"].strip() == "allowed-by-rule"
    assert len(hook_inputs(tmp_path)) == 1
