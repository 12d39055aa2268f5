"""``signoff hook claude-code`` as Claude Code runs it: a real process reading the
PreToolUse JSON on stdin and asking a served `signoff serve` (with the agents file and
the command hook of docs/claude-code.md), its answer on stdout."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.claude_code.conftest import (
    ROOT,
    Asker,
    clean_env,
    free_port_url,
    output,
    page_block,
    pre_tool_use,
)
from tests.clients.serving import AGENT_TOKEN, STRANGER_TOKEN, Server

HOOK = [sys.executable, "-m", "bot", "hook", "claude-code"]


def start(
    server_url: str, hook_input: Any, *options: str, token: str = AGENT_TOKEN
) -> subprocess.Popen[str]:
    """The hook process, its input written and stdin closed, as Claude Code does."""
    process = subprocess.Popen(
        [*HOOK, *options],
        cwd=ROOT,
        env=clean_env(SIGNOFF_URL=server_url, SIGNOFF_TOKEN=token),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None
    process.stdin.write(hook_input if isinstance(hook_input, str) else json.dumps(hook_input))
    process.stdin.close()
    process.stdin = None  # written and closed: communicate() only reads now
    return process


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        stdout, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, stdout, stderr


def run_hook(
    server: Server, hook_input: Any, *options: str, token: str = AGENT_TOKEN
) -> tuple[int, str, str]:
    return finish(start(server.url, hook_input, *options, token=token))


def decided_while_waiting(
    server: Server, asker: Asker, hook_input: dict[str, Any], decision: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start the hook (waiting up to 60 s), decide its ticket, and read its answer."""
    process = start(server.url, hook_input, "--timeout", "60")
    try:
        approval = asker.same_approval(hook_input)
        assert approval["status"] == "pending", approval
        server.decide(approval["ticket_id"], decision)
    finally:
        code, stdout, stderr = finish(process)
    assert code == 0, stderr
    return output(stdout), approval


def test_a_rule_allows_read_at_once(server: Server, asker: Asker) -> None:
    hook_input = pre_tool_use("Read", file_path="/work/project/README.md")
    code, stdout, stderr = run_hook(server, hook_input)
    assert code == 0, stderr
    answer = output(stdout)
    assert answer["permissionDecision"] == "allow"
    assert "updatedInput" not in answer
    assert "rules" in answer["permissionDecisionReason"]
    (approval,) = asker.session(hook_input["session_id"])
    assert (approval["tool"], approval["status"], approval["basis"]) == ("Read", "allowed", "rule")


def test_a_person_allows_a_git_push(server: Server, asker: Asker) -> None:
    hook_input = pre_tool_use(command="git push origin main", description="Push the branch")
    answer, approval = decided_while_waiting(server, asker, hook_input, {"decision": "allow"})
    assert answer["permissionDecision"] == "allow", answer
    assert "updatedInput" not in answer
    assert "U-alice" in answer["permissionDecisionReason"]
    assert approval["approval_id"] in answer["permissionDecisionReason"]
    (only,) = asker.session(hook_input["session_id"])
    assert only["approval_id"] == approval["approval_id"]


def test_a_denial_reaches_claude_code_with_its_reason(server: Server, asker: Asker) -> None:
    hook_input = pre_tool_use(command="rm -rf build")
    answer, _ = decided_while_waiting(
        server, asker, hook_input, {"decision": "deny", "reason": "keep the build for now"}
    )
    assert answer["permissionDecision"] == "deny"
    assert "keep the build for now" in answer["permissionDecisionReason"]


def test_an_edit_becomes_updated_input(server: Server, asker: Asker) -> None:
    hook_input = pre_tool_use(command="git push --force origin main", description="Push")
    edited = {"command": "git push origin main", "description": "Push"}
    answer, _ = decided_while_waiting(
        server, asker, hook_input, {"decision": "allow", "args": edited}
    )
    assert answer["permissionDecision"] == "allow"
    assert answer["updatedInput"] == edited
    assert "changed arguments" in answer["permissionDecisionReason"]


def test_no_decision_in_time_defers_and_the_retry_gets_the_same_approval(
    server: Server, asker: Asker
) -> None:
    hook_input = pre_tool_use(command="git push origin release")
    code, stdout, stderr = run_hook(server, hook_input, "--timeout", "0", "--on-timeout", "defer")
    assert code == 0, stderr
    deferred = output(stdout)
    assert deferred["permissionDecision"] == "defer"
    (pending,) = asker.session(hook_input["session_id"])
    assert pending["status"] == "pending"
    assert pending["ticket_id"] in deferred["permissionDecisionReason"]
    assert "stays open" in deferred["permissionDecisionReason"]

    # Asked again and deferred again: still the same open ticket.
    code, stdout, stderr = run_hook(server, hook_input, "--timeout", "0", "--on-timeout", "defer")
    assert code == 0, stderr
    assert output(stdout)["permissionDecision"] == "defer"
    (still,) = asker.session(hook_input["session_id"])
    assert (still["status"], still["ticket_id"]) == ("pending", pending["ticket_id"])

    # Decided meanwhile: the resumed session's hook (same tool use) gets it at once.
    server.decide(pending["ticket_id"], {"decision": "allow"})
    code, stdout, stderr = run_hook(server, hook_input, "--timeout", "0")
    assert code == 0, stderr
    assert output(stdout)["permissionDecision"] == "allow"
    (same,) = asker.session(hook_input["session_id"])
    assert same["approval_id"] == pending["approval_id"]


