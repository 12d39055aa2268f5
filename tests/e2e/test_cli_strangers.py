"""What a plain user sees and may do with ``--as USER --no-operator``: every command that
takes ``--as``, run as a real subprocess against a SQLite file (the helpers of
`test_cli`). Someone else's run does not exist for a stranger; someone who sees a run
without having started it may not pause, cancel or resume it; neither changes anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_cli import PAGE, REFUND, Env

STRANGER = ("--as", "U9", "--no-operator")


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def _recorded(env: Env, run: str) -> list[str]:
    done = env.signoff("runs", "show", run, "--jsonl")
    assert done.code == 0, done.err
    return [json.loads(line)["kind"] for line in done.out.splitlines()]


def test_a_stranger_neither_sees_nor_changes_someone_elses_runs(env: Env) -> None:
    started = env.start(REFUND, ("granted", "refunds", "Order A1001 was charged twice"))
    run, ticket = started["refund"]["run"], started["refund"]["tickets"][0]
    other = started["granted"]["tickets"][0]
    given = env.signoff(
        "approve", other, "--grant", "run", "--no-resume", "--as", "U1", "--no-operator"
    )
    assert given.code == 0, given.err
    [grant] = json.loads(env.signoff("grants", "list", "--json").out)
    before = (env.runs(), env.tickets(), _recorded(env, run))

    for args in (("runs", "show", run), ("runs", "show", run, "--jsonl")):
        hidden = env.signoff(*args, *STRANGER)
        assert hidden.code == 4, hidden.err
        assert hidden.error_line() == f"signoff: not found: no run '{run}'"
    for args, empty in (
        (("runs", "list", "--json"), "[]"),
        (("tickets", "--json"), "[]"),
        (("grants", "list", "--json"), "[]"),
        (("runs", "list"), "no runs"),
        (("tickets",), "no open tickets"),
    ):
        listed = env.signoff(*args, *STRANGER)
        assert listed.code == 0, listed.err
        assert listed.out.strip() == empty, args

    for args in (
        ("approve", ticket),
        ("deny", ticket, "--reason", "no"),
        ("answer", ticket, "--data", "{}"),
        ("resolve", ticket, "--retry"),
    ):
        refused = env.signoff(*args, *STRANGER)
        assert refused.code == 7, (args, refused.err)
        assert refused.error_line().startswith("signoff: not allowed: U9 may not decide")
    batch = env.signoff("batch", "allow", ticket, *STRANGER)
    assert batch.code == 4
    assert "allowed 0 of 1 as U9" in batch.out

    for args, unknown in (
        (("pause", run), "run"),
        (("cancel", run, "--reason", "mine now"), "run"),
        (("resume", run), "run or thread"),
    ):
        refused = env.signoff(*args, *STRANGER)
        assert refused.code == 4, (args, refused.out, refused.err)
        assert refused.error_line() == f"signoff: not found: no {unknown} '{run}'"
    revoke = env.signoff("grants", "revoke", grant["grant_id"], *STRANGER)
    assert revoke.code == 4
    assert revoke.error_line() == f"signoff: not found: no grant '{grant['grant_id']}'"

    assert (env.runs(), env.tickets(), _recorded(env, run)) == before
    assert [g["state"] for g in json.loads(env.signoff("grants", "list", "--json").out)] == [
        "active"
    ]


def test_only_an_operator_or_the_requester_controls_a_run(env: Env) -> None:
    run, ticket = (lambda s: (s["run"], s["tickets"][0]))(env.start(PAGE)["page"])
    # ops:alice decides the page, so she sees the run from then on, as a plain user too.
    decided = env.signoff("approve", ticket, "--no-resume", "--as", "ops:alice")
    assert decided.code == 0, decided.err
    alice = ("--as", "ops:alice", "--no-operator")
    shown = env.signoff("runs", "show", run, *alice)
    assert shown.code == 0, shown.err
    assert "status     queued" in shown.out
    before = _recorded(env, run)

    for action in ("pause", "cancel", "resume"):
        refused = env.signoff(action, run, *alice)
        assert refused.code == 7, (action, refused.out, refused.err)
        assert refused.error_line() == (
            f"signoff: not allowed: only an operator or the requester (U1) may {action} run "
            f"{run}; ops:alice is neither (nothing was changed)"
        )
        assert refused.out == ""
    assert _recorded(env, run) == before
    assert [r["status"] for r in env.runs()] == ["queued"]

    # The requester controls their own run without operator authority.
    requester = ("--as", "U1", "--no-operator")
    paused = env.signoff("pause", run, *requester)
    assert paused.code == 0, paused.err
    assert "is paused" in paused.out
    resumed = env.signoff("resume", run, *requester)
    assert resumed.code == 0, resumed.err
    assert f"run {run} is done" in resumed.out
