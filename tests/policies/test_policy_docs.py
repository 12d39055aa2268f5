"""The Cedar policy, the Rego policy and the agents-file keys of docs/policies.md, exactly
as the page shows them, loaded the way ``signoff serve`` loads them and asked about calls
on the real engines."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.agents_file import load_agents_file
from runtime import ConfigurationError, Permission
from runtime.domain.policies import PolicyAnswer, PolicyCall

PAGE = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
BLOCK = re.compile(
    r"<!-- run: tests/policies/test_policy_docs.py -->\n```(\w+)\n(.*?)^```$", re.S | re.M
)

MONDAY_NOON = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
SUNDAY_NOON = datetime(2026, 5, 3, 12, 0, tzinfo=UTC)


def page_blocks() -> dict[str, str]:
    found = {lang: code for lang, code in BLOCK.findall(PAGE.read_text(encoding="utf-8"))}
    assert set(found) == {"toml", "cedar", "rego"}
    return found


@pytest.fixture
def agents_file(tmp_path: Path) -> Path:
    blocks = page_blocks()
    (tmp_path / "prod-guard.cedar").write_text(blocks["cedar"], encoding="utf-8")
    (tmp_path / "deploy-window.rego").write_text(blocks["rego"], encoding="utf-8")
    path = tmp_path / "agents.toml"
    path.write_text(blocks["toml"], encoding="utf-8")
    return path


def call(tool: str, args: dict[str, Any], **fields: Any) -> PolicyCall:
    values: dict[str, Any] = {
        "requester": "U1",
        "requester_groups": (),
        "agent": "deployer",
        "agent_version": "1",
        "tool": tool,
        "args": args,
        "run_id": "run_1",
        "thread_id": "th_1",
        "source": "slack",
        "at": MONDAY_NOON,
    }
    values.update(fields)
    return PolicyCall(**values)


def ask(policy: Any, c: PolicyCall) -> PolicyAnswer:
    answer: PolicyAnswer = policy.evaluate_now(c)
    return answer


def test_the_agents_file_keys_give_the_agent_its_policy(agents_file: Path) -> None:
    loaded = load_agents_file(agents_file)
    [agent] = loaded.agents
    assert agent.name == "deployer"
    assert agent.policy is not None
    assert (agent.policy.id, agent.policy.version) == ("prod-guard", "2026-05-01")
    assert agent.policy.on_error is Permission.ASK and agent.policy.timeout == 2.0


def test_the_cedar_policy_answers_as_the_page_says(agents_file: Path) -> None:
    policy = load_agents_file(agents_file).agents[0].policy
    developer = {"requester_groups": ("developers",)}
    assert ask(policy, call("deploy", {"env": "staging"}, **developer)).permission is (
        Permission.ALLOW
    )
    # Not a developer: nothing permits it, a person decides.
    assert ask(policy, call("deploy", {"env": "staging"})).permission is Permission.ASK
    prod = ask(policy, call("deploy", {"env": "prod"}, **developer))
    assert prod == PolicyAnswer(
        Permission.ASK,
        approvers=("group:sre", "U024BE7LH"),
        deadline=timedelta(seconds=900),
        reason="production deploys need an SRE",
    )
    dropped = ask(policy, call("drop_database", {"env": "prod"}, **developer))
    assert dropped.permission is Permission.DENY
    assert dropped.reason == "nobody drops a production database"


def test_the_rego_policy_answers_as_the_page_says(agents_file: Path, tmp_path: Path) -> None:
    text = agents_file.read_text(encoding="utf-8").replace(
        'policy = "prod-guard"', 'policy = "deploy-window"'
    )
    agents_file.write_text(text, encoding="utf-8")
    policy = load_agents_file(agents_file).agents[0].policy
    assert policy is not None and policy.on_error is Permission.DENY
    assert ask(policy, call("deploy", {})).permission is Permission.ALLOW
    assert ask(policy, call("deploy", {}, at=SUNDAY_NOON)).permission is Permission.ASK
    assert ask(policy, call("deploy", {}, source="console")).permission is Permission.ASK
    evening = MONDAY_NOON.replace(hour=19)
    assert ask(policy, call("deploy", {}, at=evening)).permission is Permission.ASK
    rollback = ask(policy, call("rollback", {}))
    assert rollback == PolicyAnswer(
        Permission.ASK,
        approvers=("group:sre",),
        deadline=timedelta(seconds=600),
        reason="a rollback outside the window needs an SRE",
    )
    webhook = ask(policy, call("deploy", {}, source="webhook"))
    assert webhook.permission is Permission.DENY
    assert webhook.reason == "deploys go through Slack or the console"


def test_an_agent_naming_an_undefined_policy_or_a_bad_file_stops_start_up(
    agents_file: Path,
) -> None:
    text = agents_file.read_text(encoding="utf-8")
    agents_file.write_text(text.replace('policy = "prod-guard"', 'policy = "nope"'))
    with pytest.raises(
        ConfigurationError, match=r"agents\.deployer\.policy.*no policy named 'nope'"
    ):
        load_agents_file(agents_file)
    agents_file.write_text(text)
    (agents_file.parent / "deploy-window.rego").write_text("package signoff\ndecision := if {{\n")
    with pytest.raises(ConfigurationError, match=r"policies\.deploy-window.*does not parse"):
        load_agents_file(agents_file)
