"""An agent's Cedar or Rego policy, consulted for every call it proposes, on SQLite and
PostgreSQL: allow, ask with its approvers and deadline, deny with its reason, the stricter
of rule and policy, and a failing policy that fails closed and is recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.policies import load_policy
from runtime import (
    Actor,
    Agent,
    ManualClock,
    ModelRequest,
    Permission,
    RunStatus,
    Runtime,
    ScriptedModel,
    Unauthorized,
    final_reply,
    tool_call_reply,
)
from runtime.domain.policies import PolicyAnswer, PolicyCall

RuntimeFactory = Callable[..., Runtime]

CEDAR = """\
@reason("nobody drops a database")
forbid(principal, action, resource == Tool::"drop_db");

@ask("") @approvers("group:sre, U7") @deadline_seconds("900")
@reason("production deploys need an SRE")
permit(principal, action == Action::"call", resource == Tool::"deploy")
when { context.args.env == "prod" };

permit(principal, action == Action::"call", resource in Agent::"ops")
when { context.source == "slack" && !(context.args has env && context.args.env == "prod") };
"""

REGO = """\
package signoff

import rego.v1

default decision := "ask"

decision := {"decision": "deny", "reason": "nobody drops a database"} if input.tool == "drop_db"

decision := {
    "decision": "ask",
    "approvers": ["group:sre", "U7"],
    "deadline_seconds": 900,
    "reason": "production deploys need an SRE",
} if {
    input.tool == "deploy"
    input.args.env == "prod"
}

