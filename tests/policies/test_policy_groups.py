"""The groups a policy sees: those the edge verified of who started the run — a console
or API user's token or single sign-on groups, an external approval's sender's — recorded
on the run when it starts, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from adapters.policies import load_policy
from runtime import Actor, ApprovalRequest, ExternalAgent, Permission, RunStatus
from runtime.domain.external import authorising_tool
from tests.policies.test_policy_runs import Ops, RuntimeFactory, write

CEDAR = """\
permit(principal in Group::"sre", action == Action::"call", resource);
"""

REGO = """\
package signoff

import rego.v1

default decision := "ask"

decision := "allow" if "sre" in input.requester_groups
"""

SRE = Actor(id="U1", groups=frozenset({"sre", "ops"}), platform="api")
OPS = Actor(id="U1", groups=frozenset({"ops"}), platform="api")


@pytest.fixture(params=["cedar", "rego"])
def policy(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    engine = request.param
    path = write(tmp_path, f"groups.{engine}", CEDAR if engine == "cedar" else REGO)
    return load_policy(engine, path, policy_id="groups", version="1")


async def test_a_group_member_who_starts_a_run_is_seen_in_the_group(
    runtime_factory: RuntimeFactory, policy: Any
) -> None:
    ops = Ops(runtime_factory, policy, ("deploy", {"service": "api", "env": "staging"}))
    member = await ops.runtime.start(
        "ops", "do it", requester="U1", origin={"platform": "api"}, joining_as=SRE
    )
    assert member.status is RunStatus.DONE
    assert ops.ran == [("deploy", {"service": "api", "env": "staging"})]
    [proposed] = await ops.events(member.run_id, "tool_proposed")
    assert proposed["data"]["policy"]["answer"] == "allow"

    other = await ops.runtime.start(
        "ops", "do it", requester="U1", origin={"platform": "api"}, joining_as=OPS
    )
    assert other.status is RunStatus.AWAITING  # not in the group: the policy asks
    assert len(ops.ran) == 1


async def test_groups_are_the_starters_own_never_another_users(
    runtime_factory: RuntimeFactory, policy: Any
) -> None:
    ops = Ops(runtime_factory, policy, ("deploy", {"service": "api", "env": "staging"}))
    # An operator's console starting a run for someone else does not lend them its groups.
    for_someone = await ops.runtime.start(
        "ops", "do it", requester="U2", origin={"platform": "console"}, joining_as=SRE
    )
    assert for_someone.status is RunStatus.AWAITING
    assert ops.ran == []


async def test_an_external_approval_sees_its_senders_groups(
    runtime_factory: RuntimeFactory, policy: Any
) -> None:
    # The rule allows: what the policy answers decides (the stricter of the two wins).
    agent = ExternalAgent("coder", lambda name: authorising_tool(name, Permission.ALLOW))
    agent.policy = policy  # as the agents file's ``policy = "<id>"`` sets it
    runtime = runtime_factory(agent)
    own = await runtime.request_approval(
        ApprovalRequest("coder", "Bash", {"command": "ls"}), actor=SRE
    )
    assert own.status == "allowed"
    theirs = await runtime.request_approval(
        ApprovalRequest("coder", "Bash", {"command": "ls"}, on_behalf_of="U7"), actor=SRE
    )
    assert theirs.status == "pending"  # asked for U7, whose groups nobody verified
