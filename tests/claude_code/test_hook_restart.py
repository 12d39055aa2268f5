"""A command hook waiting for a decision while ``signoff serve`` is killed (SIGKILL) and
started again on the same database: the hook reconnects with the same input, finds the
same approval, and answers the decision made after the restart — one approval, one card,
nothing lost or doubled."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.claude_code.conftest import output, page_block, pre_tool_use
from tests.claude_code.test_hook_command import finish, start
from tests.clients.serving import Server, server_env, signing_key


class Restartable:
    def __init__(self, directory: Path) -> None:
        agents = directory / "claude-code.toml"
        agents.write_text(page_block("toml", "test_hook_command.py"), encoding="utf-8")
        self.env = server_env(directory, signing_key(), SIGNOFF_AGENTS=str(agents))
        self.log = directory / "server.log"
        self.server = Server(self.env, self.log)

    def restart(self) -> None:
        self.server = Server(self.env, self.log)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Restartable]:
    made = Restartable(tmp_path)
    try:
        yield made
    finally:
        made.server.terminate()


def approvals(server: Server, session: str) -> list[dict[str, Any]]:
    status, answer = server.call("GET", f"/api/approvals?session_id={session}")
    assert status == 200, answer
    return list(answer["approvals"])


def test_a_waiting_hook_survives_a_restart_and_gets_the_decision(served: Restartable) -> None:
    hook_input = pre_tool_use(command="git push origin restart")
    session = hook_input["session_id"]
    process = start(served.server.url, hook_input, "--timeout", "120", "--give-up-after", "60")
    try:
        ends = time.monotonic() + 60
        while not approvals(served.server, session):
            assert time.monotonic() < ends, "the hook never asked"
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        (before,) = approvals(served.server, session)
        assert before["status"] == "pending"

        served.server.kill()
        served.restart()  # same database, same port: the hook's retries reach it again

        (after,) = approvals(served.server, session)
        assert (after["approval_id"], after["ticket_id"]) == (
            before["approval_id"],
            before["ticket_id"],
        )
        served.server.decide(before["ticket_id"], {"decision": "allow"})
    finally:
        code, stdout, stderr = finish(process)
    assert code == 0, stderr
    answer = output(stdout)
    assert answer["permissionDecision"] == "allow", answer
    assert before["approval_id"] in answer["permissionDecisionReason"]
    (only,) = approvals(served.server, session)
    assert (only["approval_id"], only["status"]) == (before["approval_id"], "allowed")
    tickets = [t for t in served.server.tickets() if t["run_id"] == before["approval_id"]]
    assert tickets == []
