"""Crash tests of the parent/child handover: SIGKILL a real worker at each named point.

Each scenario runs `tests/crash/delegation_worker.py` in subprocesses sharing one database
(SQLite file or PostgreSQL) and one side-effect ledger. The first process dies by SIGKILL
at the named point; a fresh one recovers once the dead worker's leases expired; where the
run still waits on billing's request, a third approves it. Then the database must hold
exactly one parent and one child (a recovered parent reattaches by its task key), the
refund must have run exactly once, and the parent must have finished with the child's
answer as its delegating call's result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from places import Place

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("delegation_worker.py")
ANSWER = "ops: billing: refunded 250.0 on A1"

# Points of the `start` phase (before anyone decided): (point, how many times reached).
BEFORE_DECISION = [
    ("child_created", 1),  # parent's call waits on the child; the child not driven yet
    ("model_call_committed", 2),  # the child's first turn (its refund call) is committed
    ("child_parked", 1),  # the child parked on its ticket; the parent still running
    ("parent_parked", 1),  # both parked, the call that started them not returned
]
# Points after the decision on the child's ticket: (point, how many times reached).
AFTER_DECISION = [
    ("decision_committed", 1),  # allowed, the refund not dispatched
    ("result_committed", 1),  # the refund's result committed, the child not answered
    ("child_finished", 1),  # the child's end committed: parent settled and made ready
    ("parent_resuming", 1),  # the parent claimed again, its model not called
    ("model_call_committed", 4),  # the parent's end committed, the call not returned
]


@dataclass
class Scenario:
    db: str
    ledger: Path

    def run(self, phase: str, kill_at: str | None = None, count: int = 1) -> dict[str, Any]:
        argv = [sys.executable, str(WORKER), "--db", self.db, "--ledger", str(self.ledger)]
        argv += ["--phase", phase]
        if kill_at is not None:
            argv += ["--kill-at", kill_at, "--kill-count", str(count)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=90, cwd=ROOT, env=env, check=False
        )
        if kill_at is not None:
            assert done.returncode == -signal.SIGKILL, (
                f"{phase} should have died at {kill_at} #{count}, rc={done.returncode}\n"
                f"stdout: {done.stdout}\nstderr: {done.stderr}"
            )
            return {}
        assert done.returncode == 0, f"{phase} failed:\n{done.stdout}\n{done.stderr}"
        dump: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return dump

    def ledger_lines(self, kind: str) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        lines = [json.loads(line) for line in self.ledger.read_text().splitlines() if line]
        return [line for line in lines if line["kind"] == kind]


def _finish(scenario: Scenario) -> dict[str, Any]:
    """Recover; approve billing's request if it still waits; the final dump."""
    dump = scenario.run("recover")
    parent = dump["runs"][0]
    if parent["status"] == "awaiting":
        assert len(parent["pending"]) == 1, parent
        assert parent["pending"][0] != parent["run_id"]  # the child's request stands for it
        dump = scenario.run("approve")
    return dump


def _assert_whole(scenario: Scenario, dump: dict[str, Any]) -> None:
    runs = dump["runs"]
    assert [r["agent"] for r in runs] == ["ops", "billing"], runs  # no duplicate child
    parent, child = runs
    assert child["parent_run_id"] == parent["run_id"]
    assert child["task_key"] == "refund-A1"
    assert child["status"] == "done", child
    assert child["text"] == "billing: refunded 250.0 on A1"
    assert parent["status"] == "done", parent
    assert parent["text"] == ANSWER
    assert parent["calls"] == [{"tool": "delegate_to_billing", "state": "completed"}]
    assert parent["tickets"] == [{"kind": "child", "status": "decided"}]
    assert parent["events"].count("child_started") == 1
    assert parent["events"].count("child_finished") == 1
    assert parent["events"].count("run_done") == 1
    assert parent["children_runs"] == 1
    assert child["events"].count("run_done") == 1
    refunds = scenario.ledger_lines("tool")
    assert len(refunds) == 1, refunds  # the side effect ran exactly once
    assert refunds[0]["run_id"] == child["run_id"]


@pytest.mark.parametrize(("point", "count"), BEFORE_DECISION, ids=lambda v: str(v))
def test_a_crash_before_the_decision_loses_and_doubles_nothing(
    place: Place, point: str, count: int
) -> None:
    scenario = Scenario(place.db, place.tmp / "ledger.jsonl")
    scenario.run("start", kill_at=point, count=count)
    assert scenario.ledger_lines("tool") == []
    _assert_whole(scenario, _finish(scenario))


@pytest.mark.parametrize(("point", "count"), AFTER_DECISION, ids=lambda v: str(v))
def test_a_crash_after_the_decision_loses_and_doubles_nothing(
    place: Place, point: str, count: int
) -> None:
    scenario = Scenario(place.db, place.tmp / "ledger.jsonl")
    scenario.run("start", kill_at=point, count=count)
    dump = _finish(scenario)
    _assert_whole(scenario, dump)
    # Nothing was decided twice: the child's one permission ticket, decided once.
    child = dump["runs"][1]
    assert child["tickets"] == [{"kind": "tool_permission", "status": "decided"}]
