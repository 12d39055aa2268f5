"""``signoff policy test`` on a database with recorded calls: what a new policy would
change, with counts, and its exit code."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bot.cli._main import run
from runtime import (
    Agent,
    ModelRequest,
    RunStatus,
    Runtime,
    ScriptedModel,
    final_reply,
    tool_call_reply,
)
from runtime.store.sql import SQLStore

CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("slack", "deploy", {"service": "api", "env": "staging"}),
    ("slack", "deploy", {"service": "api", "env": "prod"}),
    ("slack", "drop_db", {"name": "billing"}),
    ("console", "deploy", {"service": "web", "env": "staging"}),
]

NEW_POLICY = """\
@reason("nobody drops a database")
forbid(principal, action, resource == Tool::"drop_db");

@ask("") @approvers("group:sre") @reason("production deploys need an SRE")
permit(principal, action, resource == Tool::"deploy") when { context.args.env == "prod" };

permit(principal, action, resource) when { context.source == "slack" };
"""


def model() -> ScriptedModel:
    def reply(request: ModelRequest) -> dict[str, Any]:
        start = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
        if any(m.get("role") == "tool" for m in request.messages[start:]):
            return final_reply("done")
        tool, args = json.loads(str(request.messages[start]["content"]))
        return tool_call_reply((tool, args))

    return ScriptedModel(reply)


async def record_calls(db: Path) -> None:
    """Every call of `CALLS` in its own run of ``ops``, whose rules allow them all."""
    agent = Agent("ops", "Operate.", model(), version="1")

    @agent.tool(permission="allow")
    async def deploy(service: str, env: str) -> str:
        return "ok"

    @agent.tool(permission="allow")
    async def drop_db(name: str) -> str:
        return "ok"

    other = Agent("other", "Other.", model())

    @other.tool(permission="allow")
    async def drop_db_too(name: str) -> str:
        return "ok"

    store = SQLStore.sqlite(db)
    await store.migrate()
    runtime = Runtime(store, [agent, other])
    try:
        for source, tool, args in CALLS:
            done = await runtime.start(
                "ops", json.dumps([tool, args]), requester="U1", origin={"platform": source}
            )
            assert done.status is RunStatus.DONE
        await runtime.start("other", json.dumps(["drop_db_too", {"name": "x"}]), requester="U2")
    finally:
        await runtime.aclose()
        await store.close()


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    for name in ("SIGNOFF_APP", "SIGNOFF_AGENTS", "SIGNOFF_CONFIG", "SIGNOFF_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    db = tmp_path / "recorded.db"
    asyncio.run(record_calls(db))
    return f"sqlite+aiosqlite:///{db}"


def test_it_prints_what_a_new_policy_would_change_with_counts(
    recorded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "new.cedar"
    policy.write_text(NEW_POLICY, encoding="utf-8")
    args = ["policy", "test", "--policy", str(policy), "--engine", "cedar"]

    code = run([*args, "--agent", "ops", "--database-url", recorded])

    out = capsys.readouterr().out
    assert code == 0, out
    assert "4 calls replayed through new" in out
    assert "1 unchanged, 3 changed (allowed -> asked: 2, allowed -> denied: 1)" in out
    assert "production deploys need an SRE" in out
    assert "nobody drops a database" in out

    code = run([*args, "--agent", "ops", "--database-url", recorded, "--fail-on-change"])
    assert code == 1
    capsys.readouterr()

    code = run([*args, "--database-url", recorded, "--json", "--limit", "2"])
    captured = capsys.readouterr()
    assert code == 0
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert len(lines) == 2
    # Newest runs first: the other agent's call, then the console deploy.
    assert [(r["agent"], r["tool"], r["was"], r["now"]) for r in lines] == [
        ("other", "drop_db_too", "allow", "ask"),
        ("ops", "deploy", "allow", "ask"),
    ]
    assert lines[1]["policy"]["id"] == "new"
    assert "2 calls replayed" in captured.err


def test_a_policy_that_changes_nothing_exits_0_even_with_fail_on_change(
    recorded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "open.rego"
    policy.write_text('package signoff\nimport rego.v1\ndefault decision := "allow"\n')
    code = run(
        [
            *("policy", "test", "--policy", str(policy), "--engine", "rego"),
            *("--fail-on-change", "--database-url", recorded),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "5 calls replayed through open" in out and "5 unchanged, 0 changed" in out


def test_a_policy_file_that_does_not_parse_is_refused(
    recorded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "bad.rego"
    policy.write_text("package signoff\ndecision := if {{\n")
    code = run(
        [
            *("policy", "test", "--policy", str(policy), "--engine", "rego"),
            *("--database-url", recorded),
        ]
    )
    err = capsys.readouterr().err
    assert code != 0
    assert "does not parse" in err
