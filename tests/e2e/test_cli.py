"""The ``signoff`` command line, run as a real subprocess against a SQLite file.

Runs are created by small Python snippets that use the same wiring as the CLI
(`bot.wiring.build_runtime` over ``SIGNOFF_DATABASE_URL``), then decided, listed and shown
with ``python -m bot ...`` in fresh processes, the way an operator would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bot.cli import cli

REPO = Path(__file__).resolve().parents[2]

START_RUNS = """
import asyncio, json, sys
from bot.settings import load_settings
from bot.wiring import build_runtime

async def main():
    runtime, store = await build_runtime(load_settings())
    out = {}
    try:
        for name, agent, text in json.loads(sys.argv[1]):
            r = await runtime.start(agent, text, requester="U1")
            out[name] = {
                "run": r.run_id,
                "status": str(r.status),
                "tickets": [p.ticket_id for p in r.pending],
                "keys": [p.execution_key for p in r.pending],
            }
    finally:
        await store.close()
    print(json.dumps(out))

asyncio.run(main())
"""

# Approves the page, then dies right after the dispatch intent is committed: the page
# may or may not have gone out, so recovery must make the call uncertain.
CRASH_WHILE_PAGING = """
import asyncio, json, os
from bot.settings import load_settings
from bot.wiring import build_runtime

async def main():
    def crash(point, info):
        if point == "dispatch_committed" and info.get("tool") == "page_engineer":
            os._exit(17)
    runtime, store = await build_runtime(load_settings(), checkpoint=crash)
    r = await runtime.start("oncall", "payments API returns 502s (team payments)", requester="U1")
    print(json.dumps({"run": r.run_id, "ticket": r.pending[0].ticket_id}), flush=True)
    await runtime.approve(r.pending[0], resume=True)

