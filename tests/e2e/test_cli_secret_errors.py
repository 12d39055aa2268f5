"""``signoff runs show`` and ``runs list --json`` (real subprocesses over a SQLite file)
never print a secret argument that failed its schema."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.secret_errors_app import SECRET_VALUE
from tests.e2e.test_cli import START_RUNS, Env


def test_the_cli_never_prints_a_secret_that_failed_its_schema(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.vars["SIGNOFF_APP"] = "tests.e2e.secret_errors_app:agents"
    started = env.python(START_RUNS, json.dumps([("login", "vault", "log in")]))
    assert started.code == 0, started.err
    run = json.loads(started.out)["login"]["run"]

    shown = env.signoff("runs", "show", run, "--events")
    exported = env.signoff("runs", "show", run, "--jsonl")
    listed = env.signoff("runs", "list", "--json")
    for done in (shown, exported, listed):
        assert done.code == 0, done.err
        assert SECRET_VALUE not in done.out + done.err
    assert "token: the secret value does not match '^tok_'" in exported.out
