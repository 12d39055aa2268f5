"""Asking an agent's policy about one proposed call (`runtime.domain.policies`).

The policy runs with its own deadline; whatever goes wrong (an error, no answer in time,
an answer that is not one) becomes the policy's fail-closed outcome, logged here and
recorded by the caller as a ``policy_failed`` event.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runtime.domain.agent import Agent
from runtime.domain.external import ORIGIN_KEY
from runtime.domain.policies import (
    REQUESTER_GROUPS,
    Policy,
    PolicyCall,
    PolicyOutcome,
    combine,
    failed_closed,
)
from runtime.domain.tickets import ToolPermission
from runtime.domain.tools import Permission
from runtime.engine.journal import record
from runtime.store.base import Transaction
from runtime.store.records import RunRecord

log = logging.getLogger("signoff.policies")

_CHAT = frozenset({"slack", "discord", "console"})


def source_of(agent: str, origin: dict[str, Any]) -> str:
    """Where a run of `agent` came from, as a policy sees it (see `PolicyCall.source`);
    the MCP gateway's agents are named ``<agent>.mcp``."""
    if ORIGIN_KEY in origin:
        return "mcp" if agent.endswith(".mcp") else "external"
    if "hook" in origin:
        return "webhook"
    platform = origin.get("platform")
    return platform if isinstance(platform, str) and platform in _CHAT else "api"


def call_of(
    agent: Agent | tuple[str, str],
    run: RunRecord,
    tool: str,
    args: dict[str, Any],
    at: datetime,
) -> PolicyCall:
    """The `PolicyCall` of a call `run` of `agent` (or of ``(name, version)``) proposes."""
    name, version = (agent.name, agent.version) if isinstance(agent, Agent) else agent
    groups = run.origin.get(REQUESTER_GROUPS)
    return PolicyCall(
        requester=run.requester,
        requester_groups=tuple(sorted(str(g) for g in groups)) if isinstance(groups, list) else (),
        agent=name,
        agent_version=version,
        tool=tool,
        args=args,
        run_id=run.run_id,
        thread_id=run.thread_id,
        source=source_of(name, run.origin),
        at=at,
    )


async def consult(policy: Policy, call: PolicyCall) -> PolicyOutcome:
    """`policy`'s outcome for `call`; on any failure its fail-closed outcome."""
    try:
        answer = await asyncio.wait_for(policy.evaluate(call), timeout=policy.timeout)
    except TimeoutError:
        error = f"no answer within {policy.timeout:g} s"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    else:
        return PolicyOutcome(policy.id, policy.version, answer)
    log.error(
        "policy %s (version %s) failed for %s of run %s: %s",
        policy.id,
        policy.version,
        call.tool,
        call.run_id,
        error,
    )
    return failed_closed(policy, error)


@dataclass(frozen=True)
class Judged:
    """A proposed call's permission: its tool's rule and, under a policy, what it said.

    Attributes:
        ruled: The tool's own permission.
        permission: The permission the call gets (the stricter of the two).
        said: The agent's policy's outcome; None without a policy.
    """

    ruled: Permission
    permission: Permission
    said: PolicyOutcome | None = None

    @property
    def wants_person(self) -> bool:
        """Whether the policy asked, denied or failed: a person decides each such call,
        and no standing grant stands in."""
        return self.said is not None and self.said.answer.permission is not Permission.ALLOW

    def fields(self) -> dict[str, Any]:
        """What the ``tool_proposed`` event adds under a policy."""
        if self.said is None:
            return {}
        return {"ruled": self.ruled.value, "policy": self.said.details()}

    async def record_failure(
        self, tx: Transaction, run_id: str, at: datetime, call_id: str
    ) -> None:
        """Record the ``policy_failed`` event of a policy that failed for the call."""
        if self.said is not None and self.said.error is not None:
            await record(tx, run_id, at, "policy_failed", call_id=call_id, **self.said.details())

    def denial(self) -> tuple[str, str]:
        """What the model is told of a denied call, and the ``tool_denied`` reason."""
        if self.said is not None and self.said.answer.permission is Permission.DENY:
            return self.said.answer.reason or "this tool is not allowed", f"policy {self.said.id}"
        return "this tool is not allowed", "permission deny"

    def for_ticket(
        self, target: ToolPermission
    ) -> tuple[ToolPermission, tuple[str, ...] | None, timedelta | None]:
        """The ticket's target (naming the policy), approvers and deadline: the policy's
        own when it asked, else None (the tool's)."""
        if self.said is None:
            return target, None, None
        target = target.model_copy(update={"policy": self.said.details()})
        if not self.wants_person:
            return target, None, None
        return target, self.said.answer.approvers, self.said.answer.deadline


async def judge(
    policy: Policy | None,
    agent: Agent,
    run: RunRecord,
    tool: str,
    args: dict[str, Any],
    at: datetime,
    ruled: Permission,
) -> Judged:
    """The permission of a call `run` proposes whose tool's rule says `ruled`, under
    `policy` (the agent's, None for none or for a call that failed before it was asked)."""
    if policy is None:
        return Judged(ruled, ruled)
    said = await consult(policy, call_of(agent, run, tool, args, at))
    return Judged(ruled, combine(ruled, said.answer), said)
