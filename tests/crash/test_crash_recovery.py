"""Crash tests: SIGKILL a real worker process at named points, recover in a fresh one.

Every scenario runs `tests/crash/worker.py` in subprocesses sharing one database (a SQLite
file, or a fresh PostgreSQL database: each scenario runs on both) and one side-effect
ledger (an fsynced JSON line per real tool execution and per model call). The first
process dies by SIGKILL at the named point; a fresh process waits for the dead worker's
lease to expire and calls `Runtime.recover()`; the test then checks the database (via the
worker's JSON dump) against the ledger:

* a recorded result is reused, never re-run;
* ``manual`` calls without a recorded result become ``uncertain`` and are not re-run;
* ``safe`` calls run again; ``idempotent`` calls run again with the same execution key;
* no run is lost: every run ends ``done`` or ``awaiting`` an uncertain decision.
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
WORKER = Path(__file__).with_name("worker.py")
FINAL_TEXT = "Refund issued."

# Where a SIGKILL lands, and how many real executions the ledger holds by then.
DISPATCH_POINTS = {
    "dispatch_committed": 0,  # intent committed, tool not invoked yet
    "inside_tool": 1,  # tool wrote its ledger line, has not returned
    "tool_returned": 1,  # tool returned, result not committed
}


@dataclass
class Scenario:
    """One database and ledger shared by the processes of a test."""

    db: str
    ledger: Path
    policy: str

    def run(self, phase: str, *, kill_at: str | None = None, **extra: str) -> dict[str, Any]:
        """Run the worker; with `kill_at` it must die by SIGKILL, else succeed."""
        argv = [
            sys.executable,
            str(WORKER),
            "--db",
            self.db,
            "--ledger",
            str(self.ledger),
            "--policy",
            self.policy,
            "--phase",
            phase,
        ]
        if kill_at is not None:
            argv += ["--kill-at", kill_at]
        for key, value in extra.items():
            argv += [f"--{key.replace('_', '-')}", value]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False
        )
        if kill_at is not None:
            assert done.returncode == -signal.SIGKILL, (
                f"{phase} should have died by SIGKILL at {kill_at}, got rc={done.returncode}\n"
                f"stdout: {done.stdout}\nstderr: {done.stderr}"
            )
            return {}
        assert done.returncode == 0, f"{phase} failed:\n{done.stdout}\n{done.stderr}"
        return json.loads(done.stdout.strip().splitlines()[-1])

    def tool_runs(self) -> list[dict[str, Any]]:
        return [e for e in self._ledger() if e["kind"] == "tool"]

    def model_calls(self) -> list[dict[str, Any]]:
        return [e for e in self._ledger() if e["kind"] == "model"]

    def _ledger(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line]


def scenario(place: Place, policy: str) -> Scenario:
    return Scenario(db=place.db, ledger=place.tmp / "ledger.jsonl", policy=policy)


def only_run(dump: dict[str, Any]) -> dict[str, Any]:
    runs = dump["runs"]
    assert len(runs) == 1, f"expected one run, found {len(runs)}: the run was lost or duplicated"
    return runs[0]


def kinds(run: dict[str, Any]) -> list[str]:
    return [e["kind"] for e in run["events"]]


def only_call(run: dict[str, Any]) -> dict[str, Any]:
    assert len(run["calls"]) == 1, run["calls"]
    return run["calls"][0]


def assert_finished(run: dict[str, Any]) -> None:
    assert run["status"] == "done", run
    assert run["text"] == FINAL_TEXT
    assert run["pending"] == []
    assert kinds(run).count("run_done") == 1


def crash_and_recover(s: Scenario, kill_at: str) -> tuple[dict[str, Any], int]:
    """Start + approve, die at `kill_at`, recover. Returns the recovered run and the
    number of tool executions in the ledger when the crash happened."""
    s.run("start", kill_at=kill_at)
    before = len(s.tool_runs())
    dump = s.run("recover")
    run = only_run(dump)
    assert run["status"] != "running", "recovery left the run stuck in 'running'"
    assert [r["run_id"] for r in dump["recovered"]] == [run["run_id"]]
    assert "tool_dispatched" in kinds(run)
    return run, before


# --- a dispatched call without a recorded result, per replay policy ----------------------


@pytest.mark.parametrize("kill_at", list(DISPATCH_POINTS))
def test_manual_call_becomes_uncertain_and_is_not_rerun(place: Place, kill_at: str) -> None:
    s = scenario(place, "manual")
    run, before = crash_and_recover(s, kill_at)
    assert before == DISPATCH_POINTS[kill_at]

    assert len(s.tool_runs()) == before, "a manual call was executed again by recovery"
    assert run["status"] == "awaiting"
    assert len(run["pending"]) == 1
    pending = run["pending"][0]
    assert pending["status"] == "uncertain"
    assert pending["target"] == "Uncertain"
    call = only_call(run)
    assert call["state"] == "uncertain"
    assert pending["execution_key"] == call["execution_key"]
    assert call["attempts"] == 1
    assert kinds(run).count("tool_uncertain") == 1
    assert "tool_replayed" not in kinds(run)
    assert "tool_completed" not in kinds(run)


@pytest.mark.parametrize("policy", ["safe", "idempotent"])
@pytest.mark.parametrize("kill_at", list(DISPATCH_POINTS))
def test_replayable_call_runs_again_with_the_same_key(
    place: Place, policy: str, kill_at: str
) -> None:
    s = scenario(place, policy)
    run, before = crash_and_recover(s, kill_at)
    assert before == DISPATCH_POINTS[kill_at]

    executions = s.tool_runs()
    assert len(executions) == before + 1, "recovery must execute the call exactly once more"
    call = only_call(run)
    assert call["state"] == "completed"
    assert call["attempts"] == 2
    assert {e["execution_key"] for e in executions} == {call["execution_key"]}
    assert executions[-1]["attempt"] == 2
    assert executions[-1]["phase"] == "recover"
    assert_finished(run)
    replayed = [e for e in run["events"] if e["kind"] == "tool_replayed"]
    assert len(replayed) == 1
    assert replayed[0]["data"]["policy"] == policy
    assert replayed[0]["data"]["execution_key"] == call["execution_key"]
    assert "tool_uncertain" not in kinds(run)


# --- a recorded result is reused ---------------------------------------------------------


@pytest.mark.parametrize("policy", ["manual", "safe", "idempotent"])
def test_recorded_result_is_reused_never_rerun(place: Place, policy: str) -> None:
    s = scenario(place, policy)
    run, before = crash_and_recover(s, "result_committed")
    assert before == 1

    assert len(s.tool_runs()) == 1, "a call with a recorded result was executed again"
    call = only_call(run)
    assert call["state"] == "completed"
    assert call["attempts"] == 1
    assert_finished(run)
    assert kinds(run).count("tool_completed") == 1
    assert "tool_replayed" not in kinds(run)
    assert "tool_uncertain" not in kinds(run)


# --- resolving an uncertain call in yet another process ----------------------------------


@pytest.mark.parametrize("how", ["result", "retry", "abort"])
def test_uncertain_call_resolved_in_a_fresh_process(place: Place, how: str) -> None:
    s = scenario(place, "manual")
    run, before = crash_and_recover(s, "inside_tool")
    assert before == 1
    assert run["pending"][0]["status"] == "uncertain"
    key = run["pending"][0]["execution_key"]

    dump = s.run("resolve", resolve=how)
    run = only_run(dump)
    assert_finished(run)
    call = only_call(run)
    executions = s.tool_runs()
    if how == "retry":
        assert len(executions) == 2, "a retry executes the call exactly once more"
        assert [e["execution_key"] for e in executions] == [key, key]
        assert executions[-1]["phase"] == "resolve"
        assert call["state"] == "completed"
        assert call["attempts"] == 2
    else:
        assert len(executions) == 1, f"resolving with {how} must not run the tool"
        assert call["state"] == "resolved"
        assert call["attempts"] == 1
        if how == "result":
            assert call["result"] == "verified: refunded 250 on A1"
        else:
            assert "Aborted" in call["result"]
    decided = [e for e in run["events"] if e["kind"] == "ticket_decided"]
    assert [d["data"]["decision"] for d in decided][-1] == how.replace("result", "resolve")
    # The final model call saw the resolution as the tool's result.
    seen = s.model_calls()[-1]["tool_results"]
    assert seen == [call["result"] if how != "retry" else "refunded 250.0 on A1"]


# --- crashes during recovery and during a retry ------------------------------------------


def test_crash_during_recovery_is_recovered_again(place: Place) -> None:
    """An idempotent call interrupted twice (first run, then its replay) runs once more
    per recovery, always with the same execution key."""
    s = scenario(place, "idempotent")
    s.run("start", kill_at="dispatch_committed")
    s.run("recover", kill_at="inside_tool")
    assert [e["attempt"] for e in s.tool_runs()] == [2]

    run = only_run(s.run("recover"))
    assert_finished(run)
    executions = s.tool_runs()
    assert [e["attempt"] for e in executions] == [2, 3]
    call = only_call(run)
    assert {e["execution_key"] for e in executions} == {call["execution_key"]}
    assert call["attempts"] == 3
    assert kinds(run).count("tool_replayed") == 2


def test_retry_of_uncertain_call_that_crashes_becomes_uncertain_again(place: Place) -> None:
    """A person's retry is a new dispatch: if it dies too, the call is uncertain again
    (a new ticket), never silently re-run, and can still be resolved."""
    s = scenario(place, "manual")
    first, _ = crash_and_recover(s, "inside_tool")
    s.run("resolve", resolve="retry", kill_at="inside_tool")
    assert len(s.tool_runs()) == 2

    run = only_run(s.run("recover"))
    assert len(s.tool_runs()) == 2
    assert run["status"] == "awaiting"
    assert [p["status"] for p in run["pending"]] == ["uncertain"]
    assert run["pending"][0]["ticket_id"] != first["pending"][0]["ticket_id"]
    assert only_call(run)["attempts"] == 2
    assert kinds(run).count("tool_uncertain") == 2

    run = only_run(s.run("resolve", resolve="result"))
    assert_finished(run)
    assert len(s.tool_runs()) == 2


# --- crashes around the decision and the model -------------------------------------------


def test_crash_after_decision_commit_runs_the_tool_once(place: Place) -> None:
    """Park in one process, approve in another that dies right after the decision commit:
    the approved run is queued, recovery runs the (manual) tool for the first and only
    time; it was never dispatched, so it is not uncertain."""
    s = scenario(place, "manual")
    parked = s.run("park")
    assert only_run(parked)["status"] == "awaiting"
    s.run("approve", kill_at="decision_committed")
    assert s.tool_runs() == []

    dump = s.run("recover")
    run = only_run(dump)
    assert len(s.tool_runs()) == 1
    assert s.tool_runs()[0]["attempt"] == 1
    assert_finished(run)
    assert only_call(run)["attempts"] == 1
    assert "tool_replayed" not in kinds(run)
    assert "tool_uncertain" not in kinds(run)


def test_crash_during_model_call_calls_again_and_marks_usage_incomplete(place: Place) -> None:
    s = scenario(place, "manual")
    run, before = crash_and_recover(s, "inside_model")
    assert before == 1

    assert len(s.tool_runs()) == 1, "the tool's recorded result must be reused"
    final_turn = [m for m in s.model_calls() if m["turn"] == 1]
    assert [(m["attempt"], m["phase"]) for m in final_turn] == [(1, "start"), (2, "recover")]
    assert_finished(run)
    assert run["usage_incomplete"] is True
    interrupted = [e for e in run["events"] if e["kind"] == "model_interrupted"]
    assert len(interrupted) == 1
    assert interrupted[0]["data"]["attempt"] == 2
    assert run["turns"] == 2


def test_crash_after_parking_loses_nothing(place: Place) -> None:
    """Die right after the parking model call commits: nothing to recover, the parked run
    is intact and a later process approves and finishes it."""
    s = scenario(place, "manual")
    s.run("start", kill_at="model_call_committed")
    dump = s.run("recover")
    assert dump["recovered"] == []
    run = only_run(dump)
    assert run["status"] == "awaiting"
    assert [p["status"] for p in run["pending"]] == ["approval"]

    run = only_run(s.run("approve"))
    assert_finished(run)
    assert len(s.tool_runs()) == 1


# --- runs driven by a serving worker, handed over in the commit that made them ready ------


def test_crash_after_a_handed_over_decision_runs_the_tool_once(place: Place) -> None:
    """A worker's loop runs; the decision's commit claims the run for that worker, and the
    process dies right after it: the claimed run is recovered once its lease expires and
    its (manual) tool runs for the first and only time."""
    s = scenario(place, "manual")
    s.run("serve", kill_at="decision_committed")
    assert s.tool_runs() == []

    dump = s.run("recover")
    run = only_run(dump)
    assert [r["run_id"] for r in dump["recovered"]] == [run["run_id"]]
    assert len(s.tool_runs()) == 1
    assert_finished(run)
    assert only_call(run)["attempts"] == 1
    assert "tool_uncertain" not in kinds(run)


@pytest.mark.parametrize("kill_at", list(DISPATCH_POINTS))
def test_a_handed_over_run_killed_mid_tool_follows_its_policy(place: Place, kill_at: str) -> None:
    s = scenario(place, "manual")
    s.run("serve", kill_at=kill_at)
    before = len(s.tool_runs())
    assert before == DISPATCH_POINTS[kill_at]

    run = only_run(s.run("recover"))
    assert len(s.tool_runs()) == before, "a manual call was executed again by recovery"
    assert run["status"] == "awaiting"
    assert [p["status"] for p in run["pending"]] == ["uncertain"]
    assert kinds(run).count("tool_uncertain") == 1


def test_a_served_run_uncrashed_is_claimed_only_in_its_commits(place: Place) -> None:
    """Without a crash the worker drives the run to its end, and no claim of the loop's
    own was needed: the start's commit and the decision's are the two claims recorded."""
    s = scenario(place, "manual")
    # A lease that outlasts a loaded machine's pauses: nothing here is to be recovered.
    dump = s.run("serve", lease="30")
    assert dump["result"]["status"] == "done"
    run = only_run(dump)
    assert_finished(run)
    claims = [e for e in run["events"] if e["kind"] == "run_claimed"]
    assert [c["data"]["fence"] for c in claims] == [1, 2]
    assert kinds(run).index("run_claimed") == kinds(run).index("run_started") + 1
    assert len(s.tool_runs()) == 1
