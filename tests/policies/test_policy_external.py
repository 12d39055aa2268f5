"""A policy on an external agent (the approvals API, Claude Code's hooks, the MCP
gateway), on SQLite and PostgreSQL: the request's own approvers cannot widen who decides
beyond the policy's, a stranger decides nothing, the source is ``external``, and a grant
given under a policy names it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bot.agents_file import load_agents_file
from runtime import (
    Actor,
    ApprovalRequest,
    GrantRequest,
    RunStatus,
    Runtime,
    Unauthorized,
)

POLICY = """\
@reason("refunds over 1000 are never made here")
forbid(principal, action, resource == Tool::"refund") when { context.args.amount > 1000 };

@ask("") @approvers("group:finance") @reason("refunds over 100 need finance")
permit(principal, action, resource == Tool::"refund")
when { context.source == "external" && context.args.amount > 100 };

permit(principal, action, resource) when { context.source == "external" };
"""

AGENTS = """\
[policies.billing-guard]
engine = "cedar"
file = "billing.cedar"
version = "7"

[agents.billing]
external = true
policy = "billing-guard"
approvers = ["U-lead"]
overrides = ["approvers"]

[agents.billing.rules.refund]
permission = "allow"

[agents.billing.rules.lookup]
permission = "ask"
grants = ["run", "thread"]
"""

BOT = Actor(id="bot")
FINANCE = Actor(id="U42", groups=frozenset({"finance"}), platform="slack")
LEAD = Actor(id="U-lead", platform="slack")
WIDENED = Actor(id="U666", platform="slack")

RuntimeFactory = Callable[..., Runtime]


@pytest.fixture
def runtime(runtime_factory: RuntimeFactory, tmp_path: Path) -> Runtime:
    (tmp_path / "billing.cedar").write_text(POLICY, encoding="utf-8")
    (tmp_path / "agents.toml").write_text(AGENTS, encoding="utf-8")
    return runtime_factory(*load_agents_file(tmp_path / "agents.toml").agents)


async def test_a_request_cannot_widen_who_decides_beyond_the_policy(runtime: Runtime) -> None:
    rt = runtime
    asked = await rt.request_approval(
        ApprovalRequest("billing", "refund", {"amount": 250}, approvers=("U666",)),
        actor=BOT,
    )
    assert asked.status == "pending"
    ticket = await rt.ticket(asked.ticket_id)
    assert ticket.approvers == ("group:finance",)
    assert ticket.target.policy["id"] == "billing-guard"
    assert ticket.target.policy["version"] == "7"
    for stranger in (WIDENED, LEAD, BOT):
        with pytest.raises(Unauthorized):
            await rt.approve(asked.ticket_id, actor=stranger)
    await rt.approve(asked.ticket_id, actor=FINANCE, resume=True)
    decided = await rt.approval(asked.approval_id, viewer=None)
    assert decided.status == "allowed" and decided.decided_by == "U42"


async def test_the_policy_sees_an_external_source_and_allows_or_denies(runtime: Runtime) -> None:
    rt = runtime
    small = await rt.request_approval(
        ApprovalRequest("billing", "refund", {"amount": 20}), actor=BOT
    )
    assert small.status == "allowed"
    big = await rt.request_approval(
        ApprovalRequest("billing", "refund", {"amount": 5000}), actor=BOT
    )
    assert big.status == "denied"
    assert "refunds over 1000 are never made here" in (big.reason or "")
    events = await rt.events(big.approval_id)
    [proposed] = [e for e in events if e["kind"] == "tool_proposed"]
    assert proposed["data"]["policy"] == {
        "id": "billing-guard",
        "version": "7",
        "answer": "deny",
        "reason": "refunds over 1000 are never made here",
    }


async def test_a_grant_given_under_a_policy_names_it(runtime: Runtime) -> None:
    rt = runtime
    asked = await rt.request_approval(
        ApprovalRequest("billing", "lookup", {"id": "I-1"}, session_id="s1"), actor=BOT
    )
    assert asked.status == "pending"
    # The rule asks, the policy allows: the tool's approvers decide, and may give a grant.
    done = await rt.approve(
        asked.ticket_id, actor=LEAD, grant=GrantRequest(scope="run"), resume=True
    )
    assert done.status is RunStatus.DONE
    events = await rt.events(asked.approval_id)
    [created] = [e for e in events if e["kind"] == "grant_created"]
    assert created["data"]["policy"]["id"] == "billing-guard"
    assert created["data"]["policy"]["answer"] == "allow"
    [decided] = [e for e in events if e["kind"] == "ticket_decided"]
    assert decided["data"]["policy"]["version"] == "7"


def test_naming_a_policy_leaves_open_tickets_valid(tmp_path: Path) -> None:
    (tmp_path / "billing.cedar").write_text(POLICY, encoding="utf-8")
    with_policy = tmp_path / "with.toml"
    with_policy.write_text(AGENTS, encoding="utf-8")
    without = tmp_path / "without.toml"
    without.write_text(AGENTS.replace('policy = "billing-guard"\n', ""), encoding="utf-8")
    [guarded] = load_agents_file(with_policy).agents
    [plain] = load_agents_file(without).agents
    assert guarded.policy is not None and plain.policy is None
    # A ticket pins the catalog it was opened under; the policy is recorded on it instead.
    assert guarded.catalog_fingerprint == plain.catalog_fingerprint
