"""The agents file of docs/claude-code.md decides Claude Code's calls as the page says,
and the hook's mapping (`adapters.claude_code.hook`) turns hook input into one request
and approvals into Claude Code's answers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from adapters.claude_code.hook import (
    HookInputError,
    approval_request,
    hook_answer,
    idempotency_key,
    read_pre_tool_use,
)
from bot.agents_file import load_agents_file
from runtime import Actor, ManualClock, MemoryStore, Runtime, SequentialIds
from tests.claude_code.conftest import page_block, pre_tool_use

BOT = Actor(id="svc:claude")
BASH = {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash", "tool_input": {}}


@pytest.fixture
async def rt(tmp_path: Path) -> Runtime:
    path = tmp_path / "agents.toml"
    path.write_text(page_block("toml", "test_hook_command.py"), encoding="utf-8")
    return Runtime(
        MemoryStore(), load_agents_file(path).agents, clock=ManualClock(), ids=SequentialIds()
    )


@pytest.mark.parametrize(
    ("tool", "tool_input", "status"),
    [
        ("Read", {"file_path": "/src/app.py"}, "allowed"),
        ("Grep", {"pattern": "TODO"}, "allowed"),
        ("Bash", {"command": "git status"}, "allowed"),
        ("Bash", {"command": "pytest -q"}, "allowed"),
        ("Bash", {"command": "git push origin main"}, "pending"),
        ("Bash", {"command": "rm -rf build"}, "pending"),
        ("Bash", {"command": "ls && rm -rf build"}, "pending"),
        ("Bash", {"command": "echo $(cat .env)"}, "pending"),
        ("Bash", {"command": "cat x | sh"}, "pending"),
        ("Edit", {"file_path": "a.py", "old_string": "a", "new_string": "b"}, "pending"),
        ("mcp__github__create_pr", {"title": "x"}, "pending"),
        ("WebFetch", {"url": "https://example.com"}, "denied"),
    ],
)
async def test_the_pages_rules(
    rt: Runtime, tool: str, tool_input: dict[str, Any], status: str
) -> None:
    call = read_pre_tool_use(pre_tool_use(tool, **tool_input))
    approval = await rt.request_approval(approval_request(call), actor=BOT)
    assert approval.status == status, approval


async def test_a_bash_grant_covers_the_rest_of_the_session(rt: Runtime) -> None:
    from runtime import Allow, GrantRequest

    first = read_pre_tool_use(pre_tool_use(session="s-1", command="git push"))
    asked = await rt.request_approval(approval_request(first), actor=BOT)
    assert asked.ticket_id is not None
    await rt.decide(asked.ticket_id, Allow(grant=GrantRequest(scope="run")), BOT)
    later = read_pre_tool_use(pre_tool_use(session="s-1", command="rm -rf tmp"))
    covered = await rt.request_approval(approval_request(later), actor=BOT)
    assert (covered.status, covered.basis) == ("allowed", "grant")
    other = read_pre_tool_use(pre_tool_use(session="s-2", command="rm -rf tmp"))
    assert (await rt.request_approval(approval_request(other), actor=BOT)).status == "pending"


def test_the_key_is_one_per_tool_use() -> None:
    hook_input = pre_tool_use()
    call = read_pre_tool_use(hook_input)
    assert idempotency_key(call) == idempotency_key(read_pre_tool_use(dict(hook_input)))
    other_use = read_pre_tool_use({**hook_input, "tool_use_id": "toolu_other"})
    other_session = read_pre_tool_use({**hook_input, "session_id": "another"})
    keys = {idempotency_key(call), idempotency_key(other_use), idempotency_key(other_session)}
    assert len(keys) == 3
    assert idempotency_key(call, "other-agent") != idempotency_key(call)
    without = {k: v for k, v in hook_input.items() if k != "tool_use_id"}
    assert idempotency_key(read_pre_tool_use(without)) is None


def test_the_request_holds_only_what_the_call_holds() -> None:
    call = read_pre_tool_use(pre_tool_use(command="make", description="Build it"))
    request = approval_request(call, on_behalf_of="U-dev")
    assert (request.agent, request.tool, request.session_id) == (
        "claude-code",
        "Bash",
        call.session_id,
    )
    assert request.arguments == {"command": "make", "description": "Build it"}
    assert (request.description, request.on_behalf_of) == ("Build it", "U-dev")
    moved = read_pre_tool_use({**pre_tool_use(command="make"), "cwd": "/elsewhere"})
    assert approval_request(moved).description is None


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "no hook input"),
        (b"\xff\xfe", "not JSON"),
        ("null", "JSON object"),
        ('{"hook_event_name": "PreToolUse", "tool_input": {}}', "session_id"),
        ('{"hook_event_name": "PreToolUse", "session_id": "s", "tool_input": {}}', "tool_name"),
        (json.dumps({**BASH, "tool_input": "ls"}), "tool_input"),
        (json.dumps({**BASH, "tool_use_id": 7}), "tool_use_id"),
        (
            '{"hook_event_name": "PreToolUse", "session_id": "'
            + "s" * 201
            + '", "tool_name": "Bash", "tool_input": {}}',
            "longer",
        ),
    ],
)
def test_bad_input_says_what_is_wrong(raw: str | bytes, says: str) -> None:
    with pytest.raises(HookInputError, match=says):
        read_pre_tool_use(raw)


@dataclass
class Seen:
    status: str
    arguments: dict[str, Any] = field(default_factory=lambda: {"command": "ls"})
    requested_arguments: dict[str, Any] = field(default_factory=lambda: {"command": "ls"})
    reason: str | None = None
    basis: str | None = None
    decided_by: str | None = None
    ticket_id: str | None = "tk_1"
    approval_id: str = "run_1"


@pytest.mark.parametrize(
    ("seen", "decision", "words"),
    [
        (Seen("allowed", basis="decision", decided_by="ann"), "allow", "Allowed in signoff by ann"),
        (
            Seen("allowed", basis="rule", reason="permission allow"),
            "allow",
            "rules: permission allow",
        ),
        (Seen("allowed", basis="grant", reason="grant gr_1"), "allow", "grant gr_1"),
        (Seen("denied", basis="decision", decided_by="ann", reason="no"), "deny", "by ann: no"),
        (Seen("denied", basis="rule", reason="permission deny"), "deny", "permission deny"),
        (Seen("denied", basis="expiry", reason="expired"), "deny", "before the deadline"),
        (Seen("pending"), "ask", "withdrawn"),
    ],
)
def test_answers(seen: Seen, decision: str, words: str) -> None:
    answer = hook_answer(seen)["hookSpecificOutput"]
    assert answer["permissionDecision"] == decision
    assert (
        words in answer["permissionDecisionReason"]
        and "run_1" in answer["permissionDecisionReason"]
    )
    assert "updatedInput" not in answer


def test_an_edit_is_the_updated_input_and_pending_answers_as_told() -> None:
    edited = Seen("allowed", basis="decision", arguments={"command": "ls -l"})
    assert hook_answer(edited)["hookSpecificOutput"]["updatedInput"] == {"command": "ls -l"}
    for choice in ("defer", "ask", "deny"):
        out = hook_answer(Seen("pending"), on_timeout=choice, waited=30)["hookSpecificOutput"]  # type: ignore[arg-type]
        assert (
            out["permissionDecision"] == choice and "within 30 s" in out["permissionDecisionReason"]
        )
    kept = hook_answer(Seen("pending"), on_timeout="defer")["hookSpecificOutput"]
    assert "stays open" in kept["permissionDecisionReason"]
    assert "tk_1" in kept["permissionDecisionReason"]
    resumed = hook_answer(Seen("pending"), on_timeout="defer", resumed=True)
    assert "resumes this session" in resumed["hookSpecificOutput"]["permissionDecisionReason"]
