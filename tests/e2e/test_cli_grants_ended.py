"""``signoff grants list`` shows a run grant whose run finished as ended, and refuses to
revoke it (a real subprocess against a SQLite file, the helpers of `test_cli`)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_cli import REFUND, Env


def test_a_run_grant_reads_ended_once_its_run_is_done(tmp_path: Path) -> None:
    env = Env(tmp_path)
    started = env.start(REFUND)["refund"]
    ticket = started["tickets"][0]
    done = env.signoff("approve", ticket, "--grant", "run")
    assert done.code == 0, done.err
    assert [r["status"] for r in env.runs()] == ["done"]

    assert env.signoff("grants", "list").out.strip() == "no active grants"
    listed = env.signoff("grants", "list", "--all", "--json")
    assert listed.code == 0, listed.err
    [grant] = json.loads(listed.out)
    assert (grant["state"], grant["run_id"]) == ("ended", started["run"])
    table = env.signoff("grants", "list", "--all")
    assert "ended with its run" in table.out and "active" not in table.out

    refused = env.signoff("grants", "revoke", grant["grant_id"])
    assert refused.code == 5
    assert "already ended with its run" in refused.error_line()
    [after] = json.loads(env.signoff("grants", "list", "--all", "--json").out)
    assert after["revoked_at"] is None
