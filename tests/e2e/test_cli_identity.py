"""The command line treats linked ids as one person, as the API does: someone acting
``--as`` their console id (``oidc:ana@corp``) sees, decides and controls what their
linked Slack id (``U1``, the requester) may, once the identities file links the two, and
nothing of it once the file no longer does (against a SQLite file, through `bot.cli.run`
and one real ``python -m bot`` process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_cli import REFUND
from tests.e2e.test_cli_strangers import InProcess

ANA = ("--as", "oidc:ana@corp", "--no-operator")


@pytest.fixture
def env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> InProcess:
    found = InProcess(tmp_path, monkeypatch, capsys)
    identities = tmp_path / "identities.toml"
    identities.write_text("", encoding="utf-8")
    monkeypatch.setenv("SIGNOFF_IDENTITIES_FILE", str(identities))
    found.vars["SIGNOFF_IDENTITIES_FILE"] = str(identities)
    return found


def _json(env: InProcess, *args: str) -> list[dict[str, object]]:
    done = env.signoff(*args, "--json", *ANA)
    assert done.code == 0, done.err
    listed: list[dict[str, object]] = json.loads(done.out)
    return listed


def test_a_person_acts_under_their_linked_id(env: InProcess, tmp_path: Path) -> None:
    started = env.start(REFUND, ("granted", "refunds", "Order A1001 was charged twice"))
    run, ticket = started["refund"]["run"], started["refund"]["tickets"][0]
    other = started["granted"]["tickets"][0]
    given = env.signoff(
        "approve", other, "--grant", "run", "--no-resume", "--as", "U1", "--no-operator"
    )
    assert given.code == 0, given.err

    # Not linked yet: U1's runs, tickets and grants are nobody else's.
    for args in (("runs", "list"), ("tickets",), ("grants", "list")):
        assert _json(env, *args) == [], args
    assert env.signoff("runs", "show", run, *ANA).code == 4

    (tmp_path / "identities.toml").write_text('"oidc:ana@corp" = ["U1"]\n', encoding="utf-8")
    assert {r["run_id"] for r in _json(env, "runs", "list")} == {
        run,
        started["granted"]["run"],
    }
    assert [t["ticket_id"] for t in _json(env, "tickets")] == [ticket]
    assert [g["granted_by"] for g in _json(env, "grants", "list")] == ["U1"]
    shown = env.signoff("runs", "show", run, *ANA)
    assert shown.code == 0, shown.err
    assert env.process("runs", "show", run, *ANA) == shown

    # Controls and decides the run their Slack id started.
    paused = env.signoff("pause", run, *ANA)
    assert paused.code == 0 and "is paused" in paused.out, paused.err
    resumed = env.signoff("resume", run, *ANA)
    assert resumed.code == 0, resumed.err
    approved = env.signoff("approve", ticket, "--no-resume", *ANA)
    assert approved.code == 0, approved.err
    assert env.tickets() == []

    # The file no longer links them: Ana sees only the run she decided in herself, and
    # may no longer control it.
    (tmp_path / "identities.toml").write_text("", encoding="utf-8")
    assert [r["run_id"] for r in _json(env, "runs", "list")] == [run]
    assert _json(env, "grants", "list") == []
    refused = env.signoff("cancel", run, *ANA)
    assert refused.code == 7, refused.err
    assert "only an operator or the requester (U1)" in refused.error_line()