def test_ask_on_timeout_withdraws_the_request(server: Server, asker: Asker) -> None:
    hook_input = pre_tool_use(command="git push origin hotfix")
    code, stdout, stderr = run_hook(server, hook_input, "--timeout", "0", "--on-timeout", "ask")
    assert code == 0, stderr
    answer = output(stdout)
    assert answer["permissionDecision"] == "ask"
    assert "withdrawn" in answer["permissionDecisionReason"]
    (withdrawn,) = asker.session(hook_input["session_id"])
    assert (withdrawn["status"], withdrawn["basis"]) == ("denied", "cancelled")
    assert "answered ask" in withdrawn["reason"]
    # Its ticket is voided: nobody can allow a call Claude Code no longer waits for.
    status, refused = server.call(
        "POST", f"/api/tickets/{withdrawn['ticket_id']}/decision", {"decision": "allow"}
    )
    assert status == 409, refused
    (after,) = asker.session(hook_input["session_id"])
    assert after["status"] == "denied"


def test_deny_on_timeout_withdraws_the_request(server: Server, asker: Asker) -> None:
    hook_input = pre_tool_use(command="rm -rf dist")
    code, stdout, stderr = run_hook(server, hook_input, "--timeout", "0", "--on-timeout", "deny")
    assert code == 0, stderr
    answer = output(stdout)
    assert answer["permissionDecision"] == "deny"
    assert "withdrawn" in answer["permissionDecisionReason"]
    (withdrawn,) = asker.session(hook_input["session_id"])
    assert (withdrawn["status"], withdrawn["basis"]) == ("denied", "cancelled")


def test_bad_input_is_refused_and_asks_nothing(server: Server, asker: Asker) -> None:
    session = "bad-input-session"
    wrong_event = {**pre_tool_use(session=session), "hook_event_name": "PostToolUse"}
    no_input = {k: v for k, v in pre_tool_use(session=session).items() if k != "tool_input"}
    for bad, says in (
        ("{not json", "not JSON"),
        ("", "no hook input"),
        ("[1, 2]", "JSON object"),
        (json.dumps(wrong_event), "PreToolUse only"),
        (json.dumps(no_input), "tool_input"),
    ):
        code, stdout, stderr = run_hook(server, bad)
        assert code == 2, (bad, stdout, stderr)
        assert stdout == ""
        assert says in stderr and "Traceback" not in stderr, stderr
    assert asker.session(session) == []


def test_an_unreachable_signoff_answers_ask() -> None:
    code, stdout, stderr = finish(start(free_port_url(), pre_tool_use(), "--give-up-after", "0.5"))
    assert code == 0, stderr
    answer = output(stdout)
    assert answer["permissionDecision"] == "ask"
    assert "could not be reached" in stderr


def test_a_refused_request_answers_deny(server: Server) -> None:
    code, stdout, stderr = run_hook(server, pre_tool_use(), token="not-a-token")
    assert code == 0, stderr
    answer = output(stdout)
    assert answer["permissionDecision"] == "deny"
    assert "401" in answer["permissionDecisionReason"] and "refused" in stderr


def test_a_strangers_hook_gets_its_own_approval_not_anothers(server: Server, asker: Asker) -> None:
    hook_input = pre_tool_use(command="git push origin main")
    ours = asker.same_approval(hook_input)
    server.decide(ours["ticket_id"], {"decision": "allow"})
    code, stdout, stderr = run_hook(server, hook_input, "--timeout", "0", token=STRANGER_TOKEN)
    assert code == 0, stderr
    assert output(stdout)["permissionDecision"] == "ask"
    approvals = asker.session(hook_input["session_id"])
    assert len(approvals) == 2
    assert {a["requested_by"] for a in approvals} == {"svc:billing-agent", "U-mallory"}


def test_the_pages_command_hook_runs_as_written(
    server: Server, asker: Asker, tmp_path: Path
) -> None:
    settings = json.loads(page_block("json", "test_hook_command.py"))
    (entry,) = settings["hooks"]["PreToolUse"]
    assert entry["matcher"] == "*"
    (command_hook,) = entry["hooks"]
    assert command_hook["type"] == "command" and command_hook["timeout"] == 600
    argv = shlex.split(command_hook["command"])
    assert argv[:3] == ["signoff", "hook", "claude-code"]
    timeout = float(argv[argv.index("--timeout") + 1])
    assert timeout < command_hook["timeout"]
    hook_input = pre_tool_use("Grep", pattern="TODO")
    code, stdout, stderr = run_hook(server, hook_input, *argv[3:])
    assert code == 0, stderr
    assert output(stdout)["permissionDecision"] == "allow"
