"""``signoff approve --grant`` and ``signoff grants list|revoke``, as real subprocesses
against a SQLite file (the helpers of `test_cli`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bot.cli import cli
from tests.e2e.test_cli import REFUND, Env

SHOP = "tests.replicas.grants_app:agents"

# Starts a run of `shop` in a thread as U1; with "grant", allows it with a thread grant.
# Prints each run's status and the grant's id.
SHOP_RUNS = """
import asyncio, json, sys
from bot.settings import load_settings
from bot.wiring import build_runtime
from runtime import GrantRequest

async def main():
    runtime, store = await build_runtime(load_settings())
    out = {"statuses": []}
    try:
        for step in sys.argv[1:]:
            r = await runtime.start("shop", "refund", requester="U1", thread_id="t1")
            if step == "grant":
                r = await runtime.approve(
                    r.pending[0], resume=True, grant=GrantRequest(scope="thread")
                )
                [grant] = await runtime.grants()
                out["grant"] = grant.grant_id
            out["statuses"].append(str(r.status))
    finally:
        await runtime.aclose()
        await store.close()
    print(json.dumps(out))

asyncio.run(main())
"""


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def shop(env: Env, *steps: str) -> dict[str, Any]:
    done = env.python(SHOP_RUNS, *steps, SIGNOFF_APP=SHOP)
    assert done.code == 0, done.err
    found: dict[str, Any] = json.loads(done.out)
    return found


def listed(env: Env, *args: str) -> list[dict[str, Any]]:
    done = env.signoff("grants", "list", "--json", *args)
    assert done.code == 0, done.err
    found: list[dict[str, Any]] = json.loads(done.out)
    return found


def test_approve_with_a_grant_then_list_and_revoke_it(env: Env) -> None:
    started = env.start(REFUND)["refund"]
    ticket = started["tickets"][0]
    assert env.signoff("grants", "list").out.strip() == "no active grants"

    # refund allows the default grant only (for the rest of the run): nothing changes.
    wider = env.signoff("approve", ticket, "--grant", "thread")
    assert wider.code == 9
    assert "refund cannot be allowed for this thread" in wider.error_line()
    [pending] = env.tickets()
    assert (pending["ticket_id"], pending["grants"]) == (ticket, ["run"])
    assert listed(env, "--all") == []

    # Not resumed here, so the run (and its run grant) goes on.
    done = env.signoff(
        "approve", ticket, "--grant", "run", "--hours", "2", "--as", "ops:alice", "--no-resume"
    )
    assert done.code == 0, done.err
    assert f"approved {ticket} as ops:alice" in done.out
    [grant] = listed(env)
    assert grant["state"] == "active" and grant["scope"] == "run"
    assert (grant["tool"], grant["run_id"], grant["ticket_id"]) == (
        "refund",
        started["run"],
        ticket,
    )
    assert grant["granted_by"] == "ops:alice" and grant["platform"] == "cli"
    assert grant["expires_at"] is not None
    table = env.signoff("grants", "list")
    assert grant["grant_id"] in table.out and "refund for the rest of this run" in table.out

    # A stranger sees nothing and cannot revoke it; the run's requester can.
    assert listed(env, "--as", "U9", "--no-operator") == []
    stranger = env.signoff("grants", "revoke", grant["grant_id"], "--as", "U9", "--no-operator")
    assert stranger.code == 4
    assert stranger.error_line() == f"signoff: not found: no grant '{grant['grant_id']}'"
    assert [g["state"] for g in listed(env)] == ["active"]

    revoked = env.signoff("grants", "revoke", grant["grant_id"], "--as", "U1", "--no-operator")
    assert revoked.code == 0, revoked.err
    assert revoked.out.strip() == (
        f"revoked {grant['grant_id']} (refund for the rest of this run) as U1"
    )
    again = env.signoff("grants", "revoke", grant["grant_id"])
    assert again.code == 5
    assert "was already revoked by U1" in again.error_line()
    assert env.signoff("grants", "list").out.strip() == "no active grants"
    [shown] = listed(env, "--all", "--run", started["run"])
    assert (shown["state"], shown["revoked_by"]) == ("revoked", "U1")

    unknown = env.signoff("grants", "revoke", "gr_nope")
    assert unknown.code == 4 and "no grant 'gr_nope'" in unknown.error_line()


def test_a_grant_revoked_by_another_process_stops_applying_at_once(env: Env) -> None:
    given = shop(env, "grant", "run")
    assert given["statuses"] == ["done", "done"]  # the second run went under the grant

    revoked = env.signoff("grants", "revoke", given["grant"], SIGNOFF_APP=SHOP)
    assert revoked.code == 0, revoked.err
    assert shop(env, "run")["statuses"] == ["awaiting"]
    [shown] = listed(env, "--all")
    assert shown["state"] == "revoked" and shown["scope"] == "thread"


@pytest.mark.parametrize(
    "args",
    [
        ("--hours", "2"),  # hours without a grant
        ("--grant", "run", "--hours", "0"),
        ("--grant", "run", "--hours", "721"),
        ("--grant", "run", "--hours", "nan"),
        ("--grant", "forever"),
    ],
)
def test_a_bad_grant_option_is_a_usage_error(args: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, ["approve", "tk_1", *args], prog_name="signoff")

    assert result.exit_code == 2
    assert "--hours" in result.output or "--grant" in result.output


@pytest.mark.parametrize("command", [["grants"], ["grants", "list"], ["grants", "revoke"]])
def test_grant_commands_explain_themselves_with_an_example(command: list[str]) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"], prog_name="signoff")

    assert result.exit_code == 0, result.output
    assert "signoff grants " in result.output.split("Example", 1)[1]
