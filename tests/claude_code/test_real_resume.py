"""Durable deferral with the real Claude Code CLI: a headless ``claude -p`` run whose
command hook defers with ``--resume`` ends at once (``tool_deferred``); once a person
allows the call with an edited command, signoff itself runs ``claude -p --resume`` in a
worker of ``signoff serve``, and the resumed session runs the edited command and finishes.
Fully offline, against the local fake of Anthropic's Messages API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.claude_code.conftest import ROOT
from tests.claude_code.fake_anthropic import FakeAnthropic, tool_results
from tests.claude_code.realcli import CLAUDE, fake, offline_env, requires_claude
from tests.claude_code.test_real_claude_code import claude, hook_inputs
from tests.claude_code.test_resume import until
from tests.clients.serving import AGENT_TOKEN, Server, server_env, signing_key

__all__ = ["fake"]  # the fixture, used by name

pytestmark = requires_claude


def claude_env(tmp_path: Path, fake_url: str, signoff_url: str) -> dict[str, str]:
    return offline_env(
        tmp_path,
        fake_url,
        SIGNOFF_URL=signoff_url,
        SIGNOFF_TOKEN=AGENT_TOKEN,
        PYTHONPATH=str(ROOT),
    )


def toml_table(values: dict[str, str]) -> str:
    """`values` as a TOML inline table (JSON strings are TOML basic strings)."""
    return "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in values.items()) + " }"


@pytest.fixture
async def resuming(tmp_path: Path, fake: FakeAnthropic) -> AsyncIterator[Server]:
    """`signoff serve` whose claude-code agent resumes sessions under `tmp_path` with the
    real CLI, in the same offline environment as the test's own runs."""
    assert CLAUDE is not None
    key = signing_key()
    env = server_env(tmp_path, key)
    url = f"http://127.0.0.1:{env['SIGNOFF_PORT']}"
    resume_env = claude_env(tmp_path, fake.url, url)
    agents = tmp_path / "claude-code.toml"
    agents.write_text(
        f"""\
[agents.claude-code]
external = true

[agents.claude-code.rules.Bash]
permission = "ask"
editable = ["command"]

[agents.claude-code.resume]
workdirs = [{json.dumps(str(tmp_path) + "/*")}]
command = {json.dumps([CLAUDE, "-p", "--resume", "{session_id}", "--output-format", "json"])}
timeout = 120
env = {toml_table(resume_env)}
""",
        encoding="utf-8",
    )
    env["SIGNOFF_AGENTS"] = str(agents)
    served = await asyncio.to_thread(Server, env, tmp_path / "server.log")
    try:
        yield served
    finally:
        await asyncio.to_thread(served.terminate)


def project(tmp_path: Path) -> Path:
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
                            "--timeout 0 --on-timeout defer --resume",
                            "timeout": 600,
                        }
                    ],
                }
            ]
        }
    }
    (directory / ".claude" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return directory


def approvals(server: Server, session: str) -> list[dict[str, Any]]:
    status, answer = server.call("GET", f"/api/approvals?session_id={session}")
    assert status == 200, answer
    return list(answer["approvals"])


async def test_signoff_resumes_a_deferred_session_after_the_decision(
    resuming: Server, fake: FakeAnthropic, tmp_path: Path
) -> None:
    project(tmp_path)
    first = await claude(resuming, fake, tmp_path, "RUN<<git push origin main>>")
    assert first["stop_reason"] == "tool_deferred", first
    session = first["session_id"]
    (pending,) = await asyncio.to_thread(approvals, resuming, session)
    assert (pending["status"], pending["deferred"]) == ("pending", True)
    assert len(fake.requests) == 1  # the run ended: nothing waits for the decision

    edited = {"command": "echo resumed-by-signoff", "description": "As asked"}
    await asyncio.to_thread(
        resuming.decide, pending["ticket_id"], {"decision": "allow", "args": edited}
    )

    def finished() -> list[dict[str, Any]]:
        status, answer = resuming.call("GET", "/api/runs?limit=50")
        assert status == 200, answer
        return [
            r
            for r in answer["runs"]
            if r["agent"] == "claude-code.resume" and r["status"] in ("done", "failed")
        ]

    (run,) = await asyncio.to_thread(until, finished, "the resume run", 120)
    assert run["status"] == "done", run
    assert "end_turn" in (run["text"] or "") and "resumed-by-signoff" in (run["text"] or "")
    # The resumed session asked its hook again (the same approval) and ran the edit.
    assert len(hook_inputs(tmp_path)) == 2
    (result,) = tool_results(fake.requests[-1])
    assert "resumed-by-signoff" in json.dumps(result["content"])
    (same,) = await asyncio.to_thread(approvals, resuming, session)
    assert (same["approval_id"], same["status"]) == (pending["approval_id"], "allowed")