asyncio.run(main())
"""


@dataclass
class Result:
    code: int
    out: str
    err: str

    def error_line(self) -> str:
        """The one line a failing command prints on stderr."""
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got: {self.err!r}"
        assert "Traceback" not in self.err
        return lines[0]


class Env:
    """A temporary database and the environment pointing the CLI at it."""

    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "signoff.db"
        self.url = f"sqlite+aiosqlite:///{self.db}"
        self.vars = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        self.vars.update(
            SIGNOFF_DATABASE_URL=self.url,
            SIGNOFF_APP="examples:demo_agents",
            PYTHONPATH=str(REPO),
        )

    def signoff(self, *args: str, input: str | None = None, **env: str) -> Result:
        done = subprocess.run(
            [sys.executable, "-m", "bot", *args],
            cwd=REPO,
            env={**self.vars, **env},
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def python(self, code: str, *args: str, **env: str) -> Result:
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            cwd=REPO,
            env={**self.vars, **env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def start(self, *runs: tuple[str, str, str]) -> dict[str, Any]:
        done = self.python(START_RUNS, json.dumps(runs))
        assert done.code == 0, done.err
        started: dict[str, Any] = json.loads(done.out)
        return started

    def tickets(self) -> list[dict[str, Any]]:
        done = self.signoff("tickets", "--json")
        assert done.code == 0, done.err
        found: list[dict[str, Any]] = json.loads(done.out)
        return found

    def runs(self, *args: str) -> list[dict[str, Any]]:
        done = self.signoff("runs", "list", "--json", *args)
        assert done.code == 0, done.err
        found: list[dict[str, Any]] = json.loads(done.out)
        return found


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


REFUND = ("refund", "refunds", "Order A1001 was charged twice")
DEPLOY = ("deploy", "deploys", "deploy checkout 2.4.1")
PAGE = ("page", "oncall", "payments API returns 502s (team payments)")


# --- demo -----------------------------------------------------------------------------------


def test_demo_with_yes_finishes_and_prints_the_flight_recorder(env: Env, tmp_path: Path) -> None:
    kept = tmp_path / "demo.db"
    done = env.signoff("demo", "--yes", "--database", str(kept))

    assert done.code == 0, done.err
    assert "Tool:" in done.out and "refund" in done.out
    assert '"amount": 249.0' in done.out  # pretty JSON arguments
    assert "Ticket:" in done.out and "Who may decide:" in done.out
    assert "Answer: Refunded 249.00 on order A1001" in done.out
    assert "Flight recorder" in done.out
    for kind in ("run_started", "ticket_opened", "ticket_decided", "tool_completed", "run_done"):
        assert kind in done.out
    # The run stays in the given database and the operator commands can read it.
    runs = env.runs("--database-url", f"sqlite+aiosqlite:///{kept}")
    assert [r["status"] for r in runs] == ["done"]


def test_demo_reads_the_decision_from_stdin(env: Env) -> None:
    done = env.signoff("demo", input="y\n")

    assert done.code == 0, done.err
    assert "Allow? [y/n/r=deny with reason]" in done.out
    assert "Answer: Refunded 249.00 on order A1001" in done.out


def test_demo_deny_with_a_reason_reaches_the_model(env: Env) -> None:
    done = env.signoff("demo", input="what\nr\nover budget this month\n")

    assert done.code == 0, done.err
    assert "Please answer y" in done.out
    assert "Answer: I did not refund order A1001. Permission denied: over budget this month" in (
        done.out
    )
    assert "tool_completed" in done.out  # the lookup ran ...
    assert done.out.count("tool_dispatched") == 1  # ... the refund never did


def test_demo_without_input_asks_for_yes(env: Env) -> None:
    done = env.signoff("demo")

    assert done.code == 2
    assert "--yes" in done.error_line()


# --- decisions --------------------------------------------------------------------------------


def test_approve_resumes_the_run_and_a_second_approval_is_refused(env: Env) -> None:
    started = env.start(REFUND)["refund"]
    assert started["status"] == "awaiting"
    ticket = started["tickets"][0]

    listed = env.tickets()
    assert [(t["ticket_id"], t["tool"], t["status"]) for t in listed] == [
        (ticket, "refund", "approval")
    ]
    assert listed[0]["arguments"] == {"order_id": "A1001", "amount": 249.0}
    shown = env.signoff("tickets")
    assert ticket in shown.out and "refund" in shown.out

    stale = env.signoff("approve", ticket, SIGNOFF_APP="examples.deploys:build_agent")
    assert stale.code == 8
    assert "agent 'refunds' is not loaded" in stale.error_line()

    done = env.signoff("approve", ticket, "--as", "operator:alice")
    assert done.code == 0, done.err
    assert f"approved {ticket} as operator:alice" in done.out
    assert "is done: Refunded 249.00 on order A1001" in done.out

    again = env.signoff("approve", ticket)
    assert again.code == 5
    assert again.error_line() == f"signoff: conflict: ticket {ticket} was already decided"

    assert env.tickets() == []
    assert [r["status"] for r in env.runs("--status", "done", "--status", "failed")] == ["done"]

    show = env.signoff("runs", "show", started["run"], "--events")
    assert show.code == 0, show.err
    assert "status     done" in show.out
    assert "refund" in show.out and "completed" in show.out
    assert "ticket_decided" in show.out and "by=operator:alice" in show.out

    jsonl = env.signoff("runs", "show", started["run"], "--jsonl")
    events = [json.loads(line) for line in jsonl.out.splitlines()]
    decided = [e for e in events if e["kind"] == "ticket_decided"]
    assert decided[0]["actor"] == "operator:alice"
    assert decided[0]["data"]["platform"] == "cli"


def test_approve_with_changed_arguments_and_its_refusals(env: Env) -> None:
    started = env.start(REFUND)["refund"]
    ticket = started["tickets"][0]
    assert env.tickets()[0]["editable"] == ["order_id", "amount"]

    for given, code in (
        ('{"amount": -5}', 9),  # the schema wants more than 0
        ('{"nope": 1}', 9),
        ("[200]", 2),
        ("{amount", 2),
    ):
        refused = env.signoff("approve", ticket, "--args", given)
        assert refused.code == code, (given, refused.out, refused.err)
        refused.error_line()
    assert [t["ticket_id"] for t in env.tickets()] == [ticket]  # nothing changed

    done = env.signoff("approve", ticket, "--args", '{"amount": 200}')
    assert done.code == 0, done.err
    assert "is done: Refunded 200.00 on order A1001" in done.out
    jsonl = env.signoff("runs", "show", started["run"], "--jsonl")
    [decided] = [
        e for e in map(json.loads, jsonl.out.splitlines()) if e["kind"] == "ticket_decided"
    ]
    assert decided["data"]["edit"]["summary"] == "amount 249.0 → 200.0"


def test_batch_decides_each_ticket_on_its_own(env: Env) -> None:
    started = env.start(REFUND, PAGE)
    refund, page = started["refund"], started["page"]

    done = env.signoff("batch", "allow", refund["tickets"][0], "tk_nope")
    assert done.code == 4, (done.out, done.err)
    assert f"allowed {refund['tickets'][0]}" in done.out
    assert "not decided tk_nope:" in done.out
    assert "allowed 1 of 2 as operator:" in done.out
    assert done.error_line() == "signoff: batch: 1 of 2 not decided"
    assert [r["status"] for r in env.runs("--status", "done")] == ["done"]

    denied = env.signoff("batch", "deny", "--run", page["run"], "--reason", "not at 3am")
    assert denied.code == 0, denied.err
    assert "denied 1 of 1" in denied.out
    assert env.tickets() == []

    again = env.signoff("batch", "allow", refund["tickets"][0])
    assert again.code == 5 and "already decided" in again.out
    for bad in (["batch", "allow"], ["batch", "allow", "tk_x", "--reason", "x"], ["batch", "x"]):
        assert env.signoff(*bad).code == 2, bad


def test_approve_by_execution_key_without_resume_then_resume(env: Env) -> None:
    started = env.start(REFUND)["refund"]

    done = env.signoff("approve", started["keys"][0], "--no-resume")
    assert done.code == 0, done.err
    assert "ready to continue" in done.out
    assert [r["status"] for r in env.runs()] == ["queued"]

    resumed = env.signoff("resume", started["run"])
    assert resumed.code == 0, resumed.err
    assert "is done: Refunded 249.00" in resumed.out


def test_deny_with_reason_blocks_the_tool(env: Env) -> None:
    started = env.start(PAGE)["page"]

    done = env.signoff("deny", started["tickets"][0], "--reason", "not at 3am")
    assert done.code == 0, done.err
    assert "is done: Nobody was paged. Permission denied: not at 3am" in done.out

    events = env.signoff("runs", "show", started["run"], "--jsonl").out.splitlines()
    kinds = [json.loads(line)["kind"] for line in events]
    assert "tool_dispatched" in kinds  # the on-call lookup ran
    decided = [json.loads(line) for line in events if '"ticket_decided"' in line]
    assert decided[0]["data"]["reason"] == "not at 3am"
    assert decided[0]["data"]["tool"] == "page_engineer"


def test_answer_validates_input_and_four_eyes_forbids_the_requester(env: Env) -> None:
    started = env.start(DEPLOY)["deploy"]
    ticket = started["tickets"][0]
    (request,) = env.tickets()
    assert request["status"] == "input" and request["tool"] == "rollback_plan"
    assert "strategy" in request["schema"]["properties"]

    bad_json = env.signoff("answer", ticket, "--data", "{previous_version")
    assert bad_json.code == 2
    assert "'--data': not valid JSON" in bad_json.error_line()

    not_object = env.signoff("answer", ticket, "--data", "[1, 2]")
    assert not_object.code == 2
    assert "JSON object" in not_object.error_line()

    incomplete = env.signoff("answer", ticket, "--data", '{"previous_version": "2.4.0"}')
    assert incomplete.code == 9
    line = incomplete.error_line()
    assert line.startswith("signoff: invalid answer:")
    assert "'strategy' is a required property" in line

    plan = '{"previous_version": "2.4.0", "strategy": "redeploy_previous"}'
    answered = env.signoff("answer", ticket, "--data", plan)
    assert answered.code == 0, answered.err
    assert "awaiting 1 decision" in answered.out and "Tool:           deploy" in answered.out
    deploy_ticket = env.tickets()[0]
    assert deploy_ticket["tool"] == "deploy" and deploy_ticket["four_eyes"] is True
    assert deploy_ticket["deadline"] is not None

    own = env.signoff("approve", deploy_ticket["ticket_id"], "--as", "U1")
    assert own.code == 7
    assert "U1 may not decide" in own.error_line()
    assert "not the requester" in own.error_line()

    stranger = env.signoff("approve", deploy_ticket["ticket_id"], "--as", "U2", "--no-operator")
    assert stranger.code == 7
    assert stranger.error_line().startswith("signoff: not allowed: U2 may not decide")

    approved = env.signoff("approve", deploy_ticket["ticket_id"], "--as", "release-bot")
    assert approved.code == 0, approved.err
    assert "Deployed checkout 2.4.1" in approved.out and "approved by release-bot" in approved.out


def test_recover_after_a_crash_then_resolve_the_uncertain_call(env: Env) -> None:
    crashed = env.python(CRASH_WHILE_PAGING, SIGNOFF_LEASE_SECONDS="0.2")
    assert crashed.code == 17, crashed.err
    run = json.loads(crashed.out)["run"]
    assert [r["status"] for r in env.runs()] == ["running"]
    time.sleep(0.4)  # let the dead worker's lease expire

    recovered = env.signoff("recover")
    assert recovered.code == 0, recovered.err
    assert "Waiting for:    uncertain" in recovered.out
    (uncertain,) = env.tickets()
    assert uncertain["status"] == "uncertain" and uncertain["tool"] == "page_engineer"
    ticket = uncertain["ticket_id"]

    wrong_answer = env.signoff("approve", ticket)
    assert wrong_answer.code == 9
    assert "does not fit" in wrong_answer.error_line()

    none_chosen = env.signoff("resolve", ticket)
    assert none_chosen.code == 2
    assert "exactly one of" in none_chosen.error_line()

    bad_json = env.signoff("resolve", ticket, "--result", "paged")
    assert bad_json.code == 2
    assert "quote it as JSON" in bad_json.error_line()

    result = '{"page_id": "pg_manual", "engineer": "grace"}'
    resolved = env.signoff("resolve", ticket, "--result", result)
    assert resolved.code == 0, resolved.err
    assert "is done: Paged grace (pg_manual)" in resolved.out

    kinds = [
        json.loads(x)["kind"] for x in env.signoff("runs", "show", run, "--jsonl").out.splitlines()
    ]
    assert kinds.count("tool_dispatched") == 2  # the lookup and the one page; no re-run
    assert "tool_uncertain" in kinds


def test_pause_resume_and_cancel(env: Env) -> None:
    started = env.start(REFUND)["refund"]
    run, ticket = started["run"], started["tickets"][0]

    paused = env.signoff("pause", run)
    assert paused.code == 0, paused.err
    assert "is paused" in paused.out
    again = env.signoff("pause", run)
    assert again.code == 5
    assert "cannot be paused" in again.error_line()

    resumed = env.signoff("resume", run)
    assert resumed.code == 0, resumed.err
    assert "awaiting 1 decision" in resumed.out

    cancelled = env.signoff("cancel", run, "--reason", "customer withdrew")
    assert cancelled.code == 0, cancelled.err
    assert "is cancelled" in cancelled.out
    assert env.tickets() == []

    voided = env.signoff("approve", ticket)
    assert voided.code == 5
    assert ticket in voided.error_line()
    assert env.signoff("cancel", run).code == 5


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("approve", "tk_nope"), 4, "signoff: not found: no pending call or ticket 'tk_nope'"),
        (("runs", "show", "run_nope"), 4, "signoff: not found: no run 'run_nope'"),
        (("frobnicate",), 2, "signoff: usage: No such command 'frobnicate'"),
    ],
)
def test_errors_are_one_clear_line(env: Env, args: tuple[str, ...], code: int, text: str) -> None:
    done = env.signoff(*args)

    assert done.code == code
    assert text in done.error_line()


def test_bad_port_names_the_setting(env: Env) -> None:
    done = env.signoff("tickets", SIGNOFF_PORT="eighty")

    assert done.code == 3
    assert done.error_line().startswith(
        "signoff: configuration: SIGNOFF_PORT: Input should be a valid integer"
    )


def test_config_file_is_read_and_the_environment_overrides_it(env: Env, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    config = tmp_path / "signoff.toml"
    config.write_text(f'database_url = "sqlite+aiosqlite:///{other}"\nport = "x"\n')

    bad = env.signoff("--config", str(config), "runs", "list")
    assert bad.code == 3
    assert f"port in {config}: Input should be a valid integer" in bad.error_line()

    empty = env.signoff(
        "--config", str(config), "migrate", SIGNOFF_PORT="9000", SIGNOFF_DATABASE_URL=""
    )
    assert empty.code == 3  # an empty variable is a value too, and not a URL
    assert "SIGNOFF_DATABASE_URL: expected a database URL" in empty.error_line()

    env.vars = {k: v for k, v in env.vars.items() if k != "SIGNOFF_DATABASE_URL"}
    used = env.signoff("--config", str(config), "migrate", SIGNOFF_PORT="9000")
    assert used.code == 0, used.err
    assert other.exists()


@pytest.mark.parametrize(
    ("app", "text"),
    [
        ("examples", "SIGNOFF_APP: expected package.module:attr"),
        ("no_such_module_xyz:agents", "cannot import module 'no_such_module_xyz'"),
    ],
)
def test_bad_app_is_a_configuration_error(env: Env, app: str, text: str) -> None:
    done = env.signoff("tickets", SIGNOFF_APP=app)

    assert done.code == 3
    line = done.error_line()
    assert line.startswith("signoff: configuration: SIGNOFF_APP")
    assert text in line


def test_bad_database_url(env: Env, tmp_path: Path) -> None:
    malformed = env.signoff("runs", "list", "--database-url", "signoff.db")
    assert malformed.code == 3
    assert "--database-url: expected a database URL" in malformed.error_line()

    missing = env.signoff(
        "runs", "list", "--database-url", f"sqlite+aiosqlite:///{tmp_path}/missing/dir/x.db"
    )
    assert missing.code == 3
    assert missing.error_line() == (
        f"signoff: configuration: SIGNOFF_DATABASE_URL: the directory {tmp_path}/missing/dir "
        f"of the SQLite database {tmp_path}/missing/dir/x.db does not exist"
    )

    # A directory where the file should be: it exists, but SQLite cannot open it.
    unopenable = env.signoff("runs", "list", "--database-url", f"sqlite:///{tmp_path}")
    assert unopenable.code == 10
    assert unopenable.error_line() == (
        f"signoff: database: migrating the SQLite database {tmp_path} failed: "
        "unable to open database file"
    )
    assert "Traceback" not in unopenable.err and "Event loop" not in unopenable.err


# --- the rest -----------------------------------------------------------------------------------


def test_migrate_agents_and_runs_list(env: Env) -> None:
    first = env.signoff("migrate")
    assert first.code == 0, first.err
    assert "migrated" in first.out
    assert "already at the newest schema" in env.signoff("migrate").out

    assert env.signoff("runs", "list").out.strip() == "no runs"
    assert env.signoff("tickets").out.strip() == "no open tickets"

    agents = env.signoff("agents")
    assert agents.code == 0, agents.err
    for text in ("refunds", "deploys", "oncall", "idempotent", "four-eyes", "refund_permission"):
        assert text in agents.out
    rows = {line.split()[0]: line for line in agents.out.splitlines() if line.startswith("  ")}
    assert rows["deploy"].endswith("four-eyes; deadline 30m; no grants")  # four-eyes: none
    assert rows["page_engineer"].endswith("grants run")
    assert "grants" not in rows["lookup_order"]  # runs without asking

    env.start(REFUND, PAGE)
    table = env.signoff("runs", "list", "--limit", "1")
    assert table.code == 0, table.err
    assert table.out.splitlines()[0].split()[:3] == ["RUN", "STATUS", "AGENT"]
    assert len(table.out.splitlines()) == 2
    listed = env.runs()
    assert {r["agent"] for r in listed} == {"refunds", "oncall"}
    assert all(r["pending"] == 1 and r["status"] == "awaiting" for r in listed)


COMMANDS = [
    [],
    ["demo"],
    ["runs"],
    ["runs", "list"],
    ["runs", "show"],
    ["tickets"],
    ["approve"],
    ["deny"],
    ["answer"],
    ["resolve"],
    ["resume"],
    ["pause"],
    ["cancel"],
    ["batch"],
    ["recover"],
    ["migrate"],
    ["agents"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "signoff")
def test_every_command_explains_itself_with_an_example(command: list[str]) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"], prog_name="signoff")

    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert "signoff " in result.output.split("Example", 1)[1]


def test_help_lists_the_exit_codes() -> None:
    result = CliRunner().invoke(cli, ["--help"], prog_name="signoff")

    assert "Exit codes:" in result.output
    for code in ("0", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "130"):
        assert f"\n    {code} " in result.output