decision := "allow" if {
    input.source == "slack"
    input.tool != "drop_db"
    not input.args.env == "prod"
}
"""

SRE = Actor(id="U9", groups=frozenset({"sre"}), platform="slack")
REQUESTER = Actor(id="U1", platform="slack")
TOOL_APPROVER = Actor(id="U5", platform="slack")
STRANGER = Actor(id="U666", groups=frozenset({"ops"}), platform="slack")


def one_call(tool: str, args: dict[str, Any]) -> ScriptedModel:
    """Asks for one call, then reports what it got."""

    def reply(request: ModelRequest) -> dict[str, Any]:
        start = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
        tools = [str(m["content"]) for m in request.messages[start:] if m.get("role") == "tool"]
        if tools:
            return final_reply(" | ".join(tools))
        return tool_call_reply((tool, args))

    return ScriptedModel(reply)


class Ops:
    """An ``ops`` agent with a policy; `ran` records every call that really ran."""

    def __init__(
        self,
        runtime_factory: RuntimeFactory,
        policy: Any,
        call: tuple[str, dict[str, Any]],
        *,
        deploy_permission: str = "allow",
    ) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.agent = Agent(
            "ops", "Operate.", one_call(*call), approvers=["U5"], policy=policy, version="3"
        )

        @self.agent.tool(permission=deploy_permission)
        async def deploy(service: str, env: str) -> str:
            self.ran.append(("deploy", {"service": service, "env": env}))
            return f"deployed {service} to {env}"

        @self.agent.tool(permission="allow")
        async def drop_db(name: str) -> str:
            self.ran.append(("drop_db", {"name": name}))
            return f"dropped {name}"

        self.runtime = runtime_factory(self.agent)

    async def start(self, source: str = "slack") -> Any:
        return await self.runtime.start(
            "ops", "do it", requester="U1", origin={"platform": source, "channel": "C1"}
        )

    async def events(self, run_id: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in await self.runtime.events(run_id) if e["kind"] == kind]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(params=["cedar", "rego"])
def policy(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    engine = request.param
    path = write(tmp_path, f"guard.{engine}", CEDAR if engine == "cedar" else REGO)
    return load_policy(engine, path, policy_id="guard", version="2026-05")


async def test_a_call_the_policy_allows_runs_and_names_the_policy(
    runtime_factory: RuntimeFactory, policy: Any
) -> None:
    ops = Ops(runtime_factory, policy, ("deploy", {"service": "api", "env": "staging"}))
    done = await ops.start()
    assert done.status is RunStatus.DONE
    assert ops.ran == [("deploy", {"service": "api", "env": "staging"})]
    [proposed] = await ops.events(done.run_id, "tool_proposed")
    assert proposed["data"]["permission"] == "allow"
    assert proposed["data"]["ruled"] == "allow"
    assert proposed["data"]["policy"]["id"] == "guard"
    assert proposed["data"]["policy"]["version"] == "2026-05"
    assert proposed["data"]["policy"]["answer"] == "allow"


async def test_the_stricter_wins_an_ask_rule_still_asks_under_an_allowing_policy(
    runtime_factory: RuntimeFactory, policy: Any
) -> None:
    ops = Ops(
        runtime_factory,
        policy,
        ("deploy", {"service": "api", "env": "staging"}),
        deploy_permission="ask",
    )
    parked = await ops.start()
    assert parked.status is RunStatus.AWAITING and ops.ran == []
    [entry] = parked.pending
    # The policy did not ask: the tool's approvers decide.
    assert entry.ticket.approvers == ("U5",)
    stored = await ops.runtime.ticket(entry.ticket.ticket_id)
    assert stored.target.policy == {"id": "guard", "version": "2026-05", "answer": "allow"}


async def test_a_source_the_policy_does_not_permit_asks(
    runtime_factory: RuntimeFactory, policy: Any
) -> None:
    ops = Ops(runtime_factory, policy, ("deploy", {"service": "api", "env": "staging"}))
    parked = await ops.start(source="console")
    assert parked.status is RunStatus.AWAITING and ops.ran == []
    [proposed] = await ops.events(parked.run_id, "tool_proposed")
    assert proposed["data"]["ruled"] == "allow"
    assert proposed["data"]["permission"] == "ask"


async def test_a_call_the_policy_denies_never_runs_and_the_model_hears_why(
    runtime_factory: RuntimeFactory, policy: Any
) -> None:
    ops = Ops(runtime_factory, policy, ("drop_db", {"name": "billing"}))
    done = await ops.start()
    assert done.status is RunStatus.DONE
    assert ops.ran == []
    assert done.text == "Permission denied: nobody drops a database"
    [denied] = await ops.events(done.run_id, "tool_denied")
    assert denied["data"]["reason"] == "policy guard"
    [proposed] = await ops.events(done.run_id, "tool_proposed")
    assert proposed["data"]["policy"]["answer"] == "deny"
    assert proposed["data"]["policy"]["reason"] == "nobody drops a database"


async def test_the_approvers_the_policy_names_decide_and_nobody_else(
    runtime_factory: RuntimeFactory, policy: Any, clock: ManualClock
) -> None:
    ops = Ops(runtime_factory, policy, ("deploy", {"service": "api", "env": "prod"}))
    parked = await ops.start()
    assert parked.status is RunStatus.AWAITING and ops.ran == []
    [entry] = parked.pending
    ticket = await ops.runtime.ticket(entry.ticket.ticket_id)
    assert ticket.approvers == ("group:sre", "U7")
    assert ticket.deadline == clock.now() + timedelta(seconds=900)
    assert ticket.target.policy is not None
    assert ticket.target.policy["approvers"] == ["group:sre", "U7"]
    assert ticket.target.policy["reason"] == "production deploys need an SRE"
    # The policy asked: no standing grant is offered, none would stand in.
    assert entry.grants == ()
    # Neither the requester, nor the tool's own approver, nor a stranger may decide.
    for who in (REQUESTER, TOOL_APPROVER, STRANGER):
        with pytest.raises(Unauthorized):
            await ops.runtime.approve(entry, actor=who)
    assert ops.ran == []
    done = await ops.runtime.approve(entry, actor=SRE, resume=True)
    assert done.status is RunStatus.DONE
    assert ops.ran == [("deploy", {"service": "api", "env": "prod"})]
    [decided] = await ops.events(done.run_id, "ticket_decided")
    assert decided["actor"] == "U9"
    assert decided["data"]["policy"]["id"] == "guard"
    assert decided["data"]["policy"]["version"] == "2026-05"
    [opened] = await ops.events(done.run_id, "ticket_opened")
    assert opened["data"]["target"]["policy"]["answer"] == "ask"


@pytest.mark.parametrize(("on_error", "expected"), [("ask", "ask"), ("deny", "deny")])
async def test_a_policy_file_broken_at_runtime_fails_closed_and_is_recorded(
    runtime_factory: RuntimeFactory,
    tmp_path: Path,
    on_error: str,
    expected: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = write(tmp_path, "guard.cedar", CEDAR)
    policy = load_policy("cedar", path, policy_id="guard", on_error=Permission(on_error))
    path.write_text(CEDAR + "\npermit(principal, action, resource) when { ;\n", encoding="utf-8")
    ops = Ops(runtime_factory, policy, ("deploy", {"service": "api", "env": "staging"}))
    result = await ops.start()
    assert ops.ran == []
    [failed] = await ops.events(result.run_id, "policy_failed")
    assert failed["data"]["id"] == "guard" and failed["data"]["answer"] == expected
    assert "does not parse" in failed["data"]["error"]
    [proposed] = await ops.events(result.run_id, "tool_proposed")
    assert proposed["data"]["permission"] == expected
    assert any("policy guard" in r.getMessage() for r in caplog.records)
    if expected == "ask":
        assert result.status is RunStatus.AWAITING
        # A failed policy named no approvers: the tool's decide; no grant is offered.
        assert result.pending[0].ticket.approvers == ("U5",)
        assert result.pending[0].grants == ()
    else:
        assert result.status is RunStatus.DONE
        assert (await ops.events(result.run_id, "tool_denied"))[0]["data"]["reason"] == (
            "policy guard"
        )


async def test_a_rego_rule_left_undefined_fails_closed(
    runtime_factory: RuntimeFactory, tmp_path: Path
) -> None:
    path = write(tmp_path, "g.rego", 'package signoff\nimport rego.v1\nother := "allow"\n')
    policy = load_policy("rego", path, policy_id="g")
    ops = Ops(runtime_factory, policy, ("deploy", {"service": "api", "env": "staging"}))
    parked = await ops.start()
    assert parked.status is RunStatus.AWAITING and ops.ran == []
    [failed] = await ops.events(parked.run_id, "policy_failed")
    assert "undefined" in failed["data"]["error"]


class Hanging:
    """A policy that never answers."""

    id = "hang"
    version = "1"
    on_error = Permission.DENY
    timeout = 0.05

    def __init__(self) -> None:
        self.never = asyncio.Event()

    async def evaluate(self, call: PolicyCall) -> PolicyAnswer:
        await self.never.wait()
        raise AssertionError("unreachable")


async def test_a_policy_that_does_not_answer_in_time_fails_closed(
    runtime_factory: RuntimeFactory,
) -> None:
    ops = Ops(runtime_factory, Hanging(), ("deploy", {"service": "api", "env": "staging"}))
    done = await ops.start()
    assert done.status is RunStatus.DONE and ops.ran == []
    [failed] = await ops.events(done.run_id, "policy_failed")
    assert failed["data"]["error"] == "no answer within 0.05 s"
    assert failed["data"]["answer"] == "deny"
