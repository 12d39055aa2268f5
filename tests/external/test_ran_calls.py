"""An external approval whose call signoff itself ran (a gateway's tool) stays allowed
whatever became of the call: a tool that failed was still allowed, and so was one a
person allowed before it failed; only a call refused before it ran reads denied."""

from __future__ import annotations

from typing import Any

import pytest
from approvals_kit import RuntimeFactory

from runtime import (
    Actor,
    Allow,
    ApprovalRequest,
    ExternalAgent,
    InvalidApproval,
    Permission,
    Tool,
)

BOT = Actor(id="bot:ops")
BOB = Actor(id="bob")


def ops() -> ExternalAgent:
    async def explode(arguments: dict[str, Any]) -> str:
        raise RuntimeError(f"the server refused {arguments['name']}")

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    }

    def tools(name: str) -> Any:
        permission = Permission.ALLOW if name == "restart" else Permission.ASK
        return Tool.from_schema(name, "Fails.", schema, explode, permission=permission)

    return ExternalAgent("ops", tools, fingerprint="v1", approvers=("bob",))


def request(tool: str, **arguments: Any) -> ApprovalRequest:
    return ApprovalRequest("ops", tool, arguments, session_id="s-1")


async def test_a_call_a_rule_allowed_that_failed_reads_allowed(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = runtime_factory(ops())
    asked = await rt.request_approval(request("restart", name="web"), actor=BOT)
    assert (asked.status, asked.basis) == ("allowed", "rule")


async def test_a_call_a_person_allowed_that_failed_reads_allowed_by_them(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = runtime_factory(ops())
    asked = await rt.request_approval(request("drain", name="db"), actor=BOT)
    assert asked.status == "pending" and asked.ticket_id is not None
    await rt.decide(asked.ticket_id, Allow(), BOB, resume=True)
    read = await rt.approval(asked.approval_id, viewer=None)
    assert (read.status, read.basis, read.decided_by) == ("allowed", "decision", "bob")


async def test_arguments_that_do_not_fit_are_refused_before_anything_runs(
    runtime_factory: RuntimeFactory,
) -> None:
    rt = runtime_factory(ops())
    with pytest.raises(InvalidApproval):
        await rt.request_approval(request("restart", name=3), actor=BOT)
