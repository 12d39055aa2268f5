"""Durable deferral: a hook that defers with ``resume=1`` leaves the session to signoff,
which resumes it once a person decides — allowed or denied — in a worker of
``signoff serve``, once, and never again after a crash (the resume is then uncertain).

The resume command is `fake_resume.py`, which records how it was started; the real
Claude Code CLI is resumed in `test_real_claude_code.py`.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.claude_code.conftest import pre_tool_use
from tests.clients.serving import (
    AGENT_TOKEN,
    STRANGER_TOKEN,
    Server,
    server_env,
    signing_key,
)

FAKE = Path(__file__).with_name("fake_resume.py")
T = TypeVar("T")


def agents_toml(work: Path, log: Path) -> str:
    command = json.dumps([sys.executable, str(FAKE), "--resume", "{session_id}"])
    return f"""\
[agents.claude-code]
external = true
approvals = {{ platform = "console" }}

[agents.claude-code.rules.Read]
permission = "allow"

[agents.claude-code.rules.Bash]
permission = "ask"
editable = ["command"]

[agents.claude-code.resume]
workdirs = ["{work}/*"]
command = {command}
timeout = 60
env = {{ RESUME_LOG = "{log}" }}

[agents.no-resume]
external = true
"""


class Bed:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.work = directory / "work"
        self.work.mkdir()
        self.log = directory / "resumes.jsonl"
        agents = directory / "claude-code.toml"
        agents.write_text(agents_toml(self.work, self.log), encoding="utf-8")
        self.env = server_env(directory, signing_key(), SIGNOFF_AGENTS=str(agents))
        self.server = Server(self.env, directory / "server.log")

    def restart(self) -> None:
        self.server = Server(self.env, self.directory / "server.log")

    def project(self, name: str) -> Path:
        found = self.work / name
        found.mkdir()
        return found

    def hook(
        self, hook_input: dict[str, Any], token: str = AGENT_TOKEN, **query: str
    ) -> httpx.Response:
        params = {"timeout": "0", "on_timeout": "defer", "resume": "1", **query}
        return httpx.post(
            f"{self.server.url}/claude-code/hook",
            params=params,
            json=hook_input,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
            trust_env=False,
        )

    def approvals(self, session: str) -> list[dict[str, Any]]:
        status, answer = self.server.call("GET", f"/api/approvals?session_id={session}")
        assert status == 200, answer
        return list(answer["approvals"])

    def resumes(self) -> list[dict[str, Any]]:
        text = self.log.read_text(encoding="utf-8") if self.log.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def resume_runs(self) -> list[dict[str, Any]]:
        status, answer = self.server.call("GET", "/api/runs?limit=100")
        assert status == 200, answer
        return [r for r in answer["runs"] if r["agent"] == "claude-code.resume"]


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Bed]:
    made = Bed(tmp_path)
    try:
        yield made
    finally:
        made.server.terminate()


def until(check: Callable[[], T | None], what: str, seconds: float = 60.0) -> T:
    ends = time.monotonic() + seconds
    pause = 0.02
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > ends:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def deferred_call(bed: Bed, project: Path, command: str) -> tuple[dict[str, Any], dict[str, Any]]:
    hook_input = {**pre_tool_use(command=command), "cwd": str(project)}
    response = bed.hook(hook_input)
    assert response.status_code == 200, response.text
    answer = response.json()["hookSpecificOutput"]
    assert answer["permissionDecision"] == "defer", answer
    assert "resumes this session" in answer["permissionDecisionReason"]
    (approval,) = bed.approvals(hook_input["session_id"])
    assert (approval["status"], approval["deferred"]) == ("pending", True)
    return hook_input, approval


def test_an_allowed_deferred_call_resumes_its_session_once(bed: Bed) -> None:
    project = bed.project("allowed")
    hook_input, approval = deferred_call(bed, project, "git push origin main")
    assert bed.resumes() == []  # nothing is resumed before the decision

    bed.server.decide(approval["ticket_id"], {"decision": "allow"})
    (resumed,) = until(bed.resumes, "the resume command")
    assert resumed["cwd"] == str(project)
    assert resumed["argv"] == ["--resume", hook_input["session_id"]]
    (run,) = until(
        lambda: [r for r in bed.resume_runs() if r["status"] == "done"], "the resume run's end"
    )
    assert "resumed ok" in (run["text"] or "")

    # The resumed session's hook asks about the same tool use: the decision, at once.
    again = bed.hook(hook_input).json()["hookSpecificOutput"]
    assert again["permissionDecision"] == "allow"
    assert len(bed.resumes()) == 1 and len(bed.resume_runs()) == 1


def test_a_denied_deferred_call_resumes_too_so_the_model_hears_why(bed: Bed) -> None:
    project = bed.project("denied")
    hook_input, approval = deferred_call(bed, project, "rm -rf build")
    bed.server.decide(approval["ticket_id"], {"decision": "deny", "reason": "keep build"})
    (resumed,) = until(bed.resumes, "the resume command")
    assert resumed["argv"][-1] == hook_input["session_id"]
    again = bed.hook(hook_input).json()["hookSpecificOutput"]
    assert (
        again["permissionDecision"] == "deny" and "keep build" in again["permissionDecisionReason"]
    )


def test_a_call_decided_in_time_is_not_resumed(bed: Bed) -> None:
    project = bed.project("in-time")
    # Allowed by a rule within the hook's wait: not deferred, so never resumed.
    quick = {**pre_tool_use("Read", file_path="/etc/hostname"), "cwd": str(project)}
    answer = bed.hook(quick).json()["hookSpecificOutput"]
    assert answer["permissionDecision"] == "allow"
    (allowed,) = bed.approvals(quick["session_id"])
    assert allowed["deferred"] is False
    # A deferred call decided after it, resumed: its resume is the only one.
    hook_input, approval = deferred_call(bed, project, "git push origin later")
    bed.server.decide(approval["ticket_id"], {"decision": "allow"})
    until(lambda: [r for r in bed.resume_runs() if r["status"] == "done"], "the resume run")
    assert [r["argv"][-1] for r in bed.resumes()] == [hook_input["session_id"]]


def test_a_resume_is_refused_where_it_may_not_run_and_nothing_is_asked(bed: Bed) -> None:
    outside = bed.directory / "elsewhere"
    outside.mkdir()
    cases: list[tuple[dict[str, Any], dict[str, str], int]] = [
        ({"cwd": str(outside)}, {}, 403),  # not under resume.workdirs
        ({"cwd": str(bed.work / "x" / ".." / "..")}, {}, 403),  # not normalised
        ({"cwd": "relative/dir"}, {}, 403),
        ({"session_id": "--dangerous"}, {}, 403),  # would read as an option
        ({}, {"agent": "no-resume"}, 403),  # the agent has no resume table
        ({}, {"on_timeout": "ask"}, 400),  # resume goes with defer
        ({}, {"resume": "yes"}, 400),
    ]
    for change, query, status in cases:
        hook_input = {**pre_tool_use(command="git push"), "cwd": str(bed.work / "p"), **change}
        response = bed.hook(hook_input, **query)
        assert response.status_code == status, (change, query, response.text)
        assert bed.approvals(hook_input["session_id"]) == []
    assert bed.server.tickets() == []


def test_a_stranger_cannot_defer_or_withdraw_anothers_approval(bed: Bed) -> None:
    project = bed.project("stranger")
    hook_input, approval = deferred_call(bed, project, "git push origin theirs")
    # The stranger's hook for the same input is its own approval, not the agent's.
    response = bed.hook(hook_input, token=STRANGER_TOKEN, on_timeout="deny", resume="0")
    assert response.status_code == 200, response.text
    found = {a["requested_by"]: a for a in bed.approvals(hook_input["session_id"])}
    theirs, mine = found["U-mallory"], found["svc:billing-agent"]
    assert theirs["approval_id"] != approval["approval_id"]
    assert (theirs["status"], theirs["basis"]) == ("denied", "cancelled")
    assert mine["approval_id"] == approval["approval_id"]
    assert (mine["status"], mine["deferred"]) == ("pending", True)
    assert mine["ticket_id"] in {t["ticket_id"] for t in bed.server.tickets()}


def test_a_crash_while_resuming_leaves_an_uncertain_call_not_a_second_resume(bed: Bed) -> None:
    project = bed.project("crash")
    (project / "hold").touch()
    hook_input, approval = deferred_call(bed, project, "git push origin crash")
    bed.server.decide(approval["ticket_id"], {"decision": "allow"})
    (started,) = until(bed.resumes, "the resume command to start")

    bed.server.process.send_signal(signal.SIGKILL)
    bed.server.process.wait(timeout=30)
    bed.server.terminate()
    (project / "hold").unlink()  # the orphaned resume ends on its own
    bed.restart()

    def uncertain() -> list[dict[str, Any]]:
        return [t for t in bed.server.tickets() if t.get("kind") == "uncertain"]

    (ticket,) = until(uncertain, "the uncertain resume ticket")
    assert (ticket["agent"], ticket["tool"]) == ("claude-code.resume", "resume_session")
    assert ticket["arguments"]["session_id"] == hook_input["session_id"]
    assert [r["pid"] for r in bed.resumes()] == [started["pid"]]


def test_the_docs_resume_table_is_valid(tmp_path: Path) -> None:
    """docs/claude-code.md's ``resume`` table loads as written."""
    from tests.claude_code.conftest import page_block

    agents = tmp_path / "agents.toml"
    agents.write_text(page_block("toml", "test_resume.py"), encoding="utf-8")
    from bot.agents_file import load_agents_file

    loaded = load_agents_file(agents)
    (config,) = loaded.resumes.values()
    assert config.command[:3] == ("claude", "-p", "--resume")
    assert config.refusal("/srv/ci/builds/job-1") is None
    assert config.refusal("/home/someone") is not None
